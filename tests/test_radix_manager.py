"""Regression tests of kvlab.reuse.cache_manager.CacheManager (the request cycle): the token
lists a sequence hands to ``cache_*_req`` may only grow, counts entering state are plain ints,
eviction is only ever asked to free what it really frees, and sequence ids are strings.

Each test checks ``ref_count == tree + tables`` (``check_integrity``) after every step.
"""
from __future__ import annotations

import numpy as np
import pytest

from kvlab.reuse.cache_manager import CacheManager


def _state(cm: CacheManager):
    """Everything a refused call must leave as it was."""
    return (cm.allocator.state(), cm.tree.snapshot(), {s: (list(t.block_ids), t.num_tokens) for s, t in cm.tables.items()},
            {s: n.id for s, n in cm._locks.items()}, {s: list(k) for s, k in cm._tokens.items()}, len(cm.log))


# ------------------------------------------------------------------ item 1: tokens only grow
def test_a_shrunk_then_changed_token_list_is_refused():
    """The issue's reproducer: caching a prefix first must not let a later call rewrite the rest."""
    cm = CacheManager(32, 1)
    cm.admit("A", [1, 2, 3, 4, 5, 6, 7, 8])
    cm.cache_unfinished_req("A", [1, 2, 3, 4, 5, 6, 7, 8])
    before = _state(cm)
    with pytest.raises(ValueError, match=r"A.*position 2"):
        cm.cache_unfinished_req("A", [1, 2])
    assert _state(cm) == before
    with pytest.raises(ValueError, match=r"A.*position 2"):
        cm.cache_finished_req("A", [1, 2, 9, 9, 9, 9, 9, 9])
    assert _state(cm) == before
    cm.check_integrity()
    cm.cache_finished_req("A", [1, 2, 3, 4, 5, 6, 7, 8])
    assert cm.admit("B", [1, 2, 9, 9, 9, 9, 9, 9, 5]).prefix_len == 2  # never the KV of 3..8
    cm.check_integrity()


def test_the_issue_sequence_without_the_full_cache_first():
    cm = CacheManager(32, 1)
    cm.admit("A", list(range(1, 9)))
    with pytest.raises(ValueError, match=r"'A'.*shorter"):
        cm.cache_unfinished_req("A", [1, 2])
    with pytest.raises(ValueError, match=r"'A'.*position 2"):
        cm.cache_finished_req("A", [1, 2, 9, 9, 9, 9, 9, 9])
    cm.cache_finished_req("A", list(range(1, 9)))
    assert cm.admit("B", [1, 2, 9, 9, 9, 9, 9, 9, 5]).prefix_len == 2
    cm.check_integrity()


@pytest.mark.parametrize("call", ["cache_unfinished_req", "cache_finished_req"])
@pytest.mark.parametrize("tokens, where", [([1, 2, 3], "shorter"), ([1, 2, 3, 5], "position 3"),
                                           ([9, 2, 3, 4], "position 0"), ([1, 2, 3, 4, 5, 6, 7, 8, 9], "slots")])
def test_every_mismatch_is_refused_and_changes_nothing(call, tokens, where):
    cm = CacheManager(32, 2)
    cm.admit("A", [1, 2, 3, 4], 8)
    before = _state(cm)
    with pytest.raises(ValueError, match=where):
        getattr(cm, call)("A", tokens)
    assert _state(cm) == before
    cm.check_integrity()


def test_the_callers_list_is_copied_not_aliased():
    """The manager remembers a copy: a caller that appends to its own list changes nothing here."""
    cm = CacheManager(32, 1)
    toks = [1, 2, 3]
    cm.admit("A", toks, 6)
    toks.append(4)
    cm.cache_unfinished_req("A", [1, 2, 3])  # still an extension of the admitted [1, 2, 3]
    toks += [5, 6]
    cm.cache_finished_req("A", [1, 2, 3])
    cm.check_integrity()


def test_numpy_token_arrays_are_accepted_everywhere():
    cm = CacheManager(32, 1)
    cm.admit("A", np.array([1, 2, 3, 4]), 6)
    assert cm.cache_unfinished_req("A", np.array([1, 2, 3, 4, 5])).prefix_len == 0
    assert cm.cache_finished_req("A", np.array([1, 2, 3, 4, 5, 6])).prefix_len == 5
    assert [type(t) for s in cm.tree.snapshot().sequences() for t in s] == [int] * 6
    cm.check_integrity()


# ------------------------------------------------------------------ item 3: evicting for nothing
def _forked(block_size: int = 1) -> CacheManager:
    """P runs [1..8]; its fork C finished with 4 more tokens: the tree holds blocks P still uses."""
    cm = CacheManager(12, block_size)
    cm.admit("P", list(range(1, 9)))
    cm.fork("P", "C")
    cm.append("C", 4)
    cm.cache_finished_req("C", list(range(1, 13)))
    cm.check_integrity()
    return cm


def test_a_fork_that_finishes_first_hands_its_lock_on_to_the_other():
    cm = _forked()
    assert cm.tree.peek_prefix_len(list(range(1, 13))) == 12
    node = cm.lock_node("P")
    assert node is not None and node.path_kv() == cm.table("P").block_ids  # P locks what it uses
    assert cm.tree.evictable_size() == 4  # only C's own tail frees blocks
    assert cm.available_blocks() == cm.allocator.num_free_blocks + 4


def test_available_blocks_counts_only_what_eviction_frees():
    cm = _forked()
    free = cm.allocator.num_free_blocks
    assert free == 0
    assert cm.available_blocks() == 4
    evicted = cm.tree.stats.evicted_tokens
    assert not cm.make_room(5)
    assert cm.tree.stats.evicted_tokens == evicted  # nothing evicted for a room it cannot make
    assert cm.make_room(4) and cm.allocator.num_free_blocks == 4
    cm.check_integrity()


def test_admit_that_does_not_fit_evicts_nothing():
    cm = _forked()
    before = (cm.allocator.state(), cm.tree.stats.evicted_tokens, cm.tree.total_size())
    assert cm.admit("D", [50, 51, 52, 53, 54]) is None  # 5 blocks; only C's 4 could be freed
    assert (cm.allocator.state(), cm.tree.stats.evicted_tokens, cm.tree.total_size()) == before
    cm.check_integrity()
    assert cm.admit("D", [50, 51, 52, 53]) is not None
    cm.check_integrity()


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_a_fork_sharing_part_of_a_new_leaf_locks_a_split_node(block_size):
    """C forked when P had 8 tokens, then grew: P shares only the first 8 tokens of C's leaf."""
    cm = _forked(block_size)
    p = cm.table("P")
    assert cm.lock_node("P").path_kv() == p.block_ids[:8 // block_size]
    cm.cache_finished_req("P", list(range(1, 9)))
    cm.check_integrity()
    assert cm.tree.evictable_size() == 12
    assert cm.tables == {}


def test_a_fork_whose_known_tokens_disagree_with_the_shared_slots_is_refused():
    """P reserved 8 slots for 4 known tokens and forked: whoever caches the shared slots first
    defines them; the other may not claim other tokens for them."""
    cm = CacheManager(16, 4)
    cm.admit("P", [1, 2, 3, 4], 8)
    cm.fork("P", "C")
    cm.cache_unfinished_req("C", [1, 2, 3, 4, 5, 6, 7, 8])  # the shared block 1 is cached as 5..8
    cm.check_integrity()
    before = _state(cm)
    with pytest.raises(ValueError, match=r"'P'.*position 4"):
        cm.cache_finished_req("P", [1, 2, 3, 4, 9, 9, 9, 9])
    assert _state(cm) == before
    cm.cache_finished_req("P", [1, 2, 3, 4, 5, 6, 7, 8])
    cm.cache_finished_req("C", [1, 2, 3, 4, 5, 6, 7, 8])
    cm.check_integrity()


# ------------------------------------------------------------------ item 5: sequence ids
@pytest.mark.parametrize("bad", [5, None, b"A", ("A",), 1.5])
def test_a_sequence_id_that_is_not_a_str_is_a_type_error(bad):
    cm = CacheManager(16, 1)
    cm.admit("R", [1, 2, 3])
    before = _state(cm)
    with pytest.raises(TypeError, match=r"seq_id must be a str"):
        cm.admit(bad, [1, 2])
    with pytest.raises(TypeError, match=r"seq_id must be a str"):
        cm.admit(bad, None, 3)
    with pytest.raises(TypeError, match=r"seq_id must be a str"):
        cm.fork("R", bad)
    for call in (cm.free, cm.table, cm.lock_node, lambda s: cm.append(s, 1),
                 lambda s: cm.cache_finished_req(s, [1, 2, 3]), lambda s: cm.cache_unfinished_req(s, [1, 2, 3])):
        with pytest.raises(TypeError, match=r"seq_id must be a str"):
            call(bad)
    assert _state(cm) == before
    with pytest.raises(KeyError, match="nope"):  # a plain unknown id names it, never a sort TypeError
        cm.free("nope")
    cm.check_integrity()


# ------------------------------------------------------------------ the tiered manager inherits both
@pytest.mark.parametrize("policy", ["write_through", "write_back", "write_through_selective"])
def test_the_tiered_manager_locks_forks_and_checks_ids_too(policy):
    from kvlab.reuse.hicache_manager import HiCacheManager

    cm = HiCacheManager(num_blocks=12, block_size=1, host_ratio=2, write_policy=policy)
    with pytest.raises(TypeError, match=r"seq_id must be a str, got None"):
        cm.admit(None, [1, 2])
    cm.admit("P", list(range(1, 9)))
    cm.fork("P", "C")
    cm.append("C", 4)
    cm.cache_finished_req("C", list(range(1, 13)))
    cm.check_integrity()  # includes: no illegal lifecycle edge
    assert cm.available_blocks() == 4
    evicted = cm.tree.stats.evicted_tokens
    assert cm.admit("D", [50, 51, 52, 53, 54]) is None and cm.tree.stats.evicted_tokens == evicted
    assert cm.admit("D", [50, 51, 52, 53]) is not None
    for s, toks in (("P", list(range(1, 9))), ("D", [50, 51, 52, 53])):
        cm.cache_finished_req(s, toks)
        cm.check_integrity()


@pytest.mark.parametrize("finished", [False, True])
def test_cache_req_treats_each_region_of_the_table_as_its_diagram_says(finished):
    """Block size 2. R1's table at cache time: M (matched at admit) | D (R2 cached those tokens
    meanwhile) | N N (newly cached) | T (partial tail), each block as cache_req's docstring says."""
    cm = CacheManager(num_blocks=16, block_size=2)
    cm.admit("R0", [1, 2, 3])
    cm.cache_finished_req("R0", [1, 2, 3])                       # the tree holds [1 2]
    r1 = cm.admit("R1", [1, 2, 3, 4, 5, 6, 7, 8, 9]).table.block_ids
    cm.admit("R2", [1, 2, 3, 4, 10])
    cm.cache_unfinished_req("R2", [1, 2, 3, 4, 10])              # R2 caches [3 4] first
    m, d, n1, n2, t = r1
    tree_d = cm.table("R2").block_ids[1]
    rc = cm.allocator.ref_count
    cache = cm.cache_finished_req if finished else cm.cache_unfinished_req
    res = cache("R1", list(range(1, 10)))
    assert res.prefix_len == 4 and res.duplicates == [d] and res.kv == [m, tree_d, n1, n2]
    if finished:   # M: tree + R2; D, T: freed; N: the tree's only; R1 gone and unlocked
        assert (rc[m], rc[d], rc[n1], rc[n2], rc[t], rc[tree_d]) == (2, 0, 1, 1, 0, 2)
        assert "R1" not in cm.tables and cm.tree.evictable_size() == 4   # [5 6 7 8] evictable
    else:          # M: tree + R1 + R2; D switched to the tree's; N: tree + table; T kept
        assert cm.table("R1").block_ids == [m, tree_d, n1, n2, t]
        assert (rc[m], rc[d], rc[n1], rc[n2], rc[t], rc[tree_d]) == (3, 0, 2, 2, 1, 3)
        assert cm.lock_node("R1").path_kv() == [m, tree_d, n1, n2]
    cm.check_integrity()


def test_a_key_made_by_plus_whose_admitted_part_was_changed_is_refused():
    """A caller that changes the admitted part of ``a.tokens.plus(answer)`` before caching it: the
    tree would hold tokens whose KV was computed for others (a wrong KV served to the next match).
    The manager compares that part with what the sequence was admitted with (a merge that trusted
    the key's origin instead was reverted): ValueError, nothing changed."""
    cm = CacheManager(32, 2)
    a = cm.admit("A", [1, 2, 3, 4, 5], 8)
    key = a.tokens.plus([6, 7])
    key[1] = 9                                     # the caller's slip: the key is a list
    before = (cm.allocator.state(), cm.tree.pretty(), dict(cm.table("A").__dict__))
    with pytest.raises(ValueError, match="differ at position 1"):
        cm.cache_finished_req("A", key)
    assert (cm.allocator.state(), cm.tree.pretty(), dict(cm.table("A").__dict__)) == before
    cm.check_integrity()


def test_a_key_made_from_the_admission_is_cached_and_checked_against_what_the_sequence_holds():
    """``Admission.tokens.plus(answer)``: only the answer is checked; a key that does not extend the
    admitted tokens, or an answer with a bad id, is refused with nothing changed."""
    from kvlab.reuse.radix_cache import RadixKey
    cm = CacheManager(32, 2)
    a = cm.admit("A", [1, 2, 3, 4, 5], 8)
    assert a.tokens == [1, 2, 3, 4, 5] and type(a.tokens) is RadixKey
    before = (cm.allocator.state(), cm.tree.pretty(), dict(cm.table("A").__dict__))
    with pytest.raises(TypeError, match=r"tokens\[6\] = True"):
        a.tokens.plus([6, True])
    with pytest.raises(ValueError, match="differ at position 1"):
        cm.cache_finished_req("A", RadixKey([1, 9, 3, 4, 5, 6]))
    with pytest.raises(ValueError, match="shorter"):
        cm.cache_unfinished_req("A", RadixKey([1, 2]))
    assert (cm.allocator.state(), cm.tree.pretty(), dict(cm.table("A").__dict__)) == before
    key = a.tokens.plus([6, 7])
    res = cm.cache_finished_req("A", key)
    assert res.prefix_len == 0 and len(res.kv) == 3
    key.append(99)  # the manager keeps no reference to the caller's key
    b = cm.admit("B", [1, 2, 3, 4, 5, 6, 7, 8])
    assert b.prefix_len == 6
    cm.check_integrity()


def test_a_prompt_checked_at_submit_is_admitted_as_a_copy():
    """The engine's Request checks its prompt once, into a RadixKey, and the scheduler admits that
    key without a second check. The cache manager keeps a copy: a caller that changes the
    request's list afterwards changes nothing the manager holds (the tree never maps other
    tokens to this KV), and the sequence caches the tokens it was admitted with."""
    from kvlab.compute.sequence import Request, SamplingParams
    from kvlab.reuse.radix_cache import RadixKey

    req = Request("A", [1, 2, 3, 4, 5], SamplingParams(max_new_tokens=1))
    assert type(req.prompt_ids) is RadixKey
    cm = CacheManager(32, 2)
    a = cm.admit("A", req.prompt_ids, 6)
    req.prompt_ids[0] = 9                          # the caller's slip after admission
    assert a.tokens == [1, 2, 3, 4, 5] and a.tokens is not req.prompt_ids
    with pytest.raises(ValueError, match="differ at position 0"):
        cm.cache_finished_req("A", [9, 2, 3, 4, 5, 6])
    cm.cache_finished_req("A", [1, 2, 3, 4, 5, 6])
    assert cm.tree.match_prefix([1, 2, 3, 4, 5, 6]).prefix_len == 6
    cm.check_integrity()
    with pytest.raises(TypeError, match=r"prompt_ids\[1\]"):
        Request("B", [1, 2.5], SamplingParams(max_new_tokens=1))
