"""The event log every kvlab structure writes to, so any run can be replayed.

The allocator, the block manager, the radix tree, the block-hash cache, the cache manager and
the engine emit one event per state change into a shared :class:`EventLog`. The visualizer
turns a log into animation frames; tests replay it. Events are plain data: they never hold
references to live objects. The subject of every event is ``seq_id`` (the sequence or
request concerned, if any).

Cheap by design: a log keeps one row per event, a tuple ``(kind, seq_id, block_ids, detail)``
of strings, numbers and tuples of ids (a tuple holding only such values is untracked by the
garbage collector after its first collection, so a long log adds nothing for full collections
to rescan); ``add``, the hot path, takes that row as it is: with no listener it *is* the row
list's ``append`` (no Python frame, no dict per event); :class:`Event` objects are built only
when someone reads the log. A run that records nothing passes :data:`NO_LOG` (or a
:class:`NullLog`): its ``record`` does nothing.

Not handled here: rendering (see ``kvlab.viz``) and persistence (``dataclasses.asdict`` of an
event gives a JSON-ready dict).

Example:
    >>> log = EventLog()
    >>> log.record("allocate", "R1", (0, 1))
    >>> [e.kind for e in log]
    ['allocate']
    >>> log[0].step, log[0].block_ids
    (0, (0, 1))
    >>> log.add(("lock", "R1", (), (7, -3)))      # one row: a kind of FIELDS, its detail values in order
    >>> log[1].detail
    {'node': 7, 'delta': -3}
    >>> NO_LOG.record("allocate", "R1", (0, 1)); len(NO_LOG)
    0
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

__all__ = ["Event", "EventLog", "NullLog", "NO_LOG", "FIELDS"]

# The detail fields of kvlab's own event kinds, in order: ``EventLog.add((kind, seq_id, block_ids,
# values))`` stores just the values (no dict per event), ``Event.detail`` names them again.
# Block ids, and fields that hold several, are passed as tuples (copies nobody mutates later).
FIELDS: dict[str, tuple[str, ...]] = {
    # block manager (one event per table operation)
    "append": ("start", "num_tokens"),
    "adopt": ("num_tokens",),
    "fork": ("parent",),
    "cow": ("src", "dst", "logical_block"),
    "share_prefix": ("replaced", "released"),
    "free_seq": ("num_blocks", "handed_over"),
    "drop": ("logical_blocks", "released"),
    # radix tree
    "match": ("prefix_len", "num_tokens", "node"),
    "split": ("node", "new_node", "at", "parent"),
    "lock": ("node", "delta"),
    "unlock": ("node", "delta"),
    "insert": ("prefix_len", "num_tokens", "node", "freed"),
    "evict": ("requested", "num_tokens", "nodes", "policy"),
    # cache manager
    "admit": ("prefix_len", "num_tokens"),
    "cache": ("prefix_len", "num_tokens", "finished"),
    # engine (kvlab.compute.engine): per request, with the engine step it happened at
    "arrive": ("engine_step", "prompt_len", "n"),
    "preempt": ("engine_step", "tokens"),
    "abort": ("engine_step", "tokens"),
    "finish": ("engine_step", "outputs"),
}


@dataclass(frozen=True, slots=True)
class Event:
    """One state change.

    kind: what happened. Allocator (direct calls only): ``allocate``, ``incref``, ``free``.
        Block manager (one event per table operation): ``append``, ``adopt``, ``fork``, ``cow``
        (copy-on-write), ``share_prefix``, ``free_seq`` (its block_ids: the blocks that went back
        to the pool). Reuse layer: ``match``, ``insert``, ``split``, ``evict``, ``lock``,
        ``unlock``, ``admit``, ``cache``; the engine adds ``arrive``, ``preempt``, ``finish``.
    seq_id: the sequence or request concerned, if any.
    block_ids: the physical blocks (or slots) involved.
    detail: anything else, as plain data (for ``cow``: ``{"src": 3, "dst": 8, "logical_block": 1}``).
    step: position in the log.
    """

    kind: str
    seq_id: str | None = None
    block_ids: tuple[int, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    step: int = -1

    def describe(self) -> str:
        """A one-line caption, e.g. ``'#3 cow R2: copy P1 -> P6 (logical block L1)'``."""
        who = f" {self.seq_id}" if self.seq_id is not None else ""
        if self.kind == "cow":
            d = self.detail
            return f"#{self.step} cow{who}: copy P{d['src']} -> P{d['dst']} (logical block L{d['logical_block']})"
        blocks = ", ".join(f"P{b}" for b in self.block_ids)
        extra = "".join(f" {k}={v}" for k, v in self.detail.items())
        return f"#{self.step} {self.kind}{who}" + (f": {blocks}" if blocks else "") + extra


class EventLog:
    """An append-only log of events with optional listeners.

    ``record(kind, seq_id, block_ids, **detail)`` adds any event; ``add(row)`` is the fast way in
    for the kinds in :data:`FIELDS` (what kvlab's hot paths call): ``row`` is ``(kind, seq_id,
    block_ids, values)``, the ids and the values as tuples, the values in the order of
    ``FIELDS[kind]``; for any other kind, ``values`` is the dict ``record`` would keep (the
    block-hash cache's hot path: its lists as tuples); ``emit(Event(...))`` adds a ready-made
    event and returns it stamped with its step.
    Reading (``log[i]``, iteration, ``events``) builds :class:`Event` objects on demand.
    A listener (``subscribe``) is called after every event with the stamped Event; the
    visualizer uses one to take a snapshot after each step (``BlockManager(record=True)``).
    """

    def __init__(self) -> None:
        # one row per event: (kind, seq_id, block ids as a tuple, detail): for record() its keyword
        # dict (lists as tuples), for add() the tuple of its values in the order of FIELDS[kind]
        self._rows: list[tuple] = []
        self._listeners: list[Callable[[Event], None]] = []
        self._bind()

    def _bind(self) -> None:
        """``add`` is the row list's own ``append`` until someone listens."""
        self.add: Callable[[tuple], None] = self._add_and_tell if self._listeners else self._rows.append

    def __getstate__(self) -> dict:  # a copy binds its own ``add`` to its own rows
        state = self.__dict__.copy()
        del state["add"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind()

    def record(self, kind: str, seq_id: str | None = None, block_ids: Iterable[int] = (), **detail: Any) -> None:
        """Append one event (block ids, and list values in ``detail``, are copied)."""
        detail = {k: tuple(v) if type(v) is list or type(v) is tuple else v for k, v in detail.items()}
        self._rows.append((kind, seq_id, tuple(block_ids), detail))
        if self._listeners:
            self._tell()

    def _add_and_tell(self, row: tuple) -> None:
        """``add`` once someone listens: append ``row``, then tell the listeners."""
        self._rows.append(row)
        self._tell()

    def _tell(self) -> None:
        ev = self._event(len(self._rows) - 1)
        for fn in self._listeners:
            fn(ev)

    def emit(self, event: Event) -> Event:
        """Append a ready-made event; returns it as stored (a new Event stamped with its step)."""
        self.record(event.kind, event.seq_id, event.block_ids, **event.detail)
        return self._event(len(self._rows) - 1)

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        self._listeners.append(fn)
        self._bind()

    def _event(self, i: int) -> Event:
        kind, seq_id, ids, d = self._rows[i]
        items = zip(FIELDS[kind], d) if type(d) is tuple else d.items()
        detail = {k: list(v) if type(v) is tuple else v for k, v in items}
        return Event(kind, seq_id, ids, detail, i)

    @property
    def events(self) -> list[Event]:
        """Every event, as Event objects (built now)."""
        return [self._event(i) for i in range(len(self._rows))]

    def kinds(self) -> list[str]:
        return [r[0] for r in self._rows]

    def since(self, start: int, kind: str) -> list[Event]:
        """The events of ``kind`` from index ``start`` on (built now; the others are not).
        Example: a reader that keeps ``n = len(log)`` asks ``log.since(n, "cow")`` next time."""
        return [self._event(i) for i in range(max(0, start), len(self._rows)) if self._rows[i][0] == kind]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Event]:
        return (self._event(i) for i in range(len(self._rows)))

    def __getitem__(self, i: int) -> Event:
        n = len(self._rows)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"event {i} out of range: the log holds {n}")
        return self._event(i)


class NullLog(EventLog):
    """A log that keeps nothing: pass it (or :data:`NO_LOG`) to record no events at all."""

    def record(self, kind: str, seq_id: str | None = None, block_ids: Iterable[int] = (), **detail: Any) -> None:
        return None

    def _bind(self) -> None:
        self.add = self._ignore

    @staticmethod
    def _ignore(row: tuple) -> None:
        return None

    def emit(self, event: Event) -> Event:
        return event

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        raise ValueError("a NullLog records nothing: subscribe to a real EventLog")


NO_LOG = NullLog()
