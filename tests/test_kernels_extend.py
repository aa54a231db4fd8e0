"""Prefix (extend) attention against its references, with prefix lengths 0 and non-zero.

Also checks the property the radix cache relies on: attention for the new tokens computed
over a cached prefix equals what a full recomputation gives for those positions, and the
edges of the causal-mask skip (key tiles wholly before a program's first new token are read
without a mask, fp16/bf16 only: TILE_N 64 there).
"""

import pytest
import torch

from kvlab.kernels import (
    KERNEL_MODE,
    extend_attention,
    extend_attention_ref,
    naive_attention,
    paged_decode_attention,
    plan_extend,
)
from kvlab.kernels.extend import launch_extend_attention
from kvlab.kernels.reference import gather_kv
from kernel_utils import as_f64, assert_guard_intact, guarded_empty, make_paged_cache, randn, tensor, tolerance

F32, F16 = torch.float32, torch.float16

# (num_heads, num_kv_heads, head_dim, block_size, dtype, prefix_lens, extend_lens)
CASES = [
    (4, 4, 32, 4, F32, [0, 0], [1, 9]),            # no prefix: plain causal prefill
    (8, 2, 64, 16, F16, [16, 5, 0], [3, 20, 1]),   # prefix on a block boundary, mid-block, none
    (8, 1, 128, 16, F32, [33], [40]),              # GQA 8: 8 new tokens a program, 5 programs
    (4, 1, 32, 4, F16, [8, 3], [0, 6]),            # a request with nothing new
    (2, 2, 8, 4, F32, [4], [5]),                   # head_dim 8: the no-tl.dot path
    (4, 2, 32, 4, F32, [70], [2]),                 # long prefix, two key tiles
    (4, 2, 80, 16, F32, [20, 0], [5, 9]),          # head_dim 80: 128-wide tiles, masked lanes
    (8, 2, 96, 16, F16, [64, 3], [17, 2]),         # head_dim 96, fp16 (unmasked loop over the 64-token prefix)
    (64, 1, 32, 4, F16, [5], [6]),                 # group 64: 4 programs of 16 heads x 4 tokens
]


def _ids(case):
    h, kvh, d, bs, dtype, pre, ext = case
    return f"h{h}kv{kvh}-d{d}-bs{bs}-{str(dtype)[6:]}-pre{'_'.join(map(str, pre))}-ext{'_'.join(map(str, ext))}"


def _inputs(case, seed=0):
    h, kvh, d, bs, dtype, pre, ext = case
    k_cache, v_cache, block_tables = make_paged_cache([p + e for p, e in zip(pre, ext)], bs, kvh, d, dtype, seed=seed)
    q = randn(sum(ext), h, d, dtype=dtype, seed=seed + 1)                 # (total_new, num_heads, head_dim)
    return q, k_cache, v_cache, block_tables


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_extend_matches_reference(case):
    q, k_cache, v_cache, block_tables = _inputs(case)
    pre, ext = case[5], case[6]
    out = extend_attention(q, k_cache, v_cache, block_tables, tensor(pre, dtype=torch.int32), ext)
    ref = extend_attention_ref(q, k_cache, v_cache, block_tables, pre, ext)
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, ref, **tolerance(q.dtype))


def test_cached_prefix_equals_full_recomputation():
    """Radix reuse is exact: new tokens over a cached prefix == the same rows of a full causal pass."""
    h, kvh, d, bs, n = 4, 2, 32, 4, 19
    k_cache, v_cache, block_tables = make_paged_cache([n], bs, kvh, d, F32, seed=7)
    q_all = randn(n, h, d, seed=8)                                          # queries of all n positions
    k = gather_kv(k_cache, block_tables[0], n)
    v = gather_kv(v_cache, block_tables[0], n)
    dense = naive_attention(q_all, k, v, causal=True)                       # (n, num_heads, head_dim)
    for prefix in (0, 8, 13, 18):
        out = extend_attention(q_all[prefix:], k_cache, v_cache, block_tables, [prefix], [n - prefix])
        torch.testing.assert_close(out, dense[prefix:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("prefix, extend", [(63, 3), (62, 3), (64, 2), (110, 20), (0, 130)],
                         ids=["key-tile-ends-at-first-token", "key-tile-ends-one-past-it", "token-opens-a-tile",
                              "second-block-starts-at-126", "no-prefix-three-tiles"])
def test_causal_mask_skip_edges(prefix, extend):
    """fp16 (the unmasked full-tile loop is on): the program's first new token at the end of a key
    tile, at the start of one, and token blocks whose diagonal falls on either side of a tile
    edge; NaN in every unused slot. Against fp32 and float64 references."""
    k_cache, v_cache, block_tables = make_paged_cache([prefix + extend], 16, 1, 32, F16, seed=5,
                                                      poison=float("nan"))
    q = randn(extend, 4, 32, dtype=F16, seed=6)
    plan = plan_extend(1, 4, 1, 32, 16, F16, extend)
    assert plan.meta["SKIP_FULL_MASK"] and plan.meta["TILE_N"] == 64 and plan.meta["BLOCK_M"] == 16
    out = extend_attention(q, k_cache, v_cache, block_tables, [prefix], [extend])
    torch.testing.assert_close(out, extend_attention_ref(q, k_cache, v_cache, block_tables, [prefix], [extend]),
                               **tolerance(F16))
    ref64 = extend_attention_ref(*as_f64(q, k_cache, v_cache, block_tables), [prefix], [extend])
    torch.testing.assert_close(out.cpu().double(), ref64, **tolerance(F16))


def test_one_new_token_equals_decode():
    q, k_cache, v_cache, block_tables = _inputs((8, 2, 32, 4, F32, [9, 0, 4], [1, 1, 1]))
    out = extend_attention(q, k_cache, v_cache, block_tables, [9, 0, 4], [1, 1, 1])
    dec = paged_decode_attention(q, k_cache, v_cache, block_tables, tensor([10, 1, 5], dtype=torch.int32))
    torch.testing.assert_close(out, dec, atol=1e-6, rtol=1e-6)


def test_no_stray_writes_around_output():
    q, k_cache, v_cache, block_tables = _inputs((4, 1, 32, 4, F16, [5, 0], [3, 10]))
    big, out = guarded_empty(tuple(q.shape), q.dtype)
    as_i32 = lambda xs: tensor(xs, dtype=torch.int32, device=q.device)  # noqa: E731
    launch_extend_attention(q, k_cache, v_cache, block_tables, as_i32([0, 3]), as_i32([5, 0]), as_i32([3, 10]), 10,
                            out, 32**-0.5)
    assert_guard_intact(big, out)
    ref = extend_attention_ref(q, k_cache, v_cache, block_tables, [5, 0], [3, 10])
    torch.testing.assert_close(out, ref, **tolerance(F16))


@pytest.mark.skipif(KERNEL_MODE != "native", reason="bf16 is wrong in the Triton interpreter; GPU only")
@pytest.mark.parametrize("case", [
    (32, 8, 128, 16, torch.bfloat16, [100, 0], [37, 64]),
    (16, 2, 80, 16, torch.bfloat16, [130, 63], [70, 2]),    # head_dim 80
    (64, 1, 96, 16, torch.bfloat16, [64, 0], [20, 9]),      # head_dim 96, group 64
], ids=_ids)
def test_extend_bf16_on_gpu(case):
    q, k_cache, v_cache, block_tables = _inputs(case)
    pre, ext = case[5], case[6]
    out = extend_attention(q, k_cache, v_cache, block_tables, pre, ext)
    ref = extend_attention_ref(q, k_cache, v_cache, block_tables, pre, ext)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


def test_strided_table_and_nothing_to_extend():
    q, k_cache, v_cache, block_tables = _inputs((4, 2, 32, 4, F32, [3, 6], [4, 2]))
    wide = tensor([[-1] * block_tables.shape[1]] * 2, dtype=torch.int32).repeat_interleave(2, dim=1)
    wide[:, ::2] = block_tables
    out = extend_attention(q, k_cache, v_cache, wide[:, ::2], [3, 6], [4, 2])
    ref = extend_attention_ref(q, k_cache, v_cache, block_tables, [3, 6], [4, 2])
    torch.testing.assert_close(out, ref, **tolerance(F32))
    assert extend_attention(q[:0], k_cache, v_cache, block_tables, [3, 6], [0, 0]).shape == (0, 4, 32)
