"""Lesson 02's capacity bar (issue 28, the review of lesson 02): weights that do not fit in the
server's share were drawn filling it exactly, up to its edge, as if they fitted."""
from __future__ import annotations

import re

import pytest

from kvlab.memory.kvspec import GPUS, MODELS
from kvlab.viz.capacity_widget import capacity_figure, capacity_state


def test_weights_past_the_share_are_drawn_past_its_edge():
    state = capacity_state(MODELS["llama-2-70b"], GPUS["a100-80gb"].memory_bytes, 4096, 2, device="a100-80gb")
    assert state["weights"] > state["share"] and state["requests"] == 0
    fig = capacity_figure(state)
    drawn = {t.name: t.x[0] for t in fig.data}
    assert sum(drawn.values()) * 1e9 == pytest.approx(max(state["weights"], state["device_bytes"]))
    past_share = next(v for k, v in drawn.items() if k.startswith("weights past the share: "))
    assert (past_share + drawn["weights past the device's end"]) \
        * 1e9 == pytest.approx(state["weights"] - state["share"])
    assert fig.layout.xaxis.range[1] * 1e9 >= state["weights"]
    assert [s.x0 for s in fig.layout.shapes] == [state["share"] / 1e9, state["device_bytes"] / 1e9]  # both edges
    assert "the share ends" in fig.layout.annotations[0].text


def test_weights_that_fit_draw_no_edge():
    state = capacity_state(MODELS["llama-2-7b"], GPUS["a100-80gb"].memory_bytes, 4096, 2)
    fig = capacity_figure(state)
    assert not fig.layout.shapes and not any(t.name.startswith("weights past the share") for t in fig.data)


def test_every_part_drawn_is_in_the_legend_thin_ones_with_their_size():
    """Review r8_02 (cell 19): on 2 x H200 the "free in the share" part is 0.16% of the bar and had
    no legend entry (issue 28 had dropped entries under 1%), so the light grey the text promises was
    nowhere to be found. Every part drawn is listed; the free part names its size (a sliver may be a
    pixel wide), and weights past the share under 5% of the bar get an arrow with their size."""
    from kvlab import GPUS

    fig = capacity_figure(capacity_state(MODELS["llama-2-70b"], 2 * GPUS["h200"].memory_bytes, 4096, 2))
    assert all(t.showlegend is not False for t in fig.data), [(t.name, t.showlegend) for t in fig.data]
    free = [t.name for t in fig.data if t.name.startswith("free in the share")]
    assert free and re.fullmatch(r"free in the share: 0\.\d\d GB", free[0]), free
    one = capacity_figure(capacity_state(MODELS["llama-2-70b"], GPUS["h200"].memory_bytes, 4096, 2, device="H200 141GB"))
    texts = [a.text for a in one.layout.annotations]
    assert "2.3 GB" in texts and any(a.showarrow for a in one.layout.annotations), texts
    assert "weights past the share: 2.3 GB" in [t.name for t in one.data]


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
    w = CapacityWidget(devices={ram: 16 * 2**30, "a100-80gb": GPUS["a100-80gb"].memory_bytes}, model="llama-2-70b",
                       device=ram, weight_bytes={ram: 4}, host_devices=[ram], static=True)
    assert w.state["requests"] == 0 and "GPU" not in w.state["verdict"], w.state["verdict"]
    assert "this machine cannot hold the model" in w.state["verdict"]
    w.set(device="a100-80gb")  # (an H200 holds the weights: review r2_02_08 has it raise the share instead)
    assert "several GPUs" in w.state["verdict"]


def test_no_request_fits_is_said_plainly():
    """Review r12: "0 requests fit ... (0 tokens in all)" when the weights fit but not one request does."""
    from kvlab.viz.capacity_widget import CapacityWidget

    w = CapacityWidget(model="llama-2-7b", device="a100-40gb", tokens=131072, static=True, context_windows={})
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


# ------------------------------------------------------------------ review r2_02_08 (cell 19)
def _widget(**kw):
    from kvlab.viz.capacity_widget import CapacityWidget

    return CapacityWidget(static=True, context_windows={}, **kw)   # the arithmetic alone, no context window


def test_one_request_is_singular():
    """The review: "1 request fit." and the legend "KV cache of 1 requests"."""
    w = _widget(model="llama-2-7b", device="a100-40gb", tokens=32768)
    assert w.state["requests"] == 1
    assert "1 request fits." in w._html() and "1 request of 32,768 tokens fits at once" in w.state["verdict"], w._html()
    names = [t.name for t in capacity_figure(w.state).data]
    assert "KV cache of 1 request" in names, names


def test_one_byte_is_singular():
    """The review: "x 1 bytes" in the formula line for fp8."""
    w = _widget(model="llama-2-7b", device="a100-40gb", dtype_bytes=1)
    assert "x 1 byte =" in w.state["formula"] and "1 bytes" not in w.state["formula"], w.state["formula"]
    w.set(dtype_bytes=2)
    assert "x 2 bytes =" in w.state["formula"]


@pytest.mark.parametrize("model, device, share, at_least", [("llama-2-13b", "a100-40gb", 0.5, 61),
                                                             ("llama-2-70b", "h200", 0.9, 92)])
def test_weights_that_fit_the_card_but_not_the_share_ask_for_a_larger_share(model, device, share, at_least):
    """The review: Llama-2 13B on an A100 40GB at a 50% share said "a server splits this model over
    several GPUs", though the card holds the model: only the share is too small."""
    w = _widget(model=model, device=device, utilization=share, tokens=16384)
    s = w.state
    assert s["weights"] > s["share"] and s["weights"] < s["device_bytes"]
    assert "several GPUs" not in s["verdict"] and f"raise the share to at least {at_least}%" in s["verdict"], s["verdict"]
    assert int(s["device_bytes"] * at_least / 100) > s["weights"] >= int(s["device_bytes"] * (at_least - 1) / 100)
    w.set(utilization=1.0)
    assert w.state["weights"] < w.state["share"]


def test_weights_past_the_card_mark_the_cards_end():
    """The review (cell 19): Llama-2 70B on an A100 40GB ran the bar to the weights' 138 GB with the
    card's 42.9 GB not marked, and the 10% outside the share hatched as "weights past the share": the
    title and the bar disagreed. The card's end is a line of its own, named; the weights past it are a
    part of their own."""
    state = capacity_state(MODELS["llama-2-70b"], GPUS["a100-40gb"].memory_bytes, 4096, 2, device="A100 40GB")  # as the widget names it
    assert state["weights"] > state["device_bytes"]
    fig = capacity_figure(state)
    drawn = {t.name: t.x[0] * 1e9 for t in fig.data}
    assert sum(drawn.values()) == pytest.approx(state["weights"])
    past_share = next(v for k, v in drawn.items() if k.startswith("weights past the share"))
    past_card = next(v for k, v in drawn.items() if k.startswith("weights past the device's end"))
    assert past_share == pytest.approx(state["device_bytes"] - state["share"])
    assert past_card == pytest.approx(state["weights"] - state["device_bytes"])
    assert sorted(s.x0 * 1e9 for s in fig.layout.shapes) == pytest.approx([state["share"], state["device_bytes"]])
    texts = " | ".join(a.text for a in fig.layout.annotations)
    assert "the share ends: 38.7 GB" in texts and "the A100 40GB ends: 42.9 GB" in texts, texts
    assert "does not fit on the A100 40GB" in state["verdict"] or "more than the A100 40GB" in state["verdict"], \
        state["verdict"]


# ------------------------------------------------------------------ review r4_01_02 (lesson 02, cell 19)
def test_the_tokens_slider_stops_at_the_models_context_window():
    """Review r4_01_02: the tokens slider went to 131,072 for every model, and the widget priced a
    131,072-token Llama-2 7B request (window 4,096) without a word. The slider stops at the model's
    window, the model menu names it, and another model renews the slider at its own window."""
    from kvlab.memory.kvspec import CONTEXT_WINDOWS
    from kvlab.viz.capacity_widget import CapacityWidget

    w = CapacityWidget(model="llama-3-8b", device="h200", tokens=8192, static=False)
    assert [t for _, t in w._controls["tokens"].options][-1] == 8192 == CONTEXT_WINDOWS["llama-3-8b"]
    assert "Llama-2 7B (32 layers, 32 KV heads, up to 4,096 tokens)" in [n for n, _ in w._controls["model"].options]
    kids = w.widget.children
    w._controls["model"].value = "opt-13b"           # window 2,048: the chosen 8,192 is past it
    slider = w._controls["tokens"]
    assert w.widget.children == kids, "renewing the slider re-rendered the whole widget (its sentence and bar)"
    assert any(slider in getattr(k, "children", ()) for k in kids) and [t for _, t in slider.options][-1] == 2048
    assert w.state["tokens"] == slider.value == 2048 and w.state["requests"] > 0
    w._controls["model"].value = "smollm2-135m"      # a longer window: the length asked for (8,192) comes back
    assert [t for _, t in w._controls["tokens"].options][-1] == 8192 and w.state["tokens"] == 8192  # review r8_02
    w._controls["model"].value = "opt-13b"
    w._controls["tokens"].value = 1024               # a length asked for within the window: kept after it
    w._controls["model"].value = "llama-2-7b"
    assert w.state["tokens"] == 1024
    w.set(model="llama-2-7b", tokens=4096)
    assert w.state["tokens"] == 4096 and w.state["model"] == "llama-2-7b"
    live = CapacityWidget(model="llama-2-7b", device="h200", tokens=131072, static=False)   # started past it
    assert live.state["tokens"] == 4096 and "context window" not in live.state["verdict"]


def test_a_request_past_the_context_window_fits_nowhere():
    """The arithmetic past the window (static mode, set() or the site's grid): no request is said to fit."""
    from kvlab.viz.capacity_widget import CapacityWidget

    w = CapacityWidget(model="llama-2-7b", device="h200", tokens=131072, static=True)
    s = w.state
    assert s["requests"] == 0 and s["kv_used"] == 0 and s["context_window"] == 4096
    assert "at most 4,096 tokens (its context window)" in s["verdict"] and "No request fits." in w._html()
    w.set(tokens=4096)
    assert w.state["requests"] > 0 and "context window" not in w.state["verdict"]
    assert capacity_state(MODELS["llama-2-7b"], GPUS["h200"].memory_bytes, 131072, 2)["requests"] > 0  # no window given


def test_every_preset_has_its_context_window_and_lesson_02s_table_marks_the_short_ones():
    """Lesson 02's size table prices every model at 4,096 tokens; a model whose window is shorter
    (OPT-13B and Falcon-7B: 2,048) is marked there, so the table never shows an impossible request
    as one (review r4 of 02)."""
    import json
    from pathlib import Path

    from kvlab.memory.kvspec import CONTEXT_WINDOWS, MODELS

    assert set(CONTEXT_WINDOWS) == set(MODELS)
    nb = json.loads(next((Path(__file__).parents[1] / "notebooks").glob("02_*.ipynb")).read_text())
    out = next("".join(o["text"]) for c in nb["cells"] if c["cell_type"] == "code" and "CONTEXT_WINDOWS" in "".join(c["source"])
               for o in c["outputs"] if "text" in o)
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in MODELS}
    for name, row in rows.items():
        assert row.rstrip().endswith("*") == (CONTEXT_WINDOWS[name] < 4096), row
    assert "opt-13b and falcon-7b take at most 2,048 tokens" in out


def test_a_part_under_a_pixel_of_the_bar_is_neither_drawn_nor_listed():
    """Review r9 of 02: the legend listed "free in the share: 0.00 GB" and 0.27 GB of weights on a 301 GB
    bar, parts no one can see. A part under 1/1000 of the bar (a pixel of ~800) is left out of both."""
    from kvlab.memory.kvspec import GPUS, MODELS
    from kvlab.viz.capacity_widget import SLIVER, capacity_figure, capacity_state

    huge = capacity_state(MODELS["llama-2-70b"], 10**15, 4096, 2, device="a100-40gb")
    names = [t.name for t in capacity_figure(huge).data]
    assert huge["weights"] < 10**15 * SLIVER and not any(n.startswith("weights") for n in names), names
    fits = capacity_state(MODELS["llama-2-70b"], GPUS["a100-40gb"].memory_bytes, 4096, 2, device="a100-40gb")
    drawn = capacity_figure(fits).data
    span = max(fits["device_bytes"], fits["weights"])
    assert drawn and all(t.x[0] * 1e9 >= span * SLIVER for t in drawn)
