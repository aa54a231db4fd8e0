"""The review of 79ae8b9 (r6), lesson 01: wrong answers rejected without naming the mistake (C8,
A7) or with a per-case line that blamed another one (C7). Each is a slip of the reference
solution; it must FAIL and its first failing case must name the slip (the words below)."""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

_PREFILL = "cached.append(sum(flops_per_token(i) for i in range(cached_prefix + 1, prompt_len + 1)))"

WRONG_01 = [
    ("C8 a flat prefill cost (prompt_len - cached_prefix) * f(prompt_len)", "count_flops",
     [(_PREFILL, "cached.append((prompt_len - cached_prefix) * flops_per_token(prompt_len))")],
     "the prefill's tokens do not all cost flops_per_token(prompt_len)"),
    ("C7 (cached, naive) returned", "count_flops",
     [("    return naive, cached", "    return cached, naive")],
     "naive and cached are swapped"),
    ("A7 KV head 0 for every query head", "attend_with_cache",
     [("    k = k_cache.repeat_interleave(group, dim=1)", "    k = k_cache[:, :1].expand(-1, num_heads, -1)"),
      ("    v = v_cache.repeat_interleave(group, dim=1)", "    v = v_cache[:, :1].expand(-1, num_heads, -1)")],
     "every query head read KV head 0"),
]


@pytest.mark.parametrize("mistake,name,edits,words", WRONG_01, ids=[w[0].split()[0] for w in WRONG_01])
def test_01_review_r6_wrong_answer_is_rejected_and_named(mistake, name, edits, words):
    r = getattr(check, name)(wrong_answer("01", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert all(words in f.note for f in r.failures), [(f.label, f.note) for f in r.failures]
    assert words in r.summary


@pytest.mark.parametrize("name", ["count_flops", "attend_with_cache"])
def test_01_review_r6_an_untouched_stub_gets_one_friendly_line(name, capsys):
    """The review saw exercise 1's stub told "finish the stub" under a header and exercise 2's print
    five FAIL blocks "raised NotImplementedError": both say, in one line, that it is not started yet."""
    def stub(*args, **kwargs):
        raise NotImplementedError("your code here")

    r = getattr(check, name)(stub)
    out = capsys.readouterr().out.strip()
    assert not r.passed and out == r.summary and len(out.splitlines()) == 1, out
    assert out.startswith(f"FAIL  {name}: ") and "not started yet" in out and "expected" not in out, out
