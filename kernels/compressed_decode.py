"""Fewer bytes and fewer tokens per decode step: a quantized KV cache and block-selected decode.

Two ways to read less KV in a decode step (lesson 11), in one decode kernel with two switches:

* **int8 / fp8 KV** (``QUANTIZED``): the cache holds 1-byte values and one fp32 scale per
  token, KV head and K/V (``k_scale, v_scale (num_blocks, block_size, num_kv_heads)``). The store
  kernel quantizes as it writes (``scale = max|x| / QMAX``, ``x_q = round(x / scale)``, QMAX 127
  for int8 and 448 for fp8 e4m3); the decode kernel dequantizes each tile on load
  (``x ~ x_q * scale``) and runs the usual online softmax in fp32. Bytes per token:
  ``head_dim + 4`` per head instead of ``2 x head_dim`` in fp16.
* **selected blocks** (``SELECTED``, Quest): sequence ``s`` reads only the logical blocks
  ``selected_blocks[s, :num_selected[s]]`` of its table, each through the block table as usual;
  or, with a list per KV head (``selected_blocks (B, nkv, k)``, ``num_selected (B, nkv)``: the
  paper's per-head choice), KV head ``h`` reads ``selected_blocks[s, h, :num_selected[s, h]]``.
  Positions keep their place (and their RoPE); the kernel just skips the other blocks.

Grid: one program per (sequence, KV head); it holds the whole GQA group of query rows (at most
16: a bigger group is refused) and walks one cache block (``BLOCK_SIZE`` tokens) per iteration.
No tensor-core dot (tiles are multiplied and summed), so any head_dim and group size compile;
no split-K. Written with plain pointer arithmetic for triton 3.6-3.9.

What this module does not handle: bf16 in the interpreter, split-K, choosing the blocks (see
``kvlab.compute.kv_compress``), per-channel or per-tensor scales.

Example (block_size 4, one sequence of 6 tokens in blocks [2, 0], int8)::

    store_kvcache_quant(k, v, k_cache, v_cache, k_scale, v_scale, slot_mapping)
    out = quantized_decode_attention(q, k_cache, v_cache, k_scale, v_scale, block_tables, context_lens)
    out = selected_decode_attention(q, kc, vc, block_tables, context_lens, selected_blocks, num_selected)
"""

from __future__ import annotations

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
    check_lengths,
    check_power_of_two,
    check_same_device,
    check_table,
    check_tensor,
    next_power_of_two,
)
from .paged_decode import online_softmax_step, resolve_scale
from .reference import QMAX

QUANT_DTYPES = tuple(QMAX)
MAX_GROUP = 16


@triton.jit
def round_to_e4m3(y):
    """fp32 values in [-448, 448] rounded (to nearest, ties to even) to the nearest fp8 e4m3 value,
    still in fp32: keep 3 mantissa bits of a normal number, steps of 2^-9 below 2^-6 (subnormals).
    The cast that follows is then exact; the interpreter's own fp32->fp8 cast rounds some values
    just below a power of two down by half (125.7 -> 64), so the kernel does not leave the rounding to it."""
    bits = y.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576            # RNE to 3 mantissa bits
    normal = rounded.to(tl.float32, bitcast=True)
    subnormal = ((y * 512.0 + 12582912.0) - 12582912.0) / 512.0          # RNE to a multiple of 2^-9
    return tl.where(tl.abs(y) < 0.015625, subnormal, normal)


@triton.jit
def store_kvcache_quant_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr, slot_mapping_ptr,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_scale_block, stride_scale_token,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    QMAX: tl.constexpr, FP8: tl.constexpr,
):
    """One program = one token x one KV head: quantize its K and V rows, store values and scales."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    slot = tl.load(slot_mapping_ptr + t).to(tl.int64)
    keep = slot >= 0                                                       # slot -1: padding, skip
    block = slot // BLOCK_SIZE
    dst = block * stride_cache_block + (slot % BLOCK_SIZE) * stride_cache_token + h * stride_cache_head + offs_d
    dst_scale = block * stride_scale_block + (slot % BLOCK_SIZE) * stride_scale_token + h
    d_ok = offs_d < HEAD_DIM
    for which in tl.static_range(2):                                       # 0: K, 1: V
        if which == 0:
            x = tl.load(key_ptr + t * stride_key_token + h * stride_key_head + offs_d, mask=d_ok, other=0.0)
        else:
            x = tl.load(value_ptr + t * stride_value_token + h * stride_value_head + offs_d, mask=d_ok, other=0.0)
        x = x.to(tl.float32)                                               # (BLOCK_D,)
        s = tl.max(tl.abs(x), axis=0) / QMAX                               # the token-and-head scale
        s = tl.where(s > 0, s, 1.0)
        y = x / s                                                          # (BLOCK_D,) in [-QMAX, QMAX]
        if FP8:
            xq = round_to_e4m3(y).to(k_cache_ptr.dtype.element_ty)
        else:
            xq = tl.minimum(tl.maximum(tl.floor(y + 0.5), -127.0), 127.0).to(tl.int8)
        if which == 0:
            tl.store(k_cache_ptr + dst, xq, mask=d_ok & keep)
            tl.store(k_scale_ptr + dst_scale, s, mask=keep)
        else:
            tl.store(v_cache_ptr + dst, xq, mask=d_ok & keep)
            tl.store(v_scale_ptr + dst_scale, s, mask=keep)


@triton.jit
def compressed_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr, block_tables_ptr, context_lens_ptr,
    selected_blocks_ptr, num_selected_ptr, out_ptr,
    scale,
    stride_q_seq, stride_q_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_scale_block, stride_scale_token,
    stride_table_seq, stride_selected_seq, stride_selected_head, stride_num_seq, stride_num_head,
    stride_out_seq, stride_out_head,
    QUERIES_PER_KV: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    QUANTIZED: tl.constexpr, SELECTED: tl.constexpr,
):
    """One program = one sequence x one KV head (its whole query group), one cache block per step."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tl.arange(0, BLOCK_SIZE)
    head = kv_head * QUERIES_PER_KV + offs_g                               # (BLOCK_G,)
    row_ok = (offs_g < QUERIES_PER_KV)[:, None] & (offs_d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq * stride_q_seq + head[:, None] * stride_q_head + offs_d[None, :],
                mask=row_ok, other=0.0).to(tl.float32)                     # (BLOCK_G, BLOCK_D)
    context_len = tl.load(context_lens_ptr + seq)
    if SELECTED:
        num_steps = tl.load(num_selected_ptr + seq * stride_num_seq + kv_head * stride_num_head)
    else:
        num_steps = tl.cdiv(context_len, BLOCK_SIZE)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for step in range(0, num_steps):
        if SELECTED:
            logical_block = tl.load(selected_blocks_ptr + seq * stride_selected_seq + kv_head * stride_selected_head
                                    + step)
        else:
            logical_block = step
        physical_block = tl.load(block_tables_ptr + seq * stride_table_seq + logical_block).to(tl.int64)
        pos = logical_block * BLOCK_SIZE + offs_t                          # (BLOCK_SIZE,) original positions
        valid = pos < context_len
        token = physical_block * stride_cache_block + offs_t * stride_cache_token + kv_head * stride_cache_head
        kv_offs = token[:, None] + offs_d[None, :]                         # (BLOCK_SIZE, BLOCK_D)
        mask = valid[:, None] & (offs_d < HEAD_DIM)[None, :]
        k = tl.load(k_cache_ptr + kv_offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + kv_offs, mask=mask, other=0.0).to(tl.float32)
        if QUANTIZED:                                                      # dequantize on load
            s_offs = physical_block * stride_scale_block + offs_t * stride_scale_token + kv_head
            k = k * tl.load(k_scale_ptr + s_offs, mask=valid, other=0.0)[:, None]
            v = v * tl.load(v_scale_ptr + s_offs, mask=valid, other=0.0)[:, None]
        m_i, l_i, acc = online_softmax_step(q, k, v, valid[None, :], m_i, l_i, acc, scale, True, False, "ieee")
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + seq * stride_out_seq + head[:, None] * stride_out_head + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok)


# ----------------------------------------------------------------------------- checks and launches

def check_quant_cache(k_cache, v_cache, k_scale, v_scale) -> tuple[int, int, int, int]:
    """A quantized paged cache: int8/fp8 values (num_blocks, block_size, nkv, hd), fp32 scales
    (num_blocks, block_size, nkv), contiguous per token. Returns (num_blocks, block_size, nkv, hd)."""
    check_tensor("k_cache", k_cache, 4, QUANT_DTYPES)
    check_tensor("v_cache", v_cache, 4, QUANT_DTYPES)
    check_tensor("k_scale", k_scale, 3, (torch.float32,))
    check_tensor("v_scale", v_scale, 3, (torch.float32,))
    check_same_device(k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale)
    if v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype or v_cache.stride() != k_cache.stride():
        raise ValueError(f"v_cache {tuple(v_cache.shape)} {v_cache.dtype} must match k_cache "
                         f"{tuple(k_cache.shape)} {k_cache.dtype} in shape, dtype and strides")
    num_blocks, block_size, nkv, hd = k_cache.shape
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if tuple(s.shape) != (num_blocks, block_size, nkv) or s.stride(2) != 1:
            raise ValueError(f"{name} has shape {tuple(s.shape)}; expected ({num_blocks}, {block_size}, {nkv}), "
                             "contiguous in its last dimension (one scale per token and KV head)")
    if v_scale.stride() != k_scale.stride():
        raise ValueError(f"v_scale strides {v_scale.stride()} differ from k_scale strides {k_scale.stride()}")
    check_power_of_two("block_size (k_cache.shape[1])", block_size)
    if k_cache.stride(3) != 1 or k_cache.stride(2) != hd:
        raise ValueError(f"k_cache must be contiguous in (heads, head_dim); got strides {k_cache.stride()}")
    return num_blocks, block_size, nkv, hd


def store_kvcache_quant(key, value, k_cache, v_cache, k_scale, v_scale, slot_mapping, *, check=True):
    """Quantize key/value (num_tokens, num_kv_heads, head_dim) fp16/fp32 into an int8 or fp8 paged
    cache, one fp32 scale per token and KV head. slot_mapping as in store_kvcache (-1 = skip);
    ``check`` also checks each slot's range and that none repeats. Returns None (in place)."""
    num_blocks, block_size, nkv, hd = check_quant_cache(k_cache, v_cache, k_scale, v_scale)
    for name, t in (("key", key), ("value", value)):
        check_tensor(name, t, 3, FLOAT_DTYPES)
        check_attention_dtype(name, t)
        if tuple(t.shape[1:]) != (nkv, hd) or t.shape[0] != key.shape[0]:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({key.shape[0]}, {nkv}, {hd})")
    check_tensor("slot_mapping", slot_mapping, 1, INDEX_DTYPES)
    if slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} entries but key has {key.shape[0]} tokens")
    if check:
        slots = slot_mapping.tolist()
        bad = [s for s in slots if not -1 <= s < num_blocks * block_size]
        if bad:
            raise ValueError(f"slot_mapping holds {bad[0]}, neither -1 nor a slot in [0, {num_blocks * block_size})")
        used = [s for s in slots if s >= 0]
        if len(set(used)) != len(used):
            raise ValueError("slot_mapping writes a slot more than once")
    if key.shape[0] == 0:
        return None
    key, value, slot_mapping = key.contiguous(), value.contiguous(), slot_mapping.contiguous()
    store_kvcache_quant_kernel[(key.shape[0], nkv)](
        key, value, k_cache, v_cache, k_scale, v_scale, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_scale.stride(0), k_scale.stride(1),
        HEAD_DIM=hd, BLOCK_D=next_power_of_two(hd), BLOCK_SIZE=block_size,
        QMAX=QMAX[k_cache.dtype], FP8=k_cache.dtype != torch.int8, num_warps=4,
    )
    return None


def decode_meta(num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, quantized: bool,
                selected: bool) -> dict:
    """Constexprs of compressed_decode_kernel. Example: 9 heads / 3 KV heads, head_dim 64, block 16 ->
    QUERIES_PER_KV 3, BLOCK_G 4, BLOCK_D 64."""
    group = num_heads // num_kv_heads
    return dict(QUERIES_PER_KV=group, BLOCK_G=next_power_of_two(group), HEAD_DIM=head_dim,
                BLOCK_D=next_power_of_two(head_dim), BLOCK_SIZE=block_size, QUANTIZED=quantized, SELECTED=selected)


def check_selection(selected_blocks, num_selected, num_seqs: int, nkv: int, lens: list[int], block_size: int,
                    check: bool):
    """Quest's selection, one list per sequence ((B, k) and (B,)) or per sequence and KV head
    ((B, nkv, k) and (B, nkv)); with ``check``, each list's first num_selected entries are distinct
    logical blocks of the sequence. Returns both contiguous."""
    per_head = selected_blocks.dim() == 3
    check_tensor("selected_blocks", selected_blocks, 3 if per_head else 2, INDEX_DTYPES)
    check_tensor("num_selected", num_selected, 2 if per_head else 1, INDEX_DTYPES)
    want = (num_seqs, nkv) if per_head else (num_seqs,)
    if tuple(selected_blocks.shape[:-1]) != want or tuple(num_selected.shape) != want:
        raise ValueError(f"selected_blocks {tuple(selected_blocks.shape)} and num_selected "
                         f"{tuple(num_selected.shape)} need one row per sequence ({num_seqs})"
                         + (f" and KV head ({nkv})" if per_head else ""))
    if check:
        rows = selected_blocks.reshape(-1, selected_blocks.shape[-1]).tolist()
        per = nkv if per_head else 1
        for r, (row, n) in enumerate(zip(rows, num_selected.reshape(-1).tolist())):
            s, used = r // per, -(-lens[r // per] // block_size)
            if not 1 <= n <= len(row):
                raise ValueError(f"num_selected[{s}] = {n} must be in [1, {len(row)}]")
            if any(not 0 <= b < used for b in row[:n]) or len(set(row[:n])) != n:
                raise ValueError(f"selected_blocks[{s}] = {row[:n]} must be distinct logical blocks in "
                                 f"[0, {used}) (sequence {s} has {lens[s]} tokens)")
    return selected_blocks.contiguous(), num_selected.contiguous()


def _decode(q, k_cache, v_cache, k_scale, v_scale, block_tables, context_lens, selected_blocks, num_selected,
            scale, context_lens_cpu, check):
    """Shared checks and launch of the two public decode functions."""
    quantized = k_scale is not None
    if quantized:
        num_blocks, block_size, nkv, hd = check_quant_cache(k_cache, v_cache, k_scale, v_scale)
    else:
        from ._checks import check_kv_cache

        num_blocks, block_size, nkv, hd = check_kv_cache(k_cache, v_cache)
    check_tensor("q", q, 3, FLOAT_DTYPES)
    check_attention_dtype("q", q)
    if q.shape[2] != hd:
        raise ValueError(f"q.shape[2] = {q.shape[2]} but the cache has head_dim {hd}")
    if not quantized and q.dtype != k_cache.dtype:
        raise ValueError(f"q dtype {q.dtype} differs from k_cache dtype {k_cache.dtype}")
    check_heads(q.shape[1], nkv)
    if q.shape[1] // nkv > MAX_GROUP:
        raise ValueError(f"a GQA group of {q.shape[1] // nkv} query heads per KV head; this kernel holds at most {MAX_GROUP}")
    num_seqs = q.shape[0]
    check_tensor("context_lens", context_lens, 1, INDEX_DTYPES)
    if context_lens.shape[0] != num_seqs:
        raise ValueError(f"context_lens has {context_lens.shape[0]} entries, expected {num_seqs}")
    check_table(block_tables, num_seqs, "context_lens")
    check_same_device(q=q, k_cache=k_cache, block_tables=block_tables, context_lens=context_lens)
    lens = context_lens.tolist() if check or context_lens_cpu is None else as_length_list(
        "context_lens_cpu", context_lens_cpu, num_seqs)
    capacity = block_tables.shape[1] * block_size
    check_lengths("context_lens[{s}]", lens, 1, capacity, block_size, block_tables.shape[1])
    if check:
        check_block_ids(block_tables, lens, num_blocks, block_size, "context_lens[{s}]")
    selected = selected_blocks is not None
    if selected:
        selected_blocks, num_selected = check_selection(selected_blocks, num_selected, num_seqs, nkv, lens,
                                                        block_size, check)
    scale = resolve_scale(scale, hd)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    meta = decode_meta(q.shape[1], nkv, hd, block_size, quantized, selected)
    q, block_tables, context_lens = (t.contiguous() for t in (q, block_tables, context_lens))
    dummy = context_lens                                                   # unused pointer arguments
    ks, vs = (k_scale, v_scale) if quantized else (dummy, dummy)
    sel, nsel = (selected_blocks, num_selected) if selected else (dummy, dummy)
    compressed_decode_kernel[(num_seqs, nkv)](
        q, k_cache, v_cache, ks, vs, block_tables, context_lens, sel, nsel, out,
        scale, q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        k_scale.stride(0) if quantized else 0, k_scale.stride(1) if quantized else 0,
        block_tables.stride(0), sel.stride(0) if selected else 0, sel.stride(1) if selected and sel.dim() == 3 else 0,
        nsel.stride(0) if selected else 0, nsel.stride(1) if selected and nsel.dim() == 2 else 0,
        out.stride(0), out.stride(1), **meta, num_warps=4,
    )
    return out


def quantized_decode_attention(q, k_cache, v_cache, k_scale, v_scale, block_tables, context_lens, scale=None, *,
                               context_lens_cpu=None, check=True):
    """Paged decode attention over an int8/fp8 cache with per-token-per-head scales.

    q (num_seqs, num_heads, head_dim) fp16/fp32; k_cache, v_cache (num_blocks, block_size, nkv, hd)
    int8 or float8_e4m3fn; k_scale, v_scale (num_blocks, block_size, nkv) fp32; block_tables and
    context_lens as in paged_decode_attention. Returns (num_seqs, num_heads, head_dim), q's dtype.
    """
    return _decode(q, k_cache, v_cache, k_scale, v_scale, block_tables, context_lens, None, None, scale,
                   context_lens_cpu, check)


def selected_decode_attention(q, k_cache, v_cache, block_tables, context_lens, selected_blocks, num_selected,
                              scale=None, *, k_scale=None, v_scale=None, context_lens_cpu=None, check=True):
    """Decode attention over only the selected logical blocks of each sequence (Quest).

    selected_blocks (num_seqs, max_selected) int32: logical block indices (distinct, each holding
    at least one of the sequence's context_lens[s] tokens), the first num_selected[s] (>= 1) used;
    or (num_seqs, nkv, max_selected) with num_selected (num_seqs, nkv): a list per KV head.
    With k_scale/v_scale the cache is quantized, as in quantized_decode_attention.
    Example: context 14 tokens, block_size 4, selected [[0, 3]], num_selected [2] -> positions 0-3, 12, 13.
    """
    if (k_scale is None) != (v_scale is None):
        raise ValueError("give both k_scale and v_scale (a quantized cache) or neither")
    return _decode(q, k_cache, v_cache, k_scale, v_scale, block_tables, context_lens, selected_blocks, num_selected,
                   scale, context_lens_cpu, check)
