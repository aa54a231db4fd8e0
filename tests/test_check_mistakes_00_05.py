"""Issue 28 (round 5): wrong answers to lessons 00-05 that an independent review, or the helper after
it, typed and that came back rejected WITHOUT the mistake named (or accepted). Each must now be
rejected with a note that says the likely mistake (the phrase given beside it)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from kvlab import check
from kvlab.check import l01_why_kv_cache
from test_check_memory import _solutions

S00, S01, S02, S03, S04, S05 = (_solutions(s) for s in (
    "00_start_here", "01_why_kv_cache", "02_how_big", "03_contiguous", "04_paging", "05_paged_kernel"))


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def _flops(post):
    return lambda f, p, n: post(*S01.count_flops(f, p, n))


def _attend(**kw):
    """attend_with_cache with one slip: before (attend before appending), scale (multiply by sqrt(d)),
    unsqueeze (out with a token dimension)."""
    def fn(q, k_new, v_new, k_cache, v_cache):
        kc, vc = torch.cat([k_cache, k_new[None]]), torch.cat([v_cache, v_new[None]])
        keys, values = (k_cache, v_cache) if kw.get("before") else (kc, vc)
        group = q.shape[0] // kc.shape[1]
        K, V = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)   # (T, h, d)
        if kw.get("min_head"):  # a reviewer's answer: query head h reads KV head min(h, num_kv_heads - 1)
            heads = [min(h, kc.shape[1] - 1) for h in range(q.shape[0])]
            K, V = keys[:, heads], values[:, heads]
        if kw.get("only_new"):
            K, V = K[-1:], V[-1:]
        scale = math.sqrt(q.shape[-1]) if kw.get("scale") else 1 / math.sqrt(q.shape[-1])
        if kw.get("mutate_q"):  # scales q in place (the caller's tensor), then scores unscaled
            q /= math.sqrt(q.shape[-1])
            scale = 1.0
        out = torch.einsum("ht,thd->hd", torch.softmax(torch.einsum("hd,thd->ht", q, K) * scale, -1), V)
        if kw.get("float64"):   # a reviewer's answer: the right numbers, returned as float64
            out = out.double()
        return (out[None] if kw.get("unsqueeze") else out), kc, vc
    return fn


def _heads(**kw):
    """kv_heads_for_budget with one slip."""
    def fn(l, h, d, t, budget, b=2):
        if min(l, h, d, t, b) < 1:
            raise ValueError("bad argument")
        per = (1 if kw.get("no_kv") else 2) * l * d * t * b
        ok = [g for g in range(1, h + 1) if (kw.get("any") or h % g == 0) and (g * per < budget if kw.get("strict") else g * per <= budget)]
        if not ok:
            raise ValueError("nothing fits")
        return float(max(ok)) if kw.get("float") else [max(ok)] if kw.get("list") else max(ok)
    return fn


def _oob_swapped():
    class Swapped(S04.TinyAllocator):
        def allocate(self, n):
            if n > len(self.free_queue) >= 0 and n >= 0:
                raise S04.OutOfBlocks(len(self.free_queue), n)
            return super().allocate(n)
    return Swapped


def _free_sorted():
    class Sorted(S04.TinyAllocator):
        def free(self, ids):
            return sorted(super().free(ids))
    return Sorted


def _reservation_exclusive(policy, length, max_len, final_len=None):
    if not 1 <= length < max_len:  # the upper bound made exclusive
        raise ValueError(f"length {length} must be in [1, {max_len})")
    return S03.reservation(policy, length, max_len, final_len)


def _tiles(blocks):
    from kvlab.check.l05_paged_kernel import _tiles_blocks
    return _tiles_blocks(blocks)


def _free_at_end(cap, ops):
    from kvlab.check.l03_contiguous import _place_run
    return _place_run(cap, ops)[1]


def _bounds(pos_ok=0, bs_ok=1):
    """block_and_offset whose bound checks are one off: refuses pos < pos_ok (B2) or block_size < bs_ok (B8)."""
    def fn(pos, bs):
        if pos < pos_ok or bs < bs_ok:
            raise ValueError(f"bad pos {pos} or block_size {bs}")
        return divmod(pos, bs)
    return fn


def _reuse_bs(a, b, bs):
    if bs <= 1:  # refuses block size 1
        raise ValueError(bs)
    return S00.reusable_tokens(a, b, bs)


def _reuse_no_empty(a, b, bs):  # the review's answer: an empty new gives min(0, -1) // 4 * 4 == -4
    if bs < 1:
        raise ValueError(bs)
    return min(S00.common_prefix_len(a, b), len(b) - 1) // bs * bs


WRONG = [
    # lesson 00
    (check.block_and_offset, _bounds(pos_ok=1), "pos = 0 is the first token"),
    (check.block_and_offset, _bounds(bs_ok=2), "block_size = 1 is a valid block"),
    (check.reusable_tokens, _reuse_bs, "block_size = 1 is valid"),
    (check.reusable_tokens, _reuse_no_empty, "a request of 0 tokens"),
    (check.block_and_offset, lambda p, bs: tuple(np.int64(x) for x in S00.block_and_offset(p, bs)), "int64"),
    (check.common_prefix_len, lambda a, b: list(a[:S00.common_prefix_len(a, b)]), "not the items"),
    (check.common_prefix_len, lambda a, b: S00.common_prefix_len(a, b) / max(1, min(len(a), len(b))), "a share"),
    (check.reusable_tokens, lambda a, b, bs: S00.reusable_tokens(a, b, bs) // bs, "that counts blocks"),
    # lesson 03
    (check.external_fragmentation,
     lambda r: 100 * S03.external_fragmentation(r) / sum(n for _, n in r) if r else 0, "a percentage"),
    (check.first_fit, lambda r, n: next((i for i, (_, ln) in enumerate(r) if ln >= n), None) if n >= 1
     else S03.first_fit(r, n), "the hole's index"),
    (check.first_fit, lambda r, n: next(((s, ln) for s, ln in r if ln >= n), None) if n >= 1 else S03.first_fit(r, n),
     "return only the first"),
    (check.reservation, _reservation_exclusive, "includes max_len"),
    (check.external_fragmentation, lambda r: max(len(r) - 1, 0), "counted the holes"),
    (check.external_fragmentation, lambda r: sum(n for _, n in r) - min((n for _, n in r), default=0),
     "subtracted the SMALLEST hole"),
    (check.external_fragmentation, lambda r: sum(n for _, n in r) - r[-1][1] if r else 0, "subtracted the LAST hole"),
    (check.place_first_fit, lambda cap, ops: {**S03.place_first_fit(cap, ops), "wasted_share": (
        lambda d, free: d["largest_hole"] / free if free else 0.0)(S03.place_first_fit(cap, ops), _free_at_end(cap, ops))},
     "the largest hole's own share"),
    (check.place_first_fit, lambda cap, ops: {**S03.place_first_fit(cap, ops), "refused": []}, "the refused ids are missing"),
    (check.place_first_fit, lambda cap, ops: {**S03.place_first_fit(cap, ops), "wasted_share": round(
        S03.place_first_fit(cap, ops)["wasted_share"], 2)}, "rounded"),
    # lesson 02
    (check.kv_heads_for_budget, _heads(any=True), "does not divide num_heads"),
    (check.kv_heads_for_budget, _heads(strict=True), "<=, not <"),
    (check.kv_heads_for_budget, _heads(no_kv=True), "the 2 for K and V is missing"),
    (check.kv_heads_for_budget, _heads(float=True), "float"),
    # a reviewer's answer: the largest divisor of num_heads among the counts that fit, with no cap at num_heads
    (check.kv_heads_for_budget, lambda l, h, d, t, budget, b=2: S02.kv_heads_for_budget(l, h, d, t, budget, b)
     if budget < (h + 1) * 2 * l * d * t * b or min(l, h, d, t, b) < 1 else budget // (2 * l * d * t * b), "at most num_heads"),
    (check.kv_heads_for_budget, _heads(list=True), "return the number itself"),
    (check.max_concurrent, lambda L, g, u, w, b, bs=16: S02.max_concurrent([n + bs - 1 for n in L], g, u, w, b, bs),
     "rounded up twice"),
    # lesson 04
    (check.block_allocator, _oob_swapped(), "arguments are swapped"),
    (check.block_allocator, _free_sorted(), "in the order they were listed"),
    (check.translate, lambda t, p, bs, bpt=1: (lambda lb, off: (lb, off, t[lb], (t[lb] * bs + off) * bpt))(
        *reversed(divmod(p, bs))) if 0 <= p < len(t) * bs else S04.translate(t, p, bs, bpt), "logical block and offset swapped"),
    (check.translate, lambda t, p, bs, bpt=1: S04.translate(t, p, bs, 1)[:3] + (t[p // bs] * bs * bpt + p % bs,)
     if 0 <= p < len(t) * bs else S04.translate(t, p, bs, bpt), "the offset counts token slots too"),
    (check.blocks_to_append, lambda t, n, bs: math.ceil((t + n) / bs) - math.ceil(t / bs) if n >= 0
     else S04.blocks_to_append(t, n, bs), "float division"),
    (check.blocks_needed, lambda n, bs: max(1, S04.blocks_needed(n, bs)), "0 tokens need 0 blocks"),
    # lesson 05
    (check.paged_decode_torch, lambda *a: S05.paged_decode_torch(*a).tolist(), "returned a list"),
    (check.paged_decode_torch, lambda *a: S05.paged_decode_torch(*a)[None], "without extra dimensions"),
    (check.paged_decode_torch, lambda q, k, v, t, n, s: S05.paged_decode_torch(q, k, v, t, max(n - 1, 1), s),
     "one position too few"),
    (check.kernel_tiles, _tiles(lambda a, e, bs: [float(b) for b in range(a // bs, (e - 1) // bs + 1)]), "floats"),
    (check.kernel_tiles, _tiles(lambda a, e, bs: list(range(a, e))), "token positions (slots), not blocks"),
    (check.kernel_tiles, _tiles(lambda a, e, bs: list(range(a // bs, e // bs + 1))), "one block too many"),
    (check.kernel_tiles, _tiles(lambda a, e, bs: list(range(a // bs + 1, (e - 1) // bs + 2))), "count from 0"),
    (check.kernel_tiles, lambda *a: [len(p) for p in S05.kernel_tiles(*a)], "not a count"),
    # lesson 01
    (check.count_flops, _flops(lambda a, b: (list(itertools.accumulate(a)), b)), "running totals"),
    (check.count_flops, _flops(lambda a, b: (a, list(itertools.accumulate(b)))), "running totals"),
    (check.count_flops, _flops(lambda a, b: ([float(x) for x in a], b)), "is an int"),
    (check.count_flops, _flops(lambda a, b: (np.array(a), np.array(b))), "ndarray"),
    (check.count_flops, _flops(lambda a, b: (torch.tensor(a), torch.tensor(b))), "Tensor"),
    (check.count_flops, _flops(lambda a, b: {"naive": a, "cached": b}), "returned a dict"),
    (check.attend_with_cache, _attend(before=True), "attended before appending"),
    (check.attend_with_cache, _attend(scale=True), "multiplied the scores by sqrt(head_dim)"),
    (check.attend_with_cache, _attend(unsqueeze=True), "without the token dimension"),
    (check.attend_with_cache, _attend(mutate_q=True), "changed the caller's q"),
    (check.attend_with_cache, _attend(only_new=True), "attended only the new token"),
    (check.attend_with_cache, _attend(float64=True), "keep the inputs' dtype"),
    (check.attend_with_cache, _attend(min_head=True), "min(h, num_kv_heads - 1)"),
    (check.count_flops, lambda f, p, n: S01.count_flops(f, p, n), "takes no cached_prefix"),
    (check.count_flops, lambda f, p, n, cached_prefix=0: S01.count_flops(f, p, n), "ran the whole prompt"),
    (check.count_flops, lambda f, p, n, cached_prefix=0: (S01.count_flops(f, p, n)[0],
                                                          S01.count_flops(f, p, n, cached_prefix)[1][:1] + S01.count_flops(f, p, n)[1][1:])
     if not cached_prefix else S01.count_flops(f, p, n), "ran the whole prompt"),
    (check.count_flops, lambda f, p, n, cached_prefix=0: (S01.count_flops(f, p - cached_prefix, n)[0],
                                                          S01.count_flops(f, p, n, cached_prefix)[1]), "no cache to reuse"),
    (check.count_flops, lambda f, p, n, cached_prefix=0: (S01.count_flops(f, p, n)[0],
                                                          S01.count_flops(f, p - cached_prefix, n)[1][:1]
                                                          + S01.count_flops(f, p, n)[1][1:]), "counted its tokens' attention from 1"),
    (check.count_flops, lambda f, p, n, cached_prefix=0: (S01.count_flops(f, p, n)[0],
                                                          S01.count_flops(f, p, n, max(cached_prefix - 1, 0))[1]), "off by one token"),
]


@pytest.mark.parametrize("checker, wrong, says", WRONG, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(WRONG)])
def test_wrong_answer_rejected_and_named(checker, wrong, says):
    r = checker(wrong, verbose=False)
    assert not r.passed
    notes = " | ".join(c.note for c in r.failures)
    assert says in notes, notes


def test_count_flops_expected_is_what_generate_counts():
    """The checker computes the expected FLOPs from flops_per_token (fast); they are generate()'s counts."""
    model, _ = l01_why_kv_cache._bundled()
    for p, n in [(1, 1), (5, 6), (12, 3)]:
        assert l01_why_kv_cache.expected_step_flops(model.flops_per_token, p, n) == l01_why_kv_cache.generate_step_flops(p, n)
    # with a cached prefix: the naive steps are unchanged, the prefill is the whole prompt's less the prefix's
    naive, cached = l01_why_kv_cache.expected_step_flops(model.flops_per_token, 12, 3, cached_prefix=5)
    whole, alone = l01_why_kv_cache.expected_step_flops(model.flops_per_token, 12, 3)
    assert naive == whole and cached[1:] == alone[1:]
    assert cached[0] == alone[0] - l01_why_kv_cache.expected_step_flops(model.flops_per_token, 5, 1)[1][0]


# ------------------------------------------------------------------ lesson 05 ex. 3, round 8 (review of 34c45ca)
def _gather_unmasked_loads(cache_ptr, block_table_ptr, out_ptr, context_len,
                           HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):  # noqa: F821
    """The review's kernel: the store is masked, the two loads are not (plain Python; jitted below)."""
    import triton.language as tl
    offs_t = tl.arange(0, TILE_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for tile in range(0, (context_len + TILE_N - 1) // TILE_N):
        pos = tile * TILE_N + offs_t
        valid = pos < context_len
        physical = tl.load(block_table_ptr + pos // BLOCK_SIZE)
        row = physical * BLOCK_SIZE + pos % BLOCK_SIZE
        k = tl.load(cache_ptr + row[:, None] * HEAD_DIM + offs_d[None, :])
        tl.store(out_ptr + pos[:, None] * HEAD_DIM + offs_d[None, :], k, mask=valid[:, None])


def _compiled_for_a_gpu(fn):
    """What @triton.jit gives when triton was imported before kvlab set the interpreter: a JITFunction,
    whose launch on a machine without a GPU says '0 active drivers'."""
    from triton.runtime.jit import JITFunction
    return JITFunction(fn)


@pytest.mark.parametrize("kernel, says", [
    (lambda: _compiled_for_a_gpu(_gather_unmasked_loads), "mask=valid on every tl.load"),
    (lambda: _compiled_for_a_gpu(S05.paged_gather_kernel.fn), None),
])
def test_gather_kernel_decorated_before_the_interpreter_is_still_checked(kernel, says):
    from kvlab.kernels import KERNEL_MODE
    if KERNEL_MODE != "interpreter":
        pytest.skip("the GPU has a driver: no '0 active drivers' to avoid")
    r = check.paged_gather_kernel(kernel(), verbose=False)
    notes = " | ".join(f"{c.actual} {c.note}" for c in r.failures)
    assert "active drivers" not in notes, notes
    if says is None:
        assert r.passed, notes
    else:
        assert not r.passed and says in notes, notes


# ------------------------------------------------------------------ lesson 00, review of 6b9afee
def _blocks_of_4(pos, block_size):
    if pos < 0 or block_size < 1:
        raise ValueError(f"pos {pos}, block_size {block_size}")
    return pos // 4, pos % 4                                   # block size 4 written into the code


def _reusable_with_blocks_of_4(finished, new, block_size):
    if block_size < 1 or not finished or not new:
        raise ValueError("bad input")
    n = 0
    while n < min(len(finished), len(new)) and finished[n] == new[n]:
        n += 1
    return min(n, len(new) - 1) // 4 * 4                       # block size 4 written into the code


@pytest.mark.parametrize("checker, answer", [("block_and_offset", _blocks_of_4),
                                             ("reusable_tokens", _reusable_with_blocks_of_4)])
def test_00_a_block_size_written_into_the_code_is_named(checker, answer):
    r = getattr(check, checker)(answer, verbose=False)
    notes = " | ".join(c.note for c in r.failures)
    assert not r.passed and "hard-coded block size" in notes, notes
