"""Tiers in the simulator (kvlab.sim.tiers) and the break-even arithmetic (kvlab.reuse.offload)."""
from __future__ import annotations

import math

import pytest

from kvlab.reuse.offload import (LINKS, LinkSpec, break_even_tokens, load_seconds, offload_costs,
                                 recompute_seconds)
from kvlab.sim import CostModel, simulate
from kvlab.sim.policies.radix import RadixPolicy
from kvlab.sim.tiers import (TieredRadixPolicy, format_tier_rows, judge, multi_turn_chat, run_tiers,
                             shared_documents)


@pytest.fixture(scope="module")
def chat_rows():
    return run_tiers(multi_turn_chat(num_sessions=12, turns=5, seed=1), capacity=2048, host_ratios=(0, 1, 2, 4),
                     write_policy="write_back")


def test_a_host_tier_raises_the_hit_rate_of_a_long_chat(chat_rows):
    rates = [r.hit_rate for r in chat_rows]
    assert rates[-1] > rates[0] + 0.1, rates
    assert all(b >= a - 0.02 for a, b in zip(rates, rates[1:])), rates
    assert chat_rows[0].loaded_tokens == 0 and chat_rows[-1].loaded_tokens > 0
    assert chat_rows[-1].prefill_tokens < chat_rows[0].prefill_tokens
    assert chat_rows[-1].bytes_to_device == chat_rows[-1].loaded_tokens * 131072  # Llama-3 8B: 128 KiB a token
    assert chat_rows[-1].device_tokens == chat_rows[0].device_tokens == 2048
    assert "hit rate" in format_tier_rows(chat_rows)


def test_ratio_zero_is_the_plain_radix_policy():
    trace = multi_turn_chat(num_sessions=6, turns=3, seed=2)
    a = run_tiers(trace, 2048, (0,))[0]
    b = simulate(trace, RadixPolicy(2048, 16), cost=CostModel.for_model("llama-3-8b", "h100-80gb"))
    assert (a.hit_rate, a.prefill_tokens) == (b.hit_rate, b.prefill_tokens)


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_the_tiered_policy_keeps_its_invariants_every_iteration(policy):
    trace = shared_documents(num_requests=30, num_documents=3, doc_len=300, seed=0)
    pol = TieredRadixPolicy(1024, 16, host_ratio=2, write_policy=policy)
    res = simulate(trace, pol, check=True)
    assert res.num_requests == 30
    pol.check([])
    assert pol.cm.tree.pending_transfers == []  # drained: nothing is left to copy


def test_judge_says_what_the_rows_show(chat_rows):
    docs = run_tiers(shared_documents(num_requests=40, seed=0), 4096, (0, 1, 2, 4))
    lines = judge(chat_rows, docs)
    assert len(lines) == 4 and "spends memory to save compute" in lines[-1]
    assert lines[0].endswith("agrees")


def test_run_tiers_rejects_bad_ratios():
    trace = multi_turn_chat(num_sessions=2, turns=2)
    for bad in ((), (-1,), (float("nan"),), (True,)):
        with pytest.raises(ValueError, match="ratio"):
            run_tiers(trace, 2048, bad)


def test_break_even_for_llama_3_8b():
    # GQA: 128 KiB per token; loading over PCIe 5 is ~16x cheaper per token than recomputing
    assert break_even_tokens("llama-3-8b", "h100-80gb", "pcie-gen5-x16") == 1
    assert break_even_tokens("llama-3-8b", "h100-80gb", "nvme-gen4") < 64
    # an MHA model from a 7 GB/s SSD: recomputing wins until attention's L^2 term catches up
    n = break_even_tokens("llama-2-7b", "h100-80gb", "nvme-gen4")
    assert 50_000 < n < 200_000
    assert recompute_seconds("llama-2-7b", n, "h100-80gb") > load_seconds("llama-2-7b", n, "nvme-gen4")
    assert recompute_seconds("llama-2-7b", n - 1, "h100-80gb") <= load_seconds("llama-2-7b", n - 1, "nvme-gen4")
    c = offload_costs("llama-3-8b", 4096)
    assert c.pays and c.kv_bytes == 4096 * 131072 and c.speedup > 10
    assert load_seconds("llama-3-8b", 0) == 0.0 and recompute_seconds("llama-3-8b", 0) == 0.0
    assert set(LINKS) >= {"pcie-gen4-x16", "pcie-gen5-x16", "nvme-gen4"}


def test_offload_rejects_bad_inputs():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="prefix_len"):
            offload_costs("llama-3-8b", bad)
    with pytest.raises(ValueError, match="link"):
        load_seconds("llama-3-8b", 8, "carrier-pigeon")
    with pytest.raises(ValueError, match="bandwidth"):
        LinkSpec("x", 0)
    with pytest.raises(ValueError, match="mfu"):
        recompute_seconds("llama-3-8b", 8, mfu=0)
    with pytest.raises(ValueError, match="model"):
        break_even_tokens("gpt-9")
    assert math.isclose(recompute_seconds("llama-3-8b", 8, gpu=1e15, mfu=1.0), 2 * 8.03e9 * 8 / 1e15 + 2 * 32 * 4096 * 64 / 1e15)


def test_bench_tiers_quick_prints_the_figures(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "bench_tiers.py"
    spec = importlib.util.spec_from_file_location("bench_tiers", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "write_back" in out and "break-even" in out and "llama-3-8b" in out and "hit rate" in out


def test_judge_states_the_prefill_saved_as_the_table_shows_it():
    """The review of lesson 10 (cells 25/26): the verdict said the tier "saves +124,272 prefill
    tokens" (the rise of the reused column) under a table whose prefilled column fell by 129,247:
    two numbers for one saving. The verdict now reads the prefilled column, as the table and the
    controls' caption below it do."""
    from kvlab.sim.tiers import judge, multi_turn_chat, run_tiers, shared_documents

    chat = run_tiers(multi_turn_chat(num_sessions=6, turns=4, seed=0), capacity=4096, host_ratios=(0, 4),
                     write_policy="write_back")
    docs = run_tiers(shared_documents(num_requests=20, seed=0), capacity=4096, host_ratios=(0, 4))
    line = judge(chat, docs)[3]
    drop = chat[0].prefill_tokens - chat[-1].prefill_tokens
    assert f"{drop:,} fewer prefill tokens" in line, line
    assert f"{chat[0].prefill_tokens:,} -> {chat[-1].prefill_tokens:,}" in line, line


def test_review_r6_each_verdict_says_which_claim_it_judges(chat_rows):
    """The review of 79ae8b9 (cell 25): judge() printed "agrees" / "not linear" without the claim."""
    from kvlab.sim.tiers import HICACHE_CLAIMS

    docs = run_tiers(shared_documents(num_requests=40, seed=0), 4096, (0, 1, 2, 4))
    lines = judge(chat_rows, docs)
    for line, (claim, _source) in zip(lines, HICACHE_CLAIMS):
        assert line.split("\n")[0].endswith(claim) and "\n   rows: " in line
    assert "ad index saved 65%" in lines[3]


def test_review_r6_claim_3_is_not_said_to_agree_when_the_steps_rise():
    """Lesson 10 cell 25: claim 3 reads "with diminishing returns once the hot tokens fit", and its
    verdict said "not linear (agrees)" beside steps of +5.6%, +8.4%, +49.1% (rising returns). The
    verdict says diminishing only when the steps shrink."""
    from types import SimpleNamespace as NS

    def rows(rates):
        return [NS(hit_rate=h, host_ratio=r, device_tokens=100, host_tokens=100 * r, prefill_tokens=1000 - 100 * i)
                for i, (r, h) in enumerate(zip((0, 1, 2, 4), rates))]

    rising = judge(rows((0.28, 0.34, 0.42, 0.91)), rows((0.4, 0.5, 0.6, 0.7)))[2]
    assert "agrees" not in rising and "rising" in rising and "before its bend" in rising, rising
    shrinking = judge(rows((0.2, 0.6, 0.8, 0.85)), rows((0.4, 0.5, 0.6, 0.7)))[2]
    assert "diminishing returns (agrees)" in shrinking, shrinking


def test_review_r9_hit_rate_differences_are_percentage_points(chat_rows):
    """The review of e072322 (cell 25): "+63.1%", "+5.6%, +8.4%, +49.1%" were differences of hit rates,
    percentage points, printed as percentages."""
    import re

    docs = run_tiers(shared_documents(num_requests=40, seed=0), 4096, (0, 1, 2, 4))
    lines = judge(chat_rows, docs)
    for line in lines[1:3]:
        rows = line.split("rows: ")[1]
        assert not re.search(r"[+-]\d+(\.\d+)?%", rows) and "percentage points" in rows, line
    gain = chat_rows[-1].hit_rate - chat_rows[0].hit_rate
    assert f"multi-turn {100 * gain:+.1f} percentage points" in lines[1]
