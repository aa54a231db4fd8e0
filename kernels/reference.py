"""Plain-torch references for every kernel, written to be read, not to be fast.

Each paged reference does the obvious thing: gather a sequence's K and V through its block
table into contiguous tensors, then run ordinary attention in fp32. ``naive_attention`` is the
dense baseline over a fully recomputed sequence. The kernel tests compare against these.

Semantics match the kernels exactly, including the in-place ones: ``store_kvcache_ref`` and
``copy_blocks_ref`` modify ``k_cache``/``v_cache`` in place (like the kernels) and also return
them, so ``k2, v2 = store_kvcache_ref(..., k.clone(), v.clone(), ...)`` gives a functional style.

They take the kernels' keyword arguments too (``context_lens_cpu``, ``check``, ...), so the
engine can call either with the same line; host lengths, when given, save the references a copy.

What these references do not do: validate inputs (the kernel wrappers do), or run fast.
"""

from __future__ import annotations

import math

import torch


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` tokens of one sequence, gathered through its block table.

    cache (num_blocks, block_size, num_kv_heads, head_dim) -> (length, num_kv_heads, head_dim).
    Example: block_size 4, block_table [2, 0], length 5 -> tokens 0-3 of block 2, then token 0 of block 0.
    """
    block_size = cache.shape[1]
    num_used = -(-length // block_size)                                    # ceil(length / block_size)
    blocks = cache[block_table[:num_used].long()]                          # (num_used, block_size, kv_heads, head_dim)
    return blocks.reshape(-1, *cache.shape[2:])[:length]                   # (length, kv_heads, head_dim)


def naive_attention(q, k, v, causal=True, scale=None):
    """Dense attention over one sequence, computed in fp32 (float64 inputs: in float64), returned in q's dtype.

    q (T, num_heads, head_dim); k, v (S, num_kv_heads, head_dim) with S >= T. The T queries are
    the LAST T positions of the S-token sequence: query i sits at position S - T + i and, when
    causal, sees keys 0 .. S - T + i. (T == S is the usual full recomputation; T == 1 is decode.)
    Grouped-query attention: query head h uses KV head h // (num_heads // num_kv_heads).

    Example: q, k, v of 3 tokens, causal -> token 0 attends to itself, token 2 to all three.
    """
    T, num_heads, head_dim = q.shape
    S, num_kv_heads, _ = k.shape
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    group = num_heads // num_kv_heads
    compute = torch.promote_types(q.dtype, torch.float32)                  # fp32, or float64 for float64
    k = k.to(compute).repeat_interleave(group, dim=1)                      # (S, num_heads, head_dim)
    v = v.to(compute).repeat_interleave(group, dim=1)                      # (S, num_heads, head_dim)
    scores = torch.einsum("thd,shd->hts", q.to(compute), k) * scale        # (num_heads, T, S)
    if causal:
        q_pos = torch.arange(S - T, S, device=q.device)[:, None]           # (T, 1)
        k_pos = torch.arange(S, device=q.device)[None, :]                  # (1, S)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    probs = torch.softmax(scores, dim=-1)                                  # (num_heads, T, S)
    return torch.einsum("hts,shd->thd", probs, v).to(q.dtype)              # (T, num_heads, head_dim)


def host_ints(values, values_cpu=None) -> list[int]:
    """Host lengths: values_cpu if given, else the values themselves (a tensor is copied to the host)."""
    if values_cpu is not None:
        return [int(x) for x in values_cpu]
    return torch.as_tensor(values).tolist()


def paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale=None, num_splits=None, *,
                               context_lens_cpu=None, check=True):
    """Reference for paged_decode_attention; num_splits and check are accepted and ignored (same maths)."""
    out = torch.empty_like(q)                                              # (num_seqs, num_heads, head_dim)
    for s, n in enumerate(host_ints(context_lens, context_lens_cpu)):
        k = gather_kv(k_cache, block_tables[s], n)                         # (n, kv_heads, head_dim)
        v = gather_kv(v_cache, block_tables[s], n)
        out[s] = naive_attention(q[s : s + 1], k, v, causal=False, scale=scale)[0]
    return out


def extend_attention_ref(q, k_cache, v_cache, block_tables, prefix_lens, extend_lens, scale=None, *,
                         prefix_lens_cpu=None, extend_lens_cpu=None, check=True):
    """Reference for extend_attention: per request, gather prefix + new tokens, causal attention."""
    out = torch.empty_like(q)                                              # (total_new_tokens, num_heads, head_dim)
    start = 0
    pairs = zip(host_ints(prefix_lens, prefix_lens_cpu), host_ints(extend_lens, extend_lens_cpu))
    for r, (p, e) in enumerate(pairs):
        if e == 0:
            continue
        k = gather_kv(k_cache, block_tables[r], p + e)                     # (p + e, kv_heads, head_dim)
        v = gather_kv(v_cache, block_tables[r], p + e)
        out[start : start + e] = naive_attention(q[start : start + e], k, v, causal=True, scale=scale)
        start += e
    return out


def store_kvcache_ref(key, value, k_cache, v_cache, slot_mapping, *, check=True):
    """Reference for store_kvcache: writes in place and returns (k_cache, v_cache).

    Token t goes to block slot // block_size, offset slot % block_size; slot -1 is skipped.
    Example: block_size 4, slot 9 -> block 2, offset 1.
    """
    slots = torch.as_tensor(slot_mapping, device=key.device).long()        # (T,)
    flat = (-1, *k_cache.shape[2:])                                        # slot -> (kv_heads, head_dim)
    if slots.numel() and int(slots.min()) >= 0:                            # no slot skipped: one indexed copy each
        k_cache.view(flat).index_copy_(0, slots, key.to(k_cache.dtype))
        v_cache.view(flat).index_copy_(0, slots, value.to(v_cache.dtype))
        return k_cache, v_cache
    keep = slots >= 0
    k_cache.view(flat)[slots[keep]] = key[keep].to(k_cache.dtype)          # block slot // bs, offset slot % bs
    v_cache.view(flat)[slots[keep]] = value[keep].to(v_cache.dtype)
    return k_cache, v_cache


def copy_blocks_ref(k_cache, v_cache, block_mapping, *, check=True):
    """Reference for copy_blocks: for each (src, dst), block dst becomes a copy of block src.

    Works in place and returns (k_cache, v_cache). Example: [(3, 7)] -> k_cache[7] = k_cache[3].
    """
    pairs = block_mapping.tolist() if isinstance(block_mapping, torch.Tensor) else list(block_mapping)
    for src, dst in pairs:
        k_cache[dst] = k_cache[src]
        v_cache[dst] = v_cache[src]
    return k_cache, v_cache


# ----------------------------------------------------------------------------- fewer bytes, fewer tokens (lesson 11)

# The largest magnitude each quantized KV dtype stores: int8 -127..127 (symmetric), fp8 e4m3 +-448.
QMAX = {torch.int8: 127.0}
if hasattr(torch, "float8_e4m3fn"):
    QMAX[torch.float8_e4m3fn] = 448.0


def quantize_kv_ref(x, kv_dtype=torch.int8):
    """Symmetric quantization with one scale per token and KV head.

    x (N, num_kv_heads, head_dim) float -> (xq (N, num_kv_heads, head_dim) kv_dtype, scale (N, num_kv_heads) fp32)
    with scale = max|x| / QMAX over the head's head_dim values (1 for an all-zero head) and
    int8: xq = clamp(floor(x / scale + 0.5), -127, 127); fp8 e4m3: xq = (x / scale) rounded to the nearest e4m3.
    Example (int8): a head [0.5, -1.0] -> scale 1/127, xq [64, -127]; dequantized [0.504, -1.0].
    """
    if kv_dtype not in QMAX:
        raise ValueError(f"kv_dtype must be one of {list(QMAX)}, got {kv_dtype}")
    x = x.float()
    scale = x.abs().amax(dim=-1) / QMAX[kv_dtype]                           # (N, num_kv_heads)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    y = x / scale[..., None]                                                # (N, num_kv_heads, head_dim) in [-QMAX, QMAX]
    if kv_dtype == torch.int8:
        return torch.clamp(torch.floor(y + 0.5), -127, 127).to(torch.int8), scale
    return y.to(kv_dtype), scale


def dequantize_kv_ref(xq, scale):
    """xq (..., head_dim) int8/fp8, scale (...) fp32 -> xq * scale in fp32."""
    return xq.float() * scale[..., None]


def store_kvcache_quant_ref(key, value, k_cache, v_cache, k_scale, v_scale, slot_mapping, *, check=True):
    """Reference for store_kvcache_quant: quantize each token's heads, write values and scales in place.

    k_cache, v_cache (num_blocks, block_size, num_kv_heads, head_dim) int8/fp8;
    k_scale, v_scale (num_blocks, block_size, num_kv_heads) fp32; slot -1 is skipped.
    """
    block_size = k_cache.shape[1]
    kq, ks = quantize_kv_ref(key, k_cache.dtype)
    vq, vs = quantize_kv_ref(value, v_cache.dtype)
    for t, slot in enumerate(torch.as_tensor(slot_mapping).tolist()):
        if slot < 0:
            continue
        b, o = slot // block_size, slot % block_size
        k_cache[b, o], v_cache[b, o], k_scale[b, o], v_scale[b, o] = kq[t], vq[t], ks[t], vs[t]
    return k_cache, v_cache, k_scale, v_scale


def selected_positions(selected_blocks, num_selected: int, context_len: int, block_size: int) -> torch.Tensor:
    """Positions of the selected logical blocks that lie before context_len, block by block.
    Example: blocks [0, 3], block_size 4, context_len 14 -> [0, 1, 2, 3, 12, 13]."""
    blocks = torch.as_tensor(selected_blocks)[:num_selected].long()
    pos = (blocks[:, None] * block_size + torch.arange(block_size)[None, :]).reshape(-1)
    return pos[pos < context_len]


def compressed_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale=None, *,
                                    k_scale=None, v_scale=None, selected_blocks=None, num_selected=None,
                                    context_lens_cpu=None, check=True):
    """Reference for quantized_decode_attention and selected_decode_attention (one function, two options).

    With k_scale/v_scale the cache is int8/fp8 and is dequantized (value x its token-and-head
    scale) before attention. With selected_blocks (num_seqs, max_selected) and num_selected
    (num_seqs,), sequence s attends only to the positions of its first num_selected[s] logical
    blocks (Quest); with (num_seqs, nkv, max_selected) and (num_seqs, nkv), KV head h's query
    heads attend only to head h's list; otherwise to all of [0, context_lens[s]).
    """
    if k_scale is not None:
        k_cache, v_cache = dequantize_kv_ref(k_cache, k_scale), dequantize_kv_ref(v_cache, v_scale)
    out = torch.empty_like(q)                                              # (num_seqs, num_heads, head_dim)
    block_size, nkv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // nkv
    for s, n in enumerate(host_ints(context_lens, context_lens_cpu)):
        k = gather_kv(k_cache, block_tables[s], n)                         # (n, kv_heads, head_dim)
        v = gather_kv(v_cache, block_tables[s], n)
        if selected_blocks is None:
            out[s] = naive_attention(q[s : s + 1], k, v, causal=False, scale=scale)[0]
            continue
        rows = selected_blocks[s].cpu().reshape(-1, selected_blocks.shape[-1])   # (1 or nkv, max_selected)
        nums = num_selected[s].reshape(-1).tolist()
        for h in range(nkv):
            r = h if len(rows) > 1 else 0
            pos = selected_positions(rows[r], int(nums[r]), n, block_size).to(k.device)
            heads = slice(h * group, (h + 1) * group)
            out[s, heads] = naive_attention(q[s : s + 1, heads], k[pos, h : h + 1], v[pos, h : h + 1],
                                            causal=False, scale=scale)[0]   # (group, head_dim)
    return out
