"""A config.json that leaves keys out means what it means to transformers (issue 19 item 8).

Found by a differential run: without ``rms_norm_eps`` kvlab used its tiny model's 1e-5 where
transformers' LlamaConfig uses 1e-6 (logits 1.7e-2 apart). Now every missing key takes
transformers' default, checked here against ``transformers.LlamaConfig`` for any subset of keys
left out; and a config without ``tie_word_embeddings`` whose checkpoint has no ``lm_head.weight``
is an error naming that key.
"""
from __future__ import annotations

import budget
import json
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lazy_import import lazy_transformers

from kvlab.compute.config import HF_LLAMA_DEFAULTS, CheckpointError, LlamaConfig
from kvlab.compute.loader import load_pretrained

from test_model import HF_CONFIG, random_hf_tensors, write_checkpoint

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = lazy_transformers()  # imported by the first test that uses it (fast collection)

OPTIONAL = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings"]
COMPARED = OPTIONAL[:-2] + ["head_dim", "tie_word_embeddings"]


def test_defaults_are_transformers_own():
    hf = transformers.LlamaConfig()
    for key, value in HF_LLAMA_DEFAULTS.items():
        theirs = hf.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(hf, key)
        assert value == theirs, key


@settings(max_examples=budget.examples(60), deadline=None)
@given(left_out=st.sets(st.sampled_from(OPTIONAL)))
def test_any_keys_left_out_read_as_transformers_reads_them(left_out):
    d = {k: v for k, v in HF_CONFIG.items() if k not in left_out}
    ours = LlamaConfig.from_dict(d)
    theirs = transformers.LlamaConfig(**{k: v for k, v in d.items() if k not in ("architectures", "model_type")})
    for key in COMPARED:
        assert getattr(ours, key) == getattr(theirs, key), (key, sorted(left_out))
    assert ours.rope_theta == theirs.rope_parameters["rope_theta"]


def test_missing_rms_norm_eps_gives_transformers_logits(tmp_path):
    cfg = {k: v for k, v in HF_CONFIG.items() if k != "rms_norm_eps"}
    write_checkpoint(tmp_path / "ckpt", cfg=cfg)
    model, _ = load_pretrained(tmp_path / "ckpt")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"), dtype=torch.float32).eval()
    assert model.config.rms_norm_eps == hf.config.rms_norm_eps == 1e-6
    ids = torch.tensor([[3, 141, 59, 26, 5, 35, 8, 97]])                # (1, T)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, rtol=0, atol=1e-5)


def test_no_tie_key_and_no_head_names_the_key(tmp_path):
    cfg = {k: v for k, v in HF_CONFIG.items() if k != "tie_word_embeddings"}
    tensors = {k: v for k, v in random_hf_tensors(cfg).items() if k != "lm_head.weight"}
    write_checkpoint(tmp_path / "ckpt", cfg=cfg, tensors=tensors)
    with pytest.raises(CheckpointError) as e:
        load_pretrained(tmp_path / "ckpt")
    assert e.value.field == "tie_word_embeddings" and e.value.file.endswith("config.json")
    assert '"tie_word_embeddings": true' in str(e.value) and "lm_head.weight" in str(e.value)
    cfg["tie_word_embeddings"] = True                                  # saying it loads
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg))
    assert load_pretrained(tmp_path / "ckpt")[0].config.tie_word_embeddings


def test_no_tie_key_with_a_head_loads_untied(tmp_path):
    cfg = {k: v for k, v in HF_CONFIG.items() if k != "tie_word_embeddings"}
    tensors = random_hf_tensors(cfg)
    write_checkpoint(tmp_path / "ckpt", cfg=cfg, tensors=tensors)
    model, _ = load_pretrained(tmp_path / "ckpt")
    assert not model.config.tie_word_embeddings
    torch.testing.assert_close(model.lm_head.weight.detach(), tensors["lm_head.weight"])


def test_the_dataclass_keeps_the_tiny_models_defaults():
    """Built directly (the lessons, the tests), LlamaConfig() is still the tiny model's shape."""
    c = LlamaConfig()
    assert (c.hidden_size, c.num_hidden_layers, c.rms_norm_eps, c.tie_word_embeddings) == (128, 4, 1e-5, True)
