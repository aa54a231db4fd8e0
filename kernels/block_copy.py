"""Copy whole cache blocks (copy-on-write): for each (src, dst) pair, block dst := block src.

Used when a shared block (ref count > 1, e.g. after fork for parallel sampling) is about to
be written: the writer gets a private copy first. One program copies one pair, K and V, in
chunks of ``CHUNK`` elements; a block is one contiguous run of
``block_size * num_kv_heads * head_dim`` elements.

What this module does not handle: overlapping pairs. A block may not be the destination
twice, nor both a source and a destination in one call (the result would depend on the
order programs run in); the wrapper refuses such mappings.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import INDEX_DTYPES, check_kv_cache, is_int, next_power_of_two
from .plan import upload_ints


@triton.jit
def copy_blocks_kernel(
    k_cache_ptr, v_cache_ptr, block_mapping_ptr,
    stride_cache_block,
    BLOCK_NUMEL: tl.constexpr,  # elements in one block: block_size * num_kv_heads * head_dim
    CHUNK: tl.constexpr,        # elements copied per loop iteration (a power of two)
):
    pair = tl.program_id(0)
    src = tl.load(block_mapping_ptr + 2 * pair).to(tl.int64)
    dst = tl.load(block_mapping_ptr + 2 * pair + 1).to(tl.int64)
    for start in range(0, BLOCK_NUMEL, CHUNK):
        offs = start + tl.arange(0, CHUNK)                                 # (CHUNK,)
        inside = offs < BLOCK_NUMEL
        k = tl.load(k_cache_ptr + src * stride_cache_block + offs, mask=inside)
        v = tl.load(v_cache_ptr + src * stride_cache_block + offs, mask=inside)
        tl.store(k_cache_ptr + dst * stride_cache_block + offs, k, mask=inside)
        tl.store(v_cache_ptr + dst * stride_cache_block + offs, v, mask=inside)


def copy_meta(block_size: int, num_kv_heads: int, head_dim: int) -> dict:
    """Constexprs of copy_blocks_kernel. Example: 16 x 8 x 128 -> BLOCK_NUMEL 16384, CHUNK 4096."""
    numel = block_size * num_kv_heads * head_dim
    return dict(BLOCK_NUMEL=numel, CHUNK=min(4096, next_power_of_two(numel)))


def copy_blocks(k_cache, v_cache, block_mapping, *, check=True):
    """Copy blocks in place: block_mapping is a list of (src, dst) pairs or an int tensor (n, 2).

    Example: copy_blocks(k_cache, v_cache, [(3, 7)]) makes block 7 of both caches a copy of
    block 3 (the copy-on-write step before a forked sequence writes into its last block).
    Pairs given as host ints are always checked (ids in range, ints only: no floats or bools,
    no overlaps); a tensor mapping is read on the host for those checks only with ``check``
    (``check=False`` trusts it and copies nothing to the host). Returns None.
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.stride(1) != num_kv_heads * head_dim:
            raise ValueError(f"{name} blocks must be contiguous (strides {c.stride()})")
    if isinstance(block_mapping, torch.Tensor):
        if block_mapping.dim() != 2 or (block_mapping.numel() and block_mapping.shape[1] != 2):
            raise ValueError(f"block_mapping must have shape (n, 2), got {tuple(block_mapping.shape)}")
        if block_mapping.dtype not in INDEX_DTYPES:
            raise ValueError(f"block_mapping has dtype {block_mapping.dtype}; expected int32 or int64")
        if not check:
            return launch_copy_blocks(k_cache, v_cache, block_mapping.to(device=k_cache.device, dtype=torch.int64))
        pairs = [tuple(p) for p in block_mapping.tolist()]
    else:
        pairs = []
        for i, pair in enumerate(block_mapping):
            if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
                raise ValueError(f"block_mapping must be (src, dst) pairs, got {block_mapping!r}")
            for what, b in zip(("src", "dst"), pair):
                if not is_int(b):
                    raise ValueError(f"block_mapping[{i}] {what} = {b!r} is not an int ({type(b).__name__})")
            pairs.append((int(pair[0]), int(pair[1])))
    for i, (src, dst) in enumerate(pairs):
        for what, b in (("src", src), ("dst", dst)):
            if not 0 <= b < num_blocks:
                raise ValueError(f"block_mapping[{i}] {what} = {b} is not a block id in [0, {num_blocks})")
    dsts = [d for _, d in pairs]
    if len(set(dsts)) != len(dsts):
        raise ValueError(f"block_mapping has a destination block twice: {sorted(d for d in set(dsts) if dsts.count(d) > 1)}")
    both = set(dsts) & {s for s, _ in pairs}
    if both:
        raise ValueError(f"block_mapping uses block(s) {sorted(both)} as both source and destination")
    return launch_copy_blocks(k_cache, v_cache, upload_ints(pairs, k_cache.device, torch.int64) if pairs else None)


def launch_copy_blocks(k_cache, v_cache, mapping) -> None:
    """Launch without checks: mapping (n, 2) int64 on the caches' device, or None for no pairs."""
    if mapping is None or mapping.shape[0] == 0:
        return None
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    copy_blocks_kernel[(mapping.shape[0],)](
        k_cache, v_cache, mapping.contiguous(), k_cache.stride(0),
        **copy_meta(block_size, num_kv_heads, head_dim), num_warps=4,
    )
    return None
