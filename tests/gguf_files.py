"""Tiny GGUF files for tests, written with the gguf package's own writer (as llama.cpp's converter).

``write_gguf(path, tensors, qtype=...)`` takes Hugging Face-named fp32 tensors (from
``test_model.random_hf_tensors``), applies llama.cpp's Q/K row permutation, quantizes the 2-D
weights to ``qtype`` and writes the ``llama.*`` metadata of ``HF_CONFIG`` plus a small byte-level
BPE tokenizer with ChatML special tokens and a chat template.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kvlab.compute.gguf import permute_qk
from kvlab.compute.tokenizer import bytes_to_unicode

from test_model import HF_CONFIG

GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "e r", "Ġthe r"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_alphabet() -> list[str]:
    """GPT-2's 256 printable stand-ins for bytes, in byte order."""
    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def vocabulary() -> tuple[list[str], list[int]]:
    """(tokens, token types): 3 control tokens, 256 bytes, the merged tokens; padded to HF_CONFIG's vocab."""
    tokens = SPECIALS + byte_alphabet() + ["".join(m.split(" ")) for m in MERGES]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    pad = HF_CONFIG["vocab_size"] - len(tokens)
    assert pad >= 0, "HF_CONFIG's vocabulary is too small for the test tokenizer"
    tokens += [f"<unused{i}>" for i in range(pad)]
    return tokens, types + [5] * pad


def gguf_name(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, i, rest = hf.split(".", 3)
    return f"blk.{i}.{GGUF_NAMES[rest]}"


def to_gguf_tensor(hf: str, w: torch.Tensor, cfg: dict) -> np.ndarray:
    """An HF tensor as llama.cpp's converter stores it: Q and K rows permuted for its RoPE layout."""
    if hf.endswith("q_proj.weight"):
        w = permute_qk(w, cfg["num_attention_heads"])
    elif hf.endswith("k_proj.weight"):
        w = permute_qk(w, cfg["num_key_value_heads"])
    return w.float().numpy()


def write_gguf(path: Path, tensors: dict[str, torch.Tensor], qtype: str = "F32", cfg: dict | None = None,
               meta: dict | None = None, drop: tuple[str, ...] = (), arch: str = "llama",
               extra_tensors: dict[str, tuple[np.ndarray, str]] | None = None) -> Path:
    """Write a GGUF file; 2-D weights in ``qtype`` (a GGMLQuantizationType name), norms in F32.

    meta: extra/overriding metadata {key: value} (value None: the key is left out); drop: metadata
    keys to leave out; extra_tensors: {gguf name: (array, type name)} written as given (raw bytes for
    quantized types).
    """
    import gguf
    from gguf.quants import quantize

    cfg = dict(HF_CONFIG, **(cfg or {}))
    w = gguf.GGUFWriter(str(path), arch)
    a = arch + "."
    tokens, types = vocabulary()
    values = {
        a + "block_count": ("uint32", cfg["num_hidden_layers"]), a + "context_length": ("uint32", cfg["max_position_embeddings"]),
        a + "embedding_length": ("uint32", cfg["hidden_size"]), a + "feed_forward_length": ("uint32", cfg["intermediate_size"]),
        a + "attention.head_count": ("uint32", cfg["num_attention_heads"]),
        a + "attention.head_count_kv": ("uint32", cfg["num_key_value_heads"]),
        a + "attention.layer_norm_rms_epsilon": ("float32", cfg["rms_norm_eps"]),
        a + "rope.freq_base": ("float32", cfg["rope_theta"]),
        a + "rope.dimension_count": ("uint32", cfg["hidden_size"] // cfg["num_attention_heads"]),
        a + "vocab_size": ("uint32", cfg["vocab_size"]),
        "tokenizer.ggml.model": ("string", "gpt2"), "tokenizer.ggml.pre": ("string", "smollm"),
        "tokenizer.ggml.tokens": ("array", tokens), "tokenizer.ggml.token_type": ("array", types),
        "tokenizer.ggml.merges": ("array", MERGES),
        "tokenizer.ggml.bos_token_id": ("uint32", 1), "tokenizer.ggml.eos_token_id": ("uint32", 2),
        "tokenizer.chat_template": ("string", CHAT_TEMPLATE),
    }
    for key, value in (meta or {}).items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value if isinstance(value, tuple) else (
                "string" if isinstance(value, str) else "float32" if isinstance(value, float) else "uint32", value)
    for key in drop:
        values.pop(key, None)
    for key, (kind, value) in values.items():
        getattr(w, f"add_{kind}")(key, value)
    q = gguf.GGMLQuantizationType[qtype]
    for hf, t in tensors.items():
        arr = to_gguf_tensor(hf, t, cfg)
        if arr.ndim == 1 or q == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gguf_name(hf), np.ascontiguousarray(arr, dtype=np.float32))
        elif q == gguf.GGMLQuantizationType.F16:
            w.add_tensor(gguf_name(hf), arr.astype(np.float16))
        else:
            w.add_tensor(gguf_name(hf), quantize(arr, q), raw_dtype=q)   # byte-shaped (rows, bytes)
    for name, (arr, kind) in (extra_tensors or {}).items():
        kq = gguf.GGMLQuantizationType[kind]
        w.add_tensor(name, arr, raw_dtype=kq if arr.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def plain_view_reader(path, *args, reader=None, **kwargs):
    """gguf's own ``GGUFReader`` (or ``reader``, a class like it), its code unchanged, over a plain
    ndarray view of the ``np.memmap`` it maps the file with: the same bytes, no copy. numpy runs a
    memmap's ``__getitem__`` and ``__array_finalize__`` in Python for every slice, and the reader
    (and transformers after it) take ~1.1M slices of SmolLM2's file: that was most of their time.

    >>> plain_view_reader(smollm2_path()).fields["general.architecture"].contents()   # doctest: +SKIP
    'llama'
    """
    import gguf
    import numpy as np

    memmap = np.memmap
    np.memmap = lambda *a, **k: memmap(*a, **k).view(np.ndarray)
    try:
        return (reader or gguf.GGUFReader)(path, *args, **kwargs)
    finally:
        np.memmap = memmap


def first_layers_copy(src: Path, dst: Path, layers: int) -> Path:
    """A copy of the GGUF file ``src`` with only its first ``layers`` transformer blocks: every
    metadata key as it is (tokenizer, chat template, rope, norms) but ``<arch>.block_count``, the
    embedding, the final norm and blocks ``0..layers-1`` byte for byte (same quantization types),
    the other blocks left out. The differential tests read the real SmolLM2 file's weights and
    tokenizer this way at a fraction of transformers' load time (its GGUF reader dequantizes every
    tensor in numpy).

    >>> first_layers_copy(smollm2_path(), tmp / "smollm2-2.gguf", 2)   # doctest: +SKIP
    """
    import gguf

    reader = plain_view_reader(str(src))
    arch = reader.fields["general.architecture"].contents()
    count = f"{arch}.block_count"
    have = int(reader.fields[count].contents())
    if not 1 <= layers <= have:
        raise ValueError(f"layers must be in 1..{have} (the file has {have} blocks), got {layers}")
    writer = gguf.GGUFWriter(str(dst), arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = layers if field.name == count else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    keep = [t for t in reader.tensors
            if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < layers]
    for t in keep:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in keep:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst
