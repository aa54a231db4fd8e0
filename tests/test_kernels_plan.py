"""The launch plans: split-K chosen at run time from the batch against the SM count, the
16-row cap per program, head_dim padding, and the debug report. Pure Python: no kernel runs
(test_kernels_decode runs the plans), and no visualizer import (the GPU check runs this file).
"""

import pytest
import torch

from kvlab.kernels import KERNEL_MODE, plan_decode, plan_extend
from kvlab.kernels.plan import MAX_SPLITS, seq_splits, tile_tokens

F16 = torch.float16
H100 = 132  # SMs of an H100 / H200


def llama(num_seqs, lens, **kwargs):
    """Llama-3-8B-style decode: 32 query heads, 8 KV heads, head_dim 128, block size 16, fp16."""
    return plan_decode(num_seqs, 32, 8, 128, 16, F16, context_lens=lens, num_sms=kwargs.pop("num_sms", H100), **kwargs)


def test_long_context_small_batch_is_split_to_fill_the_gpu():
    p = llama(1, [32768])
    assert p.grid == (1, 8, 64) and p.split_tiles == 8 and p.seq_splits == [64]   # 8 x 64 = 512 programs
    p = llama(8, [4096] * 8)
    assert p.num_splits == 8 and p.seq_splits == [8] * 8                       # 8 x 8 x 8 = 512 programs


def test_a_full_even_batch_is_not_split():
    p = llama(64, [4096] * 64)
    assert p.grid == (64, 8, 1) and p.seq_splits == [1] * 64
    assert "no split" in p.reason


def test_ragged_batch_splits_only_the_long_sequences():
    p = llama(64, [32768] + [1000] * 63)
    splits = p.seq_splits
    assert splits[0] > 16 and max(splits[1:]) <= 2 and p.num_splits <= MAX_SPLITS
    tiles = -(-32768 // 64)
    assert -(-tiles // splits[0]) <= 1.5 * p.split_tiles                       # the long one is cut into fair pieces


def test_without_host_lengths_the_table_capacity_bounds_the_plan():
    p = plan_decode(2, 32, 8, 128, 16, F16, max_context_len=8192, num_sms=H100)
    assert p.seq_splits is None and p.num_splits > 1 and not p.lens_known
    assert "bounded by the block table" in p.reason and "set in the kernel" in p.explain()


def test_interpreter_and_forced_plans():
    if KERNEL_MODE == "interpreter":                                           # the default SM count there: none
        p = plan_decode(1, 8, 1, 64, 16, torch.float32, context_lens=[5000])
        assert p.num_sms is None and p.num_splits == 1 and "interpreter" in p.reason
    p = llama(2, [100, 5000], num_splits=5)
    assert p.num_splits == 5 and p.split_tiles == 1 and p.seq_splits == [2, 5]   # min(5, tiles)
    assert "num_splits=5 given" in p.reason


@pytest.mark.parametrize("group, rows, chunks", [(1, 16, 1), (4, 16, 1), (16, 16, 1), (24, 16, 2), (64, 16, 4)])
def test_rows_per_program_are_capped_at_16(group, rows, chunks):
    p = plan_decode(3, group * 2, 2, 128, 16, F16, context_lens=[10, 20, 30], num_sms=H100)
    assert (p.rows_per_program, p.head_chunks) == (rows, chunks)
    assert p.grid[1] == 2 * chunks
    e = plan_extend(3, group * 2, 2, 128, 16, F16, 40).meta
    assert e["BLOCK_G"] <= 16 and e["BLOCK_G"] * e["HEAD_CHUNKS"] >= group and e["BLOCK_M"] * e["BLOCK_G"] == 64


def test_small_head_dim_without_dot_pads_the_group_only_to_a_power_of_two():
    p = plan_decode(1, 6, 2, 8, 4, torch.float32, context_lens=[9])
    assert p.meta["USE_DOT"] is False and p.rows_per_program == 4


@pytest.mark.parametrize("head_dim, block_d", [(80, 128), (96, 128), (128, 128), (12, 16), (8, 8)])
def test_head_dim_is_padded_to_a_power_of_two(head_dim, block_d):
    p = plan_decode(1, 4, 2, head_dim, 16, F16, context_lens=[9])
    assert p.meta["HEAD_DIM"] == head_dim and p.meta["BLOCK_D"] == block_d
    assert ("padded, masked" in p.explain()) == (head_dim != block_d)
    assert plan_extend(1, 4, 2, head_dim, 16, F16, 9).meta["BLOCK_D"] == block_d


def test_explain_names_grid_rows_splits_and_why():
    text = plan_decode(2, 64, 1, 80, 16, F16, context_lens=[300, 20000], num_sms=H100).explain()
    for part in ("grid (2, 4, ", "4 row chunk(s)", "rows per program 16", "head_dim tile 128 (padded, masked)",
                 "per sequence [", "why: ", "SMs"):
        assert part in text, (part, text)
    ext = plan_extend(2, 8, 2, 64, 16, F16, 40).explain()
    assert "grid (2, 2, 3)" in ext and "without a mask" in ext
    assert "one masked loop" in plan_extend(2, 8, 2, 64, 16, torch.float32, 40).explain()


@pytest.mark.parametrize("context_len, split_tiles, num_splits", [(1100, 8, 64), (64, 2, 4), (130, 1, 3), (5, 1, 8)])
def test_split_count_formula(context_len, split_tiles, num_splits):
    """seq_splits (host) is the kernel's split_range: min(NUM_SPLITS, ceil(tiles / split_tiles))
    splits of ceil(tiles / splits) tiles, which together cover every tile once."""
    tile = 64
    n = seq_splits(context_len, split_tiles, num_splits, tile)
    tiles = -(-context_len // tile)
    assert 1 <= n <= num_splits and n == min(num_splits, max(1, -(-tiles // split_tiles)))
    per = -(-tiles // n)
    covered = [t for s in range(n) for t in range(s * per, min((s + 1) * per, tiles))]
    assert covered == list(range(tiles))


def test_tile_tokens():
    assert tile_tokens(4) == 64 and tile_tokens(128) == 128
