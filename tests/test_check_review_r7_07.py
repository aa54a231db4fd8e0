"""Issue 28, review r7 of lesson 07: a prompt cached in full treated as a miss (its partial hits
right) was named "every prompt prefilled whole"; it must be named for what it is, and a prompt
that is never matched must keep its own name."""
from kvlab import check


def _prefill(full_hit_is_miss: bool):
    def fn(prompts):
        out, seen = [], []
        for p in prompts:
            m = max((next((i for i, (a, b) in enumerate(zip(p, q)) if a != b), min(len(p), len(q)))
                     for q in seen), default=0)
            if full_hit_is_miss and m == len(p):
                m = 0
            out.append(len(p) - min(m, len(p) - 1) if p else 0)
            seen.append(list(p))
        return out
    return fn


def test_reference_like_answer_passes():
    assert check.prefill_tokens(_prefill(False), verbose=False).passed


def test_a_full_hit_treated_as_a_miss_is_named():
    r = check.prefill_tokens(_prefill(True), verbose=False)
    assert not r.passed
    assert "cached in full" in r.failures[0].note, r.failures[0].note
    assert "cached in full" in r.summary


def test_no_reuse_at_all_keeps_its_name():
    r = check.prefill_tokens(lambda prompts: [len(p) for p in prompts], verbose=False)
    assert not r.passed
    assert "every prompt prefilled whole" in r.summary, r.summary
