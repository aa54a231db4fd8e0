"""kvlab.sim.reproductions and claims: the vLLM paper's figures pinned within issue 12's tolerance
(15%), seeded, at fast sizes (half-hour ShareGPT traces, 3 seeds); the sweeps; the notes' claims."""
from __future__ import annotations

import math
import re

import pytest

from kvlab.sim import claims as C
from kvlab.sim import reproductions as rp

HALF_HOUR = 3600  # requests at 2 req/s: the pinned figures hold from here to the paper's hour (bench)


@pytest.fixture(scope="module")
def fig13():
    return rp.vllm_batched_requests("sharegpt", HALF_HOUR, seeds=(0, 1, 2))


def test_fig13_sharegpt_the_papers_four_systems_and_both_ratios_within_15_percent(fig13):
    labels = [r.label for r in fig13.rows]
    assert labels == ["Orca (Max) = orca-max", "Orca (Pow2) = orca-pow2", "Orca (Oracle) = orca-oracle", "vLLM = vllm",
                      "vLLM / Orca (Oracle)", "vLLM / Orca (Max)"]
    assert [r.published for r in fig13.rows] == [7.00, 9.81, 13.62, 30.42, 2.2, 4.3]
    for r in fig13.rows:
        assert r.meets, (r.label, r.simulated, r.published)
        assert len(r.interval.values) == 3 and r.interval.lo <= r.simulated <= r.interval.hi
    assert "6 of 6 rows within 15%" in fig13.explanation and "498" in fig13.explanation
    assert "Fig. 13, p. 10" in fig13.source and "Sec. 6.2 text, p. 11" in fig13.source
    assert "15,728 slots" in fig13.setup and "95% interval" in fig13.table()


def test_fig2_token_states_the_orca_bars_within_15_percent_and_vllms_miss_explained(fig13):
    rep = rp.vllm_memory_breakdown(HALF_HOUR, seeds=(0, 1, 2))
    assert rep.results["runs"][0]["vllm"] is fig13.results["runs"][0]["vllm"]  # the Fig. 13 runs themselves
    assert [r.published for r in rep.rows] == [0.204, 0.268, 0.382, 0.963]
    for r in rep.rows[:3]:
        assert r.meets, (r.label, r.simulated, r.published)
    # With a step costing max(memory, compute) (not their sum) the simulated vLLM keeps up with 2 req/s
    # part of the time, so its memory is not always full and its token-state share falls below the
    # paper's 96.3%: the reproduction says so instead of tuning a constant until it fits.
    v = rep.rows[3]
    # the simulation is deterministic (seeds 0-2): the miss is the known result, and the text must say so
    assert not v.meets, f"vLLM's token-state share {v.simulated:.3f} now lands within 15%: update the explanation"
    assert v.simulated < v.published and "vLLM's does not land" in rep.explanation
    assert "3 of 4 token-state shares within 15%" in rep.explanation
    assert "every iteration of the same Poisson" in rep.explanation and "Fig. 2, p. 2" in rep.source
    oracle = rep.results["runs"][0]["orca-oracle"].breakdown(loaded=False)
    assert oracle["internal_fragmentation"] == pytest.approx(0, abs=1e-9) and oracle["rounding"] > 0.2


def test_fig13_alpaca_orca_rows_within_15_percent_and_vllm_explained():
    rep = rp.vllm_batched_requests("alpaca", 3000, seeds=(0, 1, 2))
    rows = {r.label.split(" = ")[-1]: r for r in rep.rows}
    for p in ("orca-max", "orca-pow2"):
        assert rows[p].meets, (p, rows[p].simulated)
    # Orca (Oracle) on Alpaca at 30 req/s lands below the paper's 72.75 with the max() step model:
    # reported as a miss in the table (not tuned away)
    assert rows["orca-oracle"].simulated < rows["orca-oracle"].published
    assert rows["vllm"].published == 132.44 and rows["vllm"].simulated > rows["orca-oracle"].simulated
    assert "Little's law" in rep.explanation  # vLLM keeps up with 30 req/s: its batch follows the cost model
    assert "ratio of the bar labels" in rep.rows[-1].note


def test_batch_against_rate_marks_where_each_system_becomes_memory_bound():
    rows = rp.batch_vs_rate(rates=(0.5, 1.5, 3.0), duration_s=900)
    by = {(r["rate"], r["policy"]): r for r in rows}
    for p in rp.PAPER_POLICIES:
        assert by[(0.5, p)]["mean_batch"] <= by[(3.0, p)]["mean_batch"] + 0.1
    start = rp.memory_bound_from(rows)
    assert start["orca-max"] == 1.5 and start["vllm"] in (3.0, None)  # reserve-max fills first, paging last
    assert by[(0.5, "vllm")]["memory_bound"] == 0  # at low load every system keeps up: Little's law
    assert abs(by[(0.5, "vllm")]["mean_batch"] - by[(0.5, "orca-oracle")]["mean_batch"]) < 0.5


def test_sensitivity_rows_lengths_shapes_and_iteration_time():
    rows = rp.sensitivity(1200, seeds=(0,), shapes=("lognormal", "gamma"), scales=(1.25,))
    assert [r["variant"] for r in rows] == ["lengths lognormal", "lengths gamma", "iteration time x1.25"]
    base = rows[0]
    for r in rows:
        assert r["orca-max"] <= r["orca-pow2"] <= r["orca-oracle"] < r["vllm"]
        assert r["vllm/oracle"] == pytest.approx(r["vllm"] / r["orca-oracle"])
    assert abs(rows[1]["orca-oracle"] / base["orca-oracle"] - 1) < 0.15  # the shape moves a bar by a few percent
    assert rows[2]["vllm"] >= base["vllm"] - 0.5  # slower iterations: the queue fills sooner


def test_intervals_are_students_t():
    iv = rp.interval([30.0, 31.0, 32.0])
    assert iv.mean == 31.0 and iv.hi - iv.mean == pytest.approx(4.303 * 1.0 / 3 ** 0.5)
    assert rp.interval([5.0]).fmt() == "5.00" and "[" in iv.fmt()
    with pytest.raises(ValueError):
        rp.interval([])


def test_vllm_sharing_savings_beam_beats_sampling_and_long_prompts_save_more():
    rep = rp.vllm_sharing_savings({"alpaca": 16, "sharegpt": 5}, widths=(2, 4), seeds=(0, 1))
    res = rep.results
    assert len(res["saving"][("alpaca", "beam", 4)].values) == 2
    for ds in ("alpaca", "sharegpt"):
        for w in (2, 4):
            assert res[(ds, "beam", w)].metrics.sharing_saving > res[(ds, "parallel", w)].metrics.sharing_saving > 0
        assert res[(ds, "parallel", 4)].metrics.sharing_saving > res[(ds, "parallel", 2)].metrics.sharing_saving
    assert res[("sharegpt", "parallel", 4)].metrics.sharing_saving > res[("alpaca", "parallel", 4)].metrics.sharing_saving
    assert rep.rows[0].published == "6.1%-9.8%" and "p. 11" in rep.source


def test_vllm_sharing_savings_names_where_its_alpaca_mean_comes_from():
    """Review r4_09: "Alpaca's 16-token mean prompt" had no source (the paper's is 19.31). The explanation
    prints the mean of the prompts it simulated, says it is computed, and gives the published one with its figure."""
    rep = rp.vllm_sharing_savings({"alpaca": 16, "sharegpt": 5}, widths=(2,), seeds=(0, 1))
    sim = [r.prompt_len for s in (0, 1) for r in rp.alpaca(16, rate=math.inf, seed=s).requests]
    assert f"the {len(sim)} simulated Alpaca prompts average {sum(sim) / len(sim):.1f} tokens" in rep.explanation
    assert "computed from these traces" in rep.explanation
    assert "mean input of 19.31 tokens, Fig. 11, p. 9" in rep.explanation and "8.4x" in rep.explanation
    assert "Alpaca's" not in rep.explanation.split("Beam search")[0]   # no unsourced "Alpaca's N-token mean"


# ------------------------------------------------------------------ the notes' claims and SGLang
@pytest.fixture(scope="module")
def small_claims(fig13):
    adv = C.paging_advantage(lengths=(100, 1000), budgets=(0.25, 1.0), num_requests=150)
    rows = C.scenario_table(num_requests=60)
    sweep = rp.batch_vs_rate(rates=(0.5,), duration_s=600)
    return adv, rows, C.notes_claims(HALF_HOUR, seeds=(0, 1, 2), scenarios=rows, advantage=adv, sweep=sweep)


def test_notes_claims_are_computed_from_the_runs(small_claims):
    adv, rows, claims = small_claims
    assert [r["scenario"] for r in rows] == list(C.SCENARIOS)
    assert [c.verdict for c in claims[1:]] == ["holds", "imprecise", "holds"]
    assert claims[0].verdict in ("holds", "imprecise")  # 55% sits at the edge of the simulated range
    assert "55%" in claims[0].claim and "beam" in claims[0].evidence
    # "5 -> 12" is tested on 5 and 12: a budget where a baseline runs about 5, and what paging runs there
    m = re.findall(r"hold ([0-9.]+) requests under Orca \((\w+)\) and ([0-9.]+) with paging", claims[1].evidence)
    assert {w for _, w, _ in m} == {"Oracle", "Max"}
    five, _, twelve = next(x for x in m if x[1] == "Oracle")
    assert abs(float(five) / 5 - 1) <= 0.15 and abs(float(twelve) / 12 - 1) <= 0.15
    # the 2,000-token rule: no length or concurrency line with memory full; at low load no gain at all
    assert "neither 2,000 tokens nor 20 requests" in claims[2].evidence and "gains nothing at low load" in claims[2].evidence
    assert all(r["vllm/oracle"] > 1.5 for r in adv)  # paging wins at every length and concurrency swept
    # the scenario bars are one metric (requests finished per minute): prefix reuse never shows as a loss
    for r in rows:
        assert r["radix"] >= 0.98 * r["paged"], (r["scenario"], r["radix"], r["paged"])
    bad = [dict(r, paged_vs_max=0.9) for r in rows]  # a table where paging does not help flips the verdict
    assert C.notes_claims(HALF_HOUR, scenarios=bad, advantage=adv)[3].verdict == "imprecise"
    # a world where the rule were right: no gain for short requests or few at once, a large one for long ones
    ruled = [dict(r, **{"vllm/oracle": 2.5 if r["mean_len"] > 900 and r["sweep"] == "length" else 1.0}) for r in adv]
    assert C.notes_claims(HALF_HOUR, scenarios=rows, advantage=ruled)[2].verdict == "holds"


def test_sglang_sentences_are_written_from_the_hit_rates():
    rep = C.sglang_hit_rates(num_requests=150, num_sessions=12, budget_tokens=4000,
                             multi_turn_budgets=(3000, 40_000), seeds=(0,))
    h = {k: iv.mean for k, iv in rep.results["intervals"].items()}
    assert h[("few_shot", 4000, "radix", "fcfs")] == rep.results[("few_shot", 4000, "radix", "fcfs")].hit_rate
    assert h[("few_shot", 4000, "radix", "cache-aware")] >= h[("few_shot", 4000, "radix", "fcfs")]
    opt = C.optimal_hit_rate(C.multi_turn(12, turns=4, rate=4.0, seed=0, system_len=300, think_time=2.0))
    assert h[("multi_turn", 40_000, "radix", "fcfs")] == pytest.approx(opt, abs=0.03)
    assert h[("multi_turn", 3000, "radix", "fcfs")] < h[("multi_turn", 40_000, "radix", "fcfs")]
    assert "Memory sets it" in rep.explanation and rep.rows[1].published == 0.96
    same = {("m", c, p, o): 0.888 for c in (14_648, 30_000) for p in ("radix", "block-hash") for o in ("fcfs", "cache-aware")}
    text = C._multi_turn_sentence(same, "m", (14_648, 30_000), 0.95)  # lesson 09's old contradiction: equal rates
    assert "does not limit it" in text and "Memory sets it" not in text


def test_report_has_every_section_with_published_and_simulated():
    from kvlab.sim.report import report

    text = report(scale=0.02, seeds=(0,))   # the sections, not the figures (those: the tests above)
    for section in ("Setting", "vLLM Fig. 2", "vLLM Fig. 13", "vLLM Fig. 15", "SGLang", "against request rate",
                    "Sensitivity", "scenario table", "paging's advantage", "claims"):
        assert section in text, section
    assert text.count("published") >= 5 and "simulated" in text


def test_speed_reports_cpu_time():
    s = rp.speed(num_requests=500, policy="vllm")
    assert s["requests"] == 500 and s["cpu_s"] > 0 and s["iterations"] > 0


def test_a_table_names_the_systems_and_says_why_a_column_is_left_out():
    """Issue 28, the review of 09 at 6b9afee: the tables printed "Orca (Max) = orca-max" (an internal
    id where a student expects a name) and Fig. 15's table had two columns of "-" only."""
    one = rp.Reproduction("t", "src", "setup", [rp.Row("Orca (Max) = orca-max", 7.0, 6.9, "memory-bound",
                                                        rp.interval([6.9]))], "")
    text = one.table()
    assert "orca-max" not in text and "Orca (Max)" in text and "Orca (Max): memory-bound" in text
    assert "95% interval" not in text.splitlines()[0] and "(no 95% interval: one seed)" in text
    ranges = rp.Reproduction("t", "src", "setup", [rp.Row("ShareGPT, beam search k=2,4", "44.3%-66.3%", "48.0%-72.0%",
                                                           "2: 48.0% [46.2%, 49.8%]")], "")
    head, *rest = ranges.table().splitlines()
    assert head.split() == ["published", "simulated"] and not any(set(line.split()) == {"-"} for line in rest)
    assert any("published values are ranges" in line for line in rest)
    assert any("interval is in the notes" in line for line in rest)


def test_the_claims_have_short_names_and_the_scenarios_words():
    """The summary printed each claim cut at 45 characters ("PagedAttention is a must when the
    average req"); each claim now has a short name of its own, and the scenarios read as words."""
    assert C.scenario_name("multi_turn") == "multi-turn" and C.scenario_name("short_chat") == "short chat"
    assert C.Claim("a long claim, whole", "holds", "evidence", short="a claim").short == "a claim"
