"""Tests of the kernel access view: read order = block-table order, split-K ranges, figure data."""
from __future__ import annotations

import pytest

pytest.importorskip("plotly")

import kvlab.viz as viz  # noqa: E402
from kvlab import BlockManager  # noqa: E402
from kvlab.viz.palette import HIGHLIGHT  # noqa: E402


def scattered() -> BlockManager:
    """R1 ends up with table [3, 7, 9, 10, 11] (18 tokens) among other sequences."""
    m = BlockManager(12, 4)
    m.add_sequence("X", 12)
    m.add_sequence("R1", 4)
    m.add_sequence("Y", 12)
    m.append("R1", 4)
    m.free("X")
    m.add_sequence("Z", 4)
    for n in (4, 4, 2):
        m.append("R1", n)
    return m


def test_order_is_block_table_order():
    reads = viz.kernel_access_order([3, 7, 1, 5, 9], 18, 4)
    assert [r.physical for r in reads] == [3, 7, 1, 5, 9]
    assert [r.tokens for r in reads] == [4, 4, 4, 4, 2]
    assert [r.iteration for r in reads] == [0, 1, 2, 3, 4]
    kern = viz.kernel_access_order([3, 7, 1, 5, 9], 18, 4, tile_tokens=64)  # the kvlab kernel's tile
    assert {r.iteration for r in kern} == {0} and [r.physical for r in kern] == [3, 7, 1, 5, 9]


def test_split_k_ranges_like_the_kernel():
    reads = viz.kernel_access_order(list(range(10)), 37, 4, num_splits=3)  # 10 tiles -> 4, 4, 2
    by_split = {s: [r.logical for r in reads if r.split == s] for s in range(3)}
    assert by_split == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7], 2: [8, 9]}
    assert reads[-1].tokens == 1
    few = viz.kernel_access_order([5, 6], 5, 4, num_splits=4)  # 2 tiles, 4 programs: two idle
    assert {r.split for r in few} == {0, 1}
    for bad in (dict(num_splits=0), dict(tile_tokens=6), dict(context_len=99)):
        args = dict(block_table=[1, 2], context_len=5, block_size=4) | bad
        with pytest.raises(ValueError):
            viz.kernel_access_order(**args)


def test_figure_data_numbers_reads_and_fades_others():
    m = scattered()
    snap = m.snapshot()
    assert snap.tables["R1"] == (3, 7, 9, 10, 11)
    d = viz.kernel_access_data(snap, "R1", num_splits=2, iteration=1)
    assert d["label"][3].endswith("read 1</b> (s0)") and "read 5" in d["label"][11]
    assert d["arrows"] == [(3, 7, 0), (7, 9, 0), (10, 11, 1)]
    assert d["highlight"] == [7, 11]  # iteration 2: both programs in parallel
    assert d["outline_color"][7] == HIGHLIGHT
    plain = viz.memory_map_data(snap)
    assert d["color"][4] != plain["color"][4] and d["color"][3] == plain["color"][3]  # Y faded, R1 not
    fig = viz.kernel_access_figure(snap, "R1", num_splits=2, iteration=1)
    assert len(fig.layout.shapes) == 3 and len(fig.layout.annotations) == 3
    assert "split 1 reads L4→P11 (2 tok)" in fig.layout.title.subtitle.text
    assert "(simulated)" in fig.layout.title.text
    with pytest.raises(KeyError, match="R9"):
        viz.kernel_access_data(snap, "R9")
    with pytest.raises(ValueError, match="iteration"):
        viz.kernel_access_data(snap, "R1", iteration=5)


def test_stepper_one_frame_per_iteration():
    snap = scattered().snapshot()
    s = viz.kernel_access_stepper(snap, "R1", static=False)
    assert len(s) == 5
    s.go(2)
    assert "L2→P9" in s.caption and s.error is None
    assert s.frame.highlight == (9,)
