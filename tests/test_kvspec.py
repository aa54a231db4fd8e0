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


def test_gpu_presets_hold_what_nvidia_smi_reports():
    """Issue 21 [7]: the H100 80GB preset was 81,920 MiB (80 GiB); nvidia-smi shows 81,559 MiB on an
    H100 80GB HBM3. The A100s really are 40 and 80 GiB; the H200's "141GB" is 143,771 MiB."""
    mib = {name: gpu.memory_bytes / 2**20 for name, gpu in GPUS.items()}
    assert mib == {"a100-40gb": 40_960, "a100-80gb": 81_920, "h100-80gb": 81_559, "h200": 143_771}

# ---------------------------------------------------------------- MLA, MQA and quantized KV (lesson 11)

def test_mla_bytes_per_token_is_latent_plus_rope_once_per_layer():
    v3, v2 = get_model("deepseek-v3"), get_model("deepseek-v2")
    assert (v3.kind, v3.kv_factor, v3.head_dim) == ("mla", 1, 576)
    assert v3.bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert v2.bytes_per_token == 60 * 576 * 2
    assert v3.per_token_formula() == "61 x (512 + 64) x 2 = 70,272"
    assert "70,272 bytes per token (61 x (512 + 64) x 2) x tokens 4096" in v3.formula(4096)
    # the same model with per-head MHA caches (128 heads, K 192 + V 128 wide) would need ~57x more
    mha = 61 * 128 * (192 + 128) * 2
    assert mha / v3.bytes_per_token > 50


def test_kinds_of_the_presets():
    kinds = {n: MODELS[n].kind for n in ("llama-2-7b", "llama-3-8b", "falcon-7b", "deepseek-v3", "smollm2-135m")}
    assert kinds == {"llama-2-7b": "mha", "llama-3-8b": "gqa", "falcon-7b": "mqa", "deepseek-v3": "mla",
                     "smollm2-135m": "gqa"}
    assert MODELS["falcon-7b"].bytes_per_token == 2 * 32 * 1 * 64 * 2
    assert MODELS["smollm2-135m"].bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23_040


def test_int8_counts_its_per_token_per_head_scales():
    s = get_model("llama-3-8b")
    q = s.with_dtype("int8")
    assert q.scale_bytes == 4 and q.dtype_bytes == 1
    assert q.bytes_per_token == 2 * 32 * 8 * (128 + 4) == 67_584
    assert q.per_token_formula() == "2 x 32 x 8 x (128 x 1 + 4) = 67,584"
    assert s.bytes_per_token / q.bytes_per_token == pytest.approx(2 * 128 / 132)
    assert s.with_dtype("fp8").bytes_per_token == s.bytes_per_token // 2       # vLLM's per-tensor scale
    assert s.with_dtype(1, scale_bytes=2).bytes_per_token == 2 * 32 * 8 * 130
    mla8 = get_model("deepseek-v3").with_dtype("int8")
    assert mla8.kind == "mla" and mla8.bytes_per_token == 61 * (576 + 4)


def test_mla_and_dtype_errors_name_the_value():
    with pytest.raises(ValueError, match="kv_heads must be 1 and head_dim 576"):
        KVSpec(61, 2, 576, kv_lora_rank=512, rope_dim=64)
    with pytest.raises(ValueError, match="kv_lora_rank must be a positive int"):
        KVSpec(61, 1, 64, kv_lora_rank=0, rope_dim=64)
    with pytest.raises(ValueError, match="scale_bytes must be >= 0, got -1"):
        KVSpec(2, 2, 8, scale_bytes=-1)
    with pytest.raises(ValueError, match="unknown KV dtype 'int4'"):
        get_model("llama-3-8b").with_dtype("int4")
