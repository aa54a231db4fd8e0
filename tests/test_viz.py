"""Tests of kvlab.viz's memory map, block tables, captions, stepper, palette, classroom mode and static fallback.

They check the data behind the pictures (colours, fill, labels, arrows, frame counts, axis
ranges, captions, widget state after callbacks), never pixels.
"""
from __future__ import annotations

import dataclasses
import html
import json

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
import ipywidgets  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab  # noqa: E402
import kvlab.viz as viz  # noqa: E402
from kvlab.memory.block_manager import BlockManager  # noqa: E402
from kvlab.viz.palette import FREE, HIGHLIGHT, SHARED_OUTLINE, REQUEST_COLORS  # noqa: E402


@pytest.fixture(autouse=True)
def _normal_theme():
    viz.classroom(False)
    yield
    viz.classroom(False)


def scenario() -> BlockManager:
    """R1 prompt 6 tokens, fork R2, R2 appends (copy-on-write of L1), R3 9 tokens, R1 ends."""
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.fork("R1", "R2")
    m.append("R2", 1)
    m.add_sequence("R3", 9)
    m.free("R1")
    return m


def _step(m: BlockManager, kind: str) -> int:
    """The index of the first event of ``kind`` in the scenario's log (found by content: the
    memory layer decides how many events each operation records)."""
    return m.log.kinds().index(kind)


# ------------------------------------------------------------------ palette
def test_request_colors_are_fixed_and_distinct_in_a_figure():
    assert viz.request_color("R1") == REQUEST_COLORS[1]
    assert viz.request_color("A") == REQUEST_COLORS[0]
    assert viz.request_color("R1") != viz.request_color("R2")
    cols = viz.assign_colors(["R1", "R11", "R2", "x-long-name"])
    assert len(set(cols.values())) == 4
    assert cols["R1"] == viz.request_color("R1")  # R1 keeps its colour, R11 moves
    assert FREE not in REQUEST_COLORS and viz.HIT not in REQUEST_COLORS and viz.MISS not in REQUEST_COLORS


# ---------------------------------------------------------------- memory map
def test_memory_map_colours_and_labels_after_scenario():
    m = scenario()
    snap = m.snapshots[_step(m, "cow") + 1]  # after the cow: R1 [0, 1], R2 [0, 2]
    assert snap.tables == {"R1": (0, 1), "R2": (0, 2)}
    d = viz.memory_map_data(snap, highlight=[2])
    cols = viz.assign_colors(["R1", "R2"])
    assert d["color"][0] == cols["R1"] and d["color"][1] == cols["R1"]
    assert d["color"][2] == cols["R2"]
    assert d["color"][3] == FREE and d["label"][3] == "P3"
    assert d["label"][0] == "P0<br>R1 L0<br>x2"  # shared: ref count shown
    assert d["label"][2] == "P2<br>R2 L1"
    assert d["shared"] == [0]
    assert d["outline_color"][0] == SHARED_OUTLINE
    assert d["outline_color"][2] == HIGHLIGHT and d["highlight"] == [2]
    assert d["outline_color"][1] == "#ffffff"
    assert "1/4 tokens" not in d["hover"][0] and "4/4 tokens" in d["hover"][0]
    assert d["fill"][:4] == [1.0, 0.5, 0.5, 0.0]  # R1 L1 holds 2 of 4; R2's fresh copy P2 the same 2; P3 free
    assert d["holders"][0] == [("R1", 0), ("R2", 0)]


def test_final_state_frees_r1_blocks():
    m = scenario()
    d = viz.memory_map_data(m.snapshot())
    assert d["color"][1] == FREE  # R1's private L1 went back to the pool
    assert d["label"][0] == "P0<br>R2 L0"  # no longer shared
    assert d["shared"] == []
    assert d["num_free_blocks"] == m.allocator.num_free_blocks


def test_bad_highlight_names_the_block():
    m = scenario()
    with pytest.raises(ValueError, match="99"):
        viz.memory_map_data(m.snapshot(), highlight=[99])
    with pytest.raises(TypeError):
        viz.memory_map_data("not a snapshot")


def test_rendering_does_not_change_state():
    m = scenario()
    before = (m.allocator.state(), {s: list(t.block_ids) for s, t in m.tables.items()}, len(m.log))
    viz.animate_memory_map(m.snapshots, m.log)
    viz.memory_map_stepper(m.snapshots, m.log, static=False).next()
    after = (m.allocator.state(), {s: list(t.block_ids) for s, t in m.tables.items()}, len(m.log))
    assert before == after


def test_animation_one_frame_per_event_and_fixed_axes():
    m = scenario()
    fig = viz.animate_memory_map(m.snapshots, m.log)
    n = len(m.log)
    assert len(fig.frames) == n and {"append", "fork", "cow", "free_seq"} <= set(m.log.kinds())
    xr, yr = list(fig.layout.xaxis.range), list(fig.layout.yaxis.range)
    assert xr == [-0.5, 11.5] and yr[1] == -0.5 and yr[0] > 3  # tables above the pool, copy room below
    n_traces = len(fig.frames[0].data)
    for fr in fig.frames:
        assert list(fr.layout.xaxis.range) == xr and list(fr.layout.yaxis.range) == yr
        assert len(fr.data) == n_traces and len(fr.data[0].y) == 12  # the pool's 12 cells in every frame
    # the cow's frame: P1 and P2 outlined red, the copy drawn as an arc from P1 to P2, captioned in words
    cow = fig.frames[_step(m, "cow")]
    sub = cow.layout.title.subtitle.text
    assert sub == f"step {_step(m, 'cow') + 1} / {n}: R2 writes into shared block P1: copy it to P2, where the write will go (copy-on-write)"
    assert cow.data[0].marker.line.color[1] == HIGHLIGHT and cow.data[0].marker.line.color[2] == HIGHLIGHT
    arc = next(t for t in cow.data if t.name == "copy-on-write")
    xs = [x for x, t in zip(arc.x, arc.text) if x is not None and not t]  # the arc (its label: a point of its own)
    assert (xs[0], xs[-1]) == (1.0, 2.0) and "copy P1 → P2" in arc.text
    quiet = fig.frames[0].data[[t.name for t in fig.frames[0].data].index("copy-on-write")]
    assert not [x for x in quiet.x if x is not None]  # no copy, no arc
    assert "(simulated)" in fig.layout.title.text
    # frames numbered as the stepper numbers them: 1..n
    assert [s.label for s in fig.layout.sliders[0].steps] == [str(i) for i in range(1, n + 1)]
    assert [f.name for f in fig.frames] == [str(i) for i in range(1, n + 1)]


def _polylines(trace) -> list[list[tuple[float, float]]]:
    """A lines trace split at its None gaps: one list of (x, y) points per arrow."""
    out, cur = [], []
    for x, y in zip(trace.x, trace.y):
        if x is None:
            out, cur = out + [cur] if cur else out, []
        else:
            cur.append((x, y))
    return out + [cur] if cur else out


def test_block_tables_drawn_with_an_arrow_into_every_block():
    m = scenario()
    snap = m.snapshots[_step(m, "cow") + 1]  # R1 [0, 1], R2 [0, 2]
    g = viz.map_geometry(viz.grid_layout(12), [snap])
    assert g.holders == ("R1", "R2")
    fig = viz.memory_map_figure(snap)
    arrows = {t.name: t for t in fig.data if t.name and t.name.endswith(" arrows")}
    assert set(arrows) == {"R1 arrows", "R2 arrows"}
    ends = {h: [(round(a[-1][0]), a[-1][1]) for a in _polylines(t)] for h, t in arrows.items()}
    pool_top = g.pool_y0 - 0.42
    assert [x for x, _ in ends["R1 arrows"]] == [0, 1] and [x for x, _ in ends["R2 arrows"]] == [0, 2]
    assert all(abs(y - pool_top) < 1e-9 for e in ends.values() for _, y in e)
    # the shared P0 gets two arrows, side by side (review r7_06: at least 0.2 of a block apart), so both holders show
    into_p0 = sorted(_polylines(t)[0][-1][0] for t in arrows.values())
    assert -0.4 < into_p0[0] and into_p0[0] + 0.2 <= into_p0[1] < 0.4, into_p0
    cells = next(t for t in fig.data if t.name == "table labels")
    assert list(cells.text) == ["L0→P0", "L1→P1", "L0→P0", "L1→P2"]
    names = [a.text for a in fig.layout.annotations]
    assert names == ["<b>R1</b>", "<b>R2</b>", "<b>pool</b>"]
    assert viz.memory_map_figure(snap, tables=False).layout.annotations == ()


def test_the_radix_tree_is_a_holder_too():
    cm = kvlab.CacheManager(num_blocks=8, block_size=4)
    cm.admit("R1", list(range(10)))
    cm.cache_finished_req("R1", list(range(10)))   # R1's two full pages go to the tree
    cm.admit("R2", list(range(8)) + [50, 51])       # R2 matches them
    snap = cm.snapshot("R2 reuses R1's pages")
    assert "tree" in snap.tables
    g = viz.map_geometry(viz.grid_layout(8), [snap])
    assert g.holders[-1] == "tree" and g.legend({})["tree"] == viz.TREE
    fig = viz.memory_map_figure(snap)
    tree = next(t for t in fig.data if t.name == "tree arrows")
    shared = [b for b in range(8) if snap.ref_count[b] > 1]
    assert shared and {round(line[-1][0]) for line in _polylines(tree)} >= set(shared)  # the tree points at the shared pages
    assert "<b>radix tree</b>" in [a.text for a in fig.layout.annotations]


def test_captions_are_sentences_never_event_reprs():
    m = scenario()
    frames = viz.memory_frames(m.snapshots, m.log)
    captions = [f.caption for f in frames]
    for c, e in zip(captions, m.log):
        assert c != e.describe() and "#" not in c and "=" not in c, c
        assert c[0].isupper() and e.seq_id in c
    assert captions[0] == "R1 arrives with 6 tokens: it takes P0, P1 (P1 has 2 of 4 slots used)"
    assert captions[_step(m, "fork")] == "R2 forks R1: it shares both blocks P0, P1 (ref count +1 each, nothing copied)"
    assert captions[_step(m, "free_seq")].startswith("R1 finishes: P1 goes back to the free queue; 1 shared block stays with its other holders")
    for kind in ("allocate", "incref", "free", "match", "insert", "split", "evict", "lock", "unlock", "admit",
                 "cache", "adopt", "share_prefix", "preempt", "something_new"):
        e = kvlab.Event(kind, "R9", (3,), {"src": 1, "dst": 2, "prefix_len": 4, "num_tokens": 8, "parent": "R1",
                                         "replaced": [5], "released": [5], "node": 2, "at": 3, "new_node": 4})
        sentence = viz.event_sentence(e)
        assert sentence and "#" not in sentence and "{" not in sentence and "Event(" not in sentence, sentence


def test_measured_label_and_bad_source():
    m = scenario()
    fig = viz.memory_map_figure(m.snapshot(), source="measured")
    assert fig.layout.title.text.endswith("(measured)")
    with pytest.raises(ValueError, match="guessed"):
        viz.memory_map_figure(m.snapshot(), source="guessed")


def test_frames_need_matching_log():
    m = scenario()
    with pytest.raises(ValueError, match="snapshots"):
        viz.memory_frames(m.snapshots[:-1], m.log)
    assert len(viz.memory_frames(m.snapshots)) == len(m.snapshots)


def test_sizes_12_to_4096():
    g = viz.grid_layout(12)
    assert (g.cols, g.rows, g.mode, g.show_text) == (12, 1, "grid", True)
    g = viz.grid_layout(256)
    assert (g.cols, g.rows, g.mode, g.show_text) == (32, 8, "grid", False)
    m = BlockManager(num_blocks=4096, block_size=16)
    m.add_sequence("R1", 100)
    m.fork("R1", "R2")
    fig = viz.memory_map_figure(m.snapshot())
    assert fig.data[0].type == "heatmap"
    z = fig.data[0].z
    assert len(z) == 64 and len(z[0]) == 64
    assert z[0][0] == z[0][6] != z[0][7]  # R1's 7 blocks vs the first free one
    assert len(fig.data[1].x) == 7  # the shared blocks get an outline mark
    with pytest.raises(ValueError):
        viz.grid_layout(0)
    with pytest.raises(ValueError):
        viz.grid_layout(12, mode="pie")


# ------------------------------------------------------------------- stepper
def test_stepper_buttons_and_slider_update_caption_and_figure():
    m = scenario()
    n, cow = len(m.log), _step(m, "cow")
    s = viz.memory_map_stepper(m.snapshots, m.log, static=False)
    assert s.widget is not None and s.index == 0
    classes = {c for w in _walk(s.widget) for c in w._dom_classes}
    assert {"kvlab-prev", "kvlab-next", "kvlab-play", "kvlab-reset", "kvlab-caption", "kvlab-error",
            "kvlab-step-slider", "kvlab-figure", "kvlab-stepper"} <= classes
    fig0 = s._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    s._next.click()
    assert s.index == 1 and html.escape(s.frames[1].caption) in s._caption.value and f"step 2 / {n}:" in s._caption.value
    fig1 = s._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    # the step counter and caption appear once: in the stepper's caption line, not again in the figure
    assert f"step 1 / {n}" not in json.dumps(fig0) and f"step 2 / {n}" not in json.dumps(fig1)
    assert fig0["layout"]["xaxis"]["range"] == fig1["layout"]["xaxis"]["range"]
    s._play.value = cow + 1  # what the browser's timer does (1-based, as the caption)
    assert s.index == cow and s._slider.value == cow + 1 and "copy-on-write" in s.caption
    assert f"step {cow + 1} / {n}" in s._caption.value
    s._prev.click()
    assert s.index == cow - 1
    s._reset.click()
    assert s.index == 0 and s._play.value == 1 and s._slider.value == 1
    s.go(n - 1)
    s.next()
    assert s.index == n - 1  # stays at the end
    assert s.error is None and s._error.value == ""
    with pytest.raises(ValueError, match=str(n)):
        s.go(n)


def test_stepper_shows_its_step_counter_once_and_says_what_each_button_does():
    """Issue 28 [6][8]: the slider's "step" label and readout repeated the caption's "step k / N",
    and the play/stop/loop buttons had no tooltips (stop went back to step 1 without a word): each
    control now says on hover what it does, and the Play widget's unlabelled buttons are hidden."""
    frames = [viz.Frame(None, f"frame {i}") for i in range(3)]
    s = viz.Stepper(frames, render=lambda f: f"<p>{f.caption}</p>", static=False)
    # The slider is labelled "step" (reviews r7, r9: unlabelled) without a number of its own.
    assert s._slider.readout is False and s._slider.description == "step"
    tips = {b.description: b.tooltip for b in (s._reset, s._prev, s._play_button, s._loop, s._next)}
    assert tips["next ▶"].startswith("next step") and tips["▶ play"].startswith("play:")
    assert "step 1" in tips["⟲ reset"] and "step 1" in tips["◀ prev"] and "again at step 1" in tips["⟳ loop"]
    assert s._play.layout.display == "none" and s._play.show_repeat is False  # its stop / loop icons hidden
    s.next()
    assert "step 2 / 3" in s._caption.value
    assert s._reset.tooltip.startswith("reset: stop playing") and s._prev.tooltip.startswith("previous step")


def test_stepper_disables_prev_and_reset_at_step_1_and_next_at_the_last_step():
    """Issue 28 (every lesson): prev and reset stayed enabled at step 1 and next at the last step,
    so a click did nothing without a word. The widgets' ``disabled`` follows the step however it
    changes (a button, the slider, the browser's timer through the Play widget, ``go``)."""
    frames = [viz.Frame(None, f"frame {i}") for i in range(4)]
    s = viz.Stepper(frames, render=lambda f: f"<p>{f.caption}</p>", static=False)

    def state():
        return s._reset.disabled, s._prev.disabled, s._next.disabled

    assert state() == (True, True, False) and "step 1" in s._prev.tooltip
    s._next.click()
    assert s.index == 1 and state() == (False, False, False)
    s._slider.value = 4  # dragged to the end
    assert s.index == 3 and state() == (False, False, True) and "last step" in s._next.tooltip
    assert s._play_button.tooltip.startswith("play again from step 1")
    s._prev.click()
    assert state() == (False, False, False)
    s._play.value = 4  # the browser's timer reaches the end
    assert state() == (False, False, True)
    s._reset.click()
    assert s.index == 0 and state() == (True, True, False) and s._play.value == 1
    s.go(2)
    assert state() == (False, False, False)


def test_stepper_play_button_pauses_and_says_so_and_loop_drives_the_timer():
    frames = [viz.Frame(None, f"frame {i}") for i in range(3)]
    s = viz.Stepper(frames, render=lambda f: f"<p>{f.caption}</p>", static=False)
    s._play_button.click()
    assert s._play.playing and s._play_button.description == "❚❚ pause"
    assert s._play_button.tooltip.startswith("pause") and not s._reset.disabled  # reset stops playing at step 1
    s._play.value = 2
    s._play_button.click()
    assert not s._play.playing and s.index == 1 and s._play_button.description == "▶ play"
    s._loop.value = True
    assert s._play.repeat
    s._play.playing = True
    s._play.playing = False  # the browser's timer stops at the last step: the button says play again
    assert s._play_button.description == "▶ play"
    s._reset.click()
    assert not s._play.playing and s.index == 0
    one = viz.Stepper(frames[:1], render=lambda f: "", static=False)
    assert one._play_button.disabled and one._loop.disabled and one._next.disabled and one._prev.disabled


def test_stepper_shows_integrity_error():
    m = scenario()
    good = m.snapshots[_step(m, "fork") + 1]
    bad = dataclasses.replace(good, ref_count=(0,) + good.ref_count[1:])  # P0 held but ref_count 0
    with pytest.raises(AssertionError):
        bad.check_integrity()
    frames = [viz.Frame(good, "ok"), viz.Frame(bad, "broken")]
    s = viz.Stepper(frames, viz.MemoryMapView(frames), static=False)
    assert s.error is None
    s.next()
    assert s.error is not None and "integrity check failed at step 1" in s.error
    assert "integrity check failed" in s._error.value
    s.prev()
    assert s.error is None and s._error.value == ""


def test_stepper_static_mode_builds_no_widget(monkeypatch):
    m = scenario()
    monkeypatch.setenv("KVLAB_STATIC", "1")
    s = viz.memory_map_stepper(m.snapshots, m.log)
    assert s.widget is None
    s.next()
    fig = s.figure()
    assert fig.layout.title.subtitle.text == f"step 2 / {len(m.log)}: " + s.caption
    assert f"step 2/{len(m.log)}" in repr(s)
    monkeypatch.setenv("KVLAB_STATIC", "0")
    assert viz.is_static() is False
    monkeypatch.setenv("KVLAB_STATIC", "maybe")
    with pytest.raises(ValueError, match="maybe"):
        viz.is_static()
    monkeypatch.delenv("KVLAB_STATIC")
    assert viz.is_static() is True  # a plain pytest process has no kernel


def test_stepper_static_display_outputs_figure(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    m = scenario()
    s = viz.memory_map_stepper(m.snapshots, m.log, static=True)
    s._ipython_display_()
    kinds = [type(o).__name__ for o in shown]
    assert kinds == ["HTML", "Figure"]


def test_stepper_rejects_bad_frames():
    with pytest.raises(ValueError):
        viz.Stepper([], render=str, static=True)
    with pytest.raises(TypeError):
        viz.Stepper(["x"], render=str, static=True)


def test_stepper_svg_frames():
    frames = [viz.Frame(None, "a"), viz.Frame(None, "b")]
    s = viz.Stepper(frames, render=lambda f: f"<svg><text>{f.caption}</text></svg>", static=False)
    s.next()
    assert "kvlab-svg" in s._html._dom_classes and "<text>b</text>" in s._html.value


# ----------------------------------------------------------------- classroom
def test_classroom_mode_changes_later_figures():
    m = scenario()
    normal = viz.memory_map_figure(m.snapshot())
    viz.classroom(True)
    assert viz.is_classroom()
    big = viz.memory_map_figure(m.snapshot())
    assert big.layout.font.size > normal.layout.font.size
    assert big.layout.title.font.size > normal.layout.title.font.size
    assert max(big.data[0].marker.line.width) > max(normal.data[0].marker.line.width)
    assert big.layout.font.color == "#000000"
    # a projector: the figure takes the output area's width; laid out for about 900 px, not wider
    assert normal.layout.width == 860 and big.layout.width is None and big.layout.autosize is True
    assert viz.theme().grid_width <= 900
    with pytest.raises(TypeError):
        viz.classroom("yes")


def test_classroom_mode_grows_widget_controls():
    m = scenario()
    plain = viz.memory_map_stepper(m.snapshots, m.log, static=False)
    assert not any("<style>" in str(getattr(w, "value", "")) for w in _walk(plain.widget))
    viz.classroom(True)
    s = viz.memory_map_stepper(m.snapshots, m.log, static=False)
    css = next(w.value for w in _walk(s.widget) if "<style>" in str(getattr(w, "value", "")))
    assert ".kvlab-stepper" in css and f"font-size: {viz.theme().control_px}px" in css and "flex-wrap: wrap" in css
    assert s._next.style.font_size == f"{viz.theme().control_px}px"
    w = viz.TranslationWidget(static=False)
    assert any(".kvlab-translation" in str(getattr(c, "value", "")) for c in _walk(w.widget))
    assert w.figure().layout.width is None


def test_legend_names_only_what_the_figure_draws():
    """Issue 16 bug 8: the legend showed "R1-sample2" for no block (a fork owns no block)."""
    m = BlockManager(num_blocks=12, block_size=4)
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R1-sample2")
    snap = m.snapshot()
    no_tables = viz.memory_map_figure(snap, tables=False)
    names = {t.name for t in no_tables.data if t.showlegend is not False}
    assert "R1-sample2" not in names and {"R1", "R2"} <= names
    with_tables = viz.memory_map_figure(snap)
    names = {t.name for t in with_tables.data if t.showlegend is not False}
    assert "R1-sample2" in names  # now it colours its block-table row
    assert "R1-sample2 arrows" in {t.name for t in with_tables.data}


def _walk(w):
    yield w
    for c in getattr(w, "children", ()):
        yield from _walk(c)


def test_viz_imports_without_plotting_packages_and_core_never_imports_viz():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('plotly', 'ipywidgets', 'graphviz'): sys.modules[m] = None\n"
        "import kvlab, kvlab.memory, kvlab.reuse, kvlab.lessons, kvlab.check\n"
        "assert 'kvlab.viz' not in sys.modules, 'the core imported kvlab.viz'\n"
        "import kvlab.viz as viz\n"
        "print(viz.translation_chain([3, 7, 1, 5, 9], 9, 4)['physical_block'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_classroom_call_shows_one_line(capsys):
    viz.classroom(True)._ipython_display_()
    assert capsys.readouterr().out.startswith("classroom mode on: figures drawn from now on take the output width")
    viz.classroom(False)._ipython_display_()
    assert "classroom mode off" in capsys.readouterr().out


def test_red_outline_legend_says_what_it_marks():
    """Issue 21 [6]: the red outline's legend said "written / read now" on a frame where it marked the
    blocks R1 had just freed. It marks what the step changed; the kernel view's says "read"."""
    m = scenario()
    frames = viz.memory_frames(m.snapshots, m.log)
    free = next(f for f in frames if f.extra["event"].kind == "free_seq")
    assert free.highlight and all(free.snapshot.ref_count[b] == 0 for b in free.highlight)
    fig = viz.animate_memory_map(m.snapshots, m.log)
    names = {t.name for t in fig.data if t.showlegend is not False}
    assert "changed this step" in names and "written / read now" not in names
    kfig = viz.kernel_access_figure(m.snapshot(), "R3", iteration=0)
    knames = {t.name for t in kfig.data if t.showlegend is not False}
    assert "read this iteration" in knames and "changed this step" not in knames


def _legend_names(fig) -> set[str]:
    return {t.name for t in fig.data if t.showlegend is not False}


def test_static_map_legend_lists_only_what_is_drawn():
    """Issue 28 [6]: lesson 00's static pictures listed "changed this step" (and "shared") in the
    legend with nothing outlined red (or shared) in the figure."""
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("R1", 6)
    names = _legend_names(viz.memory_map_figure(m.snapshot()))
    assert "changed this step" not in names and "shared (xN = ref count)" not in names and "R1" in names
    m.fork("R1", "R2")
    names = _legend_names(viz.memory_map_figure(m.snapshot(), highlight=[0]))
    assert {"changed this step", "shared (xN = ref count)"} <= names


def _cells(fig) -> list[tuple[float, float, float, float]]:
    """The table cells' boxes (x0, x1, y0, y1), from the figure's "tables" bar trace."""
    bar = next(t for t in fig.data if t.name == "tables")
    h = bar.width / 2
    return [(b, b + w, y - h, y + h) for b, w, y in zip(bar.base, bar.x, bar.y)]


def _pool_cells(fig) -> list[tuple[float, float, float, float]]:
    """The pool's block boxes (x0, x1, y0, y1), from its bar trace (the first, one bar per block)."""
    bar = fig.data[0]
    h = bar.width / 2
    return [(b, b + w, y - h, y + h) for b, w, y in zip(bar.base, bar.x, bar.y)]


def test_table_arrows_run_through_no_other_cell():
    """Issue 28 [6]: an arrow from R1's table ran straight down through the labels of R2's and
    R1-sample2's cells (lesson 00 cells 9 and 12). Routed between the columns, an arrow enters
    no cell but the one it starts from."""
    m = BlockManager(num_blocks=12, block_size=4)
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R1-sample2")
    m.add_sequence("R3", 17)  # into the pool's second row (cols=4): past the first row's labels
    fig = viz.memory_map_figure(m.snapshot(), cols=4)
    cells = _cells(fig) + _pool_cells(fig)
    assert len(cells) == 13 + 12
    crossings = []
    for t in fig.data:
        if not t.name.endswith(" arrows"):
            continue
        pts = list(zip(t.x, t.y))
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            if xa is None or xb is None:
                continue
            start = next(c for c in cells if c[0] < xa < c[1] and c[2] < ya - 1e-6 < c[3]) if ya == pts[0][1] else None
            for k in range(101):
                x, y = xa + (xb - xa) * k / 100, ya + (yb - ya) * k / 100
                hit = [c for c in cells if c[0] < x < c[1] and c[2] < y < c[3] and c != start]
                if hit:
                    crossings.append((t.name, round(x, 2), round(y, 2)))
                    break
    assert not crossings, crossings


def test_animation_shows_its_step_counter_once():
    """The slider repeated the subtitle's "step k / N" (the rubric: the step counter appears once)."""
    m = scenario()
    fig = viz.animate_memory_map(m.snapshots, m.log)
    assert fig.layout.sliders[0].currentvalue.visible is False
    assert fig.layout.title.subtitle.text.startswith("step 1 / ")
    cfig = viz.animate_compare(viz.run_compare(viz.notes_trace()))
    assert cfig.layout.sliders[0].currentvalue.visible is False


def test_classroom_cells_never_wider_than_the_output_allows():
    """The projector's height budget may narrow a block, never widen it past what the output's
    width gives (12 a row at 850 px: 'L0→P0' spilled over its cell in lesson 00)."""
    m = BlockManager(num_blocks=12, block_size=4)
    m.add_sequence("R2", 16)
    viz.classroom(True)
    try:
        th = viz.theme()
        g = viz.map_geometry(viz.grid_layout(12), [m.snapshot()])
    finally:
        viz.classroom(False)
    assert g.cell_px <= (th.grid_width - g.margin[0] - g.margin[1]) / 12 + 1e-9


def test_no_plotly_cloud_button_anywhere():
    """Every way a figure reaches a page carries the config without the "Share chart" (Plotly Cloud)
    button: the notebook renderer, the stepper's Output widget, static HTML, the site's players."""
    import plotly.graph_objects as go
    import plotly.io as pio

    import kvlab.viz  # noqa: F401  (import sets the renderers' config)
    from kvlab.sim.plots import PLOTLY_CONFIG as SIM_CONFIG
    from kvlab.viz.display import static_html
    from kvlab.viz.flipbook import flipbook_html
    from kvlab.viz.display import PLOTLY_CONFIG
    from kvlab.viz.stepper import figure_output

    assert PLOTLY_CONFIG["showSendToCloud"] is False and "sendChartToCloud" in PLOTLY_CONFIG["modeBarButtonsToRemove"]
    assert SIM_CONFIG == PLOTLY_CONFIG
    fig = go.Figure(go.Bar(y=[1, 2]), layout=dict(title="t"))
    for name in ("plotly_mimetype", "jupyterlab", "notebook"):  # what display(fig) uses in JupyterLab / classic
        bundle = pio.renderers._build_mime_bundle(fig.to_dict(), name)
        assert "sendChartToCloud" in str(bundle), name
    assert figure_output(fig)["data"]["application/vnd.plotly.v1+json"]["config"]["showSendToCloud"] is False
    assert '"showSendToCloud": false' in static_html(fig)
    assert '"showSendToCloud": false' in flipbook_html([fig], ["one"])
