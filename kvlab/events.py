"""The event log every kvlab structure writes to, so any run can be replayed.

The allocator, the block tables, the radix tree and the prefix cache emit one small
dataclass event per state change into a shared :class:`EventLog`. The visualizer
turns a log into animation frames; tests replay it. Events are plain data: they
never hold references to live objects.

Not handled here: rendering (see ``kvlab.viz``) and persistence (events are
dataclasses; ``dataclasses.asdict`` gives JSON-ready dicts).

Example:
    >>> log = EventLog()
    >>> _ = log.emit(Event(kind="allocate", seq_id="R1", block_ids=(0, 1)))
    >>> [e.kind for e in log]
    ['allocate']
    >>> log[0].step
    0
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass(frozen=True, slots=True)
class Event:
    """One state change.

    kind: what happened. Paged layer: ``allocate``, ``incref``, ``free``, ``append``,
        ``fork``, ``cow`` (copy-on-write), ``free_seq``. Radix layer and others add
        their own kinds (``match``, ``insert``, ``split``, ``evict``, ``lock``...).
    seq_id: the sequence or request concerned, if any.
    block_ids: the physical blocks (or slots) involved.
    detail: anything else, as plain data (for ``cow``: ``{"src": 3, "dst": 8, "logical_block": 1}``).
    step: position in the log, set by :meth:`EventLog.emit`.
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
    """An append-only list of :class:`Event` with optional listeners.

    A listener is called after every emit with the stamped event; the visualizer uses
    one to take a snapshot after each step (``BlockManager(record=True)`` does this).
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._listeners: list[Callable[[Event], None]] = []

    def emit(self, event: Event) -> Event:
        if event.step == -1:  # fresh event: stamp it in place (frozen only to callers)
            object.__setattr__(event, "step", len(self.events))
            stamped = event
        else:  # an event from another log: copy it, never restamp a shared object
            stamped = Event(event.kind, event.seq_id, tuple(event.block_ids), dict(event.detail), len(self.events))
        self.events.append(stamped)
        for fn in self._listeners:
            fn(stamped)
        return stamped

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        self._listeners.append(fn)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __getitem__(self, i: int) -> Event:
        return self.events[i]
