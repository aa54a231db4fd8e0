"""KV size arithmetic and presets."""
from __future__ import annotations

import pytest

from kvlab.memory.kvspec import GPUS, MODELS, KVSpec, format_bytes, get_gpu, get_model


def test_llama2_70b_gqa_vs_notes_formula():
    spec = get_model("llama-2-70b")
    assert spec.kv_bytes(4096) == 1_342_177_280  # 8 KV heads
    assert spec.hidden_formula_bytes(4096) == 10_737_418_240  # the notes' hidden-size formula
    assert spec.hidden_formula_bytes(4096) // spec.kv_bytes(4096) == spec.gqa_ratio == 8


@pytest.mark.parametrize(
    "name,bpt",
    [("llama-2-7b", 524_288), ("llama-2-13b", 819_200), ("llama-3-8b", 131_072), ("opt-13b", 819_200)],
)
def test_bytes_per_token(name, bpt):
    assert MODELS[name].bytes_per_token == bpt


def test_mha_models_agree_with_hidden_formula():
    for name in ("llama-2-7b", "llama-2-13b", "opt-13b"):
        s = MODELS[name]
        assert s.kv_bytes(1000) == s.hidden_formula_bytes(1000)


def test_dtype_and_formula_text():
    s = get_model("llama-3-8b").with_dtype("fp8")
    assert s.bytes_per_token == 65_536
    assert "= 268,435,456 bytes" in s.formula(4096)


def test_errors_name_the_value():
    with pytest.raises(ValueError, match="unknown model 'gpt-5'"):
        get_model("gpt-5")
    with pytest.raises(ValueError, match="unknown gpu 'tpu'"):
        get_gpu("tpu")
    with pytest.raises(ValueError, match="layers"):
        KVSpec(layers=0, kv_heads=1, head_dim=1)
    with pytest.raises(ValueError, match="tokens"):
        get_model("opt-13b").kv_bytes(-5)
    with pytest.raises(ValueError, match="num_heads 12"):
        KVSpec(layers=1, kv_heads=8, head_dim=4, num_heads=12)


def test_gpu_budget_opt13b_a100_40gb():
    """The vLLM paper: OPT-13B on an A100 40GB leaves about 12 GB for the KV cache."""
    budget = GPUS["a100-40gb"].kv_budget_bytes(MODELS["opt-13b"], utilization=0.9)
    assert 10e9 < budget < 14e9
    with pytest.raises(ValueError, match="do not leave room"):
        GPUS["a100-40gb"].kv_budget_bytes(MODELS["llama-2-70b"])


def test_format_bytes():
    assert format_bytes(1_342_177_280) == "1.34 GB"
    assert format_bytes(512) == "512 B"
