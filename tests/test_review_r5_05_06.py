"""Review r5_05_06, the findings still open after the first fixes: lesson 05's interpreter timing
(cell 23 printed "15.1 ms per program-iteration" while the widget showed 41 ms for 10), its split-K
never tied to vLLM's PagedAttention v1/v2 kernels; lesson 06's n > 1 sampling never tied to vLLM V1's
ParentRequest. (The widget's picture titled "(simulated)" and its caption: tests/test_viz_controls.py.)"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "notebooks" / "src"


def _source(stem: str) -> str:
    return (SRC / f"{stem}.py").read_text(encoding="utf-8")


def _markdown(stem: str) -> str:
    """The lesson's comment lines (its prose), as one line: a phrase may wrap in the source."""
    return " ".join(ln[2:] if ln.startswith("# ") else ln[1:] for ln in _source(stem).splitlines()
                    if ln.startswith("#"))


def _stdout(stem: str) -> str:
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    return "\n".join("".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
                     for c in nb.cells if c.cell_type == "code")


def test_05_cost_cell_says_what_each_figure_measures():
    """Each timed launch is printed with its programs x tiles, its time and that time divided by its
    program-iterations (the division checked), the widget's launch among them; the verdict on the
    per-iteration figure follows the printed numbers; no per-iteration figure in the prose."""
    out = _stdout("05_paged_kernel")
    rows = re.findall(r"^(.+?)\s+(\d+) x (\d+) = (\d+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert len(rows) == 3, rows
    names = [r[0] for r in rows]
    assert any("the widget's" in n for n in names) and any("the 3 sequences" in n for n in names), names
    per = []
    for _what, p, t, n, ms, each in rows:
        assert int(p) * int(t) == int(n)
        assert abs(float(ms) / int(n) - float(each)) <= 0.06 + 0.01 * float(each), (ms, n, each)
        per.append(float(each))
    m = re.search(r"the per-program-iteration figure varies ([\d.]+)x between these launches: (.*)", out)
    assert m, "the verdict line"
    assert abs(float(m.group(1)) - max(per) / min(per)) <= 0.15 * float(m.group(1)) + 0.05
    assert ("not a price per iteration" in m.group(2)) == (float(m.group(1)) > 1.5)
    assert "launch (measured, interpreter)" in out
    prose = _markdown("05_paged_kernel")
    assert not re.search(r"\d+(\.\d+)? ms per program-iteration", prose)
    assert "the launch the widget times" in prose


def test_05_ties_split_k_to_vllms_paged_attention_v1_v2():
    prose = _markdown("05_paged_kernel")
    for fact in ("csrc/attention/paged_attention_v2.cu", "csrc/attention/paged_attention_v1.cu", "PARTITION_SIZE",
                 "512", "paged_attention_v2_reduce_kernel", "dim3 grid(num_heads, num_seqs, max_num_partitions)",
                 "dim3 grid(num_heads, num_seqs, 1)"):
        assert fact in prose, fact


def test_06_names_vllm_v1_parent_request():
    prose = _markdown("06_sharing")
    for fact in ("ParentRequest", "vllm/v1/engine/parallel_sampling.py", "get_child_info", "prefix caching",
                 'f"{index}_{request_id}"', "seed + index"):
        assert fact in prose, fact
