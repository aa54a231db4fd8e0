"""The engine's forward pass hands the kernels host-side lengths: with the Triton backend and
``check=False`` a decode step and a prefill step copy nothing from the device to the host (counted
as in tests/test_kernels_sync.py: calls, made from kvlab.kernels' code, of methods that would sync)."""
from __future__ import annotations

import pytest

from test_kernels_sync import host_copies


@pytest.mark.parametrize("check", [False, True])
def test_runner_passes_host_lengths_so_kernels_never_sync(bundled, check):
    from kvlab.compute.kv_tensors import PagedKVPool
    from kvlab.compute.model_runner import ModelRunner

    model, _tok = bundled
    pool = PagedKVPool.for_model(model, num_blocks=8, block_size=4)
    runner = ModelRunner(model, pool, "triton", kernel_checks=check)
    prefill = runner.prepare([5, 6, 7, 8, 9], block_tables=[[2, 5]], prefix_lens=[0], extend_lens=[5])
    decode = runner.prepare([10], block_tables=[[2, 5]], prefix_lens=[5], extend_lens=[1])
    assert decode.forward_mode == "decode" and decode.context_lens_cpu == (6,) and prefill.extend_lens_cpu == (5,)
    with host_copies() as calls:
        runner.run(prefill)
        runner.run(decode)
    if check:
        assert calls, "check=True validates the device tensors (it may copy)"
    else:
        assert calls == [], calls
