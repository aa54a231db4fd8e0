"""Unit tests of the paged memory core: allocator, block tables, translate."""
from __future__ import annotations

import pytest

from kvlab.memory.block_pool import HeldBlocks
from kvlab.memory.events import EventLog
from kvlab.lessons import NOTES_TABLE, notes_translation
from kvlab.memory import (
    BlockAllocator,
    BlockManager,
    BlockTable,
    DoubleFree,
    KVCacheError,
    OutOfBlocks,
    UnknownBlock,
    blocks_needed,
    translate,
)


# ----------------------------------------------------------------------- translate
def test_notes_translation_pos9():
    t = translate([3, 7, 1, 5, 9], 9, 4, bytes_per_token=1)
    assert (t.logical_block, t.offset, t.physical_block, t.slot) == (2, 1, 1, 5)
    assert notes_translation() == t


@pytest.mark.parametrize("bpt", [1, 2, 327_680])
def test_translate_byte_address(bpt):
    t = translate(NOTES_TABLE, 9, 4, bytes_per_token=bpt, base=1000)
    assert t.byte_address == 1000 + 1 * 4 * bpt + 1 * bpt  # base(P1) + offset x bytes_per_token


def test_translate_every_position_roundtrips():
    table, bs = [3, 7, 1, 5, 9], 4
    slots = [translate(table, p, bs).slot for p in range(len(table) * bs)]
    assert len(set(slots)) == len(slots)
    for p, s in enumerate(slots):
        assert s // bs == table[p // bs] and s % bs == p % bs


@pytest.mark.parametrize(
    "pos,bs,match",
    [(20, 4, "pos 20"), (-1, 4, "pos must be >= 0, got -1"), (0, 0, "block_size must be >= 1, got 0"), (3, -2, "-2")],
)
def test_translate_bad_input_names_value(pos, bs, match):
    with pytest.raises(ValueError, match=match):
        translate([3, 7, 1, 5, 9], pos, bs)


def test_translate_type_errors():
    with pytest.raises(TypeError, match="pos"):
        translate([1], 1.5, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bytes_per_token"):
        translate([1], 0, 4, bytes_per_token=0)


@pytest.mark.parametrize("n,bs,want", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (9, 4, 3), (16, 16, 1), (17, 16, 2)])
def test_blocks_needed(n, bs, want):
    assert blocks_needed(n, bs) == want


def test_blocks_needed_errors():
    with pytest.raises(ValueError, match="-1"):
        blocks_needed(-1, 4)
    with pytest.raises(ValueError, match="block_size"):
        blocks_needed(3, 0)


# ----------------------------------------------------------------------- allocator
def test_allocate_all_or_nothing_and_error_message():
    a = BlockAllocator(4, 16)
    assert a.allocate(3, owner="A") == [0, 1, 2]
    before = a.state()
    with pytest.raises(OutOfBlocks, match=r"asked for 2 block\(s\), only 1 free") as ei:
        a.allocate(2)
    assert (ei.value.requested, ei.value.free) == (2, 1)
    assert a.state() == before
    a.check_integrity()


def test_free_order_is_fifo():
    """Documented order: freed blocks go to the back of the queue."""
    a = BlockAllocator(6, 4)
    assert a.allocate(4) == [0, 1, 2, 3]
    assert a.free([2, 0]) == [2, 0]
    assert a.allocate(2) == [4, 5]  # the never-used blocks first
    assert a.allocate(2) == [2, 0]  # then the freed ones, in the order they were freed
    a.check_integrity()


def test_double_free_and_unknown_ids_change_nothing():
    a = BlockAllocator(4, 4)
    a.allocate(2)
    a.free([1])
    before = a.state()
    with pytest.raises(DoubleFree, match="block 1 is already free"):
        a.free([0, 1])  # 0 is valid, 1 is not: nothing may change
    with pytest.raises(DoubleFree, match="listed 2 times"):
        a.free([0, 0])  # the same block twice in one call
    with pytest.raises(UnknownBlock, match="unknown block id 7"):
        a.free([0, 7])
    with pytest.raises(UnknownBlock, match="-1"):
        a.free([-1])
    with pytest.raises(UnknownBlock):
        a.free(["0"])  # type: ignore[list-item]
    assert a.state() == before
    a.check_integrity()


def test_same_block_twice_allowed_when_ref_count_allows():
    a = BlockAllocator(2, 4)
    (b,) = a.allocate(1)
    a.incref([b])
    assert a.free([b, b]) == [b]
    a.check_integrity()


def test_incref_free_block_raises():
    a = BlockAllocator(2, 4)
    with pytest.raises(KVCacheError, match="block 0 is free"):
        a.incref([0])
    assert a.ref_count == [0, 0]


@pytest.mark.parametrize("args,match", [((0, 4), "num_blocks"), ((4, 0), "block_size"), ((-3, 4), "-3")])
def test_allocator_bad_construction(args, match):
    with pytest.raises(ValueError, match=match):
        BlockAllocator(*args)


def test_check_integrity_catches_corruption():
    a = BlockAllocator(3, 4)
    a.allocate(1)
    a.ref_count[0] = 0  # corrupt on purpose
    with pytest.raises(AssertionError):
        a.check_integrity()
    b = BlockAllocator(3, 4)
    b.allocate(2)
    with pytest.raises(AssertionError, match="ref_count != holders"):
        b.check_integrity(holders=[[0]])


# --------------------------------------------------------------------- block table
def test_append_takes_new_block_only_when_full():
    m = BlockManager(8, 4)
    t = m.add_sequence("R")
    counts = []
    for _ in range(9):
        m.append("R", 1)
        counts.append(len(t.block_ids))
    assert counts == [1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert t.slot_mapping() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    t.check_integrity(m.allocator.ref_count)
    m.check_integrity()


def test_slot_mapping_and_translate_on_table():
    m = BlockManager(10, 4)
    m.allocator.allocate(3)  # make the table's blocks non-trivial: it gets 3, 4
    t = m.add_sequence("R", 6)
    assert t.block_ids == [3, 4]
    assert t.slot_mapping(3, 6) == [15, 16, 17]
    assert t.translate(5).physical_block == 4
    with pytest.raises(ValueError, match="pos 6"):
        t.translate(6)
    with pytest.raises(ValueError, match="slot range"):
        t.slot_mapping(2, 7)


def test_fork_adds_no_blocks():
    m = BlockManager(8, 4)
    m.add_sequence("P", 6)
    free = m.allocator.num_free_blocks
    child = m.fork("P", "C")
    assert m.allocator.num_free_blocks == free
    assert child.block_ids == m.tables["P"].block_ids
    assert [m.allocator.ref_count[b] for b in child.block_ids] == [2, 2]
    m.check_integrity()


def test_cow_on_shared_partial_block_copies_for_writer_only():
    m = BlockManager(8, 4)
    m.add_sequence("P", 6)  # blocks 0 (full), 1 (2 of 4 used)
    m.fork("P", "C")
    copies = m.append("C", 1)
    assert copies == [(1, 2)]
    assert m.tables["C"].block_ids == [0, 2]
    assert m.tables["P"].block_ids == [0, 1]
    assert m.allocator.ref_count[:3] == [2, 1, 1]
    # the parent now owns block 1 alone: its next write copies nothing
    assert m.append("P", 1) == []
    m.check_integrity()


def test_write_at_exact_block_boundary_copies_nothing():
    m = BlockManager(8, 4)
    m.add_sequence("P", 8)  # two full blocks
    m.fork("P", "C")
    assert m.append("C", 1) == []  # a new block, nothing copied
    assert m.tables["C"].block_ids[:2] == m.tables["P"].block_ids
    m.check_integrity()


def test_write_overwrites_shared_block_with_copy():
    m = BlockManager(8, 4)
    m.add_sequence("P", 8)
    m.fork("P", "C")
    assert m.write("C", 2) == [(0, 2)]
    assert m.write("C", 3) == []  # already private
    m.check_integrity()


def test_append_out_of_blocks_changes_nothing_including_cow():
    m = BlockManager(3, 4)
    m.add_sequence("P", 6)  # 2 blocks
    m.fork("P", "C")
    m.add_sequence("X", 1)  # last free block
    before = (m.allocator.state(), {s: (list(t.block_ids), t.num_tokens) for s, t in m.tables.items()})
    with pytest.raises(OutOfBlocks, match=r"asked for 1 block"):
        m.append("C", 1)  # needs a COW copy, none free
    after = (m.allocator.state(), {s: (list(t.block_ids), t.num_tokens) for s, t in m.tables.items()})
    assert after == before
    m.check_integrity()


def test_add_sequence_failure_leaves_no_table():
    m = BlockManager(2, 4)
    with pytest.raises(OutOfBlocks):
        m.add_sequence("big", 9)
    assert "big" not in m.tables and m.allocator.num_free_blocks == 2
    with pytest.raises(ValueError, match="already exists"):
        m.add_sequence("a", 1) and m.add_sequence("a", 1)


def test_free_shared_blocks_only_drop_a_reference():
    m = BlockManager(8, 4)
    m.add_sequence("P", 6)
    m.fork("P", "C")
    assert m.free("P") == []
    assert m.allocator.num_free_blocks == 6
    assert sorted(m.free("C")) == [0, 1]
    assert m.allocator.num_free_blocks == 8
    m.check_integrity()


def test_unknown_sequence_is_named():
    m = BlockManager(2, 4)
    with pytest.raises(KeyError, match="ghost"):
        m.append("ghost", 1)


def test_event_log_and_snapshots_replay_every_step():
    log = EventLog()
    m = BlockManager(6, 4, log=log, record=True)
    m.add_sequence("A", 5)
    m.fork("A", "B")
    m.append("B", 1)
    m.free("A")
    kinds = log.kinds()
    # one event per table operation (the allocator's own allocate/incref/free events are for direct calls)
    assert kinds == ["append", "fork", "cow", "append", "free_seq"]
    assert len(m.snapshots) == len(log) + 1  # one per event plus the start
    for s in m.snapshots:
        s.check_integrity()
    cow = next(e for e in log if e.kind == "cow")
    assert cow.detail == {"src": 1, "dst": 2, "logical_block": 1}
    assert "copy P1 -> P2" in cow.describe()
    last = m.snapshots[-1]
    assert last.tables == {"B": (0, 2)} and last.tokens_in_block[:3] == (4, 0, 2)



def _whole(m):
    return m.allocator.state(), {s: (list(t.block_ids), t.num_tokens) for s, t in m.tables.items()}, len(m.log)


def test_one_name_per_operation_bad_input_changes_nothing():
    """Issue 31 item 2: adopt, append(make_room=) and free(handed_over=) are the only names; each
    still checks what comes from outside and changes nothing when it refuses."""
    m = BlockManager(num_blocks=4, block_size=2)
    m.add_sequence("A", 4)                                    # blocks 0, 1
    before = _whole(m)
    for call, err in [(lambda: m.free("A", handed_over=[0, 0]), ValueError),       # a position twice
                      (lambda: m.free("A", handed_over=[2]), ValueError),          # past the table
                      (lambda: m.free("A", handed_over=range(1, 3)), ValueError),
                      (lambda: m.free("A", handed_over=[0.5]), TypeError),
                      (lambda: m.adopt("B", [2]), KVCacheError),                   # a free block
                      (lambda: m.adopt("B", [0, 0]), ValueError),
                      (lambda: m.adopt("B", [9]), KVCacheError),
                      (lambda: m.append("A", 9, make_room=lambda k: False), OutOfBlocks)]:
        with pytest.raises(err):
            call()
        assert _whole(m) == before


def test_append_asks_for_room_only_when_short():
    m = BlockManager(num_blocks=4, block_size=2)
    m.add_sequence("A", 2)                                    # block 0; 3 free
    asked = []
    m.append("A", 2, make_room=lambda k: asked.append(k) or False)
    assert asked == []                                        # one block needed, three free
    m.add_sequence("B", 4)                                    # blocks 2, 3: none free
    with pytest.raises(OutOfBlocks):
        m.append("A", 2, make_room=lambda k: asked.append(k) or False)
    assert asked == [1]                                       # asked for exactly the block it needed
    freed = []
    assert m.append("A", 2, make_room=lambda k: freed.extend(m.free("B"))) == []  # room made (whatever it returns)
    assert freed == [2, 3] and m.tables["A"].block_ids == [0, 1, 2]


def test_free_hands_over_only_the_positions_named():
    m = BlockManager(num_blocks=6, block_size=2)
    m.add_sequence("A", 6)                                    # blocks 0, 1, 2
    m.allocator.touch([1, 2], "tree")                         # another holder took references on 1, 2
    assert m.free("A", handed_over=range(1, 3)) == [0]        # A drops only block 0's reference
    assert m.allocator.ref_count[:3] == [0, 2, 2] and "A" not in m.tables
    m.add_sequence("B", 4)                                    # blocks 3, 4
    assert m.free("B", handed_over=[0]) == [4]                # a list of positions: block 3 kept
    assert m.allocator.ref_count[3:5] == [1, 0]



def test_free_held_prefix_drops_references_and_refuses_bad_positions():
    """free(held=k): the table's first k blocks (a locked tree path) lose this table's reference in
    the allocator's fast loop; the counts are exact and nothing else changes. A held count past the
    table, or a handed-over position inside the held prefix, is a ValueError, nothing changed."""
    m = BlockManager(num_blocks=6, block_size=2)
    m.add_sequence("A", 6)                                    # blocks 0, 1, 2
    m.allocator.touch([0, 1], "tree")                         # the tree holds blocks 0, 1
    before = _whole(m)
    for call in [lambda: m.free("A", held=4), lambda: m.free("A", held=2, handed_over=range(1, 3)),
                 lambda: m.free("A", held=2, handed_over=[1]), lambda: m.free("A", held=-1)]:
        with pytest.raises(ValueError):
            call()
        assert _whole(m) == before
    assert m.free("A", held=2) == [2]                         # 0, 1 keep the tree's reference; 2 is free
    assert m.allocator.ref_count[:3] == [1, 1, 0]
    m.check_integrity([[0, 1]])                               # ref_count == tree + tables, exactly


def test_adopt_takes_held_blocks_without_checking_them_again():
    m = BlockManager(num_blocks=6, block_size=2)
    m.add_sequence("A", 4)                                    # blocks 0, 1
    t = m.adopt("B", HeldBlocks([0, 1]), extra_tokens=1)      # a match's blocks: in use, checked before
    assert t.block_ids == [0, 1, 2] and type(t.block_ids) is list and m.allocator.ref_count[:3] == [2, 2, 1]
    m.check_integrity()
