"""No host sync on the hot path: with host-side lengths and ``check=False`` a decode step
(store the new K/V, then attend) and an extend step copy nothing from the device to the host.

In the interpreter every tensor is on the CPU, so "a copy" is counted as a call, made from
kvlab.kernels' own code, of a method that moves a value to the host on a GPU (``tolist``,
``item``, ``bool(t)``, ``int(t)``, ``.cpu()``, ``nonzero``...). On a GPU the same steps run under
``torch.cuda.set_sync_debug_mode("error")``, which raises at any synchronizing call.
"""

import contextlib
import sys
from pathlib import Path

import pytest
import torch

import kvlab.kernels as K
from kernel_utils import make_paged_cache, randn, tensor

KERNELS = Path(K.__file__).resolve().parent
TO_HOST = ("tolist", "item", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy", "nonzero")


@contextlib.contextmanager
def host_copies():
    """Record every TO_HOST call whose caller is a file of kvlab.kernels, as 'method at function:line'."""
    calls, saved = [], {name: getattr(torch.Tensor, name) for name in TO_HOST}

    def counting(name, method):
        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if Path(caller.co_filename).resolve().parent == KERNELS:
                calls.append(f"{name} at {caller.co_name}:{sys._getframe(1).f_lineno}")
            return method(self, *args, **kwargs)
        return wrapper

    for name, method in saved.items():
        setattr(torch.Tensor, name, counting(name, method))
    try:
        yield calls
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def step_inputs(lens=(5, 30, 9), kv_heads=2, heads=4, head_dim=16, block_size=4):
    """One decode step's tensors: the cache, tables, lengths (device and host), new K/V and slots."""
    k_cache, v_cache, tables = make_paged_cache([n + 1 for n in lens], block_size, kv_heads, head_dim, torch.float32)
    new_lens = [n + 1 for n in lens]
    slots = [int(tables[s, n // block_size]) * block_size + n % block_size for s, n in enumerate(lens)]
    return dict(k_cache=k_cache, v_cache=v_cache, tables=tables, lens_cpu=new_lens,
                lens=tensor(new_lens, dtype=torch.int32), slots=tensor(slots),
                q=randn(len(lens), heads, head_dim, seed=3), k=randn(len(lens), kv_heads, head_dim, seed=4),
                v=randn(len(lens), kv_heads, head_dim, seed=5))


def decode_step(x, layers=2, **kwargs):
    """What the engine does per layer in a decode step: store, then attend."""
    outs = []
    for _ in range(layers):
        K.store_kvcache(x["k"], x["v"], x["k_cache"], x["v_cache"], x["slots"], check=kwargs.get("check", True))
        outs.append(K.paged_decode_attention(x["q"], x["k_cache"], x["v_cache"], x["tables"], x["lens"], **kwargs))
    return outs


def extend_step(x, **kwargs):
    pre, ext = [n - 1 for n in x["lens_cpu"]], [1] * len(x["lens_cpu"])
    return K.extend_attention(x["q"], x["k_cache"], x["v_cache"], x["tables"], tensor(pre, dtype=torch.int32),
                              tensor(ext, dtype=torch.int32), **kwargs)


def test_hot_path_copies_nothing_to_the_host():
    x = step_inputs()
    want = decode_step(x)[0]                                                 # checked: warm-up and the answer
    with host_copies() as calls:
        got = decode_step(x, context_lens_cpu=x["lens_cpu"], check=False)
        got_auto = decode_step(x, check=False)                              # no host lengths: bounded by the table
        pre, ext = [n - 1 for n in x["lens_cpu"]], [1] * len(x["lens_cpu"])
        extend_out = extend_step(x, prefix_lens_cpu=pre, extend_lens_cpu=ext, check=False)
        K.extend_attention(x["q"], x["k_cache"], x["v_cache"], x["tables"], pre, ext, check=False)  # host lists
        K.copy_blocks(x["k_cache"], x["v_cache"], [(0, x["k_cache"].shape[0] - 1)], check=False)
    assert calls == []
    for out in got + got_auto + [extend_out]:
        torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-6)


def test_the_counter_sees_the_checked_path():
    """Control: full checks read lengths, slots and block ids on the host."""
    x = step_inputs()
    with host_copies() as calls:
        decode_step(x, layers=1)
    assert any(c.startswith("tolist at paged_decode_attention") for c in calls), calls
    assert any(c.startswith("__bool__ at store_kvcache") for c in calls), calls
    with host_copies() as calls:
        extend_step(x)
    assert any(c.startswith("tolist at host_lengths") for c in calls), calls


@pytest.mark.skipif(K.KERNEL_MODE != "native", reason="needs a GPU: torch.cuda.set_sync_debug_mode")
def test_hot_path_has_no_cuda_sync():
    x = step_inputs(lens=(100, 3000, 17), kv_heads=8, heads=32, head_dim=128, block_size=16)
    pre, ext = [n - 1 for n in x["lens_cpu"]], [1] * len(x["lens_cpu"])
    for kwargs in (dict(), dict(num_splits=4)):                              # warm-up: compile outside the check
        decode_step(x, context_lens_cpu=x["lens_cpu"], check=False, **kwargs)
    extend_step(x, prefix_lens_cpu=pre, extend_lens_cpu=ext, check=False)
    K.extend_attention(x["q"], x["k_cache"], x["v_cache"], x["tables"], pre, ext, check=False)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for kwargs in (dict(), dict(num_splits=4)):
            decode_step(x, context_lens_cpu=x["lens_cpu"], check=False, **kwargs)
        extend_step(x, prefix_lens_cpu=pre, extend_lens_cpu=ext, check=False)
        K.extend_attention(x["q"], x["k_cache"], x["v_cache"], x["tables"], pre, ext, check=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
