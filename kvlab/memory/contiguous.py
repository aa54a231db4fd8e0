"""The baseline PagedAttention replaced: one contiguous range of token slots per request.

Before vLLM, serving systems gave each request one contiguous chunk of KV memory, sized
up front because the output length is unknown. That wastes memory three ways, which
this arena measures:

1. **reservation** (over-reservation, internal fragmentation): slots reserved for tokens
   the request has not produced (and may never produce);
2. **copy on growth**: a request that outgrows its range must move to a larger free
   range, copying every token it has so far (``bytes_copied``);
3. **external fragmentation** (外部碎片): free slots scattered in holes too small for the
   next request (``free_tokens - largest_free_range``).

Reservation policies: ``"max"`` reserves ``max_len`` (the model's maximum), ``"pow2"``
reserves the next power of two of the current length and grows by doubling, ``"exact"``
is the oracle that knows the final length. Placement is first fit (lowest address).

Not handled: the KV tensors (this is bookkeeping in token units, like the paged
allocator), compaction (real systems do not move running requests to defragment).

Example (the source notes' fragmentation example, in tokens):
    >>> arena = ContiguousArena(capacity=12288, policy="exact", max_len=12288)
    >>> for rid, n in [("A", 4096), ("B", 2048), ("C", 4096)]:
    ...     _ = arena.admit(rid, n, final_len=n)
    >>> arena.finish("A")
    >>> arena.free_tokens, arena.largest_free_range
    (6144, 4096)
    >>> arena.can_admit(6144)      # 6144 slots free, but not in one piece
    False
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .events import EventLog
from .ids import check_int, check_seq_id

__all__ = ["ContiguousArena", "OutOfContiguousSpace", "Reservation", "ArenaStats", "next_pow2", "POLICIES"]

POLICIES = ("max", "pow2", "exact")


class OutOfContiguousSpace(Exception):
    """No free range is long enough; nothing changed."""

    def __init__(self, needed: int, free: int, largest: int, what: str = "") -> None:
        self.needed, self.free, self.largest = needed, free, largest
        super().__init__(
            f"no contiguous range of {needed} slots{f' for {what}' if what else ''}: "
            f"{free} slots free in all, largest free range {largest}"
        )


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1). Example: 5 -> 8, 8 -> 8, 1 -> 1."""
    n = check_int("n", n, 1)
    return 1 << (n - 1).bit_length()


@dataclass
class Reservation:
    """One request's range ``[start, start + reserved)``, of which ``length`` slots hold tokens."""

    req_id: str
    start: int
    reserved: int
    length: int
    final_len: int | None = None

    @property
    def end(self) -> int:
        return self.start + self.reserved


@dataclass(frozen=True)
class ArenaStats:
    """Where the arena's slots are, in tokens (the vLLM paper's Figure 2 categories)."""

    capacity: int
    token_states: int  # slots holding a token
    reserved_unused: int  # reserved for a request but empty (reservation + internal fragmentation)
    free: int
    largest_free_range: int
    external_fragmentation: int  # free slots outside the largest free range
    bytes_copied: int
    moves: int

    @property
    def token_state_fraction(self) -> float:
        return self.token_states / self.capacity


@dataclass
class ContiguousArena:
    capacity: int
    policy: str = "max"
    max_len: int = 2048
    bytes_per_token: int = 1
    log: EventLog = field(default_factory=EventLog)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {POLICIES}")
        for name in ("capacity", "max_len", "bytes_per_token"):
            setattr(self, name, check_int(name, getattr(self, name), 1))
        self.requests: dict[str, Reservation] = {}
        self.bytes_copied = 0
        self.moves = 0

    # -- free space
    def free_ranges(self, exclude: str | None = None) -> list[tuple[int, int]]:
        """Free ``(start, length)`` ranges in address order (``exclude``: treat that request as gone)."""
        out, cursor = [], 0
        for r in sorted((r for r in self.requests.values() if r.req_id != exclude), key=lambda r: r.start):
            if r.start > cursor:
                out.append((cursor, r.start - cursor))
            cursor = r.end
        if cursor < self.capacity:
            out.append((cursor, self.capacity - cursor))
        return out

    @property
    def free_tokens(self) -> int:
        return self.capacity - sum(r.reserved for r in self.requests.values())

    @property
    def largest_free_range(self) -> int:
        return max((n for _, n in self.free_ranges()), default=0)

    def _first_fit(self, n: int, ignore: str | None = None) -> int | None:
        for start, length in self.free_ranges(exclude=ignore):
            if length >= n:
                return start
        return None

    def reservation_for(self, length: int, final_len: int | None) -> int:
        """How many slots the policy reserves for a request now ``length`` tokens long."""
        if self.policy == "max":
            return self.max_len
        if self.policy == "pow2":
            return min(next_pow2(max(length, 1)), self.max_len)
        if final_len is None:
            raise ValueError("policy 'exact' is an oracle: pass final_len")
        return final_len

    def can_admit(self, length: int, final_len: int | None = None) -> bool:
        length = check_int("length", length, 1)
        final_len = check_int("final_len", final_len, 1) if final_len is not None else None
        need = self.reservation_for(length, final_len if final_len is not None else length)
        return self._first_fit(need) is not None

    # -- state changes (all-or-nothing)
    def admit(self, req_id: str, length: int, final_len: int | None = None) -> Reservation:
        """Place a request holding ``length`` prompt tokens; raises OutOfContiguousSpace."""
        if check_seq_id(req_id, "req_id") in self.requests:
            raise ValueError(f"request {req_id!r} is already in the arena")
        length = check_int("length", length, 1)
        if final_len is not None:
            final_len = check_int("final_len", final_len, 1)
        if length > self.max_len:
            raise ValueError(f"length {length} exceeds max_len {self.max_len}")
        if final_len is not None and not length <= final_len <= self.max_len:
            raise ValueError(f"final_len {final_len} must be in [{length}, {self.max_len}]")
        need = self.reservation_for(length, final_len)
        start = self._first_fit(need)
        if start is None:
            raise OutOfContiguousSpace(need, self.free_tokens, self.largest_free_range, req_id)
        r = Reservation(req_id, start, need, length, final_len)
        self.requests[req_id] = r
        self.log.record("reserve", req_id, start=start, reserved=need, length=length)
        return r

    def grow(self, req_id: str, n: int = 1) -> int:
        """Add ``n`` tokens to a request; returns the bytes copied (0 unless it had to move).

        Growth past the reservation extends in place when the slots just after it are
        free (like realloc), else moves the request to the first free range that fits,
        copying its tokens. Raises OutOfContiguousSpace (nothing changed) when no range fits.
        """
        r = self.requests.get(req_id)
        if r is None:
            raise KeyError(f"unknown request {req_id!r}")
        n = check_int("n", n, 0)
        new_len = r.length + n
        if new_len > self.max_len:
            raise ValueError(f"{req_id}: length {new_len} would exceed max_len {self.max_len}")
        if new_len <= r.reserved:
            r.length = new_len
            return 0
        need = self.reservation_for(new_len, r.final_len) if self.policy == "pow2" else new_len
        following = next((length for start, length in self.free_ranges() if start == r.end), 0)
        if r.reserved + following >= need:
            r.reserved = need
            r.length = new_len
            self.log.record("extend", req_id, start=r.start, reserved=need)
            return 0
        start = self._first_fit(need, ignore=req_id)
        if start is None:
            raise OutOfContiguousSpace(need, self.free_tokens + r.reserved, self.largest_free_range, f"growing {req_id}")
        copied = r.length * self.bytes_per_token
        self.log.record("move", req_id, **{"from": r.start, "to": start, "reserved": need, "bytes_copied": copied})
        r.start, r.reserved, r.length = start, need, new_len
        self.bytes_copied += copied
        self.moves += 1
        return copied

    def finish(self, req_id: str) -> None:
        if req_id not in self.requests:
            raise KeyError(f"unknown request {req_id!r}")
        r = self.requests.pop(req_id)
        self.log.record("release", req_id, start=r.start, reserved=r.reserved)

    # -- figures
    def stats(self) -> ArenaStats:
        tokens = sum(r.length for r in self.requests.values())
        reserved = sum(r.reserved for r in self.requests.values())
        free, largest = self.capacity - reserved, self.largest_free_range
        return ArenaStats(self.capacity, tokens, reserved - tokens, free, largest, free - largest, self.bytes_copied, self.moves)

    def check_integrity(self) -> None:
        spans = sorted((r.start, r.end, r.req_id) for r in self.requests.values())
        for (s1, e1, a), (s2, _e2, b) in zip(spans, spans[1:]):
            assert e1 <= s2, f"{a} [{s1},{e1}) overlaps {b} at {s2}"
        for r in self.requests.values():
            assert all(type(v) is int for v in (r.start, r.reserved, r.length)), f"{r.req_id}: non-int sizes {r}"
            assert 0 <= r.start and r.end <= self.capacity, f"{r.req_id} outside the arena"
            assert 1 <= r.length <= r.reserved, f"{r.req_id}: length {r.length} vs reserved {r.reserved}"
        assert self.free_tokens == sum(n for _, n in self.free_ranges())
