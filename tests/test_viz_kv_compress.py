"""Lesson 11's pictures: they fit 850 px, say 'measured', and kept_blocks follows the rules."""
import pytest
import torch

from kvlab.compute.kv_measure import MethodResult, Profile
from kvlab.viz.kv_compress_view import attention_figure, budget_explorer, kept_blocks, tradeoff_figure

MASS = torch.tensor([[0.3, 0.02, 0.02, 0.02, 0.02, 0.02, 0.1, 0.5], [0.2, 0.05, 0.05, 0.05, 0.05, 0.1, 0.2, 0.3]])
P = Profile(MASS, [10.0] * 8, sinks=1, recent=2)


def test_kept_blocks_streaming_keeps_sinks_and_window_h2o_keeps_heavy():
    s = kept_blocks(P, "streaming", budget_tokens=4, sink_tokens=1, block_size=2)
    assert s["kept"] == [0, 1, 6, 7] and s["tokens_kept"] == 0.5
    assert s["mass_kept"] == pytest.approx(float(P.mass[[0, 1, 6, 7]].sum() / P.mass.sum()))
    h = kept_blocks(P, "h2o", budget_tokens=4, sink_tokens=0, block_size=2)
    assert h["kept"] == [0, 1, 6, 7]
    assert kept_blocks(P, "streaming", 100, 1, 2)["kept"] == list(range(8))   # within budget: all
    with pytest.raises(ValueError, match="method must be"):
        kept_blocks(P, "quest", 4, 1, 2)


def test_figures_fit_and_say_measured():
    rows = [MethodResult("full", 100, 1e6, 1e6, 9.0, 1.0), MethodResult("int8", 30, 3e5, 3e5, 9.1, 0.9)]
    for fig in (attention_figure(P), tradeoff_figure(rows)):
        assert fig.layout.width is None or fig.layout.width <= 850
        assert "measured" in fig.layout.title.text


def test_budget_explorer_builds():
    box = budget_explorer(P, block_size=2, budget_tokens=4, sink_tokens=1)
    assert box is not None
