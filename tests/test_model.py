"""kvlab.compute (model, loader, tokenizer): HF-layout checkpoints (built here, nothing downloaded), bundled model, tokenizer."""
from __future__ import annotations

import json
import math

import pytest
import torch

from kvlab.compute import CheckpointError, Llama, LlamaConfig, load_bundled, load_pretrained
from kvlab.compute.model import rope_inv_freq
from kvlab.compute.tokenizer import load_bundled_tokenizer

HF_CONFIG = {  # the keys a real Llama config.json has, tiny sizes
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "rope_scaling": None,
    "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", "transformers_version": "4.45.0",
    "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True, "mlp_bias": False,
}


def random_hf_tensors(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """HF-named random weights, written out by hand (not from kvlab's own module names)."""
    g = torch.Generator().manual_seed(seed)
    C, I, nh, nkv = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, V = C // nh, cfg["vocab_size"]
    r = lambda *s: torch.randn(*s, generator=g) * 0.2  # noqa: E731
    t = {"model.embed_tokens.weight": torch.randn(V, C, generator=g), "model.norm.weight": 1 + r(C),
         "lm_head.weight": r(V, C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": 1 + r(C), p + "post_attention_layernorm.weight": 1 + r(C),
                  p + "self_attn.q_proj.weight": r(nh * hs, C), p + "self_attn.k_proj.weight": r(nkv * hs, C),
                  p + "self_attn.v_proj.weight": r(nkv * hs, C), p + "self_attn.o_proj.weight": r(C, nh * hs),
                  p + "mlp.gate_proj.weight": r(I, C), p + "mlp.up_proj.weight": r(I, C),
                  p + "mlp.down_proj.weight": r(C, I)})
    return t


def hf_reference_logits(t: dict, cfg: dict, ids: list[int]) -> torch.Tensor:
    """Transformers' LlamaForCausalLM forward, transcribed step by step (rotate_half RoPE,
    repeat_kv, fp32 RMSNorm), written independently of kvlab.compute.model. ids -> (T, V)."""
    C, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, T, eps = C // nh, len(ids), cfg["rms_norm_eps"]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot(x):
        return torch.cat((-x[..., hs // 2:], x[..., : hs // 2]), dim=-1)

    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2).float() / hs))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]                       # (1, T, hs)
    h = t["model.embed_tokens.weight"][ids]                            # (T, C)
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms(h, t[p + "input_layernorm.weight"])
        q = (x @ t[p + "self_attn.q_proj.weight"].T).view(T, nh, hs).transpose(0, 1)   # (nh, T, hs)
        k = (x @ t[p + "self_attn.k_proj.weight"].T).view(T, nkv, hs).transpose(0, 1)  # (nkv, T, hs)
        v = (x @ t[p + "self_attn.v_proj.weight"].T).view(T, nkv, hs).transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k = k[:, None].expand(nkv, nh // nkv, T, hs).reshape(nh, T, hs)   # repeat_kv
        v = v[:, None].expand(nkv, nh // nkv, T, hs).reshape(nh, T, hs)
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hs) + mask, dim=-1) @ v    # (nh, T, hs)
        h = h + a.transpose(0, 1).reshape(T, C) @ t[p + "self_attn.o_proj.weight"].T
        x = rms(h, t[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(x @ t[p + "mlp.gate_proj.weight"].T) * (x @ t[p + "mlp.up_proj.weight"].T)
        h = h + g @ t[p + "mlp.down_proj.weight"].T
    return rms(h, t["model.norm.weight"]) @ t["lm_head.weight"].T


def write_checkpoint(folder, cfg=HF_CONFIG, tensors=None, shards: int = 1, tokenizer: bool = True):
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = random_hf_tensors(cfg) if tensors is None else tensors
    (folder / "config.json").write_text(json.dumps(cfg))
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
    else:
        weight_map = {}
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: tensors[k].contiguous() for k in names[s::shards]}
            save_file(part, str(folder / fname))
            weight_map.update({k: fname for k in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if tokenizer:
        load_bundled_tokenizer().hf.save(str(folder / "tokenizer.json"))
    return tensors


@pytest.mark.parametrize("shards,dtype", [(1, torch.float32), (3, torch.bfloat16)])
def test_hf_checkpoint_matches_reference_forward(tmp_path, shards, dtype):
    tensors = {k: v.to(dtype) for k, v in random_hf_tensors(HF_CONFIG).items()}   # bf16, as most checkpoints ship
    write_checkpoint(tmp_path / "ckpt", tensors=tensors, shards=shards)
    tensors = {k: v.float() for k, v in tensors.items()}
    model, tok = load_pretrained(tmp_path / "ckpt")
    assert tok is not None and model.config.rope_theta == 50000.0 and model.config.head_dim == 16
    ids = [3, 141, 59, 26, 5, 35, 8, 97, 93, 238, 46]
    got = model(torch.tensor([ids]))[0]
    want = hf_reference_logits(tensors, HF_CONFIG, ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_rope_layout_is_rotate_half_not_interleaved(tmp_path):
    """Swapping to the interleaved (Meta original) pairing must change the answer: the test can fail."""
    tensors = write_checkpoint(tmp_path / "ckpt")
    model, _ = load_pretrained(tmp_path / "ckpt")
    ids = [7, 8, 9, 10, 11, 12]
    hs = HF_CONFIG["hidden_size"] // HF_CONFIG["num_attention_heads"]
    perm = torch.cat([torch.arange(0, hs, 2), torch.arange(1, hs, 2)])  # pair (2i, 2i+1) -> (i, i + hs/2)
    bad = dict(tensors)
    for i in range(HF_CONFIG["num_hidden_layers"]):
        for name, heads in (("q_proj", 4), ("k_proj", 2)):
            w = bad[f"model.layers.{i}.self_attn.{name}.weight"].view(heads, hs, -1)
            bad[f"model.layers.{i}.self_attn.{name}.weight"] = w[:, perm].reshape(heads * hs, -1)
    assert not torch.allclose(model(torch.tensor([ids]))[0], hf_reference_logits(bad, HF_CONFIG, ids), atol=1e-3)


def test_tied_embeddings_checkpoint_without_lm_head(tmp_path):
    cfg = dict(HF_CONFIG, tie_word_embeddings=True)
    tensors = random_hf_tensors(cfg)
    del tensors["lm_head.weight"]
    write_checkpoint(tmp_path / "c", cfg, tensors, tokenizer=False)
    model, tok = load_pretrained(tmp_path / "c")
    assert tok is None
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = [1, 2, 3, 4]
    torch.testing.assert_close(model(torch.tensor([ids]))[0],
                               hf_reference_logits(dict(tensors, **{"lm_head.weight": tensors["model.embed_tokens.weight"]}), cfg, ids),
                               atol=1e-4, rtol=1e-4)


def test_missing_unexpected_and_mismatched_tensors_are_named(tmp_path):
    t = random_hf_tensors(HF_CONFIG)
    del t["model.layers.1.mlp.up_proj.weight"]
    t["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)   # should be (32, 64)
    t["model.layers.9.extra.weight"] = torch.zeros(2)
    write_checkpoint(tmp_path / "bad", tensors=t)
    with pytest.raises(CheckpointError) as e:
        load_pretrained(tmp_path / "bad")
    msg = str(e.value)
    assert "model.layers.1.mlp.up_proj.weight" in msg and "missing" in msg
    assert "model.layers.0.self_attn.k_proj.weight" in msg and "(16, 64)" in msg
    assert "model.layers.9.extra.weight" in msg


def test_bad_folders_raise_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json"):
        load_pretrained(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps(HF_CONFIG))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_pretrained(tmp_path / "empty")
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps(dict(HF_CONFIG, model_type="gpt2")))
    with pytest.raises(CheckpointError, match="gpt2"):
        load_pretrained(tmp_path / "gpt")
    write_checkpoint(tmp_path / "shard", shards=2)
    (tmp_path / "shard" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002"):
        load_pretrained(tmp_path / "shard")


def test_llama3_rope_scaling_keeps_high_and_divides_low_frequencies():
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    plain = rope_inv_freq(LlamaConfig(hidden_size=512, num_attention_heads=4, rope_theta=500000.0))
    scaled = rope_inv_freq(LlamaConfig(hidden_size=512, num_attention_heads=4, rope_theta=500000.0, rope_scaling=rs))
    assert torch.equal(scaled[:4], plain[:4])                              # short wavelengths untouched
    torch.testing.assert_close(scaled[-4:], plain[-4:] / 8.0)              # long wavelengths / factor
    with pytest.raises(CheckpointError, match="yarn"):
        rope_inv_freq(LlamaConfig(rope_scaling={"rope_type": "yarn", "factor": 2.0}))


def test_config_round_trip_and_param_count():
    cfg = LlamaConfig.from_dict(HF_CONFIG)
    assert LlamaConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.num_params == sum(p.numel() for p in Llama(cfg).parameters())
    with pytest.raises(CheckpointError, match="num_key_value_heads=3"):
        LlamaConfig(num_attention_heads=4, num_key_value_heads=3)


def test_bundled_model_loads_and_writes_text():
    model, tok = load_bundled()
    c = model.config
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (4, 2, 32)
    assert c.num_key_value_heads < c.num_attention_heads                   # GQA
    ids = tok.encode("The function returns")
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    # trained: the next-token loss on ordinary English is far below uniform guessing (ln V ~ 8.3)
    text = tok.encode("Return a new list containing all items from the iterable in ascending order.")
    with torch.no_grad():
        lg = model(torch.tensor([text]))[0, :-1]
    loss = torch.nn.functional.cross_entropy(lg, torch.tensor(text[1:])).item()
    assert loss < 5.0, loss
    assert logits.shape == (len(ids), c.vocab_size)


def test_tokenizer_round_trip_and_display():
    tok = load_bundled_tokenizer()
    for text in ["Hello, world!\n\tdef f(x): return x", "怎么申请退款", "订单什么时候发货", "emoji 🙂 ok", ""]:
        assert tok.decode(tok.encode(text)) == text
    zh = tok.tokens_text(tok.encode("怎么申请退款"))
    assert zh == ["怎", "么", "申", "请", "退", "款"]                      # readable, one character each
    shown = tok.tokens_text(tok.encode("def hello():\n    return"))
    assert "".join(shown).replace("␣", " ").replace("↵", "\n") == "def hello():\n    return"
    assert any(s.startswith("␣") for s in shown)
    rare = tok.encode("龘")                                                # a rare character: raw UTF-8 bytes
    assert tok.decode(rare) == "龘"
    assert all(s.startswith("<") for s in tok.tokens_text(rare)) and len(rare) > 1
    assert b"".join(tok.token_bytes(i) for i in rare) == "龘".encode()
    with pytest.raises(ValueError, match="99999"):
        tok.token_text(99999)
