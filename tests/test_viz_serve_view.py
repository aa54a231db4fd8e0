"""Lesson 12's recorded dashboard (issue 28, the review of lesson 12): one meaning per colour, the
live page's request colours the recording's, tree labels on one line, and the live frame replaced
by the recording, in place, once the servers stop (after Run All the frame was dead)."""
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
                      "evicted": False, "tier": "device"},
                     {"id": 2, "parent": 1, "tokens": 4, "text": "bot:\n ok", "mark": "", "lock": 0,
                      "evicted": False, "tier": "device"}],
            "evicted_nodes": []}


def test_the_live_page_and_the_recording_colour_requests_alike():
    page = (ROOT / "kvlab" / "serve" / "static" / "dashboard.html").read_text()
    palette = re.search(r"const PALETTE = \[([^\]]*)\]", page).group(1)
    assert tuple(re.findall(r'"(#[0-9a-f]{6})"', palette)) == serve_view.DASHBOARD_REQUEST_COLORS
    marks = {HIT, MISS, "#ff0000", "#ff9900", "#eeeeee", "#9e9e9e", "#222222"}  # hit, computed, evicted, copy, greys
    assert not marks & set(serve_view.DASHBOARD_REQUEST_COLORS)
    assert "JSON.stringify(t).slice(1, -1)" not in page  # a label printed "\n" literally


def test_each_colour_of_the_recording_means_one_thing():
    fig = serve_view.dashboard_figure(_state())
    legend = {t.name: t.marker.color for t in fig.data if t.showlegend}
    colours = list(legend.values())
    assert len(colours) == len(set(colours)) + colours.count("#ffffff") - min(1, colours.count("#ffffff"))
    assert {"free", "cached in the tree", "shared (ref count > 1)", "req-2: running",
            "the last request's hit", "locked (a square node)"} <= set(legend)
    assert "req-1: running" not in legend  # its one block is shared: drawn black, so not listed in its colour
    drawn = set(fig.data[0].marker.color) | set(fig.data[2].marker.color)
    assert all(c in drawn for name, c in legend.items() if c != "#ffffff")  # nothing listed that is not drawn
    labels = list(fig.data[2].text)
    assert labels[1:] == ["system: You", "bot: ok"] and not any("\n" in t or "\\n" in t for t in labels)
    assert list(fig.data[2].marker.symbol) == ["circle", "square", "circle"]


def test_the_live_frame_turns_into_the_recording_when_the_servers_stop(monkeypatch):
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
    assert [k for k, _ in shown] == ["display"] and type(shown[0][1]).__name__ == "IFrame"
    lab.stop()
    assert [k for k, _ in shown] == ["display", "update"]
    box = shown[1][1]
    assert "Recorded" in box.children[0].value and "slider" in box.children[0].value
    assert "kvlab-stepper" in box.children[1]._dom_classes
    shown.clear()
    serve_view.show_dashboard("http://x/dashboard", [_state()], ["after R1"], lab=lab)  # drawn again, stopped
    assert [k for k, _ in shown] == ["display"] and "kvlab-stepper" in shown[0][1].children[1]._dom_classes
    with pytest.raises(TypeError, match="callable"):
        lab.on_stop("not a function")
