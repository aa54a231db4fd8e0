"""kvlab.sim.policies: one policy a file, the radix policy over CacheManager, old names kept."""
from __future__ import annotations

import math
import pathlib
import re
import subprocess
import sys

import pytest

from kvlab.sim import Simulation, make_policy, simulate
from kvlab.sim.policies import POLICY_NAMES, RadixPolicy, SimRequest
from kvlab.sim.workloads import (Trace, TraceRequest, beam_search, few_shot, multi_turn, parallel_sampling,
                                 shared_prefix)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIM = ROOT / "kvlab" / "sim"


# ------------------------------------------------------------------ layout and names
@pytest.mark.parametrize("module", sorted(
    "kvlab.sim." + ".".join(p.relative_to(SIM).with_suffix("").parts) for p in SIM.rglob("*.py")))
def test_every_sim_module_imports_on_its_own(module):
    module = module.removesuffix(".__init__")
    out = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_policy_a_file_and_names_written_once():
    files = {p.stem for p in (SIM / "policies").glob("*.py")}
    assert files == {"__init__", "base", "contiguous", "orca", "paged", "radix", "block_hash"}
    init = (SIM / "policies" / "__init__.py").read_text()
    assert init.count("POLICY_NAMES =") == 1
    assert POLICY_NAMES == ("orca-max", "orca-pow2", "orca-oracle", "vllm", "pow2", "firstfit-max", "firstfit-pow2",
                            "firstfit-oracle", "paged", "paged-share", "radix", "block-hash")


def test_policy_names_have_one_spelling():
    """The first release's aliases (max, pow2-oracle, exact) are gone: one name per policy."""
    from kvlab.sim.policies import canonical_name

    for old in ("max", "pow2-oracle", "exact"):
        with pytest.raises(ValueError, match=f"unknown policy '{old}'"):
            make_policy(old, 8000, 16)
    assert canonical_name("orca-max") == "orca-max" and make_policy("pow2", 8000).name == "pow2"
    with pytest.raises(ValueError, match="unknown policy 'orca'; choose one of: orca-max"):
        make_policy("orca", 8000)


def test_no_block_table_is_written_outside_kvlab_memory():
    pattern = re.compile(r"block_ids\s*=|\.num_tokens\s*=")
    hits = [f"{p}:{i}" for p in SIM.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert hits == []


def test_sim_does_not_touch_the_command_line_module():
    out = subprocess.run([sys.executable, "-c", "import sys, kvlab.sim; print('kvlab.__main__' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------------------------------ radix over CacheManager
def _checked_after_every_call(pol: RadixPolicy) -> list[str]:
    """Wrap the policy so that CacheManager.check_integrity (ref_count == tree + tables) runs
    after every call that changes memory; returns the list of calls made."""
    calls: list[str] = []
    for name in ("admit", "grow", "release", "sync", "beam_reorder"):
        method = getattr(pol, name)

        def wrapped(*a, _m=method, _n=name, **kw):
            out = _m(*a, **kw)
            pol.cm.check_integrity()
            calls.append(_n)
            return out

        setattr(pol, name, wrapped)
    return calls


@pytest.mark.parametrize("make", [
    lambda: multi_turn(10, 3, rate=4.0, seed=1, system_len=40, user_mean=20, output_mean=30, think_time=0.5),
    lambda: few_shot(60, rate=math.inf, seed=2, num_subjects=5, shots_len=96, question_mean=20, output_mean=12),
    lambda: parallel_sampling(shared_prefix(30, rate=20.0, seed=3, prefix_len=80, output_mean=40), 3),
    lambda: beam_search(shared_prefix(20, rate=20.0, seed=4, prefix_len=80, output_mean=40), 2),
], ids=["multi_turn", "few_shot", "samples", "beams"])
@pytest.mark.parametrize("order", ["fcfs", "cache-aware"])
def test_radix_keeps_ref_count_equal_to_tree_plus_tables_after_every_step(make, order):
    t = make()
    pol = make_policy("radix", 1200, 8)
    calls = _checked_after_every_call(pol)
    r = simulate(t, pol, order=order, check=True)  # check=True: policy.check (cm.check_integrity) every iteration
    assert len(r.records) == len(t) and r.hit_tokens > 0
    assert {"admit", "grow", "release"} <= set(calls)
    assert not pol.cm.tables and pol.tree.protected_size() == 0
    assert pol.alloc.num_used_blocks * pol.block_size == pol.tree.total_size()  # only the cache is left


def test_radix_preemption_keeps_what_the_request_computed_cached():
    prompt, output = tuple(range(20)), tuple(range(100, 130))
    t = Trace("t", [TraceRequest(0, 0.0, 20, 30, prompt, output)])
    sim = Simulation(t, make_policy("radix", 256, 4))
    sim.arrive()
    assert sim.admit() == 20
    r = sim.running["r0"]
    assert sim.policy.tree.total_size() == 20  # the prompt's 5 pages, cached right after admission
    for _ in range(5):
        sim.dirty = True  # one iteration at a time
        sim.advance(0)
    sim.preempt(r)  # 25 tokens long, 24 computed (the newest token's KV is not written yet)
    assert sim.policy.tree.total_size() == 24 and sim.policy.tree.protected_size() == 0
    sim.admit()
    assert r.prompt_now == 25 and r.hit == 24  # everything computed is reused
    sim.policy.check(sim.running.values())


def test_radix_samples_fork_sample_0_after_its_prompt():
    prompt = tuple(range(40))
    t = Trace("t", [TraceRequest(0, 0.0, 40, 10, prompt, tuple(range(100, 110)), n=3)])
    pol = make_policy("radix", 512, 16)
    r = SimRequest(t.requests[0])
    assert pol.admit(r)
    tables = [s.table.block_ids for s in r.seqs]
    assert [s.sid for s in r.seqs] == ["r0.0", "r0.1", "r0.2"]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2] == pol.tree.tree_block_ids()  # 2 full prompt pages
    assert len({b[2] for b in tables}) == 3  # slot 40 is each sample's own (the partial page was copied)
    assert all(pol.cm.lock_node(s.sid) is pol.cm.lock_node("r0.0") for s in r.seqs)
    u = pol.usage()
    assert (u.logical_blocks, u.physical_blocks) == (9, 5)  # shared pages counted once physically
    assert u.dup_slots == 4 * 16 and u.held_slots == 5 * 16 and u.cached_slots == 0
    pol.check([r])
    pol.release(r, cur_len=41, finished=False)
    assert not pol.cm.tables and pol.tree.evictable_size() == 32 and pol.usage().held_slots == 0


def test_radix_usage_counts_matched_blocks_once():
    shared = tuple(range(32))
    reqs = [TraceRequest(i, 0.0, 40, 5, shared + tuple(range(1000 + 8 * i, 1008 + 8 * i)), (7,) * 5) for i in range(2)]
    pol = make_policy("radix", 1024, 16)
    a, b = SimRequest(reqs[0]), SimRequest(reqs[1])
    assert pol.admit(a) and pol.admit(b) and b.hit == 32
    u = pol.usage()
    # each table: 2 shared pages + 1 own; the tree holds the 2 shared pages (locked) and a's
    # third page is partial (40 tokens): not cached
    assert (u.logical_blocks, u.physical_blocks, u.dup_slots, u.cached_slots) == (6, 4, 2 * 16, 0)
    assert pol.alloc.num_used_blocks == 4
    pol.check([a, b])


def test_requests_without_ids_use_radix_like_paged():
    from kvlab.sim.workloads import sharegpt

    t = sharegpt(80, rate=6.0, seed=2)
    rad, pag = simulate(t, make_policy("radix", 4000, 16)), simulate(t, make_policy("paged", 4000, 16))
    assert rad.records == pag.records and rad.preemptions == pag.preemptions and rad.hit_tokens == 0
    assert rad.breakdown() == pag.breakdown()


@pytest.mark.parametrize("name", ["radix", "block-hash"])
def test_prefix_caches_jump_over_iterations_as_they_step(name):
    t = multi_turn(12, 3, rate=3.0, seed=5, system_len=64, user_mean=24, output_mean=40, think_time=0.5)
    fast = simulate(t, make_policy(name, 600, 16), order="cache-aware")
    slow = simulate(t, make_policy(name, 600, 16), order="cache-aware", check=True)
    assert fast.preemptions > 0 and fast.hit_tokens > 0
    key = [(x.req_id, x.preemptions, x.hit_tokens) for x in fast.records]
    assert key == [(x.req_id, x.preemptions, x.hit_tokens) for x in slow.records]
    assert fast.hit_tokens == slow.hit_tokens and fast.duration == pytest.approx(slow.duration, rel=1e-9)
    assert fast.metrics.iterations == slow.metrics.iterations
    assert fast.breakdown(False) == pytest.approx(slow.breakdown(False))
