"""The static site's words around the lessons (used by scripts/build_site.py): the index, each
lesson's one-line summary, the banner in plain words, a page's table of contents, and where to get
the lessons (the project's address and version, the notebooks' download links).

Example:
    >>> first_sentence("- A block table maps blocks; position pos lives in block pos // 4. More.")
    'A block table maps blocks; position pos lives in block pos // 4.'
    >>> "#a" in toc_html('<h2 id="a">A</h2><p>x</p><h2 id="b">B</h2><h2 id="c">C</h2>')
    True
"""
from __future__ import annotations

import html
import os
import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
def project_info() -> tuple[str, str]:
    """(version, address) from pyproject.toml: the address is ``KVLAB_SITE_URL`` or the first
    ``[project.urls]`` entry, "" when neither is set (the site then names no address)."""
    text = (ROOT / "pyproject.toml").read_text()
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    url = re.search(r'^\[project\.urls\][^\[]*?=\s*"([^"]+)"', text, re.M | re.S)
    return (version.group(1) if version else "?"), os.environ.get("KVLAB_SITE_URL") or (url.group(1) if url else "")


def title(nb) -> str:
    for c in nb.cells:
        if c.cell_type == "markdown":
            m = re.search(r"^#\s+(.+)$", c.source, re.M)
            if m:
                return m.group(1).strip()
    return "lesson"


def _plain(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return " ".join(re.sub(r"[*_`]", "", text).split())


def first_sentence(text: str, limit: int = 260) -> str:
    """The first sentence of a markdown bullet or paragraph, as plain text (cut at ``limit``)."""
    s = _plain(re.sub(r"^\s*[-*]\s+", "", text.strip()))
    m = re.search(r"^(.+?[.!?])(\s|$)", s)
    s = m.group(1) if m else s
    return s if len(s) <= limit else s[:limit].rsplit(" ", 1)[0] + " ..."


def summary(nb) -> str:
    """A lesson's own summary line: the first point of its "Summary" section (else its first
    paragraph that is neither a heading nor a "What you will learn" label)."""
    for c in nb.cells:
        if c.cell_type == "markdown":
            m = re.search(r"^##\s+Summary\s*\n+(.+?)(?:\n\s*\n|\n\s*[-*]\s|\Z)", c.source, re.M | re.S)
            if m:
                return first_sentence(m.group(1))
    for c in nb.cells:
        if c.cell_type == "markdown":
            for p in c.source.split("\n\n"):
                p = p.strip()
                if p and not p.startswith(("#", ">")) and "what you will learn" not in p.lower():
                    return first_sentence(p)
    return ""


@dataclass
class Machine:
    """Where a lesson's outputs were computed, in plain words."""

    cpu: str
    cores: int
    gpu: str  # "" when there is none
    load: str  # the 1-minute load average when the site was built ("" where unknown)

    def words(self) -> str:
        gpu = (f"GPU: {self.gpu}" if self.gpu else
               "no GPU (the Triton kernels ran in Triton's CPU interpreter: right answers, but not GPU times)")
        load = f"; load average {self.load} when the site was built (measured times grow with it)" if self.load else ""
        return f"{self.cpu}, {self.cores} cores; {gpu}{load}"

    def short(self) -> str:
        return f"{self.cores}-core {self.cpu}, " + (self.gpu if self.gpu else "no GPU")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or f"{platform.machine()} CPU"


def machine(nb) -> Machine:
    """From the lesson's self-test output (GPU or not) and this machine (CPU, cores, load)."""
    gpu = ""
    for c in nb.cells:
        if c.cell_type == "code":
            text = "".join(o.get("text", "") for o in c.get("outputs", []))
            m = re.search(r"^device:\s*cuda\S*\s*--\s*(.+)$", text, re.M)
            gpu = m.group(1).strip() if m else ""
            break
    try:
        load = f"{os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return Machine(cpu_model(), os.cpu_count() or 1, gpu, load)


LABELS = {
    "simulated": "computed by kvlab's allocator, radix tree or simulator (no model ran)",
    "measured": "timed or run for real on the machine above",
    "counted": "counted exactly (FLOPs, blocks, tokens), the same on any machine",
    "published": "a number from a paper or a datasheet, quoted to compare",
}


def banner_html(labels: dict[str, int], m: Machine, built: str, download: str) -> str:
    """One line on a phone (a <details>): where and when; opened, what each label means and how
    many outputs on this page carry it."""
    rows = "".join(f"<li><b>{k}</b>: {html.escape(v)} ({labels.get(k, 0)} output{'s' if labels.get(k, 0) != 1 else ''}"
                   " on this page)</li>" for k, v in LABELS.items())
    return (
        "<details class='banner'><summary><b>A static copy of this lesson</b>, run on "
        f"{html.escape(built)} on a {html.escape(m.short())}: what the labels mean</summary>"
        f"<p>Every number and figure below was computed when this page was built, on {html.escape(m.words())}. "
        f"An output's label says where its numbers come from:</p><ul>{rows}</ul>"
        "<p>Controls marked <i>precomputed at build time</i> work here without Python; anything else "
        f"(your own answers, other values) needs the live lesson: <a href='{download}' download>download this "
        "notebook</a> and open it where kvlab is installed, or <code>make lab</code> in a kvlab checkout "
        "(<a href='index.html#run'>how</a>).</p></details>"
    )


_H = re.compile(r"<h([23]) id=\"([^\"]+)\">(.*?)</h\1>", re.S)


def toc_html(body: str) -> str:
    """A contents list of the page's level-2 (and level-3) headings, or "" when it has fewer than 3."""
    heads = _H.findall(body)
    if len([h for h in heads if h[0] == "2"]) < 3:
        return ""
    items = "".join(f"<li class='toc{lvl}'><a href='#{hid}'>{re.sub('<[^>]+>', '', text)}</a></li>"
                    for lvl, hid, text in heads if lvl == "2")
    return f"<details class='toc' open><summary>Contents</summary><ul>{items}</ul></details>"


def copy_notebooks(names: list[str], out: Path) -> dict[str, str]:
    """The lessons as stored in notebooks/ (outputs stripped: a student runs them) into
    ``out/notebooks/``, with the glossary; name -> the site's relative link."""
    import nbformat

    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    links = {}
    for name in names:
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, out / "notebooks" / name)
        links[name] = f"notebooks/{name}"
    if (ROOT / "notebooks" / "glossary.md").exists():
        shutil.copy(ROOT / "notebooks" / "glossary.md", out / "notebooks" / "glossary.md")
    return links


def index_html(nbs: dict, names: list[str], md_to_html, downloads: dict[str, str]) -> str:
    """The front page: the thesis, who it is for, where to start, one line per lesson from its own
    summary, the pictures (click to enlarge), how to run the lessons; the glossary is linked."""
    readme = (ROOT / "README.md").read_text()
    thesis = re.search(r"^> \*\*PagedAttention.*?\*\*[ \t]*$", readme, re.M | re.S)
    who = re.search(r"^kvlab is an interactive lesson series.*?(?=\n\n|:\n)", readme, re.M | re.S)
    version, url = project_info()
    rows = "".join(
        f"<tr><td>{n[:2]}</td><td><a href='{Path(n).stem}.html'>{html.escape(title(nbs[n]))}</a> "
        f"<a class='dl' href='{downloads.get(n, '')}' download title='the notebook, to run it'>(.ipynb)</a></td>"
        f"<td>{html.escape(summary(nbs[n]))}</td></tr>"
        for n in names)
    pics = "".join(
        f"<figure><a href='img/{p.name}' target='_blank'><img src='img/{p.name}' alt='{p.stem.replace('_', ' ')}'>"
        f"</a><figcaption>{p.stem.replace('_', ' ')} (click to enlarge)</figcaption></figure>"
        for p in sorted((ROOT / "docs" / "img").glob("*")) if p.suffix in (".png", ".svg"))
    first = names[0] if names else ""
    return (
        "<h1>kvlab: how LLM inference servers manage the KV cache, run for real</h1>"
        + (md_to_html(thesis.group(0)) if thesis else "")
        + "<h2 id='who'>Who it is for</h2>"
        + (md_to_html(_plain(who.group(0)) + ".") if who else "")
        + "<p>Every number is computed by kvlab (a paged block manager, a radix cache, Triton kernels, a real "
          "small model and a simulator) and labelled <b>simulated</b>, <b>measured</b>, <b>counted</b> or "
          "<b>published</b>. This site is a static copy of the executed lessons: figures and players work here, "
          "and each lesson's main control runs over states precomputed at build time. Terms in English and "
          "Chinese: <a href='glossary.html'>the glossary</a>.</p>"
        + "<h2 id='start'>Where to start</h2>"
        + (f"<p>With <a href='{Path(first).stem}.html'>{html.escape(title(nbs[first]))}</a>: the self-test, the "
           "sentence above in four tiny runs, and the map of the series. Then in order; each lesson builds on the "
           "one before.</p>" if first else "")
        + "<h2 id='series'>The series</h2><table class='series'><tr><th>#</th><th>lesson (notebook)</th>"
          f"<th>in one line</th></tr>{rows}</table>"
        + f"<h2 id='pictures'>What you will see</h2><div class='pictures'>{pics}</div>"
        + "<h2 id='run'>Run the lessons yourself</h2>"
        + f"<p>This site shows kvlab {html.escape(version)}"
        + (f", from <a href='{html.escape(url)}'>{html.escape(url)}</a>. " if url else
           " (built from a local checkout: the project records no public address yet). ")
        + 
          "Get the project, then <code>make lab</code> (it sets everything up and opens the lessons in JupyterLab); "
          "there you change every input and your exercise answers are checked. A downloaded notebook "
          "(the <i>.ipynb</i> links above) runs where kvlab is installed.</p>"
        + "<p>This site works offline: its figures, players and precomputed controls need no server and no "
          "Python.</p>"
    )
