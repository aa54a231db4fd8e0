"""Issue 28, the review of lesson 09 at 6b9afee: wrong answers of a student's kind, each rejected by its
checker AND named (the FAIL line says what the mistake is), and the exercise statements that state a
contract rather than a formula. Each answer is the reference solution with one mistake edited in."""
from __future__ import annotations

import re

import pytest
from test_check_mistakes_06_11 import _markdown, wrong_answer

from kvlab import check

# (exercise, the mistake, edits of the reference, words the FAIL note must contain)
WRONG_09 = [
    ("orca_reservation", "ceil as int(t / bs) + 1 (a block too many on a whole number of blocks)",
     [("blocks = -(-tokens // block_size)", "blocks = int(tokens / block_size) + 1")],
     "int(tokens / block_size) + 1 adds a block"),
    ("orca_reservation", "1 << blocks.bit_length() (doubles a run that already is a power of two)",
     [("return 1 << (blocks - 1).bit_length()", "return 1 << blocks.bit_length()")],
     "already a power of two blocks"),
    ("orca_reservation", "the run capped at a fixed 128 blocks",
     [("return 1 << (blocks - 1).bit_length()", "return min(128, 1 << (blocks - 1).bit_length())")],
     "not a fixed 128 blocks"),
    ("orca_reservation", "Orca (Oracle) reserves the prompt alone",
     [("estimate = output_len     ", "estimate = 0     ")],
     "not the prompt alone"),
    ("fit_requests", "reserve-max counted in blocks (max_len rounded up to whole blocks)",
     [("reserve_max = min(len(lengths), capacity // max_len)",
       "reserve_max = min(len(lengths), (capacity // block_size) // -(-max_len // block_size))")],
     "in token slots, not blocks"),
    ("optimal_hit_rate", "the rate rounded to 2 decimals",
     [("return 1 - len(prefixes) / total", "return round(1 - len(prefixes) / total, 2)")],
     "rounded to 2 decimals"),
    ("optimal_hit_rate", "the rate rounded to 3 decimals",
     [("return 1 - len(prefixes) / total", "return round(1 - len(prefixes) / total, 3)")],
     "rounded to 3 decimals"),
    ("optimal_hit_rate", "the share of prompts that hit, not of tokens",
     [("return 1 - len(prefixes) / total",
       "return sum(any(q[:1] == p[:1] for q in prompts[:i]) for i, p in enumerate(prompts) if p) / len(prompts)")],
     "a share of prompt TOKENS, not of prompts"),
    ("optimal_hit_rate", "the int 0 for no tokens (review r2: accepted)",
     [("        return 0.0\n", "        return 0\n")],
     "returned the int 0 where the rate is a float"),
]


@pytest.mark.parametrize("name,mistake,edits,words", WRONG_09, ids=[w[1] for w in WRONG_09])
def test_review_09_wrong_answer_is_rejected_and_named(name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer("09", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary  # what the student reads: the FAIL line names it


def _statement(n: int) -> str:
    return _markdown("09_at_scale").split(f"### Exercise {n}")[1].split("# %%")[0]


def test_exercise_1_states_the_contract_not_the_steps():
    """The review: exercise 1 was close to transcription ("as in section 2", whose steps 1-3 are the
    function). The statement gives the contract and asks for a prediction first; it no longer
    points at the steps, nor spells out the cap or the two roundings."""
    text = _statement(1)
    assert "as in section 2" not in text and "predict" in text.lower()
    assert "min(" not in text and "next power of two" not in text


def test_exercise_3_gives_neither_the_answer_nor_the_method():
    """The review: exercise 3's worked example gave the answer (4 of 8 tokens, 0.5) and hint 2 the
    method (a radix tree with page size 1: count its nodes)."""
    text = _statement(3)
    assert "0.5" not in text and "4 of their 8" not in text
    hints = "".join(re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>",
                               _markdown("09_at_scale").split("### Exercise 3")[1], re.S))
    assert "radix tree" not in hints and "node" not in hints


# --------------------------------------------------------------------------- exercise 2's contract
# A result of the documented type (a tuple), a length over max_len refused with ValueError before any
# request is admitted (wherever it stands in the list), the caller's list left as it was. Each wrong
# answer below is the reference with one edit; the FAIL line must name the mistake.
_FIT = "fit_requests"
_VALIDATE = ("    if any(n > max_len for n in lengths):\n"
             "        raise ValueError(f\"a length over max_len {max_len}: {max(lengths)}\")\n")
WRONG_FIT = [
    ("a list, not the documented tuple", [("return reserve_max, paged", "return [reserve_max, paged]")],
     "return a tuple"),
    ("no check of max_len at all", [(_VALIDATE, "")], "must raise ValueError"),
    ("max_len checked inside the paged loop (after the first misfit it is never reached)",
     [(_VALIDATE, ""), ("        need = -(-n // block_size)",
                        "        if n > max_len:\n            raise ValueError(n)\n        need = -(-n // block_size)")],
     "check every length before admitting any"),
    ("a length of exactly max_len refused (>= for >)", [("if any(n > max_len", "if any(n >= max_len")],
     "raise ValueError only for a length OVER max_len"),
    ("the caller's list emptied (pop while admitting)",
     [("    for n in lengths:\n        need", "    while lengths:\n        n = lengths.pop(0)\n        need")],
     "changed its argument `lengths`"),
    ("the list sorted in place before raising (a change before the error)",
     [(_VALIDATE, "    lengths.sort()\n" + _VALIDATE)], "changed its argument `lengths`"),
    ("reserve-max as a float (/ for //)", [("capacity // max_len)", "capacity / max_len)")],
     "where an int is expected"),
    ("a request's blocks as n // block_size + 1 (a block too many on a full last block)",
     [("need = -(-n // block_size)", "need = n // block_size + 1")], "n // block_size + 1"),
    ("a request that needs exactly the free blocks refused (a tie)",
     [("if need > free_blocks:", "if need >= free_blocks:")], "> not >="),
]


@pytest.mark.parametrize("mistake,edits,words", WRONG_FIT, ids=[w[0] for w in WRONG_FIT])
def test_fit_requests_contract_wrong_answer_is_rejected_and_named(mistake, edits, words):
    r = check.fit_requests(wrong_answer("09", _FIT, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary


def test_fit_requests_reference_refuses_a_length_over_max_len_before_admitting():
    """The reference itself: a length over max_len raises ValueError even behind the first misfit,
    and the caller's list is unchanged (measured on the real arena and allocator)."""
    from kvlab.check.l09_at_scale import measured_fit

    lengths = [16, 16, 16, 16, 16, 40]   # the fifth does not fit, the sixth is over max_len 16
    with pytest.raises(ValueError, match="max_len"):
        measured_fit(64, 4, 16, lengths)
    assert lengths == [16, 16, 16, 16, 16, 40]
    assert measured_fit(64, 4, 16, [16, 16]) == (2, 2)


def test_exercise_2_states_the_contract():
    text = _statement(2)
    assert "tuple" in text and "ValueError" in text and "max_len" in text
    assert "unchanged" in text or "left as" in text


# own wrong answers to exercises 1 and 3 (round 12), each named by its own mistake, not a neighbour's
WRONG_OWN = [
    ("orca_reservation", "the output rounded DOWN to a power of two (2 ** int(log2))",
     [("estimate = 1 << (output_len - 1).bit_length()", "estimate = 1 << (output_len.bit_length() - 1)")],
     "rounds it down"),
    ("orca_reservation", "the rounded run capped at max_len // block_size blocks",
     [("tokens = min(prompt_len + estimate, max_len)", "tokens = prompt_len + estimate"),
      ("return 1 << (blocks - 1).bit_length()", "return min(1 << (blocks - 1).bit_length(), max_len // block_size)")],
     "the cap comes BEFORE the rounding"),
    ("fit_requests", "the lengths sorted, shortest first", [("    for n in lengths:", "    for n in sorted(lengths):")],
     "in the order given"),
    ("optimal_hit_rate", "prefixes up to len(p) - 1 (the whole prompt left out)",
     [("for i in range(1, len(p) + 1)}", "for i in range(1, len(p))}")], "range(1, len(p) + 1)"),
]


@pytest.mark.parametrize("name,mistake,edits,words", WRONG_OWN, ids=[w[1] for w in WRONG_OWN])
def test_own_wrong_answer_is_rejected_and_named(name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer("09", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)


# --------------------------------------------------------------------------- review r2 (at f462c9a)
# The reviewer's own answers, whole functions as typed: one accepted (a zero-length request given a
# block), five rejected without naming the mistake or under a neighbour's name. Each must now be
# rejected AND named as itself on the first failure shown.
def _typed(src: str, name: str):
    scope: dict = {}
    exec(compile(src, f"<review r2 09 {name}>", "exec"), scope)  # noqa: S102 - the reviewer's answer, as typed
    return scope[name]


_FIT_HEAD = ("def fit_requests(capacity, block_size, max_len, lengths):\n"
             "    if any(n > max_len for n in lengths): raise ValueError('too long')\n")
_HIT_HEAD = "def optimal_hit_rate(prompts):\n"
_HIT_SEEN = _HIT_HEAD + """\
    total = sum(len(p) for p in prompts)
    if total == 0: return 0.0
    seen = set(); hits = 0
    for p in prompts:
"""
TYPED_R2 = [
    ("fit_requests", "X7 a zero-length request takes one block (max(1, ceil)): accepted", _FIT_HEAD + """\
    free = capacity // block_size; paged = 0
    for n in lengths:
        need = max(1, -(-n // block_size))
        if need > free: break
        free -= need; paged += 1
    return min(len(lengths), capacity // max_len), paged
""", "0 tokens"),
    ("fit_requests", "X8 the whole list if its blocks fit, else the pool // the mean request's blocks: misnamed",
     _FIT_HEAD + """\
    pool = capacity // block_size
    needs = [-(-n // block_size) for n in lengths]
    if sum(needs) <= pool: paged = len(needs)
    else:
        mean = sum(needs) / len(needs)
        paged = int(pool // mean)
    return min(len(lengths), capacity // max_len), paged
""", "mean"),
    ("optimal_hit_rate", "W8 each prompt's best LCP with any OTHER prompt (identical prompts both hit)", _HIT_HEAD + """\
    total = sum(len(p) for p in prompts)
    if total == 0: return 0.0
    def lcp(a, b):
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]: k += 1
        return k
    hits = sum(max([lcp(p, q) for j, q in enumerate(prompts) if j != i] or [0]) for i, p in enumerate(prompts))
    return hits / total
""", "computed once"),
    ("optimal_hit_rate", "W11 hits only in whole 16-token blocks", _HIT_SEEN + """\
        for i in range(16, len(p) + 1, 16):
            if tuple(p[:i]) in seen: hits += 16
        for i in range(16, len(p) + 1, 16): seen.add(tuple(p[:i]))
    return hits / total
""", "whole blocks of 16"),
    ("optimal_hit_rate", "X11 the last token of each prompt always recomputed", _HIT_SEEN + """\
        k = 0
        while k < len(p) - 1 and tuple(p[:k + 1]) in seen: k += 1
        hits += k
        seen.update(tuple(p[:i]) for i in range(1, len(p) + 1))
    return hits / total
""", "last token"),
    ("optimal_hit_rate", "X13 the mean of per-prompt hit rates", _HIT_HEAD + """\
    if not any(prompts): return 0.0
    seen = set(); rates = []
    for p in prompts:
        if not p: continue
        k = 0
        while k < len(p) and tuple(p[:k + 1]) in seen: k += 1
        rates.append(k / len(p))
        seen.update(tuple(p[:i]) for i in range(1, len(p) + 1))
    return sum(rates) / len(rates)
""", "mean of each prompt's"),
]


@pytest.mark.parametrize("name,mistake,src,words", TYPED_R2, ids=[w[1][:40] for w in TYPED_R2])
def test_review_r2_typed_answer_is_rejected_and_named(name, mistake, src, words):
    r = getattr(check, name)(_typed(src, name), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary


def test_fit_requests_zero_length_holds_no_block():
    """The contract the review asked for: a request of 0 tokens holds 0 blocks (paged) and still
    max_len slots (reserve-max); measured on the real arena and allocator."""
    from kvlab.check.l09_at_scale import measured_fit

    assert measured_fit(64, 4, 16, [0, 16, 16, 16, 16]) == (4, 5)
    assert "0 tokens" in _statement(2)


def test_exercise_2_asks_for_a_prediction_and_hint_2_stops_at_the_idea():
    """The review: exercise 2 was transcription (the statement spelled out ceil, capacity // block_size,
    stop at the first misfit) and hint 2 restated the algorithm (a running count of free blocks)."""
    text = _statement(2)
    assert "predict" in text.lower() and "ceil(" not in text and "capacity // block_size" not in text
    hints = re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>",
                       _markdown("09_at_scale").split("### Exercise 2")[1].split("### Exercise 3")[0], re.S)
    assert len(hints) == 2 and "running count" not in hints[1] and "first request that does not fit" not in hints[1]


def test_exercise_3_counts_hits_per_token():
    text = _statement(3)
    assert "per token" in text and "last" in text


# --------------------------------------------------------------------------- review r4 (cfd7949)
def _pow2_tokens_then_floor(prompt_len, output_len, mode, block_size=16, max_len=2048):
    if mode not in ("max", "pow2", "oracle"):
        raise ValueError(mode)
    est = max_len if mode == "max" else (1 << (output_len - 1).bit_length()) if mode == "pow2" else output_len
    tokens = min(prompt_len + est, max_len)
    return (1 << (tokens - 1).bit_length()) // block_size


def _last_token_out_of_the_total(prompts):
    total = sum(len(p) for p in prompts)
    if total == 0:
        return 0.0
    nodes = {tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}
    return (total - len(nodes)) / (total - sum(1 for p in prompts if p))


@pytest.mark.parametrize("name,fn,words", [
    ("orca_reservation", _pow2_tokens_then_floor, "then divided into blocks rounding DOWN"),
    ("optimal_hit_rate", _last_token_out_of_the_total, "you left each prompt's last token out of it"),
], ids=["pow2-tokens-floor", "last-token-out-of-total"])
def test_review_r4_09_wrong_answer_is_named_first(name, fn, words):
    r = getattr(check, name)(fn, verbose=False)
    assert not r.passed
    assert words in r.summary, r.summary
