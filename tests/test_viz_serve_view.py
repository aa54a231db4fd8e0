"""Lesson 12's recorded dashboard (issue 28, the reviews of lesson 12): one meaning per colour, the
live page's request colours the recording's, the pool coloured by the last request's hit and
computed blocks, its path through the tree written out in whole words, a menu of the requests
beside the stepper, and the live frame replaced by the recording, in place, once the servers stop
(after Run All the frame was dead)."""
from __future__ import annotations

import re

import pytest

from kvlab.serve.lab import Lab
from kvlab.viz import serve_view
from kvlab.viz.palette import HIT, MISS

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _state(running: bool = True) -> dict:
    holders = [["tree"], ["tree", "req-1"] if running else ["tree"], ["req-2"] if running else [], []]
    return {"num_blocks": 4, "block_size": 4, "used_blocks": 3, "tree_nodes": 2, "tree_tokens": 8,
            "blocks": {"state": [2, 3 if running else 2, 1 if running else 0, 0], "ref": [1, 2, 1, 0],
                       "holders": holders},
            "tree": [{"id": 1, "parent": 0, "tokens": 4, "text": "system:\nYou", "mark": "hit", "lock": 1,
                      "evicted": False, "tier": "device", "kv": [0]},
                     {"id": 2, "parent": 1, "tokens": 4, "text": "bot:\n ok", "mark": "", "lock": 0,
                      "evicted": False, "tier": "device", "kv": [1]}],
            "evicted_nodes": []}


def test_the_live_page_and_the_recording_colour_requests_alike():
    page = (ROOT / "kvlab" / "serve" / "static" / "dashboard.html").read_text()
    palette = re.search(r"const PALETTE = \[([^\]]*)\]", page).group(1)
    assert tuple(re.findall(r'"(#[0-9a-f]{6})"', palette)) == serve_view.DASHBOARD_REQUEST_COLORS
    marks = {HIT, MISS, "#ff0000", "#ff9900", "#eeeeee", "#9e9e9e", "#222222"}  # hit, computed, evicted, copy, greys
    assert not marks & set(serve_view.DASHBOARD_REQUEST_COLORS)
    assert "JSON.stringify(t).slice(1, -1)" not in page  # a label printed "\n" literally


def _legend_and_drawn(fig) -> tuple[dict, set]:
    legend = {t.name: t.marker.color for t in fig.data if t.showlegend}
    drawn = {c for t in fig.data if not t.showlegend and t.marker is not None and t.marker.color is not None
             for c in ([t.marker.color] if isinstance(t.marker.color, str) else t.marker.color)}
    return legend, drawn


def test_each_colour_of_the_recording_means_one_thing():
    fig = serve_view.dashboard_figure(_state())
    legend, drawn = _legend_and_drawn(fig)
    # the outline's swatch is an outlined block of this frame (its colour in the dark edge): its meaning is
    # the edge, so its fill is not another meaning (review r7 of 12: a white square read as "locked")
    outline_fill = legend.pop(serve_view._OUTLINE_NAME, None)
    assert outline_fill is None or outline_fill in drawn and outline_fill != "#ffffff"
    colours = list(legend.values())
    assert len(colours) == len(set(colours)) + colours.count("#ffffff") - min(1, colours.count("#ffffff"))
    assert {"free", "cached, not used by it", "shared (ref count > 1)", "req-2: running",
            "the last request's hit (found in the tree)", "locked (a square node)"} <= set(legend)
    assert "req-1: running" not in legend  # its one block is shared: drawn black, so not listed in its colour
    assert all(c in drawn for name, c in legend.items() if c != "#ffffff")  # nothing listed that is not drawn
    assert list(fig.data[2].marker.symbol) == ["circle", "square", "circle"]


def _finished(marks: tuple[str, str, str]) -> dict:
    """A recorded frame after a request finished: every used block is held by the tree only
    (state 2), three nodes of two blocks each, marked as the last request used them."""
    tree = [{"id": i + 1, "parent": i, "tokens": 8, "text": f"node {i + 1} text", "mark": m, "lock": 0,
             "evicted": False, "tier": "device", "kv": [2 * i, 2 * i + 1]} for i, m in enumerate(marks)]
    return {"num_blocks": 8, "block_size": 4, "used_blocks": 6, "tree_nodes": 3, "tree_tokens": 24,
            "blocks": {"state": [2] * 6 + [0, 0], "ref": [1] * 6 + [0, 0], "holders": [["tree"]] * 6 + [[], []]},
            "tree": tree, "evicted_nodes": []}


def test_the_recorded_pool_shows_what_the_last_request_hit_and_computed():
    """Issue 28 review of lesson 12: after the servers stop, every used block of the recording was
    the same grey (each is held by the tree only once a request finished): the pool did not show
    the hit and the computed blocks the tree and the caption talk about. Each block now takes the
    mark of the tree node that holds it, and each legend entry is drawn."""
    fig = serve_view.dashboard_figure(_finished(("hit", "computed", "")))
    pool = list(fig.data[0].marker.color)
    assert pool == [HIT, HIT, MISS, MISS, "#9e9e9e", "#9e9e9e", "#eeeeee", "#eeeeee"]
    legend, drawn = _legend_and_drawn(fig)
    assert {"free", "the last request's hit (found in the tree)", "what it computed (now cached)",
            "cached, not used by it", _OUTLINE} == set(legend)
    assert all(c in drawn for name, c in legend.items() if name != _OUTLINE)
    assert "found in the tree" in fig.data[0].text[0] and "computed" in fig.data[0].text[2]
    legend, _ = _legend_and_drawn(serve_view.dashboard_figure(_finished(("computed", "computed", "computed"))))
    assert set(legend) == {"free", "what it computed (now cached)", _OUTLINE}  # R1 on an empty tree: no hit, no grey


_OUTLINE = serve_view._OUTLINE_NAME


def test_a_cached_block_is_outlined_and_a_free_one_is_plain():
    """Review of lesson 12's dashboard: a cached block (held by the tree only, no running request)
    looked like a free one once dimmed. Now every block only the tree holds keeps its colour in a dark
    outline, free blocks are plain light grey with none, and the legend's swatches are drawn the same."""
    fig = serve_view.dashboard_figure(_finished(("hit", "computed", "")))
    widths = list(fig.data[0].marker.line.width)
    assert widths == [2] * 6 + [0, 0], widths
    swatch = {t.name: t.marker.line.width for t in fig.data if t.showlegend}
    assert swatch["free"] == 0 and swatch["cached, not used by it"] == 2 and swatch[_OUTLINE] == 3, swatch
    running = _state()                                     # a block a request holds is not outlined
    st = running["blocks"]["state"]
    got = list(serve_view.dashboard_figure(running).data[0].marker.line.width)
    assert got == [2 if x == 2 else 0 for x in st], (got, st)


@pytest.mark.parametrize("classroom", [False, True])
def test_the_path_of_the_last_request_reads_as_one_text_in_whole_words(classroom):
    """Issue 28 reviews of lesson 12: the tree's labels were cut to fragments ("istant: >>>…"), and
    then the path's text, one label per node, was still split where the nodes are, at page
    boundaries ("customer-ser" | "vice"). The path is now one text under the tree, the hit part in
    green and the computed part in blue, wrapped at spaces to the tree's width, whatever the pages;
    no text on the tree's lines (they crossed it); every node keeps its whole text in its tooltip."""
    import re

    from kvlab import viz

    viz.classroom(classroom)
    try:
        s = _finished(("hit", "hit", "computed"))
        s["tree"][0]["text"] = "system: You are the customer-ser"
        s["tree"][1]["text"] = "vice assistant of a shop. "
        s["tree"][2]["text"] = "How do I apply for a refund?"
        fig = serve_view.dashboard_figure(s)
        th = viz.palette.theme()
    finally:
        viz.classroom(False)
    labels = [a for a in fig.layout.annotations if "path" in (a.name or "")]
    assert len(labels) == 1, [a.text for a in fig.layout.annotations]
    text = labels[0].text
    plain = re.sub(r"<[^>]+>", "", text.replace("<br>", " "))
    assert "customer-service assistant of a shop." in plain and "How do I apply for a refund?" in plain, plain
    green, blue = re.findall(r"color:(#[0-9a-f]{6})", text)[0], re.findall(r"color:(#[0-9a-f]{6})", text)[-1]
    assert (green, blue) == ("#1b7a1b", "#1f5f99"), text
    lines = [re.sub(r"<[^>]+>", "", ln) for ln in text.split("<br>")]
    assert all(len(ln) * 0.6 * th.font_size <= 0.66 * min(th.grid_width, 840) for ln in lines), lines
    assert "customer-ser" in fig.data[2].hovertext[1]                   # each node's own text in its tooltip
    assert "customer-service … How" not in plain                        # (no node here is cut by the server)
    assert serve_view._node_label(" apply for a refund?", 10, 2) == "apply for<br>a refund?"
    assert serve_view._node_label("assistant:\nHello there", 8) == "assista…"
    assert serve_view._node_label("apply for a refund?", 10) == "apply for…"     # a cut after a whole word


def test_recorded_tree_labels_never_end_inside_a_word():
    """Review of 0430388 (lesson 12 screenshots): labels cut to ~8 characters inside words
    ("apply fo…", "system: Yo…"). A label ends after its last whole word ("…"), and where the
    tree's rows leave room it has two lines."""
    s = _branchy()
    fig = serve_view.dashboard_figure(s)
    labels = [t for t in fig.data[2].text[1:]]
    texts = {" ".join(x["text"].split()) for x in s["tree"]}
    for label in labels:
        body = label.replace("<br>", " ").strip("…")
        if label.endswith("…"):
            assert any(f"{body} " in f"{t} " or f"{body}" == t for t in texts) or " " not in body, label
    assert any("<br>" in t for t in labels), labels


def test_the_request_menu_replays_the_cache_after_the_request_picked(monkeypatch):
    """Issue 28 review of lesson 12: after Run All the only control was the stepper. A menu of the
    requests shows the cache right after the one picked (its hit and computed blocks coloured);
    the menu and the stepper's slider follow each other."""
    monkeypatch.setenv("KVLAB_STATIC", "0")
    states = [_finished(("computed", "", "")), _finished(("hit", "computed", "")), _finished(("hit", "hit", "hit"))]
    st = serve_view.dashboard_stepper(states, ["after R1: 8 cached", "after R2: 4 cached", "after ana1: 24"])
    menu = st.request_menu
    assert [label for label, _ in menu.options] == ["R1", "R2", "ana1"]
    assert any(menu is k for row in st.widget.children for k in getattr(row, "children", ()))
    menu.value = 1
    assert st.index == 1 and st._slider.value == 2
    pool = st._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]["data"][0]["marker"]["color"]
    assert pool[:4] == [HIT, HIT, MISS, MISS]
    st._slider.value = 3
    assert menu.value == 2 and st.index == 2


def test_the_live_frame_turns_into_the_recording_when_the_servers_stop(monkeypatch):
    """Review of 6b9afee (lesson 12, cell 9): after Run All the page's link pointed at a server the
    last cell had stopped, and nothing said so. The live frame comes with a link that says how long
    it works; once the servers stop, the recording says the page at that address is gone and how
    to bring it back."""
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj))

    def display(obj, display_id=False):
        shown.append(("display", obj))
        return Handle() if display_id else None

    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setenv("KVLAB_STATIC", "0")
    lab = Lab(workers=[], model="m")
    serve_view.show_dashboard("http://x/dashboard", [_state()], ["after R1"], lab=lab)
    assert [k for k, _ in shown] == ["display"] and type(shown[0][1]).__name__ == "HTML"
    live = shown[0][1].data
    assert '<iframe' in live and 'src="http://x/dashboard"' in live
    assert 'href="http://x/dashboard" target="_blank"' in live and "Run All runs section 7 too" in live
    # review r5: a whole run ends with the servers stopped; both texts say how to get the page live again
    assert "Run All Above Selected Cell" in live and "keep running" in live
    lab.stop()
    assert [k for k, _ in shown] == ["display", "update"]
    box = shown[1][1]
    assert "kvlab-stepper" in box.children[0]._dom_classes  # the controls first, the picture under them
    said = box.children[1].value
    assert "Recorded" in said and "Pick a request" in said
    assert "http://x/dashboard no longer answers" in said and "start them again" in said
    assert "Run All Above Selected Cell" in said and "last cell" in said
    shown.clear()
    serve_view.show_dashboard("http://x/dashboard", [_state()], ["after R1"], lab=lab)  # drawn again, stopped
    assert [k for k, _ in shown] == ["display"] and "kvlab-stepper" in shown[0][1].children[0]._dom_classes
    with pytest.raises(TypeError, match="callable"):
        lab.on_stop("not a function")


def test_the_page_size_control_reruns_the_lessons_requests(monkeypatch):
    """Issue 28 review of lesson 12: no control for the lesson's parameters. The page size re-runs
    the notebook's own requests through the server's cache code; a bigger page finds fewer tokens,
    a page size not offered is refused with the state unchanged."""
    monkeypatch.setenv("KVLAB_STATIC", "0")
    shop = list(range(100, 140))
    reqs = [("R1", shop + [1, 2, 3], [9, 9]), ("R2", shop + [4, 5], [7]), ("R3", shop + [1, 2, 6, 6], [])]
    c = serve_view.served_page_size_control(reqs, {"R1": 0, "R2": 40, "R3": 40}, server_page=4, slots=384)
    assert c.widget is not None and c.result["matched"] == {"R1": 0, "R2": 40, "R3": 40}
    assert "reported 80 cached (measured)" in c.caption()
    c.set(page_size=16)
    assert c.result["matched"] == {"R1": 0, "R2": 32, "R3": 32} and "Pages of 16 tokens" in c.caption()
    assert "with 1-token pages" in c.caption()
    c.set(page_size=1)
    assert c.result["matched"]["R3"] == 42
    assert "with 1-token pages" not in c.caption()   # review r6: "... 1265 (80%; with 1-token pages 1265)"
    with pytest.raises(ValueError, match="32"):
        c.set(page_size=32)
    assert c.page_size == 1 and c.result["matched"]["R3"] == 42


def _branchy() -> dict:
    """A recorded frame with a tree that branches up and down: root -> A -> (B, C -> (D, E)), F."""
    spec = [(1, 0, "system: You are the customer-ser", "hit"), (2, 1, "vice assistant of a shop.", "hit"),
            (3, 1, "vice and more", ""), (4, 3, " How do I apply for a refund?", ""), (5, 3, " When will it ship?", ""),
            (6, 0, "You grade homework.", "")]
    tree = [{"id": i, "parent": p, "tokens": 8, "text": t, "mark": m, "lock": 0, "evicted": False, "tier": "device",
             "kv": [2 * (i - 1), 2 * i - 1]} for i, p, t, m in spec]
    return {"num_blocks": 16, "block_size": 4, "used_blocks": 12, "tree_nodes": 6, "tree_tokens": 48,
            "blocks": {"state": [2] * 12 + [0] * 4, "ref": [1] * 12 + [0] * 4,
                       "holders": [["tree"]] * 12 + [[]] * 4}, "tree": tree, "evicted_nodes": []}


@pytest.mark.parametrize("classroom", [False, True])
def test_the_recorded_tree_labels_its_nodes_and_no_edge_crosses_a_label(classroom):
    """Review of 6b9afee (lesson 12, the recorded dashboard): the tree's nodes had no labels (only
    tooltips; the round before, labels under straight edges had been crossed by them). Each node
    is labelled under it with the start of its text ("…" where a page boundary cut a word), and
    the edges are elbows: no segment passes through a label's box (measured in pixels)."""
    from kvlab import viz

    viz.classroom(classroom)
    try:
        fig = serve_view.dashboard_figure(_branchy())
        th = viz.palette.theme()
    finally:
        viz.classroom(False)
    edges, dots = fig.data[1], fig.data[2]
    assert dots.mode == "markers+text" and dots.textposition == "bottom center"
    assert dots.text[0] == "root" and dots.text[2].startswith("…vice") and dots.text[1].startswith("system")
    assert all(t for t in dots.text) and dots.text[4].startswith("How")    # a node after a space: a whole word
    lay = fig.layout
    W = (lay.width or 840) - lay.margin.l - lay.margin.r
    H = lay.height - lay.margin.t - lay.margin.b
    (x0, x1), (y0, y1) = lay.xaxis2.range, lay.yaxis2.range
    (dx0, dx1), (dy0, dy1) = lay.xaxis2.domain, lay.yaxis2.domain

    def px(x, y):     # data -> pixels from the plot area's top left
        return (dx0 + (dx1 - dx0) * (x - x0) / (x1 - x0)) * W, (1 - (dy0 + (dy1 - dy0) * (y - y0) / (y1 - y0))) * H

    boxes = []
    for x, y, text, size in zip(dots.x, dots.y, dots.text, dots.marker.size):
        cx, cy = px(x, y)
        rows = text.split("<br>")                                      # a label of one or two lines
        w = max(map(len, rows)) * 0.6 * th.font_size
        boxes.append((cx - w / 2, cy + size / 2 + 1, cx + w / 2, cy + size / 2 + 1.2 * th.font_size * len(rows)))
    pts = list(zip(edges.x, edges.y))
    segs = [(px(*a), px(*b)) for a, b in zip(pts, pts[1:]) if None not in a + b]
    assert segs and all(a[0] == b[0] or a[1] == b[1] for a, b in segs)   # elbows: each piece level or upright
    for (ax, ay), (bx, by) in segs:
        for l, t, r, b in boxes:
            crosses = (min(ax, bx) < r and max(ax, bx) > l and min(ay, by) < b and max(ay, by) > t)
            assert not crosses, ((ax, ay, bx, by), (l, t, r, b))


def test_review_r5_the_router_command_is_explained_flag_by_flag():
    """Review r5 of lesson 12: the router's flags were left to its --help. The lesson prints the command
    Router.launch runs, one line a flag saying why it is there; every flag is one the installed router
    accepts, everything listens on 127.0.0.1, and no threshold is set (exercise 2 asks for those)."""
    from kvlab.serve.router import LAUNCH_FLAG_WHY, explain_command, launch_command, router_options

    cmd = launch_command(["http://127.0.0.1:8001", "http://127.0.0.1:8002"], "cache_aware", 30001, 29001)
    lines = explain_command(cmd)
    flags = [a for a in cmd if a.startswith("--")]
    assert [line.split(" ", 1)[0] for line in lines] == flags and set(flags) == set(LAUNCH_FLAG_WHY)
    assert lines[0] == ("--worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002: "
                        + LAUNCH_FLAG_WHY["--worker-urls"])
    assert set(flags) <= set(router_options()) or not importlib_has_router()
    assert cmd[cmd.index("--host") + 1] == cmd[cmd.index("--prometheus-host") + 1] == "127.0.0.1"
    assert not any("threshold" in f for f in flags)
    assert explain_command(cmd[:3] + ["--max-tree-size", "5"]) == ["--max-tree-size 5: not one the lesson uses"]


def importlib_has_router() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang_router") is not None


def test_the_router_figures_worker_colours_are_no_cache_states_colour():
    """Lesson 12's router figure (review r6): W0 was orange, the live page's copy-on-write outline
    and lesson 10's "loading". A worker's colour is none of the cache states' marks."""
    from kvlab.viz.palette import EVICTED, FREE, HIGHLIGHT, HIT, MISS, UNOWNED
    from kvlab.viz.serve_view import WORKER_COLORS

    states = {"#ff7f0e", "#ff0000", "#eeeeee", "#9e9e9e", "#222222", EVICTED, FREE, HIGHLIGHT, HIT, MISS, UNOWNED}
    assert len(set(WORKER_COLORS)) == len(WORKER_COLORS) and not states & set(WORKER_COLORS)
