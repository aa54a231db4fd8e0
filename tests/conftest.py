"""Shared pytest set-up for kvlab's suite."""
from __future__ import annotations

import os
import re
import sys
import uuid

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed, which builds a parser
# for the "iri" string format at import: about 1.3 s of CPU in every pytest process (collection
# runs in each xdist worker). Nothing here validates that format; without the module jsonschema
# simply does not register it.
sys.modules.setdefault("rfc3987_syntax", None)

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import budget

# Property tests: deterministic in CI (same examples every run), a few hundred by default;
# KVLAB_HYPOTHESIS_EXAMPLES scales every property test (tests/budget.py).
settings.register_profile(
    "kvlab",
    max_examples=budget.total_examples(),
    deadline=None,
    derandomize=os.environ.get("CI", "") == "true",
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kvlab")


def pytest_configure(config):
    """One id per test session, inherited by pytest-xdist's workers (started after this): the
    lessons' headless runs (tests/lesson_runs.py) are made once per session and shared."""
    os.environ.setdefault("KVLAB_TEST_RUN_ID", uuid.uuid4().hex)
    if getattr(config.option, "dist", "no") == "loadscope":
        os.environ[ORDER_ENV] = "1"   # read by the workers' pytest_collection_modifyitems


# ---- scheduling under pytest-xdist (scripts/test.sh: -n N --dist loadscope) ----
# The lessons are two work units (half the lessons each, one JupyterLab and one Chromium per half:
# the browser test's module fixtures): each lesson runs once, in the browser, and its headless
# checks (tests/test_lessons_headless.py) read that run after the browser items of the half. Every
# other test module is one unit (its module fixtures built once), and the lessons' units are handed
# out first: they are the long ones, so the short modules fill the end of the run instead of one
# worker finishing a lesson alone while the other waits. (xdist's own loadgroup cannot do this with pytest 9.2: it tags
# a test by rewriting ``item._nodeid``, which pytest 9.2 no longer reads.)
LESSON_FILES = {"test_browser.py": "browser", "test_lessons_headless.py": "headless"}
LAST_FILES = ("test_site.py",)   # builds the site from every lesson's run: once they are done (SITE_UNITS units)
# the browser halves, about equal in time (each lesson's browser run, quiet, both modes: 11 44 s,
# 07 37, 10 34, 01 29, 04 26, 00 15 ~ 185 s; 12 25 (recorded beside its servers: tests/site_recorder.py),
# 09 31, its appendix 24, 06 23, 03 21, 08 21, 05 20, 02 15 ~ 180 s); a lesson not listed goes by
# its number's parity
BROWSER_HALF_A = {"00", "01", "04", "07", "10", "11"}
BROWSER_HALF_B = {"02", "03", "05", "06", "08", "09", "12"}
ORDER_ENV = "KVLAB_TEST_LESSONS_FIRST"
_PARAM = re.compile(r"\[(\d\d)[_-]")


def work_unit(nodeid: str) -> tuple[int, str]:
    """(order, unit) of a test: lessons first (order 0), modules (1), the site last (2).

    >>> work_unit("tests/test_browser.py::test_lesson_runs_clean_and_fits[07-classroom]")
    (0, 'browser-a')
    >>> work_unit("tests/test_lessons_headless.py::test_solutions_pass[12_real_server]")
    (0, 'browser-b')
    >>> work_unit("tests/test_radix.py::test_insert")
    (1, 'tests/test_radix.py')
    >>> work_unit("tests/test_site.py::test_page_renders_offline_and_fits[00_start_here.html-390]")
    (2, 'site-0')
    """
    path = nodeid.split("::", 1)[0]
    name = path.rsplit("/", 1)[-1]
    kind, lesson = LESSON_FILES.get(name), _PARAM.search(nodeid)
    if kind and lesson:   # a lesson's browser items, then its headless checks (of the browser's run)
        return 0, browser_unit(lesson.group(1))
    if name in LAST_FILES:   # the site's pages in SITE_UNITS parts (by the lesson's number), for every worker
        return 2, site_unit(nodeid)
    return 1, path


SITE_UNITS = 6   # as many as 2 or 3 workers share evenly


def site_unit(nodeid: str) -> str:
    """The site test's work unit of an item: its page's lesson number modulo SITE_UNITS ("site-3"
    for lesson 09's pages); the index, the glossary and the tests of the whole site in "site-0".

    >>> site_unit("tests/test_site.py::test_page_renders_offline_and_fits[09_at_scale.html-390]")
    'site-3'
    >>> site_unit("tests/test_site.py::test_site_is_small_and_complete")
    'site-0'
    """
    page = re.search(r"\[(\d\d)_[^\]]*\.html-", nodeid)
    return f"site-{int(page.group(1)) % SITE_UNITS if page else 0}"


def browser_unit(n: str) -> str:
    """The browser work unit of lesson number ``n`` ("07"): "browser-a" or "browser-b"."""
    return "browser-a" if n in BROWSER_HALF_A or (n not in BROWSER_HALF_B and int(n) % 2) else "browser-b"


def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope with kvlab's work units (:func:`work_unit`) instead of one per module."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LessonsFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)[1]

    return LessonsFirst(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In the workers of a ``--dist loadscope`` run: the lessons' tests first (the scheduler hands
    out units in collection order, with --no-loadscope-reorder), the site last; within a unit, as
    collected (the browser items before the headless checks of the same lessons)."""
    if os.environ.get(ORDER_ENV) != "1":
        return
    keyed = [(*work_unit(item.nodeid), i, item) for i, item in enumerate(items)]
    items[:] = [k[-1] for k in sorted(keyed, key=lambda k: (k[0], k[2]))]


@pytest.fixture(scope="module")
def bundled():
    """The bundled model and tokenizer, with torch on one thread while a module uses it
    (tiny matmuls: one thread is faster, and CI has 2 shared cores)."""
    import torch

    from kvlab.compute.loader import load_bundled

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_bundled()
    torch.set_num_threads(threads)


# ---- where a run's time goes: KVLAB_TIMELINE=1 writes each item's start and end per worker ----
_TIMELINE: list = []


def pytest_runtest_logstart(nodeid, location):
    if os.environ.get("KVLAB_TIMELINE") == "1":
        import time
        _TIMELINE.append([nodeid, time.time(), None])


def pytest_runtest_logfinish(nodeid, location):
    if _TIMELINE and _TIMELINE[-1][0] == nodeid:
        import time
        _TIMELINE[-1][2] = time.time()


def pytest_sessionfinish(session):
    if _TIMELINE:
        import json
        from pathlib import Path
        out = Path(__file__).parent / "_artifacts" / f"timeline_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(_TIMELINE))
