"""Keeping fewer tokens as block-table operations (StreamingLLM, H2O, Quest) and int8/fp8 KV, on
the bundled tiny model: the table changes only through BlockManager.drop_blocks, integrity holds
after every step, dropped blocks go back to the pool, and each rule keeps what its paper keeps."""

import budget
import pytest
import torch
from hypothesis import given, settings, strategies as st

from kvlab.compute.generate import generate
from kvlab.compute.kv_compress import (
    METHODS,
    CompressedDecoder,
    CompressionConfig,
    block_key_minmax,
    h2o_drop,
    QUEST_DENSE_LAYERS,
    h2o_keep_heads,
    quest_bounds,
    quest_select,
    quest_select_heads,
    streaming_drop,
)
from kvlab.compute.model import apply_rope
from kvlab.kernels.reference import naive_attention
from kvlab.compute.kv_quant import QuantizedKVPool
from kvlab.compute.loader import load_bundled
from kvlab.memory.block_manager import BlockManager


@pytest.fixture(scope="module")
def model():
    return load_bundled()[0]


PROMPT = [(7 * i + 3) % 4000 + 5 for i in range(45)]


# ---------------------------------------------------------------- BlockManager.drop_blocks

def test_drop_blocks_shortens_the_table_and_frees_the_blocks():
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 14)                                   # blocks [0, 1, 2, 3], last holds 2 tokens
    free_before = m.allocator.num_free_blocks
    assert m.drop_blocks("A", [2, 1]) == [1, 2]
    t = m.table("A")
    assert (t.block_ids, t.num_tokens) == ([0, 3], 6)
    assert m.allocator.num_free_blocks == free_before + 2
    m.check_integrity()
    assert m.log.events[-1].kind == "drop"
    m.append("A", 3)                                          # growing afterwards still works
    m.check_integrity()


def test_drop_blocks_of_a_shared_block_only_drops_a_reference():
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 12)
    m.fork("A", "B")
    assert m.drop_blocks("B", [1]) == []                      # A still holds it
    assert m.allocator.ref_count[1] == 1 and m.table("A").block_ids == [0, 1, 2]
    m.check_integrity()


@pytest.mark.parametrize("bad,match", [([3], "logical block 3 is not a full block"), ([1, 1], "appears twice"),
                                       ([-1], "block"), ([1.0], None)])
def test_drop_blocks_refuses_and_changes_nothing(bad, match):
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 14)
    before = (list(m.table("A").block_ids), m.table("A").num_tokens, list(m.allocator.ref_count))
    with pytest.raises((ValueError, TypeError), match=match):
        m.drop_blocks("A", bad)
    assert (m.table("A").block_ids, m.table("A").num_tokens, m.allocator.ref_count) == before


@settings(max_examples=budget.examples(60), deadline=None)
@given(st.integers(1, 80), st.integers(1, 4), st.integers(1, 6), st.sampled_from([2, 4, 8]))
def test_streaming_keeps_sinks_and_window_property(n, sink, window, bs):
    m = BlockManager(num_blocks=64, block_size=bs)
    m.add_sequence("A", n)
    t = m.table("A")
    nb, full = len(t.block_ids), t.num_full_blocks
    drop = streaming_drop(nb, full, sink, window)
    kept_ids = [b for i, b in enumerate(t.block_ids) if i not in drop]
    m.drop_blocks("A", drop)
    m.check_integrity()
    assert m.table("A").block_ids == kept_ids
    keep = sorted(set(range(nb)) - set(drop))
    assert set(range(min(sink, nb))) <= set(keep)                      # the sinks stay
    assert set(range(max(0, nb - window), nb)) <= set(keep)            # so does the window
    assert len(keep) == min(nb, sink + window) or nb - 1 not in drop


def test_h2o_keeps_heavy_hitters_and_the_window():
    assert h2o_drop([9, 1, 7, 1, 1, 1, 1, 1, 1, 1], 9, 4, 2) == [1, 3, 4, 5, 6, 7]
    assert h2o_drop([1, 2, 3], 3, 5, 1) == []                          # within budget: nothing goes
    assert h2o_drop([0, 0, 0, 0], 4, 2, 1) == [1, 2]                  # ties: the earlier block


def test_quest_bound_is_an_upper_bound_and_picks_the_right_blocks():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(37, 2, 16, generator=g)                           # 37 tokens, 2 KV heads
    q = torch.randn(4, 16, generator=g)                               # 4 query heads (GQA 2)
    k_min, k_max = block_key_minmax(k, 4)
    assert k_min.shape == (10, 2, 16)
    bounds = quest_bounds(q, k_min, k_max)                            # (4, 10)
    scores = torch.einsum("hd,shd->hs", q, k.repeat_interleave(2, 1))  # (4, 37)
    for b in range(10):
        assert (scores[:, b * 4:(b + 1) * 4].max(1).values <= bounds[:, b] + 1e-5).all()
    assert quest_bounds(torch.tensor([[1.0, -1.0]]), torch.zeros(1, 1, 2), torch.tensor([[[2.0, 3.0]]])).item() == 2
    assert quest_select(torch.tensor([[5.0, 1, 4, 0]]), 2) == [0, 3]
    assert quest_select(torch.tensor([[5.0, 1, 4, 0]]), 9) == [0, 1, 2, 3]


# ---------------------------------------------------------------- the decoder on the bundled model

def test_full_method_gives_the_paged_engines_tokens(model):
    want = generate(model, PROMPT, 10, strategy="paged").tokens
    assert CompressedDecoder(model, CompressionConfig("full"), block_size=4).generate(PROMPT, 10) == want


@pytest.mark.parametrize("method", ["streaming-orig", "h2o-block"])
def test_dropping_methods_keep_the_budget_and_return_blocks(model, method):
    d = CompressedDecoder(model, CompressionConfig(method, budget_tokens=16, sink_tokens=4), block_size=4,
                          num_blocks=32)
    d.generate(PROMPT, 9)
    table = d.manager.table("S")
    assert len(table.block_ids) <= 4 + 1 and d.num_kept == table.num_tokens
    assert d.manager.allocator.num_free_blocks == 32 - len(table.block_ids)
    d.manager.check_integrity()
    assert d.positions == sorted(d.positions) and d.positions[-1] == len(PROMPT) + 8   # original positions kept
    if method == "streaming-orig":
        assert d.positions[:4] == [0, 1, 2, 3]                        # the sink block
        assert d.positions[4:] == list(range(d.positions[4], len(PROMPT) + 9))         # then one recent run


def test_quest_shared_reads_only_its_budget_but_keeps_every_token(model):
    d = CompressedDecoder(model, CompressionConfig("quest-shared", budget_tokens=8), block_size=4)
    d.generate(PROMPT, 6)
    assert d.num_kept == len(PROMPT) + 6                              # generate feeds each of its 6 tokens
    layers = model.config.num_hidden_layers
    assert float(d.record.reads.sum()) <= 6 * layers * 8                      # 2 blocks of 4 per layer and step
    dense = CompressedDecoder(model, CompressionConfig("full"), block_size=4)
    dense.generate(PROMPT, 6)
    assert set(dense.record.reads[:len(PROMPT)].tolist()) == {6 * layers}       # dense: every position, every step


def test_int8_pool_holds_about_half_the_bytes_and_nearly_the_same_tokens(model):
    full = CompressedDecoder(model, CompressionConfig("full"), block_size=4)
    q8 = CompressedDecoder(model, CompressionConfig("int8"), block_size=4)
    a, b = full.generate(PROMPT, 8), q8.generate(PROMPT, 8)
    assert isinstance(q8.pool, QuantizedKVPool)
    assert q8.pool.bytes_per_token() == 2 * 4 * 2 * (32 + 4)          # vs fp32: 2 x 4 x 2 x 32 x 4
    assert a[0] == b[0]


@pytest.mark.parametrize("method", ["quest", "quest-shared", "int8", "streaming"])
def test_triton_backend_gives_the_torch_backends_tokens(model, method):
    prompt = PROMPT[:13]
    cfg = CompressionConfig(method, budget_tokens=8, sink_tokens=4)
    a = CompressedDecoder(model, cfg, block_size=4).generate(prompt, 3)
    b = CompressedDecoder(model, cfg, block_size=4, backend="triton").generate(prompt, 3)
    assert a == b


def test_bad_configs_name_the_value(model):
    with pytest.raises(ValueError, match="method 'lru' is not one of"):
        CompressionConfig("lru")
    with pytest.raises(ValueError, match="budget_tokens must be an int >= 1, got 0"):
        CompressionConfig("h2o", budget_tokens=0)
    with pytest.raises(ValueError, match="backend must be"):
        CompressedDecoder(model, backend="cuda")
    assert set(METHODS) == {"full", "streaming", "streaming-orig", "h2o", "h2o-block", "quest", "quest-shared",
                            "int8", "fp8"}
    with pytest.raises(ValueError, match="method 'h2o' keeps different tokens per layer and head"):
        CompressedDecoder(model, CompressionConfig("h2o"), backend="triton")


@pytest.mark.parametrize("method", ["full", "streaming", "h2o", "h2o-block", "quest", "int8"])
def test_starting_from_a_shared_prefill_is_the_same_as_prefilling(model, method):
    cfg = CompressionConfig(method, budget_tokens=16)
    a = CompressedDecoder(model, cfg, block_size=4)
    want = a.generate(PROMPT, 5)
    full = CompressedDecoder(model, CompressionConfig("full"), block_size=4)
    full.prefill(PROMPT)
    b = CompressedDecoder(model, cfg, block_size=4)
    assert b.generate(PROMPT, 5, full.prefill_state) == want
    assert b.positions == a.positions
    b.manager.check_integrity()
    with pytest.raises(ValueError, match="already holds a sequence"):
        b.start_from(full.prefill_state)


# ---------------------------------------------------------------- each method against its paper's rule, written plainly

def streaming_reference(model, prompt, tokens, budget, sinks, bs):
    """StreamingLLM's ``pos_shift`` (the paper's code) written plainly: K kept *before* RoPE,
    rotated at its position in the cache (0..n-1) at every step, the query at the last position;
    after the prompt and after each step that fills a block (every step when bs = 1) the cache
    keeps its first sink blocks and its newest blocks (the partial one included), ``budget``
    tokens' worth of blocks in all. Returns the
    logits after the prompt and after each token of ``tokens``."""
    cache = {}                                                         # layer -> (k before RoPE, v), (n, nkv, hs)
    sink_blocks, budget_blocks = min(-(-sinks // bs), budget // bs - 1), budget // bs

    def attention(layer, q, k, v):                                     # called with RoPE position 0: not rotated
        kc, vc = cache.get(layer, (k[:0], v[:0]))
        kc, vc = torch.cat([kc, k]), torch.cat([vc, v])
        cache[layer] = (kc, vc)
        n, T = kc.shape[0], q.shape[0]
        cos, sin = model.rope(torch.arange(n))                         # positions inside the cache
        return naive_attention(apply_rope(q, cos[n - T:], sin[n - T:]), apply_rope(kc, cos, sin), vc)

    def evict(after_prompt):
        n = cache[0][0].shape[0]
        nb = -(-n // bs)
        if (n % bs and not after_prompt) or nb <= budget_blocks:
            return
        keep = [i for i in range(n) if i // bs < sink_blocks or i // bs >= nb - (budget_blocks - sink_blocks)]
        for layer, (k, v) in cache.items():
            cache[layer] = (k[keep], v[keep])

    out = [model(torch.tensor(prompt), torch.zeros(len(prompt), dtype=torch.long), attention)[-1]]
    for i, t in enumerate(tokens):
        evict(after_prompt=i == 0)
        out.append(model(torch.tensor([t]), torch.zeros(1, dtype=torch.long), attention)[-1])
    return out


def h2o_reference(model, prompt, tokens, budget):
    """H2O as its paper's code: per layer and KV head, a compacted cache of (K, V, accumulated
    attention); after the prompt and after each step, a head holding more than ``budget`` tokens
    keeps its newest ``budget // 2`` and, of the others, the ``budget - budget // 2`` with the
    highest score. Original positions (RoPE as computed). Returns the logits as above."""
    cache = {}                                                         # (layer, head) -> [k (m, hs), v, score (m,)]
    hs = model.config.head_dim

    def attention(layer, q, k, v):                                     # q (T, nh, hs); k, v (T, nkv, hs)
        T, nkv = k.shape[0], k.shape[1]
        g = q.shape[1] // nkv
        out = torch.empty_like(q)
        for h in range(nkv):
            kc, vc, sc = cache.get((layer, h), (k[:0, h], v[:0, h], torch.zeros(0, dtype=torch.float64)))
            kc, vc, sc = torch.cat([kc, k[:, h]]), torch.cat([vc, v[:, h]]), torch.cat([sc, sc.new_zeros(T)])
            m = kc.shape[0]
            scores = torch.einsum("tgd,sd->gts", q[:, h * g:(h + 1) * g], kc) / hs ** 0.5          # (g, T, m)
            causal = torch.arange(m)[None, :] > torch.arange(m - T, m)[:, None]                    # (T, m)
            probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
            out[:, h * g:(h + 1) * g] = torch.einsum("gts,sd->tgd", probs, vc)
            cache[(layer, h)] = (kc, vc, sc + probs.sum((0, 1)).double())
        return out

    def evict():
        recent = budget // 2
        for key, (k, v, sc) in cache.items():
            m = k.shape[0]
            if m > budget:
                heavy = sorted(torch.topk(sc[:m - recent], budget - recent).indices.tolist())
                keep = heavy + list(range(m - recent, m))
                cache[key] = (k[keep], v[keep], sc[keep])

    out = [model(torch.tensor(prompt), torch.arange(len(prompt)), attention)[-1]]
    for i, t in enumerate(tokens):
        evict()
        out.append(model(torch.tensor([t]), torch.tensor([len(prompt) + i]), attention)[-1])
    return out


def decoder_logits(d, prompt, tokens):
    return [d.prefill(prompt)] + [d.step(t) for t in tokens]


@pytest.mark.parametrize("bs", [1, 4])
def test_streaming_gives_positions_inside_the_cache_as_the_papers_pos_shift(model, bs):
    tokens = [(11 * i + 5) % 4000 + 5 for i in range(10)]
    d = CompressedDecoder(model, CompressionConfig("streaming", budget_tokens=16, sink_tokens=4), block_size=bs,
                          num_blocks=128)
    got = decoder_logits(d, PROMPT, tokens)
    want = streaming_reference(model, PROMPT, tokens, 16, 4, bs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
    # the variant keeps the original positions: other numbers once something was dropped
    orig = CompressedDecoder(model, CompressionConfig("streaming-orig", budget_tokens=16, sink_tokens=4),
                             block_size=bs, num_blocks=128)
    assert not torch.allclose(decoder_logits(orig, PROMPT, tokens)[-1], got[-1], atol=1e-3)
    assert d.positions == orig.positions                               # the same tokens kept


def test_h2o_evicts_per_layer_and_head_token_by_token_as_the_paper(model):
    tokens = [(13 * i + 7) % 4000 + 5 for i in range(8)]
    d = CompressedDecoder(model, CompressionConfig("h2o", budget_tokens=12), block_size=4)
    got = decoder_logits(d, PROMPT, tokens)
    want = h2o_reference(model, PROMPT, tokens, 12)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
    assert (d.head_keep.sum(-1) == 12).all()                           # every (layer, head) at its budget
    rows = d.head_keep.flatten(0, 1)
    assert any(not torch.equal(rows[0], r) for r in rows[1:])          # heads keep different tokens
    assert d.kv_bytes() == 12 * d.pool.bytes_per_token() < d.pool_bytes()
    d.manager.check_integrity()


def test_h2o_keep_heads_keeps_the_window_and_the_heaviest():
    scores = torch.tensor([[[5.0, 1, 4, 2, 9, 3], [0.0, 8, 1, 7, 2, 1]]])   # (1 layer, 2 heads, 6 slots)
    keep = torch.ones(1, 2, 6, dtype=torch.bool)
    keep[0, 0, 0] = False                                              # head 0 evicted slot 0 earlier
    assert h2o_keep_heads(scores, keep, 4, 2).int().tolist() == [[[0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 1, 1]]]
    assert torch.equal(h2o_keep_heads(scores, keep, 9, 2), keep)      # within budget: nothing goes


def test_quest_selects_per_kv_head_as_a_brute_force_bound():
    g = torch.Generator().manual_seed(1)
    nh, nkv, hs, bs, n, top = 6, 2, 8, 4, 37, 3
    q, k = torch.randn(nh, hs, generator=g), torch.randn(n, nkv, hs, generator=g)
    got = quest_select_heads(quest_bounds(q, *block_key_minmax(k, bs)), nkv, top)
    nb = -(-n // bs)
    for h in range(nkv):
        bound = []
        for b in range(nb):
            keys = [k[t, h] for t in range(b * bs, min(n, (b + 1) * bs))]
            lo = [min(float(x[d]) for x in keys) for d in range(hs)]
            hi = [max(float(x[d]) for x in keys) for d in range(hs)]
            bound.append(max(sum(max(float(q[j, d]) * lo[d], float(q[j, d]) * hi[d]) for d in range(hs))
                             for j in range(h * nh // nkv, (h + 1) * nh // nkv)))
        rank = sorted(range(nb - 1), key=lambda b: -bound[b])          # the newest block is always read
        assert got[h] == sorted(rank[:top - 1] + [nb - 1])
    assert got[0] != got[1]                                            # the heads choose differently here
    assert quest_select_heads(torch.zeros(4, 2), 2, 5) == [[0, 1], [0, 1]]


def test_quest_keeps_the_first_layers_dense_and_reads_its_budget_per_head(model):
    d = CompressedDecoder(model, CompressionConfig("quest", budget_tokens=8), block_size=4)
    steps, T, L = 6, len(PROMPT), model.config.num_hidden_layers
    d.generate(PROMPT, steps)
    assert d.num_kept == T + steps
    dense = sum(T + i + 1 for i in range(steps)) * QUEST_DENSE_LAYERS        # every slot, layers 0 and 1
    assert dense < float(d.record.reads.sum()) <= dense + steps * (L - QUEST_DENSE_LAYERS) * 8
