"""Prefix (extend) attention: new tokens attend to a cached prefix and, causally, to each other.

This is what makes a radix-tree hit pay off (SGLang's ``extend`` step): a request whose first
``prefix_len`` tokens are already in the paged cache only computes attention for its
``extend_len`` new tokens. Before this kernel runs, the new tokens' K and V have been written
into the cache (``store_kvcache``) at positions ``prefix_len .. prefix_len + extend_len - 1``,
so every key, old or new, is read through the block table. New token i of request r sits at
position ``prefix_lens[r] + i`` and attends to positions ``[0, prefix_lens[r] + i]``.

Grid: (request, KV head x head chunk, tile of BLOCK_M new tokens). A program's query rows are
the (new token, query head of the GQA group) pairs, at most 16 heads of the group (a bigger
group is split over programs), so each K/V tile is read once per program. head_dim is padded
to a power of two and masked. The causal mask is applied only where it can cut: key tiles that
lie wholly at or before the program's first new token are visible to every row and are read
in a first loop with no mask at all; only the tiles that cross the diagonal are masked.

What this module does not handle: sliding windows, custom (tree) masks for speculative
decoding, or K/V that are not yet in the cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import check_block_ids, check_kv_cache, check_lengths, check_same_device, check_table, host_lengths
from .paged_decode import check_query, load_kv_tile, online_softmax_step, resolve_scale
from .plan import extend_meta, plan_extend, upload_ints  # noqa: F401  (extend_meta: re-exported, its old home)


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
    BLOCK_G: tl.constexpr,       # query heads a program holds (the group padded, at most 16)
    HEAD_CHUNKS: tl.constexpr,   # programs per KV head: ceil(QUERIES_PER_KV / BLOCK_G)
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,       # HEAD_DIM padded to a power of two
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,       # new tokens per program
    TILE_N: tl.constexpr,        # keys per loop iteration
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    SKIP_FULL_MASK: tl.constexpr,  # read wholly visible key tiles in an unmasked loop (tensor-core configs)
):
    """One program = one request x one KV head's head chunk x BLOCK_M of the request's new tokens.

    The same loop as the decode kernel (keys read through the block table, online softmax),
    with more query rows and a causal mask: a new token at position p sees keys 0..p.
    """
    req = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_CHUNKS
    m_block = tl.program_id(2)
    q_start = tl.load(q_starts_ptr + req)                                  # first row of this request in q
    prefix_len = tl.load(prefix_lens_ptr + req)
    extend_len = tl.load(extend_lens_ptr + req)

    # Query rows: (new token, query head in group) pairs, BLOCK_M * BLOCK_G of them.
    offs_r = tl.arange(0, BLOCK_M * BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tl.arange(0, TILE_N)
    new_tok = m_block * BLOCK_M + offs_r // BLOCK_G                        # (ROWS,) index among the new tokens
    g = (tl.program_id(1) % HEAD_CHUNKS) * BLOCK_G + offs_r % BLOCK_G      # (ROWS,) member of the group
    head = kv_head * QUERIES_PER_KV + g                                    # (ROWS,) query head
    row_ok = ((new_tok < extend_len) & (g < QUERIES_PER_KV))[:, None] & (offs_d < HEAD_DIM)[None, :]
    q_offs = (q_start + new_tok)[:, None] * stride_q_token + head[:, None] * stride_q_head + offs_d[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_ok, other=0.0)                    # (ROWS, BLOCK_D)
    q_pos = prefix_len + new_tok                                           # (ROWS,) absolute positions

    # Keys this tile of queries can see: up to its last query (causal); none if it has no query.
    has_rows = m_block * BLOCK_M < extend_len
    first_q = prefix_len + m_block * BLOCK_M                               # position of the first new token here
    kv_end = tl.where(has_rows, tl.minimum(prefix_len + extend_len, first_q + BLOCK_M), 0)
    # Tiles of keys 0 .. first_q: every row sees all of them, and all are in the cache. With
    # tensor cores they run in a loop of their own, with no mask; fp32's FMA dot keeps one loop
    # (a second one doubles its registers and spills), so there every tile is masked.
    full_tiles = tl.where(has_rows, (first_q + 1) // TILE_N, 0) if SKIP_FULL_MASK else 0

    m_i = tl.full([BLOCK_M * BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M * BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_M * BLOCK_G, BLOCK_D], tl.float32)
    block_table_ptr = block_tables_ptr + req * stride_table_req
    if SKIP_FULL_MASK:
        for tile in range(0, full_tiles):                                  # no mask: wholly visible
            pos = tile * TILE_N + offs_t                                   # (TILE_N,) key positions
            physical_block = tl.load(block_table_ptr + pos // BLOCK_SIZE)  # (TILE_N,)
            k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, physical_block, pos % BLOCK_SIZE, pos, kv_head,
                                stride_cache_block, stride_cache_token, stride_cache_head,
                                HEAD_DIM, BLOCK_D, False)                  # (TILE_N, BLOCK_D)
            m_i, l_i, acc = online_softmax_step(q, k, v, 0, m_i, l_i, acc, scale, False, USE_DOT, DOT_PRECISION)
    for tile in range(full_tiles, tl.cdiv(kv_end, TILE_N)):                # the tiles that cross the diagonal
        pos = tile * TILE_N + offs_t
        valid = pos < kv_end
        physical_block = tl.load(block_table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, physical_block, pos % BLOCK_SIZE, valid, kv_head,
                            stride_cache_block, stride_cache_token, stride_cache_head, HEAD_DIM, BLOCK_D, True)
        causal = valid[None, :] & (pos[None, :] <= q_pos[:, None])         # (ROWS, TILE_N)
        m_i, l_i, acc = online_softmax_step(q, k, v, causal, m_i, l_i, acc, scale, True, USE_DOT, DOT_PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]                       # rows without keys are masked below
    o_offs = (q_start + new_tok)[:, None] * stride_out_token + head[:, None] * stride_out_head + offs_d[None, :]
    tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok)


def launch_extend_attention(q, k_cache, v_cache, block_tables, q_starts, prefix_lens, extend_lens, max_extend, out,
                            scale):
    """Launch without any checks (for benchmarks); prefer extend_attention.

    q_starts, prefix_lens, extend_lens: (num_reqs,) int32 on q's device; max_extend: a host
    int >= every extend length (it sizes the grid).
    """
    num_heads, head_dim = q.shape[1], q.shape[2]
    _, block_size, num_kv_heads, _ = k_cache.shape
    plan = plan_extend(prefix_lens.shape[0], num_heads, num_kv_heads, head_dim, block_size, q.dtype, max_extend)
    extend_attention_kernel[plan.grid](
        q, k_cache, v_cache, block_tables,
        q_starts, prefix_lens, extend_lens, out,
        scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        **plan.meta, num_warps=4,
    )
    return out


def extend_attention(q, k_cache, v_cache, block_tables, prefix_lens, extend_lens, scale=None, *,
                     prefix_lens_cpu=None, extend_lens_cpu=None, check=True):
    """Causal attention for the new tokens of several requests, over cached prefix + themselves.

    Args:
        q: (sum(extend_lens), num_heads, head_dim), the requests' new tokens concatenated in order.
        k_cache, v_cache: (num_blocks, block_size, num_kv_heads, head_dim), already holding the
            new tokens' K/V at positions prefix_len .. prefix_len + extend_len - 1.
        block_tables: (num_reqs, max_blocks_per_seq) int32 (int64 accepted).
        prefix_lens, extend_lens: (num_reqs,) lists of ints (host) or 1-D int tensors; extend_len
            may be 0. Floats and bools are refused.
        scale: softmax scale, default 1/sqrt(head_dim).
        prefix_lens_cpu, extend_lens_cpu: for tensor lengths, the same values as host ints, if
            the caller has them: they size the grid and drive the checks without a copy.
        check: full checks (default): tensor lengths not given as host ints are read on the
            host, and the block ids are checked (a device->host copy on a GPU). With
            ``check=False`` and the lengths as host ints nothing is copied to the host; with
            device tensors only, nothing is checked and the grid is sized by q's rows.

    Returns: out shaped like q.

    Example: prefix_lens [4, 0], extend_lens [2, 3] -> q has 5 rows; row 0 (request 0's first
    new token, position 4) sees positions 0-4; row 2 (request 1's first token) sees position 0 only.
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    check_query(q, k_cache, head_dim, num_kv_heads)
    prefix, prefix_t = host_lengths("prefix_lens", prefix_lens, prefix_lens_cpu, None, check)
    num_reqs = len(prefix) if prefix is not None else prefix_t.shape[0]
    extend, extend_t = host_lengths("extend_lens", extend_lens, extend_lens_cpu, num_reqs, check)
    check_table(block_tables, num_reqs, "prefix_lens")
    check_same_device(q=q, block_tables=block_tables)
    for name, values in (("prefix_lens[{s}]", prefix), ("extend_lens[{s}]", extend)):
        if values is not None:
            check_lengths(name, values, 0)
    if extend is not None and sum(extend) != q.shape[0]:
        raise ValueError(f"q has {q.shape[0]} rows but sum(extend_lens) = {sum(extend)}")
    if prefix is not None and extend is not None:
        seq_lens = [p + e for p, e in zip(prefix, extend)]
        check_lengths("prefix_lens[{s}] + extend_lens[{s}]", seq_lens, 0, block_tables.shape[1] * block_size,
                      block_size, block_tables.shape[1])
        if check:
            check_block_ids(block_tables, seq_lens, num_blocks, block_size, "prefix_lens[{s}] + extend_lens[{s}]")
    scale = resolve_scale(scale, head_dim)

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)             # (total_new_tokens, num_heads, head_dim)
    if q.shape[0] == 0 or num_reqs == 0:
        return out
    # The kernel steps through q's head_dim and a table row with stride 1.
    q, block_tables = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, block_tables))
    # Device copies of the lengths: tensors given are used as they are; host ints go up in one
    # non-blocking copy, with the row offsets (q_starts) computed on the host when possible.
    host_rows = []
    if extend is not None:
        starts = [0] * num_reqs
        for r in range(1, num_reqs):
            starts[r] = starts[r - 1] + extend[r - 1]
        host_rows.append(starts)
    host_rows += [xs for xs, t in ((prefix, prefix_t), (extend, extend_t)) if t is None]
    up = iter(upload_ints(host_rows, q.device)) if host_rows else iter(())
    q_starts = next(up) if extend is not None else None
    as_i32 = lambda t: t.to(device=q.device, dtype=torch.int32).contiguous()  # noqa: E731
    prefix_d = as_i32(prefix_t) if prefix_t is not None else next(up)
    extend_d = as_i32(extend_t) if extend_t is not None else next(up)
    if q_starts is None:
        q_starts = (torch.cumsum(extend_d, 0) - extend_d).to(torch.int32)   # on the device: no copy
    max_extend = max(extend) if extend is not None else q.shape[0]
    return launch_extend_attention(q, k_cache, v_cache, block_tables, q_starts, prefix_d, extend_d, max_extend, out,
                                   scale)
