"""Classroom mode's text sizes: every font a kvlab.viz figure sets is at least 12 px (16 px in
classroom mode), lesson-built plotly figures get the classroom sizes through plotly's default
template, and the page CSS that ``viz.classroom(True)`` shows enlarges printed text, tables
and widget text. (What the browser draws is checked by tests/test_browser.py.)
"""
from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)

import plotly.graph_objects as go  # noqa: E402
import plotly.io as pio  # noqa: E402

import kvlab.viz as viz  # noqa: E402
from kvlab.memory.block_manager import BlockManager  # noqa: E402
from kvlab.viz.palette import classroom_page_css, label_px  # noqa: E402


@pytest.fixture(autouse=True)
def _normal_theme():
    viz.classroom(False)
    yield
    viz.classroom(False)


def _font_sizes(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, size) of every font size set anywhere in a figure's JSON (fonts, textfonts, frames)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "size" and re.search(r"font$", path):
                for s in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(s, (int, float)):
                        yield path, s
            else:
                yield from _font_sizes(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _font_sizes(item, path)


def _figures() -> dict[str, Any]:
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.fork("R1", "R2")
    m.append("R2", 1)
    m.add_sequence("R3", 9)
    steps = viz.run_compare(viz.notes_trace(), capacity=48, block_size=4)
    big = BlockManager(num_blocks=512, block_size=16)  # small cells: labels must not shrink below the minimum
    for i in range(30):
        big.add_sequence(f"R{i}", 100 + 7 * i)  # 30 requests, 7 to 13 blocks each
    from kvlab.reuse.hicache_manager import HiCacheManager
    from kvlab.viz.tier_view import TierRecorder

    cm = HiCacheManager(4, 1, host_ratio=2, write_policy="write_through")
    rec = TierRecorder(cm)
    for i, p in enumerate(([1, 2, 3], [7, 8, 9], [1, 2, 3, 4])):
        cm.admit(f"R{i}", p)
        cm.cache_finished_req(f"R{i}", p)
        rec.snap(f"R{i} done")
    return {
        "tiers": viz.animate_tiers(rec.snapshots),
        "memory map": viz.memory_map_figure(m.snapshot()),
        "memory map, 512 blocks": viz.memory_map_figure(big.snapshot()),
        "memory animation": viz.animate_memory_map(m.snapshots, m.log),
        "translation": viz.translation_figure(viz.translation_chain([3, 7, 1, 5, 9], pos=9, block_size=4)),
        "compare": viz.compare_figure(steps[-1]),
        "compare animation": viz.animate_compare(steps),
        "kernel access": viz.kernel_access_figure(m.snapshot(), "R3"),
    }


@pytest.mark.parametrize("classroom, minimum", [(False, 12), (True, 16)])
def test_no_figure_font_under_the_minimum(classroom, minimum):
    viz.classroom(classroom)
    assert viz.theme().min_text_px == minimum
    small = [f"{name}: {path} = {size}" for name, fig in _figures().items()
             for path, size in _font_sizes(fig.to_plotly_json()) if size < minimum]
    assert not small, "fonts under the minimum:\n" + "\n".join(small[:20])


def test_classroom_figures_take_the_output_width():
    viz.classroom(True)
    fixed = [name for name, fig in _figures().items() if fig.layout.width is not None]
    assert not fixed, f"figures with a fixed width in classroom mode (wider than an 850 px output area?): {fixed}"


def test_label_px_never_under_the_minimum_and_never_over_the_label_size():
    for on, minimum in ((False, 12), (True, 16)):
        viz.classroom(on)
        th = viz.theme()
        assert th.font_size >= minimum and th.label_size >= minimum and th.control_px >= minimum
        assert label_px() == th.label_size
        assert [label_px(r) for r in (0, 3.5, minimum, 100)] == [minimum, minimum, minimum, th.label_size]


def test_classroom_mode_sets_plotly_default_template_and_restores_it():
    before = pio.templates.default
    viz.classroom(True)
    assert pio.templates.default.endswith("kvlab_classroom")
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))  # a figure a lesson builds itself
    layout = fig.layout.template.layout
    assert layout.font.size == 18 and layout.title.font.size == 22 and layout.legend.font.size == 18
    assert layout.sliderdefaults.font.size == 18 and layout.hoverlabel.font.size == 18
    viz.classroom(True)  # twice: one layer, not two
    assert pio.templates.default.count("kvlab_classroom") == 1
    viz.classroom(False)
    assert pio.templates.default == before
    assert go.Figure().layout.template.layout.font.size != 18


def test_classroom_page_css_enlarges_printed_text_tables_and_widgets():
    css = classroom_page_css()
    sizes = {m.group(1).strip(): int(m.group(2)) for m in re.finditer(r"([^{}]+)\{font-size: (\d+)px", css)}
    printed = next(v for k, v in sizes.items() if "pre" in k)
    tables = next(v for k, v in sizes.items() if "table" in k)
    widgets = next(v for k, v in sizes.items() if ".widget-label" in k)
    assert printed >= 16 and tables >= 16 and widgets >= 16, sizes
    assert all(sel in css for sel in (".widget-readout", ".widget-button", "select", "td", "th"))


def test_classroom_line_outside_a_kernel_is_printed(capsys):
    viz.classroom(True)._ipython_display_()
    assert "printed text and tables larger" in capsys.readouterr().out
