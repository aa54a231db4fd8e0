"""The path of one request stays short (issue 31 item 3): ``scripts/trace_request.py``'s walk of
two prompts that share a sentence enters at most 6 files of the memory and reuse layers, with at
most 60 file-to-file switches between them, and the engine still checks its invariants."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "trace_request.py"


def _trace_module():
    spec = importlib.util.spec_from_file_location("trace_request", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_two_prompt_walk_stays_within_issue_31s_figures():
    tr = _trace_module()
    calls = tr.trace()
    lower = [f for f, _ in calls if tr._layer(f) in ("memory", "reuse")]
    switches = sum(a != b for a, b in zip(lower, lower[1:]))
    assert len(set(lower)) <= 6, sorted(set(lower))
    assert switches <= 60, f"{switches} switches between memory + reuse files (target 60): {tr.report(calls)}"
    assert {"reuse/cache_manager.py", "reuse/radix_cache.py", "memory/block_manager.py"} <= set(lower)


def test_the_switch_count_counts_a_return_to_an_earlier_file():
    tr = _trace_module()
    calls = [("reuse/cache_manager.py", "a"), ("compute/engine.py", "x"), ("memory/block_pool.py", "b"),
             ("reuse/cache_manager.py", "c"), ("reuse/cache_manager.py", "d")]
    text = tr.report(calls)
    assert "memory + reuse layers: 2 files, 4 calls, 2 file-to-file switches" in text
