"""Review r2_00_01, lesson 01's checkers: four count_flops slips got only the rule restated (naive one
token too many, naive skipping the cached prefix, cached step attending to one token too many, cached
step with no attention growth), and attend_with_cache without the grouped-query expansion passed its
1-KV-head case by broadcasting and failed the others with a raw einsum RuntimeError. Each is a slip of
the reference solution; it must FAIL and every failing case must name it (the words below). The
review also saw expected and actual read the same when the lists were cut at about 90 characters:
every failing case of count_flops says where the lists differ, step by step, in full."""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

_NAIVE = "naive.append(sum(flops_per_token(i) for i in range(1, length + 1)))"
_CACHED = "cached.append(flops_per_token(prompt_len + t))"

WRONG = [
    ("naive_one_too_many", "count_flops", [(_NAIVE, "naive.append(sum(flops_per_token(i) for i in range(1, length + 2)))")],
     "one token too many"),
    ("naive_one_too_few", "count_flops", [(_NAIVE, "naive.append(sum(flops_per_token(i) for i in range(1, length)))")],
     "one token too few"),
    ("naive_skips_prefix", "count_flops",
     [(_NAIVE, "naive.append(sum(flops_per_token(i) for i in range(cached_prefix + 1, length + 1)))")],
     "the cache changes no naive step"),
    ("cached_one_too_far", "count_flops", [(_CACHED, "cached.append(flops_per_token(prompt_len + t + 1))")],
     "one token too many"),
    ("cached_flat", "count_flops", [(_CACHED, "cached.append(flops_per_token(1))")],
     "attention still grows"),
    ("cached_flat_prompt", "count_flops", [(_CACHED, "cached.append(flops_per_token(prompt_len))")],
     "attention still grows"),
    ("no_gqa", "attend_with_cache",
     [("    k = k_cache.repeat_interleave(group, dim=1)", "    k = k_cache"),
      ("    v = v_cache.repeat_interleave(group, dim=1)", "    v = v_cache")],
     "the KV heads were not repeated for the query heads (grouped-query attention)"),
]


@pytest.mark.parametrize("tag,name,edits,words", WRONG, ids=[w[0] for w in WRONG])
def test_r2_wrong_answer_is_rejected_and_named(tag, name, edits, words):
    r = getattr(check, name)(wrong_answer("01", name, edits), verbose=False)
    assert not r.passed, f"accepted: {tag}"
    assert all(words in f.note for f in r.failures), [(f.label, f.note) for f in r.failures]
    assert words in r.summary, r.summary


def test_r2_count_flops_says_where_the_lists_differ():
    """The 30-token case's lists are longer than the report's 90 characters: the note names the first
    differing step of the differing list with both numbers in full."""
    r = check.count_flops(wrong_answer("01", "count_flops", [(_CACHED, "cached.append(flops_per_token(1))")]),
                          verbose=False)
    long = next(f for f in r.failures if f.label.startswith("prompt 30 tokens, 10 new tokens"))
    assert "naive" not in long.note.split("first difference:")[1], long.note
    assert "first difference: cached step 2 of 10: expected 2,586,624, got 2,525,184" in long.note, long.note


def test_review_r4_01_a_cache_that_is_a_view_of_k_new_is_named():
    """Review r4 of lesson 01 (cfd7949): on an empty cache, returning k_new[None] (a view of the caller's
    tensor) as the new cache was accepted; the cached K/V would change with the caller's buffer."""
    import math

    import torch

    def view_first(q, k_new, v_new, k_cache, v_cache):
        if k_cache.shape[0] == 0:
            k_cache, v_cache = k_new[None], v_new[None]
        else:
            k_cache, v_cache = torch.cat([k_cache, k_new[None]]), torch.cat([v_cache, v_new[None]])
        group = q.shape[0] // k_cache.shape[1]
        k, v = k_cache.repeat_interleave(group, dim=1), v_cache.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q, k) / math.sqrt(q.shape[1])
        return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v), k_cache, v_cache

    r = check.attend_with_cache(view_first, verbose=False)
    assert not r.passed and "shares memory with the caller's k_new" in r.summary, r.summary
