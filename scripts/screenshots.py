"""`make screenshots`: every lesson as a student sees it, in a real browser, and what does not fit.

Runs each lesson (or those named: ``make screenshots LESSONS="04 07"``) top to bottom in
JupyterLab and headless Chromium from a copy with its outputs stripped, twice:

- normal: a 1500x1000 screen;
- classroom: ``kvlab.viz.classroom(True)`` inserted after the first code cell, a 1280x720
  projector with the file browser open (an output area about 850 px wide).

Writes to ``tests/_artifacts/screenshots/`` (ignored by git):
- ``NN_normal_00.png``, ``NN_normal_01.png``, ... and ``NN_classroom_00.png``, ...: the page,
  one screen at a time from top to bottom (open them: that is the review); an appendix, which
  shares its lesson's number, writes ``NNa_normal_00.png``... (it never overwrites the lesson's);
- ``overflow.json``: every output wider than its output area and every visible text in an
  output under 12 px (16 px in classroom mode), and what the picture checks find (text crossed
  by a line or arrow, text cut by its figure's edge, a step counter shown twice, a legend entry
  drawn nowhere, a control whose figure does not fit the screen with it), as a list of entries
  ``{lesson, mode, cell, kind, element, content_px/area_px | px, count, text, examples}`` (kinds:
  ``tests/browser_utils.layout_report``) where ``cell`` is the cell's index in
  ``notebooks/NN_*.ipynb``, plus the cells that failed.

One JupyterLab server for all lessons, lessons one after another, each kernel shut down after
its run. Exit status 1 when an entry or a cell error was found, 0 otherwise.

Usage: .venv/bin/python scripts/screenshots.py [04 07 ...] [--mode normal|classroom|both] [--no-png]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_utils import (  # noqa: E402
    ARTIFACTS, browser_problems, cell_errors, chromium, format_report, jupyter_lab, layout_report, lesson_names,
    lesson_page, page_chunks, prepare_folder,
)

OUT = ARTIFACTS / "screenshots"


def shot_prefix(name: str) -> str:
    """The PNGs' prefix: the lesson's number, with an ``a`` for its appendix (which shares the number).

    >>> shot_prefix("09_at_scale.ipynb"), shot_prefix("09_at_scale_appendix.ipynb")
    ('09', '09a')
    """
    return name[:2] + ("a" if Path(name).stem.endswith("_appendix") else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all), e.g. 04 07")
    ap.add_argument("--mode", choices=("normal", "classroom", "both"), default="both")
    ap.add_argument("--no-png", action="store_true", help="only overflow.json (faster)")
    args = ap.parse_args(argv)
    lessons = [w for a in args.lessons for w in a.replace(",", " ").split()]
    try:
        names = lesson_names(lessons)
    except ValueError as e:
        ap.error(str(e))
    problems = browser_problems()
    if problems:
        print("screenshots need a browser: " + "; ".join(problems), file=sys.stderr)
        return 2
    modes = [m == "classroom" for m in (("normal", "classroom") if args.mode == "both" else (args.mode,))]
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:  # a lesson's old pictures would mix with the new ones
        for old in OUT.glob(f"{shot_prefix(name)}_*.png"):
            old.unlink()
    entries: list[dict] = []
    failures: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kvlab-shots-") as tmp:
        folder = Path(tmp)
        prepare_folder(folder, names)
        with jupyter_lab(folder) as lab, chromium() as browser:
            for name in names:
                for classroom in modes:
                    mode = "classroom" if classroom else "normal"
                    t0 = time.time()
                    try:
                        with lesson_page(browser, lab, name, classroom) as page:
                            errors = cell_errors(page)
                            pngs = page_chunks(page, None if args.no_png else OUT, f"{shot_prefix(name)}_{mode}")
                            found = layout_report(page, name[:2], classroom, notebook=name)
                    except Exception as e:  # noqa: BLE001 - report it, go on with the next lesson
                        errors, pngs, found = [f"{type(e).__name__}: {str(e).splitlines()[0]}"], [], []
                    entries += found
                    failures += [{"lesson": name[:2], "mode": mode, "error": err[:2000]} for err in errors]
                    print(f"{name} {mode}: {len(pngs)} screens, {len(found)} layout problems, "
                          f"{len(errors)} errors ({time.time() - t0:.0f} s)", flush=True)
    report = OUT / "overflow.json"
    old = json.loads(report.read_text()) if report.exists() and lessons else {}
    keep = {"entries": [e for e in old.get("entries", []) if e["lesson"] not in {n[:2] for n in names}],
            "errors": [e for e in old.get("errors", []) if e["lesson"] not in {n[:2] for n in names}]}
    report.write_text(json.dumps({"entries": keep["entries"] + entries, "errors": keep["errors"] + failures},
                                 indent=1, ensure_ascii=False))
    if entries:
        print("\nlayout problems:\n" + format_report(entries))
    for f in failures:
        print(f"\n{f['lesson']} {f['mode']}: {f['error'][:800]}")
    print(f"\nwrote {report} and the PNGs in {OUT}")
    return 1 if entries or failures else 0


if __name__ == "__main__":
    sys.exit(main())
