"""kvlab.sim.reproductions: the papers' figures and the notes' claims, at small sizes."""
from __future__ import annotations

import pytest

from kvlab.sim import reproductions as rp


def _sim(rep, label_start):
    return next(r.simulated for r in rep.rows if r.label.startswith(label_start))


def test_vllm_memory_breakdown_orders_the_systems_and_matches_the_extremes():
    rep = rp.vllm_memory_breakdown(num_requests=250)
    assert [r.published for r in rep.rows] == [0.204, 0.268, 0.382, 0.963]
    ts = [r.simulated for r in rep.rows]
    assert ts[0] < min(ts[1], ts[2]) and max(ts[1], ts[2]) < ts[3]  # max < pow2, oracle < paged
    assert abs(ts[0] - 0.204) < 0.05 and abs(ts[-1] - 0.963) < 0.03
    assert "Orca (Max)" in str(rep) and "published" in rep.table()


def test_vllm_batched_requests_reserve_max_fits_seven():
    rep = rp.vllm_batched_requests("sharegpt", num_requests=250)
    assert rep.rows[0].published == 7.0
    assert 6.3 < rep.rows[0].simulated <= 7.0  # 14,648 // 2,048 = 7 (less while the queue fills)
    sim = [r.simulated for r in rep.rows]
    assert sim[0] < min(sim[1:])
    assert "Little's law" in rep.explanation
    with pytest.raises(ValueError, match="dataset"):
        rp.vllm_batched_requests("wiki")


def test_vllm_sharing_savings_beam_beats_sampling_and_long_prompts_save_more():
    rep = rp.vllm_sharing_savings({"alpaca": 16, "sharegpt": 5}, widths=(2, 4))
    res = rep.results
    for ds in ("alpaca", "sharegpt"):
        for w in (2, 4):
            assert res[(ds, "beam", w)].metrics.sharing_saving > res[(ds, "parallel", w)].metrics.sharing_saving > 0
        assert res[(ds, "parallel", 4)].metrics.sharing_saving > res[(ds, "parallel", 2)].metrics.sharing_saving
    assert res[("sharegpt", "parallel", 4)].metrics.sharing_saving > res[("alpaca", "parallel", 4)].metrics.sharing_saving
    assert rep.rows[0].published == "6.1%-9.8%"


def test_sglang_hit_rates_cache_aware_near_optimal_and_memory_limits_multi_turn():
    rep = rp.sglang_hit_rates(num_requests=150, num_sessions=12, budget_tokens=4000,
                              multi_turn_budgets=(3000, 40_000))
    h = {k: r.hit_rate for k, r in rep.results.items()}
    assert h[("few_shot", 4000, "radix", "cache-aware")] >= h[("few_shot", 4000, "radix", "fcfs")]
    opt = rp.optimal_hit_rate(rp.multi_turn(12, turns=4, rate=4.0, seed=0, system_len=300, think_time=2.0))
    assert h[("multi_turn", 40_000, "radix", "fcfs")] == pytest.approx(opt, abs=0.03)
    assert h[("multi_turn", 3000, "radix", "fcfs")] < h[("multi_turn", 40_000, "radix", "fcfs")]
    assert rep.rows[1].published == 0.96


def test_notes_claims_are_computed_not_fixed():
    rows = rp.scenario_table(num_requests=60)
    assert [r["scenario"] for r in rows] == list(rp.SCENARIOS)
    claims = rp.notes_claims(num_requests=150, scenarios=rows)
    assert [c.verdict for c in claims][:3] == ["imprecise", "imprecise", "holds"]
    assert all(c.verdict in ("holds", "imprecise", "does not hold") for c in claims)
    assert "55%" in claims[0].claim and "beam" in claims[0].evidence
    # a scenario table where paging does not help flips the verdict
    bad = [dict(r, paged_vs_max=0.9) for r in rows]
    assert rp.notes_claims(num_requests=150, scenarios=bad)[3].verdict == "imprecise"


def test_speed_reports_a_wall_time():
    s = rp.speed(num_requests=500, policy="paged")
    assert s["requests"] == 500 and s["simulate_s"] > 0 and s["iterations"] > 0


def test_report_has_every_section_with_published_and_simulated():
    text = rp.report(scale=0.2)
    for section in ("vLLM Fig. 2", "vLLM Fig. 13", "vLLM Fig. 15", "SGLang", "scenario table", "claims"):
        assert section in text
    assert text.count("published") >= 5 and "simulated" in text
