"""kvlab.compute.generate: three decode paths give the same tokens and logits on the bundled model."""
from __future__ import annotations

import pytest
import torch

from kvlab.compute.generate import UnknownStrategyError, generate
from kvlab.compute.sequence import ContextOverflowError, EmptyPromptError, GenerateError
from kvlab.compute.kv_tensors import ContiguousKV, PagedKVPool
from kvlab.memory import BlockManager, OutOfBlocks, slot_mapping

PROMPTS = ["Return the", "The socket module provides", "怎么申请退款", "def f(x):\n    ", "A"]



@pytest.mark.parametrize("text,steps", [(PROMPTS[0], 11), (PROMPTS[1], 7), (PROMPTS[2], 9), (PROMPTS[3], 6), (PROMPTS[4], 13)])
def test_three_paths_same_tokens_and_logits(bundled, text, steps):
    model, tok = bundled
    ids = tok.encode(text)
    runs = {s: generate(model, ids, steps, strategy=s, block_size=4) for s in ("naive", "contiguous", "paged")}
    base = runs["naive"]
    assert len(base.tokens) == steps
    for s, r in runs.items():
        assert r.tokens == base.tokens, s
        torch.testing.assert_close(r.logits, base.logits, atol=2e-4, rtol=1e-4)
    # the paged run crossed block boundaries (block size 4)
    assert (len(ids) + steps - 1) // 4 > len(ids) // 4


def test_greedy_output_is_deterministic_text(bundled):
    model, tok = bundled
    r = generate(model, tok.encode("The function returns"), 12, strategy="paged")
    text = r.text(tok)
    assert text and text == tok.decode(r.tokens)
    assert r.tokens == generate(model, tok.encode("The function returns"), 12, strategy="paged").tokens


@pytest.mark.parametrize("prompt_len", [6, 8])   # last prompt block partial (COW) / full (no copy)
def test_parallel_sampling_fork_matches_independent_runs(bundled, prompt_len):
    model, tok = bundled
    ids = tok.encode("Return a list of the words in the string, using sep as the delimiter.")[:prompt_len]
    m = BlockManager(num_blocks=12, block_size=4)
    paged = generate(model, ids, 6, "paged", n=2, temperature=1.0, seed=7, manager=m, keep=True)
    naive = generate(model, ids, 6, "naive", n=2, temperature=1.0, seed=7)
    contig = generate(model, ids, 6, "contiguous", n=2, temperature=1.0, seed=7)
    assert paged.sequences == naive.sequences == contig.sequences
    assert paged.sequences[0] != paged.sequences[1]           # two different samples
    torch.testing.assert_close(paged.logits, naive.logits, atol=2e-4, rtol=1e-4)
    t0, t1 = m.tables["seq0"], m.tables["seq1"]
    shared = 2 if prompt_len == 8 else 1                     # full prompt blocks stay shared
    assert t0.block_ids[:shared] == t1.block_ids[:shared]
    assert all(m.allocator.ref_count[b] == 2 for b in t0.block_ids[:shared])
    assert (len(paged.copies) == 1) == (prompt_len % 4 != 0)  # copy-on-write only for a partial block
    m.check_integrity()
    for s in ("seq0", "seq1"):
        m.free(s)
    assert m.allocator.num_free_blocks == 12


def test_triton_backend_matches_torch_backend(bundled):
    model, tok = bundled
    ids = tok.encode("Return the")[:3]
    a = generate(model, ids, 3, "paged", "triton", block_size=4)
    b = generate(model, ids, 3, "paged", "torch", block_size=4)
    assert a.tokens == b.tokens
    torch.testing.assert_close(a.logits, b.logits, atol=1e-3, rtol=1e-3)


def test_step_flops_naive_quadratic_cached_linear(bundled):
    model, tok = bundled
    ids = tok.encode("Return the")
    nv = generate(model, ids, 5, "naive")
    pg = generate(model, ids, 5, "paged")
    assert nv.step_flops[0] == pg.step_flops[0]              # same prefill
    d_naive = [b - a for a, b in zip(nv.step_flops[1:], nv.step_flops[2:])]
    d_paged = [b - a for a, b in zip(pg.step_flops[1:], pg.step_flops[2:])]
    assert all(d > 10 * model.flops_per_token(1) // 20 for d in d_naive)   # grows by a whole token each step
    assert all(0 < d < model.flops_per_token(1) // 20 for d in d_paged)     # grows by one attention column
    assert pg.context_lens == [len(ids) + i for i in range(5)]
    assert nv.kv_bytes == 0 and pg.kv_bytes > 0


def test_bad_input_raises_named_errors_and_leaves_pool_alone(bundled):
    model, tok = bundled
    m = BlockManager(num_blocks=4, block_size=4)
    pool = PagedKVPool.for_model(model, 4, 4)
    before = m.allocator.state()
    ctx = model.config.max_position_embeddings
    cases = [
        (EmptyPromptError, dict(prompt_ids=[], max_new_tokens=3, strategy="paged"), "empty"),
        (ContextOverflowError, dict(prompt_ids=[5] * (ctx + 1), max_new_tokens=0, strategy="paged"), str(ctx + 1)),
        (ContextOverflowError, dict(prompt_ids=[5] * 10, max_new_tokens=ctx, strategy="paged"), "max_new_tokens"),
        (GenerateError, dict(prompt_ids=[5], max_new_tokens=-1, strategy="paged"), "-1"),
        (UnknownStrategyError, dict(prompt_ids=[5], max_new_tokens=2, strategy="beam"), "beam"),
        (GenerateError, dict(prompt_ids=[5], max_new_tokens=2, strategy="paged", attention_backend="cuda"), "cuda"),
        (GenerateError, dict(prompt_ids=[model.config.vocab_size], max_new_tokens=2, strategy="paged"), "vocabulary"),
        (GenerateError, dict(prompt_ids=[5], max_new_tokens=2, strategy="paged", n=0), "n must"),
    ]
    for err, kw, needle in cases:
        with pytest.raises(err, match=needle):
            generate(model, manager=m, pool=pool, **kw)
        assert m.allocator.state() == before and not m.tables
    # too few blocks: fails mid-way, every block taken is released
    with pytest.raises(OutOfBlocks):
        generate(model, tok.encode("Return the list of all"), 20, "paged", manager=m, pool=pool)
    assert m.allocator.state()[0] == before[0] and not m.tables
    m.check_integrity()
    # the same manager still works afterwards
    r = generate(model, [5, 6], 3, "paged", manager=m, pool=pool)
    assert r.tokens == generate(model, [5, 6], 3, "naive").tokens
    assert m.allocator.num_free_blocks == 4


def test_zero_new_tokens_and_kv_stores():
    assert slot_mapping([3, 7, 1], 3, 6, 4) == [15, 28, 29]
    c = ContiguousKV(2, batch=1, max_len=8, num_kv_heads=2, head_dim=4)
    assert c.nbytes == 2 * 2 * 8 * 2 * 4 * 4
    with pytest.raises(ValueError, match="max_len=8"):
        c.write(0, 6, torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4))
    pool = PagedKVPool(2, num_blocks=4, block_size=2, num_kv_heads=1, head_dim=2)
    pool.k_cache[:, 1] = 3.0
    pool.copy_blocks([(1, 2)])
    assert torch.equal(pool.k_cache[:, 2], pool.k_cache[:, 1]) and pool.k_cache[:, 3].abs().sum() == 0
    k, v = pool.gather(0, [2, 0], 3)
    assert k.shape == (3, 1, 2) and k[:2].eq(3).all() and k[2].eq(0).all()
