"""Checkers for lesson 05 (the paged attention kernel).

    paged_gather_kernel   a Triton kernel: the paged kernel's block loop (gather K rows)
    paged_decode_torch    decode attention for one sequence through its block table (plain torch)

Both need torch (and the first Triton): they import them inside the function, so
``import kvlab.check`` stays light. The expected outputs are the kernels' torch references
(:mod:`kvlab.kernels.reference`). Mirrors no vLLM or SGLang file (exercises); the kernel it
grades is a piece of vLLM's ``paged_attention`` / ``kvlab.kernels.paged_decode``.
"""
from __future__ import annotations

from typing import Callable

from ..memory.block_table import blocks_needed
from .harness import Checker, CheckResult, Raised, call_in_place

__all__ = ["paged_gather_kernel", "paged_decode_torch"]


def _gather_cases() -> list[tuple[int, int, int, int, int]]:
    """(block_size, context_len, TILE_N, head_dim, seed): partial blocks, a tile of several blocks..."""
    return [(4, 5, 4, 8, 0), (4, 8, 4, 8, 1), (4, 1, 4, 8, 2), (4, 19, 16, 8, 3),
            (8, 13, 8, 16, 4), (2, 9, 8, 4, 5), (16, 3, 16, 8, 6), (4, 30, 8, 8, 7)]


def paged_gather_kernel(kernel: Callable, verbose: bool = True) -> CheckResult:
    """Grade a Triton kernel that copies one sequence's K rows out of the paged cache.

    Launched as ``kernel[(1,)](cache, block_table, out, context_len, HEAD_DIM=..,
    BLOCK_SIZE=.., TILE_N=..)`` with ``cache`` (num_blocks, BLOCK_SIZE, HEAD_DIM) fp32,
    ``block_table`` (num_logical_blocks,) int32 and ``out`` (context_len + guard, HEAD_DIM)
    fp32 pre-filled with the canary -7. Expected: ``out[:context_len]`` equals
    ``kvlab.kernels.reference.gather_kv`` of the cache, and the guard rows keep the canary
    (the interpreter does not catch out-of-bounds stores; the canary does).
    """
    import torch

    import kvlab.kernels  # noqa: F401  -- sets the kernel mode before any launch
    from kvlab.kernels import DEVICE
    from kvlab.kernels.reference import gather_kv

    c = Checker("paged_gather_kernel", kernel, verbose=verbose)
    for bs, n, tile, d, seed in _gather_cases():
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)          # shuffled physical blocks
        cache = torch.randn((num_blocks, bs, d), generator=g)                          # (num_blocks, bs, head_dim)
        guard = bs + tile
        out = torch.full((n + guard, d), -7.0)                                          # (n + guard, head_dim)
        want = gather_kv(cache[:, :, None, :], table, n)[:, 0, :]                     # (n, head_dim)
        label = f"block_size {bs}, context_len {n}, TILE_N {tile}, table {table.tolist()}"
        expected = f"rows 0..{n - 1} = K through the table; {guard} guard rows untouched"
        cache_d, table_d, out_d = cache.to(DEVICE), table.to(DEVICE), out.to(DEVICE)
        if c.unusable(label, expected):
            continue
        err = call_in_place(lambda: kernel[(1,)](cache_d, table_d, out_d, n, HEAD_DIM=d, BLOCK_SIZE=bs, TILE_N=tile))
        if isinstance(err, Raised):
            c.record(label, expected, err, passed=False)
            continue
        got = out_d.cpu()
        bad_rows = [i for i in range(n) if not torch.allclose(got[i], want[i])]
        guard_hit = [n + i for i in range(guard) if not torch.all(got[n + i] == -7.0)]
        if not bad_rows and not guard_hit:
            actual = expected
        else:
            parts = []
            if bad_rows:
                parts.append(f"wrong rows {bad_rows[:6]}{'...' if len(bad_rows) > 6 else ''}")
            if guard_hit:
                parts.append(f"wrote past context_len into rows {guard_hit[:4]}")
            actual = "; ".join(parts)
        c.record(label, expected, actual, passed=not bad_rows and not guard_hit)
    return c.done()


def paged_decode_torch(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(q, k_cache, v_cache, block_table, context_len, scale) -> out`` (plain torch).

    q (num_heads, head_dim); k_cache, v_cache (num_blocks, block_size, num_kv_heads, head_dim);
    block_table a list of ints; out (num_heads, head_dim). Query head h uses KV head
    ``h // (num_heads // num_kv_heads)``. Expected: ``kvlab.kernels.paged_decode_attention_ref``.
    """
    import torch

    from kvlab.kernels.reference import paged_decode_attention_ref

    c = Checker("paged_decode_torch", fn, verbose=verbose)
    configs = [  # (num_heads, num_kv_heads, head_dim, block_size, context_len, seed)
        (1, 1, 8, 4, 5, 0), (2, 2, 8, 4, 8, 1), (4, 2, 8, 4, 11, 2), (4, 1, 16, 8, 3, 3),
        (8, 2, 16, 4, 1, 4), (2, 1, 4, 2, 9, 5),
    ]
    for h, kvh, d, bs, n, seed in configs:
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)
        q = torch.randn((h, d), generator=g)                                            # (num_heads, head_dim)
        k_cache = torch.randn((num_blocks, bs, kvh, d), generator=g) * 2               # (num_blocks, bs, kv_heads, head_dim)
        v_cache = torch.randn((num_blocks, bs, kvh, d), generator=g)
        scale = 1.0 / d**0.5
        want = paged_decode_attention_ref(q[None], k_cache, v_cache, table[None], torch.tensor([n]), scale=scale)[0]
        label = f"{h} heads / {kvh} KV heads, head_dim {d}, block_size {bs}, context_len {n}, table {table.tolist()}"
        exp_s = f"out[0,:3] = {[round(x, 4) for x in want[0, :3].tolist()]}"
        if c.unusable(label, exp_s):
            continue
        got = call_in_place(fn, q.clone(), k_cache.clone(), v_cache.clone(), table.tolist(), n, scale)
        if isinstance(got, Raised):
            c.record(label, exp_s, got, passed=False)
            continue
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            c.record(label, exp_s, f"shape {shape}, expected {tuple(want.shape)}", passed=False)
            continue
        ok = torch.allclose(got.float(), want, atol=1e-4, rtol=1e-4)
        act_s = f"out[0,:3] = {[round(x, 4) for x in got[0, :3].float().tolist()]}"
        if not ok:
            act_s += f" (max |diff| {float((got.float() - want).abs().max()):.3g})"
        c.record(label, exp_s, act_s, passed=bool(ok))
    return c.done()
