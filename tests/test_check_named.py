"""Issue 28, item 3: plausible wrong answers to every exercise of lessons 00-05 (at least four each,
the unit and type slips a reviewer types) are rejected, and at least 90% of them with a note that
names a mistake. The figure is printed (pytest -s): rejected, named, the named share.
(The gather kernel's wrong answers are in tests/test_check_reuse.py.)
"""
from __future__ import annotations

import math

import torch

from kvlab import check
from kvlab.check import l02_how_big  # kv_cache_bytes: no longer a lesson exercise, its checker kept
from test_check_memory import _solutions

S00, S01, S02, S03, S04, S05 = (_solutions(s) for s in (
    "00_start_here", "01_why_kv_cache", "02_how_big", "03_contiguous", "04_paging", "05_paged_kernel"))


def _kv_bytes(layers, kv_heads, head_dim, tokens, dtype_bytes=2):
    """The former lesson 02 exercise 1 (no longer in solutions/: no lesson grades it)."""
    if min(layers, kv_heads, head_dim, dtype_bytes) < 1 or tokens < 0:
        raise ValueError("bad argument")
    return 2 * layers * kv_heads * head_dim * tokens * dtype_bytes


def _pops(fn):
    def wrong(*args):
        for a in args:
            if isinstance(a, list) and a:
                a.pop()
        return fn(*args)
    return wrong


def _alloc_lifo():
    class Lifo(S04.TinyAllocator):
        def free(self, ids):
            out = super().free(ids)
            for b in out:  # freed blocks to the FRONT
                self.free_queue.remove(b)
                self.free_queue.appendleft(b)
            return out
    return Lifo


def _alloc_no_double_free():
    class NoCheck(S04.TinyAllocator):
        def free(self, ids):
            out = []
            for b in ids:
                if self.ref_count[b] > 0:
                    self.ref_count[b] -= 1
                    if self.ref_count[b] == 0:
                        self.free_queue.append(b)
                        out.append(b)
            return out
    return NoCheck


def _alloc_partial():
    class Partial(S04.TinyAllocator):
        def allocate(self, n):
            if n < 0:
                raise ValueError(n)
            ids = []
            for _ in range(n):
                if not self.free_queue:
                    raise S04.OutOfBlocks(n, 0)
                ids.append(self.free_queue.popleft())
                self.ref_count[ids[-1]] = 1
            return ids
    return Partial


def _alloc_free_at_two():
    class Eager(S04.TinyAllocator):
        def free(self, ids):
            for b in ids:
                if self.ref_count[b] == 0:
                    raise S04.DoubleFree(b)
            for b in ids:
                self.ref_count[b] = 0
                self.free_queue.append(b)
            return list(ids)
    return Eager


def _wrong_answers():
    S = S02
    return {
        check.block_and_offset: [
            lambda p, bs: divmod(p, bs)[::-1] if p >= 0 and bs >= 1 else S00.block_and_offset(p, bs),
            lambda p, bs: (p / bs, p % bs) if p >= 0 and bs >= 1 else S00.block_and_offset(p, bs),
            lambda p, bs: ((p + 1) // bs, p % bs) if p >= 0 and bs >= 1 else S00.block_and_offset(p, bs),
            lambda p, bs: divmod(p, bs),
            lambda p, bs: list(S00.block_and_offset(p, bs)),
        ],
        check.common_prefix_len: [
            lambda a, b: sum(x == y for x, y in zip(a, b)),
            lambda a, b: max(i for i, (x, y) in enumerate(zip(a, b)) if x == y),
            lambda a, b: S00.common_prefix_len(a, b) + 1 if S00.common_prefix_len(a, b) < min(len(a), len(b)) else S00.common_prefix_len(a, b),
            _pops(S00.common_prefix_len),
            lambda a, b: float(S00.common_prefix_len(a, b)),
        ],
        check.reusable_tokens: [
            lambda a, b, bs: S00.common_prefix_len(a, b),
            lambda a, b, bs: S00.common_prefix_len(a, b) // bs * bs,
            lambda a, b, bs: min(S00.common_prefix_len(a, b), len(b) - 1),
            lambda a, b, bs: S00.reusable_tokens(a, b, bs) / 1.0,
            lambda a, b, bs: S00.reusable_tokens(b, a, bs),
        ],
        check.count_flops: [
            lambda f, p, n: (S01.count_flops(f, p, n)[0], S01.count_flops(f, p, n)[0]),
            lambda f, p, n: S01.count_flops(f, p, n)[::-1],
            lambda f, p, n: (S01.count_flops(f, p, n)[0], [f(p + t) for t in range(n)]),
            lambda f, p, n: S01.count_flops(f, p + 1, n),
        ],
        check.attend_with_cache: [
            lambda q, k, v, kc, vc: S01.attend_with_cache(q * math.sqrt(q.shape[-1]), k, v, kc, vc),  # no scale
            lambda q, k, v, kc, vc: (S01.attend_with_cache(q, v, k, kc, vc)[0], *S01.attend_with_cache(q, k, v, kc, vc)[1:]),
            lambda q, k, v, kc, vc: (S01.attend_with_cache(q, k, v, kc, vc)[0], kc, vc),
            lambda q, k, v, kc, vc: (S01.attend_with_cache(q, k, v, kc, vc)[0], torch.cat([k[None], kc]), torch.cat([v[None], vc])),
        ],
        l02_how_big.kv_cache_bytes: [
            lambda l, h, d, t, b=2: l * h * d * t * b,
            lambda l, h, d, t, b=2: _kv_bytes(l, h, d, t, b) / 10**9,
            lambda l, h, d, t, b=2: _kv_bytes(l, h, d, t, b) / 2**30,
            lambda l, h, d, t, b=2: float(_kv_bytes(l, h, d, t, b)),
            lambda l, h, d, t, b=2: 2 * l * h * d * t,
        ],
        check.bytes_per_token_from_config: [
            lambda c: 2 * c["num_hidden_layers"] * c["hidden_size"] * 2,
            lambda c: S.bytes_per_token_from_config(c) // 2,
            lambda c: S.bytes_per_token_from_config({**c, "torch_dtype": "float16"}),
            lambda c: 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"]) * 2,
            lambda c: S.bytes_per_token_from_config(c) / 1,
        ],
        l02_how_big.requests_that_fit: [
            lambda kv, b, t: kv / (b * t) if b >= 1 and t >= 1 and kv >= 0 else l02_how_big._requests_that_fit_ref(kv, b, t),
            lambda kv, b, t: round(kv / (b * t)) if b >= 1 and t >= 1 and kv >= 0 else l02_how_big._requests_that_fit_ref(kv, b, t),
            lambda kv, b, t: kv // b if b >= 1 and t >= 1 and kv >= 0 else l02_how_big._requests_that_fit_ref(kv, b, t),
            lambda kv, b, t: kv // (b * t),
            lambda kv, b, t: -(-kv // (b * t)) if b >= 1 and t >= 1 and kv >= 0 else l02_how_big._requests_that_fit_ref(kv, b, t),
        ],
        check.max_concurrent: [
            _pops(S.max_concurrent),
            lambda L, g, u, w, b, bs=16: S.max_concurrent(L, g, 1.0, w, b, bs) if 0 < u <= 1 else S.max_concurrent(L, g, u, w, b, bs),
            lambda L, g, u, w, b, bs=16: S.max_concurrent(L, g, u, 0, b, bs),
            lambda L, g, u, w, b, bs=16: S.max_concurrent([n + bs - 1 for n in L], g, u, w, b, bs),
            lambda L, g, u, w, b, bs=16: float(S.max_concurrent(L, g, u, w, b, bs)),
        ],
        check.reservation: [
            lambda p, n, m, f=None: 1 << (n - 1).bit_length() if p == "pow2" and 1 <= n <= m else S03.reservation(p, n, m, f),
            lambda p, n, m, f=None: min(1 << n.bit_length(), m) if p == "pow2" and 1 <= n <= m else S03.reservation(p, n, m, f),
            lambda p, n, m, f=None: (m if p == "max" else min(1 << (n - 1).bit_length(), m) if p == "pow2" else f),
            lambda p, n, m, f=None: float(S03.reservation(p, n, m, f)),
        ],
        check.first_fit: [
            _pops(S03.first_fit),
            lambda r, n: next((s for s, ln in r if ln > n), None) if n >= 1 else S03.first_fit(r, n),
            lambda r, n: (min(((ln, s) for s, ln in r if ln >= n), default=(0, None))[1]) if n >= 1 else S03.first_fit(r, n),
            lambda r, n: next((s for s, ln in r if ln >= n), -1) if n >= 1 else S03.first_fit(r, n),
        ],
        check.external_fragmentation: [
            lambda r: sum(n for _, n in r),
            lambda r: sum(n for _, n in r) - max(n for _, n in r),
            lambda r: (sum(n for _, n in r) - max((n for _, n in r), default=0)) / max(1, sum(n for _, n in r)),
            lambda r: sum(n for _, n in r) - r[0][1] if r else 0,
        ],
        check.place_first_fit: [
            lambda cap, ops: {**S03.place_first_fit(cap, ops), "wasted_share": 100 * S03.place_first_fit(cap, ops)["wasted_share"]},
            lambda cap, ops: {k: v for k, v in S03.place_first_fit(cap, ops).items() if k != "refused"},
            lambda cap, ops: S03.place_first_fit(cap, [op for op in ops if op[0] != "finish" or op[1] != "A"]),
            lambda cap, ops: {**S03.place_first_fit(cap, ops), "largest_hole": S03.place_first_fit(cap, ops)["largest_hole"] + 0.0},
        ],
        check.translate: [
            lambda t, p, bs, bpt=1: S04.translate(t, p, bs, bpt)[:3] + (p * bpt,) if 0 <= p < len(t) * bs else S04.translate(t, p, bs, bpt),
            lambda t, p, bs, bpt=1: (p % bs, p // bs) + S04.translate(t, p, bs, bpt)[2:] if 0 <= p < len(t) * bs else S04.translate(t, p, bs, bpt),
            lambda t, p, bs, bpt=1: S04.translate(t, p, bs, bpt) if p <= len(t) * bs and p >= 0 and p != len(t) * bs else (0, 0, 0, 0),
            lambda t, p, bs, bpt=1: list(S04.translate(t, p, bs, bpt)),
        ],
        check.blocks_needed: [
            lambda n, bs: n // bs + 1 if n >= 0 and bs >= 1 else S04.blocks_needed(n, bs),
            lambda n, bs: n // bs if n >= 0 and bs >= 1 else S04.blocks_needed(n, bs),
            lambda n, bs: n / bs if n >= 0 and bs >= 1 else S04.blocks_needed(n, bs),
            lambda n, bs: math.ceil(n / bs) if n >= 0 and bs >= 1 else S04.blocks_needed(n, bs),
            lambda n, bs: -(-n // bs),
        ],
        check.blocks_to_append: [
            lambda t, n, bs: -(-n // bs) if n >= 0 else S04.blocks_to_append(t, n, bs),
            lambda t, n, bs: -(-(t + n) // bs) if n >= 0 else S04.blocks_to_append(t, n, bs),
            lambda t, n, bs: (t + n) // bs - t // bs if n >= 0 else S04.blocks_to_append(t, n, bs),
            lambda t, n, bs: float(S04.blocks_to_append(t, n, bs)),
        ],
        check.block_allocator: [_alloc_lifo(), _alloc_no_double_free(), _alloc_partial(), _alloc_free_at_two()],
        check.paged_decode_torch: [
            lambda q, k, v, t, n, s: S05.paged_decode_torch(q, k, v, t, n, 1.0),
            lambda q, k, v, t, n, s: S05.paged_decode_torch(q, k, v, t, n, 1 / q.shape[-1] ** 0.5),
            lambda q, k, v, t, n, s: S05.paged_decode_torch(q, k, v, list(range(len(t))), n, s),
            lambda q, k, v, t, n, s: S05.paged_decode_torch(q, k, v, t, -(-n // k.shape[1]) * k.shape[1], s),
        ],
        check.kernel_tiles: [
            lambda n, bs, tile, s: [[range(x[0], x[-1] + 1) for x in p] for p in S05.kernel_tiles(n, bs, tile, s)],
            lambda n, bs, tile, s: S05.kernel_tiles(n, bs, tile, s)[::-1],
            lambda n, bs, tile, s: S05.kernel_tiles(n - 1, bs, tile, s) if n > 1 else S05.kernel_tiles(n, bs, tile, s),
            lambda n, bs, tile, s: [[b for t in p for b in t] for p in S05.kernel_tiles(n, bs, tile, s)],
        ],
    }


def test_wrong_answers_of_lessons_00_to_05_are_rejected_and_named():
    total, rejected, named, unnamed = 0, 0, 0, []
    for checker, wrongs in _wrong_answers().items():
        assert len(wrongs) >= 4, checker.__name__
        for i, wrong in enumerate(wrongs):
            total += 1
            r = checker(wrong, verbose=False)
            if r.passed:
                unnamed.append(f"{checker.__name__} #{i}: ACCEPTED")
                continue
            rejected += 1
            if r.failures[0].note:
                named += 1
            else:
                unnamed.append(f"{checker.__name__} #{i}: {r.summary[:160]}")
    print(f"\n{total} wrong answers, {rejected} rejected, {named} named ({named / rejected:.0%} of the rejected)")
    print("\n".join(unnamed))
    assert rejected == total, unnamed
    assert named >= 0.9 * rejected, unnamed
