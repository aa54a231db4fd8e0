"""Write new K and V into their slots of the paged cache (vLLM's ``reshape_and_cache``).

Token t of a batch goes to ``slot_mapping[t] = block_id * block_size + offset``; a slot of -1
means "padding, skip". One program writes ``TOKENS`` tokens; a token's K (all KV heads) is
one contiguous row of ``num_kv_heads * head_dim`` elements in both ``key`` and the cache.

What this module does not handle: dtype conversion (key and cache must share a dtype),
fp8 quantisation scales, or choosing slots (the block manager does that).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import FLOAT_DTYPES, INDEX_DTYPES, check_kv_cache, check_same_device, check_tensor, next_power_of_two


@triton.jit
def store_kvcache_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    num_tokens,
    stride_key_token, stride_value_token,
    stride_cache_block, stride_cache_token,
    ROW: tl.constexpr,        # num_kv_heads * head_dim: one token's K
    BLOCK_ROW: tl.constexpr,  # ROW padded to a power of two
    BLOCK_SIZE: tl.constexpr,
    TOKENS: tl.constexpr,     # tokens per program
):
    offs_t = tl.program_id(0) * TOKENS + tl.arange(0, TOKENS)              # (TOKENS,) token indices
    offs_c = tl.arange(0, BLOCK_ROW)                                       # (BLOCK_ROW,) element of the row
    slot = tl.load(slot_mapping_ptr + offs_t, mask=offs_t < num_tokens, other=-1).to(tl.int64)  # (TOKENS,)
    block = slot // BLOCK_SIZE
    offset_in_block = slot % BLOCK_SIZE
    mask = (slot >= 0)[:, None] & (offs_c < ROW)[None, :]                  # (TOKENS, BLOCK_ROW) padding skipped
    dst = block[:, None] * stride_cache_block + offset_in_block[:, None] * stride_cache_token + offs_c[None, :]
    k = tl.load(key_ptr + offs_t[:, None] * stride_key_token + offs_c[None, :], mask=mask)     # (TOKENS, BLOCK_ROW)
    v = tl.load(value_ptr + offs_t[:, None] * stride_value_token + offs_c[None, :], mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def store_meta(num_kv_heads: int, head_dim: int, block_size: int) -> dict:
    """Constexprs of store_kvcache_kernel. Example: 8 KV heads x 128 -> ROW 1024, TOKENS 4."""
    row = num_kv_heads * head_dim
    block_row = next_power_of_two(row)
    return dict(ROW=row, BLOCK_ROW=block_row, BLOCK_SIZE=block_size, TOKENS=min(64, max(1, 4096 // block_row)))


def launch_store_kvcache(key, value, k_cache, v_cache, slot_mapping):
    """Launch without any checks (for benchmarks); prefer store_kvcache."""
    num_tokens, num_kv_heads, head_dim = key.shape
    meta = store_meta(num_kv_heads, head_dim, k_cache.shape[1])
    grid = (triton.cdiv(num_tokens, meta["TOKENS"]),)
    store_kvcache_kernel[grid](
        key, value, k_cache, v_cache, slot_mapping,
        num_tokens,
        key.stride(0), value.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        **meta, num_warps=4,
    )


def store_kvcache(key, value, k_cache, v_cache, slot_mapping, *, check=True):
    """Write key/value (num_tokens, num_kv_heads, head_dim) into the paged cache, in place.

    slot_mapping: (num_tokens,) int64 or int32; slot = block_id * block_size + offset, -1 = skip.
    check: also check every slot's range and that none is written twice (reads slot_mapping on
    the host: a sync on a GPU). ``check=False`` (the hot path) checks shapes, dtypes and devices only.
    Returns None; k_cache and v_cache are modified.

    Example (block_size 4): slot_mapping [9, -1, 0] writes token 0 to block 2 offset 1,
    skips token 1, writes token 2 to block 0 offset 0.
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    for name, t in (("key", key), ("value", value)):
        check_tensor(name, t, 3, FLOAT_DTYPES)
        if tuple(t.shape[1:]) != (num_kv_heads, head_dim):
            raise ValueError(
                f"{name} has shape {tuple(t.shape)}; expected (num_tokens, {num_kv_heads}, {head_dim}) to match the cache"
            )
        if t.dtype != k_cache.dtype:
            raise ValueError(f"{name} dtype {t.dtype} differs from k_cache dtype {k_cache.dtype}")
    if value.shape[0] != key.shape[0]:
        raise ValueError(f"value has {value.shape[0]} tokens but key has {key.shape[0]}")
    check_tensor("slot_mapping", slot_mapping, 1, INDEX_DTYPES)
    if slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} entries but key has {key.shape[0]} tokens")
    check_same_device(key=key, value=value, k_cache=k_cache, slot_mapping=slot_mapping)
    num_slots = num_blocks * block_size
    bad = (slot_mapping < -1) | (slot_mapping >= num_slots) if check else None
    if check and bool(bad.any()):
        t = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"slot_mapping[{t}] = {int(slot_mapping[t])} is neither -1 nor a slot in [0, {num_slots}) "
            f"({num_blocks} blocks x block_size {block_size})"
        )
    used = slot_mapping[slot_mapping >= 0] if check else None
    if check and used.numel() != torch.unique(used).numel():
        values, counts = torch.unique(used, return_counts=True)
        raise ValueError(f"slot_mapping writes slot {int(values[counts > 1][0])} more than once")
    if key.shape[0] == 0:
        return None
    key = key.contiguous()      # one token's heads x head_dim must be one run of memory
    value = value.contiguous()
    slot_mapping = slot_mapping.contiguous()
    launch_store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    return None
