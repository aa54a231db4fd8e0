"""The lessons: sources in sync with the built notebooks, their structure, and the solutions.

tests/test_lessons_headless.py runs each lesson once (tests/lesson_runs.py), which proves the
stubs' checks report FAIL without raising, that the ``# NBVAL_CHECK_OUTPUT`` cells still give
their stored outputs (nbval's rules), and that every solution passes its check. Here, without
running a lesson:

- ``test_notebooks_in_sync``: every notebooks/NN_*.ipynb has the cells of notebooks/src/NN_*.py
  (scripts/build_notebooks.py --check).
- ``test_lesson_structure``: self-test first, at least three checked cells, each exercise stub
  followed by a check cell, hints, a glossary link; stored outputs have no errors, and every
  stored check output is a clean FAIL (the stubs as shipped).
- ``test_every_lesson_with_exercises_has_solutions``: solutions/NN_*.py defines every stub's
  functions (tests/test_lessons_headless.py runs them through their checks).
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import nbformat
import pytest
from lesson_runs import text_of as _text

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
bn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bn)  # type: ignore[union-attr]

SOURCES = bn.lesson_sources()
IDS = [p.stem for p in SOURCES]
CHECK_CALL = re.compile(r"^\s*check\.\w+\(", re.M)


def _cells(path: Path) -> list[dict]:
    return bn.parse_source(path.read_text(), str(path))


def test_there_are_lessons():
    assert any(p.stem == "00_start_here" for p in SOURCES), f"no lesson 00 in {bn.SRC}"


def test_notebooks_in_sync(capsys):
    problems = bn.check_sync()
    assert not problems, "\n".join(problems)
    bn.main(["--check"])  # its exit status also counts lint problems: test_no_markdown_written_as_comments
    assert "notebooks in sync" in capsys.readouterr().out


def test_no_markdown_written_as_comments():
    """Issue 16 bug 1: a heading such as "## 4. O(n^2) versus O(n)" written as `#` comments inside a
    code cell (its markdown header missing). Reports every offending lesson at once."""
    problems = bn.lint_sources()
    assert not problems, f"{len(problems)} lesson(s) hide markdown in code cells:\n" + "\n".join(problems)


def test_lint_catches_a_heading_comment_and_nothing_else(capsys):
    bad = bn.parse_source("# %%\nshow(fig)\n#\n# ## 4. O(n^2) versus O(n)\n#\n# Summing the counts...\n")
    (problem,) = bn.lint_cells(bad, "01_x")
    assert "01_x: code cell 0" in problem and "'# ## 4. O(n^2) versus O(n)'" in problem
    ok = bn.parse_source("# %% [markdown]\n# ## A real heading\n\n# %%\n# a comment\n## double-hash comment\n"
                         "x = '# ## in a string'  # ## trailing\n")
    assert bn.lint_cells(ok) == []
    assert bn.main(["--check", "00"]) == 0, "lesson 00 is in sync and lint clean"
    assert "sources lint clean" in capsys.readouterr().out


def test_parser_rejects_bad_sources():
    with pytest.raises(ValueError, match="markdown line"):
        bn.parse_source("# %% [markdown]\n# ok\nnot a comment\n")
    with pytest.raises(ValueError, match="bad cell header"):
        bn.parse_source("# %%markdown\n")
    with pytest.raises(ValueError, match="empty cell"):
        bn.parse_source("# %%\n\n# %%\nx = 1\n")
    cells = bn.parse_source('header line\n# %% tags=["exercise-stub"]\ndef f():\n    return 1\n\n\n# %% [markdown]\n# a\n#\n# b\n')
    assert [(c["cell_type"], c["source"], c["tags"]) for c in cells] == [
        ("code", "def f():\n    return 1", ["exercise-stub"]),
        ("markdown", "a\n\nb", []),
    ]


def test_inject_solutions(tmp_path):
    sol = tmp_path / "sol.py"
    sol.write_text("import math\n\n\ndef f(x):\n    return math.floor(x)\n\n\ndef g():\n    return 2\n")
    cells = bn.parse_source('# %% tags=["exercise-stub"]\ndef f(x):\n    raise NotImplementedError\n\n# %%\nf(1.5)\n')
    out = bn.inject_solutions(cells, sol)
    assert "import math" in out[0]["source"] and "return math.floor(x)" in out[0]["source"]
    assert "def g" not in out[0]["source"] and out[1] == cells[1]
    sol.write_text("def other():\n    pass\n")
    with pytest.raises(KeyError, match="f"):
        bn.inject_solutions(cells, sol)


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_lesson_structure(path: Path):
    cells = _cells(path)
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"].startswith("# "), "first cell: a title"
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert "self_test()" in first_code["source"], "the first code cell must run kvlab.check.self_test()"
    assert "NBVAL_CHECK_OUTPUT" not in first_code["source"], "the self-test prints versions: never NBVAL_CHECK it"
    checked = [c for c in cells if c["cell_type"] == "code" and c["source"].startswith("# NBVAL_CHECK_OUTPUT")]
    assert len(checked) >= 3, f"{path.name}: {len(checked)} cells start with '# NBVAL_CHECK_OUTPUT', want >= 3"
    md = "\n".join(c["source"] for c in cells if c["cell_type"] == "markdown")
    assert "glossary.md" in md, "link the glossary"
    stubs = [i for i, c in enumerate(cells) if "exercise-stub" in c["tags"]]
    if path.stem.endswith("_appendix"):   # reading for the curious (09's appendix): no exercise
        assert not stubs, f"{path.name}: an appendix has no exercise"
    elif path.stem != "00_start_here":
        assert 2 <= len(stubs) <= 4, f"{path.name}: {len(stubs)} exercises, want 2 to 4"
    for i in stubs:
        after = [c for c in cells[i + 1 :] if c["cell_type"] == "code"]
        assert after and CHECK_CALL.search(after[0]["source"]), f"exercise stub at cell {i} is not followed by a check.<name>(...) cell"
        assert "<details><summary>Hint" in "\n".join(c["source"] for c in cells[i + 1 : i + 4]), f"no hints after exercise cell {i}"


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_stored_outputs_are_clean(path: Path):
    nb_path = bn.NB_DIR / (path.stem + ".ipynb")
    nb = nbformat.read(nb_path, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        errors = [o for o in c.outputs if o.get("output_type") == "error"]
        assert not errors, f"{nb_path.name} cell {i} stored an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        text = _text(c.outputs)
        assert "Traceback" not in text, f"{nb_path.name} cell {i} stored a traceback"
        if CHECK_CALL.search(c.source):
            assert re.search(r"^FAIL  \w+", text, re.M), f"{nb_path.name} cell {i}: the stub's check should report a clean FAIL, got:\n{text[-400:]}"


def _solution_path(stem: str) -> Path:
    return ROOT / "solutions" / f"{stem}.py"


_WITH_EXERCISES = [p for p in SOURCES if any("exercise-stub" in c["tags"] for c in _cells(p))]


@pytest.mark.parametrize("path", _WITH_EXERCISES, ids=[p.stem for p in _WITH_EXERCISES])
def test_every_lesson_with_exercises_has_solutions(path: Path):
    """The solutions themselves run through their checks in tests/test_lessons_headless.py."""
    sol = _solution_path(path.stem)
    assert sol.exists(), f"{path.name} has exercises but {sol.relative_to(ROOT)} is missing"
    cells = bn.inject_solutions(_cells(path), sol)  # KeyError: a stub's function missing from the solution
    injected = [c for c in cells if c["source"].startswith("# solution injected from ")]
    assert len(injected) == sum("exercise-stub" in c["tags"] for c in cells)


# --------------------------------------------------- issue 16: lessons 00-04, the bugs and the notes' items
def _nb(stem: str):
    return nbformat.read(bn.NB_DIR / f"{stem}.ipynb", as_version=4)


def _checked_outputs(stem: str) -> str:
    """The stored text of the lesson's NBVAL_CHECK_OUTPUT cells (what nbval compares on every run)."""
    return "\n".join(_text(c.outputs) for c in _nb(stem).cells
                     if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT"))


def _markdown(stem: str) -> str:
    return "\n".join(c["source"] for c in _cells(bn.SRC / f"{stem}.py") if c["cell_type"] == "markdown")


def test_self_test_prints_each_version_once(capsys):
    """Issue 16 bug 8: the self-test printed the versions twice (its own line and the kernel report's)."""
    from kvlab.check import self_test

    self_test()
    out = capsys.readouterr().out
    for name in ("torch", "triton", "numpy", "python"):
        assert len(re.findall(rf"\b{name} \d", out)) == 1, f"{name}'s version printed more than once:\n{out}"


def test_lesson_00_map_lists_twelve_lessons_with_their_layers():
    """Issue 16 bug 8 and item 7: lessons 00-12, fork and copy-on-write physical, 07-08 logical."""
    md = _markdown("00_start_here")
    rows = re.findall(r"^\| \[(\d\d) [^]]+\]\(((\d\d)_\w+\.ipynb)\) \| [^|]+ \| ([^|]*) \|$", md, re.M)
    assert [r[0] for r in rows] == [f"{i:02d}" for i in range(13)], rows
    layer = {r[0]: r[3].strip() for r in rows}
    assert all(layer[f"{i:02d}"] == "physical" for i in range(2, 7)), layer
    assert layer["07"] == layer["08"] == "logical", layer
    stems: dict[str, str] = {}
    for p in sorted(SOURCES):   # 09's appendix shares its number: the map links the lesson itself
        stems.setdefault(p.stem[:2], p.stem)
    for number, link, _n, _layer in rows:  # a link names the lesson's real file once that lesson exists
        if number in stems:
            assert link == f"{stems[number]}.ipynb", (number, link)
    assert "06 to 08" not in md and "Lessons 02 to 06 are the **physical layer**" in md
    assert not re.search(r"logical layer[^.]*\(lesson 0?6\)|\(lesson 0?6\)[^.]*logical layer", md)


def test_lesson_01_memory_numbers_add_up():
    """Issue 16 bug 2: "every block full but the last" was said of 100 tokens filling 25 whole blocks;
    the spare block came from generate(). The cell now prints the numbers; they must add up."""
    assert "every block full but the last" not in _markdown("01_why_kv_cache")
    out = _checked_outputs("01_why_kv_cache")
    m = re.search(r"the table holds (\d+) tokens .* in (\d+) blocks of (\d+), the last holding (\d+) of \3", out)
    assert m, out[-1500:]
    n, blocks, bs, last = map(int, m.groups())
    assert n == (blocks - 1) * bs + last and 0 < last <= bs
    m = re.search(r"the pool has (\d+) blocks: (\d+) for (\d+) tokens and (\d+) spare", out)
    assert m and int(m[1]) == int(m[2]) + int(m[4]) and int(m[2]) == -(-int(m[3]) // bs), out[-800:]


def test_lesson_01_says_what_its_measurements_show():
    """Issue 16 bug 3: the time plot promised a quadratic growth the CPU did not show. The lesson now
    times single steps up to 1,024 tokens of context (the fastest of repeated steps: a busy machine
    only slows a step down) beside the counted FLOPs, and the sentence about the trend is printed
    from the numbers."""
    src = (bn.SRC / "01_why_kv_cache.py").read_text()
    assert "contexts = [" in src and "1024" in src and "min(t for r in naive" in src and "never faster" in src
    assert "The measured times follow the same shape" not in _markdown("01_why_kv_cache")
    verdicts = [_text(c.outputs) for c in _nb("01_why_kv_cache").cells if c.cell_type == "code" and "fit(xs" in c.source]
    said = " ".join(verdicts[0].split()) if verdicts else ""  # the sentences are wrapped to the output's width
    # the review of 79ae8b9: "grew about 77x ... as the counted FLOPs say (x44.7)": the comparison is computed now
    # review r4_01_02: "more than" / "less than" its FLOPs flipped with the machine's load; the margin is printed
    assert re.search(r"(against the FLOPs|so): .*(\(\d+\.\d\d of it: (within a factor of 2 of|more than 2x|less than 1/2 "
                     r"of) what the FLOPs predict\)|do NOT show the counted growth)", said), verdicts
    assert re.search(r"the naive step's time grew \d+x more with the context than the cached step's|do NOT show", said)
    # review r12: the verdicts were long paragraphs; each measured cell's first line is a short verdict
    for c in _nb("01_why_kv_cache").cells:
        text = _text(c.outputs) if c.cell_type == "code" else ""
        if "verdict (measured)" in text:
            first = text.strip().splitlines()[0]
            assert first.startswith("verdict (measured): ") and len(first) <= 76, first
    assert "as the counted FLOPs say" not in src


def test_lesson_01_review_r6_one_step_numbering_and_a_map_without_crossings():
    """The review of 79ae8b9: "the stepper's step 1 is the prefill, which the tables below call step 0"
    (two numberings); the memory map's arrows from its wrapped table row ran along the pool blocks'
    edges onto the slot ticks, which no legend named. Steps count from 1 everywhere (the stepper's
    way); the map names each block's table entry instead of drawing arrows, and says what the ticks are."""
    md = _markdown("01_why_kv_cache")
    assert "step 0" not in md and "call step 0" not in md and "step 1 is the prefill" in md
    src = (bn.SRC / "01_why_kv_cache.py").read_text()
    cell = src[src.index("memory_map_figure(pool.snapshot("):]
    cell = cell[:cell.index("# %%")]
    assert "tables=False" in cell and "(the ticks)" in cell, cell
    out = _text(next(c.outputs for c in _nb("01_why_kv_cache").cells if c.cell_type == "code"
                     and "for t in [2, 3, 6, 11, 51, 101]" in c.source))
    assert re.search(r"^\s+2\s+11\s", out, re.M), out   # step 2: the first decode step after the prefill, 11 tokens


def test_lesson_02_budgets_and_units():
    """Issue 16 bug 6: "(85.90 GB at 90%)" was the card's total, not its 90% share; the H200 showed as
    150.75 GB where students know "141 GB", unexplained."""
    out = _checked_outputs("02_how_big")
    assert not re.search(r"GB at \d+%\)", out)
    pairs = re.findall(r"(\d+)% of ([\d.]+) GB is ([\d.]+) GB", out)
    assert len(pairs) >= 8
    for pct, total, share in pairs:
        assert abs(float(total) * int(pct) / 100 - float(share)) < 0.011, (pct, total, share)
    md = _markdown("02_how_big")
    assert "GiB" in md and "141 GB" in md and "nvidia-smi" in md
    assert re.search(r"h200\s+141GB\s+143,771\s+140\.4\s+150\.75", out)


@pytest.mark.parametrize("stem, patterns", [
    ("01_why_kv_cache", [r"space: 204,800 bytes of K and V", r"compute saved: 49\.\dx fewer FLOPs"]),  # the summary's numbers
    ("02_how_big", [r"10 x 10\.74 GB = 107\.37 GB: more than", r"10 x 1\.34 GB =\s+13\.42 GB: less than",
                    r"SmolLM2-135M \(measured\)\s+46,080\s+23,040", r"equal to the measured: True"]),
    ("03_contiguous", [r"4096: 3596 slots reserved for tokens that never came = 87\.8%", r"no sharing\s+[\d,]+ slots duplicated\s+\(4 samples",
                       r"the notes cut it to 87%: truncated, not rounded, which would give 88%", r"the maxim holds here",
                       r"over-reservation", r"copy on growth", r"external fragmentation\s+[\d,]+ slots stranded\s+\(A finished"]),
    ("04_paging", [r"block_size 16: .*largest waste of one request 15 \(bound 15\)",
                   r"block_size 32: .*largest waste of one request 31 \(bound 31\)",
                   r"^\s+16\s+[\d.]+%\s+15\s", r"the same bytes, in 64 tensors", r"= slot 5 x 8,192 bytes .*: True",
                   r"^1\. no external fragmentation: holds", r"^2\. waste of at most one block per request: holds",
                   r"^3\. growth without copying \(扩容零搬迁\): holds .* 0 of the blocks they already held moved",
                   r"^4\. blocks shared between requests: holds"]),
])
def test_the_notes_items_are_computed_in_the_run(stem, patterns):
    """Issue 16 "what the notes say": each number is printed by a checked cell (nbval compares it on every run)."""
    out = _checked_outputs(stem)
    for p in patterns:
        assert re.search(p, out, re.M), f"{stem}: no checked output matches {p!r}"


def test_lesson_04_analogy_boxes_say_where_they_hold_and_break():
    md = _markdown("04_paging")
    boxes = re.findall(r"> \*\*Analogy box: ([^*]+)\*\*(.*?)(?=\n\n[^>]|\n\n> \*\*Analogy box|\Z)", md, re.S)
    assert {b[0].split(" (")[0].rstrip(".") for b in boxes} >= {"the KV cache as a search index", "virtual memory", "a shared memory pool",
                                                              "L2 on-demand loading", "mmap"}, boxes
    for name, body in boxes:
        assert "*Where it holds.*" in body and "*Where it breaks.*" in body, name
    assert "skip list" in md and "forward index" in md and "page table" in md and "one array read" in md


def test_no_hint_is_the_whole_solution():
    """Issue 16: the last hint is the strongest nudge, never the solution's code."""
    for path in SOURCES:
        sol = ROOT / "solutions" / f"{path.stem}.py"
        if not sol.exists():
            continue
        code_lines = {ln.strip() for ln in sol.read_text().splitlines()
                      if len(ln.strip()) > 25 and not ln.strip().startswith(("#", '"""', "raise", "def ", "if ", "return None"))}
        hints = re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", "\n".join(
            c["source"] for c in _cells(path) if c["cell_type"] == "markdown"), re.S)
        for h in hints:
            shown = [ln for ln in code_lines if ln in h]
            if path.stem[:2] in ("00", "01", "02", "03", "04"):
                assert not shown, f"{path.stem}: a hint quotes the solution: {shown}"


def test_execute_keeps_the_callers_environment(monkeypatch):
    """The kernel that builds a lesson got an EMPTY environment (the default env was read after
    os.environ was cleared), so PYTHONPATH was lost and a worktree's lessons ran another checkout's kvlab."""
    monkeypatch.setenv("KVLAB_ENV_PROBE", "kept")
    nb = bn.to_notebook([{"cell_type": "code", "source": "import os\nprint(os.environ.get('KVLAB_ENV_PROBE'))",
                          "tags": []}])
    bn.execute(nb)
    assert _text(nb.cells[0].outputs).strip() == "kept"
