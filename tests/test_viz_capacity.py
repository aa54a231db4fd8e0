"""Lesson 02's capacity bar (issue 28, the review of lesson 02): weights that do not fit in the
server's share were drawn filling it exactly, up to its edge, as if they fitted."""
from __future__ import annotations

import pytest

from kvlab.memory.kvspec import GPUS, MODELS
from kvlab.viz.capacity_widget import capacity_figure, capacity_state


def test_weights_past_the_share_are_drawn_past_its_edge():
    state = capacity_state(MODELS["llama-2-70b"], GPUS["a100-80gb"].memory_bytes, 4096, 2)
    assert state["weights"] > state["share"] and state["requests"] == 0
    fig = capacity_figure(state)
    drawn = {t.name: t.x[0] for t in fig.data}
    assert sum(drawn.values()) * 1e9 == pytest.approx(max(state["weights"], state["device_bytes"]))
    assert drawn["weights past the share: they do not fit"] * 1e9 == pytest.approx(
        state["weights"] - state["share"])
    assert fig.layout.xaxis.range[1] * 1e9 >= state["weights"]
    assert [s.x0 for s in fig.layout.shapes] == [state["share"] / 1e9]  # the share's edge, marked and named
    assert "the share ends" in fig.layout.annotations[0].text


def test_weights_that_fit_draw_no_edge():
    state = capacity_state(MODELS["llama-2-7b"], GPUS["a100-80gb"].memory_bytes, 4096, 2)
    fig = capacity_figure(state)
    assert not fig.layout.shapes and "weights past the share: they do not fit" not in {t.name for t in fig.data}
