"""Review r2_02_08 of lesson 02: a wrong answer that was misnamed, and exercise statements and hints
that spelled the answer out. Each wrong answer is the reference solution with one mistake edited in."""
from __future__ import annotations

import re

import pytest
from test_check_mistakes_06_11 import _markdown, wrong_answer

from kvlab import check

# (exercise, the mistake, edits of the reference, words the FAIL note must contain)
WRONG_02 = [
    ("max_concurrent", "longest first, skipping a request that does not fit (the review's answer)",
     [("for n in sorted(lengths):", "for n in sorted(lengths, reverse=True):"),
      ("        if need > free_blocks:\n            break", "        if need > free_blocks:\n            continue")],
     "longest first (sorted in reverse), skipping"),
    ("max_concurrent", "longest first, stopping at the first that does not fit",
     [("for n in sorted(lengths):", "for n in sorted(lengths, reverse=True):")],
     "longest first (sorted in reverse):"),
    ("max_concurrent", "arrival order, skipping a request that does not fit (first fit)",
     [("for n in sorted(lengths):", "for n in lengths:"),
      ("        if need > free_blocks:\n            break", "        if need > free_blocks:\n            continue")],
     "arrival order, skipping"),
    ("max_concurrent", "arrival order, stopping at the first that does not fit (named before; kept apart from first fit)",
     [("for n in sorted(lengths):", "for n in lengths:")],
     "arrival order (the order given), stopping"),
]


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


@pytest.mark.parametrize("name, mistake, edits, says", WRONG_02, ids=[w[1] for w in WRONG_02])
def test_wrong_answer_is_named(name, mistake, edits, says):
    r = getattr(check, name)(wrong_answer("02", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    notes = [c.note for c in r.failures]
    assert notes and says in notes[0], "\n".join(f"{c.label}: {c.note}" for c in r.failures)


def _cells(stem: str) -> list[str]:
    return re.split(r"\n# %%", _markdown(stem))


def _exercise(stem: str, title: str) -> str:
    """The markdown from an exercise's heading to the next exercise (statement and hints)."""
    text = _markdown(stem)
    start = text.index(title)
    end = text.find("### Exercise", start + len(title))
    return text[start:end if end > 0 else len(text)]


def test_exercise_2_does_not_name_the_defaults():
    """Cell 31 asked "which attention did they use? how did they split hidden_size", hint 2 said
    "hidden_size only stands for kv_heads x head_dim in an MHA model", hint 1 gave dict.get."""
    ex = _exercise("02_how_big", "### Exercise 2")
    for giveaway in ("which attention", "how did they split", "only stands for", "dict.get"):
        assert giveaway not in ex, giveaway


def test_exercise_4_does_not_give_the_order_or_the_budget_formula():
    """Cell 37 gave the budget formula verbatim and an example only shortest-first solves, with its
    answer; hint 2 asked "which ones would you admit first?"."""
    ex = _exercise("02_how_big", "### Exercise 4")
    for giveaway in ("int(gpu_bytes × utilization) − weight_bytes", "admit first", "the answer is 4",
                     "shortest"):
        assert giveaway not in ex, giveaway
    assert "Predict first" in ex


def test_max_concurrent_case_labels_do_not_name_the_order():
    """The checker printed "shortest first 5" in a case label, before any mistake was made."""
    r = check.max_concurrent(wrong_answer("02", "max_concurrent", [("for n in sorted(lengths):", "for n in lengths:")]),
                             verbose=False)
    assert not [c.label for c in r.cases if "shortest" in c.label]


def _stored_outputs() -> list[tuple[str, list[dict]]]:
    import nbformat

    from test_check_mistakes_06_11 import ROOT

    nb = nbformat.read(ROOT / "notebooks" / "02_how_big.ipynb", as_version=4)
    return [(c.source, c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"]


def test_the_ram_count_is_given_both_ways_and_why():
    """Cell 18 said "pick fp32 there to get its numbers" (section 7's last cell), but the widget took
    90% of ALL the RAM (117 requests) where the cell took the free RAM (89): now the cell prints both."""
    text = "\n".join(o.get("text", "") for src, outs in _stored_outputs() if "SC_AVPHYS_PAGES" in src for o in outs)
    assert re.search(r"The widget says [\d,]+(, not [\d,]+| too, by chance): like a server", text), text
    assert re.search(r"are free, (less|more) than that share", re.sub(r"\s+", " ", text)), text
    assert "to get its numbers" not in _markdown("02_how_big")


def test_chart_names_and_ratios_come_from_the_data():
    """Cell 0 said "caches 8 times apart" (Llama-2 70B's ratio; the chart shows 3x to 71x); the chart's
    x labels were internal ids (llama-2-7b); the summary said an "80GB" card holds 80 GiB (H100: 79.6)."""
    md = _markdown("02_how_big")
    assert "8 times apart" not in md and "from 3 to 71 times" in md
    assert 'An "80GB" card holds 80 GiB' not in md and '"H100 80GB" 79.6 GiB' in md
    chart = next(outs for src, outs in _stored_outputs() if "hidden_formula_bytes" in src and "go.Bar" in src)
    text = " ".join(o.get("text", "") for o in chart).replace("\n", " ")
    assert "3x for SmolLM2-135M" in text and "8x for Llama-2 70B" in text and "71x for Falcon-7B" in text, text
    fig = next(o["data"]["application/vnd.plotly.v1+json"] for o in chart if "application/vnd.plotly.v1+json" in o.get("data", {}))
    assert fig["data"][0]["x"][:3] == ["Llama-2 7B", "Llama-2 13B", "Llama-2 70B"], fig["data"][0]["x"]


def test_review_r4_02_one_block_short_per_user_is_named():
    """Review r4 of lesson 02 (cfd7949): one block fewer per user was named 'as if users were one more'."""
    def one_short(kv_budget_bytes, bytes_per_token, users, block_size=16):
        if bytes_per_token < 1 or users < 1 or block_size < 1 or kv_budget_bytes < 0:
            raise ValueError(kv_budget_bytes)
        blocks = kv_budget_bytes // (bytes_per_token * block_size)
        return max(blocks // users - 1, 0) * block_size

    r = check.longest_context(one_short, verbose=False)
    assert not r.passed and "one block short" in r.summary, r.summary
