"""Lesson 01's cost widget (issue 28 review): its context slider went past both models' context
windows (the bundled model's 2,048, SmolLM2-135M's 8,192). With ``CostModel(context_window=...)``
the slider stops at the chosen model's window, the curves end there, and a context set past it
(static mode, the site's grid) is marked so in the sentence."""
from __future__ import annotations

import pytest

from kvlab.viz import CostModel, CostWidget
from kvlab.viz.cost_widget import cost_figure, cost_state


def _models():
    f = lambda c: 1000 + 10 * c  # noqa: E731 - a toy step cost
    return {"small": CostModel(f, context_window=2048), "big": CostModel(f, context_window=8192),
            "open": CostModel(f)}


def test_01_curves_end_at_the_context_window():
    s = cost_state(_models(), "small", 1024)
    assert max(s["xs"]) == 2048 and len(s["xs"]) == len(s["naive"]) == len(s["cached"])
    assert max(cost_state(_models(), "open", 1024)["xs"]) == 32768   # no window given: as before
    assert "context window" not in s["sentence"]


def test_01_context_past_the_window_is_marked():
    s = cost_state(_models(), "small", 4096)
    assert "past small's context window of 2,048 tokens" in s["sentence"], s["sentence"]
    fig = cost_figure(s)
    assert any("context window" in (a.text or "") for a in fig.layout.annotations), fig.layout.annotations


def test_01_slider_stops_at_the_models_window():
    w = CostWidget(_models(), model="small", context=1024, static=False)
    assert max(v for _, v in w._context.options) == 2048
    w.set(model="big")
    assert max(v for _, v in w._context.options) == 8192
    w.set(context=8192)
    w.set(model="small")                       # past the new model's window: moved back to it
    assert w.state["context"] == 2048 and w._context.value == 2048


def test_01_bad_context_window_is_refused():
    with pytest.raises(ValueError, match="context_window"):
        CostModel(lambda c: c, context_window=0)


def test_01_review_r6_another_model_keeps_the_context_length():
    """The review of 79ae8b9 (cell 27): picking the other model in the menu reset the context
    length to 16 (it was 1,024)."""
    w = CostWidget(_models(), model="small", context=1024, static=False)
    w._model.value = "big"                     # what the menu does (not set())
    assert w.state["context"] == 1024 and w._context.value == 1024
    w._context.value = 4096
    w._model.value = "small"                   # past its window: moved back to it, not to 16
    assert w.state["context"] == 2048 and w._context.value == 2048
    assert "1,024" not in w._text.value and "2,048" in w._text.value


def test_01_review_r2_factors_follow_the_model_and_a_measured_length_says_its_measured_time():
    """Review r2_00_01 (cells 27-28): the factors line above the widget stayed on the bundled model
    when the menu chose SmolLM2; at 1,024 tokens the widget gave the fitted line's 23 ms though 26.77 ms
    was measured at exactly that length."""
    f = lambda c: 1000 + 10 * c  # noqa: E731
    models = {"small": CostModel(f, (1.0, 0.02), (0.5, 0.001), measured_from=32, context_window=2048,
                                 measured={1024: (26.77, 2.51)}),
              "big": CostModel(f, context_window=8192)}
    s = cost_state(models, "small", 1024)
    assert s["measured"] and (s["naive_ms"], s["cached_ms"]) == (26.77, 2.51)
    assert "Measured here at this length: 26.77 ms against 2.51 ms a step" in s["sentence"], s["sentence"]
    assert "estimated" not in s["sentence"]
    assert "estimated" in cost_state(models, "small", 512)["sentence"]          # no measurement there: the line
    assert cost_state(models, "small", 64)["factors"].startswith("From 16 to 2,048 tokens (128x)")
    assert cost_state(models, "big", 64)["factors"].startswith("From 16 to 8,192 tokens (512x)")
    w = CostWidget(models, model="small", context=1024, static=False)
    assert "From 16 to 2,048 tokens" in w._text.value
    w._model.value = "big"
    assert "From 16 to 8,192 tokens" in w._text.value and "2,048 tokens" not in w._text.value


def test_01_review_r2_another_model_gets_a_new_slider():
    """Review r2_00_01: after the menu chose SmolLM2 the End key stopped at the old maximum, 2,048
    (the browser's slider keeps the range it was made with for End and Home): a new slider is made."""
    w = CostWidget(_models(), model="small", context=1024, static=False)
    old = w._context
    w._model.value = "big"
    assert w._context is not old and max(v for _, v in w._context.options) == 8192 and w._context.value == 1024
    row = w.widget.children[-3] if len(w.widget.children) > 3 else w.widget.children[0]
    assert w._context in row.children and old not in row.children
    assert "kvlab-context-slider" in w._context._dom_classes
    w._context.value = 4096                     # the new slider drives the widget
    assert w.state["context"] == 4096 and "4,096" in w._text.value
