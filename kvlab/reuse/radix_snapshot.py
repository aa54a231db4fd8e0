"""The radix tree frozen as plain data, for pictures, printing and tests.

Every walk here is iterative, so a tree thousands of nodes deep prints without recursion.

Example:
    >>> snap = RadixSnapshot(1, (NodeView(1, 0, 1, 0, (1, 2), (0, 1), 0, 1, 1, True, True),), 2, 0)
    >>> print(snap.pretty())
    root
    └── [1 2] kv=[0-1]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["NodeView", "RadixSnapshot"]


@dataclass(frozen=True)
class NodeView:
    """One node as plain data. ``start``: position of its first token in the sequences below it."""

    id: int
    parent_id: int
    depth: int
    start: int
    tokens: tuple[int, ...]
    kv: tuple[int, ...]
    lock_ref: int
    last_access_time: int
    hit_count: int
    is_leaf: bool
    evictable: bool


def _show_kv(ids: tuple[int, ...]) -> str:
    """Runs of consecutive ids as a-b: (0, 1, 2, 5) -> '[0-2 5]'."""
    runs: list[list[int]] = []
    for b in ids:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return "[" + " ".join(f"{x}" if x == y else f"{x}-{y}" for x, y in runs) + "]"


@dataclass(frozen=True)
class RadixSnapshot:
    """The tree at one moment (root id 0 is implicit), nodes depth first, parents before children."""

    page_size: int
    nodes: tuple[NodeView, ...]
    evictable_size: int
    protected_size: int
    policy: str = "lru"

    def children(self, node_id: int) -> list[NodeView]:
        return [n for n in self.nodes if n.parent_id == node_id]

    def _children_map(self) -> dict[int, list[NodeView]]:
        kids: dict[int, list[NodeView]] = {}
        for n in self.nodes:
            kids.setdefault(n.parent_id, []).append(n)
        return kids

    def sequences(self) -> list[tuple[int, ...]]:
        """The token sequence of every root-to-leaf path."""
        path: dict[int, tuple[int, ...]] = {0: ()}
        out = []
        for n in self.nodes:  # parents come first
            path[n.id] = path[n.parent_id] + n.tokens
            if n.is_leaf:
                out.append(path[n.id])
        return out

    def pretty(self, detokenize: Callable[[Sequence[int]], str] | None = None, max_tokens: int = 12) -> str:
        """The tree as text, one node a line (tokens, blocks, lock count when locked)."""
        def show(seq: tuple[int, ...]) -> str:
            if detokenize is not None:
                return repr(detokenize(list(seq)))
            s = " ".join(map(str, seq[:max_tokens]))
            return "[" + s + (f" ... +{len(seq) - max_tokens}" if len(seq) > max_tokens else "") + "]"

        kids = self._children_map()
        lines = ["root"]
        stack: list[tuple[NodeView, str, bool]] = []
        top = kids.get(0, [])
        stack.extend((n, "", i == len(top) - 1) for i, n in reversed(list(enumerate(top))))
        while stack:
            n, prefix, last = stack.pop()
            lock = f" lock={n.lock_ref}" if n.lock_ref else ""
            lines.append(f"{prefix}{'└── ' if last else '├── '}{show(n.tokens)} kv={_show_kv(n.kv)}{lock}")
            below = kids.get(n.id, [])
            child_prefix = prefix + ("    " if last else "│   ")
            stack.extend((c, child_prefix, i == len(below) - 1) for i, c in reversed(list(enumerate(below))))
        return "\n".join(lines)
