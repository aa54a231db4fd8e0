"""The round-12 reviews of lessons 00 and 01: wrong answers accepted (lesson 00's float division) or
rejected without the mistake named, or misnamed (lesson 00's 1-based block number, lesson 01's
one-token prefill, heads-first caches, a 1/sqrt(heads x head_dim) scale, a float16 result). Each is a
slip of the reference solution; it must FAIL and every failing case must name the slip (the words
below), and so must the one-line summary."""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

_PREFILL = "cached.append(sum(flops_per_token(i) for i in range(cached_prefix + 1, prompt_len + 1)))"
_ATTEND = "    scores = torch.einsum(\"hd,thd->ht\", q, k) / math.sqrt(head_dim)"
_RETURN = "    return out, k_cache, v_cache"

WRONG = [
    ("00", "one_based", "block_and_offset", "the block number counted from 1",
     [("return divmod(pos, block_size)", "return pos // block_size + 1, pos % block_size")],
     "1-based"),
    ("00", "float_division", "block_and_offset", "int(pos / block_size): float division, wrong past 2**53",
     [("return divmod(pos, block_size)", "return int(pos / block_size), pos % block_size")],
     "float division"),
    ("00", "float_division_both", "block_and_offset", "the offset from the float quotient too",
     [("return divmod(pos, block_size)",
       "return int(pos / block_size), pos - int(pos / block_size) * block_size")],
     "float division"),
    ("01", "prefill_one_token", "count_flops", "the prefill counted as one token at the prompt's end",
     [(_PREFILL, "cached.append(flops_per_token(prompt_len))")],
     "prefill counted as one token"),
    ("01", "prefill_one_token_first", "count_flops", "the prefill counted as the first uncached token alone",
     [(_PREFILL, "cached.append(flops_per_token(cached_prefix + 1))")],
     "prefill counted as one token"),
    ("01", "heads_first", "attend_with_cache", "the caches returned heads-first (num_kv_heads, T + 1, head_dim)",
     [(_RETURN, "    return out, k_cache.transpose(0, 1), v_cache.transpose(0, 1)")],
     "heads-first"),
    ("01", "out_transposed", "attend_with_cache", "out returned heads-last (head_dim, num_heads)",
     [(_RETURN, "    return out.T.contiguous(), k_cache, v_cache")],
     "transposed"),
    ("01", "scale_hidden", "attend_with_cache", "scaled by 1/sqrt(num_heads * head_dim)",
     [(_ATTEND, "    scores = torch.einsum(\"hd,thd->ht\", q, k) / math.sqrt(num_heads * head_dim)")],
     "1/sqrt(num_heads * head_dim)"),
    ("01", "float16", "attend_with_cache", "out returned as float16",
     [(_RETURN, "    return out.half(), k_cache, v_cache")],
     "float16"),
    ("01", "float16_compute", "attend_with_cache", "computed in float16, returned as float32",
     [(_ATTEND, "    scores = torch.einsum(\"hd,thd->ht\", q.half(), k.half()).float() / math.sqrt(head_dim)")],
     "float16"),
]


@pytest.mark.parametrize("nn,tag,name,mistake,edits,words", WRONG, ids=[f"{w[0]}-{w[1]}" for w in WRONG])
def test_r12_wrong_answer_is_rejected_and_named(nn, tag, name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer(nn, name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert all(words in f.note for f in r.failures), [(f.label, f.note) for f in r.failures]
    assert words in r.summary, r.summary


def test_r12_float16_note_does_not_speak_of_float64():
    """The float16 answer was told 'a float64 cache holds twice the bytes': the note fits the dtype."""
    r = check.attend_with_cache(wrong_answer("01", "attend_with_cache", [(_RETURN, "    return out.half(), k_cache, v_cache")]),
                                verbose=False)
    assert "float64" not in r.summary, r.summary


def test_r12_00_large_position_case():
    """A position past 2**53 (where a float can no longer hold every integer) is one of the cases."""
    labels = [c.label for c in check.block_and_offset(lambda p, bs: divmod(p, bs), verbose=False).cases]
    assert any(str(2**53 + 1) in label for label in labels), labels


def test_r12_01_caches_read_heads_first_is_named():
    """A learner who takes the caches for (num_kv_heads, T, head_dim) and appends along dim 1 crashes at
    step 1 (torch.cat of mismatched sizes): the FAIL line says the caches were read heads-first."""
    import math

    import torch

    def heads_first(q, k_new, v_new, k_cache, v_cache):
        kc, vc = torch.cat([k_cache, k_new[:, None]], dim=1), torch.cat([v_cache, v_new[:, None]], dim=1)
        group = q.shape[0] // kc.shape[0]
        keys, values = kc.repeat_interleave(group, 0), vc.repeat_interleave(group, 0)     # (h, T + 1, d)
        w = torch.softmax(torch.einsum("hd,htd->ht", q, keys) / math.sqrt(q.shape[1]), -1)
        return torch.einsum("ht,htd->hd", w, values), kc, vc

    r = check.attend_with_cache(heads_first, verbose=False)
    assert not r.passed and "heads-first" in r.summary, r.summary
