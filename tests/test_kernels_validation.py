"""Every input check of the kernel wrappers: a bad argument raises ValueError naming it.

In the interpreter an out-of-bounds access is silent, so these checks are the only guard;
each case below starts from valid inputs and breaks exactly one thing. Lengths, positions and
block ids are integers: floats and bools are refused (numpy integers and int tensors are fine).
"""

import numpy as np
import pytest
import torch

from kvlab.kernels import (
    KERNEL_MODE,
    copy_blocks,
    extend_attention,
    paged_decode_attention,
    store_kvcache,
)
from kernel_utils import make_paged_cache, randn, tensor, zeros


def decode_args(**change):
    """Valid decode inputs (2 sequences, 4 query heads, 2 KV heads, head_dim 16, block size 4)."""
    k_cache, v_cache, block_tables = make_paged_cache([5, 8], 4, 2, 16, torch.float32)
    args = dict(q=randn(2, 4, 16), k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
                context_lens=tensor([5, 8], dtype=torch.int32))
    return {**args, **{k: (v(args) if callable(v) else v) for k, v in change.items()}}


def bad_cache(shape=(6, 4, 2, 16), dtype=torch.float32):
    return zeros(shape, dtype=dtype)


DECODE_ERRORS = [
    ("q-not-tensor", dict(q=lambda a: a["q"].tolist()), "q must be a torch.Tensor"),
    ("q-ndim", dict(q=lambda a: a["q"][0]), r"q must have 3 dimensions"),
    ("q-int", dict(q=lambda a: a["q"].int()), "q has dtype int32"),
    ("q-head-dim", dict(q=randn(2, 4, 32)), r"q.shape\[2\] = 32 .* head_dim 16"),
    ("q-dtype-vs-cache", dict(q=lambda a: a["q"].half()), "q dtype torch.float16 differs from k_cache"),
    ("q-meta-device", dict(q=lambda a: a["q"].to("meta")), "q is on device meta"),
    ("heads-not-divisible", dict(q=randn(2, 3, 16)), r"num_heads=3 .* num_kv_heads=2"),
    ("k-ndim", dict(k_cache=lambda a: a["k_cache"][0]), "k_cache must have 4 dimensions"),
    ("v-shape", dict(v_cache=lambda a: a["v_cache"][:-1].clone()), "v_cache shape"),
    ("v-dtype", dict(v_cache=lambda a: a["v_cache"].half()), "v_cache dtype"),
    ("v-strides", dict(v_cache=lambda a: zeros(a["v_cache"].shape[0] * 2, *a["v_cache"].shape[1:])[::2]),
     "v_cache strides"),
    ("block-size-not-pow2", dict(k_cache=bad_cache((6, 6, 2, 16)), v_cache=bad_cache((6, 6, 2, 16))),
     r"block_size \(k_cache.shape\[1\]\) must be a power of two.*6"),
    ("head-dim-too-big", dict(q=randn(2, 4, 264), k_cache=bad_cache((6, 4, 2, 264)), v_cache=bad_cache((6, 4, 2, 264))),
     r"head_dim \(k_cache.shape\[3\]\) must be in \[1, 256\], got 264"),
    ("cache-not-contiguous",
     dict(k_cache=bad_cache((6, 4, 16, 2)).transpose(2, 3), v_cache=bad_cache((6, 4, 16, 2)).transpose(2, 3)),
     "k_cache must be contiguous in its last two dimensions"),
    ("lens-float", dict(context_lens=tensor([5.0, 8.0])), "context_lens has dtype float32"),
    ("lens-count", dict(context_lens=tensor([5], dtype=torch.int32)), "context_lens has 1 entries, expected 2"),
    ("lens-zero", dict(context_lens=tensor([0, 8], dtype=torch.int32)), r"context_lens\[0\] = 0"),
    ("lens-over-capacity", dict(context_lens=tensor([5, 13], dtype=torch.int32)),
     r"context_lens\[1\] = 13 exceeds .* 3 blocks x block_size 4 = 12"),
    ("table-ndim", dict(block_tables=lambda a: a["block_tables"][0]), "block_tables must have 2 dimensions"),
    ("table-float", dict(block_tables=lambda a: a["block_tables"].float()), "block_tables has dtype float32"),
    ("table-rows", dict(block_tables=lambda a: a["block_tables"][:1]), "block_tables has 1 rows but context_lens has 2"),
    ("block-id-too-big", dict(block_tables=lambda a: a["block_tables"].index_fill(1, tensor([1]), 99)),
     r"block_tables\[0, 1\] = 99 is not a block id in \[0, 7\)"),
    ("block-id-negative", dict(block_tables=lambda a: a["block_tables"].index_fill(1, tensor([0]), -1)),
     r"block_tables\[0, 0\] = -1"),
    ("cpu-lens-float", dict(context_lens_cpu=[5, 7.5]), r"context_lens_cpu\[1\] = 7.5 is not an int \(float\)"),
    ("cpu-lens-bool", dict(context_lens_cpu=[True, 8]), r"context_lens_cpu\[0\] = True is not an int \(bool\)"),
    ("cpu-lens-count", dict(context_lens_cpu=[5]), "context_lens_cpu has 1 entries, expected 2"),
    ("cpu-lens-disagree", dict(context_lens_cpu=[5, 7]), r"context_lens_cpu = \[5, 7\] differs from context_lens = \[5, 8\]"),
    ("cpu-lens-over-capacity", dict(context_lens_cpu=[5, 13], check=False),
     r"context_lens_cpu\[1\] = 13 exceeds .* = 12 tokens"),
    ("cpu-lens-zero", dict(context_lens_cpu=[0, 8], check=False), r"context_lens_cpu\[0\] = 0"),
]


@pytest.mark.parametrize("change, match", [c[1:] for c in DECODE_ERRORS], ids=[c[0] for c in DECODE_ERRORS])
def test_decode_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        paged_decode_attention(**decode_args(**change))


def test_decode_accepts_numpy_and_unchecked_host_lengths():
    """numpy integers are ints; check=False with host lengths gives the same answer."""
    args = decode_args()
    want = paged_decode_attention(**args)
    got = paged_decode_attention(**args, context_lens_cpu=np.array([5, 8]), num_splits=np.int64(2), check=False)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("num_splits", [0, 1.5, True, 5000, "2"])
def test_decode_rejects_num_splits(num_splits):
    with pytest.raises(ValueError, match="num_splits"):
        paged_decode_attention(**decode_args(), num_splits=num_splits)


def test_decode_rejects_bad_scale():
    with pytest.raises(ValueError, match="scale must be a finite number"):
        paged_decode_attention(**decode_args(), scale=float("nan"))


def test_padding_entries_past_the_context_are_not_checked():
    args = decode_args()
    want = paged_decode_attention(**args)
    args["block_tables"][0, 2] = 12345                                      # sequence 0 uses 2 blocks only
    got = paged_decode_attention(**args)                                    # no error, and the same answer
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.skipif(KERNEL_MODE != "interpreter", reason="bf16 is refused only in the interpreter")
def test_bf16_refused_in_interpreter():
    args = decode_args(q=lambda a: a["q"].bfloat16(), k_cache=lambda a: a["k_cache"].bfloat16(),
                       v_cache=lambda a: a["v_cache"].bfloat16())
    with pytest.raises(ValueError, match="bfloat16, which the Triton interpreter computes wrongly"):
        paged_decode_attention(**args)


def store_args(**change):
    k_cache, v_cache, _ = make_paged_cache([8], 4, 2, 16, torch.float32)    # 5 blocks, 20 slots
    args = dict(key=randn(3, 2, 16), value=randn(3, 2, 16), k_cache=k_cache, v_cache=v_cache,
                slot_mapping=tensor([0, -1, 19]))
    return {**args, **change}


STORE_ERRORS = [
    ("key-shape", dict(key=randn(3, 1, 16)), r"key has shape \(3, 1, 16\); expected \(num_tokens, 2, 16\)"),
    ("value-dtype", dict(value=randn(3, 2, 16).half()), "value dtype torch.float16 differs"),
    ("value-tokens", dict(value=randn(2, 2, 16)), "value has 2 tokens but key has 3"),
    ("slots-count", dict(slot_mapping=tensor([0, 1])), "slot_mapping has 2 entries but key has 3 tokens"),
    ("slots-float", dict(slot_mapping=tensor([0.0, 1.0, 2.0])), "slot_mapping has dtype float32"),
    ("slot-too-big", dict(slot_mapping=tensor([0, 20, 1])), r"slot_mapping\[1\] = 20 is neither -1 nor a slot in \[0, 20\)"),
    ("slot-minus-two", dict(slot_mapping=tensor([-2, 0, 1])), r"slot_mapping\[0\] = -2"),
    ("slot-twice", dict(slot_mapping=tensor([7, -1, 7])), "writes slot 7 more than once"),
    ("cache-dtype", dict(k_cache=zeros(5, 4, 2, 16, dtype=torch.int32)), "k_cache has dtype int32"),
]


@pytest.mark.parametrize("change, match", [c[1:] for c in STORE_ERRORS], ids=[c[0] for c in STORE_ERRORS])
def test_store_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        store_kvcache(**store_args(**change))


def extend_args(**change):
    k_cache, v_cache, block_tables = make_paged_cache([6, 3], 4, 2, 16, torch.float32)
    args = dict(q=randn(5, 4, 16), k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
                prefix_lens=[4, 0], extend_lens=tensor([2, 3], dtype=torch.int32))
    return {**args, **change}


EXTEND_ERRORS = [
    ("rows-vs-extend", dict(q=randn(4, 4, 16)), r"q has 4 rows but sum\(extend_lens\) = 5"),
    ("negative-prefix", dict(prefix_lens=[-1, 0], q=randn(5, 4, 16)), r"prefix_lens\[0\] = -1 is negative"),
    ("lens-count", dict(extend_lens=[5]), "extend_lens has 1 entries, expected 2"),
    ("lens-not-ints", dict(prefix_lens=["a", 0]), r"prefix_lens\[0\] = 'a' is not an int \(str\)"),
    ("lens-float", dict(prefix_lens=[2.7, 0], extend_lens=[2, 3]), r"prefix_lens\[0\] = 2.7 is not an int \(float\)"),
    ("lens-whole-float", dict(extend_lens=[2.0, 3]), r"extend_lens\[0\] = 2.0 is not an int \(float\)"),
    ("lens-bool", dict(extend_lens=[True, 3], q=randn(4, 4, 16)), r"extend_lens\[0\] = True is not an int \(bool\)"),
    ("lens-numpy-float", dict(prefix_lens=np.array([4.0, 0.0])), r"prefix_lens\[0\] = .*4.0.* is not an int"),
    ("lens-float-tensor", dict(extend_lens=tensor([2.0, 3.0])), "extend_lens has dtype float32"),
    ("lens-not-a-list", dict(prefix_lens=4), "prefix_lens must be a 1-D int tensor or a list of ints"),
    ("lens-2d", dict(prefix_lens=zeros(2, 1, dtype=torch.int32)), "prefix_lens must have 1 dimensions"),
    ("cpu-for-a-list", dict(prefix_lens_cpu=[4, 0]), "prefix_lens_cpu is for a tensor prefix_lens"),
    ("cpu-disagree", dict(prefix_lens=tensor([4, 0], dtype=torch.int32), prefix_lens_cpu=[3, 0]),
     r"prefix_lens_cpu = \[3, 0\] differs from prefix_lens = \[4, 0\]"),
    ("cpu-float", dict(extend_lens_cpu=[2, 3.5]), r"extend_lens_cpu\[1\] = 3.5 is not an int"),
    ("over-capacity", dict(prefix_lens=[11, 0]), r"prefix_lens\[0\] \+ extend_lens\[0\] = 13 exceeds .* = 12 tokens"),
    ("padding-entry-used", dict(prefix_lens=[7, 0]), r"block_tables\[0, 2\] = -1 .* prefix_lens\[0\] \+ extend_lens\[0\] = 9"),
    ("bad-block", dict(block_tables=tensor([[0, 99, 0], [1, 2, 3]], dtype=torch.int32)),
     r"block_tables\[0, 1\] = 99"),
    ("q-dtype", dict(q=randn(5, 4, 16).half()), "q dtype torch.float16 differs"),
    ("heads", dict(q=randn(5, 3, 16)), "num_heads=3"),
]


@pytest.mark.parametrize("change, match", [c[1:] for c in EXTEND_ERRORS], ids=[c[0] for c in EXTEND_ERRORS])
def test_extend_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        extend_attention(**extend_args(**change))


def test_extend_accepts_numpy_tensors_and_unchecked_lengths():
    """numpy integers, int64 tensors, and tensors with host copies under check=False: one answer."""
    args = extend_args()
    want = extend_attention(**args)
    variants = [
        dict(prefix_lens=np.array([4, 0]), extend_lens=[np.int32(2), 3]),
        dict(prefix_lens=tensor([4, 0]), extend_lens=tensor([2, 3]), check=False),        # no host copies: q bounds the grid
        dict(prefix_lens=tensor([4, 0]), extend_lens=tensor([2, 3], dtype=torch.int32), prefix_lens_cpu=[4, 0],
             extend_lens_cpu=(2, 3), check=False),
    ]
    for change in variants:
        torch.testing.assert_close(extend_attention(**{**args, **change}), want, atol=1e-6, rtol=1e-6)


COPY_ERRORS = [
    ("src-out-of-range", [(5, 1)], r"block_mapping\[0\] src = 5 is not a block id in \[0, 5\)"),
    ("dst-negative", [(0, 1), (2, -1)], r"block_mapping\[1\] dst = -1"),
    ("dst-twice", [(0, 3), (1, 3)], "destination block twice: \\[3\\]"),
    ("src-is-dst", [(0, 1), (1, 2)], r"block\(s\) \[1\] as both source and destination"),
    ("not-pairs", [(0, 1, 2)], "block_mapping must be \\(src, dst\\) pairs"),
    ("tensor-shape", tensor([[0, 1, 2]]), r"block_mapping must have shape \(n, 2\)"),
    ("tensor-float", tensor([[0.0, 1.0]]), "block_mapping has dtype torch.float32"),
    ("float-id", [(0, 1), (2.7, 3)], r"block_mapping\[1\] src = 2.7 is not an int \(float\)"),
    ("bool-id", [(0, True)], r"block_mapping\[0\] dst = True is not an int \(bool\)"),
]


@pytest.mark.parametrize("mapping, match", [c[1:] for c in COPY_ERRORS], ids=[c[0] for c in COPY_ERRORS])
def test_copy_rejects(mapping, match):
    k_cache, v_cache, _ = make_paged_cache([8], 4, 2, 16, torch.float32)   # 5 blocks
    with pytest.raises(ValueError, match=match):
        copy_blocks(k_cache, v_cache, mapping)


def test_copy_rejects_non_contiguous_blocks():
    k_cache = randn(3, 5, 2, 16)[:, :4]                                     # gaps between blocks are fine...
    v_cache = randn(3, 5, 2, 16, seed=2)[:, :4]
    copy_blocks(k_cache, v_cache, [(0, 2)])
    assert torch.equal(k_cache[2], k_cache[0]) and torch.equal(v_cache[2], v_cache[0])
    wide = zeros(5, 8, 2, 16)[:, ::2]                                 # ...gaps between tokens are not
    with pytest.raises(ValueError, match="blocks must be contiguous"):
        copy_blocks(wide, zeros(5, 8, 2, 16)[:, ::2], [(0, 1)])
