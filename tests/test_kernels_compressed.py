"""The lesson-11 kernels against their torch references: int8/fp8 store (quantize) and decode
(dequantize on load), and decode over Quest-selected blocks. Shuffled blocks, poisoned unused
slots, guard regions around the outputs; tiny sizes (the interpreter runs ~400 program-steps/s)."""

import budget
import pytest
import torch
from hypothesis import given, settings, strategies as st

from kvlab.kernels import DEVICE
from kvlab.kernels.compressed_decode import (
    quantized_decode_attention,
    selected_decode_attention,
    store_kvcache_quant,
)
from kvlab.kernels.reference import (
    QMAX,
    compressed_decode_attention_ref,
    dequantize_kv_ref,
    quantize_kv_ref,
    selected_positions,
    store_kvcache_quant_ref,
)
from kernel_utils import assert_guard_intact, guarded_empty, make_paged_cache, randn, tensor, tolerance

F32, F16 = torch.float32, torch.float16
I8 = torch.int8
FP8 = getattr(torch, "float8_e4m3fn", None)
QDTYPES = [I8] + ([FP8] if FP8 is not None else [])


def quant_cache(seq_lens, block_size, nkv, hd, kv_dtype, seed=0):
    """A quantized paged cache with shuffled blocks: (kq, vq, ks, vs, block_tables, k_float, v_float)."""
    k, v, tables = make_paged_cache(seq_lens, block_size, nkv, hd, F32, seed=seed)
    kq, ks = quantize_kv_ref(k.reshape(-1, nkv, hd), kv_dtype)
    vq, vs = quantize_kv_ref(v.reshape(-1, nkv, hd), kv_dtype)
    shape = k.shape
    return (kq.reshape(shape), vq.reshape(shape), ks.reshape(shape[:3]), vs.reshape(shape[:3]), tables.clamp(min=0))


def test_quantize_known_answer_and_round_trip():
    x = torch.tensor([[[0.5, -1.0, 0.0, 0.25]], [[0.0, 0.0, 0.0, 0.0]]])   # (2 tokens, 1 head, 4)
    xq, s = quantize_kv_ref(x, I8)
    assert xq.tolist() == [[[64, -127, 0, 32]], [[0, 0, 0, 0]]]
    assert s[0, 0].item() == pytest.approx(1 / 127) and s[1, 0].item() == 1.0   # an all-zero head: scale 1
    back = dequantize_kv_ref(xq, s)
    assert (back - x).abs().max() <= s.max() / 2 + 1e-7                      # error at most half a step


@pytest.mark.parametrize("kv_dtype", [I8])   # fp8 is floating point: a shared scale hurts it far less
def test_per_token_scale_beats_a_per_tensor_scale_when_magnitudes_differ(kv_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, 32, generator=g) * torch.logspace(-2, 1, 64)[:, None, None]  # small and large tokens
    xq, s = quantize_kv_ref(x, kv_dtype)
    per_token = (dequantize_kv_ref(xq, s) - x).abs() / x.abs().amax(-1, keepdim=True)
    scale_t = x.abs().max() / QMAX[kv_dtype]
    y = x / scale_t
    yq = torch.clamp(torch.floor(y + 0.5), -127, 127) if kv_dtype == I8 else y.to(kv_dtype).float()
    per_tensor = (yq * scale_t - x).abs() / x.abs().amax(-1, keepdim=True)
    assert per_token.max() < 0.07 and per_tensor[:8].max() > 5 * per_token[:8].max()


@pytest.mark.parametrize("kv_dtype", QDTYPES)
@pytest.mark.parametrize("nkv,hd,block_size,dtype", [(2, 16, 4, F32), (3, 24, 4, F16), (1, 64, 8, F32)])
def test_store_quant_equals_reference(kv_dtype, nkv, hd, block_size, dtype):
    num_blocks, n = 5, 7
    key, value = randn(n, nkv, hd, dtype=dtype, seed=1) * 3, randn(n, nkv, hd, dtype=dtype, seed=2)
    slots = tensor([13, 0, -1, 5, 19, 8, 2], dtype=torch.int64)
    shape = (num_blocks, block_size, nkv, hd)
    caches = []
    for run in range(2):
        bufs = [guarded_empty(shape, kv_dtype if i < 2 else F32, dims=[0]) for i in range(2)]
        sbufs = [guarded_empty(shape[:3], F32, dims=[0]) for _ in range(2)]
        for _, view in bufs:
            view.zero_()
        for _, view in sbufs:
            view.zero_()
        kc, vc, ksc, vsc = bufs[0][1], bufs[1][1], sbufs[0][1], sbufs[1][1]
        if run == 0:
            store_kvcache_quant(key, value, kc, vc, ksc, vsc, slots)
            for big, view in sbufs:
                assert_guard_intact(big, view)
        else:
            store_kvcache_quant_ref(key, value, kc, vc, ksc, vsc, slots)
        caches.append([t.float() for t in (kc, vc, ksc, vsc)])
    for got, want in zip(*caches):
        assert torch.equal(got, want)
    assert caches[0][2].reshape(-1, nkv)[torch.tensor([13, 0, 5])].gt(0).all()   # scales were written


@pytest.mark.parametrize("kv_dtype", QDTYPES)
@pytest.mark.parametrize("heads,nkv,hd,block_size,lens,dtype", [
    (4, 2, 16, 4, [1, 6, 13], F32),      # the bundled tiny model's grouping, ragged, a 1-token context
    (9, 3, 64, 16, [40, 17], F16),       # SmolLM2's 9 / 3 heads x 64
    (2, 2, 24, 4, [9], F32),             # head_dim 24: padded lanes
])
def test_quantized_decode_equals_reference(kv_dtype, heads, nkv, hd, block_size, lens, dtype):
    kq, vq, ks, vs, tables = quant_cache(lens, block_size, nkv, hd, kv_dtype)
    q = randn(len(lens), heads, hd, dtype=dtype, seed=3)
    ctx = tensor(lens, dtype=torch.int32)
    big, out = guarded_empty((len(lens), heads, hd), dtype)
    out.copy_(quantized_decode_attention(q, kq, vq, ks, vs, tables, ctx))
    assert_guard_intact(big, out)
    want = compressed_decode_attention_ref(q.float(), kq, vq, tables, ctx, k_scale=ks, v_scale=vs)
    torch.testing.assert_close(out.float(), want, **tolerance(dtype))


def test_int8_decode_is_close_to_the_full_precision_answer():
    lens, heads, nkv, hd, bs = [30, 9], 4, 2, 32, 4
    k, v, tables = make_paged_cache(lens, bs, nkv, hd, F32, seed=5)
    tables = tables.clamp(min=0)
    kq, ks = quantize_kv_ref(k.reshape(-1, nkv, hd), I8)
    vq, vs = quantize_kv_ref(v.reshape(-1, nkv, hd), I8)
    q, ctx = randn(2, heads, hd, seed=4), tensor(lens, dtype=torch.int32)
    exact = compressed_decode_attention_ref(q, k, v, tables, ctx)
    got = quantized_decode_attention(q, kq.reshape(k.shape), vq.reshape(k.shape), ks.reshape(k.shape[:3]),
                                     vs.reshape(k.shape[:3]), tables, ctx)
    err = (got - exact).abs().max().item()
    assert 0 < err < 0.05, err


@pytest.mark.parametrize("heads,nkv,hd,block_size,lens,sel", [
    (4, 2, 16, 4, [14, 9], [[0, 3, -1], [2, 0, 1]]),     # blocks in any order, padding past num_selected
    (9, 3, 64, 16, [70], [[4, 0]]),                     # the last (partial) block selected
    (2, 1, 8, 4, [1, 5], [[0, 0], [1, 0]]),
])
def test_selected_decode_equals_reference(heads, nkv, hd, block_size, lens, sel):
    num_sel = [len([b for b in row if b >= 0]) for row in sel]
    num_sel = [1 if lens[i] <= block_size else n for i, n in enumerate(num_sel)]   # a 1-block context: block 0 only
    k, v, tables = make_paged_cache(lens, block_size, nkv, hd, F32, seed=7)
    tables = tables.clamp(min=0)
    q, ctx = randn(len(lens), heads, hd, seed=8), tensor(lens, dtype=torch.int32)
    sel_t, n_t = tensor(sel, dtype=torch.int32), tensor(num_sel, dtype=torch.int32)
    got = selected_decode_attention(q, k, v, tables, ctx, sel_t, n_t)
    want = compressed_decode_attention_ref(q, k, v, tables, ctx, selected_blocks=sel_t, num_selected=n_t)
    torch.testing.assert_close(got, want, **tolerance(F32))
    # selecting every block is dense attention
    every = tensor([list(range(-(-lens[0] // block_size)))], dtype=torch.int32)
    dense = selected_decode_attention(q[:1], k, v, tables[:1], ctx[:1], every, tensor([every.shape[1]], dtype=torch.int32))
    torch.testing.assert_close(dense, compressed_decode_attention_ref(q[:1], k, v, tables[:1], ctx[:1]), **tolerance(F32))


@settings(max_examples=budget.examples(12), deadline=None)
@given(st.integers(1, 40), st.integers(0, 10_000), st.sampled_from([4, 8]), st.booleans())
def test_selected_quantized_decode_matches_reference_property(n, seed, block_size, quantized):
    g = torch.Generator().manual_seed(seed)
    used = -(-n // block_size)
    k = int(torch.randint(1, used + 1, (1,), generator=g))
    blocks = torch.randperm(used, generator=g)[:k].tolist()
    kf, vf, tables = make_paged_cache([n], block_size, 1, 16, F32, seed=seed)
    tables = tables.clamp(min=0)
    q, ctx = randn(1, 2, 16, seed=seed), tensor([n], dtype=torch.int32)
    sel, ns = tensor([blocks], dtype=torch.int32), tensor([k], dtype=torch.int32)
    extra = {}
    if quantized:
        kq, ks = quantize_kv_ref(kf.reshape(-1, 1, 16))
        vq, vs = quantize_kv_ref(vf.reshape(-1, 1, 16))
        kf, vf = kq.reshape(kf.shape), vq.reshape(vf.shape)
        extra = dict(k_scale=ks.reshape(kf.shape[:3]), v_scale=vs.reshape(kf.shape[:3]))
    got = selected_decode_attention(q, kf, vf, tables, ctx, sel, ns, **extra)
    want = compressed_decode_attention_ref(q, kf, vf, tables, ctx, selected_blocks=sel, num_selected=ns, **extra)
    torch.testing.assert_close(got, want, **tolerance(F32))


def test_selected_positions():
    assert selected_positions([0, 3], 2, 14, 4).tolist() == [0, 1, 2, 3, 12, 13]
    assert selected_positions([3, 0, 9], 1, 14, 4).tolist() == [12, 13]


def test_bad_inputs_name_the_value():
    kq, vq, ks, vs, tables = quant_cache([6], 4, 1, 16, I8)
    q, ctx = randn(1, 2, 16), tensor([6], dtype=torch.int32)
    with pytest.raises(ValueError, match="k_scale has shape"):
        quantized_decode_attention(q, kq, vq, ks[:, :2], vs[:, :2], tables, ctx)
    with pytest.raises(ValueError, match=r"selected_blocks\[0\] = \[2\] must be distinct logical blocks in \[0, 2\)"):
        selected_decode_attention(q, kq.float(), vq.float(), tables, ctx, tensor([[2]], dtype=torch.int32),
                                  tensor([1], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"num_selected\[0\] = 0"):
        selected_decode_attention(q, kq.float(), vq.float(), tables, ctx, tensor([[0]], dtype=torch.int32),
                                  tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match="give both k_scale and v_scale"):
        selected_decode_attention(q, kq, vq, tables, ctx, tensor([[0]], dtype=torch.int32),
                                  tensor([1], dtype=torch.int32), k_scale=ks)
    with pytest.raises(ValueError, match="slot_mapping holds 99"):
        store_kvcache_quant(randn(1, 1, 16), randn(1, 1, 16), kq, vq, ks, vs, tensor([99], dtype=torch.int64))


def test_selected_decode_per_kv_head_equals_reference():
    """Quest as the paper: each KV head reads its own blocks (selected_blocks (B, nkv, k))."""
    lens, block_size, nkv, hd, heads = [14, 9], 4, 2, 16, 4
    k, v, tables = make_paged_cache(lens, block_size, nkv, hd, F32, seed=11)
    tables = tables.clamp(min=0)
    q, ctx = randn(2, heads, hd, seed=12), tensor(lens, dtype=torch.int32)
    sel = tensor([[[0, 3, 0], [1, 2, 3]], [[2, 0, 0], [1, 0, 2]]], dtype=torch.int32)   # (B, nkv, 3)
    num = tensor([[2, 3], [1, 3]], dtype=torch.int32)
    got = selected_decode_attention(q, k, v, tables, ctx, sel, num)
    want = compressed_decode_attention_ref(q, k, v, tables, ctx, selected_blocks=sel, num_selected=num)
    torch.testing.assert_close(got, want, **tolerance(F32))
    # KV head h's query heads are those of a shared selection equal to head h's list
    for h in range(nkv):
        shared = selected_decode_attention(q, k, v, tables, ctx, sel[:, h], num[:, h])
        torch.testing.assert_close(got[:, 2 * h:2 * h + 2], shared[:, 2 * h:2 * h + 2], **tolerance(F32))
    with pytest.raises(ValueError, match="and KV head"):
        selected_decode_attention(q, k, v, tables, ctx, sel[:, :1], num[:, :1])
