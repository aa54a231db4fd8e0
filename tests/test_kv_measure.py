"""The lesson-11 measurements on the bundled tiny model (the bench and the lesson run them on SmolLM2)."""
import math

import pytest

from kvlab.compute.kv_compress import CompressionConfig
from kvlab.compute.kv_measure import Profile, attention_profile, compare_methods, format_results, heldout_texts, needle
from kvlab.compute.loader import load_bundled


@pytest.fixture(scope="module")
def model():
    return load_bundled()[0]


IDS = [(11 * i + 7) % 4000 + 5 for i in range(70)]


def test_heldout_texts_are_stdlib_docstrings_and_fixed():
    a, b = heldout_texts(2), heldout_texts(2)
    assert a == b and all(len(t) >= 1200 for t in a) and a[0].startswith("Heap queue algorithm")
    with pytest.raises(ValueError, match="ask for fewer"):
        heldout_texts(500)


def test_profile_reads_are_uniform_and_mass_sums_to_one_per_layer(model):
    p = attention_profile(model, IDS, steps=3, block_size=8, sinks=4, recent=16)
    assert p.layer_mass.shape == (model.config.num_hidden_layers, len(IDS) + 3)
    assert max(p.reads) == min(p.reads)
    assert len(p.reads) == len(IDS) + 3   # review r6_03_11 (cell 7): the read line stopped at the prompt's end
    layers = model.config.num_hidden_layers
    assert p.reads[0] == 2 * layers * 2 * 32 * 4 / layers * layers     # every layer's K and V of a token, fp32
    for row in p.layer_mass:
        assert math.isclose(float(row.sum()), 1.0, rel_tol=1e-4)          # each step's softmax sums to 1
    s = p.shares()
    assert math.isclose(s["sink_mass"] + s["middle_mass"] + s["recent_mass"], 1.0, rel_tol=1e-4)
    assert "max/min = 1.00" in p.verdict()


def test_verdict_follows_the_data():
    import torch

    sink = Profile(torch.tensor([[0.5, 0.05, 0.05, 0.05, 0.05, 0.3]]), [1.0] * 6, 1, 1)
    assert "wrong that early tokens are cold" in sink.verdict() and "are right that recent" in sink.verdict()
    flat = Profile(torch.full((1, 6), 1 / 6), [1.0] * 6, 1, 1)
    assert "right that these early tokens are cold" in flat.verdict() and "are wrong that recent" in flat.verdict()


def test_compare_methods_measures_memory_reads_and_agreement(model):
    cfgs = [CompressionConfig("full"), CompressionConfig("streaming", budget_tokens=16),
            CompressionConfig("quest-shared", budget_tokens=16), CompressionConfig("int8")]
    rows = compare_methods(model, cfgs, [IDS[:40], IDS[10:50]], 4, [(IDS[:40], IDS[40:48])], block_size=8)
    full, stream, quest, q8 = rows
    assert full.agreement == 1.0 and full.label == "full"
    assert stream.kv_bytes < 0.6 * full.kv_bytes and quest.kv_bytes == full.kv_bytes
    assert quest.read_bytes_per_step < 0.6 * full.read_bytes_per_step
    assert q8.bytes_per_token == 2 * 4 * 2 * (32 + 4) and q8.kv_bytes < 0.3 * full.kv_bytes
    assert all(r.ppl > 1 for r in rows) and 0 <= stream.agreement <= 1
    assert (full.kind, stream.kind, quest.kind, q8.kind) == ("reference", "paper", "variant", "kvlab")
    table = format_results(rows).splitlines()
    assert "KV kept" in table[0] and "(MB / %)" in table[1] and "perplexity" in table[0]  # headers in words (review)
    assert table[2].startswith("full") and table[3].split()[:3] == ["streaming", "16", "paper"]
    assert table[-1] == "sample: 2 prompt(s) x 4 greedy tokens each (agreement); perplexity over 8 held-out tokens"
    with pytest.raises(ValueError, match="first config must be the full cache"):
        compare_methods(model, cfgs[1:], [IDS[:20]], 2, [])


def test_needle_returns_greedy_tokens(model):
    assert len(needle(model, IDS, CompressionConfig("h2o", budget_tokens=16), max_tokens=3, block_size=8)) == 3


def test_compare_methods_against_an_earlier_reference(model):
    prompts, held = [IDS[:40]], [(IDS[:40], IDS[40:44])]
    full, stream = compare_methods(model, [CompressionConfig("full"), CompressionConfig("streaming", 16)], prompts, 3,
                                   held, block_size=8)
    (again,) = compare_methods(model, [CompressionConfig("streaming", 16)], prompts, 3, held, block_size=8,
                               reference=full)
    assert (again.tokens, again.agreement, again.ppl) == (stream.tokens, stream.agreement, stream.ppl)
    with pytest.raises(ValueError, match="reference holds tokens for 1 prompts, not 2"):
        compare_methods(model, [CompressionConfig("int8")], prompts * 2, 3, held, reference=full)


def test_compare_methods_reuses_the_prefills_it_was_given(model, monkeypatch):
    """Lesson 11's budget control measures one method a pick; the dense prefills are kept between
    picks (they were about two thirds of a pick's time), with the same results."""
    import kvlab.compute.kv_measure as km

    prompts, held, calls = [IDS[:40]], [(IDS[:40], IDS[40:44])], []
    full, stream = compare_methods(model, [CompressionConfig("full"), CompressionConfig("streaming", 16)], prompts, 3,
                                   held, block_size=8)
    real = km.prefill
    monkeypatch.setattr(km, "prefill", lambda *a, **k: calls.append(1) or real(*a, **k))
    kept: dict = {}
    for _ in range(2):
        (again,) = compare_methods(model, [CompressionConfig("streaming", 16)], prompts, 3, held, block_size=8,
                                   reference=full, prefilled=kept)
        assert (again.tokens, again.agreement, again.ppl) == (stream.tokens, stream.agreement, stream.ppl)
    assert len(calls) == 2                     # one prompt and one held-out context, prefilled once
    with pytest.raises(ValueError, match="prefilled holds 1 prompts"):
        compare_methods(model, [CompressionConfig("full")], prompts * 2, 3, held * 2, prefilled=kept)
