"""Lesson 01's decode stepper: the trace (kvlab.compute.decode_trace) and its picture (kvlab.viz.decode_view).

The trace is checked against generate()'s own counts and against itself (a cached row never
changes); the picture's geometry: every cell inside its axes, no two cells overlapping, every
number inside its cell, the same axes and bar scale in every frame, one legend entry per state.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kvlab.compute.decode_trace import DecodeStep, trace_decode
from kvlab.compute.generate import generate
from kvlab.compute.loader import load_bundled
from kvlab.viz.decode_view import STATES, DecodeView, decode_stepper, decode_view_data, flops_text, token_text

PROMPT, NEW = "The socket module", 5


@pytest.fixture(scope="module")
def run():
    torch.set_num_threads(1)
    model, tok = load_bundled()
    return model, tok, trace_decode(model, tok.encode(PROMPT), NEW)


def test_trace_rows_writes_and_flops_follow_generate(run):
    model, tok, steps = run
    prompt = tok.encode(PROMPT)
    P = len(prompt)
    assert [s.rows for s in steps] == [P + t for t in range(NEW)]
    assert [s.written for s in steps] == [(0, P)] + [(P + t - 1, P + t) for t in range(1, NEW)]
    assert [s.read for s in steps][1:] == [(0, P + t - 1) for t in range(1, NEW)]
    naive = generate(model, prompt, NEW, strategy="naive")
    cached = generate(model, prompt, NEW, strategy="contiguous")
    assert [s.new_token for s in steps] == naive.tokens == cached.tokens
    assert [s.naive_flops for s in steps] == naive.step_flops
    assert [s.cached_flops for s in steps] == cached.step_flops
    assert steps[-1].naive_total == sum(naive.step_flops) and steps[-1].cached_total == sum(cached.step_flops)
    for s in steps:
        s.check_integrity()


def test_a_cached_row_never_changes_and_recomputation_gives_it_again(run):
    _, _, steps = run
    last = steps[-1].k_cache
    for s in steps:
        assert s.k_cache == last[:s.rows]                         # what the cache holds is a prefix of the final cache
        assert max(abs(a - b) for a, b in zip(s.k_naive, s.k_cache)) < 1e-4
        assert s.max_diff < 1e-4
    assert len(set(last)) > 1                                     # a real number per row, not one value everywhere


def test_check_integrity_catches_a_broken_step(run):
    s = run[2][2]
    for bad in (dict(written=(0, s.rows)), dict(written=(s.rows - 2, s.rows)), dict(k_cache=s.k_cache[:-1]),
                dict(cached_flops=s.naive_flops + 1), dict(naive_total=s.naive_flops - 1), dict(max_diff=float("nan"))):
        with pytest.raises(AssertionError):
            dataclasses.replace(s, **bad).check_integrity()


def test_bad_arguments_are_named(run):
    model, tok, _ = run
    with pytest.raises(ValueError, match="new_tokens"):
        trace_decode(model, tok.encode(PROMPT), 0)
    with pytest.raises(ValueError, match="layer 9"):
        trace_decode(model, tok.encode(PROMPT), 2, layer=9)


def _labels(run):
    _, tok, steps = run
    return [tok.decode([i]) for i in (*steps[-1].token_ids, steps[-1].new_token)]


def test_view_data_states_per_frame(run):
    _, _, steps = run
    labels = _labels(run)
    columns, total = len(labels), steps[-1].naive_total
    for s in steps:
        d = decode_view_data(s, labels, columns, total)
        naive = [c["state"] for c in d["cells"] if c["row"] == "naive"]
        cache = [c["state"] for c in d["cells"] if c["row"] == "cache"]
        assert naive.count("recomputed") == s.rows and naive.count("empty") == columns - s.rows
        assert cache.count("written") == (s.prompt_len if s.step == 0 else 1)
        assert cache.count("read") == (0 if s.step == 0 else s.rows - 1)
        assert d["produced"] == s.rows and d["ticks"][s.rows] == token_text(labels[s.rows])
        assert all(t == "" for t in d["ticks"][s.rows + 1:])
    with pytest.raises(ValueError, match="columns"):
        decode_view_data(steps[-1], labels, steps[-1].rows - 1, total)


def test_figure_geometry_is_the_same_in_every_frame_and_numbers_sit_in_their_cells(run):
    _, _, steps = run
    labels = _labels(run)
    view = DecodeView(steps, labels)
    stepper = decode_stepper(steps, run[1], static=True)
    axes = set()
    for i, s in enumerate(steps):
        stepper.go(i)
        fig = stepper.figure()
        lay = fig.layout
        axes.add((tuple(lay.xaxis.range), tuple(lay.yaxis.range), tuple(lay.xaxis2.range), lay.height))
        cells = [sh for sh in lay.shapes if sh.type == "rect"]
        assert len(cells) == 2 * view.columns
        for a in cells:
            assert lay.xaxis.range[0] <= a.x0 < a.x1 <= lay.xaxis.range[1]
            assert min(lay.yaxis.range) <= a.y0 < a.y1 <= max(lay.yaxis.range)
        for a, b in ((a, b) for k, a in enumerate(cells) for b in cells[k + 1:]):
            assert a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0, "two cells overlap"
        numbers = [an for an in lay.annotations if an.xref == "x"]
        assert len(numbers) == 2 * s.rows
        for an in numbers:
            assert any(c.x0 < an.x < c.x1 and c.y0 < an.y < c.y1 for c in cells), f"{an.text} outside its cell"
        bars = [t for t in fig.data if t.type == "bar"]
        assert list(bars[0].x) == [s.naive_total, s.cached_total] and max(bars[0].x) <= lay.xaxis2.range[1]
        assert [t.name for t in fig.data if t.type == "scatter"] == [v[2] for v in STATES.values()]
    assert len(axes) == 1, f"the axes move between frames: {axes}"


def test_stepper_captions_and_the_static_player(run):
    _, _, steps = run
    stepper = decode_stepper(steps, run[1], static=True)
    assert len(stepper) == NEW and stepper.error is None
    assert stepper.caption.startswith("Prefill")
    stepper.go(2)
    # review r2_00_01: positions count from 0 everywhere (as vLLM and SGLang), steps from 1 (the step counter)
    assert "recompute the K and V of all 5 tokens, positions 0-4" in stepper.caption, stepper.caption
    assert "compute only position 4's" in stepper.caption and "read positions 0-3 back" in stepper.caption
    assert "at position 5." in stepper.caption and "token 6" not in stepper.caption, stepper.caption
    html = stepper.flipbook_html()
    assert f'data-frames="{NEW}"' in html and f"step {NEW} / {NEW}" in html


def test_a_broken_step_shows_in_the_stepper(run):
    _, tok, steps = run
    broken = [*steps[:-1], dataclasses.replace(steps[-1], written=(0, steps[-1].rows))]
    stepper = decode_stepper(broken, tok, static=True)
    stepper.go(NEW - 1)
    assert stepper.error and "integrity check failed" in stepper.error


def test_flops_text_and_token_text():
    assert flops_text(12_646_400) == "12.6 MFLOP" and flops_text(999) == "999 FLOP"
    assert token_text("\n") == "↵" and token_text(" the") == " the" and token_text("  ") == "␣␣"
    assert isinstance(DecodeStep, type)


def test_review_r6_the_bar_labels_stand_clear_of_their_bars(run):
    """The review of 79ae8b9 saw "no cache" touch its bar (classroom mode): the bar panel's labels
    stand off the axis, in both modes."""
    import kvlab.viz as viz
    from kvlab.viz.decode_view import decode_figure

    _model, tok, steps = run
    labels = [tok.decode([i]) for i in (*steps[-1].token_ids, steps[-1].new_token)]
    view = DecodeView(steps, labels)
    for classroom in (False, True):
        viz.classroom(classroom)
        try:
            fig = decode_figure(decode_view_data(steps[-1], labels, view.columns, view.total))
        finally:
            viz.classroom(False)
        assert (fig.layout.yaxis2.ticklabelstandoff or 0) >= 6, fig.layout.yaxis2
