"""Solutions to lesson 05 (the paged attention kernel): same names as the stubs."""
import math

import kvlab.kernels  # noqa: F401  -- first: decides the kernel mode before Triton is imported (its own
import torch          # @triton.jit helpers, tl.cdiv..., are built in that mode at import)
import triton
import triton.language as tl


@triton.jit
def paged_gather_kernel(cache_ptr, block_table_ptr, out_ptr, context_len,
                        HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    offs_t = tl.arange(0, TILE_N)
    offs_d = tl.arange(0, HEAD_DIM)
    num_tiles = (context_len + TILE_N - 1) // TILE_N                        # ceil(context_len / TILE_N)
    for tile in range(0, num_tiles):
        pos = tile * TILE_N + offs_t                                        # (TILE_N,)
        valid = pos < context_len
        physical = tl.load(block_table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)
        row = physical * BLOCK_SIZE + pos % BLOCK_SIZE                      # (TILE_N,) slot
        k = tl.load(cache_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=valid[:, None], other=0.0)
        tl.store(out_ptr + pos[:, None] * HEAD_DIM + offs_d[None, :], k, mask=valid[:, None])


def paged_decode_torch(q, k_cache, v_cache, block_table, context_len, scale):
    num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    pos = torch.arange(context_len)
    slots_block = torch.tensor(block_table)[pos // block_size]              # (context_len,)
    k = k_cache[slots_block, pos % block_size]                              # (context_len, kv_heads, head_dim)
    v = v_cache[slots_block, pos % block_size]
    group = num_heads // num_kv_heads
    k = k.repeat_interleave(group, dim=1)                                   # (context_len, heads, head_dim)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,thd->ht", q, k) * scale                       # (heads, context_len)
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)     # (heads, head_dim)


def kernel_tiles(context_len, block_size, tile_tokens, num_splits):
    num_tiles = -(-context_len // tile_tokens)                              # ceil: the last tile may be partial
    per = -(-num_tiles // num_splits)                                       # tiles per program, a ceiling too
    out = []
    for split in range(num_splits):
        tiles = []
        for t in range(split * per, min((split + 1) * per, num_tiles)):    # a contiguous range of tiles
            start, end = t * tile_tokens, min((t + 1) * tile_tokens, context_len)
            tiles.append(list(range(start // block_size, (end - 1) // block_size + 1)))
        out.append(tiles)
    return out
