"""Review r8 of lesson 06, its pictures: the SharingControl draws copy-on-write's copies and has no
mode bar; the two-run stepper keeps one figure height and two caption lines; the last holder's write
says why nothing is copied; a fork of two blocks "shares both blocks"."""
from __future__ import annotations

from kvlab.memory.block_manager import BlockManager
from kvlab.viz import SharingControl, memory_map_choice


def _run(prompt_len: int) -> BlockManager:
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", prompt_len)
    m.fork("R1", "R2")
    m.fork("R1", "R3")
    for seq in ("R2", "R3", "R1"):
        m.append(seq, 1)
    return m


def test_the_figure_draws_the_copies():
    c = SharingControl(static=True)
    c.set(prompt_len=100)
    assert "3 copy-on-write copies" in c.figure().data[0].x[0]
    c.set(prompt_len=96)
    assert "0 copy-on-write copies" in c.figure().data[0].x[0]
    assert c.plotly_config == {"displayModeBar": False}


def test_both_runs_one_height_and_two_caption_lines():
    choice = memory_map_choice({"10": _run(10), "8": _run(8)}, static=False, cols=12, step_legend=True, tight=True)
    heights = {s.render(f).layout.height for s in choice.choices.values() for f in s.frames}
    assert len(heights) == 1, heights
    assert all(s.caption_lines == 2 for s in choice.choices.values())


def test_last_holder_and_both_blocks_captions():
    frames = memory_map_choice({"10": _run(10), "8": _run(8)}, static=True).choices
    last = frames["10"].frames[-1].caption
    assert "last holder" in last and "1 reference left" in last and "in place" in last
    assert "shares both blocks P0, P1" in frames["8"].frames[1].caption
    assert "shares all 3 blocks" in frames["10"].frames[1].caption
    assert "its own block P3" in frames["10"].frames[4].caption   # a copy never shared: still "its own"
