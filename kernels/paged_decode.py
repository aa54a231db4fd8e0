"""Paged decode attention (vLLM's PagedAttention) in Triton, with split-K (flash-decoding).

One new query token per sequence attends to that sequence's whole context, whose K and V
live scattered in a paged cache: the block table says which physical block holds each
logical block of ``block_size`` tokens. Position ``pos`` of a sequence is found at::

    logical_block  = pos // block_size
    physical_block = block_table[logical_block]
    slot           = physical_block * block_size + pos % block_size

Grid: one program per (sequence, KV head[, split]). Grouped-query attention: the program
handles all ``num_heads // num_kv_heads`` query heads that share its KV head, so every K/V
tile is read from memory once. Softmax is computed online in fp32 (running max ``m``,
running sum ``l``, running weighted sum ``acc``), one tile of ``TILE_N`` tokens at a time.

Split-K (``num_splits > 1``): a long context is cut into ``num_splits`` ranges handled by
separate programs; each writes its un-normalised ``acc``, ``m`` and ``l``; a second kernel
combines them: ``out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s`` with ``M = max_s m_s``.
This keeps the GPU busy when there are few sequences but long contexts.

What this module does not handle: more than one query token per sequence (see
``extend_attention``), sliding windows, ALiBi, soft-capping, fp8 caches, or writing K/V
into the cache (see ``store_kvcache``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._checks import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    as_length_list,
    check_attention_dtype,
    check_block_tables,
    check_heads,
    check_kv_cache,
    check_same_device,
    check_tensor,
    next_power_of_two,
)


@triton.jit
def load_kv_tile(
    k_cache_ptr, v_cache_ptr, physical_block, offset_in_block, valid, kv_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    HEAD_DIM: tl.constexpr,
):
    """Load K and V of TILE_N tokens, each given by (physical_block, offset_in_block)."""
    offs_d = tl.arange(0, HEAD_DIM)
    token_start = (physical_block.to(tl.int64) * stride_cache_block
                   + offset_in_block * stride_cache_token
                   + kv_head * stride_cache_head)                          # (TILE_N,) offset of K[token, kv_head, 0]
    kv_offs = token_start[:, None] + offs_d[None, :]                       # (TILE_N, HEAD_DIM)
    k = tl.load(k_cache_ptr + kv_offs, mask=valid[:, None], other=0.0)     # (TILE_N, HEAD_DIM)
    v = tl.load(v_cache_ptr + kv_offs, mask=valid[:, None], other=0.0)     # (TILE_N, HEAD_DIM)
    return k, v


@triton.jit
def online_softmax_step(
    q, k, v, allowed, m_i, l_i, acc, scale,
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Fold one K/V tile into the running softmax state of a block of query rows.

    q (ROWS, HEAD_DIM); k, v (TILE_N, HEAD_DIM); allowed (ROWS, TILE_N) which keys each row
    may see; m_i, l_i (ROWS,) running max and sum; acc (ROWS, HEAD_DIM), all fp32.
    """
    if USE_DOT:  # tensor cores; the GPU compiler needs every dot dimension >= 16
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)    # (ROWS, TILE_N)
    else:        # small head_dim: plain multiply and sum
        scores = tl.sum(q[:, None, :].to(tl.float32) * k[None, :, :].to(tl.float32), axis=2)
    scores = tl.where(allowed, scores * scale, float("-inf"))             # (ROWS, TILE_N)
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))                        # (ROWS,)
    alpha = tl.exp(m_i - m_new)                                            # rescales what was summed so far
    p = tl.exp(scores - m_new[:, None])                                    # (ROWS, TILE_N)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if USE_DOT:
        pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)       # (ROWS, HEAD_DIM)
    else:
        pv = tl.sum(p[:, :, None] * v[None, :, :].to(tl.float32), axis=1)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr,
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr,
    scale, num_heads,
    stride_q_seq, stride_q_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_table_seq,
    stride_out_seq, stride_out_head,
    QUERIES_PER_KV: tl.constexpr,  # num_heads // num_kv_heads: the GQA group size
    BLOCK_G: tl.constexpr,         # QUERIES_PER_KV padded to a power of two (>= 16 with USE_DOT)
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,      # tokens per cache block
    TILE_N: tl.constexpr,          # tokens per loop iteration, a multiple of BLOCK_SIZE
    NUM_SPLITS: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program = one sequence x one KV head (x one split of the context).

    It walks the context TILE_N tokens at a time. A tile spans whole blocks (TILE_N is a
    multiple of BLOCK_SIZE), and every token in it finds its block through the block table,
    so the physical blocks may sit anywhere in the cache, in any order.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, TILE_N)
    head = kv_head * QUERIES_PER_KV + offs_g                               # (BLOCK_G,) query heads of this group
    head_ok = offs_g < QUERIES_PER_KV
    q = tl.load(q_ptr + seq * stride_q_seq + head[:, None] * stride_q_head + offs_d[None, :],
                mask=head_ok[:, None], other=0.0)                          # (BLOCK_G, HEAD_DIM)

    # This program's share of the context, in tiles of TILE_N tokens.
    context_len = tl.load(context_lens_ptr + seq)
    num_tiles = tl.cdiv(context_len, TILE_N)
    tiles_per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    tile_start = split * tiles_per_split
    tile_end = tl.minimum(tile_start + tiles_per_split, num_tiles)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)                    # running max of scores
    l_i = tl.zeros([BLOCK_G], tl.float32)                                  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)                        # running sum of exp(...) * V

    block_table_ptr = block_tables_ptr + seq * stride_table_seq           # this sequence's row of the table
    for tile in range(tile_start, tile_end):
        pos = tile * TILE_N + offs_t                                       # (TILE_N,) positions in the sequence
        valid = pos < context_len
        # The paging step: every position looks up which physical block holds it.
        logical_block = pos // BLOCK_SIZE                                  # (TILE_N,)
        physical_block = tl.load(block_table_ptr + logical_block, mask=valid, other=0)  # (TILE_N,)
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, physical_block, pos % BLOCK_SIZE, valid, kv_head,
                            stride_cache_block, stride_cache_token, stride_cache_head, HEAD_DIM)  # (TILE_N, HEAD_DIM)
        m_i, l_i, acc = online_softmax_step(q, k, v, valid[None, :], m_i, l_i, acc, scale,
                                            USE_DOT, DOT_PRECISION)

    if NUM_SPLITS == 1:
        out = acc / l_i[:, None]                                           # (BLOCK_G, HEAD_DIM)
        tl.store(out_ptr + seq * stride_out_seq + head[:, None] * stride_out_head + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    else:
        # Partial results, laid out (num_seqs, num_heads, NUM_SPLITS[, HEAD_DIM]); an empty
        # split leaves m = -inf, l = 0, acc = 0, which the combine step weights by exp(-inf) = 0.
        part = (seq * num_heads + head) * NUM_SPLITS + split               # (BLOCK_G,)
        tl.store(part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=head_ok[:, None])
        tl.store(part_max_ptr + part, m_i, mask=head_ok)
        tl.store(part_sum_ptr + part, l_i, mask=head_ok)


@triton.jit
def split_k_combine_kernel(
    part_acc_ptr, part_max_ptr, part_sum_ptr, out_ptr,
    num_heads, stride_out_seq, stride_out_head,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    split_ok = offs_s < NUM_SPLITS
    part = (seq * num_heads + head) * NUM_SPLITS + offs_s                  # (BLOCK_S,)
    m = tl.load(part_max_ptr + part, mask=split_ok, other=float("-inf"))   # (BLOCK_S,) each split's max
    s = tl.load(part_sum_ptr + part, mask=split_ok, other=0.0)             # (BLOCK_S,) each split's sum
    acc = tl.load(part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=split_ok[:, None], other=0.0)                       # (BLOCK_S, HEAD_DIM)
    weight = tl.exp(m - tl.max(m, axis=0))                                 # (BLOCK_S,) 0 for empty splits
    out = tl.sum(acc * weight[:, None], axis=0) / tl.sum(s * weight, axis=0)  # (HEAD_DIM,)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + offs_d,
             out.to(out_ptr.dtype.element_ty))


# ----------------------------------------------------------------------------- launch helpers

def tile_tokens(block_size: int) -> int:
    """Tokens per loop iteration: whole blocks, at least 64 tokens. Example: 4 -> 64, 128 -> 128."""
    return max(block_size, 64)


def attention_meta(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Compile-time constants shared by the decode and extend kernels.

    Example: 32 query heads, 8 KV heads, head_dim 128, fp16 ->
    QUERIES_PER_KV 4, BLOCK_G 4, USE_DOT True, DOT_PRECISION "tf32" (ignored for fp16).
    """
    group = num_heads // num_kv_heads
    return dict(
        QUERIES_PER_KV=group,
        BLOCK_G=next_power_of_two(group),
        HEAD_DIM=head_dim,
        USE_DOT=head_dim >= 16,
        # fp32 inputs: exact fp32 products (no TF32 rounding), so GPU results match the reference.
        DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
    )


def decode_meta(num_heads, num_kv_heads, head_dim, block_size, num_splits, dtype) -> dict:
    """All constexprs of paged_decode_kernel for one configuration (used by the compile check too).

    With tl.dot the group is padded to 16 query rows (the GPU's minimum dot size); the padding
    rows compute on zeros and are never stored. Example: group 4 -> BLOCK_G 16.
    """
    meta = attention_meta(num_heads, num_kv_heads, head_dim, dtype)
    if meta["USE_DOT"]:
        meta["BLOCK_G"] = max(meta["BLOCK_G"], 16)
    return dict(
        meta,
        BLOCK_SIZE=block_size,
        TILE_N=tile_tokens(block_size),
        NUM_SPLITS=num_splits,
    )


def launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, scale, num_splits):
    """Launch without any checks (for benchmarks); prefer paged_decode_attention."""
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    meta = decode_meta(num_heads, num_kv_heads, head_dim, block_size, num_splits, q.dtype)
    if num_splits == 1:
        part_acc = part_max = part_sum = torch.empty(1, dtype=torch.float32, device=q.device)  # unused
    else:
        part_max = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=q.device)
        part_sum = torch.empty_like(part_max)
        part_acc = torch.empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
    paged_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, context_lens,
        out, part_acc, part_max, part_sum,
        scale, num_heads,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        **meta, num_warps=4,
    )
    if num_splits > 1:
        split_k_combine_kernel[(num_seqs, num_heads)](
            part_acc, part_max, part_sum, out,
            num_heads, out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, BLOCK_S=next_power_of_two(num_splits), HEAD_DIM=head_dim, num_warps=4,
        )
    return out


def check_query(q, k_cache, head_dim: int, num_kv_heads: int, name: str = "q") -> None:
    """The query must match the cache's head_dim, dtype and device, with a whole GQA group per KV head."""
    check_tensor(name, q, 3, FLOAT_DTYPES)
    if q.shape[2] != head_dim:
        raise ValueError(f"{name}.shape[2] = {q.shape[2]} but the cache has head_dim {head_dim}")
    if q.dtype != k_cache.dtype:
        raise ValueError(f"{name} dtype {q.dtype} differs from k_cache dtype {k_cache.dtype}")
    check_attention_dtype(name, q)
    check_heads(q.shape[1], num_kv_heads)
    check_same_device(**{name: q, "k_cache": k_cache})


def resolve_scale(scale, head_dim: int) -> float:
    """None -> 1/sqrt(head_dim). Example: head_dim 64 -> 0.125."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}")
    return scale


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale=None, num_splits=1):
    """Attention of one new token per sequence over its paged context.

    Args:
        q: (num_seqs, num_heads, head_dim) fp16/bf16/fp32 (bf16 only in native mode).
        k_cache, v_cache: (num_blocks, block_size, num_kv_heads, head_dim), same dtype as q.
        block_tables: (num_seqs, max_blocks_per_seq) int32 (int64 accepted); entries past a
            sequence's last used block are ignored.
        context_lens: (num_seqs,) int32 (int64 accepted), each >= 1; sequence s attends to
            positions [0, context_lens[s]).
        scale: softmax scale, default 1/sqrt(head_dim).
        num_splits: > 1 splits each context across that many programs (flash-decoding).

    Returns: out (num_seqs, num_heads, head_dim), dtype of q.

    Example (block_size 4, one sequence of 5 tokens held in physical blocks 2 then 0)::

        block_tables = torch.tensor([[2, 0]], dtype=torch.int32)
        context_lens = torch.tensor([5], dtype=torch.int32)
        out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens)
        # positions 0-3 are read from block 2, position 4 from block 0, slot 0
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    check_query(q, k_cache, head_dim, num_kv_heads)
    num_seqs = q.shape[0]
    check_tensor("context_lens", context_lens, 1, INDEX_DTYPES)
    lens = as_length_list("context_lens", context_lens, num_seqs)
    for s, n in enumerate(lens):
        if n < 1:
            raise ValueError(f"context_lens[{s}] = {n}; a decode step needs at least one token of context")
    check_block_tables(block_tables, lens, num_blocks, block_size, "context_lens[{s}]")
    check_same_device(q=q, block_tables=block_tables, context_lens=context_lens)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= 1024:
        raise ValueError(f"num_splits must be an int in [1, 1024], got {num_splits!r}")
    scale = resolve_scale(scale, head_dim)

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (num_seqs, num_heads, head_dim)
    if num_seqs == 0:
        return out
    # The kernel steps through q's head_dim, a table row and context_lens with stride 1.
    q, block_tables, context_lens = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, block_tables, context_lens))
    return launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, scale, num_splits)
