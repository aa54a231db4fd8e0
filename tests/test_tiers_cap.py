"""Issue 30 item 1: the disk tier's size cap never crashes the engine, and the start-up scan
survives what vanished or is not a regular file.

The engine-level test runs ``bench/bench_storage_chaos.py``'s seeded driver (a capped, sabotaged,
shared disk folder; every request's tokens against ``generate()``) on a few engines; set
``KVLAB_STORAGE_CHAOS_ENGINES`` (say 2000) for a long run.
"""
from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path

import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.storage import FileStorage
from kvlab.reuse.hicache_storage import page_keys

SHAPE = (2, 4, 1, 8)
BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_storage_chaos.py"


def _page(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*SHAPE, generator=g), torch.randn(*SHAPE, generator=g)


def _keys(s: FileStorage, n: int) -> list[str]:
    return [page_keys([i] * 4, 4, s.fingerprint)[0] for i in range(n)]


def test_the_cap_never_evicts_a_staged_page(tmp_path):
    """The issue's reproducer: k1 staged by prefetch, then writing k2 past the cap deleted it
    (read(k1) None, evicted_files 1): the fetch queued for k1 crashed the engine."""
    s = FileStorage(tmp_path, page_shape=SHAPE, model_id="demo", max_bytes=1_000)
    k1, k2 = _keys(s, 2)
    assert s.write(k1, *_page(1))
    assert s.prefetch([k1]) == 1
    assert s.write(k2, *_page(2))
    kv = s.read(k1)
    assert kv is not None and torch.equal(kv[0], _page(1)[0])
    s.forget_staged()                           # the fetch ran: now the cap holds again
    assert s.size_bytes() <= 1_000 and s.evicted_files == 1


def test_the_start_up_scan_skips_what_is_not_a_regular_page_file(tmp_path, monkeypatch):
    """A dangling ``*.safetensors`` link, a directory, a FIFO and a page that vanishes during the
    scan (another engine's cap) are skipped and counted, never a FileNotFoundError."""
    s = FileStorage(tmp_path, page_shape=SHAPE, model_id="demo")
    k1, k2 = _keys(s, 2)
    s.write(k1, *_page(1))
    (tmp_path / f"{'a' * 32}.safetensors").symlink_to(tmp_path / "nowhere")
    (tmp_path / f"{'b' * 32}.safetensors").mkdir()
    os.mkfifo(tmp_path / f"{'c' * 32}.safetensors")
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: real(p) + [f"{'d' * 32}.safetensors"])  # gone before its stat
    s2 = FileStorage(tmp_path, page_shape=SHAPE, model_id="demo")
    assert s2.scan_skipped == 4 and s2.size_bytes() == s.size_bytes()
    assert s2.read(k1) is not None and s2.read(k2) is None

    def refuse(p):
        raise PermissionError(13, "Permission denied", str(p))
    monkeypatch.setattr(os, "listdir", refuse)            # a folder that cannot be listed
    s3 = FileStorage(tmp_path, page_shape=SHAPE, model_id="demo")
    assert s3.scan_skipped == 1 and s3.size_bytes() == 0 and s3.read(k1) is not None


def test_an_engine_restarted_on_a_capped_folder_fetches_what_it_staged(tmp_path):
    """Found by a seeded search (seed 41): an engine saves a prompt's pages; a restarted one, capped
    at about that size, serves other prompts (write-back), then the saved prompt: its pages are
    staged at admission, the host eviction of the same admission saves pages past the cap, and
    the cap deleted the staged ones: KVCacheError "checked at admission but cannot be read"."""
    chaos = _chaos()
    model = chaos.tiny_model()
    r = random.Random(41)
    bs = r.choice([1, 2])
    S = [r.randrange(64) for _ in range(r.randint(4, 20))]
    first = FileStorage(tmp_path, (2, bs, 2, 8), model_id="x")
    eng = Engine(model, num_blocks=40, block_size=bs, host_ratio=1.0, storage=first, storage_write="write_through")
    eng.submit(S + [1], 1)
    eng.run()
    capped = FileStorage(tmp_path, (2, bs, 2, 8), model_id="x", max_bytes=first.size_bytes() + r.randint(0, 3000))
    others = [[r.randrange(64) for _ in range(r.randint(4, 20))] for _ in range(r.randint(1, 3))]
    nb = -(-max(len(p) for p in others + [S]) // bs) + 3 + r.randint(0, 4)
    kw = dict(host_ratio=r.choice([0.25, 0.5, 1.0]), write_policy=r.choice(["write_through", "write_back"]),
              storage_write=r.choice(["on_host_evict", "write_through"]))
    eng = Engine(model, num_blocks=nb, block_size=bs, storage=capped, check=True, **kw)
    for o in others:
        eng.submit(o, r.randint(1, 3))
        eng.run()
    a = eng.submit(S + [2], 2, arrival_step=eng.step_no)
    b = eng.submit(others[0] + [5], 2, arrival_step=eng.step_no)
    eng.run()
    assert eng.cache_manager.tier_stats.fetched_tokens > 0 and capped.evicted_files > 0
    assert a.outputs == generate(model, S + [2], 2, "naive").sequences
    assert b.outputs == generate(model, others[0] + [5], 2, "naive").sequences
    assert capped.size_bytes() <= capped.max_bytes          # the staged pages went once their fetch ran


def _chaos():
    spec = importlib.util.spec_from_file_location("bench_storage_chaos", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_capped_sabotaged_disk_tier_never_crashes_the_engine_nor_changes_a_token():
    """Engines on a shared folder capped at a few pages, sabotaged between requests: no engine
    error, every request's tokens equal generate()'s. 35 of 1,752 engines crashed before the fix."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        totals = _chaos().run(int(os.environ.get("KVLAB_STORAGE_CHAOS_ENGINES", "12")), seed=1)
    finally:
        torch.set_num_threads(threads)
    assert totals["engine_errors"] == 0 and totals["wrong_tokens"] == 0, totals
    assert totals["requests"] > 3 * totals["engines"] and totals["sabotage"] > 0
    assert totals["evicted_files"] > 0 and totals["disk_misses"] > 0    # the cap and the damage were exercised
