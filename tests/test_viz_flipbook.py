"""The kernel-free stepper player (kvlab.viz.flipbook) and KVLAB_STATIC=frames, which the static
site uses. (tests/test_site.py plays one in Chromium.)"""
from __future__ import annotations

import json
import re

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab.memory.block_manager import BlockManager  # noqa: E402
from kvlab.viz.display import is_static, static_frames  # noqa: E402
from kvlab.viz.flipbook import flipbook_html  # noqa: E402
from kvlab.viz.stepper import Frame, Stepper  # noqa: E402


def _data(h: str) -> dict:
    raw = re.search(r"<script type='application/json' class='kvlab-fb-data'>(.*?)</script>", h, re.S).group(1)
    return json.loads(raw.replace("<\\/", "</"))


def test_frames_mode_is_static_and_named(monkeypatch):
    monkeypatch.setenv("KVLAB_STATIC", "frames")
    assert is_static() and static_frames()
    monkeypatch.setenv("KVLAB_STATIC", "1")
    assert is_static() and not static_frames()
    monkeypatch.setenv("KVLAB_STATIC", "framez")
    with pytest.raises(ValueError, match="frames"):
        is_static()


def test_memory_stepper_player_holds_every_frame_and_caption():
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.fork("R1", "R2")
    m.append("R2", 1)
    s = viz.memory_map_stepper(m.snapshots, m.log, static=True)
    s.go(1)
    h = s.flipbook_html()
    d = _data(h)
    n = len(s)
    assert d["kind"] == "plotly" and len(d["frames"]) == n == len(d["captions"])
    assert f'data-frames="{n}"' in h and f"max='{n}'" in h
    for i, cap in enumerate(d["captions"]):
        assert f"step {i + 1} / {n}:" in cap
    assert all(f["layout"] and f["data"] for f in d["frames"])
    assert d["frames"][0] != d["frames"][-1]
    assert s.index == 1  # the stepper stays where it was


def test_svg_frames_and_an_integrity_error_show_in_the_player():
    class Bad:
        def check_integrity(self):
            raise AssertionError("ref count 2 != 1 holder")

    frames = [Frame(None, "fine"), Frame(Bad(), "broken")]
    h = Stepper(frames, render=lambda f: f"<svg><text>{f.caption}</text></svg>", static=True).flipbook_html()
    d = _data(h)
    assert d["kind"] == "html" and d["frames"][1] == "<svg><text>broken</text></svg>"
    assert "integrity check failed" in d["captions"][1] and "integrity" not in d["captions"][0]


def test_player_data_cannot_close_its_script_tag():
    h = flipbook_html(["<p>a</script><script>alert(1)</script></p>"], ["step 1 / 1"])
    body = re.search(r"class='kvlab-fb-data'>(.*?)</script>", h, re.S).group(1)
    assert "</script>" not in body and json.loads(body.replace("<\\/", "</"))["frames"][0].startswith("<p>a</script>")
    with pytest.raises(ValueError, match="one caption per frame"):
        flipbook_html(["a", "b"], ["only one"])


def test_displaying_a_stepper_in_frames_mode_shows_the_player(monkeypatch):
    shown = []
    monkeypatch.setenv("KVLAB_STATIC", "frames")
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    Stepper([Frame(None, "a"), Frame(None, "b")], render=lambda f: f"<p>{f.caption}</p>")._ipython_display_()
    assert len(shown) == 1 and "kvlab-flipbook" in shown[0].data


def test_the_player_says_what_each_button_does_and_disables_prev_reset_and_next_at_the_ends():
    """Issue 28 (every lesson's steppers, here the static site's player): each button says on
    hover what it does; prev and reset are off at step 1 and next at the last step, in the page."""
    from browser_utils import browser_problems, chromium

    if browser_problems():
        pytest.skip("no Chromium here")
    h = flipbook_html(["<p>a</p>", "<p>b</p>", "<p>c</p>"], ["step 1 / 3", "step 2 / 3", "step 3 / 3"])
    with chromium() as b:
        page = b.new_page()
        page.set_content(f"<html><body>{h}</body></html>")

        def state():
            return page.evaluate("() => ['reset', 'prev', 'next'].map(k => document.querySelector('.kvlab-fb-' + k)"
                                 ".disabled)")

        titles = page.evaluate("() => [...document.querySelectorAll('.kvlab-flipbook button')].map(b => b.title)")
        assert len(titles) == 4 and all(len(t) > 10 for t in titles), titles
        assert state() == [True, True, False]
        page.click(".kvlab-fb-next")
        assert state() == [False, False, False]
        page.click(".kvlab-fb-next")
        assert state() == [False, False, True]
        page.click(".kvlab-fb-reset")
        assert state() == [True, True, False]
