"""Captions in words: one plain sentence per event, for steppers and animations.

An :class:`~kvlab.memory.events.Event` is data (``kind``, ``seq_id``, ``block_ids``, ``detail``);
its ``describe()`` is a log line (``'#3 cow R2: copy P1 -> P6 (logical block L1)'``). A learner
needs the action instead: who did what to which block, and why. :func:`event_sentence` says it
from the event and the pool after it (a :class:`~kvlab.memory.snapshot.MemorySnapshot`), e.g.
``'R2 writes into shared block P1: copy it to P6, where the write will go (copy-on-write)'``. Every kind
listed in the Event docstring has its sentence; an unknown kind still gets words, never a repr.

Mirrors no vLLM or SGLang file (kvlab's pictures).

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> m = BlockManager(num_blocks=6, block_size=4, record=True)
    >>> _ = m.add_sequence("R1", 6); _ = m.fork("R1", "R2"); _ = m.append("R2", 1)
    >>> [event_sentence(e, s) for e, s in zip(m.log, m.snapshots[1:])]  # doctest: +NORMALIZE_WHITESPACE
    ['R1 arrives with 6 tokens: it takes P0, P1 (P1 has 2 of 4 slots used)',
     'R2 forks R1: it shares both blocks P0, P1 (ref count +1 each, nothing copied)',
     'R2 writes into shared block P1: copy it to P2, where the write will go (copy-on-write)',
     'R2 writes position 6 into its own block P2 (3 of 4 slots used)']
"""
from __future__ import annotations

from typing import Any

from ..memory.events import Event
from ..memory.snapshot import MemorySnapshot

__all__ = ["event_sentence", "block_list"]


def block_list(ids: Any) -> str:
    """``[0, 1, 4] -> 'P0, P1, P4'``; more than eight: the first six and how many more."""
    ids = list(ids)
    if len(ids) > 8:
        return ", ".join(f"P{b}" for b in ids[:6]) + f" and {len(ids) - 6} more"
    return ", ".join(f"P{b}" for b in ids)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _fill(after: MemorySnapshot | None, b: int) -> str:
    if after is None or not 0 <= b < after.num_blocks:
        return ""
    return f" ({after.tokens_in_block[b]} of {after.block_size} slots used)"


def _shares(ids: list[int]) -> str:
    """What a fork shares: "block P0", "both blocks P0, P1", "all 3 blocks P0, P1, P2"."""
    if len(ids) == 1:
        return f"block {block_list(ids)}"
    return f"{'both' if len(ids) == 2 else f'all {len(ids)}'} blocks {block_list(ids)}"


def _append(e: Event, after: MemorySnapshot | None, was_shared: frozenset[int] = frozenset()) -> str:
    seq, d, fresh = e.seq_id, e.detail, list(e.block_ids)
    start, n = int(d.get("start", 0)), int(d.get("num_tokens", 0))
    table = list(after.tables.get(seq, ())) if after is not None else []
    last = table[-1] if table else None
    if start == 0:
        if not fresh:
            return f"{seq} arrives with no tokens yet"
        tail = f" (P{fresh[-1]} has {after.tokens_in_block[fresh[-1]]} of {after.block_size} slots used)" \
            if after is not None and after.tokens_in_block[fresh[-1]] < after.block_size else ""
        return f"{seq} arrives with {_plural(n, 'token')}: it takes {block_list(fresh)}{tail}"
    if n == 1:
        if fresh:
            return f"{seq}'s last block is full: it takes free block P{fresh[0]} for position {start}"
        own = after is not None and last is not None and after.ref_count[last] == 1
        if own and last in was_shared:   # the others copied it away: the last holder needs no copy
            return (f"{seq} writes position {start} into P{last} in place{_fill(after, last)}: P{last} has 1 "
                    f"reference left, so {seq} is its last holder and nothing is copied")
        return f"{seq} writes position {start} into its {'own' if own else 'last'} block P{last}{_fill(after, last)}"
    span = f"positions {start} to {start + n - 1}"
    if fresh:
        return f"{seq} grows by {_plural(n, 'token')} ({span}): it takes {block_list(fresh)}"
    return f"{seq} grows by {_plural(n, 'token')} ({span}): they fit in its last block P{last}"


def _free_seq(e: Event) -> str:
    seq, d, back = e.seq_id, e.detail, list(e.block_ids)
    total, handed = int(d.get("num_blocks", len(back))), int(d.get("handed_over", 0))
    go = "goes" if len(back) == 1 else "go"
    parts = [f"{block_list(back)} {go} back to the free queue" if back else "no block goes back to the pool"]
    kept = total - len(back) - handed
    if kept > 0:
        stay = "stays with its other holders" if kept == 1 else "stay with their other holders"
        parts.append(f"{_plural(kept, 'shared block')} {stay} (one reference less)")
    if handed:
        parts.append(f"the radix tree keeps {_plural(handed, 'block')}")
    return f"{seq} finishes: " + "; ".join(parts)


def event_sentence(event: Event, after: MemorySnapshot | None = None,
                   was_shared: frozenset[int] = frozenset()) -> str:
    """One plain sentence for ``event``; ``after``: the pool after it (for fill levels); ``was_shared``:
    the blocks held by more than one table earlier in the run and not freed since (a write into one
    that is private now is its last holder's, in place: no copy)."""
    e, seq, ids, d = event, event.seq_id, list(event.block_ids), event.detail
    who = seq if seq is not None else "the cache"
    k = e.kind
    if k == "append":
        return _append(e, after, was_shared)
    if k == "adopt":
        return (f"{seq} starts with {_plural(len(ids), 'cached block')} {block_list(ids)} holding "
                f"{_plural(int(d.get('num_tokens', 0)), 'token')} (shared: ref count +1 each, nothing computed)")
    if k == "fork":
        return (f"{seq} forks {d.get('parent', '?')}: it shares {_shares(ids)} "
                "(ref count +1 each, nothing copied)")
    if k == "cow":
        return (f"{seq} writes into shared block P{d.get('src')}: copy it to P{d.get('dst')}, where the write will go "
                "(copy-on-write)")
    if k == "share_prefix":
        released = d.get("released") or []
        rest = "go back to the pool" if released else "each lose a reference"
        return (f"{seq} switches to the radix tree's copies {block_list(ids)}: its own "
                f"{block_list(d.get('replaced') or [])} {rest}")
    if k == "free_seq":
        return _free_seq(e)
    if k == "allocate":
        return f"{who} takes free {'block' if len(ids) == 1 else 'blocks'} {block_list(ids)}"
    if k == "incref":
        return f"{who} takes one more reference to {block_list(ids)}"
    if k == "free":
        released = d.get("released") or []
        go = "goes" if len(released) == 1 else "go"
        tail = f": {block_list(released)} {go} back to the free queue" if released else " (still held by others)"
        return f"{who} drops a reference to {block_list(ids)}{tail}"
    if k == "match":
        p, n = int(d.get("prefix_len", 0)), int(d.get("num_tokens", 0))
        return f"{who} looks up its {_plural(n, 'token')} in the cache: the first {p} are cached"
    if k == "admit":
        p, n = int(d.get("prefix_len", 0)), int(d.get("num_tokens", 0))
        return f"{who} is admitted: {p} of its {_plural(n, 'token')} are reused, {n - p} to compute"
    if k == "insert":
        return f"{who}'s tokens go into the cache" + (f": it now holds {block_list(ids)} too" if ids else "")
    if k == "split":
        return f"the radix tree splits node {d.get('node')} at token {d.get('at')} (new node {d.get('new_node')})"
    if k == "evict":
        return f"the cache evicts {block_list(ids)} to make room" if ids else "the cache evicts nothing"
    if k == "lock":
        return f"{who} locks its matched path in the tree (node {d.get('node')}): it cannot be evicted now"
    if k == "unlock":
        return f"{who} unlocks its path in the tree: it can be evicted again"
    if k == "cache":
        when = "finishes and caches" if d.get("finished") else "caches after its prefill"
        return f"{who} {when} {_plural(int(d.get('num_tokens', 0)), 'token')} in the radix tree"
    if k in ("arrive", "preempt", "finish"):
        verb = {"arrive": "arrives", "preempt": "is preempted (its blocks are freed; it will run again)",
                "finish": "finishes"}[k]
        return f"{who} {verb}"
    return f"{who}: {k.replace('_', ' ')}" + (f" on {block_list(ids)}" if ids else "")
