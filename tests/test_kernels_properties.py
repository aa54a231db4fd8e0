"""Property tests (hypothesis) across random shapes, and the kernels working together.

The end-to-end property is the one the lessons teach: write a sequence's K/V into scattered
slots with store_kvcache, then attention through the block table (extend over any cached
prefix, or decode) equals dense attention over the contiguous sequence.
Examples are few on purpose: each one runs kernels in the Triton interpreter.
"""

import budget
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab.kernels import (
    extend_attention,
    naive_attention,
    paged_decode_attention,
    paged_decode_attention_ref,
    store_kvcache,
)
from kernel_utils import make_paged_cache, randn, tensor, zeros

FEW = settings(max_examples=budget.examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FEW
@given(
    block_size=st.sampled_from([4, 16]),
    group=st.sampled_from([1, 2, 4, 8]),
    kv_heads=st.integers(1, 3),
    head_dim=st.sampled_from([8, 16, 32]),
    lens=st.lists(st.integers(1, 80), min_size=1, max_size=3),
    num_splits=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_decode_random_shapes(block_size, group, kv_heads, head_dim, lens, num_splits, seed):
    k_cache, v_cache, block_tables = make_paged_cache(lens, block_size, kv_heads, head_dim, torch.float32, seed=seed)
    q = randn(len(lens), group * kv_heads, head_dim, seed=seed + 1)
    context_lens = tensor(lens, dtype=torch.int32)
    out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, num_splits=num_splits)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)


@FEW
@given(
    block_size=st.sampled_from([4, 16]),
    group=st.sampled_from([1, 4]),
    length=st.integers(1, 40),
    data=st.data(),
)
def test_store_then_attend_equals_dense(block_size, group, length, data):
    prefix = data.draw(st.integers(0, length - 1), label="prefix")
    kv_heads, head_dim = 2, 16
    num_blocks = -(-length // block_size) + 3
    seed = data.draw(st.integers(0, 2**16), label="seed")
    g = torch.Generator().manual_seed(seed)
    table = torch.randperm(num_blocks, generator=g)[: -(-length // block_size)]  # shuffled physical blocks
    block_tables = tensor(table.tolist(), dtype=torch.int32)[None, :]           # (1, blocks used)
    positions = torch.arange(length)
    slots = table[positions // block_size] * block_size + positions % block_size  # (length,)

    k = randn(length, kv_heads, head_dim, seed=seed + 1)                         # the dense sequence
    v = randn(length, kv_heads, head_dim, seed=seed + 2)
    q = randn(length, group * kv_heads, head_dim, seed=seed + 3)
    k_cache = zeros(num_blocks, block_size, kv_heads, head_dim)
    v_cache = zeros(num_blocks, block_size, kv_heads, head_dim)
    store_kvcache(k, v, k_cache, v_cache, tensor(slots.tolist()))

    dense = naive_attention(q, k, v, causal=True)                                # (length, heads, head_dim)
    new = extend_attention(q[prefix:], k_cache, v_cache, block_tables, [prefix], [length - prefix])
    torch.testing.assert_close(new, dense[prefix:], atol=2e-5, rtol=2e-5)
    last = paged_decode_attention(q[-1:], k_cache, v_cache, block_tables, tensor([length], dtype=torch.int32))
    torch.testing.assert_close(last, dense[-1:], atol=2e-5, rtol=2e-5)
