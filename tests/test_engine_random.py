"""Random workloads on a tiny random model: the engine's outputs equal generate()'s token for token
and length for length, and every invariant (ref_count == tree + tables, queues, no sample past its
max_new_tokens) holds after every step, whatever the pool size, sharing, order and preemption.

The suite runs a fixed small budget (30 seeds, a few seconds); ``KVLAB_RANDOM_SEEDS=2000`` runs
2,000 (``tests/budget.py``)."""
from __future__ import annotations

import budget
import random

import pytest
import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.loader import load_bundled
from kvlab.compute.model import Llama, LlamaConfig
from kvlab.memory.block_table import blocks_needed

V = 64


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # tiny matmuls: one thread is faster, and CI has 2 shared cores
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                      tie_word_embeddings=False)
    yield Llama(cfg).eval()
    torch.set_num_threads(threads)


def random_workload(rng: random.Random):
    """(engine keyword arguments, submit calls): a pool just big enough for the largest request."""
    bs = rng.randint(1, 4)
    stems = [[rng.randrange(V) for _ in range(rng.randint(1, 12))] for _ in range(3)]
    pressure = rng.random() < 0.4                      # long answers arriving together: preemption
    calls = []
    for _ in range(rng.randint(2, 8)):
        prompt = rng.choice(stems)[: rng.randint(1, 12)] + [rng.randrange(V) for _ in range(rng.randint(0, 4))]
        new = rng.randint(8, 20) if pressure else rng.choice([0, 1, 2, rng.randint(3, 20)])
        calls.append(dict(prompt_ids=prompt, max_new_tokens=new, n=rng.choice([1, 1, 2, 3]),
                          temperature=rng.choice([0.0, 0.9]), seed=rng.randrange(100),
                          arrival_step=rng.randint(0, 2) if pressure else rng.randint(0, 12)))
    need = max(blocks_needed(len(c["prompt_ids"]), bs) + c["n"] * (blocks_needed(c["max_new_tokens"], bs) + 1)
               for c in calls)
    kw = dict(num_blocks=need + rng.randint(0, 2), block_size=bs, radix=rng.random() < 0.6,
              max_batch_size=rng.randint(1, 6), order=rng.choice(["fcfs", "lpm"]))
    return kw, calls


def test_random_workloads_match_generate(tiny):
    seen = {"preempt": 0, "fork": 0, "cow": 0, "evict": 0}
    for seed in budget.seeds(30):
        kw, calls = random_workload(random.Random(seed))
        eng = Engine(tiny, check=True, **kw)
        reqs = [eng.submit(c["prompt_ids"], c["max_new_tokens"], n=c["n"], temperature=c["temperature"],
                           seed=c["seed"], arrival_step=c["arrival_step"]) for c in calls]
        eng.run()
        for r, c in zip(reqs, calls):
            want = generate(tiny, c["prompt_ids"], c["max_new_tokens"], "naive", n=c["n"],
                            temperature=c["temperature"], seed=c["seed"]).sequences
            assert r.done and r.outputs == want, (seed, kw, r.rid, r.outputs, want)
        cached = eng.cache.total_size() // kw["block_size"] if kw["radix"] else 0
        assert eng.allocator.num_used_blocks == cached, seed              # only the tree holds blocks now
        for kind in seen:
            seen[kind] += sum(e == kind for e in eng.log.kinds())
    assert all(v > 0 for v in seen.values()), seen                      # the workloads exercise each path


def test_issue_15_reproducer_no_token_past_max_new_tokens(bundled):
    """Issue 15 item 1: B sampled its only token in the step where A needed a block; B was
    preempted, re-run, and sampled a second one ([[200, 556]])."""
    model, _ = bundled
    for radix in (True, False):
        eng = Engine(model, num_blocks=33, block_size=1, radix=radix, check=True)
        a = eng.submit(list(range(100, 102)), 30)
        b = eng.submit(list(range(200, 221)), 1, arrival_step=11)
        eng.run()
        assert b.outputs == generate(model, list(range(200, 221)), 1).sequences == [[200]]
        assert a.outputs == generate(model, list(range(100, 102)), 30).sequences


def test_finished_sample_is_never_preempted_or_rerun(tiny):
    """Short requests (2 tokens, n samples) arrive while a long one fills a block-size-1 pool:
    they are preempted after their first token and re-prefilled, yet every sample ends with
    exactly max_new_tokens tokens, equal to generate()'s."""
    preemptions = 0
    for num_blocks in (23, 24):
        for n in (1, 2, 3):
            eng = Engine(tiny, num_blocks=num_blocks, block_size=1, radix=False, check=True)
            long = eng.submit([1, 2], 20)
            short = [eng.submit([3 + i] * 4, 2, n=n, temperature=0.9, seed=i, arrival_step=12 + 2 * i)
                     for i in range(5)]
            preemptions += eng.run().summary()["preemptions"]
            assert long.outputs == generate(tiny, [1, 2], 20).sequences
            for i, r in enumerate(short):
                assert r.outputs == generate(tiny, [3 + i] * 4, 2, n=n, temperature=0.9, seed=i).sequences
                assert [len(o) for o in r.outputs] == [2] * n
    assert preemptions >= 3


def test_bundled_model_engine_matches_generate_under_pressure():
    """The same property on the real (bundled) model: a few workloads, radix on and off."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_bundled()
        rng = random.Random(5)
        texts = ["Return the list of", "Return the number of", "The socket module", "Open the file"]
        for radix in (True, False):
            eng = Engine(model, num_blocks=20, block_size=2, radix=radix, max_batch_size=3, check=True)
            reqs = [eng.submit(tok.encode(rng.choice(texts)), rng.randint(1, 8), n=rng.choice([1, 2]),
                               temperature=0.7, seed=i, arrival_step=rng.randint(0, 4)) for i in range(5)]
            eng.run()
            for r in reqs:
                assert r.outputs == generate(model, r.prompt_ids, r.max_new_tokens, n=r.n, temperature=0.7,
                                             seed=r.seed).sequences, (radix, r.rid)
    finally:
        torch.set_num_threads(threads)
