"""Random workloads on a tiny random model: the engine's tokens equal generate()'s, and
ref counts equal tree + tables after every step, whatever the pool size, sharing and preemption."""
from __future__ import annotations

import random

import pytest
import torch

from kvlab.engine import Engine
from kvlab.generate import generate
from kvlab.model import Llama, LlamaConfig
from kvlab.paged import KVCacheError


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # tiny matmuls: one thread is faster, and CI has 2 shared cores
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                      tie_word_embeddings=False)
    yield Llama(cfg).eval()
    torch.set_num_threads(threads)


@pytest.mark.parametrize("seed", range(40))
def test_random_workload_matches_generate(tiny, seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 4])
    radix = rng.random() < 0.75
    stems = [[rng.randrange(64) for _ in range(rng.randint(1, 12))] for _ in range(3)]
    eng = Engine(tiny, num_blocks=rng.randint(7, 16) * 4 // block_size,   # small: preemption and eviction happen
                 block_size=block_size, radix=radix, max_batch_size=rng.randint(2, 8), check=True)
    reqs = []
    for i in range(rng.randint(3, 8)):
        prompt = rng.choice(stems)[: rng.randint(1, 12)] + [rng.randrange(64) for _ in range(rng.randint(0, 5))]
        n = rng.choice([1, 1, 2, 3])
        try:
            reqs.append(eng.submit(prompt, rng.randint(0, 16), n=n, temperature=rng.choice([0.0, 0.9]),
                                   seed=rng.randrange(100), arrival_step=rng.randint(0, 8)))
        except ValueError:
            continue                                   # too big for this pool: rejected, nothing changed
    try:
        eng.run()
    except KVCacheError:                              # n samples together too big for this pool
        eng.check_integrity()
        return
    for r in reqs:
        want = generate(tiny, r.prompt_ids, r.max_new_tokens, "naive", n=r.n, temperature=r.temperature, seed=r.seed)
        assert r.outputs == want.sequences, (seed, r.rid)
    used = eng.cache.total_size() // block_size if radix else 0
    assert eng.allocator.num_used_blocks == used
