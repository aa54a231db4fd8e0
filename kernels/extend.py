"""Prefix (extend) attention: new tokens attend to a cached prefix and, causally, to each other.

This is what makes a radix-tree hit pay off (SGLang's ``extend`` step): a request whose first
``prefix_len`` tokens are already in the paged cache only computes attention for its
``extend_len`` new tokens. Before this kernel runs, the new tokens' K and V have been written
into the cache (``store_kvcache``) at positions ``prefix_len .. prefix_len + extend_len - 1``,
so every key, old or new, is read through the block table. New token i of request r sits at
position ``prefix_lens[r] + i`` and attends to positions ``[0, prefix_lens[r] + i]``.

Grid: (request, KV head, tile of BLOCK_M new tokens). A program's query rows are the
(new token, query head of the GQA group) pairs, so each K/V tile is read once per group.

What this module does not handle: sliding windows, custom (tree) masks for speculative
decoding, or K/V that are not yet in the cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import as_length_list, check_block_tables, check_kv_cache, check_same_device
from .paged_decode import attention_meta, check_query, load_kv_tile, online_softmax_step, resolve_scale


@triton.jit
def extend_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr,
    q_starts_ptr, prefix_lens_ptr, extend_lens_ptr, out_ptr,
    scale,
    stride_q_token, stride_q_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_table_req,
    stride_out_token, stride_out_head,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,   # new tokens per program
    TILE_N: tl.constexpr,    # keys per loop iteration
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program = one request x one KV head x BLOCK_M of the request's new tokens.

    The same loop as the decode kernel (keys read through the block table, online softmax),
    with more query rows and a causal mask: a new token at position p sees keys 0..p.
    """
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    m_block = tl.program_id(2)
    q_start = tl.load(q_starts_ptr + req)                                  # first row of this request in q
    prefix_len = tl.load(prefix_lens_ptr + req)
    extend_len = tl.load(extend_lens_ptr + req)

    # Query rows: (new token, query head in group) pairs, BLOCK_M * BLOCK_G of them.
    offs_r = tl.arange(0, BLOCK_M * BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, TILE_N)
    new_tok = m_block * BLOCK_M + offs_r // BLOCK_G                        # (ROWS,) index among the new tokens
    g = offs_r % BLOCK_G
    head = kv_head * QUERIES_PER_KV + g                                    # (ROWS,) query head
    row_ok = (new_tok < extend_len) & (g < QUERIES_PER_KV)
    q_offs = (q_start + new_tok)[:, None] * stride_q_token + head[:, None] * stride_q_head + offs_d[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_ok[:, None], other=0.0)           # (ROWS, HEAD_DIM)
    q_pos = prefix_len + new_tok                                           # (ROWS,) absolute positions

    # Keys this tile of queries can see: up to its last query (causal); none if it has no query.
    kv_end = tl.minimum(prefix_len + extend_len, prefix_len + (m_block + 1) * BLOCK_M)
    kv_end = tl.where(m_block * BLOCK_M < extend_len, kv_end, 0)

    m_i = tl.full([BLOCK_M * BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M * BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_M * BLOCK_G, HEAD_DIM], tl.float32)
    block_table_ptr = block_tables_ptr + req * stride_table_req
    for tile in range(0, tl.cdiv(kv_end, TILE_N)):
        pos = tile * TILE_N + offs_t                                       # (TILE_N,) key positions
        valid = pos < kv_end
        physical_block = tl.load(block_table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)  # (TILE_N,)
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, physical_block, pos % BLOCK_SIZE, valid, kv_head,
                            stride_cache_block, stride_cache_token, stride_cache_head, HEAD_DIM)  # (TILE_N, HEAD_DIM)
        causal = valid[None, :] & (pos[None, :] <= q_pos[:, None])         # (ROWS, TILE_N)
        m_i, l_i, acc = online_softmax_step(q, k, v, causal, m_i, l_i, acc, scale, USE_DOT, DOT_PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]                       # rows without keys are masked below
    o_offs = (q_start + new_tok)[:, None] * stride_out_token + head[:, None] * stride_out_head + offs_d[None, :]
    tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def extend_meta(num_heads, num_kv_heads, head_dim, block_size, dtype) -> dict:
    """All constexprs of extend_attention_kernel (used by the compile check too).

    A program holds BLOCK_M * BLOCK_G query rows against TILE_N keys: 64 x 64 for fp16/bf16
    with tl.dot (>= 16 each, as the GPU needs); 32 x 32 for fp32 or a small head_dim, whose
    tiles take more registers. Example: group 4, fp16 -> BLOCK_G 4, BLOCK_M 16, TILE_N 64.
    """
    meta = attention_meta(num_heads, num_kv_heads, head_dim, dtype)
    big = meta["USE_DOT"] and dtype != torch.float32
    rows, keys = (64, 64) if big else (32, 32)
    return dict(meta, BLOCK_SIZE=block_size, BLOCK_M=max(1, rows // meta["BLOCK_G"]), TILE_N=max(block_size, keys))


def launch_extend_attention(q, k_cache, v_cache, block_tables, q_starts, prefix_lens, extend_lens, max_extend, out, scale):
    """Launch without any checks (for benchmarks); prefer extend_attention."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    _, block_size, num_kv_heads, _ = k_cache.shape
    meta = extend_meta(num_heads, num_kv_heads, head_dim, block_size, q.dtype)
    grid = (prefix_lens.shape[0], num_kv_heads, triton.cdiv(max_extend, meta["BLOCK_M"]))
    extend_attention_kernel[grid](
        q, k_cache, v_cache, block_tables,
        q_starts, prefix_lens, extend_lens, out,
        scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        **meta, num_warps=4,
    )
    return out


def extend_attention(q, k_cache, v_cache, block_tables, prefix_lens, extend_lens, scale=None):
    """Causal attention for the new tokens of several requests, over cached prefix + themselves.

    Args:
        q: (sum(extend_lens), num_heads, head_dim), the requests' new tokens concatenated in order.
        k_cache, v_cache: (num_blocks, block_size, num_kv_heads, head_dim), already holding the
            new tokens' K/V at positions prefix_len .. prefix_len + extend_len - 1.
        block_tables: (num_reqs, max_blocks_per_seq) int32 (int64 accepted).
        prefix_lens, extend_lens: (num_reqs,) int tensors (any device) or lists; extend_len may be 0.
        scale: softmax scale, default 1/sqrt(head_dim).

    Returns: out shaped like q.

    Example: prefix_lens [4, 0], extend_lens [2, 3] -> q has 5 rows; row 0 (request 0's first
    new token, position 4) sees positions 0-4; row 2 (request 1's first token) sees position 0 only.
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    check_query(q, k_cache, head_dim, num_kv_heads)
    prefix = as_length_list("prefix_lens", prefix_lens)
    extend = as_length_list("extend_lens", extend_lens, len(prefix))
    for name, values in (("prefix_lens", prefix), ("extend_lens", extend)):
        for r, n in enumerate(values):
            if n < 0:
                raise ValueError(f"{name}[{r}] = {n} is negative")
    if sum(extend) != q.shape[0]:
        raise ValueError(f"q has {q.shape[0]} rows but sum(extend_lens) = {sum(extend)}")
    seq_lens = [p + e for p, e in zip(prefix, extend)]
    check_block_tables(block_tables, seq_lens, num_blocks, block_size, "prefix_lens[{s}] + extend_lens[{s}]")
    check_same_device(q=q, block_tables=block_tables)
    scale = resolve_scale(scale, head_dim)

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)             # (total_new_tokens, num_heads, head_dim)
    if q.shape[0] == 0:
        return out
    # The kernel steps through q's head_dim and a table row with stride 1.
    q, block_tables = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, block_tables))
    starts = [0]
    for e in extend[:-1]:
        starts.append(starts[-1] + e)
    as_dev = lambda xs: torch.tensor(xs, dtype=torch.int32, device=q.device)  # noqa: E731
    return launch_extend_attention(
        q, k_cache, v_cache, block_tables, as_dev(starts), as_dev(prefix), as_dev(extend), max(extend), out, scale
    )
