"""A running server drawn from what it sent: the dashboard's state as a plotly figure, a stepper
over recorded states, and the router view (which worker each conversation went to).

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
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from .palette import HIT, MISS, request_color, theme

__all__ = ["dashboard_data", "dashboard_figure", "dashboard_stepper", "router_figure", "show_dashboard"]

_BLOCK = {0: "#eeeeee", 2: "#9e9e9e", 3: "#222222"}       # free, cached only, shared (as the live page)
_MARK = {"hit": HIT, "computed": MISS, "": "#c7c7c7"}
_WORKERS = ("#ff7f0e", "#9467bd", "#17becf", "#e377c2")


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


def dashboard_data(state: dict) -> dict:
    """What the figure draws: each block's colour, and each tree node's colour (hit green, computed
    blue, evicted white) and label."""
    holders, colors = state["blocks"]["holders"], []
    for b, st in enumerate(state["blocks"]["state"]):
        reqs = [h for h in holders[b] if h != "tree"]
        colors.append(_BLOCK[st] if st != 1 else request_color(reqs[0] if reqs else "?"))
    nodes = list(state["tree"]) + list(state.get("evicted_nodes", []))
    return {"colors": colors, "nodes": nodes,
            "node_colors": ["#ffffff" if n["evicted"] else _MARK[n["mark"]] for n in nodes]}


def dashboard_figure(state: dict, caption: str = "") -> Any:
    """The pool (left) and the radix tree (right) of one dashboard state (measured)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    th, d = theme(), dashboard_data(state)
    n = state["num_blocks"]
    cols = max(1, math.ceil(math.sqrt(n * 1.2)))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.42, 0.58], horizontal_spacing=0.04,
                        subplot_titles=(f"pool: {state['used_blocks']} of {n} blocks used",
                                        f"tree: {state['tree_nodes']} nodes, {state['tree_tokens']} tokens"))
    fig.add_trace(go.Scatter(x=[b % cols for b in range(n)], y=[-(b // cols) for b in range(n)], mode="markers",
                             marker=dict(symbol="square", size=max(8, min(26, 260 // cols)), color=d["colors"],
                                         line=dict(width=1, color="#888")),
                             text=[f"block {b}: ref count {state['blocks']['ref'][b]}" for b in range(n)],
                             hoverinfo="text", showlegend=False), 1, 1)
    nodes = d["nodes"]
    live = {0} | {x["id"] for x in nodes}
    pos = _tree_xy([x for x in nodes if x["parent"] in live])
    shown = [x for x in nodes if x["id"] in pos]
    ex, ey = [], []
    for x in shown:
        ex += [pos[x["parent"]][0], pos[x["id"]][0], None]
        ey += [pos[x["parent"]][1], pos[x["id"]][1], None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#bbb", width=1), hoverinfo="skip",
                             showlegend=False), 1, 2)
    colour = dict(zip((x["id"] for x in nodes), d["node_colors"]))
    label = [(x["text"][:11] + "…" if len(x["text"]) > 12 else x["text"]).replace("\n", " ") for x in shown]
    fig.add_trace(go.Scatter(
        x=[pos[0][0]] + [pos[x["id"]][0] for x in shown], y=[pos[0][1]] + [pos[x["id"]][1] for x in shown],
        mode="markers+text", text=["root"] + label, textfont=dict(size=th.font_size), hoverinfo="text",
        textposition=["middle left"] + ["bottom center" if pos[x["id"]][0] % 2 else "top center" for x in shown],
        hovertext=["root"] + [f"node {x['id']}: {x['tokens']} tokens" + (" (evicted)" if x["evicted"] else "")
                              for x in shown],
        marker=dict(size=[10] + [8 + 3 * math.sqrt(x["tokens"]) for x in shown],
                    color=["#555"] + [colour[x["id"]] for x in shown],
                    line=dict(width=[0] + [3 if x["evicted"] or x.get("lock") else 0 for x in shown],
                              color=["#000"] + ["#ff0000" if x["evicted"] else "#000" for x in shown])),
        showlegend=False), 1, 2)
    depth = max([p[0] for p in pos.values()] + [1])
    low = min([p[1] for p in pos.values()] + [0])
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_xaxes(range=[-0.9, depth + 0.7], row=1, col=2)
    fig.update_yaxes(range=[low - 0.8, 0.6], row=1, col=2)
    key = ("pool: light = free, mid grey = cached in the tree, black = shared, a colour = a running request; "
           "tree: green = the last request's hit, blue = what it computed, white = evicted")
    fig.update_layout(title=dict(text=(caption or "the server's dashboard") + f" (measured)<br><sup>{key}</sup>",
                                 font=dict(size=th.title_size), x=0.01),
                      height=420, width=None if th.autosize else min(th.grid_width, 840), autosize=th.autosize,
                      template="plotly_white", font=dict(size=th.font_size), margin=dict(l=10, r=10, t=110, b=10))
    fig.update_annotations(font=dict(size=th.font_size + 1))
    return fig


def dashboard_stepper(states: Sequence[dict], captions: Sequence[str], static: bool | None = None):
    """A stepper over recorded dashboard states (on the static site: a player of the frames)."""
    from .stepper import Frame, Stepper

    frames = [Frame(None, c, extra={"state": s}) for s, c in zip(states, captions)]
    return Stepper(frames, lambda f: dashboard_figure(f.extra["state"], "recorded dashboard"), static=static,
                   title="the dashboard, recorded from this run")


def show_dashboard(url: str, states: Sequence[dict], captions: Sequence[str], height: int = 640) -> None:
    """In a live notebook the server's page itself (an IFrame of ``url``, the width of the output);
    without one (static, the site: ``KVLAB_STATIC``) the recorded ``states``, said to be recorded."""
    from IPython.display import HTML, IFrame, display

    from .display import is_static
    from .palette import is_classroom

    if not is_static():
        display(IFrame(url + ("?classroom=1" if is_classroom() else ""), width="100%", height=height))
        return
    display(HTML("<p><b>Recorded</b>: the server is not running here, so these are the dashboard's states "
                 "captured from this notebook's run, one after each request (measured, not simulated).</p>"))
    display(dashboard_stepper(states, captions))


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
                                     marker=dict(symbol="square", size=28, color=[_WORKERS[w % 4] for w in turns]),
                                     hoverinfo="text", showlegend=False), r, 1)
        ws = view["workers"]
        fig.add_trace(go.Bar(x=[f"W{i}" for i in range(len(ws))], y=[100 * w["hit_rate"] for w in ws],
                             marker_color=[_WORKERS[i % 4] for i in range(len(ws))],
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
