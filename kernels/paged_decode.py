"""Paged decode attention (vLLM's PagedAttention) in Triton, with split-K (flash-decoding).

One new query token per sequence attends to that sequence's whole context, whose K and V
live scattered in a paged cache: the block table says which physical block holds each
logical block of ``block_size`` tokens. Position ``pos`` of a sequence is found at::

    logical_block  = pos // block_size
    physical_block = block_table[logical_block]
    slot           = physical_block * block_size + pos % block_size

Grid: one program per (sequence, KV head x row chunk, split). Grouped-query attention: the
program handles the query heads that share its KV head, so every K/V tile is read from memory
once per program, at most 16 of them (a bigger group is split over several programs; see
``plan.py``). Softmax is computed online in fp32 (running max ``m``, running sum ``l``, running
weighted sum ``acc``), one tile of ``TILE_N`` tokens at a time. head_dim need not be a power of
two: tiles are ``BLOCK_D`` wide (the next power of two) and the extra lanes are masked.

Split-K: a long context is cut into ranges handled by separate programs. The number of
splits is chosen at run time, per sequence (``plan.plan_decode``): the batch-wide
``split_tiles`` gives a sequence of ``t`` tiles ``min(NUM_SPLITS, ceil(t / split_tiles))``
splits. A sequence with one split writes its output directly; the others write their
un-normalised ``acc``, ``m`` and ``l``, and a second kernel combines them:
``out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s`` with ``M = max_s m_s``.

No host sync: with ``context_lens_cpu`` (the lengths the caller already has as host ints) and
``check=False``, a call copies nothing from the device (the engine's hot path).

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
    check_block_ids,
    check_heads,
    check_kv_cache,
    check_lengths,
    check_same_device,
    check_table,
    check_tensor,
    is_int,
    next_power_of_two,
)
from .plan import DecodePlan, attention_meta, decode_meta, plan_decode, tile_tokens  # noqa: F401  (re-exported: their old home)


@triton.jit
def load_kv_tile(
    k_cache_ptr, v_cache_ptr, physical_block, offset_in_block, valid, kv_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASK_TOKENS: tl.constexpr,
):
    """Load K and V of TILE_N tokens, each given by (physical_block, offset_in_block).

    MASK_TOKENS=False: every token is valid (no mask unless head_dim is padded).
    """
    offs_d = tl.arange(0, BLOCK_D)
    token_start = (physical_block.to(tl.int64) * stride_cache_block
                   + offset_in_block * stride_cache_token
                   + kv_head * stride_cache_head)                          # (TILE_N,) offset of K[token, kv_head, 0]
    kv_offs = token_start[:, None] + offs_d[None, :]                       # (TILE_N, BLOCK_D)
    if MASK_TOKENS:
        mask = valid[:, None] & (offs_d < HEAD_DIM)[None, :]
        k = tl.load(k_cache_ptr + kv_offs, mask=mask, other=0.0)           # (TILE_N, BLOCK_D)
        v = tl.load(v_cache_ptr + kv_offs, mask=mask, other=0.0)
    elif BLOCK_D != HEAD_DIM:
        k = tl.load(k_cache_ptr + kv_offs, mask=(offs_d < HEAD_DIM)[None, :], other=0.0)
        v = tl.load(v_cache_ptr + kv_offs, mask=(offs_d < HEAD_DIM)[None, :], other=0.0)
    else:
        k = tl.load(k_cache_ptr + kv_offs)
        v = tl.load(v_cache_ptr + kv_offs)
    return k, v


@triton.jit
def online_softmax_step(
    q, k, v, allowed, m_i, l_i, acc, scale,
    MASKED: tl.constexpr, USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Fold one K/V tile into the running softmax state of a block of query rows.

    q (ROWS, BLOCK_D); k, v (TILE_N, BLOCK_D); allowed (ROWS, TILE_N) which keys each row
    may see (ignored when MASKED is False: every row sees every key); m_i, l_i (ROWS,) running
    max and sum; acc (ROWS, BLOCK_D), all fp32.
    """
    if USE_DOT:  # tensor cores; the GPU compiler needs every dot dimension >= 16
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)    # (ROWS, TILE_N)
    else:        # small head_dim: plain multiply and sum
        scores = tl.sum(q[:, None, :].to(tl.float32) * k[None, :, :].to(tl.float32), axis=2)
    if MASKED:
        scores = tl.where(allowed, scores * scale, float("-inf"))         # (ROWS, TILE_N)
    else:
        scores = scores * scale
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))                        # (ROWS,)
    alpha = tl.exp(m_i - m_new)                                            # rescales what was summed so far
    p = tl.exp(scores - m_new[:, None])                                    # (ROWS, TILE_N)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if USE_DOT:
        pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)       # (ROWS, BLOCK_D)
    else:
        pv = tl.sum(p[:, :, None] * v[None, :, :].to(tl.float32), axis=1)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def split_range(context_len, split, split_tiles, TILE_N: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """(splits of this sequence, first tile, end tile) of program ``split``: plan.seq_splits in Triton.

    A sequence of t tiles gets min(NUM_SPLITS, ceil(t / split_tiles)) splits of ceil(t / splits)
    tiles each; a program past the last split gets an empty range.
    """
    num_tiles = tl.cdiv(context_len, TILE_N)
    splits = tl.maximum(tl.minimum(tl.cdiv(num_tiles, split_tiles), NUM_SPLITS), 1)
    tiles_per_split = tl.cdiv(num_tiles, splits)
    tile_start = split * tiles_per_split
    return splits, tile_start, tl.minimum(tile_start + tiles_per_split, num_tiles)


@triton.jit
def paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr,
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr,
    scale, num_heads, split_tiles,
    stride_q_seq, stride_q_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_table_seq,
    stride_out_seq, stride_out_head,
    QUERIES_PER_KV: tl.constexpr,  # num_heads // num_kv_heads: the GQA group size
    BLOCK_G: tl.constexpr,         # query rows a program holds (16 with USE_DOT; never more)
    HEAD_CHUNKS: tl.constexpr,     # programs per KV head: ceil(QUERIES_PER_KV / BLOCK_G)
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,         # HEAD_DIM padded to a power of two
    BLOCK_SIZE: tl.constexpr,      # tokens per cache block
    TILE_N: tl.constexpr,          # tokens per loop iteration, a multiple of BLOCK_SIZE
    NUM_SPLITS: tl.constexpr,      # grid axis 2: the most splits any sequence gets
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program = one sequence x one KV head's row chunk x one split of the context.

    It walks its tiles TILE_N tokens at a time. A tile spans whole blocks (TILE_N is a
    multiple of BLOCK_SIZE), and every token in it finds its block through the block table,
    so the physical blocks may sit anywhere in the cache, in any order.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_CHUNKS
    split = tl.program_id(2)

    offs_g = (tl.program_id(1) % HEAD_CHUNKS) * BLOCK_G + tl.arange(0, BLOCK_G)  # (BLOCK_G,) members of the group
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tl.arange(0, TILE_N)
    head = kv_head * QUERIES_PER_KV + offs_g                               # (BLOCK_G,) query heads of this program
    row_ok = (offs_g < QUERIES_PER_KV)[:, None] & (offs_d < HEAD_DIM)[None, :]  # (BLOCK_G, BLOCK_D)
    q = tl.load(q_ptr + seq * stride_q_seq + head[:, None] * stride_q_head + offs_d[None, :],
                mask=row_ok, other=0.0)                                    # (BLOCK_G, BLOCK_D)
    out_offs = seq * stride_out_seq + head[:, None] * stride_out_head + offs_d[None, :]

    # This program's share of the context, in tiles of TILE_N tokens.
    context_len = tl.load(context_lens_ptr + seq)
    splits, tile_start, tile_end = split_range(context_len, split, split_tiles, TILE_N, NUM_SPLITS)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)                    # running max of scores
    l_i = tl.zeros([BLOCK_G], tl.float32)                                  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)                         # running sum of exp(...) * V

    block_table_ptr = block_tables_ptr + seq * stride_table_seq           # this sequence's row of the table
    for tile in range(tile_start, tile_end):
        pos = tile * TILE_N + offs_t                                       # (TILE_N,) positions in the sequence
        valid = pos < context_len
        # The paging step: every position looks up which physical block holds it.
        logical_block = pos // BLOCK_SIZE                                  # (TILE_N,)
        physical_block = tl.load(block_table_ptr + logical_block, mask=valid, other=0)  # (TILE_N,)
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, physical_block, pos % BLOCK_SIZE, valid, kv_head,
                            stride_cache_block, stride_cache_token, stride_cache_head,
                            HEAD_DIM, BLOCK_D, True)                       # (TILE_N, BLOCK_D)
        m_i, l_i, acc = online_softmax_step(q, k, v, valid[None, :], m_i, l_i, acc, scale,
                                            True, USE_DOT, DOT_PRECISION)

    if NUM_SPLITS == 1:
        tl.store(out_ptr + out_offs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok)
    else:
        # One split: the answer. Several: partial results, laid out (num_seqs, num_heads,
        # NUM_SPLITS[, BLOCK_D]); an empty split leaves m = -inf, l = 0, acc = 0, which the
        # combine step weights by exp(-inf) = 0.
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]                   # programs past the last split: l = 0
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok & (splits == 1) & (split == 0))
        part = (seq * num_heads + head) * NUM_SPLITS + split               # (BLOCK_G,)
        keep = (offs_g < QUERIES_PER_KV) & (splits > 1) & (split < splits)
        tl.store(part_acc_ptr + part[:, None] * BLOCK_D + offs_d[None, :], acc, mask=keep[:, None])
        tl.store(part_max_ptr + part, m_i, mask=keep)
        tl.store(part_sum_ptr + part, l_i, mask=keep)


@triton.jit
def split_k_combine_kernel(
    part_acc_ptr, part_max_ptr, part_sum_ptr, context_lens_ptr, out_ptr,
    num_heads, split_tiles, stride_out_seq, stride_out_head,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """One program = one (sequence, query head): combine its splits (nothing to do for one split)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits, _, _ = split_range(tl.load(context_lens_ptr + seq), 0, split_tiles, TILE_N, NUM_SPLITS)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    split_ok = (offs_s < splits) & (splits > 1)
    part = (seq * num_heads + head) * NUM_SPLITS + offs_s                  # (BLOCK_S,)
    m = tl.load(part_max_ptr + part, mask=split_ok, other=float("-inf"))   # (BLOCK_S,) each split's max
    s = tl.load(part_sum_ptr + part, mask=split_ok, other=0.0)             # (BLOCK_S,) each split's sum
    acc = tl.load(part_acc_ptr + part[:, None] * BLOCK_D + offs_d[None, :],
                  mask=split_ok[:, None], other=0.0)                       # (BLOCK_S, BLOCK_D)
    m_max = tl.where(splits > 1, tl.max(m, axis=0), 0.0)                  # (one split: nothing loaded, nothing stored)
    weight = tl.exp(m - m_max)                                             # (BLOCK_S,) 0 for empty splits
    total = tl.sum(s * weight, axis=0)
    out = tl.sum(acc * weight[:, None], axis=0) / tl.where(total > 0, total, 1.0)  # (BLOCK_D,)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=(offs_d < HEAD_DIM) & (splits > 1))


# ----------------------------------------------------------------------------- launch helpers

def launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, scale, plan: DecodePlan):
    """Launch without any checks (for benchmarks and tests); prefer paged_decode_attention."""
    num_seqs, num_heads, head_dim = q.shape
    meta = plan.meta
    splits, block_d = plan.num_splits, meta["BLOCK_D"]
    if splits == 1:
        part_acc = part_max = part_sum = torch.empty(1, dtype=torch.float32, device=q.device)  # unused
    else:
        part_max = torch.empty((num_seqs, num_heads, splits), dtype=torch.float32, device=q.device)
        part_sum = torch.empty_like(part_max)
        part_acc = torch.empty((num_seqs, num_heads, splits, block_d), dtype=torch.float32, device=q.device)
    paged_decode_kernel[plan.grid](
        q, k_cache, v_cache, block_tables, context_lens,
        out, part_acc, part_max, part_sum,
        scale, num_heads, plan.split_tiles,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        **meta, num_warps=4,
    )
    if splits > 1:
        split_k_combine_kernel[(num_seqs, num_heads)](
            part_acc, part_max, part_sum, context_lens, out,
            num_heads, plan.split_tiles, out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, BLOCK_D=block_d, TILE_N=meta["TILE_N"], NUM_SPLITS=splits,
            BLOCK_S=next_power_of_two(splits), num_warps=4,
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


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale=None, num_splits=None, *,
                           context_lens_cpu=None, check=True):
    """Attention of one new token per sequence over its paged context.

    Args:
        q: (num_seqs, num_heads, head_dim) fp16/bf16/fp32 (bf16 only in native mode); any
            head_dim up to 256 (80 and 96 run as padded 128-wide tiles).
        k_cache, v_cache: (num_blocks, block_size, num_kv_heads, head_dim), same dtype as q.
        block_tables: (num_seqs, max_blocks_per_seq) int32 (int64 accepted); entries past a
            sequence's last used block are ignored.
        context_lens: (num_seqs,) int32 (int64 accepted), each >= 1; sequence s attends to
            positions [0, context_lens[s]).
        scale: softmax scale, default 1/sqrt(head_dim).
        num_splits: None (default) = split-K chosen at run time per sequence (``plan_decode``);
            an int forces ``min(num_splits, tiles)`` splits per sequence.
        context_lens_cpu: the same lengths as host ints, if the caller has them (the engine
            does): they drive the plan and the length checks without a device->host copy.
        check: full checks (the default; tests keep it on). They read the lengths (if not given
            as host ints) and the block ids on the host: one sync per call on a GPU.
            ``check=False`` with ``context_lens_cpu`` is the hot path: no device->host copy.

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
    if context_lens.shape[0] != num_seqs:
        raise ValueError(f"context_lens has {context_lens.shape[0]} entries, expected {num_seqs}")
    check_table(block_tables, num_seqs, "context_lens")
    check_same_device(q=q, block_tables=block_tables, context_lens=context_lens)
    if num_splits is not None and not (is_int(num_splits) and 1 <= num_splits <= 1024):
        raise ValueError(f"num_splits must be None or an int in [1, 1024], got {num_splits!r}")
    lens = None if context_lens_cpu is None else as_length_list("context_lens_cpu", context_lens_cpu, num_seqs)
    capacity = block_tables.shape[1] * block_size
    if check:
        values = context_lens.tolist()  # the one device->host copy of a checked call (with the block ids')
        if lens is not None and lens != values:
            raise ValueError(f"context_lens_cpu = {lens} differs from context_lens = {values}")
        lens = values
    if lens is not None:
        name = "context_lens[{s}]" if context_lens_cpu is None else "context_lens_cpu[{s}]"
        check_lengths(name, lens, 1, capacity, block_size, block_tables.shape[1])
    if check:
        check_block_ids(block_tables, lens, num_blocks, block_size, "context_lens[{s}]")
    scale = resolve_scale(scale, head_dim)

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (num_seqs, num_heads, head_dim)
    if num_seqs == 0:
        return out
    plan = plan_decode(num_seqs, q.shape[1], num_kv_heads, head_dim, block_size, q.dtype, context_lens=lens,
                       max_context_len=capacity, num_splits=None if num_splits is None else int(num_splits))
    # The kernel steps through q's head_dim, a table row and context_lens with stride 1.
    q, block_tables, context_lens = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, block_tables, context_lens))
    return launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, scale, plan)
