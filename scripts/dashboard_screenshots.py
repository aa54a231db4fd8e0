"""Screenshots of the live ``/dashboard`` page (the lesson's layout check cannot see inside its iframe).

Starts a bundled-model server as lesson 12 does (96 blocks of 4 tokens), sends lesson 12's
requests (the notes' four, then three chats) until the pool evicts, and shoots the page
in Chromium at 1500x1000, in classroom mode at 1280x720, at 1500x1000 with "classroom" ticked
on the page (review r6: the pool was clipped), and at the lesson's classroom frame (860x525),
within the 3 s an evicted node is drawn as a ghost, then settled, then with the last request's
row clicked (its tree path and blocks highlighted). Writes
``tests/_artifacts/screenshots/12_dashboard_{mode}_{k}.png`` (k = 0, 1, click) and prints the
page's tree labels (its SVG text) and any two that overlap.

    .venv/bin/python scripts/dashboard_screenshots.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser_utils import CLASSROOM_VIEWPORT, NORMAL_VIEWPORT, chromium  # noqa: E402
from serve_utils import lesson_traffic  # noqa: E402

OUT = ROOT / "tests" / "_artifacts" / "screenshots"
FRAME_VIEWPORT = {"width": 860, "height": 525}   # the lesson's iframe in classroom mode (serve_view._frame_height)

# every tree label's box, and the pairs of labels or markers that overlap (a ghost ring over a label)
_OVERLAPS_JS = """() => {
  const boxes = [...document.querySelectorAll('#tree .textpoint text, #tree .point')].map(el => {
    const r = el.getBoundingClientRect();
    return {kind: el.tagName, text: el.textContent, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
  }).filter(b => b.x1 > b.x0);
  const hits = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    const ox = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0), oy = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0);
    if (ox > 1 && oy > 1) hits.push([a.kind + ':' + a.text, b.kind + ':' + b.text]);
  }
  const tree = document.getElementById('tree').getBoundingClientRect();
  const out = boxes.filter(b => b.kind === 'text' && (b.x0 < tree.left - 1 || b.x1 > tree.right + 1 ||
                                                        b.y0 < tree.top - 1 || b.y1 > tree.bottom + 1)).map(b => b.text);
  return {labels: boxes.filter(b => b.kind === 'text').map(b => b.text), overlaps: hits, outside: out};
}"""


def main() -> int:
    from kvlab.serve.lab import start_lab

    OUT.mkdir(parents=True, exist_ok=True)
    lab = start_lab(workers=1, model="bundled", num_blocks=96, block_size=4)
    report = {}
    try:
        with chromium() as browser:
            for mode, viewport in (("normal", NORMAL_VIEWPORT), ("classroom", CLASSROOM_VIEWPORT),
                                   ("classroom1500", NORMAL_VIEWPORT), ("frame", FRAME_VIEWPORT)):
                lab.flush()
                page = browser.new_page(viewport=viewport)
                page.goto(lab.urls[0] + "/dashboard" + ("?classroom=1" if mode in ("classroom", "frame") else ""))
                page.wait_for_function("() => window.kvlabState !== undefined", timeout=20_000)
                if mode == "classroom1500":
                    page.check("#classroom")            # ticked on the page, as a teacher does
                lesson_traffic(lab.urls[0], lab.model)
                time.sleep(1.0)                     # the page's next event (ghosts live 3 s)
                page.screenshot(path=str(OUT / f"12_dashboard_{mode}_0.png"))
                report[mode] = page.evaluate(_OVERLAPS_JS)
                time.sleep(3.5)                     # the ghosts gone: the settled tree
                page.screenshot(path=str(OUT / f"12_dashboard_{mode}_1.png"))
                report[mode + " settled"] = page.evaluate(_OVERLAPS_JS)
                page.click("#reqs tbody tr >> nth=0")   # the latest request, finished: its path and blocks
                time.sleep(0.5)
                page.screenshot(path=str(OUT / f"12_dashboard_{mode}_click.png"))
                print(mode, "clicked:", page.inner_text("#selinfo"), "| legend:", page.inner_text("#legend"))
                page.close()
    finally:
        lab.stop()
    print(json.dumps(report, indent=1, ensure_ascii=False))
    def empty(t: str) -> bool:   # a label with no letter or digit says nothing ("…", ":…")
        return not any(c.isalnum() for c in t)

    bad = {k: v for k, v in report.items() if v["overlaps"] or v["outside"] or any(map(empty, v["labels"]))}
    print("problems:", json.dumps({k: {"overlaps": v["overlaps"], "outside": v["outside"],
                                         "empty": [t for t in v["labels"] if empty(t)]} for k, v in bad.items()},
                                   ensure_ascii=False) if bad else "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
