"""The path of one request stays short (issue 31 item 3): ``scripts/trace_request.py``'s walk of
two prompts that share a sentence enters at most 6 files of the memory and reuse layers, with at
most 60 file-to-file switches between them, and the engine still checks its invariants."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import trace_request as tr  # noqa: E402


def test_the_two_prompt_walk_stays_within_issue_31s_figures():
    calls = tr.trace()
    lower, switches = tr.lower_layers(calls)
    assert len(set(lower)) <= 6, sorted(set(lower))
    assert switches <= 60, f"{switches} switches between memory + reuse files (target 60): {tr.report(calls)}"
    assert {"reuse/cache_manager.py", "reuse/radix_cache.py", "memory/block_manager.py"} <= set(lower)


def test_the_switch_count_counts_a_return_to_an_earlier_file():
    calls = [("reuse/cache_manager.py", "a"), ("compute/engine.py", "x"), ("memory/block_pool.py", "b"),
             ("reuse/cache_manager.py", "c"), ("reuse/cache_manager.py", "d")]
    text = tr.report(calls)
    assert "memory + reuse layers: 2 files, 4 calls, 2 file-to-file switches" in text
