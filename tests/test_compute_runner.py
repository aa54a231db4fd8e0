"""kvlab.compute.model_runner and sampler: a forward pass's inputs built in one place from block
tables (read-only), the paged pass equal to the model's own causal attention, per-row sampling."""
from __future__ import annotations

import pytest
import torch

from kvlab.compute.kv_tensors import PagedKVPool, _independent_runs
from kvlab.compute.model_runner import ModelRunner, block_tables_tensor
from kvlab.compute.sampler import sample_next
from kvlab.compute.sequence import Request, SamplingParams, sequences_for
from kvlab.memory.block_manager import BlockManager


def test_prepare_builds_positions_slots_and_lengths(bundled):
    model, _ = bundled
    runner = ModelRunner(model, PagedKVPool.for_model(model, num_blocks=10, block_size=4))
    b = runner.prepare([1, 2, 3, 4, 5, 6], [[3, 7], [9, 2, 5]], prefix_lens=[2, 7], extend_lens=[3, 3])
    assert b.forward_mode == "extend" and b.num_tokens == 6
    assert b.positions.tolist() == [2, 3, 4, 7, 8, 9]
    assert b.slot_mapping.tolist() == [14, 15, 28, 11, 20, 21]      # P3+2, P3+3, P7+0; P2+3, P5+0, P5+1
    assert b.block_tables.tolist() == [[3, 7, 0], [9, 2, 5]] and b.block_tables.dtype == torch.int32
    assert b.context_lens.tolist() == [5, 10] and b.last_rows.tolist() == [2, 5]
    d = runner.prepare([1, 2], [[3], [4]], [1, 3], [1, 1])
    assert d.forward_mode == "decode"
    for args, needle in [(([1, 2], [[3]], [0], [3]), "add up"), (([1], [[3]], [4], [1]), "block"),
                         (([1], [[3], [4]], [0], [1]), "one of each"), (([], [[3]], [0], [0]), ">= 1")]:
        with pytest.raises(ValueError, match=needle):
            runner.prepare(*args)
    assert block_tables_tensor([[1], [2, 3]]).tolist() == [[1, 0], [2, 3]]


def test_paged_prefill_with_prefix_then_decode_equal_dense_forward(bundled):
    """Prefill 5 tokens, then 3 more on top of them (a radix hit's shape), then one decode token:
    the logits equal the model's plain causal forward over the whole sequence."""
    model, tok = bundled
    ids = tok.encode("Return a new list of the words in the string")[:10]
    dense = model(torch.tensor([ids]))[0]                               # (T, V)
    m = BlockManager(num_blocks=8, block_size=4)
    pool = PagedKVPool.for_model(model, 8, 4)
    runner = ModelRunner(model, pool)
    (s,) = sequences_for(Request("s", ids[:5], SamplingParams(5)))
    s.block_table = m.add_sequence("s", 5)
    torch.testing.assert_close(runner.run(runner.prepare_prefill([s])), dense[4:5], atol=2e-4, rtol=1e-4)
    s.num_computed_tokens = 5
    for t in ids[5:8]:
        s.append_token(t)
    m.append("s", 3)
    b = runner.prepare_prefill([s])
    assert b.prefix_lens.tolist() == [5] and b.extend_lens.tolist() == [3] and b.input_ids.tolist() == ids[5:8]
    torch.testing.assert_close(runner.run(b), dense[7:8], atol=2e-4, rtol=1e-4)
    s.num_computed_tokens = 8
    s.append_token(ids[8])
    with pytest.raises(ValueError, match="reserve slots"):
        runner.prepare_decode([s])                                      # its slot is not reserved yet
    m.append("s", 1)
    b = runner.prepare_decode([s])
    assert b.forward_mode == "decode" and b.positions.tolist() == [8] and b.context_lens.tolist() == [9]
    torch.testing.assert_close(runner.run(b), dense[8:9], atol=2e-4, rtol=1e-4)
    assert m.tables["s"].block_ids == s.block_table.block_ids            # read, never changed
    with pytest.raises(ValueError, match="all but the last"):
        s.num_computed_tokens = 7
        runner.prepare_decode([s])


def test_sampler_rows_are_independent():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)                                         # (n, V)
    gens = lambda: [torch.Generator().manual_seed(s) for s in (1, 2, 3)]  # noqa: E731
    together = sample_next(logits, [0.0, 0.7, 1.3], gens())
    g = gens()
    alone = [sample_next(logits[i:i + 1], t, [g[i]])[0] for i, t in enumerate([0.0, 0.7, 1.3])]
    assert together == alone and together[0] == int(logits[0].argmax())
    assert sample_next(logits, 0.0, []) == logits.argmax(-1).tolist()
    with pytest.raises(ValueError, match="1 temperature values for 3 rows"):
        sample_next(logits, [0.5], gens())


def test_copy_blocks_keeps_the_order_of_dependent_pairs():
    assert _independent_runs([(1, 2), (3, 4), (2, 5)]) == [[(1, 2), (3, 4)], [(2, 5)]]
    assert _independent_runs([(1, 2), (3, 1)]) == [[(1, 2)], [(3, 1)]]
    assert _independent_runs([(1, 2), (1, 3)]) == [[(1, 2), (1, 3)]]
    assert _independent_runs([]) == []
    pool = PagedKVPool(1, num_blocks=4, block_size=1, num_kv_heads=1, head_dim=1)
    pool.k_cache[0, :, 0, 0, 0] = torch.tensor([10.0, 11.0, 12.0, 13.0])
    pool.copy_blocks([(1, 2), (3, 1)])                                  # 2 := old 1, then 1 := 3
    assert pool.k_cache[0, :, 0, 0, 0].tolist() == [10.0, 13.0, 11.0, 13.0]
