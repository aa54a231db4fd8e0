"""The controls of lessons 00-02 (issue 21 item 2): each moves the parameter its lesson is about and
the numbers and picture follow, in well under a second. Callbacks are driven by setting the
ipywidgets' values, as a click does; no browser."""
from __future__ import annotations


import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
import ipywidgets  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab import translate  # noqa: E402
from kvlab.memory.kvspec import GPUS, MODELS  # noqa: E402


def _spec(out) -> dict:
    return out.outputs[0]["data"]["application/vnd.plotly.v1+json"]


# ------------------------------------------------------------------ lesson 00: the thesis
def test_thesis_shared_prefix_reuses_r1s_blocks_and_the_table_points_at_them():
    w = viz.ThesisWidget(static=False)
    s = w.state
    assert (s["shared"], s["table"], s["prefix_len"], s["computed"]) == (True, "R2", 12, 4)
    assert s["block_table"][:3] == s["shared_blocks"] and len(s["shared_blocks"]) == 3
    assert s["hit"] and s["miss"] and not (s["hit"] & s["miss"])
    assert "Physical layer" in w._text.value and "Logical layer" not in w._text.value   # the picture shown's sentence
    w._view.value = "the radix tree"
    assert "found 12 in the radix tree" in w._text.value and "<svg" in w._tree.value
    green = w._tree.value.count("#2ca02c")  # the hit node (and edge) green, beside the legend's swatch
    w._shared.value = False  # the checkbox: R2 gets another system prompt
    s = w.state
    assert s["prefix_len"] == 0 and s["computed"] == 16 and s["shared_blocks"] == [] and not s["hit"]
    assert not set(s["block_table"]) & set(viz.thesis_state(False, "R1")["block_table"])
    assert "matches none of them" in w._text.value and w._tree.value.count("#2ca02c") < green


@pytest.mark.parametrize("pos", [0, 5, 11, 12, 15])
def test_thesis_position_is_translated_through_the_chosen_table(pos):
    w = viz.ThesisWidget(static=False)
    w._pos.value = pos
    s = w.state
    t = translate(s["block_table"], pos, 4)
    assert (s["chain"]["physical_block"], s["chain"]["offset"]) == (t.physical_block, t.offset)
    assert f"P{t.physical_block}" in _spec(w._fig)["layout"]["title"]["subtitle"]["text"]
    shared = t.physical_block in s["shared_blocks"]
    assert shared == (pos < 12)  # the 12-token system prompt: R1's blocks, read by R2
    assert ("reads the K and V that R1" in s["position_sentence"]) == shared


def test_thesis_table_menu_switches_tables_and_clamps_the_position():
    w = viz.ThesisWidget(static=False)
    w._table.value = "notes"
    assert w.state["block_table"] == [3, 7, 1, 5, 9] and w._pos.max == 19
    w._pos.value = 19
    w._table.value = "R1"  # 16 tokens: the slider shrinks and the position follows
    assert w._pos.max == 15 and w.state["pos"] == 15 and w._pos.value == 15
    labels = [label for label, _ in w._table.options]
    # "block table of" + "R2 (from the run)": short enough for classroom mode's menu (review r12: cut there)
    assert "block table" in w._table.description and all("from the run" in lab or "example" in lab for lab in labels)
    assert max(len(w._table.description) + len(lab) for lab in labels) <= 52, labels
    with pytest.raises(ValueError, match="table must be one of"):
        viz.thesis_state(table="R3")


def _shown(box, widget) -> bool:
    """Whether ``widget`` is in ``box`` (or in one of its nested boxes)."""
    kids = getattr(box, "children", ())
    return any(k is widget or _shown(k, widget) for k in kids)


@pytest.mark.parametrize("classroom", [False, True])
def test_thesis_position_slider_after_a_table_change_is_made_with_the_new_maximum(classroom):
    """Issue 28 review of lesson 00: after the table menu went from R2's table (16 tokens) to the
    notes' (20), End on the position slider stopped at 15. The browser's slider (noUiSlider, in
    ipywidgets 8) keeps the range it was CREATED with for its End and Home keys; setting ``max`` on
    the live slider does not move them (lesson 04's fix, tests/test_viz_translate.py). So the
    widget shows a new slider made with the new maximum, in the old one's place."""
    viz.classroom(classroom)
    try:
        w = viz.ThesisWidget(static=False)
    finally:
        viz.classroom(False)
    old = w._pos
    w._table.value = "notes"
    assert w._pos is not old and _shown(w.widget, w._pos) and not _shown(w.widget, old)
    assert (w._pos.min, w._pos.max, w._pos.value) == (0, 19, 5)
    assert "kvlab-pos-slider" in w._pos._dom_classes and w._pos.description == old.description
    w._pos.value = 19  # the new slider drives the widget
    assert w.state["pos"] == 19 and w.state["chain"]["physical_block"] == 9
    same = w._pos
    w._shared.value = False  # no change of range: the same slider stays
    assert w._pos is same
    w._table.value = "R1"  # back to 16 tokens: a new slider again, the position clamped
    assert w._pos is not same and (w._pos.max, w._pos.value, w.state["pos"]) == (15, 15, 15)


def test_thesis_in_classroom_mode_shows_one_picture_under_the_controls():
    """Issue 28 [5]: on a projector the widget was 1,234 px tall: a teacher moving the slider
    could not see the translation, nor the tree when ticking the box. In classroom mode a
    switch shows one picture at a time, right under the controls, the sentences after it."""
    viz.classroom(True)
    try:
        w = viz.ThesisWidget(static=False)
    finally:
        viz.classroom(False)
    kids = list(w.widget.children)
    assert kids.index(w._fig) < kids.index(w._text) and kids.index(w._tree) < kids.index(w._text)
    assert w._fig.layout.display is None and w._tree.layout.display == "none"
    w._view.value = "the radix tree"
    assert w._fig.layout.display == "none" and w._tree.layout.display is None
    w._shared.value = False  # the tree still follows the checkbox
    assert "matches none of them" in w._text.value
    normal = viz.ThesisWidget(static=False)  # at 1500x1000 too (both pictures were 860 px): one at a time
    kids = list(normal.widget.children)
    assert kids.index(normal._fig) < kids.index(normal._text) and normal._tree.layout.display == "none"


def test_thesis_static_mode_has_the_same_state():
    w = viz.ThesisWidget(static=True)
    assert w.widget is None
    w.set(shared=False, pos=13)
    assert w.state["prefix_len"] == 0 and w.state["pos"] == 13
    with pytest.raises(TypeError):
        w.set(position=3)


# ------------------------------------------------------------------ lesson 01: the cost of a step
def _bundled_costs():
    from kvlab.compute.loader import load_bundled

    model, _ = load_bundled()
    return model, {"bundled": viz.CostModel(model.flops_per_token, (5.0, 0.02), (3.0, 0.001))}


def test_cost_widget_context_slider_recomputes_both_paths():
    model, models = _bundled_costs()
    w = viz.CostWidget(models, context=1024, static=False)
    w._context.value = 4096
    s = w.state
    assert s["context"] == 4096
    assert s["cached_flops"] == model.flops_per_token(4096)
    assert s["naive_flops"] == sum(model.flops_per_token(i) for i in range(1, 4097))
    assert s["ratio"] == s["naive_flops"] / s["cached_flops"] > 1000
    assert s["naive_ms"] == pytest.approx(5.0 + 0.02 * 4096) and "estimated" in s["sentence"]
    assert "4,096 tokens" in w._text.value


def test_cost_figure_is_log_log_so_the_cached_line_is_visible():
    """Issue 21 [6]: on a linear FLOPs axis the cached line lay flat on zero."""
    _model, models = _bundled_costs()
    w = viz.CostWidget(models, static=False)
    lay = _spec(w._out)["layout"]
    assert lay["xaxis"]["type"] == "log" and lay["yaxis"]["type"] == "log"
    s = w.state
    assert max(s["naive"]) / min(s["cached"]) > 100  # spans more than 100x: the rubric wants a log axis
    w2 = viz.CostWidget({**models, "no fit": viz.CostModel(lambda c: 10 + c)}, model="no fit", static=False)
    assert w2.state["naive_ms"] is None and "estimated" not in w2.state["sentence"]
    w2._model.value = "bundled"
    assert w2.state["model"] == "bundled"
    with pytest.raises(ValueError, match="context must be"):
        viz.cost_state(models, "bundled", 0)


def test_cost_estimate_never_extrapolates_below_the_first_timed_context():
    """Issue 28 [7]: lesson 01's widget printed "about -2 ms against 1.2 ms per step" at 16 tokens:
    a fitted line with a negative intercept used below the shortest context it was fitted to."""
    model, _ = _bundled_costs()
    m = viz.CostModel(model.flops_per_token, (-2.5, 0.03), (0.4, 0.001), measured_from=32)
    low = viz.cost_state({"m": m}, "m", 16)
    assert low["naive_ms"] is None and low["cached_ms"] is None
    assert "-" not in low["sentence"].split("less work.")[1] and "32 tokens" in low["sentence"]
    at = viz.cost_state({"m": m}, "m", 64)
    assert at["naive_ms"] == pytest.approx(-2.5 + 0.03 * 64) and "estimated" in at["sentence"]
    with pytest.raises(ValueError, match="measured_from"):
        viz.CostModel(model.flops_per_token, (1.0, 0.1), measured_from=0)


def test_cost_figure_keeps_its_value_labels_inside_the_plot():
    """Issue 28 [6]: at 16 tokens the marked value's label ran off the plot's left edge ("LOPs"),
    and at 32,768 the top label off its top edge: labels point into the plot, the axis has room."""
    _model, models = _bundled_costs()
    for context, side in ((16, "right"), (32768, "left")):
        fig = viz.cost_figure(viz.cost_state(models, "bundled", context))
        labels = [t for t in fig.data if t.mode == "markers+text"]
        assert labels and all(t.textposition.endswith(side) for t in labels), [t.textposition for t in labels]
        lo, hi = fig.layout.yaxis.range  # log10 units: half a decade of room beyond both curves
        s = viz.cost_state(models, "bundled", context)
        import math
        assert lo <= math.log10(min(s["cached"])) - 0.5 and hi >= math.log10(max(s["naive"])) + 0.5


def test_cost_figure_labels_both_ends_and_the_sentence_carries_the_models_note():
    """Issue 28 review: no x tick at 32,768 (the slider's last value), and the second model's long menu
    label ("SmolLM2-135M (FLOPs only: ...)") was read inside the sentence: a short name, the note apart."""
    model, models = _bundled_costs()
    fig = viz.cost_figure(viz.cost_state(models, "bundled", 1024))
    assert 32768 in list(fig.layout.xaxis.tickvals) and "32,768" in list(fig.layout.xaxis.ticktext)
    m = {"SmolLM2-135M": viz.CostModel(model.flops_per_token, note="FLOPs only: timed at positions 39-42.")}
    s = viz.cost_state(m, "SmolLM2-135M", 1024)["sentence"]
    assert "(SmolLM2-135M):" in s and s.endswith("FLOPs only: timed at positions 39-42.")


# ------------------------------------------------------------------ lesson 02: what fits
def test_capacity_widget_menus_recompute_bytes_and_requests():
    w = viz.CapacityWidget(model="llama-2-70b", device="h200", static=False)
    assert w.state["requests"] == 0 and "do not fit" in w.state["verdict"]  # 138 GB of weights
    w._controls["model"].value = "llama-3-8b"
    s = w.state
    spec, gpu = MODELS["llama-3-8b"], GPUS["h200"]
    budget = int(gpu.memory_bytes * 0.9) - int(spec.params_b * 1e9 * 2)
    assert s["bytes_per_token"] == spec.bytes_per_token == 131072
    assert s["requests"] == budget // spec.kv_bytes(4096) and s["requests"] > 0
    w._controls["dtype_bytes"].value = 1  # fp8 KV: half the bytes, about twice the requests
    assert w.state["bytes_per_token"] == 65536 and w.state["requests"] == budget // (65536 * 4096)
    w._controls["tokens"].value = 8192   # Llama-3 8B's context window: the slider's last stop
    assert w.state["requests"] == budget // (65536 * 8192)
    w._controls["utilization"].value = 1.0
    assert w.state["share"] == gpu.memory_bytes
    w._controls["device"].value = "a100-40gb"
    assert w.state["device_bytes"] == GPUS["a100-40gb"].memory_bytes
    names = [label for label, _ in w._controls["model"].options]
    assert "Llama-2 70B (80 layers, 8 KV heads, up to 4,096 tokens)" in names and not any(n.startswith("llama-") for n in names)
    bars = _spec(w._out)["data"]
    assert sum(b["x"][0] for b in bars) == pytest.approx(w.state["device_bytes"] / 1e9)


def test_capacity_widget_takes_extra_models_and_devices_and_rejects_bad_ones():
    tiny = MODELS["llama-3-8b"].__class__(layers=30, kv_heads=3, head_dim=64, num_heads=9, name="smollm2-135m",
                                          params_b=0.135)
    w = viz.CapacityWidget(models={**MODELS, "smollm2-135m": tiny}, devices={"this machine's RAM": 8 * 2**30},
                           model="smollm2-135m", device="this machine's RAM", dtype_bytes=4, static=True)
    assert w.state["bytes_per_token"] == 2 * 30 * 3 * 64 * 4
    with pytest.raises(ValueError, match="device must be one of"):
        viz.CapacityWidget(device="tpu", static=True)
    with pytest.raises(ValueError, match="tokens must be"):
        w.set(tokens=0)
    assert w.choice["tokens"] == 4096  # state left as it was


# ------------------------------------------------------------------ lesson 03: the reservation policy
def test_policy_sentence_says_what_paging_leaves_empty_without_contradicting_itself():
    """Issue 28 review: "at its worst 0 slots empty (only the last block of each request)" at block size 1."""
    s1 = viz.policy_state("pow2", "growth", 1)["sentence"]
    assert "0 slots empty" not in s1 and "never an empty slot" in s1
    s16 = viz.policy_state("pow2", "growth", 16)
    assert f"at its worst {s16['worst_paged']} slots empty, all in" in s16["sentence"]


def test_policy_widget_menus_rerun_the_trace():
    w = viz.PolicyWidget(static=False)
    s = w.state
    assert (s["policy"], s["trace"], s["block_size"]) == ("max", "notes", 4)
    assert s["refused_contiguous"] == ["C"] and s["refused_paged"] == []  # A and B reserve 24 each
    w._controls["policy"].value = "exact"
    assert w.state["refused_contiguous"] == ["D'"]  # the notes' fragmentation: 24 free, largest hole 16
    w._controls["trace"].value = "growth"
    w._controls["policy"].value = "pow2"
    assert w.state["copied"] > 0 and w.state["refused_contiguous"] == []
    w._controls["block_size"].value = 16
    assert w.state["worst_paged"] > viz.policy_state("pow2", "growth", 1)["worst_paged"] == 0
    assert "refused" in w._text.value and _spec(w._out)["layout"]["title"]["text"].endswith("(simulated)")
    with pytest.raises(ValueError, match="policy must be one of"):
        viz.policy_state("best")
    labels = [label for label, _ in w._controls["policy"].options]
    assert all(" " in lab for lab in labels)  # words, not the policy ids


def test_policy_widget_on_a_projector_fits_controls_sentence_and_figure_on_one_screen():
    """Issue 28 [5]: in classroom mode the widget was 982 px tall; then 706 px with the sentence
    below the figure, off the 599 px screen (the student review of ede928d). Now the controls sit
    side by side, the sentence (one line a side) right under them, and a compact figure short
    enough for all three on one screen. Review r6_03_11: that figure had dropped its subtitle, so
    the projector showed THAT paged refused D' but not why, nor the copy counter: the compact
    figure keeps the last step's caption (two lines at most) and puts the counter by the bars."""
    viz.classroom(True)
    try:
        w = viz.PolicyWidget(static=False)
        w.set(policy="pow2", block_size=16)  # the longest caption: both sides fail D'
        layout = _spec(w._out)["layout"]
    finally:
        viz.classroom(False)
    kids = list(w.widget.children)
    assert kids.index(w._text) < kids.index(w._out)
    assert layout["height"] <= 410, layout["height"]
    sub = layout["title"]["text"]  # under the title's first line: a subtitle sat on the map's name
    assert sub.startswith("<b>The last step of the run (simulated)</b><br>") and sub.count("<br>") == 2, sub
    assert "paged FAILS (out of blocks: asked for 2 block(s), only 1 free (a table for D'))" in sub, sub
    assert any("slots copied on growth: 0 (0 moves); paged: 0" in a["text"] for a in layout["annotations"])
    assert "<br>Paged, blocks of 16" in w._text.value
    assert w._controls["trace"].layout.margin  # a gap between the requests menu and the slider's label


def test_policy_sentence_gives_the_true_reason_for_no_empty_slot_and_counts_failed_growths():
    """Issue 28 student review: "blocks of one token fill exactly" was printed at block size 4 too,
    and the growths the contiguous side failed were not in the sentence."""
    s4 = viz.policy_state("exact", "notes", 4)
    assert s4["worst_paged"] == 0 and "blocks of one token" not in s4["sentence"]
    assert "every request it held was a multiple of 4 tokens long" in s4["sentence"]
    assert "blocks of one token fill exactly" in viz.policy_state("exact", "notes", 1)["sentence"]
    g = viz.policy_state("pow2", "growth", 4)
    failed = [s.op[1] for s in g["steps"] if s.op[0] == "grow" and not s.contiguous_ok]
    assert failed and f"failed {len(failed)} growths ({', '.join(failed)}:" in g["sentence"]
    assert "failed" not in viz.policy_state("exact", "growth", 4)["sentence"]


def test_compare_caption_says_what_a_failed_growth_means_for_the_request():
    from kvlab.viz.compare import growth_trace, run_compare

    bad = [s for s in run_compare(growth_trace(), 48, 4, "pow2") if not s.contiguous_ok]
    assert bad and all(f"contiguous FAILS (no free range of" in s.caption for s in bad)
    assert all(f"{s.op[1]} keeps its" in s.caption for s in bad)  # its tokens so far; the lesson's text says preempt
    assert all(len(s.caption) <= 90 for s in run_compare(growth_trace(), 48, 4, "pow2"))  # 2 lines on a projector


def test_compare_stepper_caption_keeps_two_lines_so_the_figure_never_jumps():
    """Review r8 of lesson 03: at steps 6 and 7 the caption wrapped to 3 lines and the figure jumped ~54 px."""
    from kvlab.viz.compare import compare_stepper, growth_trace

    s = compare_stepper(growth_trace(), policy="pow2", static=False)
    assert "min-height:2.70em" in s._caption.value


def test_compare_map_names_the_refused_request_where_it_would_have_gone():
    """Review r8 of lesson 03: D' failing was only in the caption, never on the contiguous map."""
    from kvlab.viz.compare import compare_data, notes_trace, run_compare

    last = run_compare(notes_trace(), 48, 4, "exact")[-1]
    labels = compare_data(last)["contiguous_label"]
    assert not last.contiguous_ok and labels[0] == "D' (24): no range fits"  # A's freed range, the largest (16)
    assert "no range fits" not in " ".join(compare_data(run_compare(notes_trace(), 48, 4, "exact")[-2])["contiguous_label"])


def test_thesis_in_classroom_mode_fits_its_sentence_on_the_screen():
    """Review r3_00_08 (cell 14, classroom): the widget was 777 px tall on a 599 px screen, the sentence
    that interprets the picture under it (the browser test measures the whole widget). In classroom mode
    the translation's sentence comes without the walk's table (the figure's subtitle gives the same walk)
    and the figure is shorter; at 1500x1000 both stay. The shared block's sentence no longer puts it in
    R1's table: R1 has finished and holds nothing."""
    from kvlab.viz.thesis_widget import CLASSROOM_TRIM_PX, _html, thesis_figure

    s = viz.thesis_state(shared=True, table="R2", pos=5)
    assert "both R1's and R2's tables" not in s["position_sentence"]
    assert "a block R1 computed and the radix tree kept, now in R2's table" in s["position_sentence"]
    normal_h = thesis_figure(s).layout.height
    assert "<table" in _html(s, "the translation") and "<table" in _html(s)   # normal and static: the walk's table
    viz.classroom(True)
    try:
        assert "<table" not in _html(s, "the translation")
        assert "pos 5 → L1" in thesis_figure(s).layout.title.subtitle.text   # the walk, in the figure
        from kvlab.viz.translate_widget import translation_figure
        full = translation_figure(s["chain"], num_blocks=12, holders=s["holders"], seq=s["seq"], legend="R2's tokens",
                                  ref_counts=s["ref_counts"]).layout.height
        assert thesis_figure(s).layout.height == full - CLASSROOM_TRIM_PX
    finally:
        viz.classroom(False)
    assert thesis_figure(s).layout.height == normal_h
