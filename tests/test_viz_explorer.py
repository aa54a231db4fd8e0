"""Lesson controls without a kernel (kvlab.viz.explorer, KVLAB_STATIC=frames) and the site's
exercise verdicts (scripts/site_exercises.py). Fast: no lesson runs, no browser."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvlab.viz.control import LiveControl
from kvlab.viz.explorer import EXPLORER_MIME, explorer_from_bundle, explorer_html, grid_sentence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


class _Square(LiveControl):
    def __init__(self):
        self.x, self.y = 2, "a"
        super().__init__(static=True)

    def update(self):
        self.result = {"sq": self.x * self.x}

    def caption(self):
        return f"{self.y}: {self.x}^2 = {self.result['sq']}"

    def site_grid(self):
        return {"x": [1, 2, 3], "y": ["a", "b"]}


def _states(block: str) -> list[dict]:
    data = re.search(r"<script type='application/json' class='kvlab-ex-data'>(.*?)</script>", block, re.S).group(1)
    return json.loads(data.replace("<\\/", "</"))["states"]


def test_every_combination_is_computed_in_order_and_the_control_is_left_as_it_was():
    c = _Square()
    block = c._explore()
    states = _states(block)
    assert [s["html"].split(">", 1)[1].split("<")[0] for s in states] == [
        "a: 1^2 = 1", "b: 1^2 = 1", "a: 2^2 = 4", "b: 2^2 = 4", "a: 3^2 = 9", "b: 3^2 = 9"]
    assert (c.x, c.y, c.result) == (2, "a", {"sq": 4})
    assert 'data-states="6"' in block and "precomputed at build time" in block and "x 1, 2, 3 × y a, b = 6 states" in block
    assert "<option value='1' selected>2</option>" in block and "<option value='0' selected>a</option>" in block  # x=2, y=a


def test_a_plotly_figure_per_state_keeps_its_template_once():
    import plotly.graph_objects as go

    box = {"n": 1}
    block = explorer_html(lambda **kw: box.update(kw), lambda: [go.Figure(go.Bar(y=[box["n"]]),
                                                                          layout=dict(template="plotly_white"))],
                          {"n": [1, 2, 3, 4, 5]})
    states = _states(block)
    assert [s["fig"]["data"][0]["y"] for s in states] == [[1], [2], [3], [4], [5]]
    assert {s["fig"]["template"] for s in states} == {"0"} and block.count('"template"') == 5  # keys, one template
    assert "type='range'" in block and "n 1 to 5 (5 values)" in grid_sentence({"n": [1, 2, 3, 4, 5]})


def test_bad_grids_and_bundles_are_refused_by_name():
    with pytest.raises(ValueError, match="at least one value"):
        explorer_html(lambda **kw: None, lambda: [], {"x": []})
    bundle = {"axes": [["rate", [1.0, 2.0], ["1 req/s", "2 req/s"]]], "states": [{"html": "<b>one</b>", "fig": None}]}
    with pytest.raises(ValueError, match="2 combinations and the bundle 1 states"):
        explorer_from_bundle(bundle)
    bundle["states"].append({"html": "<b>two</b>", "fig": None})
    block = explorer_from_bundle(bundle)
    assert 'data-states="2"' in block and "2 req/s" in block and [s["html"] for s in _states(block)] == [
        "<b>one</b>", "<b>two</b>"]
    assert EXPLORER_MIME.endswith("+json")


def test_a_control_shows_its_explorer_only_for_the_static_site(monkeypatch):
    from IPython.display import HTML

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, *a, **k: shown.append(obj))
    monkeypatch.setenv("KVLAB_STATIC", "frames")
    _Square()._ipython_display_()
    assert len(shown) == 1 and isinstance(shown[0], HTML) and "kvlab-explorer" in shown[0].data
    shown.clear()
    monkeypatch.setenv("KVLAB_STATIC", "1")
    _Square()._ipython_display_()
    assert shown and not any("kvlab-explorer" in getattr(o, "data", "") for o in shown if isinstance(o, HTML))


def test_the_site_shows_a_solution_with_only_the_imports_it_uses():
    from site_exercises import solution_for

    sol = solution_for("def translate(block_table, pos, block_size, bytes_per_token=1):\n    raise NotImplementedError",
                       ROOT / "solutions" / "04_paging.py")
    assert sol.startswith("def translate(") and "import" not in sol  # 04's solutions import deque and errors


def test_the_verdict_is_the_checker_run_on_the_function_not_a_fixed_pass(tmp_path):
    from site_exercises import verdict

    good = tmp_path / "good.py"
    good.write_text("def blocks_needed(n, bs):\n    if n < 0 or bs < 1:\n        raise ValueError(n)\n"
                    "    return -(-n // bs)\n")
    bad = tmp_path / "bad.py"
    bad.write_text("def blocks_needed(n, bs):\n    return n // bs\n")
    ok, wrong = verdict("blocks_needed", "blocks_needed", good), verdict("blocks_needed", "blocks_needed", bad)
    assert ok.passed and "PASS" in ok.text
    assert not wrong.passed and "FAIL" in wrong.text
