"""Issue 15 items 6-7: token ids and sampling/scheduling arguments are checked, not coerced;
a bad call names the bad value and changes nothing (generate, Engine.submit, Engine())."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.sequence import GenerateError
from kvlab.compute.sequence import Request, SamplingParams

BAD_PROMPTS = [  # (prompt, exception, text the message must contain)
    ([5.9, 7.2], TypeError, "5.9"),
    (["5"], TypeError, "'5'"),
    ([True, 5], TypeError, "True"),
    ([None], TypeError, "None"),
    ([5, -1], GenerateError, "-1"),
    ("56", TypeError, "56"),
    (5, TypeError, "5"),
    (None, TypeError, "None"),
    (torch.tensor([1.0, 2.0]), TypeError, "1.0"),
    ([], GenerateError, "empty"),
]
BAD_SAMPLING = [  # (keyword arguments, exception, text)
    (dict(temperature=float("nan")), GenerateError, "nan"),
    (dict(temperature=float("inf")), GenerateError, "inf"),
    (dict(temperature=-0.5), GenerateError, "-0.5"),
    (dict(temperature="0.5"), TypeError, "'0.5'"),
    (dict(temperature=True), TypeError, "True"),
    (dict(n=0), GenerateError, "n must"),
    (dict(n=2.0), TypeError, "2.0"),
    (dict(n=True), TypeError, "True"),
    (dict(seed=1.5), TypeError, "1.5"),
]


@pytest.mark.parametrize("prompt,err,needle", BAD_PROMPTS, ids=lambda x: repr(x)[:20])
def test_bad_token_ids_rejected_by_generate_and_submit(bundled, prompt, err, needle):
    model, _ = bundled
    with pytest.raises(err, match=needle.replace(".", r"\.")):
        generate(model, prompt, 2, "paged")
    eng = Engine(model, num_blocks=16, block_size=4)
    with pytest.raises(err, match=needle.replace(".", r"\.")):
        eng.submit(prompt, 2)
    assert not eng.requests and not eng.pending and eng.allocator.num_free_blocks == 16


@pytest.mark.parametrize("kw,err,needle", BAD_SAMPLING, ids=lambda x: repr(x)[:24])
def test_bad_sampling_arguments_rejected(bundled, kw, err, needle):
    model, _ = bundled
    with pytest.raises(err, match=needle):
        generate(model, [5, 6], 2, "paged", **kw)
    eng = Engine(model, num_blocks=16, block_size=4)
    with pytest.raises(err, match=needle):
        eng.submit([5, 6], 2, **kw)
    with pytest.raises(err, match=needle):
        SamplingParams(2, **kw)
    assert not eng.requests and not eng.pending


@pytest.mark.parametrize("step,err", [("x", TypeError), (-1, GenerateError), (1.5, TypeError), (True, TypeError),
                                      (None, TypeError)])
def test_bad_arrival_step_rejected_before_the_run(bundled, step, err):
    model, _ = bundled
    eng = Engine(model, num_blocks=16, block_size=4)
    with pytest.raises(err, match="arrival_step"):
        eng.submit([5, 6], 2, arrival_step=step)
    assert not eng.requests
    eng.submit([5, 6], 2, arrival_step=np.int64(1))       # numpy ints are ints
    assert eng.run().requests[0].done


def test_numpy_and_tensor_token_ids_are_accepted_as_ints(bundled):
    model, _ = bundled
    want = generate(model, [5, 7, 9], 3).tokens
    assert generate(model, np.array([5, 7, 9]), 3, "paged").tokens == want
    assert generate(model, [np.int32(5), np.int64(7), 9], 3).tokens == want
    assert generate(model, torch.tensor([[5, 7, 9]]), 3, "contiguous").tokens == want
    eng = Engine(model, num_blocks=16, block_size=4)
    r = eng.submit(np.array([5, 7, 9]), 3)
    eng.run()
    assert r.outputs == [want] and all(type(t) is int for t in r.prompt_ids)


def test_engine_construction_arguments_checked(bundled):
    model, _ = bundled
    for kw, err, needle in [(dict(max_batch_size=0), ValueError, "max_batch_size"),
                            (dict(max_batch_size="4"), TypeError, "max_batch_size"),
                            (dict(max_batch_size=2.0), TypeError, "max_batch_size"),
                            (dict(order="random"), ValueError, "random"),
                            (dict(attention_backend="cuda"), ValueError, "cuda"),
                            (dict(block_size=0), ValueError, "block_size")]:
        with pytest.raises(err, match=needle):
            Engine(model, num_blocks=16, **kw)


def test_submit_ids_and_pool_checks(bundled):
    model, _ = bundled
    eng = Engine(model, num_blocks=16, block_size=4)
    with pytest.raises(TypeError, match="rid"):
        eng.submit([5], 1, rid=7)
    eng.submit([5, 6], 2, n=2, rid="R1")                   # samples R1.0, R1.1
    with pytest.raises(ValueError, match="R1.0"):
        eng.submit([5], 1, rid="R1.0")                     # would collide with a sample's id
    with pytest.raises(ValueError, match="already used"):
        eng.submit([5], 1, rid="R1")
    with pytest.raises(ValueError, match="needs .* blocks"):
        eng.submit([5] * 20, 60)
    ctx = model.config.max_position_embeddings
    with pytest.raises(GenerateError, match="exceeds the model's context"):
        eng.submit([5] * 10, ctx)
    assert [r.rid for r in eng.requests] == ["R1"]
    assert eng.submit([5], 1).rid == "R2"                  # default ids skip the used ones
    rep = eng.run()
    assert [len(o) for o in rep.requests[0].outputs] == [2, 2]


def test_request_and_sampling_params_are_plain_inputs():
    p = SamplingParams(3, n=2, temperature=np.float32(0.5), seed=np.int64(4))
    assert (p.max_new_tokens, p.n, p.temperature, p.seed) == (3, 2, 0.5, 4)
    assert type(p.seed) is int and type(p.temperature) is float and math.isfinite(p.temperature)
    r = Request("A", (1, 2), p, arrival_step=2)
    assert r.prompt_ids == [1, 2] and r.arrival_step == 2
    with pytest.raises(TypeError, match="SamplingParams"):
        Request("A", [1], {"max_new_tokens": 3})
    with pytest.raises(AttributeError):
        p.n = 3                                              # frozen: a request's inputs do not change
