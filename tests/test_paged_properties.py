"""Property tests: random operation sequences on the paged core.

A shadow KV store (slot -> value) is kept beside the allocator: every appended token
writes a unique value into its slot, and every copy-on-write copies the block's slots.
After every step: integrity holds, every sequence reads back exactly the values it
wrote (so sharing and copy-on-write never mix two sequences' tokens), and a failed
operation changed nothing at all.
"""
from __future__ import annotations

import itertools

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvlab.memory import BlockManager, DoubleFree, OutOfBlocks, UnknownBlock

_values = itertools.count()


class PagedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m: BlockManager | None = None
        self.kv: dict[int, int] = {}  # slot -> value written there
        self.expect: dict[str, list[int]] = {}  # seq -> values it should read back
        self.n = 0

    @rule(num_blocks=st.integers(1, 12), block_size=st.sampled_from([1, 2, 4]))
    @precondition(lambda self: self.m is None)
    def init(self, num_blocks, block_size):
        self.m = BlockManager(num_blocks, block_size)

    def _state(self):
        return (self.m.allocator.state(), {s: (tuple(t.block_ids), t.num_tokens) for s, t in self.m.tables.items()})

    def _write(self, seq: str, copies, start: int, end: int) -> None:
        bs, t = self.m.block_size, self.m.tables[seq]
        for src, dst in copies:
            for o in range(bs):
                if src * bs + o in self.kv:
                    self.kv[dst * bs + o] = self.kv[src * bs + o]
        for pos, slot in zip(range(start, end), t.slot_mapping(start, end)):
            v = next(_values)
            self.kv[slot] = v
            self.expect[seq].append(v)

    @precondition(lambda self: self.m is not None)
    @rule(n=st.integers(0, 9))
    def add(self, n):
        seq = f"S{self.n}"
        self.n += 1
        before = self._state()
        try:
            self.m.add_sequence(seq, n)
        except OutOfBlocks:
            assert self._state() == before
            return
        self.expect[seq] = []
        self._write(seq, [], 0, n)

    @precondition(lambda self: self.m is not None and self.m.tables)
    @rule(data=st.data(), n=st.integers(1, 6))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.m.tables)))
        start = self.m.tables[seq].num_tokens
        before = self._state()
        try:
            copies = self.m.append(seq, n)
        except OutOfBlocks:
            assert self._state() == before
            return
        self._write(seq, copies, start, start + n)

    @precondition(lambda self: self.m is not None and self.m.tables)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.m.tables)))
        child = f"S{self.n}"
        self.n += 1
        self.m.fork(parent, child)
        self.expect[child] = list(self.expect[parent])

    @precondition(lambda self: self.m is not None and any(t.num_tokens for t in self.m.tables.values()))
    @rule(data=st.data())
    def overwrite(self, data):
        seq = data.draw(st.sampled_from(sorted(s for s, t in self.m.tables.items() if t.num_tokens)))
        t = self.m.tables[seq]
        pos = data.draw(st.integers(0, t.num_tokens - 1))
        before = self._state()
        try:
            copies = self.m.write(seq, pos)
        except OutOfBlocks:
            assert self._state() == before
            return
        bs = self.m.block_size
        for src, dst in copies:
            for o in range(bs):
                if src * bs + o in self.kv:
                    self.kv[dst * bs + o] = self.kv[src * bs + o]
        v = next(_values)
        self.kv[t.translate(pos).slot] = v
        self.expect[seq][pos] = v

    @precondition(lambda self: self.m is not None and self.m.tables)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.m.tables)))
        self.m.free(seq)
        del self.expect[seq]

    @precondition(lambda self: self.m is not None)
    @rule(data=st.data())
    def bad_free(self, data):
        """A double free or an unknown id raises and changes nothing."""
        a = self.m.allocator
        free_ids = list(a.free_block_ids)
        ids = data.draw(st.sampled_from([[a.num_blocks], [-1]] + ([[free_ids[0]]] if free_ids else [])))
        before = self._state()
        try:
            a.free(ids)
        except (DoubleFree, UnknownBlock):
            pass
        else:
            raise AssertionError(f"free({ids}) should have raised")
        assert self._state() == before

    @precondition(lambda self: self.m is not None)
    @rule()
    def failing_allocation(self):
        before = self._state()
        try:
            self.m.allocator.allocate(self.m.allocator.num_free_blocks + 1)
        except OutOfBlocks:
            pass
        assert self._state() == before

    @invariant()
    def consistent(self):
        if self.m is None:
            return
        self.m.check_integrity()
        self.m.snapshot().check_integrity()
        for seq, t in self.m.tables.items():
            got = [self.kv[s] for s in t.slot_mapping()]
            assert got == self.expect[seq], f"{seq} reads {got}, wrote {self.expect[seq]}"


TestPagedMachine = PagedMachine.TestCase
