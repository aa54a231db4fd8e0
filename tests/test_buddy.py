"""kvlab.memory.buddy: carving, rounding, split, coalesce, fragmentation figures, all-or-nothing errors,
and agreement with a transcription of vLLM's pre-release (cacheflow) buddy allocator."""
from __future__ import annotations

import budget
import copy
import random

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvlab.memory import BuddyAllocator, NO_LOG
from kvlab.memory.block_pool import DoubleFree, OutOfBlocks, UnknownBlock
from kvlab.memory.buddy import next_pow2_blocks


class CacheflowBuddy:
    """The algorithm of cacheflow/master/block_manager.py's BuddyAllocator (vLLM's pre-release code,
    the allocator of the paper's Orca baselines), restated for comparison: lists per size, pop()
    from the end, split pushing the upper halves, merge with ``start ^ size``."""

    def __init__(self, num_blocks: int, max_block_size: int) -> None:
        self.max = max_block_size
        self.free = {1 << k: [] for k in range(max_block_size.bit_length())}
        self.addr_to_size: dict[int, int] = {}
        size, last = max_block_size, 0
        while size >= 1:
            while last + size <= num_blocks:
                self.free[size].append(last)
                self.addr_to_size[last] = size
                last += size
            size //= 2

    def allocate(self, n: int) -> int:
        size = 1 << (n - 1).bit_length()
        i = size
        while True:
            if self.free.get(i):
                start = self.free[i].pop()
                self.addr_to_size[start] = size
                while i > size:
                    i //= 2
                    self.free[i].append(start + i)
                    self.addr_to_size[start + i] = i
                return start
            i *= 2
            if i > self.max:
                raise ValueError("no block")

    def release(self, start: int) -> None:
        size = self.addr_to_size.pop(start)
        while size < self.max:
            buddy = start ^ size
            if self.addr_to_size.get(buddy) == size and buddy in self.free[size]:
                self.free[size].remove(buddy)
                del self.addr_to_size[buddy]
                size *= 2
                start = min(start, buddy)
            else:
                break
        self.free[size].append(start)
        self.addr_to_size[start] = size


def _state(b: BuddyAllocator) -> tuple:
    return (dict(b.run_size), {k: list(v) for k, v in b.free_runs_of.items()}, dict(b.allocated), b.num_free_blocks,
            b.requested_blocks)


# ------------------------------------------------------------------ carving, rounding, split, coalesce
def test_the_papers_pool_is_carved_into_seven_full_runs_and_the_remainder():
    b = BuddyAllocator(983, 16, 2048, log=NO_LOG)  # 15,728 slots (Table 1) in blocks of 16; largest run 128 blocks
    assert b.max_run == 128
    assert b.free_runs() == [(128 * i, 128) for i in range(7)] + [(896, 64), (960, 16), (976, 4), (980, 2), (982, 1)]
    assert b.num_free_blocks == 983 and b.largest_free_run == 128
    starts = [b.allocate(128, f"R{i}") for i in range(7)]  # Orca (Max): 2,048 slots each, exactly 7 fit
    assert sorted(starts) == [128 * i for i in range(7)] and not b.can_allocate([128])
    assert b.stats().external_fragmentation == 87 - 64
    b.check_integrity()


def test_allocation_rounds_up_to_a_power_of_two_and_splits_the_smallest_run():
    b = BuddyAllocator(16, 1, 16, log=NO_LOG)
    assert [next_pow2_blocks(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    a = b.allocate(5, "A")  # 8 blocks: the run of 16 splits, [8, 16) stays free
    assert a == 0 and b.free_runs() == [(8, 8)] and b.stats().rounding_blocks == 3
    c = b.allocate(1, "C")  # splits [8, 16) into 4, 2, 1, 1
    assert c == 8 and b.free_runs() == [(9, 1), (10, 2), (12, 4)]
    assert b.layout() == [(0, 8, "A", 5), (8, 1, "C", 1), (9, 1, None, 0), (10, 2, None, 0), (12, 4, None, 0)]
    b.check_integrity()


def test_frees_coalesce_back_to_the_carved_state_in_any_order():
    rng = random.Random(3)
    for _ in range(30):
        b = BuddyAllocator(100, 1, 32, log=NO_LOG)
        carved = b.free_runs()
        starts = []
        while True:
            n = rng.choice([1, 2, 3, 5, 8, 13, 32])
            if not b.can_allocate([n]):
                break
            starts.append(b.allocate(n))
        rng.shuffle(starts)
        for s in starts:
            b.free(s)
            b.check_integrity()
        assert b.free_runs() == carved and b.num_free_blocks == 100 and b.requested_blocks == 0


def test_fragmentation_figures_free_blocks_that_no_request_can_use():
    b = BuddyAllocator(16, 16, 256, log=NO_LOG)  # 16 blocks of 16 slots
    runs = [b.allocate(4, f"R{i}") for i in range(4)]  # 0, 4, 8, 12 in some order
    by_start = dict(zip(sorted(runs), sorted(runs)))
    b.free(by_start[0])
    b.free(by_start[8])  # two free runs of 4 that are not buddies
    s = b.stats()
    assert (s.free_blocks, s.largest_free_run, s.external_fragmentation) == (8, 4, 4)
    assert not b.can_allocate([5])  # 8 blocks free, no run of 8
    before = _state(b)
    with pytest.raises(OutOfBlocks, match="no free run of 8 blocks for 5; largest free run 4"):
        b.allocate(5, "big")
    assert _state(b) == before
    b.free(by_start[4])  # [0, 4) + [4, 8) coalesce, then with nothing else
    assert b.largest_free_run == 8 and b.stats().external_fragmentation == 4
    assert b.allocate(5) == 0 and b.stats().rounding_blocks == 3 + 4 - 4  # 8 for 5 (3) + the run of 4 at 12 (0)
    b.check_integrity()


def test_can_allocate_answers_what_allocate_would_do_for_several_runs():
    rng = random.Random(11)
    for _ in range(200):
        b = BuddyAllocator(rng.randint(1, 70), 1, 16, log=NO_LOG)
        for _ in range(rng.randint(0, 8)):
            n = rng.randint(1, 16)
            if b.can_allocate([n]):
                b.allocate(n)
        sizes = [rng.randint(1, 16) for _ in range(rng.randint(1, 4))]
        trial = copy.deepcopy(b)
        try:
            for n in sizes:
                trial.allocate(n)
            ok = True
        except OutOfBlocks:
            ok = False
        before = _state(b)
        assert b.can_allocate(sizes) is ok
        assert _state(b) == before


# ------------------------------------------------------------------ the same algorithm as cacheflow
@pytest.mark.parametrize("seed", range(6))
def test_every_step_matches_cacheflows_buddy_allocator(seed):
    rng = random.Random(seed)
    nb, max_run = rng.choice([(983, 128), (100, 32), (37, 8)])
    ours, ref = BuddyAllocator(nb, 16, max_run * 16, log=NO_LOG), CacheflowBuddy(nb, max_run)
    live = []
    for _ in range(400):
        if live and rng.random() < 0.45:
            s = live.pop(rng.randrange(len(live)))
            ours.free(s)
            ref.release(s)
        else:
            n = rng.randint(1, max_run)
            try:
                s = ref.allocate(n)
            except ValueError:
                with pytest.raises(OutOfBlocks):
                    ours.allocate(n)
                continue
            assert ours.allocate(n) == s
            live.append(s)
        assert {k: v for k, v in ours.free_runs_of.items()} == {k: v for k, v in ref.free.items()}
        assert ours.run_size == ref.addr_to_size
    ours.check_integrity()


# ------------------------------------------------------------------ bad input: named, nothing changed
def test_bad_input_names_the_value_and_changes_nothing():
    b = BuddyAllocator(16, 16, 128, log=NO_LOG)  # largest run 8 blocks
    s = b.allocate(3, "A")
    before = _state(b)
    with pytest.raises(ValueError, match="n = 9 blocks is more than the largest run, 8 blocks"):
        b.allocate(9)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        b.allocate(0)
    with pytest.raises(TypeError, match="n must be an int, got True"):
        b.allocate(True)
    with pytest.raises(TypeError, match="2.5"):
        b.allocate(2.5)
    assert s == 8 and b.free_runs() == [(0, 8), (12, 4)]  # cacheflow's order: the last run of 8, split
    with pytest.raises(UnknownBlock, match="block 9 starts no allocated run"):
        b.free(s + 1)
    with pytest.raises(UnknownBlock, match="block 99"):
        b.free(99)
    with pytest.raises(ValueError, match="start must be >= 0"):
        b.free(-1)
    with pytest.raises(DoubleFree, match="run at block 0 .8 blocks. is already free"):
        b.free(0)
    assert _state(b) == before
    assert b.allocate(np.int64(2)) == 12  # numpy ints are ints (kvlab.memory.ids)
    b.free(np.int64(s))
    with pytest.raises(DoubleFree):
        b.free(s)
    for kw, match in [(dict(num_blocks=0), "num_blocks"), (dict(num_blocks=8, block_size=16, max_run_tokens=48), "power"),
                      (dict(num_blocks=8, block_size=16, max_run_tokens=8), "power of two"),
                      (dict(num_blocks=8, block_size=False), "block_size")]:
        with pytest.raises((ValueError, TypeError), match=match):
            BuddyAllocator(**kw)


def test_check_integrity_catches_a_missed_merge_and_a_lost_block():
    b = BuddyAllocator(8, 1, 8, log=NO_LOG)
    s = b.allocate(4)
    b.allocated.pop(s)  # the run at 0 now claims to be free without its buddy [4, 8) merged
    b.requested_blocks -= 4
    b._push(s, 4)
    b.num_free_blocks -= 4
    with pytest.raises(AssertionError, match="free count|not merged"):
        b.check_integrity()
    c = BuddyAllocator(8, 1, 8, log=NO_LOG)
    c.allocate(2)
    del c.run_size[2]  # a run vanished: blocks 2..3 belong to no run
    with pytest.raises(AssertionError):
        c.check_integrity()


def test_events_record_allocations_and_frees():
    b = BuddyAllocator(8, 16, 128)
    s = b.allocate(3, "R1")
    b.free(s)
    assert [(e.kind, e.seq_id, e.block_ids) for e in b.log] == [("buddy_allocate", "R1", (0,)), ("buddy_free", "R1", (0,))]
    assert b.log[0].detail == {"size": 4, "requested": 3}


# ------------------------------------------------------------------ property: any sequence of operations
class BuddyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = BuddyAllocator(53, 2, 32, log=NO_LOG)  # max run 16 blocks
        self.ref = CacheflowBuddy(53, 16)
        self.live: list[int] = []

    @rule(n=st.integers(1, 20))
    def allocate(self, n):
        before = _state(self.b)
        if n > 16:
            with pytest.raises(ValueError):
                self.b.allocate(n)
            assert _state(self.b) == before
            return
        try:
            s = self.ref.allocate(n)
        except ValueError:
            with pytest.raises(OutOfBlocks):
                self.b.allocate(n)
            assert _state(self.b) == before
            return
        assert self.b.allocate(n) == s
        self.live.append(s)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 100))
    def free(self, i):
        s = self.live.pop(i % len(self.live))
        self.b.free(s)
        self.ref.release(s)

    @rule(start=st.integers(0, 60))
    def bad_free(self, start):
        if start in self.b.allocated:
            return
        before = _state(self.b)
        with pytest.raises((DoubleFree, UnknownBlock)):
            self.b.free(start)
        assert _state(self.b) == before

    @invariant()
    def agrees(self):
        self.b.check_integrity()
        assert self.b.run_size == self.ref.addr_to_size
        assert self.b.num_free_blocks + sum(self.b.allocated[s][0] for s in self.live) == 53


TestBuddyMachine = BuddyMachine.TestCase
TestBuddyMachine.settings = settings(max_examples=budget.examples(60), stateful_step_count=40, deadline=None)
