"""Lesson 09 appendix: the scenario menu (kvlab.viz.scenario_control) and the range bars of
kvlab.sim.plots.compare_bars (a range of no width is drawn as a visible band, labelled).

Geometry: one y scale for every scenario, every bar and its label under the axis top, one bar
trace per series; the range bands all visible (no zero height) and centred on their values.
"""
from __future__ import annotations

import pytest

from kvlab.sim.plots import spread_bands
from kvlab.viz.scenario_control import ScenarioControl

SYSTEMS = ("orca-max", "orca-oracle", "vllm")
NAMES = {"orca-max": "Orca (Max)", "orca-oracle": "Orca (Oracle)", "vllm": "vLLM"}
SCENARIOS = {
    "lesson 09's setting": {"orca-max": 7.0, "orca-oracle": 13.6, "vllm": 30.1},
    "step time x0.8": {"orca-max": 7.0, "orca-oracle": 13.62, "vllm": 26.0},
    "step time x1.2": {"orca-max": 7.0, "orca-oracle": 13.6, "vllm": 36.0},
}
PUBLISHED = {"orca-max": 7.0, "orca-oracle": 13.62, "vllm": 30.42}


def control(**kw):
    return ScenarioControl(SCENARIOS, PUBLISHED, names=NAMES, baseline="lesson 09's setting", static=True, **kw)


def test_every_scenario_on_one_scale_with_its_bars_under_the_top():
    c = control()
    ranges = set()
    for label in SCENARIOS:
        c.set(scenario=label)
        fig = c.figure()
        ranges.add(tuple(fig.layout.yaxis.range))
        bars = [t for t in fig.data if t.type == "bar"]
        assert len(bars) == (2 if label == "lesson 09's setting" else 3)
        assert [list(b.x) for b in bars] == [[NAMES[p] for p in SYSTEMS]] * len(bars)
        for b in bars:
            assert all(0 < y < fig.layout.yaxis.range[1] / 1.1 for y in b.y), "a bar (or its label) reaches the top"
        assert list(bars[-1].y) == [SCENARIOS[label][p] for p in SYSTEMS]
    assert len(ranges) == 1, f"the y axis moves between scenarios: {ranges}"


def test_caption_names_what_moved_and_the_verdict():
    c = control()
    assert c.caption().startswith("lesson 09's setting (simulated): 3 of 3 systems within 15%")
    c.set(scenario="step time x1.2")
    assert c.result["moved"]["vllm"] == pytest.approx(36.0 / 30.1 - 1)
    assert c.result["within"] == {"orca-max": True, "orca-oracle": True, "vllm": False}
    cap = c.caption()
    assert "vLLM 36.0 (+20%, outside 15% of the published 30.4)" in cap
    assert cap.endswith("Under 1%: Orca (Max), Orca (Oracle).")
    c.set(scenario="step time x0.8")
    assert "vLLM 26.0 (-14%, within 15% of the published 30.4)" in c.caption()


def test_bad_input_is_named_and_changes_nothing():
    c = control()
    c.set(scenario="step time x0.8")
    with pytest.raises(ValueError, match="'x9'"):
        c.set(scenario="x9")
    assert c.scenario == "step time x0.8" and c.result["values"]["vllm"] == 26.0
    with pytest.raises(ValueError, match="baseline 'nope'"):
        ScenarioControl(SCENARIOS, PUBLISHED, baseline="nope", static=True)
    with pytest.raises(ValueError, match="systems"):
        ScenarioControl({**SCENARIOS, "odd": {"vllm": 1.0}}, PUBLISHED, static=True)


def test_the_static_site_gets_every_scenario():
    assert control().site_grid() == {"scenario": list(SCENARIOS)}


def test_a_range_of_no_width_is_a_visible_band_at_its_value():
    base, height, text = spread_bands([(7.0, 7.0), (13.6, 13.62), (26.0, 36.0)], top=40)
    assert all(h > 0 for h in height), "a range bar of zero height draws nothing"
    assert base[0] + height[0] / 2 == pytest.approx(7.0) and text[0] == "7.0<br>no change"
    assert base[1] + height[1] / 2 == pytest.approx(13.61) and text[1] == "13.6<br>no change"   # agree to 0.1
    assert (base[2], height[2], text[2]) == (26.0, 10.0, "26.0-36.0")
    assert spread_bands([(2.0, 1.0)], scale=100, top=400) == ([100.0], [100.0], ["100.0-200.0"])


def test_compare_bars_draws_a_range_of_one_value():
    """Regression (issue 28, the appendix's Fig. 13 ranges): Orca's step-time range is one value
    (memory holds it), and its floating bar had height 0: drawn as nothing, yet in the legend."""
    from types import SimpleNamespace as NS

    from kvlab.sim.plots import compare_bars

    rows = [NS(label="Orca (Max) = orca-max", published=7.0, simulated=7.0, interval=None),
            NS(label="vLLM = vllm", published=30.42, simulated=30.1, interval=None)]
    fig = compare_bars(NS(rows=rows, name="Fig. 13a", source="vLLM paper"), "mean batched requests",
                       spread=[(7.0, 7.0), (26.0, 36.0)], spread_name="step time -20% to +20%")
    (rng,) = [t for t in fig.data if t.name == "step time -20% to +20%"]
    assert all(h > 0 for h in rng.y), f"a range bar of height {list(rng.y)}"
    assert rng.base[0] < 7.0 < rng.base[0] + rng.y[0] and rng.text[0] == "7.0<br>no change"


def test_the_static_site_player_holds_every_scenario_and_leaves_the_menu_as_it_was():
    c = control()
    c.set(scenario="step time x1.2")
    block = c._explore()                       # what KVLAB_STATIC=frames shows: every choice, precomputed
    assert f'data-states="{len(SCENARIOS)}"' in block and "precomputed at build time" in block
    assert all(label.replace("'", "&#x27;") in block or label in block for label in SCENARIOS)
    assert c.scenario == "step time x1.2" and c.result["values"]["vllm"] == 36.0
