"""A running server drawn from what it sent: the dashboard's state as a plotly figure, a stepper
over recorded states (with a menu of the requests), and the router view (which worker each
conversation went to).

The figure colours the pool and the tree alike by what the last request did: green what it found
in the tree (the nodes and the blocks holding them, ``kv``), blue what it computed, grey what the
tree caches that it did not use; the text of the nodes on its path is written under the tree, and
every node has its text as a tooltip.

Used where the live page cannot be shown: a notebook run without a browser and the static site
(``KVLAB_STATIC=frames``: the recorded states become a player), and lesson 12's record of its run.
The state is the dict ``GET /dashboard/events`` sends (``kvlab.serve.dashboard``); the router view
is :func:`kvlab.serve.router.router_view`'s dict. Everything here is **measured** (a real server's
state), never simulated; the titles say so.

Example:
    >>> s = {"num_blocks": 4, "block_size": 4, "used_blocks": 1, "tree_nodes": 1, "tree_tokens": 4,
    ...      "blocks": {"state": [2, 0, 0, 0], "ref": [1, 0, 0, 0], "holders": [["tree"], [], [], []]},
    ...      "tree": [{"id": 1, "parent": 0, "tokens": 4, "text": "abcd", "mark": "hit", "lock": 0,
    ...                "evicted": False, "tier": "device"}], "evicted_nodes": []}
    >>> dashboard_data(s)["colors"][:2], dashboard_data(s)["node_colors"]
    (['#9e9e9e', '#eeeeee'], ['#2ca02c'])
    >>> dashboard_request_color("req-2"), dashboard_request_color("req-8")  # the live page's colours
    ('#e377c2', '#e377c2')
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from .palette import HIT, MISS, theme

__all__ = ["DASHBOARD_REQUEST_COLORS", "WORKER_COLORS", "served_page_size_control", "served_run", "block_marks", "dashboard_data", "dashboard_figure", "dashboard_request_color",
           "dashboard_stepper", "router_figure", "show_dashboard"]

_BLOCK = {0: "#eeeeee", 2: "#9e9e9e", 3: "#222222"}       # free, cached only, shared (as the live page)
_MARK = {"hit": HIT, "computed": MISS, "": _BLOCK[2]}     # a node the last request did not touch: cached
_EVICTED = "#ff0000"
# A block only the tree holds (state 2: cached, no running request) keeps its colour inside this dark
# outline; a free block is plain light grey (as the live page, where the outline survives dimming).
_TREE_ONLY = ("#333333", 2)
_OUTLINE_NAME = "dark outline on a block: held by the tree only (no running request)"
# The live page's request colours (kvlab/serve/static/dashboard.html, PALETTE; a test compares them):
# none of them is a mark's (red evicted, orange copy-on-write, green hit, blue computed, the greys).
DASHBOARD_REQUEST_COLORS = ("#9467bd", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#f7b6d2")
# Workers: brown and olive first, colours no cache state uses (orange is the live page's copy-on-write
# outline and lesson 10's "loading"), then request colours for a third and fourth worker.
WORKER_COLORS = ("#8c564b", "#bcbd22", "#9467bd", "#17becf")


def _tree_xy(nodes: list[dict]) -> dict[int, tuple[float, float]]:
    """Depth on x, leaves stacked on y (parents centred on their children), as the live page."""
    kids: dict[int, list[int]] = {}
    for n in nodes:
        kids.setdefault(n["parent"], []).append(n["id"])
    pos: dict[int, tuple[float, float]] = {}
    leaf = [0]

    def place(i: int, depth: int) -> None:
        ch = kids.get(i, [])
        for c in ch:
            place(c, depth + 1)
        if ch:
            ys = [pos[c][1] for c in ch]
            pos[i] = (depth, (min(ys) + max(ys)) / 2)
        else:
            pos[i] = (depth, -leaf[0])
            leaf[0] += 1
    place(0, 0)
    return pos


def dashboard_request_color(rid: str) -> str:
    """A request's colour on the dashboard: by the number in its id, as the live page."""
    digits = "".join(ch for ch in str(rid) if ch.isdigit())
    return DASHBOARD_REQUEST_COLORS[int(digits or 0) % len(DASHBOARD_REQUEST_COLORS)]


def block_marks(state: dict) -> list[str]:
    """Per block of the pool, what the last request did with it: "hit" (a block of a tree node it
    found), "computed" (a block of a node it computed and cached), else "".

    Example: a node marked "hit" holding blocks [0, 1] -> ``["hit", "hit", "", ...]``."""
    marks = [""] * state["num_blocks"]
    for n in state["tree"]:
        for b in n.get("kv", ()):
            if n["mark"] and 0 <= b < len(marks):
                marks[b] = n["mark"]
    return marks


def dashboard_data(state: dict) -> dict:
    """What the figure draws: each block's colour (the last request's hit green and computed blue,
    as its tree nodes; else free, cached, shared, or a running request's colour), and each tree
    node's colour (hit green, computed blue, evicted white) and label; ``outlined``: the blocks only
    the tree holds (cached, no running request), drawn in a dark outline so none reads as free."""
    holders, colors = state["blocks"]["holders"], []
    marks = block_marks(state)
    for b, st in enumerate(state["blocks"]["state"]):
        reqs = [h for h in holders[b] if h != "tree"]
        colors.append(_MARK[marks[b]] if marks[b] and st in (2, 3) else
                      _BLOCK[st] if st != 1 else dashboard_request_color(reqs[0] if reqs else "?"))
    nodes = list(state["tree"]) + list(state.get("evicted_nodes", []))
    return {"colors": colors, "nodes": nodes, "block_marks": marks,
            "outlined": [st == 2 for st in state["blocks"]["state"]],
            "node_colors": ["#ffffff" if n["evicted"] else _MARK[n["mark"]] for n in nodes]}


def _legend_traces(state: dict, d: dict) -> list[Any]:
    """One legend entry per meaning drawn in this state (each colour means one thing)."""
    import plotly.graph_objects as go

    blocks, entries = state["blocks"], []
    drawn, outlined = set(d["colors"]), d["outlined"]
    edge_of = {c: _TREE_ONLY if any(o and x == c for x, o in zip(d["colors"], outlined)) else ("#888", 0)
               for c in drawn}                                 # a swatch outlined as its blocks are
    if _BLOCK[0] in drawn:
        entries.append(("free", _BLOCK[0], "square", ("#888", 0)))
    marks = {n["mark"] for n in d["nodes"] if not n["evicted"]} | set(d["block_marks"])
    entries += [(t, _MARK[m], "square", edge_of.get(_MARK[m], ("#888", 0)))
                for m, t in (("hit", "the last request's hit (found in the tree)"),
                             ("computed", "what it computed (now cached)")) if m in marks]
    if _BLOCK[2] in drawn or "" in {n["mark"] for n in d["nodes"] if not n["evicted"]}:
        entries.append(("cached, not used by it", _BLOCK[2], "square", edge_of.get(_BLOCK[2], ("#888", 0))))
    if any(outlined):  # the swatch an outlined block of this state (its colour in the dark outline): a white
        # square with a dark edge read as "locked (a square node)" (review r7 of 12)
        example = next(c for c, o in zip(d["colors"], outlined) if o)
        entries.append((_OUTLINE_NAME, example, "square", (_TREE_ONLY[0], _TREE_ONLY[1] + 1)))
    if _BLOCK[3] in drawn:
        entries.append(("shared (ref count > 1)", _BLOCK[3], "square", ("#888", 0)))
    running = sorted({next((h for h in hs if h != "tree"), "?") for hs, st in zip(blocks["holders"], blocks["state"])
                      if st == 1}, key=lambda r: (len(r), r))  # the requests whose colour a block shows
    entries += [(f"{rid}: running", dashboard_request_color(rid), "square", ("#888", 0)) for rid in running]
    if any(n["evicted"] for n in d["nodes"]):
        entries.append(("evicted (its ghost)", "#ffffff", "circle", (_EVICTED, 1)))
    if any(n.get("lock") for n in d["nodes"]):
        entries.append(("locked (a square node)", "#ffffff", "square", ("#555", 1)))
    return [go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True, hoverinfo="skip",
                       marker=dict(symbol=sym, size=14, color=fill, line=dict(width=edge[1], color=edge[0])))
            for name, fill, sym, edge in entries]


def _node_label(text: str, chars: int = 12, lines: int = 1) -> str:
    """A tree node's label: its text with runs of white space as one space (no ``\n`` shown),
    wrapped at spaces into at most ``lines`` lines of ``chars`` characters (``<br>`` between them),
    ``…`` where it is cut: after the last whole word that fits (inside a word only when the first
    word alone is longer than a line).

    Example: ``_node_label("assistant:\nHello there", 8) -> 'assista…'``;
    ``_node_label(" apply for a refund?", 10, 2) -> 'apply for<br>a refund?'``;
    ``_node_label("apply for a refund?", 10) -> 'apply for…'``."""
    words, out = " ".join(text.split()).split(" "), [""]
    for w in words:
        while len(w) > chars:                                # a word longer than a line: cut it
            if out[-1]:
                out.append("")
            out[-1], w = w[:chars], w[chars:]
            out.append("")
        if out[-1] and len(out[-1]) + 1 + len(w) > chars:
            out.append("")
        out[-1] = f"{out[-1]} {w}".strip()
    out = [x for x in out if x]
    if len(out) > lines or (out and len(out[-1]) > chars):
        out = out[:lines]
        last = out[-1]
        while len(last) > chars - 1 and " " in last:          # drop whole words until "…" fits
            last = last.rsplit(" ", 1)[0]
        out[-1] = (last if len(last) <= chars - 1 else last[:chars - 1]) + "…"
    return "<br>".join(out)


def _pool_trace(state: dict, d: dict, cols: int, size: int) -> Any:
    import plotly.graph_objects as go

    n = state["num_blocks"]
    what = {"hit": "found in the tree by the last request", "computed": "computed by the last request"}
    return go.Scatter(x=[b % cols for b in range(n)], y=[-(b // cols) for b in range(n)], mode="markers",
                      marker=dict(symbol="square", size=size, color=d["colors"],
                                  line=dict(width=[_TREE_ONLY[1] if o else 0 for o in d["outlined"]], color=_TREE_ONLY[0])),
                      text=[f"block {b}: ref count {state['blocks']['ref'][b]}"
                            + (f", {what[d['block_marks'][b]]}" if d["block_marks"][b] else "") for b in range(n)],
                      hoverinfo="text", showlegend=False)


def _short_label(node: dict, parent_text: str, chars: int, lines: int = 1) -> str:
    """A node's label on the tree: the start of its text, ``lines`` lines of at most ``chars``; "…"
    first where it starts inside a word (a page boundary splits words: "istant" after "ass").

    Example: ``_short_label({"text": "istant: hello"}, "You are the ass", 12) -> '…istant:…'``."""
    mid = (parent_text[-1:].isalnum() or parent_text.endswith("…")) and node["text"][:1].isalnum()   # "…": cut by the server
    text = " ".join(node["text"].split())
    return _node_label(("…" if mid else "") + text, chars, lines)


def _tree_traces(d: dict, th: Any = None, width_px: float = 560, lines: int = 1) -> tuple[list[Any], dict, int]:
    """The tree's edges and nodes (depth on x), each node labelled under it with the start of its
    text, cut to its column (the whole text is its tooltip, and the last request's path is written
    out under the tree, :func:`_path_labels`). The edges are elbows: out of a node to half-way to
    the next column, along it, then into the child, so no edge passes under a node, where its
    label is (a straight edge to a child below crossed it)."""
    import plotly.graph_objects as go

    nodes = d["nodes"]
    live = {0} | {x["id"] for x in nodes}
    pos = _tree_xy([x for x in nodes if x["parent"] in live])
    shown = [x for x in nodes if x["id"] in pos]
    ex, ey = [], []
    for x in shown:
        (px, py), (cx, cy) = pos[x["parent"]], pos[x["id"]]
        ex += [px, (px + cx) / 2, (px + cx) / 2, cx, None]
        ey += [py, py, cy, cy, None]
    colour = dict(zip((x["id"] for x in nodes), d["node_colors"]))
    depth = max([p[0] for p in pos.values()] + [1])
    edges = go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#bbb", width=1), hoverinfo="skip", showlegend=False)
    font = th.font_size if th is not None else 12
    chars = max(4, int(0.8 * width_px / (depth + 1.2) / (0.6 * font)))   # inside its column, clear of the elbows
    text_of = {x["id"]: x["text"] for x in shown}
    dots = go.Scatter(
        x=[pos[0][0]] + [pos[x["id"]][0] for x in shown], y=[pos[0][1]] + [pos[x["id"]][1] for x in shown],
        mode="markers+text", hoverinfo="text", textposition="bottom center", textfont=dict(size=font, color="#333"),
        name="tree nodes", cliponaxis=False,                                  # the lowest label may hang below
        text=["root"] + [_short_label(x, text_of.get(x["parent"], ""), chars, lines) for x in shown],
        hovertext=["root"] + [f"node {x['id']}: {x['tokens']} tokens" + (" (evicted)" if x["evicted"] else "")
                              + "<br>" + _node_label(x["text"], 40, 3) for x in shown],
        marker=dict(size=[10] + [8 + 2 * math.sqrt(x["tokens"]) for x in shown],
                    symbol=["circle"] + ["square" if x.get("lock") else "circle" for x in shown],
                    color=["#555"] + [colour[x["id"]] for x in shown],
                    line=dict(width=[0] + [3 if x["evicted"] else 0 for x in shown], color=_EVICTED)),
        showlegend=False)
    return [edges, dots], pos, depth


_PATH_TEXT = {"hit": "#1b7a1b", "computed": "#1f5f99"}      # the marks' hues, dark enough for text


def _join_texts(texts: Sequence[str]) -> str:
    """Node texts joined in path order. The server cuts a long node's text (``…`` at its end), so
    the next node's text starts in a word that is not all there: a cut text loses its last,
    partial word and ends in " …", and the next text loses its first one, so no word reads cut.

    Example: ``_join_texts(["system: You", " are the customer-service as…", "istant: hi"])``
    -> ``'system: You are the customer-service … hi'``."""
    out, cut = "", False
    for t in texts:
        if cut:
            t = t[len(t) - len(t.lstrip()):] if t[:1].isspace() else (t.split(None, 1)[1:] or [""])[0]
            t = " " + t
        cut = t.endswith("…")
        if cut:
            body = t[:-1]
            t = (body.rsplit(None, 1)[0] if " " in body.strip() else body) + " …"
        out += t
    return out


def _path_labels(d: dict, pos: dict, depth: int, th: Any, width_px: float, max_lines: int = 4) -> list[dict]:
    """The last request's path as ONE text under the tree (an annotation named "path"): its nodes'
    texts joined, the hit part in green and the computed part in blue, wrapped at spaces to the
    tree's width, so a word split across two nodes (a page boundary) reads whole. A path too long
    for ``max_lines`` loses the start of its hit part (``…``)."""
    path = sorted((x for x in d["nodes"] if x["mark"] and not x["evicted"] and x["id"] in pos),
                  key=lambda x: pos[x["id"]][0])
    if not path:
        return []
    chars = max(12, int(width_px / (0.6 * th.font_size)))
    parts = [(m, " ".join(_join_texts([x["text"] for x in path if x["mark"] == m]).split())) for m in ("hit", "computed")]
    words = [(m, w) for m, t in parts for w in t.split(" ") if w]
    while sum(len(w) + 1 for _, w in words) > chars * max_lines - 2 and len(words) > 1:
        words.pop(0)                                          # the start of the hit part goes first
        words[0] = (words[0][0], "…" + words[0][1].lstrip("…"))
    lines: list[list[tuple[str, str]]] = [[]]
    for m, w in words:
        if lines[-1] and sum(len(x) + 1 for _, x in lines[-1]) + len(w) > chars:
            lines.append([])
        lines[-1].append((m, w))

    def html(line: list[tuple[str, str]]) -> str:
        runs: list[list] = []
        for m, w in line:
            if runs and runs[-1][0] == m:
                runs[-1][1].append(w)
            else:
                runs.append([m, [w]])
        return " ".join(f"<span style='color:{_PATH_TEXT[m]}'>{' '.join(ws)}</span>" for m, ws in runs)

    return [dict(name="path", x=0, xref="x2 domain", y=0, yref="paper", yanchor="bottom", xanchor="left",
                 showarrow=False, align="left", text="<br>".join(html(ln) for ln in lines),
                 font=dict(size=th.font_size))]


def dashboard_figure(state: dict, caption: str | None = "") -> Any:
    """The pool (left) and the radix tree (right) of one dashboard state (measured); under the tree
    the text of each node on the last request's path. ``caption=None``: no title (a stepper's
    caption stands above it), 40 px less."""
    from plotly.subplots import make_subplots

    th, d = theme(), dashboard_data(state)
    n = state["num_blocks"]
    width = min(th.grid_width, 840)
    top = 60 if caption is not None else 24                             # the title, or the subplot titles only
    height = (430 if th.high_contrast else 480) - 60 + top
    cols = max(1, math.ceil(math.sqrt(n * 0.75)))                       # a tall pool: the tree gets the width
    fig = make_subplots(rows=1, cols=2, column_widths=[0.3, 0.7], horizontal_spacing=0.03,
                        subplot_titles=(f"pool: {state['used_blocks']} of {n} blocks used",
                                        f"tree: {state['tree_nodes']} nodes, {state['tree_tokens']} tokens"))
    rows, plot_px = math.ceil(n / cols), height - top - 40 - 10           # the plot area: title, legend, margin
    fig.add_trace(_pool_trace(state, d, cols, max(8, min(22, int(0.26 * width / cols), int(0.72 * plot_px / rows)))),
                  1, 1)
    traces, pos, depth = _tree_traces(d, th, 0.66 * width)
    for t in traces:
        fig.add_trace(t, 1, 2)
    for t in _legend_traces(state, d):
        fig.add_trace(t, 1, 1)
    labels = _path_labels(d, pos, depth, th, 0.66 * width)
    rows_px = (5 * 1.25 * th.font_size + 8) if labels else 0
    low = min([p[1] for p in pos.values()] + [0])
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_xaxes(range=[-0.5, cols - 0.5], row=1, col=1)
    fig.update_xaxes(range=[-0.6, depth + 0.6], row=1, col=2)
    bottom = min(0.5, rows_px / plot_px)
    fig.update_yaxes(range=[low - 0.6, 0.6], domain=[bottom, 1], row=1, col=2)
    row_px = (1 - bottom) * plot_px / (1.2 - low)                       # one leaf row of the tree, in pixels
    if row_px < 1.25 * th.font_size + 6:                                # too many leaves for labels: tooltips only
        fig.update_traces(mode="markers", text=None, selector=dict(name="tree nodes"))
    elif row_px >= 2 * 1.25 * th.font_size + 14:                        # room for two lines a label
        two = _tree_traces(d, th, 0.66 * width, lines=2)[0][1].text
        fig.update_traces(text=two, selector=dict(name="tree nodes"))
    if caption is not None:
        fig.update_layout(title=dict(text=(caption or "the server's dashboard") + " (measured)",
                                     font=dict(size=th.title_size), x=0.01))
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.02, yanchor="top", font=dict(size=th.font_size)),
                      height=height, width=None if th.autosize else width,
                      autosize=th.autosize, template="plotly_white", font=dict(size=th.font_size),
                      margin=dict(l=10, r=10, t=top, b=10))
    fig.update_annotations(font=dict(size=th.font_size + 1))
    for a in labels:
        fig.add_annotation(**a)
    return fig


def _request_name(caption: str, i: int) -> str:
    """The request a recorded frame follows, from its caption: ``"after R2: ..." -> "R2"``."""
    head = caption.split(":", 1)[0]
    return head[len("after "):] if head.startswith("after ") and ":" in caption else f"step {i + 1}"


def dashboard_stepper(states: Sequence[dict], captions: Sequence[str], static: bool | None = None):
    """A stepper over recorded dashboard states (on the static site: a player of the frames). With
    a widget front end its controls end with a menu of the requests (``stepper.request_menu``): a
    request picked there shows the cache right after it, its hit and computed blocks coloured in
    the pool and the tree; the menu and the slider follow each other."""
    from .stepper import Frame, Stepper

    frames = [Frame(None, c, extra={"state": s}) for s, c in zip(states, captions)]
    stepper = Stepper(frames, lambda f: dashboard_figure(f.extra["state"], None), static=static,
                      title="the dashboard, recorded from this run (measured)")
    stepper.request_menu = None
    if stepper.widget is not None:
        import ipywidgets as W

        menu = W.Dropdown(options=[(_request_name(c, i), i) for i, c in enumerate(captions)], value=0,
                          description="after request", style={"description_width": "initial"},
                          layout=W.Layout(width="auto"))
        menu.add_class("kvlab-request-menu")
        menu.observe(lambda ch: stepper.index != ch["new"] and stepper.go(ch["new"]), names="value")
        stepper.slider.observe(lambda ch: setattr(menu, "value", ch["new"] - 1), names="value")
        row = next(k for k in stepper.widget.children if stepper.slider in getattr(k, "children", ()))
        row.children = (menu,) + tuple(row.children)
        stepper.request_menu = menu
    return stepper


_RECORDED = ("<p style='margin:2px 0'><b>Recorded</b>: {why}. These are the dashboard's states captured from "
             "this notebook's run, one after each request (measured, not simulated). Pick a request, or step through "
             "them: green is what that request found in the tree, blue what it computed; hover a node for its "
             "text.</p>")


def _frame_height() -> int:
    """The live page's frame: its whole page (732 px at 1500x1000), or in classroom mode what the
    projector's 599 px window leaves under the link's line, where the page shrinks its pool and
    tree to fit."""
    from .palette import is_classroom

    return 525 if is_classroom() else 760


# how to get the page live after a whole run, in JupyterLab's own menu words (review r5: Run All ends stopped)
_LIVE_AGAIN = ("select the lesson's last cell (section 7, the one that stops the servers) and use Run &gt; "
               "<i>Run All Above Selected Cell</i>: new servers, every request again, and they keep running")
_LIVE = ("<p style='margin:2px 0'>The server's page, live while the servers run: <a href=\"{url}\" "
         "target=\"_blank\">{url}</a>. The lesson's last cell (section 7) stops them, and Run All runs section 7 "
         "too; to keep this page live after a whole run, " + _LIVE_AGAIN + ".</p>")
_GONE = ("the servers have stopped (the lesson's last cell stops them), so the live page at {url} no longer "
         "answers; to see it live again, start them again: " + _LIVE_AGAIN + " (they get new ports)")


def show_dashboard(url: str, states: Sequence[dict], captions: Sequence[str], lab: Any = None) -> None:
    """In a live notebook the server's page itself (an IFrame of ``url``, the width of the output,
    as tall as the page) under a link to it that says how long it works; without one (static, the
    site: ``KVLAB_STATIC``), or once ``lab`` (a :class:`kvlab.serve.lab.Lab`) has stopped, the
    recorded ``states`` with a slider over them, said to be recorded (and, after a stop, that the
    page at ``url`` is gone). With ``lab`` the frame is replaced in place by the recording when
    the servers stop (a notebook run top to bottom stops them in its last cell)."""
    import html

    from IPython.display import HTML, display

    from .display import is_static
    from .palette import is_classroom

    def recorded(why: str) -> Any:
        stepper = dashboard_stepper(states, captions)
        if stepper.widget is None:
            return None
        import ipywidgets as W

        return W.VBox([stepper.widget, W.HTML(_RECORDED.format(why=why))], layout=W.Layout(max_width="100%"))

    gone = _GONE.format(url=html.escape(url))
    if is_static() or (lab is not None and lab.stopped):
        why = gone if lab is not None and lab.stopped else "the server is not running here"
        box = recorded(why)
        if box is None:
            display(HTML(_RECORDED.format(why=why)))
            display(dashboard_stepper(states, captions))
        else:
            display(box)
        return
    src = html.escape(url + ("?classroom=1" if is_classroom() else ""), quote=True)
    frame = f'<iframe src="{src}" width="100%" height="{_frame_height()}" frameborder="0"></iframe>'
    handle = display(HTML(_LIVE.format(url=html.escape(url, quote=True)) + frame), display_id=True)
    if lab is not None:
        lab.on_stop(lambda: handle.update(recorded(gone)))


def router_figure(views: dict[str, dict]) -> Any:
    """Per routing policy: which worker each conversation's turns went to (left), each worker's
    measured hit rate (right). ``views``: policy name -> :func:`kvlab.serve.router.router_view`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    th = theme()
    names = list(views)
    fig = make_subplots(rows=len(names), cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.12,
                        vertical_spacing=0.22, subplot_titles=[t for p in names for t in
                                                               (f"{p}: the worker of each turn", f"{p}: hit rate")])
    for r, policy in enumerate(names, 1):
        view = views[policy]
        for user, turns in sorted(view["conversations"].items()):
            fig.add_trace(go.Scatter(x=list(range(1, len(turns) + 1)), y=[user] * len(turns), mode="markers+text",
                                     text=[f"W{w}" for w in turns], textposition="middle center",
                                     textfont=dict(size=th.font_size, color="white"),
                                     marker=dict(symbol="square", size=28, color=[WORKER_COLORS[w % 4] for w in turns]),
                                     hoverinfo="text", showlegend=False), r, 1)
        ws = view["workers"]
        fig.add_trace(go.Bar(x=[f"W{i}" for i in range(len(ws))], y=[100 * w["hit_rate"] for w in ws],
                             marker_color=[WORKER_COLORS[i % 4] for i in range(len(ws))],
                             text=[f"{100 * w['hit_rate']:.0f}% of {w['prompt_tokens']}" for w in ws],
                             textposition="outside", showlegend=False), r, 2)
        fig.update_xaxes(title_text="turn", dtick=1, row=r, col=1)
        fig.update_yaxes(range=[0, 119], title_text="% cached", row=r, col=2)
    fig.update_layout(title=dict(text="sglang-router in front of two kvlab servers (measured)",
                                 font=dict(size=th.title_size), x=0.01),
                      height=300 * len(names) + 60, width=None if th.autosize else min(th.grid_width, 840),
                      autosize=th.autosize, template="plotly_white", font=dict(size=th.font_size),
                      margin=dict(l=60, r=20, t=90, b=50))
    fig.update_annotations(font=dict(size=th.font_size + 1))
    return fig


SERVED_PAGE_SIZES = (1, 2, 4, 8, 16)


def served_run(requests: Sequence[tuple[str, Sequence[int], Sequence[int]]], page_size: int,
                slots: int) -> dict[str, dict[str, int]]:
    """The requests, in order, through the server's own cache code (a ``CacheManager`` of
    ``slots // page_size`` blocks of ``page_size`` tokens): per request, tokens matched and prefilled.

    >>> served_run([("R1", list(range(10)), [99]), ("R2", list(range(9)) + [7], [])], 4, 64)["matched"]
    {'R1': 0, 'R2': 8}
    """
    from ..reuse.cache_manager import CacheManager, serve_request

    cm = CacheManager(num_blocks=slots // page_size, block_size=page_size)
    out: dict[str, dict[str, int]] = {"matched": {}, "prefilled": {}, "prompt": {}}
    for name, prompt, output in requests:
        r = serve_request(cm, list(prompt), output=list(output), rid=name)
        out["matched"][name], out["prefilled"][name], out["prompt"][name] = r.matched_len, r.prefill_len, len(prompt)
    return out


def served_page_size_control(requests: Sequence[tuple[str, Sequence[int], Sequence[int]]], measured: dict[str, int],
                             server_page: int, slots: int, page_size: int | None = None, static: bool | None = None):
    """Lesson 12's control: the page size, re-running this notebook's requests (their own token ids,
    prompt and output, in the order sent) through the server's cache code in milliseconds; the bars
    are per request, the caption compares with what the server reported at its own page size.

    Example:
        >>> reqs = [("R1", list(range(40)), [99]), ("R2", list(range(30)) + [7, 8], [])]
        >>> c = served_page_size_control(reqs, {"R1": 0, "R2": 28}, server_page=4, slots=384, static=True)
        >>> c.result["matched"]["R2"], c.set(page_size=16), c.result["matched"]["R2"]
        (28, None, 16)
    """
    from .page_size_control import PageSizeControl

    class ServedPageSizeControl(PageSizeControl):
        css_class = "kvlab-page-size"

        def __init__(self) -> None:
            self.page_size = server_page if page_size is None else page_size
            self.check()
            self._one = served_run(requests, 1, slots)["matched"]
            super(PageSizeControl, self).__init__(static=static)

        def check(self) -> None:
            if self.page_size not in SERVED_PAGE_SIZES:
                raise ValueError(f"page_size must be one of {SERVED_PAGE_SIZES}, got {self.page_size!r}")

        def update(self) -> None:
            self.result = {**served_run(requests, self.page_size, slots), "matched_1": dict(self._one)}

        def caption(self) -> str:
            r, p = self.result, self.page_size
            total, found = sum(r["prompt"].values()), sum(r["matched"].values())
            return (f"Pages of {p} token{'s' if p != 1 else ''}: the tree finds {found} of the {total} prompt tokens of "
                    f"this notebook's {len(r['prompt'])} requests ({found / total:.0%}"
                    + (f"; with 1-token pages {sum(r['matched_1'].values())}" if p != 1 else "")   # review r6: not twice
                    + f"). The server, at pages of {server_page}, reported "
                    f"{sum(measured.values())} cached (measured). (Simulated: the server's own cache code on the "
                    f"requests' own token ids.)")

        def _inputs(self, W: Any) -> list[Any]:
            slider = W.SelectionSlider(options=list(SERVED_PAGE_SIZES), value=self.page_size,
                                       description="page size (tokens)", style={"description_width": "initial"},
                                       layout=W.Layout(width="min(420px, 100%)", padding="0 0 0 8px"))
            slider.add_class("kvlab-page-size-slider")
            slider.observe(lambda ch: self.set(page_size=ch["new"]), names="value")
            return [slider]

    return ServedPageSizeControl()
