"""kvlab.compute.engine: continuous batching on the paged cache with radix prefix reuse (bundled model)."""
from __future__ import annotations

import pytest

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.sequence import EmptyPromptError

SYSTEM = "你是一个电商平台的客服助手，请礼貌、简洁地回答用户的问题。\n"



def expected(model, req):
    return generate(model, req.prompt_ids, req.max_new_tokens, "naive", n=req.n,
                    temperature=req.temperature, seed=req.seed).sequences


def shared_prefix_requests(tok, eng, new=5):
    qs = ["怎么申请退款？", "订单什么时候发货？", "发票怎么开？", "怎么申请退款？人工呢？", "退款多久能到账？"]
    return [eng.submit(tok.encode(SYSTEM + q), new, arrival_step=2 * i) for i, q in enumerate(qs)]


@pytest.mark.parametrize("radix", [True, False])
def test_engine_tokens_equal_generate_and_reuse_saves_prefill(bundled, radix):
    model, tok = bundled
    eng = Engine(model, num_blocks=96, block_size=4, radix=radix, max_batch_size=4, check=True, record=True)
    reqs = shared_prefix_requests(tok, eng)
    rep = eng.run()
    for r in reqs:
        assert r.done and r.outputs == expected(model, r), r.rid
        assert r.prefill_computed + r.prefill_saved == len(r.prompt_ids)
        assert r.ttft is not None and r.ttft > 0 and r.tokens_per_s > 0
    s = rep.summary()
    sys_len = len(tok.encode(SYSTEM))
    if radix:
        assert reqs[0].prefill_saved == 0
        assert all(r.prefill_saved >= (sys_len // 4) * 4 for r in reqs[1:])
        assert reqs[3].prefill_saved > reqs[1].prefill_saved       # follow-up of R1 reuses R1's question too
        assert s["prefill_saved"] > s["prefill_computed"]
        assert eng.allocator.num_used_blocks == eng.cache.total_size() // 4   # only the tree holds blocks now
    else:
        assert s["prefill_saved"] == 0 and eng.allocator.num_used_blocks == 0
    eng.check_integrity()
    assert [t.step for t in rep.timeline] == list(range(len(rep.timeline)))
    assert max(t.blocks_in_use for t in rep.timeline) == s["peak_blocks"] > 0
    assert len(eng.snapshots) == len(rep.timeline)
    for snap, rec in zip(eng.snapshots, rep.timeline):
        snap.check_integrity()
        assert snap.num_blocks - snap.num_free_blocks == rec.blocks_in_use
    kinds = {e.kind for e in rep.log}
    assert {"arrive", "admit", "append", "finish", "free_seq"} <= kinds
    assert ({"match", "insert", "lock"} <= kinds) == radix


def test_preemption_under_memory_pressure_recomputes_correctly(bundled):
    model, tok = bundled
    eng = Engine(model, num_blocks=14, block_size=4, radix=True, max_batch_size=4, check=True)
    prompts = ["Return the list of", "The socket module", "Raise an error if the", "Open the file and"]
    reqs = [eng.submit(tok.encode(p), 16) for p in prompts]
    rep = eng.run()
    assert rep.summary()["preemptions"] >= 1
    for r in reqs:
        assert r.outputs == expected(model, r), r.rid
    assert any(e.kind == "preempt" for e in rep.log)
    assert any(e.kind == "evict" and e.block_ids for e in rep.log)


def test_parallel_sampling_forks_prompt_blocks(bundled):
    model, tok = bundled
    eng = Engine(model, num_blocks=48, block_size=4, radix=True, check=True)
    r = eng.submit(tok.encode("Return a new list of"), 8, n=3, temperature=1.0, seed=11)
    g = eng.submit(tok.encode("Return a new list of"), 8, arrival_step=3)
    eng.step()
    tables = [s.block_table.block_ids for s in eng.running]
    assert len(tables) == 3 and tables[0][:-1] == tables[1][:-1] == tables[2][:-1]
    assert sum(e.kind == "fork" for e in eng.log) == 2
    eng.run()
    assert r.outputs == expected(model, r) and len({tuple(o) for o in r.outputs}) > 1
    assert g.outputs == expected(model, g) and g.prefill_saved > 0
    assert any(e.kind == "cow" for e in eng.log) or len(r.prompt_ids) % 4 == 0


def test_bad_requests_rejected_without_changes(bundled):
    model, tok = bundled
    eng = Engine(model, num_blocks=8, block_size=4)
    with pytest.raises(EmptyPromptError):
        eng.submit([], 4)
    with pytest.raises(ValueError, match="needs .* blocks"):
        eng.submit(tok.encode("Return the list of all the items in order"), 40)
    with pytest.raises(ValueError, match="max_new_tokens"):
        eng.submit([5, 6], -2)
    assert not eng.requests and eng.allocator.num_free_blocks == 8
    a = eng.submit([5, 6, 7], 0)
    rep = eng.run()
    assert a.done and a.outputs == [[]] and rep.summary()["prefill_computed"] == 0
    with pytest.raises(ValueError, match="already used"):
        eng.submit([5], 1, rid=a.rid)


def test_engine_triton_backend_matches_torch(bundled):
    model, tok = bundled
    outs = {}
    for backend in ("torch", "triton"):
        eng = Engine(model, num_blocks=16, block_size=4, attention_backend=backend, check=True)
        a = eng.submit(tok.encode("Return the list of all"), 2)
        b = eng.submit(tok.encode("Return the list of items"), 2, arrival_step=1)
        eng.run()
        outs[backend] = (a.outputs, b.outputs, b.prefill_saved)
    assert outs["torch"] == outs["triton"] and outs["torch"][2] > 0


def test_engine_events_state_view_and_order(bundled):
    """The handle submit returns (RequestState), the engine's events with their step, and the
    lpm order: a request sharing the cached prefix overtakes an unrelated one."""
    model, tok = bundled
    eng = Engine(model, num_blocks=64, block_size=4, max_batch_size=1, order="lpm", check=True)
    shared = tok.encode("The socket module provides access to the BSD socket interface.")
    a = eng.submit(shared, 2)
    other = eng.submit(tok.encode("Open the file and read"), 2, arrival_step=1)
    follow = eng.submit(shared + tok.encode(" It is"), 2, arrival_step=1)
    rep = eng.run()
    assert a.metrics.admitted_step == 0 and follow.metrics.admitted_step < other.metrics.admitted_step
    assert follow.prefill_saved > 0 and other.prefill_saved == 0
    assert [r.rid for r in rep.requests] == ["R1", "R2", "R3"] and all(r.done for r in rep.requests)
    assert a.request.sampling_params.max_new_tokens == 2 and a.seqs[0].seq_id == "R1"
    ev = [e for e in rep.log if e.kind in ("arrive", "finish")]
    assert [(e.kind, e.seq_id, e.detail["engine_step"]) for e in ev[:4]] == [
        ("arrive", "R1", 0), ("arrive", "R2", 1), ("arrive", "R3", 1), ("finish", "R1", 1)]
    assert "R3" in rep.table() and rep.summary()["generated_tokens"] == 6
    # a follow-up turn submitted after a run, as lesson 07 does
    r4 = eng.submit(a.prompt_ids + a.outputs[0] + tok.encode(" Use"), 2, rid="R4", arrival_step=eng.step_no)
    eng.run()
    assert r4.done and r4.prefill_saved >= len(shared) // 4 * 4
