"""Hypothesis property test: CacheManager (the request cycle) against a brute-force oracle and a
shadow copy of every block's KV.

The shadow ``kv[b]`` is the token prefix whose keys and values block ``b`` holds (up to the last
position written in it): the test writes it when a sequence computes tokens (at admission, and
when a ``cache_*_req`` call hands over tokens it had only reserved slots for), copies it on
copy-on-write, and forgets it when the block is freed. The oracle ``cached`` maps every cached
page-aligned prefix to its block.

Random admissions (with prefix hits and reserved slots), appends, forks, evictions and
``cache_unfinished_req`` / ``cache_finished_req`` calls with honest extensions, prefixes,
changed positions, lists that are too long, random lists and numpy arrays. After every step:

* a call is refused (ValueError, nothing changed) exactly when its tokens do not extend the
  ones the sequence was admitted with or cached, or do not fit its table;
* every cached page's block holds exactly that page's prefix (no wrong KV can be served), and
  an admission's hit equals the oracle's longest cached prefix, with those blocks;
* the tree's pages are the oracle's, less what eviction removed (and only eviction removes);
* ``available_blocks()`` is exactly free + the blocks of unlocked nodes, each of which only the
  tree holds, and admit / append / make_room fail exactly when the need exceeds it, evicting
  nothing then;
* ``check_integrity()`` (ref_count == tree + tables, locks on the tables' paths).
"""
from __future__ import annotations

import budget
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.reuse.cache_manager import CacheManager

BASES = [[0, 1, 2, 3, 0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 1, 3, 3], [1, 1, 1, 1, 2, 2, 2, 2, 3]]
OPS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 10_000), st.integers(0, 10_000)), min_size=3, max_size=30)


def _pages(cm: CacheManager) -> dict[tuple[int, ...], tuple[int, bool]]:
    """Every cached page of the tree: its whole token prefix -> (block, in an unlocked node)."""
    ps, path, out = cm.block_size, {0: ()}, {}
    for n in cm.tree.snapshot().nodes:  # parents first
        p = path[n.parent_id]
        for i, b in enumerate(n.kv):
            out[p + n.tokens[:(i + 1) * ps]] = (b, n.evictable)
        path[n.id] = p + n.tokens
    return out


def _state(cm: CacheManager):
    return (cm.allocator.state(), cm.tree.snapshot(), {s: (list(t.block_ids), t.num_tokens) for s, t in cm.tables.items()},
            {s: n.id for s, n in cm._locks.items()}, {s: list(k) for s, k in cm._tokens.items()})


class Run:
    """One random workload: the manager, the shadow KV, the oracle, and what each sequence holds."""

    def __init__(self, num_blocks: int, ps: int, policy: str, seed: int) -> None:
        self.cm = CacheManager(num_blocks, ps, eviction_policy=policy)
        self.ps, self.rng = ps, random.Random(seed)
        self.kv: dict[int, tuple[int, ...]] = {}
        self.cached: dict[tuple[int, ...], int] = {}
        self.known: dict[str, list[int]] = {}  # running sequence -> tokens it has computed

    def tokens(self) -> list[int]:
        r = self.rng
        return r.choice(BASES)[:r.randint(0, 10)] + [r.randrange(4) for _ in range(r.randint(0, 5))]

    def write(self, sid: str, toks: list[int], start: int) -> None:
        """``sid`` computes positions ``start..len(toks)-1`` into its table's blocks."""
        ids, ps = self.cm.table(sid).block_ids, self.ps
        for i in range(start // ps, -(-len(toks) // ps)):
            self.kv[ids[i]] = tuple(toks[:min((i + 1) * ps, len(toks))])

    def oracle_match(self, toks: list[int], limit: int) -> list[int]:
        out, ps = [], self.ps
        for k in range(1, limit // ps + 1):
            b = self.cached.get(tuple(toks[:k * ps]))
            if b is None:
                break
            out.append(b)
        return out

    # ------------------------------------------------------------------ operations
    def admit(self, sid: str, extra: int) -> None:
        cm, toks = self.cm, self.tokens() or [self.rng.randrange(4)]
        n = len(toks) + extra
        hit = self.oracle_match(toks, len(toks) - 1)
        pages = _pages(cm)
        unlocked_hit = sum(pages[tuple(toks[:(i + 1) * self.ps])][1] for i in range(len(hit)))
        fits = -(-n // self.ps) - len(hit) <= cm.available_blocks() - unlocked_hit
        before, evicted = _state(cm)[:3], cm.tree.stats.evicted_tokens
        a = cm.admit(sid, np.array(toks) if extra % 2 else toks, n)
        assert (a is not None) == fits, f"admit of {n} slots: fits={fits} but got {a}"
        if a is None:  # nothing taken or evicted (the match may split a node: same pages)
            assert cm.allocator.state() == before[0] and cm.tree.stats.evicted_tokens == evicted
            return
        assert a.prefix_len == len(hit) * self.ps and a.matched_kv == hit
        for i, b in enumerate(hit):  # the KV served for the hit is the KV of these tokens
            assert self.kv[b] == tuple(toks[:(i + 1) * self.ps])
        self.known[sid] = list(toks)
        self.write(sid, toks, a.prefix_len)

    def append(self, sid: str, n: int) -> None:
        cm = self.cm
        fits = cm.block_manager.blocks_to_append(sid, n) <= cm.available_blocks()
        before, evicted = cm.allocator.state(), cm.tree.stats.evicted_tokens
        copies = cm.append(sid, np.int8(n) if n % 2 else n)
        assert (copies is not None) == fits
        if copies is None:
            assert cm.allocator.state() == before and cm.tree.stats.evicted_tokens == evicted
            return
        for src, dst in copies:
            self.kv[dst] = self.kv[src]
        assert type(cm.table(sid).num_tokens) is int

    def token_list(self, sid: str, kind: int) -> list[int]:
        known, room, r = self.known[sid], self.cm.table(sid).num_tokens, self.rng
        if kind < 0:
            return list(known)
        if kind == 0:  # honest: what it computed, and maybe tokens for its reserved slots
            return known + [r.randrange(4) for _ in range(r.randint(0, room - len(known)))]
        if kind == 1 and known:  # a prefix (shorter: refused)
            return known[:r.randrange(len(known))]
        if kind == 2 and known:  # one position changed
            i = r.randrange(len(known))
            return known[:i] + [known[i] + 1] + known[i + 1:]
        if kind == 3:  # more tokens than its table holds
            return known + [r.randrange(4) for _ in range(room - len(known) + r.randint(1, 3))]
        return self.tokens()

    def cache(self, sid: str, kind: int, finished: bool, as_numpy: bool) -> None:
        cm, known = self.cm, self.known[sid]
        toks = self.token_list(sid, kind)
        ok = toks[:len(known)] == known and len(toks) <= cm.table(sid).num_tokens
        before = _state(cm)
        expect_prefix = len(self.oracle_match(toks, len(toks)))
        call = cm.cache_finished_req if finished else cm.cache_unfinished_req
        if not ok:
            with pytest.raises(ValueError, match=repr(sid)):
                call(sid, np.array(toks, dtype=np.int64) if as_numpy else toks)
            assert _state(cm) == before, "a refused cache call changed state"
            return
        self.write(sid, toks, len(known))
        res = call(sid, np.array(toks, dtype=np.int64) if as_numpy else toks)
        full = len(toks) // self.ps
        if full:
            assert res.prefix_len == expect_prefix * self.ps
            for i in range(full):
                self.cached[tuple(toks[:(i + 1) * self.ps])] = res.kv[i]
        if finished:
            del self.known[sid]
        else:
            self.known[sid] = list(toks)

    def fork(self, parent: str, child: str) -> None:
        if len(self.known[parent]) != self.cm.table(parent).num_tokens:
            return  # forks share reserved slots only in the unit tests (who claims them first)
        self.cm.fork(parent, child)
        self.known[child] = list(self.known[parent])

    def make_room(self, k: int) -> None:
        cm = self.cm
        fits = k <= cm.available_blocks()
        evicted = cm.tree.stats.evicted_tokens
        assert cm.make_room(k) == fits
        if fits:
            assert cm.allocator.num_free_blocks >= k
        else:
            assert cm.tree.stats.evicted_tokens == evicted

    # ------------------------------------------------------------------ after every step
    def check(self, may_evict: bool) -> None:
        cm = self.cm
        cm.check_integrity()
        rc = cm.allocator.ref_count
        for b in [b for b in self.kv if rc[b] == 0]:
            del self.kv[b]  # a freed block holds nothing anyone may read
        pages = _pages(cm)
        tree = {p: b for p, (b, _ev) in pages.items()}
        assert tree.items() <= self.cached.items(), "the tree caches a page nobody inserted"
        gone = len(self.cached) - len(tree)
        assert gone == 0 or may_evict, "pages left the tree without an eviction"
        self.cached = tree
        for p, b in tree.items():  # the shadow copy: every cached page holds its own tokens' KV
            assert self.kv.get(b) == p, f"block {b} is cached as {p} but holds the KV of {self.kv.get(b)}"
        unlocked = [b for b, ev in pages.values() if ev]
        assert all(rc[b] == 1 for b in unlocked), "an unlocked cached block is still used by a table"
        assert cm.available_blocks() == cm.allocator.num_free_blocks + len(unlocked)
        assert set(self.known) == set(cm.tables)
        for s, toks in self.known.items():  # tables hold what their sequences computed
            t = cm.table(s)
            for i in range(len(toks) // self.ps):
                assert self.kv[t.block_ids[i]] == tuple(toks[:(i + 1) * self.ps]), f"{s}: block {i} holds other KV"


@settings(max_examples=budget.examples(300), deadline=None)
@given(ops=OPS, num_blocks=st.integers(4, 24), ps=st.sampled_from([1, 1, 2, 4]),
       policy=st.sampled_from(["lru", "lfu", "fewest_tokens"]), seed=st.integers(0, 10_000))
def test_cache_manager_matches_oracle_and_shadow_kv(ops, num_blocks, ps, policy, seed):
    run = Run(num_blocks, ps, policy, seed)
    for i, (op, a, b) in enumerate(ops):
        live = sorted(run.known)
        sid = live[a % len(live)] if live else None
        if op <= 1 or sid is None:
            run.admit(f"S{i}", b % 6)
        elif op == 2:
            run.append(sid, 1 + b % 5)
        elif op in (3, 4):
            run.cache(sid, b % 5, finished=op == 4, as_numpy=b % 7 == 0)
        elif op == 5:
            run.fork(sid, f"S{i}")
        elif op == 6:
            run.make_room(b % (num_blocks + 2))
        else:
            run.cm.free(sid)
            del run.known[sid]
        run.check(may_evict=op in (0, 1, 2, 6) or sid is None)
    for s in sorted(run.known):
        run.cache(s, -1, finished=True, as_numpy=False)
        run.check(False)
    assert run.cm.tree.protected_size() == 0
