"""One request cycle: the engine (a real model) and the simulator's radix policy reuse the same
prefixes, because both go through kvlab.reuse.cache_manager.CacheManager.

One trace, served one request at a time (so the two schedulers see the same order), with a pool
small enough that the tree must evict: per request, the prompt tokens found cached and the
tokens prefilled must agree exactly, with ref_count == tree + tables checked after every engine
step and every simulator iteration.
"""
from __future__ import annotations

import random

import pytest

from kvlab.sim import Trace, TraceRequest, make_policy, simulate

BLOCK_SIZE = 2
NUM_BLOCKS = 30  # 60 token slots: too few for every request's prefix, so LRU leaves go


def _prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    systems = [[rng.randrange(5, 400) for _ in range(rng.randint(6, 14))] for _ in range(3)]
    prompts = []
    for _ in range(9):
        prompt = list(rng.choice(systems)) + [rng.randrange(5, 400) for _ in range(rng.randint(1, 6))]
        if prompts and rng.random() < 0.3:  # a follow-up of the previous request
            prompt = prompts[-1] + prompt[-3:]
        prompts.append(prompt)
    return prompts


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_engine_and_simulator_reuse_the_same_prefixes(bundled, seed):
    from kvlab.compute.engine import Engine

    model, _tok = bundled
    prompts = _prompts(seed)
    out_len = 4
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, radix=True, check=True)
    states = []
    for p in prompts:  # one request at a time: each arrives after the one before has finished
        states.append(eng.submit(p, out_len, arrival_step=eng.step_no))
        eng.run()
    assert eng.cache_manager.tree.stats.evicted_tokens > 0, "the pool should be small enough to evict"

    trace = Trace("parity", [
        TraceRequest(i, arrival=10.0 * i, prompt_len=len(p), output_len=out_len, prompt=tuple(p),
                     output=tuple(s.outputs[0]))
        for i, (p, s) in enumerate(zip(prompts, states))])
    pol = make_policy("radix", capacity=NUM_BLOCKS * BLOCK_SIZE, block_size=BLOCK_SIZE)
    res = simulate(trace, pol, check=True)

    sim_hits = [r.hit_tokens for r in sorted(res.records, key=lambda r: r.req_id)]
    eng_hits = [s.prefill_saved for s in states]
    assert eng_hits == sim_hits
    assert sum(s.prefill_computed for s in states) == res.prefill_tokens
    assert any(eng_hits), "some prefix should be reused"
    eng.cache_manager.check_integrity()
    pol.check([])
