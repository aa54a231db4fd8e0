"""Lesson 07's checkers as a student reads them (the review of ede928d: the output was long and
wrapped; a pass should be one line)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvlab import check
from kvlab.check.harness import FAILED_ROWS

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("sol07", ROOT / "solutions" / "07_radix.py")
sol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sol)


@pytest.mark.parametrize("name", ["match_prefix", "prefill_tokens", "block_hash_reuse"])
def test_a_pass_prints_one_line(capsys, name):
    assert getattr(check, name)(getattr(sol, name)).passed
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("PASS"), out


def test_a_failure_shows_the_verdict_first_then_a_few_failing_cases(capsys):
    """The verdict is the first line (review r2: it sat 1,173 px below the code); then FAILED_ROWS
    failing cases, a diagnosis written once, and a count of the rest."""
    r = check.match_prefix(lambda root, tokens: None)
    out = capsys.readouterr().out
    assert not r.passed and out.count("  FAIL ") == FAILED_ROWS and "  ok  " not in out, out
    assert f"... {len(r.failures) - FAILED_ROWS} more failed" in out and out.strip().splitlines()[0] == r.summary
    notes = [line.strip() for line in out.splitlines() if line.strip().startswith("->")]
    written = [n for n in notes if n != "-> the same mistake as above"]
    assert len(set(written)) == len(written), out   # each explanation once: repeats read "the same mistake as above"


def test_an_untouched_stub_prints_only_the_summary(capsys):
    def stub(prompts):
        raise NotImplementedError("your code here")

    r = check.prefill_tokens(stub)
    assert capsys.readouterr().out.strip() == r.summary and "NotImplementedError" in r.summary


def test_no_reuse_at_all_is_named():
    """Every prompt prefilled whole (the cache ignored): it was named only where it also looked
    like 'exact repeats only', and not at all on the first failing case."""
    r = check.prefill_tokens(lambda prompts: [len(p) for p in prompts], verbose=False)
    assert not r.passed and "every prompt prefilled whole" in r.summary, r.report()


def test_the_predict_first_answer_hard_coded_is_named_as_such():
    """Review r7 (2i): `return [3, 2, 1, 1][:len(prompts)]`, the predict-first example's answer typed
    in, was rejected as "count 1 is off by one"; it is named as a hard-coded answer."""
    for answer in (lambda prompts: [3, 2, 1, 1][:len(prompts)], lambda prompts: [3, 2, 1, 1]):
        r = check.prefill_tokens(answer, verbose=False)
        assert not r.passed and "hard-coded" in r.summary and "predict-first" in r.summary, r.summary
        assert "off by one" not in r.summary, r.summary


def test_the_predict_first_answer_is_what_the_tree_computes():
    from kvlab.check.l07_radix import PREDICT_FIRST, PREDICT_FIRST_ANSWER, served_prefill_tokens

    assert served_prefill_tokens(PREDICT_FIRST) == list(PREDICT_FIRST_ANSWER)
    assert str(PREDICT_FIRST) in (ROOT / "notebooks" / "src" / "07_radix.py").read_text()
