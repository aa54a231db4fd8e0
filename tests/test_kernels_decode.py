"""Paged decode attention against its references: GQA, ragged contexts, shuffled blocks, split-K,
head_dim 80/96 (padded tiles), groups wider than one program's 16 rows.

Sizes are tiny on purpose: in the Triton interpreter one (program x loop iteration) costs
about 2.5 ms, and a decode program loops over ceil(context_len / 64) tiles.
"""

import pytest
import torch

from kvlab.kernels import KERNEL_MODE, naive_attention, paged_decode_attention, paged_decode_attention_ref, plan_decode
from kvlab.kernels.paged_decode import launch_paged_decode
from kvlab.kernels.reference import gather_kv
from kernel_utils import (
    as_f64,
    assert_guard_intact,
    guarded_empty,
    make_paged_cache,
    randn,
    tensor,
    tolerance,
    zeros,
)

F32, F16 = torch.float32, torch.float16

# (num_heads, num_kv_heads, head_dim, block_size, dtype, context_lens, num_splits)
CASES = [
    (4, 4, 32, 4, F32, [1, 4, 7, 12], 1),         # GQA 1; lengths 4 and 12 are whole blocks
    (8, 2, 64, 16, F16, [1, 16, 37, 64], 1),      # GQA 4; 64 = exactly one tile
    (8, 1, 128, 16, F32, [5, 32, 90], 1),         # GQA 8, head_dim 128, two tiles
    (8, 1, 32, 4, F16, [3, 8, 20], 1),            # GQA 8, lesson block size
    (4, 1, 64, 4, F32, [1, 40, 130], 4),          # split-K, some splits empty for short contexts
    (8, 2, 128, 16, F16, [200, 1, 48], 3),        # split-K, fp16, head_dim 128
    (2, 1, 16, 4, F32, [3, 70], 8),               # more splits than tiles
    (2, 2, 8, 4, F32, [1, 9], 1),                 # head_dim 8: the no-tl.dot path
    (4, 2, 80, 16, F32, [5, 70], 1),              # head_dim 80: 128-wide tiles, lanes 80-127 masked
    (8, 2, 96, 16, F16, [33, 1, 64], 2),          # head_dim 96, fp16, split-K
    (64, 1, 32, 4, F32, [9, 70], 1),              # group 64: four programs of 16 rows per KV head
    (24, 1, 16, 4, F16, [20], 3),                 # group 24: a full chunk and a half-padded one, split-K
    (6, 2, 12, 4, F32, [7, 30], None),            # head_dim 12 (tiles of 16), the run-time plan
]


def _ids(case):
    h, kvh, d, bs, dtype, lens, splits = case
    return f"h{h}kv{kvh}-d{d}-bs{bs}-{str(dtype)[6:]}-lens{'_'.join(map(str, lens))}-splits{splits}"


def _inputs(case, seed=0):
    h, kvh, d, bs, dtype, lens, splits = case
    k_cache, v_cache, block_tables = make_paged_cache(lens, bs, kvh, d, dtype, seed=seed)
    q = randn(len(lens), h, d, dtype=dtype, seed=seed + 1)               # (num_seqs, num_heads, head_dim)
    context_lens = tensor(lens, dtype=torch.int32, device=q.device)
    return q, k_cache, v_cache, block_tables, context_lens


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_decode_matches_reference(case):
    q, k_cache, v_cache, block_tables, context_lens = _inputs(case)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, num_splits=case[-1])
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, ref, **tolerance(q.dtype))
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before), "decode must not write the cache"


def test_reference_agrees_with_naive_recomputation():
    """The gather reference equals the last row of dense causal attention over the whole sequence."""
    q, k_cache, v_cache, block_tables, context_lens = _inputs(CASES[2])
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    for s, n in enumerate(context_lens.tolist()):
        k = gather_kv(k_cache, block_tables[s], n)                          # (n, kv_heads, head_dim)
        v = gather_kv(v_cache, block_tables[s], n)
        q_full = randn(n, q.shape[1], q.shape[2], seed=s)                   # queries for earlier positions
        q_full[-1] = q[s]
        dense = naive_attention(q_full, k, v, causal=True)                  # (n, num_heads, head_dim)
        torch.testing.assert_close(ref[s], dense[-1], atol=1e-5, rtol=1e-5)


def test_result_does_not_depend_on_where_blocks_sit():
    """Same logical sequences, two different shuffles of the physical blocks: identical output."""
    h, kvh, d, bs, lens = 8, 2, 32, 4, [6, 13, 16]
    k1, v1, t1 = make_paged_cache(lens, bs, kvh, d, F32, seed=3)
    q = randn(len(lens), h, d, seed=4)
    context_lens = tensor(lens, dtype=torch.int32, device=q.device)
    # Move every block to a new place and rewrite the tables to match.
    perm = torch.randperm(k1.shape[0], generator=torch.Generator().manual_seed(5)).to(q.device)
    k2, v2 = torch.empty_like(k1), torch.empty_like(v1)
    k2[perm], v2[perm] = k1, v1
    t2 = torch.where(t1 >= 0, perm[t1.long().clamp(min=0)].to(t1.dtype), t1)
    assert not torch.equal(t1, t2)
    out1 = paged_decode_attention(q, k1, v1, t1, context_lens)
    out2 = paged_decode_attention(q, k2, v2, t2, context_lens)
    assert torch.equal(out1, out2)


def test_split_k_equals_single_pass():
    q, k_cache, v_cache, block_tables, context_lens = _inputs((4, 2, 32, 16, F32, [150, 3], 1))
    one = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, num_splits=1)
    for splits in (2, 3):
        many = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, num_splits=splits)
        torch.testing.assert_close(many, one, atol=1e-6, rtol=1e-6)


def test_custom_scale_and_int64_indices():
    q, k_cache, v_cache, block_tables, context_lens = _inputs((4, 1, 32, 4, F32, [9, 2], 1))
    out = paged_decode_attention(q, k_cache, v_cache, block_tables.long(), context_lens.long(), scale=0.3)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale=0.3)
    torch.testing.assert_close(out, ref, **tolerance(F32))


def plan_for(q, k_cache, context_lens, **kwargs):
    """The plan paged_decode_attention would make for these tensors (kwargs: num_splits, num_sms)."""
    _, block_size, kv_heads, head_dim = k_cache.shape
    return plan_decode(q.shape[0], q.shape[1], kv_heads, head_dim, block_size, q.dtype,
                       context_lens=context_lens.tolist(), **kwargs)


@pytest.mark.parametrize("num_splits, head_dim", [(1, 32), (2, 32), (3, 80)])
def test_no_stray_writes_around_output(num_splits, head_dim):
    """Write into a strided view of a sentinel-filled buffer: only the view may change."""
    q, k_cache, v_cache, block_tables, context_lens = _inputs((8, 2, head_dim, 4, F16, [5, 70], 1))
    big, out = guarded_empty(tuple(q.shape), q.dtype)
    plan = plan_for(q, k_cache, context_lens, num_splits=num_splits)
    launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, head_dim**-0.5, plan)
    assert_guard_intact(big, out)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    torch.testing.assert_close(out, ref, **tolerance(F16))


@pytest.mark.parametrize("head_dim", [32, 80])
def test_result_does_not_depend_on_the_split_count(head_dim):
    """Forced split counts and the plan a 132-SM GPU would choose all match the fp32 and float64
    references; unused slots hold NaN, so a kernel that loaded one (even with weight 0) would show
    it; with head_dim 80 the padded lanes 80-127 of the last KV head point into such slots.
    Splits: 1 (one pass), 3 (uneven pieces of the 4 tiles, and 2 empty splits for the 1-tile
    sequences), and the GPU's per-sequence plan (2 pieces of 2 tiles); more splits than tiles is
    CASES' ``splits8`` case (each launch costs seconds in the interpreter)."""
    lens = [1, 37, 200]
    k_cache, v_cache, block_tables = make_paged_cache(lens, 16, 2, head_dim, F32, seed=11, poison=float("nan"))
    q = randn(3, 8, head_dim, seed=12)
    context_lens = tensor(lens, dtype=torch.int32)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    ref64 = paged_decode_attention_ref(*as_f64(q, k_cache, v_cache, block_tables, context_lens))
    gpu_plan = plan_for(q, k_cache, context_lens, num_sms=132)
    assert gpu_plan.num_splits > 1 and gpu_plan.seq_splits == [1, 1, 2]   # 200 tokens = 4 tiles, in pieces of 2
    plans = [plan_for(q, k_cache, context_lens, num_splits=s) for s in (1, 3)] + [gpu_plan]
    for plan in plans:
        big, out = guarded_empty(tuple(q.shape), q.dtype)
        launch_paged_decode(q, k_cache, v_cache, block_tables, context_lens, out, head_dim**-0.5, plan)
        assert_guard_intact(big, out)
        torch.testing.assert_close(out, ref, atol=2e-6, rtol=2e-6, msg=lambda m: f"{plan.explain()}\n{m}")
        torch.testing.assert_close(out.cpu().double(), ref64, atol=2e-6, rtol=2e-6)


def test_non_contiguous_query():
    q, k_cache, v_cache, block_tables, context_lens = _inputs((4, 2, 32, 4, F32, [5, 11], 1))
    q_wide = zeros(q.shape[0], q.shape[1], 2 * q.shape[2], device=q.device)
    q_wide[..., ::2] = q
    q_strided = q_wide[..., ::2]                                            # stride 2 in head_dim
    out = paged_decode_attention(q_strided, k_cache, v_cache, block_tables, context_lens)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    torch.testing.assert_close(out, ref, **tolerance(F32))


@pytest.mark.skipif(KERNEL_MODE != "native", reason="bf16 is wrong in the Triton interpreter; GPU only")
@pytest.mark.parametrize("case", [
    (32, 8, 128, 16, torch.bfloat16, [1, 300, 64], 2),
    (32, 8, 128, 16, torch.bfloat16, [5000, 17], None),     # the GPU's own plan: the long one is split
    (16, 2, 80, 16, torch.bfloat16, [700, 5], None),        # head_dim 80
    (64, 1, 96, 16, torch.bfloat16, [2000], None),          # head_dim 96, group 64: 4 row chunks, split
], ids=_ids)
def test_decode_bf16_on_gpu(case):
    q, k_cache, v_cache, block_tables, context_lens = _inputs(case)
    out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, num_splits=case[-1])
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


def test_strided_index_tensors_and_empty_batch():
    q, k_cache, v_cache, block_tables, context_lens = _inputs((4, 2, 32, 4, F32, [5, 11], 1))
    wide_table = zeros(block_tables.shape[0], 2 * block_tables.shape[1], dtype=torch.int32)
    wide_table[:, ::2] = block_tables
    wide_lens = zeros(4, dtype=torch.int32)
    wide_lens[::2] = context_lens
    out = paged_decode_attention(q, k_cache, v_cache, wide_table[:, ::2], wide_lens[::2])
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens)
    torch.testing.assert_close(out, ref, **tolerance(F32))
    empty = paged_decode_attention(q[:0], k_cache, v_cache, block_tables[:0], context_lens[:0])
    assert empty.shape == (0, 4, 32)
