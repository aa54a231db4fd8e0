"""Issue 28, the review of 34c45ca: the wrong answers lessons 09 and 12 rejected without naming the
mistake. Each is typed here as the reviewer typed it; every failure it gets must carry the mistake's
name, and the first one the likeliest."""
from __future__ import annotations

from kvlab import check
from test_check_memory import _solutions

S12 = _solutions("12_real_server")


def _notes(r):
    assert not r.passed
    return [c.note for c in r.failures]


def test_09_fit_requests_names_a_hard_coded_block_size():
    def hard_coded(capacity, block_size, max_len, lengths):  # the review's E2-W7 (with round 12's max_len check)
        if any(n > max_len for n in lengths):
            raise ValueError("a length over max_len")
        free, n = capacity // 16, 0
        for length in lengths:
            b = -(-length // 16)
            if b > free:
                break
            free, n = free - b, n + 1
        return min(capacity // max_len, len(lengths)), n

    notes = _notes(check.fit_requests(hard_coded, verbose=False))
    assert notes and all("hard-coded block_size" in n and "16" in n for n in notes), notes


def test_09_orca_reservation_names_a_hard_coded_block_size():
    def hard_coded(prompt_len, output_len, mode, block_size=16, max_len=2048):
        if mode not in ("max", "pow2", "oracle"):
            raise ValueError(mode)
        est = {"max": max_len, "pow2": 1 << (output_len - 1).bit_length(), "oracle": output_len}[mode]
        blocks = -(-min(prompt_len + est, max_len) // 16)
        return 1 << (blocks - 1).bit_length()

    notes = _notes(check.orca_reservation(hard_coded, verbose=False))
    assert notes and all("hard-coded block size" in n for n in notes), notes


def _trie(prompts):
    return len({tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)})


def test_09_optimal_hit_rate_names_a_count_for_the_fraction():
    def count(prompts):  # the review's E3-W8: the hit tokens themselves, an int
        total = sum(len(p) for p in prompts)
        return total - _trie(prompts) if total else 0.0

    notes = [n for n in _notes(check.optimal_hit_rate(count, verbose=False))]
    assert notes and all("number of tokens" in n and "fraction" in n for n in notes), notes


def test_09_optimal_hit_rate_names_whole_prompts_only():
    def whole(prompts):  # the review's E3-W7: only a repeated whole prompt hits
        total = sum(len(p) for p in prompts)
        if not total:
            return 0.0
        seen, hits = set(), 0
        for p in prompts:
            hits += len(p) if tuple(p) in seen else 0
            seen.add(tuple(p))
        return hits / total

    notes = _notes(check.optimal_hit_rate(whole, verbose=False))
    assert notes and all("whole" in n and "prefix" in n for n in notes), notes
    assert not any("common to ALL" in n for n in notes), notes


def test_12_wrong_order_message_names_the_mistake_without_the_formula():
    from kvlab.check.l12_real_server import CACHED_MISTAKES

    wrong = next(f for m, f in CACHED_MISTAKES.items() if "order" in m)
    notes = set(_notes(check.predict_cached_tokens(wrong, verbose=False)))
    assert len(notes) == 1
    note, = notes
    assert "order" in note and "len(prompt) - 1" not in note and "min(" not in note, note


def _cached(nodes, prompt, page_size):
    return S12.predict_cached(nodes, prompt, page_size)


def test_12_unit_and_type_slips_are_named():
    """The slips the review typed for exercise 1 that came back unnamed: the match in pages where
    tokens are due, a bool/str for a count, the prompt's length minus the match (computed, not
    cached), a list of the matched ids."""
    import kvlab.check.l12_real_server as L12

    slips = {
        "computed": (lambda n, p, ps: len(p) - _cached(n, p, ps), "COMPUTES"),
        "ids": (lambda n, p, ps: list(p[:_cached(n, p, ps)]), "list"),
        "str": (lambda n, p, ps: str(_cached(n, p, ps)), "str"),
    }
    for name, (fn, says) in slips.items():
        notes = [n for n in _notes(L12.predict_cached_tokens(fn, verbose=False))]
        assert notes and all(says in n for n in notes), (name, notes[:3])
