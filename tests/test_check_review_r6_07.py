"""The review r6_04_07, lesson 07: one wrong answer rejected under another mistake's name
(block_hash_reuse caching only the blocks a prompt could reuse, not every full block, was told
"one block short ... the cap"). It must FAIL and every failing case must name what was cached;
the real "one block short" slip keeps its own name."""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

CACHED_TOO_FEW_WORDS = "the cache keeps every full block of a served prompt"

WRONG_07 = [
    ("W1 block_hash_reuse caches only the blocks it could reuse (up to the limit)", "block_hash_reuse",
     [("for k in range(1, len(p) // block_size + 1):", "for k in range(1, limit + 1):")],
     "the cache keeps every full block of a served prompt", True),
    ("W2 block_hash_reuse stops one block short (limit len//bs - 1)", "block_hash_reuse",
     [("limit = (len(p) - 1) // block_size", "limit = max(0, len(p) // block_size - 1)")],
     "one block short", False),  # its own name stays (in the summary; not asked of every case here)
]


@pytest.mark.parametrize("mistake,name,edits,words,every", WRONG_07, ids=[w[0].split()[0] for w in WRONG_07])
def test_07_review_r6_wrong_answer_is_named_on_screen(mistake, name, edits, words, every, capsys):
    """What the student reads (verbose output) names the slip, in every failing case and the summary."""
    result = getattr(check, name)(wrong_answer("07", name, edits))
    printed = capsys.readouterr().out
    assert not result.passed, f"accepted: {mistake}"
    unnamed = [case.label for case in result.failures if words not in case.note]
    assert not (every and unnamed), (unnamed, printed)
    assert CACHED_TOO_FEW_WORDS not in printed or words == CACHED_TOO_FEW_WORDS, printed
    assert words in result.summary and words in printed, printed
