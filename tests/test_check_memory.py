"""The memory lessons' checkers (00, 02-04): each passes a right answer and rejects plausible wrong ones.

Also the harness (kvlab.check.harness): outcomes, strict mode, never a traceback from the
checker; and the package's shape: ``kvlab.check`` exposes exactly the checkers the lessons
call, each in the module named for its lesson, imported explicitly and without torch.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvlab import check
from kvlab.check.harness import Checker, Raised, call, same_outcome
from kvlab.memory.block_pool import BlockAllocator, DoubleFree, OutOfBlocks
from kvlab.memory.block_table import blocks_needed

ROOT = Path(__file__).resolve().parent.parent


def _solutions(stem: str):
    spec = importlib.util.spec_from_file_location(f"sol_{stem}", ROOT / "solutions" / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _passes(checker, fn) -> bool:
    return checker(fn, verbose=False).passed


def _stub(*args, **kwargs):
    raise NotImplementedError("your code here")


# ---------------------------------------------------------------------------- harness
def test_harness_outcomes():
    assert isinstance(call(int, "x"), Raised)
    assert same_outcome(Raised(ValueError("a")), Raised(ValueError("b")))
    assert not same_outcome(Raised(ValueError("a")), Raised(IndexError("b")))  # wrong exception class
    assert not same_outcome(Raised(ValueError("a")), 3)
    assert not same_outcome(3, Raised(ValueError("a")))
    assert not same_outcome(Raised(NotImplementedError()), Raised(NotImplementedError()))  # a stub never passes
    assert same_outcome((2, 1), (2, 1)) and not same_outcome((2, 1), (1, 2))


def test_harness_deep_copies_arguments():
    def mutating(xs):
        xs.append(99)
        return len(xs)

    c = Checker("len", mutating, reference=len, verbose=False)
    assert not c.run("mutates", [1, 2]).passed  # 3 != 2, and the reference saw the original list
    assert c.result.cases[0].expected == 2


def test_strict_mode_raises_and_plain_mode_does_not(monkeypatch, capsys):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)
    r = check.blocks_needed(_stub)
    out = capsys.readouterr().out
    assert not r.passed and r.not_implemented
    assert "FAIL  blocks_needed" in out and "Traceback" not in out
    monkeypatch.setenv("KVLAB_CHECK_STRICT", "1")
    with pytest.raises(AssertionError, match="blocks_needed"):
        check.blocks_needed(_stub)
    assert check.blocks_needed(blocks_needed).passed  # strict and right: no raise


def test_not_a_function_is_a_clean_fail(capsys):
    r = check.translate(42)
    assert not r.passed and "expected a function" in r.summary
    assert "FAIL" in capsys.readouterr().out


def _lesson_calls() -> dict[str, str]:
    """Checker name -> the lesson ("04_paging") whose source calls ``check.<name>(``."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py")):
        for name in re.findall(r"\bcheck\.([A-Za-z_]\w*)\(", path.read_text(encoding="utf-8")):
            assert out.setdefault(name, path.stem) == path.stem, f"{name} is called by two lessons"
    return out


def _checker_names() -> set[str]:
    return {n for n in check.__all__ if getattr(getattr(check, n), "__module__", "").startswith("kvlab.check.l")}


def test_check_exposes_exactly_the_lessons_checkers_each_in_its_lessons_module():
    calls = _lesson_calls()
    assert len(calls) >= 23, sorted(calls)
    assert _checker_names() == set(calls), (sorted(_checker_names() ^ set(calls)))
    for name, lesson in calls.items():  # check.translate (lesson 04_paging) lives in kvlab.check.l04_paging
        module = getattr(check, name).__module__
        short = module.removeprefix("kvlab.check.l")
        assert re.fullmatch(r"\d\d_[a-z_0-9]+", short) and lesson.startswith(short), (name, lesson, module)
        assert name in sys.modules[module].__all__, (name, module)
    assert set(check.__all__) == _checker_names() | set(check.harness.__all__) | set(check.environment.__all__)


def test_checkers_are_imported_explicitly_and_without_torch():
    src = (ROOT / "kvlab" / "check" / "__init__.py").read_text(encoding="utf-8")
    assert "pkgutil" not in src and "__getattr__" not in src and "import_module" not in src
    for name in _checker_names():
        assert re.search(rf"^from \.l\d\d_\w+ import .*\b{name}\b", src, re.M), name
    code = ("import sys\nimport kvlab.check\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy')\n"
            "             or m.startswith(('kvlab.compute', 'kvlab.sim', 'kvlab.kernels', 'kvlab.viz')))\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_unknown_checker_name():
    with pytest.raises(AttributeError, match="no_such_checker"):
        check.no_such_checker  # noqa: B018


def test_result_display_is_quiet():
    r = check.blocks_needed(blocks_needed, verbose=False)
    assert r._ipython_display_() is None and "PASS" in repr(r)


# --------------------------------------------------------------------------- lesson 00
def test_block_and_offset():
    ok = _solutions("00_start_here").block_and_offset
    assert _passes(check.block_and_offset, ok)
    assert not _passes(check.block_and_offset, lambda p, bs: (p // bs, p % bs))  # no ValueError
    assert not _passes(check.block_and_offset, lambda p, bs: (p % bs, p // bs) if p >= 0 and bs >= 1 else 1 / 0)
    assert not _passes(check.block_and_offset, lambda p, bs: ((p + 1) // bs, p % bs) if p >= 0 < bs else int("x"))
    assert not _passes(check.block_and_offset, _stub)


def test_reusable_tokens():
    ok = _solutions("00_start_here").reusable_tokens
    assert _passes(check.reusable_tokens, ok)
    shared = check.l00_start._common_prefix_len_ref
    assert not _passes(check.reusable_tokens, lambda a, b, bs: shared(a, b))  # the shared prefix itself
    assert not _passes(check.reusable_tokens, lambda a, b, bs: shared(a, b) // bs * bs)  # computes no token
    assert not _passes(check.reusable_tokens, lambda a, b, bs: min(shared(a, b), len(b) - 1))  # partial blocks
    assert not _passes(check.reusable_tokens, lambda a, b, bs: max(min(shared(a, b), len(a) - 1), 0) // bs * bs)
    r = check.reusable_tokens(lambda a, b, bs: shared(a, b) // bs * bs if bs > 0 else 1 / 0, verbose=False)
    assert "at least its last token" in r.summary


def test_common_prefix_len():
    ok = _solutions("00_start_here").common_prefix_len
    assert _passes(check.common_prefix_len, ok)
    assert not _passes(check.common_prefix_len, lambda a, b: sum(x == y for x, y in zip(a, b)))  # counts later matches
    assert not _passes(check.common_prefix_len, lambda a, b: min(len(a), len(b)))  # ignores content
    assert not _passes(check.common_prefix_len, lambda a, b: next(i for i, (x, y) in enumerate(zip(a, b)) if x != y))


# --------------------------------------------------------------------------- lesson 02
def test_kv_cache_bytes():
    def right(layers, kv_heads, head_dim, tokens, dtype_bytes=2):
        if min(layers, kv_heads, head_dim, dtype_bytes) < 1 or tokens < 0:
            raise ValueError("bad")
        return 2 * layers * kv_heads * head_dim * tokens * dtype_bytes

    assert _passes(l02_how_big.kv_cache_bytes, right)
    assert not _passes(l02_how_big.kv_cache_bytes, lambda l, h, d, t, b=2: right(l, h, d, t, b) // 2)  # forgot K and V
    assert not _passes(l02_how_big.kv_cache_bytes, lambda l, h, d, t, b=2: right(l, h, d, t, 2))  # ignores dtype
    assert not _passes(l02_how_big.kv_cache_bytes, lambda l, h, d, t, b=2: 2 * l * h * d * t * b)  # no validation


def test_requests_that_fit():
    def right(budget, bpt, tokens):
        if bpt < 1 or tokens < 1 or budget < 0:
            raise ValueError("bad")
        return budget // (bpt * tokens)

    assert _passes(l02_how_big.requests_that_fit, right)
    assert not _passes(l02_how_big.requests_that_fit, lambda b, p, t: round(b / (p * t)) if p > 0 < t and b >= 0 else 1 / 0)
    assert not _passes(l02_how_big.requests_that_fit, lambda b, p, t: -(-b // (p * t)) if p > 0 < t and b >= 0 else int("x"))
    assert not _passes(l02_how_big.requests_that_fit, lambda b, p, t: b // (p * t) if p * t else 0)


# --------------------------------------------------------------------------- lesson 03
def test_reservation():
    right = _solutions("03_contiguous").reservation
    assert _passes(check.reservation, right)

    def no_cap(policy, length, max_len, final_len=None):
        return 1 << (length - 1).bit_length() if policy == "pow2" and length >= 1 else right(policy, length, max_len, final_len)

    def pow2_strict(policy, length, max_len, final_len=None):  # next power of two > length (wrong at 8)
        return min(1 << length.bit_length(), max_len) if policy == "pow2" and length >= 1 else right(policy, length, max_len, final_len)

    assert not _passes(check.reservation, no_cap)
    assert not _passes(check.reservation, pow2_strict)
    assert not _passes(check.reservation, lambda p, n, m, f=None: m)


def test_first_fit():
    def right(ranges, n):
        if n < 1:
            raise ValueError(n)
        return next((s for s, length in ranges if length >= n), None)

    assert _passes(check.first_fit, right)

    def best_fit(ranges, n):
        if n < 1:
            raise ValueError(n)
        fits = [(length, s) for s, length in ranges if length >= n]
        return min(fits)[1] if fits else None

    def strict_gt(ranges, n):
        if n < 1:
            raise ValueError(n)
        return next((s for s, length in ranges if length > n), None)

    def total_free(ranges, n):  # the notes' mistake: adds up the holes
        if n < 1:
            raise ValueError(n)
        return ranges[0][0] if ranges and sum(length for _, length in ranges) >= n else None

    for wrong in (best_fit, strict_gt, total_free):
        assert not _passes(check.first_fit, wrong), wrong.__name__


def test_external_fragmentation():
    right = lambda r: sum(n for _, n in r) - max((n for _, n in r), default=0)  # noqa: E731
    assert _passes(check.external_fragmentation, right)
    assert not _passes(check.external_fragmentation, lambda r: sum(n for _, n in r))  # all free space
    assert not _passes(check.external_fragmentation, lambda r: sum(n for _, n in r) - r[0][1] if r else 0)  # first, not largest
    assert not _passes(check.external_fragmentation, lambda r: sum(n for _, n in r) - max(n for _, n in r))  # crashes on []


# --------------------------------------------------------------------------- lesson 04
def _right_translate(table, pos, bs, bpt=1):
    if pos < 0 or pos >= len(table) * bs:
        raise ValueError(pos)
    lb, off = divmod(pos, bs)
    return lb, off, table[lb], (table[lb] * bs + off) * bpt


def test_translate():
    assert _passes(check.translate, _right_translate)
    assert not _passes(check.translate, lambda t, p, bs, bpt=1: (p // bs, p % bs, t[p // bs], (t[p // bs] * bs + p % bs) * bpt))
    assert not _passes(check.translate, lambda t, p, bs, bpt=1: _right_translate(t, p, bs, bpt)[:3] + ((p // bs * bs + p % bs) * bpt,))
    assert not _passes(check.translate, lambda t, p, bs, bpt=1: _right_translate(t, p, bs, bpt)[:3] + (t[p // bs] * bs + p % bs * bpt,))


def test_blocks_needed():
    assert _passes(check.blocks_needed, blocks_needed)
    assert not _passes(check.blocks_needed, lambda n, bs: n // bs + 1 if n >= 0 < bs else 1 / 0)  # off by one
    assert not _passes(check.blocks_needed, lambda n, bs: n // bs if n >= 0 < bs else 1 / 0)  # rounds down
    assert not _passes(check.blocks_needed, lambda n, bs: -(-n // bs))  # no ValueError


def test_blocks_to_append():
    def right(t, n, bs):
        if t < 0 or n < 0 or bs < 1:
            raise ValueError("bad")
        return -(-(t + n) // bs) - -(-t // bs)

    assert _passes(check.blocks_to_append, right)
    assert not _passes(check.blocks_to_append, lambda t, n, bs: -(-n // bs) if n >= 0 else 1 / 0)  # ignores the partial block
    assert not _passes(check.blocks_to_append, lambda t, n, bs: (1 if t % bs == 0 else 0) if n >= 0 else 1 / 0)  # n = 1 only
    assert not _passes(check.blocks_to_append, lambda t, n, bs: right(t, n, bs) if n >= 0 else 0)


_RightAllocator = _solutions("04_paging").TinyAllocator  # free queue: self.free_queue (a deque)


class _ForgetsRefCount(_RightAllocator):
    def free(self, ids):
        if any(self.ref_count[b] == 0 for b in ids):
            raise DoubleFree("double free")
        for b in ids:
            self.ref_count[b] = 0
            self.free_queue.append(b)
        return list(ids)


class _LIFO(_RightAllocator):
    def free(self, ids):
        out = super().free(ids)
        for b in out:  # reuse the most recently freed first
            self.free_queue.remove(b)
            self.free_queue.appendleft(b)
        return out


class _PartialOnFailure(_RightAllocator):
    def allocate(self, n):
        if n < 0:
            raise ValueError(n)
        ids = []
        while len(ids) < n:
            if not self.free_queue:
                raise OutOfBlocks(n, 0)  # but keeps what it took
            b = self.free_queue.popleft()
            self.ref_count[b] = 1
            ids.append(b)
        return ids


class _NoDoubleFreeCheck(_RightAllocator):
    def free(self, ids):
        out = []
        for b in ids:
            self.ref_count[b] = max(0, self.ref_count[b] - 1)
            if self.ref_count[b] == 0 and b not in self.free_queue:
                self.free_queue.append(b)
                out.append(b)
        return out


def test_block_allocator():
    assert _passes(check.block_allocator, _RightAllocator)
    assert _passes(check.block_allocator, lambda n: BlockAllocator(n, block_size=4))
    for wrong in (_ForgetsRefCount, _LIFO, _PartialOnFailure, _NoDoubleFreeCheck):
        assert not _passes(check.block_allocator, wrong), wrong.__name__
    assert not _passes(check.block_allocator, _stub)


def test_checkers_name_the_common_mistakes():
    """Issue 16: a half-size answer asks about K and V, a swapped pair says so, off by one block too."""
    from kvlab import check

    r = l02_how_big.kv_cache_bytes(lambda L, h, d, t, b=2: L * h * d * t * b, verbose=False)  # forgot the 2
    assert not r.passed and "the 2 for K and V is missing" in r.summary
    r = check.translate(lambda tab, pos, bs, bpt=1: (pos % bs, pos // bs, tab[pos // bs],
                                                     (tab[pos // bs] * bs + pos % bs) * bpt), verbose=False)
    assert not r.passed and "logical block and offset are swapped" in r.summary
    r = check.blocks_needed(lambda n, bs: n // bs + 1 if n >= 0 and bs >= 1 else (_ for _ in ()).throw(ValueError()),
                            verbose=False)
    assert not r.passed and "off by one block" in r.summary
    r = check.block_and_offset(lambda pos, bs: (pos % bs, pos // bs) if pos >= 0 and bs > 0 else 1 / 0, verbose=False)
    assert not r.passed and "swapped" in r.summary


def test_state_failures_show_only_the_fields_that_differ_in_full():
    from kvlab.check.harness import Checker

    c = Checker("state", verbose=False)
    long = list(range(60))
    c.record("after step 3", {"tables": {"A": long}, "ref_count": [1] * 40},
             {"tables": {"A": long}, "ref_count": [1] * 39 + [2]})
    r = c.done(strict=False)
    assert "tables" not in r.summary and "ref_count: expected" in r.summary and "..." not in r.summary
    assert "differs: ref_count" in r.report()


# ------------------------------------------------------------- issue 16: new exercises of 02 and 03
from kvlab.check import l02_how_big, l03_contiguous  # noqa: E402  (registered in kvlab.check too)


def _fails_with(checker, fn, *notes) -> str:
    """The checker rejects ``fn`` and its summary names one of ``notes`` (the diagnosed mistake)."""
    r = checker(fn, verbose=False)
    assert not r.passed, f"{getattr(fn, '__name__', fn)} passed"
    text = r.report()
    assert any(n in text for n in notes), f"no diagnosis among {notes} in:\n{text}"
    return r.summary


def test_bytes_per_token_from_config():
    sol = _solutions("02_how_big")
    check_ = l02_how_big.bytes_per_token_from_config
    assert _passes(check_, sol.bytes_per_token_from_config)
    db = l02_how_big.DTYPE_BYTES

    def hidden(cfg):  # the notes' formula
        return 2 * cfg["num_hidden_layers"] * cfg["hidden_size"] * db[cfg.get("torch_dtype", "float16")]

    def no_default_kv(cfg):
        return sol.bytes_per_token_from_config({**cfg, "num_key_value_heads": cfg["num_key_value_heads"]})

    def ignores_head_dim(cfg):
        return sol.bytes_per_token_from_config({k: v for k, v in cfg.items() if k != "head_dim"})

    def no_two(cfg):
        return sol.bytes_per_token_from_config(cfg) // 2

    def ignores_dtype(cfg):
        sol.bytes_per_token_from_config(cfg)  # the ValueError for int4 stays
        return sol.bytes_per_token_from_config({**cfg, "torch_dtype": "float16"})

    _fails_with(check_, hidden, "hidden_size (the notes' formula)")
    _fails_with(check_, no_default_kv, "KeyError")
    _fails_with(check_, ignores_head_dim, "head_dim given in the config was ignored")
    _fails_with(check_, no_two, "both K and V")
    _fails_with(check_, ignores_dtype, "torch_dtype ignored")
    assert l02_how_big.bytes_per_token_from_config is check.bytes_per_token_from_config


def _max_concurrent_variant(order=True, blocks=True, floor=False, util=True, weights=True, mean=False):
    sol = _solutions("02_how_big")

    def f(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
        sol.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)  # validates
        budget = int(gpu_bytes * (utilization if util else 1.0)) - (weight_bytes if weights else 0)
        if blocks:
            room = max(0, budget) // (block_size * bytes_per_token)
            sizes = [n // block_size if floor else -(-n // block_size) for n in lengths]
        else:
            room, sizes = max(0, budget) // bytes_per_token, list(lengths)
        if mean:
            return min(len(lengths), room // -(-round(sum(lengths) / len(lengths)) // block_size))
        k = used = 0
        for s in (sorted(sizes) if order else sizes):
            if used + s > room:
                break
            used, k = used + s, k + 1
        return k

    return f


def test_max_concurrent():
    check_ = l02_how_big.max_concurrent
    assert _passes(check_, _solutions("02_how_big").max_concurrent)
    assert _passes(check_, _max_concurrent_variant())  # the variant builder is right by default
    for kw, note in [(dict(order=False), "take the shortest first"),
                     (dict(blocks=False), "counted tokens, not blocks"),
                     (dict(floor=True), "rounded each request's blocks down"),
                     (dict(util=False), "utilization ignored"),
                     (dict(weights=False), "weights were not subtracted"),
                     (dict(mean=True), "used the mean length")]:
        _fails_with(check_, _max_concurrent_variant(**kw), note)
    assert not _passes(check_, lambda L, g, u, w, b, bs=16: _max_concurrent_variant()(L, g, min(u, 1.0), w, b, bs)
                       if u <= 1 else 0)  # no ValueError for utilization 1.5


def test_place_first_fit():
    sol = _solutions("03_contiguous")
    check_ = l03_contiguous.place_first_fit
    assert _passes(check_, sol.place_first_fit)
    sim = l03_contiguous._simulate

    def valid(f):
        def g(cap, ops):
            sol.place_first_fit(cap, ops)  # the same ValueErrors
            return f(cap, ops)
        return g

    right = sol.place_first_fit
    _fails_with(check_, valid(lambda c, o: sim(c, o, coalesce=False)), "merge with the free ranges beside it")
    _fails_with(check_, valid(lambda c, o: sim(c, o, fit="best")), "best fit")
    _fails_with(check_, valid(lambda c, o: sim(c, o, bump=True)), "never reused")
    _fails_with(check_, valid(lambda c, o: {**right(c, o), "wasted_share": right(c, o)["wasted_share"] * 0.5}),
                "wasted_share")  # any other share is wrong (halved: no diagnosis, but rejected)

    def capacity_share(c, o):
        r = right(c, o)
        free = r["largest_hole"] / (1 - r["wasted_share"]) if r["wasted_share"] < 1 and r["largest_hole"] else 0
        return {**r, "wasted_share": (free - r["largest_hole"]) / c}

    _fails_with(check_, valid(capacity_share), "share of the FREE memory")

    def total_free(c, o):
        r = right(c, o)
        free = round(r["largest_hole"] / (1 - r["wasted_share"])) if r["largest_hole"] else 0
        return {**r, "largest_hole": free}

    _fails_with(check_, valid(total_free), "biggest single hole")
    _fails_with(check_, lambda c, o: sim(c, [x for x in o if x[0] in ("admit", "finish") and (x[0] == "finish" or x[2] > 0)]),
                "must raise ValueError")


def test_lesson_00_to_04_checkers_name_their_mistakes():
    """Issue 16: every checker of lessons 00-04 where a common mistake exists names it."""
    cases = [
        (check.block_and_offset, lambda p, bs: ((p + 1) // bs, p % bs) if p >= 0 < bs else 1 / 0, "counted tokens from 1"),
        (check.common_prefix_len, lambda a, b: sum(x == y for x, y in zip(a, b)), "stop counting at the first token"),
        (l02_how_big.kv_cache_bytes, lambda l, h, d, t, b=2: 2 * l * h * d * t * 2 if min(l, h, d, b) > 0 <= t else int("x"),
         "dtype_bytes ignored"),
        (l02_how_big.requests_that_fit, lambda b, p, t: round(b / (p * t)) if p > 0 < t and b >= 0 else int("x"), "round down"),
        (check.reservation, lambda p, n, m, f=None: _solutions("03_contiguous").reservation(p, n, 10**9, f)
         if p == "pow2" else _solutions("03_contiguous").reservation(p, n, m, f), "must not exceed max_len"),
        (check.first_fit, lambda r, n: (r[0][0] if r and sum(x for _, x in r) >= n else None) if n > 0 else int("x"),
         "you added up the holes"),
        (check.external_fragmentation, lambda r: sum(n for _, n in r), "subtract the largest hole"),
        (check.translate, lambda t, p, bs, bpt=1: _right_translate(t, p, bs, bpt)[:3] + ((p // bs * bs + p % bs) * bpt,),
         "PHYSICAL block"),
        (check.blocks_needed, lambda n, bs: n // bs if n >= 0 < bs else int("x"), "rounded down"),
        (check.blocks_to_append, lambda t, n, bs: -(-n // bs) if n >= 0 <= t and bs > 0 else int("x"), "fill it before"),
        (check.block_allocator, _LIFO, "BACK of the free queue"),
        (check.block_allocator, _ForgetsRefCount, "ref count 2 stays in use"),
        (check.block_allocator, _PartialOnFailure, "all or nothing"),
        (check.block_allocator, _NoDoubleFreeCheck, "DoubleFree"),
    ]
    for checker, wrong, note in cases:
        _fails_with(checker, wrong, note)


def test_should_have_raised_is_named():
    r = check.blocks_needed(lambda n, bs: -(-n // bs) if bs > 0 else 0, verbose=False)
    assert "must raise ValueError" in r.report()



def test_an_untouched_stub_is_not_told_the_answers(capsys):
    """Issue 28, the review of lesson 02 (exercise 1): the stub's check printed "expected 8" (the
    predict-first answer, 8 KV heads) before the student had predicted anything."""
    def kv_heads_for_budget(layers, num_heads, head_dim, tokens, budget_bytes, dtype_bytes=2):
        raise NotImplementedError("your code here")

    r = check.kv_heads_for_budget(kv_heads_for_budget)
    out = capsys.readouterr().out
    assert not r.passed and r.not_implemented and "NotImplementedError" in out
    assert "expected" not in out and "expected" not in r.summary, out
    assert "0/22" in out
