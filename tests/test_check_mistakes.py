"""Each exercise of lessons 05-08 names its common mistakes (issue 21: "every exercise names at
least its two most common mistakes"; 07 match_prefix's whole-edge mistake and 08 lru_evict's
inner or locked nodes were undiagnosed; 05 paged_decode_torch's GQA mistake showed head 0,
which is right, instead of the worst head)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_check_reuse as T  # noqa: E402  -- the wrong answers written there

from kvlab import check  # noqa: E402


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def notes(checker, fn) -> str:
    r = checker(fn, verbose=False)
    assert not r.passed
    return " | ".join(c.note for c in r.failures)


LRU = lambda n: (n.last_access_time, n.id)  # noqa: E731


def lru_inner_nodes(root, num_tokens):
    """Evicts the least recently used unlocked node, leaf or not."""
    nodes, order, freed = sorted((n for n in T._below(root) if n.lock_ref == 0), key=LRU), [], 0
    for n in nodes:
        if freed >= num_tokens:
            break
        order.append(n.id)
        freed += len(n.key)
    return order


def sampling_gen_only(p, n, g, bs):
    """Shares every prompt block and gives each sample ceil(g / bs) new ones."""
    return n * T.blocks_needed(p + g, bs), T.blocks_needed(p, bs) + n * T.blocks_needed(g, bs)


@pytest.mark.parametrize("checker, wrong, says", [
    (check.match_prefix, T.lpm_full_edges_only, "a match may end inside an edge"),
    (check.match_prefix, T.lpm_first_child, "the child keyed by the next token"),
    (check.prefill_tokens, T.prefill_no_cap, "prefill at least 1"),
    (check.prefill_tokens, T.prefill_previous_only, "not only the previous one"),
    (check.prefill_tokens, T.prefill_shared_tokens, "only a shared PREFIX is reused"),
    (check.lru_evict, T._evict_by(LRU, respect_locks=False), "never evict it"),
    (check.lru_evict, lru_inner_nodes, "only leaves can go"),
    (check.lru_evict, T._evict_by(LRU, cascade=False), "it becomes a leaf"),
    (check.lru_evict, T._evict_by(lambda n: (-n.last_access_time, n.id)), "the smallest last_access_time"),
    (check.lru_evict, T._evict_by(lambda n: (len(n.key), n.id)), "not by how many tokens"),
    (check.sampling_blocks, T.sampling_ceil_everything, "not pooled across samples"),
    (check.sampling_blocks, sampling_gen_only, "not its new tokens alone"),
    (check.sampling_blocks, T.sampling_share_partial, "partial last prompt block does not stay shared"),
    (check.cow_append, T.cow_no_decref, "kept this table's reference"),
    (check.cow_append, T.cow_shared_first, "the last block was full"),
    (check.paged_decode_torch, T.decode_gqa_modulo, "h // (num_heads // num_kv_heads)"),
    (check.paged_decode_torch, T.decode_ignores_table, "the block table was not used"),
])
def test_the_checker_names_the_mistake(checker, wrong, says):
    assert says in notes(checker, wrong)


def test_gqa_failure_shows_the_worst_head_not_head_0():
    r = check.paged_decode_torch(T.decode_gqa_modulo, verbose=False)
    bad = r.failures[0]
    assert not bad.expected.startswith("out[0,") and bad.expected != bad.actual.split(" (")[0]
    assert "the worst" in bad.actual
