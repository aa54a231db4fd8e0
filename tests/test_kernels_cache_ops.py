"""KV store into slots (with padding) and copy-on-write block copies, against the references.

The caches sit inside bigger SENTINEL-filled buffers (padded along the block dimension), and
the whole cache is compared with the reference, so a write to any wrong slot or block fails.
"""

import pytest
import torch

from kvlab.kernels import copy_blocks, copy_blocks_ref, store_kvcache, store_kvcache_ref
from kernel_utils import assert_guard_intact, full, guarded_copy, make_paged_cache, randn, tensor, zeros

F32, F16 = torch.float32, torch.float16


def _guarded_caches(seq_lens, block_size, kv_heads, head_dim, dtype):
    k_cache, v_cache, _ = make_paged_cache(seq_lens, block_size, kv_heads, head_dim, dtype)
    (k_big, k_view), (v_big, v_view) = guarded_copy(k_cache, dims=[0]), guarded_copy(v_cache, dims=[0])
    return k_big, k_view, v_big, v_view


# (num_kv_heads, head_dim, block_size, dtype, slot_mapping)
STORE_CASES = [
    (2, 32, 4, F32, [0, -1, 13, 7, -1, 3]),         # padding slots skipped
    (1, 16, 4, F16, list(range(40, 0, -1)) + [-1]),  # 41 tokens: more than one program, reversed slots
    (3, 8, 16, F32, [5, 17, 16, -1]),                # 3 KV heads: a row of 24 elements, padded to 32
    (8, 128, 16, F16, [31, 0, 15, 16]),              # real head size: 4 tokens a program
]


@pytest.mark.parametrize("case", STORE_CASES, ids=lambda c: f"kv{c[0]}-d{c[1]}-bs{c[2]}-{str(c[3])[6:]}-n{len(c[4])}")
def test_store_matches_reference(case):
    kv_heads, head_dim, block_size, dtype, slots = case
    k_big, k_cache, v_big, v_cache = _guarded_caches([45, 20], block_size, kv_heads, head_dim, dtype)
    key = randn(len(slots), kv_heads, head_dim, dtype=dtype, seed=2)       # (num_tokens, kv_heads, head_dim)
    value = randn(len(slots), kv_heads, head_dim, dtype=dtype, seed=3)
    slot_mapping = tensor(slots, dtype=torch.int64, device=key.device)
    k_ref, v_ref = store_kvcache_ref(key, value, k_cache.clone(), v_cache.clone(), slot_mapping)
    assert store_kvcache(key, value, k_cache, v_cache, slot_mapping.to(torch.int32)) is None
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    assert_guard_intact(k_big, k_cache)
    assert_guard_intact(v_big, v_cache)


def test_store_all_padding_and_empty_batch_change_nothing():
    k_big, k_cache, v_big, v_cache = _guarded_caches([8], 4, 2, 16, F32)
    before = k_cache.clone()
    key = randn(3, 2, 16)
    store_kvcache(key, key, k_cache, v_cache, full((3,), -1, dtype=torch.int64))
    store_kvcache(key[:0], key[:0], k_cache, v_cache, zeros(0, dtype=torch.int64))
    assert torch.equal(k_cache, before)
    assert_guard_intact(k_big, k_cache)


def test_store_non_contiguous_key():
    k_big, k_cache, v_big, v_cache = _guarded_caches([8], 4, 2, 16, F32)
    kv = randn(5, 2, 2, 16)                                                 # (tokens, k/v, kv_heads, head_dim)
    key, value = kv[:, 0], kv[:, 1]                                         # strided views
    slots = tensor([1, 2, 3, -1, 9])
    k_ref, v_ref = store_kvcache_ref(key, value, k_cache.clone(), v_cache.clone(), slots)
    store_kvcache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


@pytest.mark.parametrize(
    "case",
    [
        (2, 32, 4, F32, [(0, 3), (2, 1)]),
        (1, 16, 4, F16, tensor([[4, 0], [4, 2], [5, 3]], dtype=torch.int32)),  # one source, two copies
        (8, 128, 16, F16, tensor([[1, 2]], dtype=torch.int64)),                 # 4 chunks of 4096
    ],
    ids=["list-fp32", "int32-tensor-fp16", "int64-tensor-real-size"],
)
def test_copy_blocks_matches_reference(case):
    kv_heads, head_dim, block_size, dtype, mapping = case
    k_big, k_cache, v_big, v_cache = _guarded_caches([9, 7], block_size, kv_heads, head_dim, dtype)
    k_ref, v_ref = copy_blocks_ref(k_cache.clone(), v_cache.clone(), mapping)
    assert copy_blocks(k_cache, v_cache, mapping) is None
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    assert_guard_intact(k_big, k_cache)
    assert_guard_intact(v_big, v_cache)


def test_copy_on_write_then_diverge():
    """Fork: two sequences share block 1; before seq B writes, COW gives it block 4."""
    k_big, k_cache, v_big, v_cache = _guarded_caches([6], 4, 2, 16, F32)   # blocks 0..4 (3 spare)
    shared = k_cache[1].clone()
    copy_blocks(k_cache, v_cache, [(1, 4)])
    store_kvcache(randn(1, 2, 16, seed=9), randn(1, 2, 16, seed=10), k_cache, v_cache, tensor([4 * 4 + 2]))
    assert torch.equal(k_cache[1], shared), "the original block must be untouched"
    assert torch.equal(k_cache[4, :2], shared[:2]) and not torch.equal(k_cache[4, 2], shared[2])
    copy_blocks(k_cache, v_cache, [])                                       # no pairs: nothing happens


def test_store_and_copy_bf16():
    """bf16 arithmetic is broken in the interpreter, but pure moves of bf16 data are exact."""
    k_big, k_cache, v_big, v_cache = _guarded_caches([7], 4, 2, 16, torch.bfloat16)
    key, value = randn(3, 2, 16, dtype=torch.bfloat16), randn(3, 2, 16, dtype=torch.bfloat16, seed=4)
    slots = tensor([1, -1, 14])
    k_ref, v_ref = store_kvcache_ref(key, value, k_cache.clone(), v_cache.clone(), slots)
    k_ref, v_ref = copy_blocks_ref(k_ref, v_ref, [(0, 3)])
    store_kvcache(key, value, k_cache, v_cache, slots)
    copy_blocks(k_cache, v_cache, [(0, 3)])
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    assert_guard_intact(k_big, k_cache)


def test_store_strided_slot_mapping():
    k_big, k_cache, v_big, v_cache = _guarded_caches([8], 4, 2, 16, F32)
    key, value = randn(3, 2, 16), randn(3, 2, 16, seed=5)
    wide = tensor([2, 0, -1, 0, 11, 0])                                     # slots 2, -1, 11 at stride 2
    k_ref, v_ref = store_kvcache_ref(key, value, k_cache.clone(), v_cache.clone(), wide[::2])
    store_kvcache(key, value, k_cache, v_cache, wide[::2])
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
