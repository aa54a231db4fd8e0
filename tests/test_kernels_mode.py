"""The mode switch: decided once, by KVLAB_KERNEL_MODE or torch.cuda.is_available(), reported,
and with no other torch.cuda call on the CPU path. Plus the lessons' self-test.

The subprocess tests start a fresh Python, because the mode is fixed at import.
"""

import os
import subprocess
import sys

import pytest

import kvlab.kernels as K

PROBE = r"""
import os, torch
calls = []
def is_available():
    calls.append(1)
    return False            # behave like a machine without a GPU, even on one
def forbidden(*args, **kwargs):
    raise AssertionError("torch.cuda called on the CPU path")
torch.cuda.is_available = is_available
for name in ("device_count", "current_device", "get_device_name", "get_device_properties", "set_device",
             "synchronize", "init", "mem_get_info", "Event", "Stream", "current_stream"):
    setattr(torch.cuda, name, forbidden)
import kvlab.kernels as K
K.self_test()
k, v = torch.zeros(3, 4, 1, 16), torch.zeros(3, 4, 1, 16)
K.store_kvcache(torch.ones(2, 1, 16), torch.ones(2, 1, 16), k, v, torch.tensor([5, -1]))
K.copy_blocks(k, v, [(1, 2)])
K.extend_attention(torch.ones(2, 2, 16), k, v, torch.tensor([[0, 1]], dtype=torch.int32), [3], [2])
print("RESULT", len(calls), K.KERNEL_MODE, K.DEVICE, os.environ["TRITON_INTERPRET"])
"""


def run_probe(**env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("KVLAB_KERNEL_MODE", "TRITON_INTERPRET")}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)


def result_line(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("RESULT")][0].split()[1:]


def _interpreter_problems() -> list[str]:
    from kvlab.kernels import known_problems

    return known_problems(mode="interpreter")


# The probes force the Triton interpreter in a subprocess; a known-bad version pair (triton 3.6 with
# numpy >= 2.4, the GPU machine's) fails there whatever this process's mode is.
needs_working_interpreter = pytest.mark.skipif(bool(_interpreter_problems()),
                                               reason="; ".join(_interpreter_problems()) or "interpreter works")


@needs_working_interpreter
def test_cpu_path_calls_is_available_once_and_nothing_else():
    assert result_line(run_probe()) == ["1", "interpreter", "cpu", "1"]


@needs_working_interpreter
def test_forced_interpreter_makes_no_cuda_call():
    assert result_line(run_probe(KVLAB_KERNEL_MODE="interpreter")) == ["0", "interpreter", "cpu", "1"]


def test_unknown_mode_is_refused():
    proc = run_probe(KVLAB_KERNEL_MODE="gpu-please")
    assert proc.returncode != 0 and "KVLAB_KERNEL_MODE='gpu-please' is not one of" in proc.stderr


def test_report_names_versions_mode_and_device():
    report = K.kernel_mode_report()
    for word in ("torch", "triton", "numpy", f"kernel mode: {K.KERNEL_MODE}", f"device: {K.DEVICE}"):
        assert word in report
    assert K.KERNEL_MODE in ("native", "interpreter") and K.DEVICE == {"native": "cuda", "interpreter": "cpu"}[K.KERNEL_MODE]


def test_self_test_passes():
    K.self_test()                                                           # warm up
    text = K.self_test()
    assert "self-test passed" in text and "2.6667" in text


def test_self_test_catches_a_wrong_kernel(monkeypatch):
    import kvlab.kernels as package

    monkeypatch.setattr(package, "paged_decode_attention", lambda q, *args, **kwargs: q * 0)
    with pytest.raises(RuntimeError, match="(?s)wrong answer.*Fix:"):
        package.self_test()


def test_public_api():
    assert set(K.__all__) == {
        "KERNEL_MODE", "DEVICE", "kernel_mode_report", "known_problems", "self_test", "paged_decode_attention", "store_kvcache",
        "extend_attention", "copy_blocks", "paged_decode_attention_ref", "store_kvcache_ref", "extend_attention_ref",
        "copy_blocks_ref", "naive_attention", "plan_decode", "plan_extend",
        # lesson 11: int8/fp8 KV and decode over Quest-selected blocks
        "store_kvcache_quant", "quantized_decode_attention", "selected_decode_attention", "store_kvcache_quant_ref",
        "quantize_kv_ref", "compressed_decode_attention_ref",
    }
    assert all(hasattr(K, name) for name in K.__all__)


@pytest.mark.skipif(K.KERNEL_MODE != "interpreter", reason="the warning concerns the interpreter")
def test_known_bad_versions_are_flagged(monkeypatch):
    import numpy
    import triton

    from kvlab.kernels import known_problems

    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    bad = known_problems(mode="interpreter")
    assert len(bad) == 1 and "numpy<2.4" in bad[0]
    assert known_problems(mode="native") == []                           # compiled kernels are fine
    monkeypatch.setattr(triton, "__version__", "3.7.1")
    assert known_problems(mode="interpreter") == []
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    assert known_problems(mode="interpreter") == []
