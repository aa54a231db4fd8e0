"""A radix tree folded to one path, for a projector: the nodes one request ran through, its
matched middle folded into one box, every branch off the path counted instead of drawn.

A chat's tree grows a node or two a turn; drawn whole, top to bottom, it is soon taller than
the 599 px a projector shows under the chat's controls, and shrinking it makes its text
unreadable. :func:`fold_to_path` keeps what the last turn is about: the path its prompt and
reply run through, the first node (the system prompt and examples) and the last matched node
as they are, the matched nodes between them as one box (``[k nodes]``, their tokens in one),
and for each kept node the branches that leave the path there (:attr:`FoldedTree.branches`:
how many, how many tokens in all). Pure data: :mod:`kvlab.viz.chat_demo` draws it.

Example (a chain 1 -> 2 -> 3 -> 4 and a branch 5 off node 1):
    >>> from kvlab.reuse.radix_snapshot import NodeView, RadixSnapshot
    >>> def node(i, parent, start, toks):
    ...     return NodeView(i, parent, 0, start, toks, toks, 0, 0, 0, False, True)
    >>> snap = RadixSnapshot(1, (node(1, 0, 0, (1,)), node(2, 1, 1, (2,)), node(3, 2, 2, (3,)),
    ...                          node(4, 3, 3, (4,)), node(5, 1, 1, (9, 9))), 6, 0)
    >>> f = fold_to_path(snap, [1, 2, 3, 4], hit=frozenset({1, 2, 3}))
    >>> [n.tokens for n in f.snapshot.nodes], f.labels, f.branches
    ([(1,), (2,), (3,), (4,)], {}, {1: (1, 2)})
    >>> f = fold_to_path(snap, [1, 2, 3, 4], hit=frozenset({1, 2, 3, 4}))
    >>> [n.tokens for n in f.snapshot.nodes], f.labels
    ([(1,), (2, 3), (4,)], {2: '2 nodes'})
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

__all__ = ["FoldedTree", "fold_to_path", "subtree_tokens"]


@dataclass(frozen=True)
class FoldedTree:
    """``snapshot``: the path's nodes only (a folded run is one node with the first one's id);
    ``labels``: folded node id -> "k nodes"; ``branches``: kept node id -> (branches off the path
    there, tokens in them); ``folded``: original ids drawn inside each folded node; ``dropped``:
    nodes off the path, not drawn."""

    snapshot: Any
    labels: dict[int, str]
    branches: dict[int, tuple[int, int]]
    folded: dict[int, tuple[int, ...]]
    dropped: int


def _children(snapshot: Any) -> dict[int, list[Any]]:
    """Node id -> its children's NodeViews (root 0 included)."""
    kids: dict[int, list[Any]] = {}
    for n in snapshot.nodes:
        kids.setdefault(n.parent_id, []).append(n)
    return kids


def subtree_tokens(snapshot: Any, node_id: int, kids: dict[int, list[Any]] | None = None) -> int:
    """Tokens held by a node and everything below it (``kids``: :func:`_children` of the snapshot, if
    the caller has it already)."""
    kids = _children(snapshot) if kids is None else kids
    stack, total = [node_id], 0
    by_id = {n.id: n for n in snapshot.nodes}
    while stack:
        i = stack.pop()
        total += len(by_id[i].tokens) if i in by_id else 0
        stack.extend(k.id for k in kids.get(i, []))
    return total


def _runs(path: Sequence[int], hit: frozenset[int]) -> list[list[int]]:
    """The path in groups drawn as one box each: the first node alone, the matched nodes between it
    and the last matched one as one group (if there are 2+), every other node alone."""
    hits = [i for i in path if i in hit]
    last_hit = hits[-1] if hits else None
    middle = [i for i in path[1:] if i in hit and i != last_hit]
    out: list[list[int]] = []
    for i in path:
        if i in middle and len(middle) > 1:
            if i == middle[0]:
                out.append(list(middle))
        else:
            out.append([i])
    return out


def fold_to_path(snapshot: Any, path: Sequence[int], hit: frozenset[int] = frozenset()) -> FoldedTree:
    """``snapshot`` folded to ``path`` (node ids from the root down, as
    :func:`kvlab.lessons.chat.path_node_ids` gives them); ``hit``: the matched nodes (the run of
    them between the first and the last matched node is folded). See the module example."""
    by_id = {n.id: n for n in snapshot.nodes}
    unknown = [i for i in path if i not in by_id]
    if unknown:
        raise ValueError(f"fold_to_path: node ids {unknown} are not in the snapshot")
    on_path = set(path)
    kids = _children(snapshot)
    nodes, labels, branches, folded = [], {}, {}, {}
    parent = 0
    runs = _runs(list(path), hit)
    for run in runs:
        first = by_id[run[0]]
        tokens = tuple(t for i in run for t in by_id[i].tokens)
        kv = tuple(b for i in run for b in by_id[i].kv)
        node = replace(first, parent_id=parent, tokens=tokens, kv=kv, lock_ref=max(by_id[i].lock_ref for i in run),
                       is_leaf=run[-1] == path[-1], evictable=all(by_id[i].evictable for i in run))
        nodes.append(node)
        if len(run) > 1:
            labels[first.id], folded[first.id] = f"{len(run)} nodes", tuple(run)
        off = [k.id for i in run for k in kids.get(i, []) if k.id not in on_path]
        if off:
            branches[first.id] = (len(off), sum(subtree_tokens(snapshot, k, kids) for k in off))
        parent = first.id
    root_off = [k.id for k in kids.get(0, []) if k.id not in on_path]
    if root_off:
        branches[0] = (len(root_off), sum(subtree_tokens(snapshot, k, kids) for k in root_off))
    drawn = sum(len(r) for r in runs)
    return FoldedTree(replace(snapshot, nodes=tuple(nodes)), labels, branches, folded, len(snapshot.nodes) - drawn)
