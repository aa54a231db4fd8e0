"""kvlab.compute.scheduler: queues, admission through the CacheManager, preemption, n > 1 forks,
order; and the ownership rule: nothing in kvlab/compute changes a block table or a ref count."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvlab.compute.scheduler import Scheduler
from kvlab.compute.sequence import Request, SamplingParams, SequenceStatus, sequences_for
from kvlab.memory.block_pool import KVCacheError
from kvlab.reuse.cache_manager import CacheManager


def seqs_of(rid, prompt, new, n=1):
    return sequences_for(Request(rid, prompt, SamplingParams(new, n=n)))


def drive(sched, token=7):
    """One step without a model: every sequence takes token ``token``. Returns (ids, is_prefill)."""
    seqs, is_prefill = sched.schedule()
    if is_prefill:
        seqs, _ = sched.after_prefill(seqs)
    sched.postprocess(seqs, [token] * len(seqs))
    sched.check_integrity()
    return [s.seq_id for s in seqs], is_prefill


def test_prefill_first_then_decode_and_finish_frees_everything():
    cm = CacheManager(num_blocks=16, block_size=2)
    sched = Scheduler(cm, max_batch_size=4)
    (a,), (b,) = seqs_of("A", [1, 2, 3], 2), seqs_of("B", [1, 2, 9], 3)
    sched.add([a])
    assert drive(sched) == (["A"], True)
    sched.add([b])
    assert drive(sched) == (["B"], True)                   # anything admissible goes first
    assert b.num_computed_tokens == 3
    assert drive(sched) == (["A", "B"], False)             # A finishes here
    assert a.status is SequenceStatus.FINISHED and a.output_ids == [7, 7]
    assert drive(sched) == (["B"], False)
    assert sched.is_finished() and not cm.tables
    assert cm.allocator.num_used_blocks == cm.tree.total_size() // 2


def test_radix_hit_sets_computed_tokens_and_prefill_only_the_rest():
    cm = CacheManager(num_blocks=16, block_size=2)
    sched = Scheduler(cm)
    (a,) = seqs_of("A", [1, 2, 3, 4, 5], 1)
    sched.add([a])
    drive(sched)
    (b,) = seqs_of("B", [1, 2, 3, 4, 6], 1)
    sched.add([b])
    seqs, is_prefill = sched.schedule()
    assert seqs == [b] and is_prefill and b.num_computed_tokens == 4     # two cached pages
    assert b.block_table.block_ids[:2] == a_blocks(cm, [1, 2, 3, 4])


def a_blocks(cm, tokens):
    return cm.tree.match_prefix(tokens).kv


def test_n_samples_fork_after_the_prompt_prefill():
    cm = CacheManager(num_blocks=32, block_size=4)
    sched = Scheduler(cm, max_batch_size=8)
    samples = seqs_of("R", [1, 2, 3, 4, 5, 6], 3, n=3)
    sched.add(samples)
    assert sched.waiting == samples[:1]
    seqs, is_prefill = sched.schedule()
    assert seqs == samples[:1] and is_prefill
    out, rows = sched.after_prefill(seqs)
    assert out == samples and rows == [0, 0, 0]           # one prompt row for the three
    tables = [s.block_table.block_ids for s in samples]
    assert tables[0] == tables[1] == tables[2]
    assert cm.allocator.ref_count[tables[0][0]] == 4       # three tables + the tree
    sched.postprocess(out, [7, 8, 9])
    sched.check_integrity()
    seqs, _ = sched.schedule()                             # the shared partial block is copied twice
    assert len(sched.blocks_to_copy) == 2 and len({d for _, d in sched.blocks_to_copy}) == 2


def test_fresh_request_wider_than_the_batch_waits_for_room():
    sched = Scheduler(CacheManager(num_blocks=32, block_size=4), max_batch_size=2)
    sched.add(seqs_of("A", [1, 2], 5))
    sched.add(seqs_of("B", [3, 4], 5, n=2))
    assert drive(sched)[0] == ["A"]                        # B's 2 samples + A would be 3 > 2
    assert [s.seq_id for s in sched.waiting] == ["B.0"]
    wide = Scheduler(CacheManager(num_blocks=32, block_size=4), max_batch_size=2)
    wide.add(seqs_of("C", [3, 4], 2, n=3))
    assert drive(wide)[0] == ["C.0", "C.1", "C.2"]         # alone it runs anyway


def test_preemption_takes_the_newest_request_back_to_the_head_of_the_queue():
    cm = CacheManager(num_blocks=8, block_size=1)
    sched = Scheduler(cm, max_batch_size=4)
    for rid, prompt in [("A", [1, 2]), ("B", [3, 4]), ("C", [5, 6])]:
        sched.add(seqs_of(rid, prompt, 4))
    assert drive(sched) == (["A", "B", "C"], True)         # 6 blocks
    assert drive(sched) == (["A", "B"], False)             # C (the newest) preempted for B
    assert [g[0].seq_id for g in sched.preempted] == ["C"]
    c = sched.waiting[0]
    assert c.seq_id == "C" and c.output_ids == [7] and c.num_computed_tokens == 0 and c.block_table is None
    assert cm.cached_prefix_len(c.token_ids) == 2          # what C computed is cached
    assert drive(sched) == (["A", "B"], False)             # C's cached pages are evicted for them
    assert cm.cached_prefix_len(c.token_ids) == 0
    assert drive(sched) == (["A"], False)                  # the pool is full: B is the newest now
    assert [s.seq_id for s in sched.waiting] == ["B", "C"] and sched.running == []
    assert [len(s.output_ids) for s in sched.waiting] == [3, 1]


def test_the_oldest_alone_preempts_itself_never_a_scheduled_one():
    cm = CacheManager(num_blocks=3, block_size=1, radix=False)
    sched = Scheduler(cm)
    sched.add(seqs_of("A", [1, 2], 2, n=2))
    drive(sched)                                          # A.0, A.1 share [1, 2]: 2 blocks
    seqs, _ = sched.schedule()                             # A.0 takes the last block; A.1 cannot: itself
    assert [s.seq_id for s in seqs] == ["A.0"] and [s.seq_id for s in sched.waiting] == ["A.1"]


def test_head_that_never_fits_raises_when_nothing_runs():
    sched = Scheduler(CacheManager(num_blocks=2, block_size=2))
    sched.add(seqs_of("A", [1, 2, 3, 4, 5], 1))
    with pytest.raises(KVCacheError, match="cannot be admitted"):
        sched.schedule()


def test_lpm_order_admits_the_longest_cached_prefix_first():
    cm = CacheManager(num_blocks=64, block_size=1)
    sched = Scheduler(cm, max_batch_size=1, order="lpm")
    sched.add(seqs_of("W", [1, 2, 3, 4, 5], 1))
    drive(sched)                                          # caches [1, 2, 3, 4, 5]
    for rid, prompt in [("X", [9, 9]), ("Y", [1, 2, 7]), ("Z", [1, 2, 3, 4, 8])]:
        sched.add(seqs_of(rid, prompt, 1))
    order = [drive(sched)[0][0] for _ in range(3)]
    assert order == ["Z", "Y", "X"]
    fcfs = Scheduler(CacheManager(num_blocks=64, block_size=1), max_batch_size=1)
    for rid, prompt in [("X", [9, 9]), ("Y", [1, 2, 7])]:
        fcfs.add(seqs_of(rid, prompt, 1))
    assert [drive(fcfs)[0][0] for _ in range(2)] == ["X", "Y"]


def test_bad_arguments():
    cm = CacheManager(num_blocks=8, block_size=1)
    with pytest.raises(ValueError, match="max_batch_size"):
        Scheduler(cm, max_batch_size=0)
    with pytest.raises(ValueError, match="order"):
        Scheduler(cm, order="sjf")
    sched = Scheduler(cm)
    (a,) = seqs_of("A", [1], 2)
    a.append_token(3)
    with pytest.raises(ValueError, match="fresh"):
        sched.add([a])
    with pytest.raises(ValueError, match="tokens for"):
        sched.postprocess([a], [1, 2])


def test_compute_never_changes_block_tables_or_ref_counts():
    """Only kvlab.memory's BlockManager changes tables; only the CacheManager runs the cycle."""
    root = Path(__file__).resolve().parents[1] / "kvlab" / "compute"
    pattern = re.compile(r"block_ids\s*=|\.incref\(|\.touch\(|allocator\.free\(|allocator\.allocate\(|"
                         r"\.get_new_blocks\(|\.num_tokens\s*[+-]?=|\.free_blocks\(|ref_count\[[^]]*\]\s*[+-]?=")
    hits = [f"{p.name}:{i}: {line.strip()}" for p in sorted(root.glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits
