"""Review r2_02_08, the lesson 08 half (at b2adebf): exercise 3's wrong answers that were rejected but
misnamed or unnamed, each now named in the FAIL line the student reads; the hint ladder that added up to
the solution; and the pictures and sentences the review found at odds with the data.

Each wrong answer is the reference solution with one mistake edited in, the edit the reviewer's code in
/work/review/r2_02_08/wrong/08_ex3*.py makes to the same function."""
from __future__ import annotations

import re

import pytest
from test_check_mistakes_06_11 import _markdown, wrong_answer

from kvlab import check

_LEAVES = ("evictable += len(n.key) if n.lock_ref == 0 else 0",
           "evictable += len(n.key) if n.lock_ref == 0 and not n.children else 0")
_MATCH = ("        path.append((child, k))\n        pos += k\n"
          "        if k < len(child.key):                # the match ends inside this node\n            break\n")
_WHOLE = "        if k < len(child.key):\n            break\n        path.append((child, k))\n        pos += k\n"
_FITS = "    if need <= num_free:\n        return (pos, 0)\n"

# (the mistake, edits of the reference, words the first FAIL's note and the summary must contain)
WRONG_ADMIT = [
    ("counts only leaves as evictable (review r2: misnamed as '> not >=')", [_LEAVES],
     "every unlocked node counts, not only the leaves"),
    ("counts only leaves, on the path too", [_LEAVES, ("sum(k for n, k in path if n.lock_ref == 0)",
                                                       "sum(k for n, k in path if n.lock_ref == 0 and not n.children)")],
     "every unlocked node counts, not only the leaves"),
    ("counts only wholly matched nodes (review r2: expected/actual only)", [(_MATCH, _WHOLE)],
     "a match may end inside a node"),
    ("ignores num_free: evicts the whole need (review r2: named only in later case lines)",
     [(_FITS, ""), ("return (pos, need - num_free)", "return (pos, need)")],
     "the free slots come first"),
    ("ignores num_free everywhere, the wait test too",
     [(_FITS, ""), ("if need > num_free + evictable:", "if need > evictable:"),
      ("return (pos, need - num_free)", "return (pos, need)")],
     "the free slots come first"),
]


@pytest.mark.parametrize("mistake,edits,words", WRONG_ADMIT, ids=[w[0] for w in WRONG_ADMIT])
def test_admit_plan_wrong_answer_is_rejected_and_named(mistake, edits, words):
    r = check.admit_plan(wrong_answer("08", "admit_plan", edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary  # what the student reads: the FAIL line names it
    assert "> not >=" not in r.summary, r.summary


def _exercise_3() -> str:
    return _markdown("08_eviction_scheduling").split("### Exercise 3")[1].split("## Summary")[0]


def test_exercise_3_hints_stop_at_the_idea():
    """The review: Hint 2 gave the evictable sum word for word, and with the contract's three steps and
    Hint 3's three outcomes the ladder was the solution. Each hint now asks; none spells out a sum or
    the three outcomes."""
    hints = re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", _exercise_3(), re.S)
    assert len(hints) == 3
    text = " ".join(hints)
    assert "summed over" not in text and "len(node.key)" not in text and "Three outcomes" not in text
    assert all("?" in h for h in hints), "every hint is a question"


def test_lock_goes_up_to_but_not_including_the_root():
    """The review: section 2 said the lock goes 'up to the root' while exercise 2 says the root is never
    locked (SGLang's inc_lock_ref stops below it)."""
    src = _markdown("08_eviction_scheduling")
    assert "up to, but not including, the root" in src
    assert "every ancestor up to the root" not in src and "`inc_lock_ref` up to the root" not in src


# --------------------------------------------------------------------------- the two controls (cells 15 and 31)
def _markers(fig) -> dict[str, tuple[float, float]]:
    """The one-point marker traces (since review r8_08 they carry the legend, named as their curves)."""
    return {t.name: (t.x[0], t.y[0]) for t in fig.data if len(t.x) == 1 and t.marker.symbol}


def test_hit_rate_markers_lie_on_their_curves_at_every_slider_position():
    """The review: the slider moved in steps of 10 while the curves were sampled at 7 sizes, so at 380
    slots 'fewest tokens' was marked at 10.6% beside its curve's ~13%. The curves are now measured at
    every size the slider offers, and the slider offers no other."""
    from kvlab.lessons.eviction import popular_prefix_stream
    from kvlab.viz import HitRateControl

    c = HitRateControl(popular_prefix_stream(200, seed=0), pool_size=120, static=False)
    slider = next(w for w in c.widget.children[-3].children if "kvlab-pool-size-slider" in w._dom_classes)
    assert list(slider.options) == c.sizes == list(range(80, 401, 10))
    for size in (380, 90, 400):
        slider.value = size
        curves = {t.name: dict(zip(t.x, t.y)) for t in c.figure().data if len(t.x) > 1 and t.legendgroup}
        for name, (x, y) in _markers(c.figure()).items():
            assert x == size and curves[name][x] == y, (size, name)
    with pytest.raises(ValueError, match="one of the sizes"):
        c.set(pool_size=385)


def test_scheduling_control_marks_each_orders_rate_at_the_chosen_size():
    """The review: SchedulingControl marked the chosen size with a dashed line only, where the hit-rate
    control also marks each curve."""
    from kvlab.viz import SchedulingControl
    from kvlab.viz.eviction_view import ORDER_NAMES

    c = SchedulingControl(sizes=(1024, 4096), pool_size=4096, static=True)
    marked = _markers(c.figure())
    assert set(marked) == set(ORDER_NAMES.values())
    assert {o: marked[n] for o, n in ORDER_NAMES.items()} == {o: (4096, r) for o, r in c.result["hit_rate"].items()}


def test_lesson_08_charts_have_no_mode_bar_over_their_titles():
    """The review: the plotly mode bar covered both charts' titles whenever the pointer was over them."""
    from kvlab.lessons.eviction import popular_prefix_stream
    from kvlab.viz import HitRateControl, SchedulingControl

    for c in (HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=False),
              SchedulingControl(sizes=(1024, 4096), static=False)):
        (out,) = c._out.outputs
        assert out["data"]["application/vnd.plotly.v1+json"]["config"]["displayModeBar"] is False
        c.static = True
        shown = [p for p in c._shown_parts() if hasattr(p, "_repr_mimebundle_")]
        assert shown[0]._repr_mimebundle_()["application/vnd.plotly.v1+json"]["config"]["displayModeBar"] is False
        assert '"displayModeBar": false' in c._explore()


def test_policies_in_one_order_in_the_table_and_the_legend():
    """The review: the table in cell 13 ordered LRU, fewest tokens, LFU; the legend in cell 15 LRU, LFU,
    fewest tokens."""
    from kvlab.lessons.eviction import POLICY_NAMES, popular_prefix_stream
    from kvlab.reuse import EVICTION_POLICIES
    from kvlab.viz import HitRateControl

    assert list(POLICY_NAMES) == list(EVICTION_POLICIES)
    fig = HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=True).figure()
    shown = [t for t in fig.data if t.showlegend is not False]
    legend = [t.name for t in sorted(shown, key=lambda t: 1000 if t.legendrank is None else t.legendrank)][:3]
    assert legend == list(POLICY_NAMES.values())


def test_stepper_paints_only_the_matched_part_of_a_node_a_match_ends_inside():
    """The review (cell 11, step 5): R2's match ends inside node 1 after 3 of its 8 tokens, yet the whole
    node was painted green "matched (hit, reused)", its label cut to "[1 2 3 4 5 6 …]"."""
    from kvlab.reuse import CacheManager, serve_request
    from kvlab.viz.radix_frames import RadixRecorder, radix_event_frames
    from kvlab.viz.radix_view import radix_tree_data, radix_tree_graph

    cm = CacheManager(num_blocks=16, block_size=1)
    recorder = RadixRecorder(cm.tree)
    serve_request(cm, [1, 2, 3, 4, 5, 6, 7, 8], rid="R1")
    serve_request(cm, [1, 2, 3, 9, 9, 9], rid="R2")
    frames = radix_event_frames(recorder)
    (at,) = [i for i, f in enumerate(frames) if "ends inside node 1" in f.caption]
    state = frames[at].snapshot
    state.check_integrity()
    (node,) = [n for n in radix_tree_data(state)["nodes"] if n["id"] == 1]
    assert node["matched"] == 3 and node["fill"] == "#ffffff" and "3 of 8 tok matched" in node["label"]
    dot = radix_tree_graph(state, frames[at].caption, compact=True).source
    assert re.search(r'<td bgcolor="#2ca02c"><font color="#ffffff">\[1 2 3\]</font></td><td>\[4 5 6 7 8\]</td>', dot), dot
    assert not any(f.snapshot.partial for i, f in enumerate(frames) if i != at)   # the split frame: nodes whole again


def test_room_beside_the_served_request_is_computed_from_the_stream():
    """The review (cell 18): "a pool of 80 slots holds about two of the 30-token popular prefixes beside
    the request being served" was loose arithmetic (a request is up to 65 tokens). The counts are now
    printed from the stream, and the prose names no number of its own."""
    import nbformat
    from test_check_mistakes_06_11 import ROOT

    src = _markdown("08_eviction_scheduling")
    assert "holds about two" not in src
    nb = nbformat.read(ROOT / "notebooks" / "08_eviction_scheduling.ipynb", as_version=4)
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.get("output_type") == "stream")
    assert "a document 25 to 65." in out
    assert "Beside the longest request with a popular prefix, 80 slots hold at most 1 other prefix; beside the " \
           "longest document, 0." in out


def test_sglang_preemption_is_told_in_short_paragraphs_and_a_table():
    """The review (cell 24): about 170 words in one paragraph naming six functions. Now short paragraphs,
    none over 90 words, and a table of kvlab against SGLang: the request taken back, what is inserted
    into the tree, what its second admission computes."""
    src = _markdown("08_eviction_scheduling")
    part = src.split("# **What SGLang does instead.**")[1].split("# ## 5. Cache-aware scheduling")[0]
    paragraphs = [p for p in re.sub(r"^# ?", "", part, flags=re.M).split("\n\n") if p.strip()]
    assert all(len(p.split()) <= 90 for p in paragraphs if not p.startswith("|")), [len(p.split()) for p in paragraphs]
    table = [ln for ln in re.sub(r"^# ?", "", part, flags=re.M).splitlines() if ln.startswith("|")]
    assert table[0].startswith("| preemption | kvlab") and "SGLang" in table[0] and len(table) == 5
    assert [r.split("|")[1].strip() for r in table[2:]] == [
        "the request taken back", "inserted into the tree", "computed again when it is admitted again"]
