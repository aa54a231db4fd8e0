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


def test_no_legend_entry_for_a_segment_too_thin_to_see():
    """Issue 28, the review of lesson 02 (cell 21): on 2 x H200 the "free in the share" part is
    0.16% of the bar, about one pixel, yet the legend listed it. A part under 1% of the axis keeps
    its hover but no legend entry; every listed part is at least 1% of the bar."""
    from kvlab import GPUS

    state = capacity_state(MODELS["llama-2-70b"], 2 * GPUS["h200"].memory_bytes, 4096, 2)
    fig = capacity_figure(state)
    span = fig.layout.xaxis.range[1]
    listed = [t for t in fig.data if t.showlegend is not False]
    assert listed and all(t.x[0] / span >= 0.01 for t in listed), [(t.name, t.x[0] / span) for t in listed]
    thin = [t for t in fig.data if t.showlegend is False]
    assert [t.name for t in thin] == ["free in the share (less than one request)"]  # still drawn, hover names it


def test_weights_in_the_number_format_the_device_runs():
    """The review of lesson 02: the widget priced SmolLM2's weights in fp16 on this machine's RAM,
    where kvlab runs it in fp32 (lesson 02 says so beside it). A device can carry its own weight
    bytes; the legend and the verdict say which format."""
    from kvlab.viz.capacity_widget import CapacityWidget

    ram = "this machine's RAM"
    w = CapacityWidget(models={"smollm2-135m": MODELS["smollm2-135m"]}, devices={ram: 16 * 2**30, "h200": GPUS["h200"].memory_bytes},
                       model="smollm2-135m", device=ram, weight_bytes={ram: 4}, static=True)
    assert w.state["weights"] == int(MODELS["smollm2-135m"].params_b * 1e9 * 4)
    names = [t.name for t in capacity_figure(w.state).data if t.showlegend is not False]
    assert "weights (fp32)" in names, names
    w.set(device="h200")
    assert w.state["weights"] == int(MODELS["smollm2-135m"].params_b * 1e9 * 2)
    assert "weights (fp16)" in [t.name for t in capacity_figure(w.state).data]


def test_a_ram_device_never_sends_the_model_to_more_gpus():
    """Review r12 of lesson 02: on this machine's RAM the widget said the model "splits over several GPUs"."""
    from kvlab.viz.capacity_widget import CapacityWidget

    ram = "this machine's RAM"
    w = CapacityWidget(devices={ram: 16 * 2**30, "h200": GPUS["h200"].memory_bytes}, model="llama-2-70b", device=ram,
                       weight_bytes={ram: 4}, host_devices=[ram], static=True)
    assert w.state["requests"] == 0 and "GPU" not in w.state["verdict"], w.state["verdict"]
    assert "this machine cannot hold the model" in w.state["verdict"]
    w.set(device="h200")
    assert "several GPUs" in w.state["verdict"]


def test_no_request_fits_is_said_plainly():
    """Review r12: "0 requests fit ... (0 tokens in all)" when the weights fit but not one request does."""
    from kvlab.viz.capacity_widget import CapacityWidget

    w = CapacityWidget(model="llama-2-7b", device="a100-40gb", tokens=131072, static=True)
    s = w.state
    assert s["requests"] == 0 and s["weights"] < s["share"]
    assert "not even one request fits" in s["verdict"] and "0 tokens in all" not in s["verdict"], s["verdict"]
    assert "No request fits." in w._html() and "0 requests" not in w._html()


def test_the_legend_is_two_entries_a_row_whatever_is_listed():
    """Review r12: the legend's height changed with the menus (a third row when a long name wrapped),
    and the bar moved. Two entries a row, at most four listed: never more than two rows."""
    for spec, gpu in ((MODELS["llama-2-7b"], "a100-80gb"), (MODELS["llama-2-70b"], "a100-80gb")):
        fig = capacity_figure(capacity_state(spec, GPUS[gpu].memory_bytes, 4096, 2))
        assert fig.layout.legend.entrywidth == 0.5 and fig.layout.legend.entrywidthmode == "fraction"
        assert sum(t.showlegend is not False for t in fig.data) <= 4
