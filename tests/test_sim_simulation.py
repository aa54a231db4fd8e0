"""kvlab.sim.simulation: the Simulation's named steps, one at a time, and simulate() as their sum."""
from __future__ import annotations

import math

import pytest

from kvlab.sim import Simulation, make_policy, simulate
from kvlab.sim.workloads import Trace, TraceRequest, few_shot, sharegpt


def _summary(r):
    s = r.summary()
    s.pop("wall_s")
    return s


def _trace(*lens, arrival=0.0):
    return Trace("t", [TraceRequest(i, arrival, p, o) for i, (p, o) in enumerate(lens)])


def test_arrive_moves_released_requests_to_the_queue_in_arrival_order():
    t = Trace("t", [TraceRequest(0, 0.0, 10, 5), TraceRequest(1, 1.0, 10, 5), TraceRequest(2, 2.0, 10, 5)])
    sim = Simulation(t, make_policy("paged", 1024, 16))
    assert sim.arrive() == 1 and [r.req.req_id for r in sim.waiting] == [0]
    sim.now = 1.5
    assert sim.arrive() == 1 and [r.req.req_id for r in sim.waiting] == [0, 1]
    assert sim.release_time == {0: 0.0, 1: 1.0}
    assert sim.arrive() == 0  # nothing more released yet


def test_admit_starts_requests_in_order_until_one_does_not_fit():
    # 64 slots in blocks of 16: 30 + 1 slots take 2 blocks, so only two requests fit
    sim = Simulation(_trace((30, 4), (30, 4), (10, 4)), make_policy("paged", 64, 16, watermark=0.0))
    sim.arrive()
    prefill = sim.admit()
    assert prefill == 60 and list(sim.running) == ["r0", "r1"]
    assert [r.req.req_id for r in sim.waiting] == [2]  # r2 would fit alone, but admission does not skip ahead
    assert sim.running_seqs == 2 and sim.context_base == 60  # tokens before iteration 0
    assert sim.prompt_tokens == 60 and sim.prefill_tokens == 60
    r0 = sim.running["r0"]
    assert r0.admit_it == 0 and r0.admit_order == 1 and len(r0.seqs) == 1 and r0.seqs[0].cap == 32


def test_admit_respects_max_batch_and_the_prefill_budget():
    t = _trace((40, 4), (40, 4), (40, 4))
    sim = Simulation(t, make_policy("paged", 4096, 16), max_prefill_tokens=100)
    sim.arrive()
    assert sim.admit() == 80 and sim.budget_hit and len(sim.waiting) == 1
    sim = Simulation(t, make_policy("paged", 4096, 16), max_batch=1)
    sim.arrive()
    assert sim.admit() == 40 and len(sim.running) == 1


def test_advance_jumps_to_the_next_event_and_accounts_in_closed_form():
    sim = Simulation(_trace((20, 40)), make_policy("paged", 1024, 16))
    sim.arrive()
    prefill = sim.admit()
    sim.dirty = False  # nothing waits: jump
    s = sim.running["r0"].seqs[0]
    assert s.cap == 32  # 21 slots in 2 blocks: the sequence next needs a block at length 32
    k = sim.advance(prefill)
    assert k == 32 - 20 and sim.it == k and sim.metrics.iterations == k
    assert sim.now == pytest.approx(sim.cost.span(k, 1, 20, 20))
    assert sim.running["r0"].first_token_time == pytest.approx(sim.cost.span(1, 1, 20, 20))


def test_grow_preempts_the_newest_other_request_and_preempt_requeues_it_at_the_head():
    # 4 blocks of 16: r0 and r1 take 2 each; r0's growth past 32 tokens needs r1's memory
    sim = Simulation(_trace((30, 20), (30, 20)), make_policy("paged", 64, 16, watermark=0.0))
    sim.arrive()
    sim.admit()
    sim.dirty = False
    sim.advance(60)  # up to r0's (and r1's) first growth at length 32
    r0, r1 = sim.running["r0"], sim.running["r1"]
    s0 = r0.seqs[0]
    assert s0.len_at(sim.it) == 32 and sim.policy.alloc.num_free_blocks == 0
    assert sim.grow(s0, 33)  # preempts r1 (admitted last), then grows
    assert list(sim.running) == ["r0"] and sim.waiting[0] is r1 and sim.preempted_now
    assert r1.preemptions == 1 and r1.generated == sim.it and r1.seqs == [] and r1.prompt_now == 30 + sim.it
    assert s0.cap == 48 and sim.policy.alloc.num_free_blocks == 1
    # a request alone that cannot grow preempts itself
    assert not sim.grow(s0, 10_000) and not sim.running and sim.waiting[0] is r0


def test_finish_frees_memory_records_the_request_and_releases_its_next_turn():
    t = Trace("t", [TraceRequest(0, 0.0, 10, 3), TraceRequest(1, 0.0, 10, 3, parent=0, think_time=2.0)])
    sim = Simulation(t, make_policy("paged", 1024, 16))
    assert sim.arrive() == 1  # the follow-up waits for its parent
    sim.admit()
    sim.advance(10)
    r0 = sim.running["r0"]
    sim.finish(r0)
    assert not sim.running and sim.policy.alloc.num_free_blocks == sim.policy.alloc.num_blocks
    (rec,) = sim.records
    assert rec.req_id == 0 and rec.finish == sim.now and rec.first_token is not None
    assert sim.pending == [(sim.now + 2.0, 1)]


@pytest.mark.parametrize("name", ["paged", "pow2", "radix", "block-hash"])
def test_step_by_step_gives_what_simulate_gives(name):
    t = sharegpt(60, rate=8.0, seed=3)
    sim = Simulation(t, make_policy(name, 5000, 16))
    steps = 0
    while sim.step():
        steps += 1
    by_hand = sim.result()
    whole = simulate(t, make_policy(name, 5000, 16))
    assert _summary(by_hand) == _summary(whole) and by_hand.records == whole.records
    assert steps >= len(t) and by_hand.metrics.iterations > steps  # it jumped over iterations


def test_cache_aware_order_comes_from_reuse_schedule_lpm_over_the_policys_tree():
    from kvlab.reuse.schedule import order_by_shared_prefix

    t = few_shot(40, rate=math.inf, seed=0, num_subjects=4, shots_len=64, question_mean=8, output_mean=4)
    sim = Simulation(t, make_policy("radix", 4000, 16), order="cache-aware", cache_aware_window=16)
    sim.arrive()
    first = t.requests[0]
    # warm the tree with one request's prompt, then order the queue
    sim.policy.admit(sim.requests[0])
    sim.policy.release(sim.requests[0], first.prompt_len + 1, finished=True)
    queue = list(sim.waiting)
    sim._order_cache_aware()
    tree = sim.policy.tree
    lens = [tree.peek_prefix_len(r.req.prompt) for r in list(sim.waiting)[:16]]
    assert lens == sorted(lens, reverse=True) and lens[0] > 0
    assert list(sim.waiting)[:16] == order_by_shared_prefix(queue[:16], tree, "lpm", lambda r: r.req.prompt)
    by_rule = sorted(enumerate(queue[:16]), key=lambda ir: (-tree.peek_prefix_len(ir[1].req.prompt), ir[0]))
    assert list(sim.waiting)[:16] == [r for _, r in by_rule] != queue[:16]  # ties keep queue order
    assert list(sim.waiting)[16:] == queue[16:]  # outside the window: untouched


def test_bad_arguments_are_refused_before_anything_runs():
    t = sharegpt(5, rate=math.inf, seed=0)
    with pytest.raises(ValueError, match="capacity"):
        Simulation(t, "paged")
    with pytest.raises(ValueError, match="order"):
        Simulation(t, make_policy("paged", 10_000), order="lpm")
    pol = make_policy("paged", 10_000)
    sim = Simulation(t, pol)
    sim.arrive()
    assert sim.admit() > 0
    with pytest.raises(ValueError, match="still holds"):
        Simulation(t, pol)
