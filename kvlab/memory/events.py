"""The event log every kvlab structure writes to, so any run can be replayed.

The allocator, the block manager, the radix tree, the block-hash cache, the cache manager and
the engine emit one event per state change into a shared :class:`EventLog`. The visualizer
turns a log into animation frames; tests replay it. Events are plain data: they never hold
references to live objects. The subject of every event is ``seq_id`` (the sequence or
request concerned, if any).

Cheap by design: a log keeps plain lists of strings, numbers and block ids packed into
``bytes`` (4 bytes an id); the hot path (``add``) keeps no container object per event at all, so
recording adds nothing for the garbage collector to count or rescan (a long run would otherwise
trigger full collections over the whole pool and tree); :class:`Event` objects are built only
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
    >>> log.add("lock", "R1", (), 7, -3)          # a kind of FIELDS: its detail values in order
    >>> log[1].detail
    {'node': 7, 'delta': -3}
    >>> NO_LOG.record("allocate", "R1", (0, 1)); len(NO_LOG)
    0
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

__all__ = ["Event", "EventLog", "NullLog", "NO_LOG", "FIELDS", "pack_ids"]

# The detail fields of kvlab's own event kinds, in order: ``EventLog.add(kind, seq_id, block_ids,
# *values)`` stores just the values (no dict per event), ``Event.detail`` names them again.
# Fields that hold several block ids are passed packed (``pack_ids``).
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
}


def pack_ids(ids: Iterable[int]) -> bytes:
    """Block ids as ``bytes`` (4 bytes an id; bytes are never tracked by the garbage collector,
    unlike lists, tuples and arrays): how ``EventLog.add`` takes a detail field that holds several
    ids. Example: ``pack_ids([1, 2])`` -> 8 bytes."""
    return array("I", ids).tobytes()


def _compact(values: Iterable[int]) -> Any:
    """``pack_ids(values)``, or a tuple when they are not plain ids."""
    try:
        return pack_ids(values)
    except (TypeError, OverflowError):
        return tuple(values)


def _expand(value: Any) -> Any:
    """Inverse of :func:`_compact`: bytes back to a list of ints; anything else as it is."""
    if type(value) is bytes:
        a = array("I")
        a.frombytes(value)
        return a.tolist()
    return value


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

    ``record(kind, seq_id, block_ids, **detail)`` adds any event; ``add(kind, seq_id, block_ids,
    *values)`` is the fast way in for the kinds in :data:`FIELDS` (what kvlab's hot paths call:
    no keyword dict per event); ``emit(Event(...))`` adds a ready-made event and returns it
    stamped with its step.
    Reading (``log[i]``, iteration, ``events``) builds :class:`Event` objects on demand.
    A listener (``subscribe``) is called after every event with the stamped Event; the
    visualizer uses one to take a snapshot after each step (``BlockManager(record=True)``).
    """

    def __init__(self) -> None:
        self._kind: list[str] = []
        self._seq: list[str | None] = []
        self._ids: list[Any] = []       # bytes per event (4 bytes an id; b"" when none)
        self._detail: list[Any] = []    # record(): its keyword dict (lists packed); add(): an offset into _vals
        self._vals: list[Any] = []      # add()'s detail values, flat (ints, strings, bools, packed ids)
        self._listeners: list[Callable[[Event], None]] = []

    def record(self, kind: str, seq_id: str | None = None, block_ids: Iterable[int] = (), **detail: Any) -> None:
        """Append one event (block ids, and list values in ``detail``, are copied)."""
        for v in detail.values():
            if type(v) is list or type(v) is tuple:  # a new dict: the old one is tracked for good
                detail = {k: _compact(v) if type(v) is list or type(v) is tuple else v for k, v in detail.items()}
                break
        self._kind.append(kind)
        self._seq.append(seq_id)
        self._ids.append(_compact(block_ids) if block_ids else b"")
        self._detail.append(detail)
        if self._listeners:
            ev = self._event(len(self._kind) - 1)
            for fn in self._listeners:
                fn(ev)

    def add(self, kind: str, seq_id: str | None, block_ids: Iterable[int], *values: Any) -> None:
        """Append one event of a kind in :data:`FIELDS`, its detail as ``values`` in that order
        (several block ids packed with :func:`pack_ids`). Example: ``log.add("lock", "R1", (), 7, -3)``."""
        self._kind.append(kind)
        self._seq.append(seq_id)
        self._ids.append(array("I", block_ids).tobytes() if block_ids else b"")  # pack_ids, inlined (hot path)
        self._detail.append(len(self._vals))
        self._vals += values
        if self._listeners:
            ev = self._event(len(self._kind) - 1)
            for fn in self._listeners:
                fn(ev)

    def emit(self, event: Event) -> Event:
        """Append a ready-made event; returns it as stored (a new Event stamped with its step)."""
        self.record(event.kind, event.seq_id, event.block_ids, **event.detail)
        return self._event(len(self._kind) - 1)

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        self._listeners.append(fn)

    def _event(self, i: int) -> Event:
        d = self._detail[i]
        if type(d) is int:
            names = FIELDS[self._kind[i]]
            items = zip(names, self._vals[d:d + len(names)])
        else:
            items = d.items()
        detail = {k: list(v) if type(v) is tuple else _expand(v) for k, v in items}
        ids = self._ids[i]
        return Event(self._kind[i], self._seq[i], tuple(_expand(ids)) if type(ids) is bytes else ids, detail, i)

    @property
    def events(self) -> list[Event]:
        """Every event, as Event objects (built now)."""
        return [self._event(i) for i in range(len(self._kind))]

    def kinds(self) -> list[str]:
        return list(self._kind)

    def since(self, start: int, kind: str) -> list[Event]:
        """The events of ``kind`` from index ``start`` on (built now; the others are not).
        Example: a reader that keeps ``n = len(log)`` asks ``log.since(n, "cow")`` next time."""
        return [self._event(i) for i in range(max(0, start), len(self._kind)) if self._kind[i] == kind]

    def __len__(self) -> int:
        return len(self._kind)

    def __iter__(self) -> Iterator[Event]:
        return (self._event(i) for i in range(len(self._kind)))

    def __getitem__(self, i: int) -> Event:
        n = len(self._kind)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"event {i} out of range: the log holds {n}")
        return self._event(i)


class NullLog(EventLog):
    """A log that keeps nothing: pass it (or :data:`NO_LOG`) to record no events at all."""

    def record(self, kind: str, seq_id: str | None = None, block_ids: Iterable[int] = (), **detail: Any) -> None:
        return None

    def add(self, kind: str, seq_id: str | None, block_ids: Iterable[int], *values: Any) -> None:
        return None

    def emit(self, event: Event) -> Event:
        return event

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        raise ValueError("a NullLog records nothing: subscribe to a real EventLog")


NO_LOG = NullLog()
