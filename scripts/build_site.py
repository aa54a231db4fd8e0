"""`make site`: the executed lessons as a static web site in site/ (works offline, no kernel).

Steps:
1. Run every lesson (``notebooks/NN_*.ipynb``, outputs stripped) top to bottom with
   ``KVLAB_STATIC=frames``: figures come out static, and every stepper comes out as a player
   with all its frames (kvlab.viz.flipbook). Two lessons at a time (``--jobs``). The executed
   copies are kept in ``build/site-cache/`` and reused while the lesson, the solutions and
   kvlab are unchanged (a hash of them), so a second build takes seconds.
   ``--stored`` skips running: it renders the outputs stored in notebooks/ (widgets then
   appear as a note).
2. Render one page per lesson (scripts/site_render.py: cells, outputs, exercises with the
   checker's verdict on each solution, scripts/site_exercises.py; the banner and contents,
   scripts/site_front.py), the glossary page, and the index (scripts/site_front.py: the thesis,
   who it is for, where to start, one line per lesson, the pictures, how to run the lessons).
   Each lesson's stripped notebook is copied to ``notebooks/`` for download. Lesson controls
   arrive as precomputed explorers (kvlab.viz.explorer: ``KVLAB_STATIC=frames`` makes them).
3. Copy plotly.js from the installed plotly package (once, ``assets/plotly.min.js``), the
   site's CSS/JS and ``docs/img``; write ``manifest.json`` (per page: figures, players, widgets;
   what tests/test_site.py compares the browser against).

Open ``site/index.html`` in a browser (a file:// page works; or
``python -m http.server -d site`` and http://127.0.0.1:8000).

Usage: .venv/bin/python scripts/build_site.py [04 07 ...] [--stored] [--jobs 2] [--out site]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from site_front import banner_html, copy_notebooks, index_html, machine, toc_html  # noqa: E402
from site_front import title as _title  # noqa: E402
from site_page import INDEX_CSS, SITE_JS, page  # noqa: E402
from site_render import PageStats, md_to_html, render_cells  # noqa: E402

CACHE = ROOT / "build" / "site-cache"


def lesson_files(selected: list[str]) -> list[Path]:
    files = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if selected:
        wanted = {s.zfill(2)[:2] for s in selected}
        files = [f for f in files if f.name[:2] in wanted]
    return files


def _source_hash(nb_path: Path) -> str:
    """The lesson's cells, its solutions and every kvlab source file: any change reruns it."""
    h = hashlib.sha256()
    nb = nbformat.read(nb_path, as_version=4)
    h.update(json.dumps([(c.cell_type, c.source) for c in nb.cells]).encode())
    extra = [ROOT / "solutions" / (nb_path.stem + ".py")] + sorted((ROOT / "kvlab").rglob("*.py"))
    for p in extra:
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _execute(nb_path: str, out_path: str) -> tuple[str, float]:
    """Run one lesson with KVLAB_STATIC=frames (in a worker process: its own environment)."""
    from build_notebooks import execute, kernel_env

    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    env = kernel_env()
    env.update(KVLAB_STATIC="frames", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    seconds = execute(nb, cwd=ROOT / "notebooks", timeout=300, env=env, allow_errors=True)
    nbformat.write(nb, out_path)
    return nb_path, seconds


def executed_notebooks(files: list[Path], stored: bool, jobs: int, executed_dir: Path | None = None) -> dict[str, Path]:
    """name -> path of an executed copy (cached by source hash), or the stored notebook; with
    ``executed_dir``, the copies already executed there (``<stem>.ipynb``, as tests/lesson_runs.py
    makes them with KVLAB_STATIC=frames): nothing runs."""
    if stored:
        return {f.name: f for f in files}
    if executed_dir is not None:
        missing = [f.name for f in files if not (executed_dir / f.name).exists()]
        if missing:
            raise FileNotFoundError(f"no executed copy of {missing} in {executed_dir}")
        return {f.name: executed_dir / f.name for f in files}
    CACHE.mkdir(parents=True, exist_ok=True)
    out, todo = {}, []
    for f in files:
        cached = CACHE / f"{f.stem}.{_source_hash(f)}.ipynb"
        out[f.name] = cached
        if cached.exists():
            print(f"  {f.name}: executed copy reused ({cached.relative_to(ROOT)})")
        else:
            for old in CACHE.glob(f"{f.stem}.*.ipynb"):
                old.unlink()
            todo.append((str(f), str(cached)))
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            for name, seconds in pool.map(_execute, *zip(*todo)):
                print(f"  {Path(name).name}: ran in {seconds:.1f} s", flush=True)
    return out


def build(selected: list[str], out: Path, stored: bool, jobs: int, executed_dir: Path | None = None) -> dict:
    """Build the site in ``out``; ``executed_dir``: render the executed copies found there
    (tests/test_site.py passes the test session's headless runs) instead of running the lessons."""
    t0 = time.time()
    files = lesson_files(selected)
    if not files:
        raise SystemExit(f"no lesson matches {selected}")
    if stored:
        print("[site] stored outputs")
    elif executed_dir is not None:
        print(f"[site] {len(files)} lesson(s) executed in {executed_dir}")
    else:
        print(f"[site] running {len(files)} lesson(s) with KVLAB_STATIC=frames")
    executed = executed_notebooks(files, stored, jobs, executed_dir)
    if out.exists():
        shutil.rmtree(out)
    (out / "assets").mkdir(parents=True)
    import plotly

    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", out / "assets" / "plotly.min.js")
    (out / "assets" / "site.js").write_text(SITE_JS)
    from pygments.formatters import HtmlFormatter

    (out / "assets" / "site.css").write_text(INDEX_CSS + HtmlFormatter(cssclass="code").get_style_defs(".code"))
    if (ROOT / "docs" / "img").exists():
        shutil.copytree(ROOT / "docs" / "img", out / "img")
    built = time.strftime("%Y-%m-%d")
    nbs = {name: nbformat.read(path, as_version=4) for name, path in executed.items()}
    names = [f.name for f in files]
    downloads = copy_notebooks(names, out)
    manifest: dict = {"pages": {}, "built": built}
    for i, name in enumerate(names):
        nb, stats = nbs[name], PageStats()
        body = render_cells(nb, ROOT / "solutions" / (Path(name).stem + ".py"), stats, downloads[name])
        prev_link = (names[i - 1], _title(nbs[names[i - 1]])) if i else None
        next_link = (names[i + 1], _title(nbs[names[i + 1]])) if i + 1 < len(names) else None
        html_name = Path(name).stem + ".html"
        head = banner_html(stats.labels, machine(nb), built, downloads[name]) + toc_html(body)
        (out / html_name).write_text(page(_title(nb), _insert_after_h1(body, head), prev_link, next_link, plotly=True))
        manifest["pages"][html_name] = {"plotly": stats.plotly, "flipbooks": stats.flipbooks, "widgets": stats.widgets,
                                        "svg": stats.svg, "errors": stats.errors, "title": _title(nb),
                                        "explorers": stats.explorers, "verdicts": stats.verdicts,
                                        "try_it": stats.try_it, "live_only": stats.live_only, "labels": stats.labels,
                                        "download": downloads[name],
                                        "notebook": str(executed[name].resolve().relative_to(ROOT))}
        print(f"  {html_name}: {stats.plotly} figures, {stats.flipbooks} players, {stats.explorers} precomputed "
              f"controls, {stats.svg} SVG, {stats.widgets} widget notes, {len(stats.verdicts)} exercises checked, "
              f"{len(stats.errors)} errors")
    (out / "glossary.html").write_text(page("Glossary", md_to_html(_glossary()), None, None, plotly=False))
    manifest["pages"]["glossary.html"] = {"plotly": 0, "flipbooks": 0, "widgets": 0, "svg": 0, "errors": []}
    (out / "index.html").write_text(page("kvlab", index_html(nbs, names, md_to_html, downloads), None, None,
                                         plotly=False))
    manifest["pages"]["index.html"] = {"plotly": 0, "flipbooks": 0, "widgets": 0, "svg": 0, "errors": []}
    manifest["seconds"] = round(time.time() - t0, 1)
    manifest["bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    print(f"[site] {out}: {len(manifest['pages'])} pages, {manifest['bytes'] / 1e6:.1f} MB, {manifest['seconds']} s")
    return manifest


def _insert_after_h1(body: str, head: str) -> str:
    """The banner and the contents go under the lesson's title (its first <h1>)."""
    end = body.find("</h1>")
    return body[:end + 5] + head + body[end + 5:] if end >= 0 else head + body


def _glossary() -> str:
    return (ROOT / "notebooks" / "glossary.md").read_text()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--stored", action="store_true", help="render the outputs stored in notebooks/ (no run)")
    ap.add_argument("--jobs", type=int, default=2, help="lessons run at the same time (default 2)")
    ap.add_argument("--out", type=Path, default=ROOT / "site")
    args = ap.parse_args(argv)
    lessons = [w for a in args.lessons for w in a.replace(",", " ").split()]
    build(lessons, args.out, args.stored, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
