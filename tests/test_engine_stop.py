"""The engine's request endings: stop tokens, abort, forget, and per-request top_p.

The worst defect a server can have is a wrong token served, so every ending is checked against
``generate()``: a greedy request through the engine, batched with others, preempted or not,
returns ``generate()``'s tokens up to and including its first stop token.
"""
from __future__ import annotations

import math

import pytest
import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.loader import load_bundled
from kvlab.compute.sampler import nucleus, sample_next
from kvlab.compute.sequence import GenerateError, SamplingParams

PROMPTS = ["def hello():", "import socket\n", "The socket module", "for i in range(", "class Foo:"]


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


@pytest.fixture(scope="module")
def greedy(bundled):
    model, tok = bundled
    return {p: generate(model, tok.encode(p), 12).tokens for p in PROMPTS}


def _up_to_stop(tokens: list[int], stops: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[:i + 1]
    return tokens


def _no_leak(eng: Engine) -> None:
    """Every block is free or held by the tree (nothing runs), and the ownership rule holds."""
    eng.check_integrity()
    assert not eng.running and not eng.waiting
    tree_blocks = len(eng.cache.tree_block_ids()) if eng.cache is not None else 0
    assert eng.allocator.num_free_blocks + tree_blocks == eng.cache_manager.num_blocks


@pytest.mark.parametrize("num_blocks", [64, 10])          # 10: decode runs short, requests are preempted
def test_greedy_tokens_equal_generate_up_to_the_stop(bundled, greedy, num_blocks):
    model, tok = bundled
    eng = Engine(model, num_blocks=num_blocks, block_size=4, check=True, max_batch_size=4)
    states = []
    for k, p in enumerate(PROMPTS):
        g = greedy[p]
        stops = {4095} | ({g[(3 * k + 2) % len(g)]} if k % 2 else set())   # reached (odd k) or never (4095)
        arrival = k if num_blocks == 64 else 0
        states.append((eng.submit(tok.encode(p), 12, stop_token_ids=sorted(stops), arrival_step=arrival), p, stops))
    eng.run()
    for st, p, stops in states:
        want = _up_to_stop(greedy[p], stops)
        assert st.outputs == [want], p
        assert st.finish_reasons == ["stop" if want[-1] in stops else "length"]
    if num_blocks == 10:
        assert sum(st.preemptions for st, _, _ in states) > 0, "the small pool should preempt"
    _no_leak(eng)


def test_no_stop_tokens_is_length(bundled, greedy):
    model, tok = bundled
    eng = Engine(model, num_blocks=64, block_size=4, check=True)
    st = eng.submit(tok.encode(PROMPTS[0]), 5)
    eng.run()
    assert st.outputs == [greedy[PROMPTS[0]][:5]] and st.finish_reasons == ["length"]


@pytest.mark.parametrize("n", [1, 2])
def test_abort_at_every_step_frees_or_caches_every_block(bundled, greedy, n):
    model, tok = bundled
    for k in range(0, 6):
        eng = Engine(model, num_blocks=40, block_size=4, check=True, max_batch_size=2)
        other = eng.submit(tok.encode(PROMPTS[1]), 8)
        victim = eng.submit(tok.encode(PROMPTS[0]), 10, n=n, temperature=0.0 if n == 1 else 0.7)
        late = eng.submit(tok.encode(PROMPTS[2]), 6, arrival_step=3)
        for _ in range(k):
            eng.step()
        had = [list(o) for o in victim.outputs]
        assert eng.abort(victim.rid) is True
        assert victim.done and victim.finish_reasons == ["abort"] * n and victim.outputs == had
        eng.check_integrity()
        eng.run()
        assert victim.outputs == had, "an aborted request never runs again"
        assert other.outputs == [greedy[PROMPTS[1]][:8]] and late.outputs == [greedy[PROMPTS[2]][:6]]
        assert eng.abort(victim.rid) is False and eng.abort(other.rid) is False
        _no_leak(eng)


def test_abort_before_arrival_and_forget(bundled):
    model, tok = bundled
    eng = Engine(model, num_blocks=32, block_size=4, check=True)
    st = eng.submit(tok.encode(PROMPTS[0]), 4, arrival_step=5, rid="later")
    with pytest.raises(ValueError, match="has not finished"):
        eng.forget("later")
    assert eng.abort("later") and not eng.pending
    eng.run()
    assert st.outputs == [[]] and st.finish_reasons == ["abort"]
    eng.forget("later")
    assert eng.requests == [] and eng.submit(tok.encode(PROMPTS[0]), 2, rid="later").rid == "later"
    with pytest.raises(KeyError, match="'nope'"):
        eng.abort("nope")
    with pytest.raises(KeyError, match="'nope'"):
        eng.forget("nope")


def test_top_p_nucleus_and_per_request_sampling(bundled, greedy):
    model, tok = bundled
    probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    kept = nucleus(probs.log(), 0.7)
    assert kept[:2].isfinite().all() and kept[2] == -math.inf
    assert nucleus(probs.log(), 0.5)[1:].eq(-math.inf).all()           # the top token alone holds 0.5
    assert torch.equal(nucleus(probs.log(), 1.0), probs.log())
    eng = Engine(model, num_blocks=64, block_size=4, check=True)
    ids = tok.encode(PROMPTS[3])
    tiny = eng.submit(ids, 8, temperature=1.5, top_p=1e-6, seed=3)     # a nucleus of one token: greedy
    full = eng.submit(ids, 8, temperature=0.9, seed=11)                 # top_p 1: generate()'s sampling
    plain = eng.submit(ids, 8)
    eng.run()
    assert tiny.outputs == [greedy[PROMPTS[3]][:8]] == plain.outputs
    assert full.outputs == [generate(model, ids, 8, temperature=0.9, seed=11).tokens]
    logits = torch.randn(3, 50)
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(3)]
    assert sample_next(logits, 0.8, gens(), [1.0, 1.0, 1.0]) == sample_next(logits, 0.8, gens())


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"top_p": 0.0}, GenerateError, "top_p must be in"),
    ({"top_p": 1.5}, GenerateError, "top_p must be in"),
    ({"top_p": float("nan")}, GenerateError, "top_p must be in"),
    ({"top_p": "0.9"}, TypeError, "top_p must be a number"),
    ({"stop_token_ids": [-1]}, GenerateError, "stop_token_ids"),
    ({"stop_token_ids": "2"}, TypeError, "stop_token_ids must be a sequence"),
    ({"stop_token_ids": [2.5]}, TypeError, "stop_token_ids"),
    ({"stop_token_ids": [10 ** 6]}, GenerateError, "outside the vocabulary"),
])
def test_bad_sampling_changes_nothing(bundled, kwargs, exc, match):
    model, tok = bundled
    eng = Engine(model, num_blocks=16, block_size=4, check=True)
    with pytest.raises(exc, match=match):
        eng.submit(tok.encode("x = 1"), 4, **kwargs)
    assert eng.requests == [] and eng.pending == [] and eng.allocator.num_free_blocks == 16
    assert SamplingParams(3, stop_token_ids=[2, 0]).stop_token_ids == (2, 0)
