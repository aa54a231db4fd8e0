"""Helpers for the kernel tests: random paged caches with shuffled blocks, guards, tolerances.

A paged cache made here has every slot that no sequence uses filled with a loud value
(``POISON``), so a kernel that reads through a wrong block table entry, or past a context
length, returns visibly wrong numbers instead of plausible ones.
"""

from __future__ import annotations

import torch

from kvlab.kernels import DEVICE

POISON = 1000.0    # in unused cache slots: reading one ruins the softmax
SENTINEL = -7.0    # around output buffers: must survive a launch untouched


def tolerance(dtype: torch.dtype) -> dict:
    """atol/rtol for comparing a kernel with its fp32 reference. fp16 is loose on purpose."""
    return {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=3e-3, rtol=3e-3)}[dtype]


def make_paged_cache(seq_lens, block_size, num_kv_heads, head_dim, dtype, seed=0, spare_blocks=3, pad_blocks=1,
                     poison=POISON):
    """K/V caches and block tables for sequences of the given lengths, blocks shuffled.

    Returns (k_cache, v_cache, block_tables) with
    k_cache, v_cache (num_blocks, block_size, num_kv_heads, head_dim) and block_tables
    (num_seqs, max_blocks + pad_blocks) int32. Physical blocks are a random permutation, with
    ``spare_blocks`` never used; table entries past a sequence's blocks are -1; every unused
    slot holds ``poison`` (POISON, or NaN: then even a load weighted by zero shows).

    Example: seq_lens [5], block_size 4 -> 2 blocks used, e.g. table [[6, 1, -1]].
    """
    g = torch.Generator().manual_seed(seed)
    used = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(used) + spare_blocks
    perm = torch.randperm(num_blocks, generator=g).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, poison, dtype=dtype)
    v_cache = torch.full(shape, poison, dtype=dtype)
    max_blocks = max(used, default=0) + pad_blocks
    block_tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    next_free = 0
    for s, n in enumerate(seq_lens):
        for j in range(used[s]):
            b = perm[next_free]
            next_free += 1
            block_tables[s, j] = b
            tokens = min(block_size, n - j * block_size)
            k_cache[b, :tokens] = torch.randn((tokens, num_kv_heads, head_dim), generator=g).to(dtype)
            v_cache[b, :tokens] = torch.randn((tokens, num_kv_heads, head_dim), generator=g).to(dtype)
    return k_cache.to(DEVICE), v_cache.to(DEVICE), block_tables.to(DEVICE)


def as_f64(*tensors):
    """CPU float64 copies: the references then compute in float64 (a reference for the fp32 reference)."""
    return [t.detach().cpu().double() if t.is_floating_point() else t.cpu() for t in tensors]


def randn(*shape, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(DEVICE)


def guarded_empty(shape, dtype, pad=2, dims=None):
    """A view of `shape` inside a bigger SENTINEL-filled buffer: returns (buffer, view).

    Each dimension in `dims` (default: all) gets `pad` extra entries on both sides, so a stray
    write off that edge lands in the buffer, where assert_guard_intact finds it. Pad only
    dimension 0 for a cache that must stay contiguous inside a block.
    """
    dims = range(len(shape)) if dims is None else dims
    pads = [pad if d in dims else 0 for d in range(len(shape))]
    big = torch.full([n + 2 * p for n, p in zip(shape, pads)], SENTINEL, dtype=dtype, device=DEVICE)
    view = big[tuple(slice(p, p + n) for n, p in zip(shape, pads))]
    return big, view


def guarded_copy(t, pad=2, dims=None):
    """Like guarded_empty, with the view holding a copy of t."""
    big, view = guarded_empty(tuple(t.shape), t.dtype, pad, dims)
    view.copy_(t)
    return big, view


def assert_guard_intact(big, view):
    """Every buffer element outside `view` still holds SENTINEL."""
    inside = torch.zeros(big.shape, dtype=torch.bool, device=big.device)
    offset = view.storage_offset()
    index = offset + sum((torch.arange(n, device=big.device) * st).reshape([-1 if i == d else 1 for i in range(view.dim())])
                         for d, (n, st) in enumerate(zip(view.shape, view.stride())))
    inside.view(-1)[index.reshape(-1)] = True
    outside = big[~inside]
    assert bool((outside == SENTINEL).all()), f"{int((outside != SENTINEL).sum())} guard values were overwritten"


def tensor(data, **kwargs):
    """torch.tensor on the kernels' device (so the tests also run unchanged on a GPU)."""
    kwargs.setdefault("device", DEVICE)
    return torch.tensor(data, **kwargs)


def zeros(*shape, **kwargs):
    kwargs.setdefault("device", DEVICE)
    return torch.zeros(*shape, **kwargs)


def full(shape, value, **kwargs):
    kwargs.setdefault("device", DEVICE)
    return torch.full(shape, value, **kwargs)
