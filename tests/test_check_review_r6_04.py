"""The review r6_04_07, lesson 04: one wrong answer accepted (blocks_to_append that checks only
n < 0) and two rejected without the mistake named (translate's bound off by one, a double free
raising KVCacheError instead of DoubleFree). Each must FAIL, and every failing case must name the
slip (the words below), on screen and in the summary."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer


def blocks_to_append_checks_only_n(num_tokens, n, block_size):
    if n < 0:  # the slip: no check on num_tokens < 0 nor block_size < 1
        raise ValueError("n")
    return -(-(num_tokens + n) // block_size) - -(-num_tokens // block_size)


translate_bound_off_by_one = wrong_answer("04", "translate", [  # > where >= is due
    ("pos >= len(block_table) * block_size", "pos > len(block_table) * block_size")])



def _solution_class_with(name: str, old: str, new: str) -> type:
    """The reference class ``name`` of solutions/04_paging.py with ``old`` replaced by ``new``
    (inspect cannot read a class of a module loaded from a path, so the file is read)."""
    src = (Path(__file__).resolve().parents[1] / "solutions" / "04_paging.py").read_text()
    assert old in src, f"the solution changed: {old!r}"
    scope: dict = {}
    exec(compile(src.replace(old, new, 1), f"<wrong 04 {name}>", "exec"), scope)  # noqa: S102 - our own file
    return scope[name]


TinyAllocatorWrongError = _solution_class_with(  # the base class, not DoubleFree
    "TinyAllocator", 'raise DoubleFree(f"block {b} is listed', 'raise KVCacheError(f"block {b} is listed')

WRONG_04 = [
    ("translate: bound pos > len x block_size", "translate", translate_bound_off_by_one,
     "one slot too late"),
    ("blocks_to_append: checks only n < 0", "blocks_to_append", blocks_to_append_checks_only_n,
     "the contract's other checks"),
    ("TinyAllocator: KVCacheError for a double free", "block_allocator", TinyAllocatorWrongError,
     "raise kvlab.DoubleFree"),
]


@pytest.mark.parametrize("mistake,name,answer,words", WRONG_04, ids=[w[1] for w in WRONG_04])
def test_04_review_r6_wrong_answer_is_named_on_screen(mistake, name, answer, words, capsys):
    """What the student reads (verbose output) names the slip, in every failing case and the summary."""
    result = getattr(check, name)(answer)
    printed = capsys.readouterr().out
    assert not result.passed, f"accepted: {mistake}"
    unnamed = [case.label for case in result.failures if words not in case.note]
    assert not unnamed, (unnamed, printed)
    assert words in result.summary and words in printed, printed


def test_04_blocks_to_append_names_each_missing_check():
    """num_tokens = -1 and block_size = 0 are tried, and each case names its own check."""
    result = check.blocks_to_append(blocks_to_append_checks_only_n, verbose=False)
    notes = {case.label: case.note for case in result.failures}
    assert any("num_tokens < 0" in n for n in notes.values()), notes
    assert any("block_size < 1" in n for n in notes.values()), notes


def test_04_animation_legend_lists_only_what_each_frame_draws():
    """Defect 2: the plotly animation listed R1, R2 and R3 in every frame; now, as the stepper,
    a frame's legend shows only the requests holding blocks (step 1: R1; step 16: R2 and R3)."""
    import kvlab
    import kvlab.viz as viz

    m = kvlab.BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.add_sequence("R2", 3)
    m.free("R1")
    m.add_sequence("R3", 9)
    fig = viz.animate_memory_map(m.snapshots, m.log, cols=12, tables=False)

    def shown(k: int) -> set[str]:
        frame = fig.frames[k]
        return {fig.data[i].name for i, t in zip(frame.traces, frame.data)
                if fig.data[i].name in ("R1", "R2", "R3") and t.showlegend is not False}

    assert {t.name for t in fig.data if t.name in ("R1", "R2", "R3") and t.showlegend is not False} == {"R1"}
    assert shown(0) == {"R1"} and shown(1) == {"R1", "R2"} and shown(len(fig.frames) - 1) == {"R2", "R3"}
