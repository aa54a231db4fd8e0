"""Issue 28: wrong answers the checkers of lessons 00-05 accepted, each now rejected with its mistake named.

The contract of every exercise: the caller's input is unchanged after the call; a refused call
changes nothing (state compared after the exception); the edges (empty, one element, powers of
two, ties) and non-default parameters are tried; the whole state is compared, not only the value.
(The kernel cases of lesson 05 are in tests/test_check_reuse.py, beside its kernel template.)
"""
from __future__ import annotations

from kvlab import check
from kvlab.memory.block_pool import DoubleFree
from test_check_memory import _solutions

S00, S01, S02, S03, S04, S05 = (_solutions(s) for s in (
    "00_start_here", "01_why_kv_cache", "02_how_big", "03_contiguous", "04_paging", "05_paged_kernel"))


def _notes(result) -> str:
    assert not result.passed, "the checker accepted a wrong answer"
    return " | ".join(c.note for c in result.failures)


# ------------------------------------------------------------------------------ the harness
def test_run_fails_a_call_that_changes_its_input_even_when_the_answer_is_right():
    def total_pops(xs):
        n = 0
        while xs:
            n += xs.pop()
        return n

    c = check.Checker("total", total_pops, reference=sum, verbose=False)
    case = c.run("three numbers", [1, 2, 3])
    assert not case.passed and "changed its input" in case.note and "[1, 2, 3]" in case.note


def test_run_fails_a_refused_call_that_changed_its_input():
    def check_late(xs):
        xs.append(0)
        raise ValueError("too late")

    def ref(xs):
        raise ValueError("refused")

    case = check.Checker("refuse", check_late, reference=ref, verbose=False).run("refused", [1])
    assert not case.passed and "changed its input" in case.note


# ------------------------------------------------------------------------------ 00
def test_00_common_prefix_len_that_pops_from_its_inputs():
    def pops(a, b):
        n = 0
        while a and b and a[0] == b[0]:
            a.pop(0)
            b.pop(0)
            n += 1
        return n

    assert check.common_prefix_len(S00.common_prefix_len, verbose=False).passed
    assert "changed its input: 'a'" in _notes(check.common_prefix_len(pops, verbose=False))


# ------------------------------------------------------------------------------ 01
def test_01_attend_with_cache_that_prepends_the_new_token():
    import torch

    def prepend(q, k_new, v_new, k_cache, v_cache):
        out, _, _ = S01.attend_with_cache(q, k_new, v_new, k_cache, v_cache)
        return out, torch.cat([k_new[None], k_cache]), torch.cat([v_new[None], v_cache])

    assert check.attend_with_cache(S01.attend_with_cache, verbose=False).passed
    assert "FRONT of the cache" in _notes(check.attend_with_cache(prepend, verbose=False))


# ------------------------------------------------------------------------------ 02
def test_02_max_concurrent_that_sorts_its_input_in_place():
    def sorts_in_place(lengths, *rest):
        lengths.sort()
        return S02.max_concurrent(lengths, *rest)

    assert "changed its input: 'lengths'" in _notes(check.max_concurrent(sorts_in_place, verbose=False))


# ------------------------------------------------------------------------------ 03
def test_03_place_first_fit_that_admits_a_request_already_placed():
    def no_twice_check(capacity, ops):
        seen, renamed = {}, []
        for op in ops:  # a second admit of a placed id goes through under a fresh name
            if op[0] == "admit" and op[1] in seen:
                renamed.append(("admit", f"{op[1]}'", op[2]))
                continue
            if op[0] == "admit":
                seen[op[1]] = True
            elif op[0] == "finish":
                seen.pop(op[1], None)
            renamed.append(op)
        return S03.place_first_fit(capacity, renamed)

    notes = _notes(check.place_first_fit(no_twice_check, verbose=False))
    assert "must raise ValueError" in notes


def test_03_reservation_that_checks_the_range_only_under_max():
    def range_only_for_max(policy, length, max_len, final_len=None):
        if policy == "max":
            return S03.reservation(policy, length, max_len, final_len)
        if policy == "pow2":
            return min(1 << (length - 1).bit_length(), max_len) if length >= 1 else 1
        if policy == "exact":
            if final_len is None:
                raise ValueError("exact needs final_len")
            return final_len
        raise ValueError(policy)

    r = check.reservation(range_only_for_max, verbose=False)
    assert "must raise ValueError" in _notes(r) and "whatever the policy" in r.failures[0].label


def test_03_reservation_that_treats_an_unknown_policy_as_exact():
    def else_exact(policy, length, max_len, final_len=None):
        if policy in ("max", "pow2"):
            return S03.reservation(policy, length, max_len, final_len)
        return S03.reservation("exact", length, max_len, final_len)

    r = check.reservation(else_exact, verbose=False)
    assert "must raise ValueError" in _notes(r) and "not act as 'exact'" in r.failures[0].label


def test_03_first_fit_that_shrinks_the_callers_list():
    def pops(free_ranges, n):
        if n < 1:
            raise ValueError(n)
        while free_ranges:
            start, length = free_ranges.pop(0)
            if length >= n:
                return start
        return None

    assert check.first_fit(S03.first_fit, verbose=False).passed
    assert "changed its input: 'free_ranges'" in _notes(check.first_fit(pops, verbose=False))


# ------------------------------------------------------------------------------ 04
def test_04_free_that_raises_double_free_after_freeing_the_first_block():
    class FreesThenRaises(S04.TinyAllocator):
        def free(self, ids):
            released = []
            for b in ids:  # checks each block as it goes: the ones before the free block are already freed
                if self.ref_count[b] == 0:
                    raise DoubleFree(f"block {b} is already free")
                self.ref_count[b] -= 1
                if self.ref_count[b] == 0:
                    self.free_queue.append(b)
                    released.append(b)
            return released

    assert check.block_allocator(S04.TinyAllocator, verbose=False).passed
    r = check.block_allocator(FreesThenRaises, verbose=False)
    assert "changed the state first" in _notes(r) and "free([0, 2])" in r.failures[0].label


# ------------------------------------------------------------------------------ 05
def test_05_paged_decode_torch_that_ignores_scale():
    def fixed_scale(q, k_cache, v_cache, block_table, context_len, scale):
        return S05.paged_decode_torch(q, k_cache, v_cache, block_table, context_len, 1 / q.shape[-1] ** 0.5)

    assert check.paged_decode_torch(S05.paged_decode_torch, verbose=False).passed
    assert "scale argument was ignored" in _notes(check.paged_decode_torch(fixed_scale, verbose=False))


def test_05_paged_decode_torch_that_scales_the_callers_cache_in_place():
    def scales_in_place(q, k_cache, v_cache, block_table, context_len, scale):
        k_cache.mul_(scale)  # the caller's cache, changed
        return S05.paged_decode_torch(q, k_cache, v_cache, block_table, context_len, 1.0)

    assert "changed its input: 'k_cache'" in _notes(check.paged_decode_torch(scales_in_place, verbose=False))


def test_05_paged_decode_torch_that_returns_float64():
    """Review of 6b9afee: an output in float64 (inputs float32) passed every case."""
    import torch

    def in_float64(q, k_cache, v_cache, block_table, context_len, scale):
        return S05.paged_decode_torch(q, k_cache, v_cache, block_table, context_len, scale).to(torch.float64)

    r = check.paged_decode_torch(in_float64, verbose=False)
    assert not r.passed and "came back as float64" in _notes(r)


def test_shared_slips_never_break_a_check_on_tensors():
    """scripts/mutants.py found it: a tuple of tensors, compared by the slips element by element, raised
    'Boolean value of Tensor ... is ambiguous' out of the checker (a checker error, not a FAIL line)."""
    import torch

    c = check.Checker("pair", lambda: (torch.zeros(3), torch.ones(3)), reference=lambda: (torch.ones(3), torch.ones(3)),
                      compare=lambda e, a: all(torch.equal(x, y) for x, y in zip(e, a)), verbose=False)
    assert not c.run("two tensors").passed
    c2 = check.Checker("state", lambda: {"t": torch.zeros(2), "n": 2.0}, reference=lambda: {"t": torch.ones(2), "n": 2},
                       compare=lambda e, a: False, verbose=False)
    assert "n: returned the float 2.0" in c2.run("a dict with a tensor").note
