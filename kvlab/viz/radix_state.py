"""One frame's radix tree as plain data (:class:`RadixState`) and the invariants of a tree snapshot.

The frames (:mod:`kvlab.viz.radix_frames`: one per request of an example, one per event of a
recorded run) build these; the view (:mod:`kvlab.viz.radix_view`) draws them. Both import this
module, so neither imports the other back.

Example:
    >>> from kvlab.viz.radix_frames import radix_request_frames
    >>> f = radix_request_frames()[1]
    >>> isinstance(f.snapshot, RadixState) and f.snapshot.check_integrity() is None
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["RadixState", "check_radix_snapshot"]


def check_radix_snapshot(snap: Any) -> None:
    """Invariants of a RadixSnapshot (plain data), AssertionError when broken: parents
    listed before children, each child starts where its parent ends, one block per page,
    no block held by two nodes, first tokens (pages) distinct among siblings, and the
    evictable + protected sizes add up to the tokens of unlocked and locked nodes."""
    seen: dict[int, Any] = {}
    blocks: set[int] = set()
    first: set[tuple[int, Any]] = set()
    ev = pr = 0
    ps = snap.page_size
    for n in snap.nodes:
        assert n.id not in seen and n.id != 0, f"node id {n.id} repeated or root listed"
        if n.parent_id != 0:
            assert n.parent_id in seen, f"node {n.id}: parent {n.parent_id} missing or listed after it"
            p = seen[n.parent_id]
            assert n.start == p.start + len(p.tokens), f"node {n.id} starts at {n.start}, parent ends elsewhere"
            assert n.lock_ref <= p.lock_ref, f"node {n.id} has more locks than its parent"
        else:
            assert n.start == 0, f"root child {n.id} starts at {n.start}"
        assert n.tokens, f"node {n.id} is empty"
        assert len(n.kv) == len(n.tokens) // ps and len(n.tokens) % ps == 0, f"node {n.id}: kv/pages mismatch"
        dup = blocks & set(n.kv)
        assert not dup, f"blocks {sorted(dup)} held by two nodes"
        blocks.update(n.kv)
        key = (n.parent_id, n.tokens[:ps] if ps > 1 else n.tokens[0])
        assert key not in first, f"two children of {n.parent_id} start with the same token(s)"
        first.add(key)
        if n.lock_ref:
            pr += len(n.tokens)
        else:
            ev += len(n.tokens)
        seen[n.id] = n
    for n in snap.nodes:
        assert n.is_leaf == (not any(m.parent_id == n.id for m in snap.nodes)), f"node {n.id}: wrong is_leaf"
    assert (ev, pr) == (snap.evictable_size, snap.protected_size), (
        f"evictable/protected sizes {snap.evictable_size}/{snap.protected_size} != node sums {ev}/{pr}")


@dataclass(frozen=True)
class RadixState:
    """One frame's tree: the snapshot, which nodes matched (hit) or were prefilled now
    (miss), the nodes evicted since the previous frame (as they were), and text for labels.
    ``answer_at``: node id -> the offset in that node where a cached answer starts (its
    tokens before are the question), so the label shows the two apart. ``partial``: node id -> how
    many of its first tokens a match covered when the match ends inside that node (drawn before
    the split it causes): only that part is drawn green."""

    snapshot: Any  # kvlab.reuse.radix_snapshot.RadixSnapshot
    hit: frozenset[int] = frozenset()
    miss: frozenset[int] = frozenset()
    evicted: tuple[Any, ...] = ()  # NodeViews of the previous frame, gone now
    node_labels: dict[int, str] = field(default_factory=dict)
    detokenize: Callable[[Sequence[int]], str] | None = None
    title: str = "Radix tree"
    answer_at: dict[int, int] = field(default_factory=dict)
    partial: dict[int, int] = field(default_factory=dict)

    def check_integrity(self) -> None:
        check_radix_snapshot(self.snapshot)
        ids = {n.id for n in self.snapshot.nodes}
        assert self.hit <= ids and self.miss <= ids, "hit/miss nodes not in the tree"
        assert not (self.hit & self.miss), f"nodes both hit and miss: {sorted(self.hit & self.miss)}"
        sizes = {n.id: len(n.tokens) for n in self.snapshot.nodes}
        assert all(i in self.hit and 0 < k < sizes[i] for i, k in self.partial.items()), (
            f"a partial match must cover part of a matched node: {self.partial}")
