"""The disk tier across engines: a restarted engine and a second engine on one store get disk hits
with the tokens of an engine without tiers; two models on one directory never share a page; and
whatever happens to the storage folder between steps, every request gets ``generate()``'s tokens."""
from __future__ import annotations

import os
import random
import shutil
import stat

import pytest
import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate

NUM_BLOCKS, BLOCK_SIZE = 24, 2


def _prompts(seed: int, n: int = 6) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(5, 400) for _ in range(16)]
    return [system + [rng.randrange(5, 400) for _ in range(rng.randint(2, 6))] for _ in range(n)]


def _serve(model, prompts, **kw):
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, check=True, **kw)
    states = []
    for p in prompts:
        states.append(eng.submit(p, 3, arrival_step=eng.step_no))
        eng.run()
    return eng, [s.outputs for s in states]


def _other_model(model):
    """The same architecture and shapes, other weights."""
    import copy

    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    return other


def test_a_restarted_engine_and_a_second_engine_get_disk_hits(bundled, tmp_path):
    model, _ = bundled
    prompts = _prompts(0)
    _, plain = _serve(model, prompts)
    first, out1 = _serve(model, prompts, host_ratio=1, storage=tmp_path, storage_write="write_through")
    assert out1 == plain and len(list(tmp_path.glob("*.safetensors"))) > 0
    # a fresh engine (a restart) on the warm store: the system prompt comes back from disk
    again, out2 = _serve(model, prompts[:1], host_ratio=1, storage=tmp_path)
    st = again.cache_manager.tier_stats
    assert out2 == plain[:1] and st.storage_hit_tokens >= 16 and st.fetched_tokens >= 16
    assert again.requests[0].prefill_saved >= 16
    # a second engine while the first is alive, same directory
    second, out3 = _serve(model, prompts[3:], host_ratio=1, storage=tmp_path)
    assert out3 == plain[3:] and second.cache_manager.tier_stats.storage_hit_tokens > 0


def test_two_models_on_one_directory_get_their_own_tokens(bundled, tmp_path):
    model, _ = bundled
    other = _other_model(model)
    prompts = _prompts(1)
    _, plain_a = _serve(model, prompts)
    _, plain_b = _serve(other, prompts)
    assert plain_a != plain_b
    _serve(model, prompts, host_ratio=1, storage=tmp_path, storage_write="write_through")
    eng_b, out_b = _serve(other, prompts, host_ratio=1, storage=tmp_path, storage_write="write_through")
    assert out_b == plain_b and eng_b.cache_manager.tier_stats.fetched_tokens == 0  # never model A's pages
    eng_a, out_a = _serve(model, prompts, host_ratio=1, storage=tmp_path)
    assert out_a == plain_a and eng_a.cache_manager.tier_stats.storage_hit_tokens > 0


def _sabotage(root, how: str, rng: random.Random) -> None:
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if how == "remove_dir":
        shutil.rmtree(root, ignore_errors=True) if root.is_dir() else root.unlink(missing_ok=True)
    elif how == "recreate_dir":
        if root.is_dir():
            shutil.rmtree(root)
        elif root.exists():
            root.unlink()
        root.mkdir()
    elif how == "dir_is_a_file":
        if root.is_dir():
            shutil.rmtree(root)
        root.write_text("not a directory")
    elif how == "read_only" and root.is_dir():
        root.chmod(stat.S_IRUSR | stat.S_IXUSR)
    elif how == "writable" and root.is_dir():
        root.chmod(stat.S_IRWXU)
    elif how == "corrupt" and files:
        f = rng.choice(files)
        data = bytearray(f.read_bytes())
        data[rng.randrange(len(data))] ^= 0xFF
        f.write_bytes(bytes(data))
    elif how == "delete_file" and files:
        rng.choice(files).unlink()
    elif how == "copy_over" and len(files) >= 2:
        a, b = rng.sample(files, 2)
        shutil.copy(a, b)


SABOTAGE = ["remove_dir", "recreate_dir", "dir_is_a_file", "read_only", "writable", "corrupt", "delete_file",
            "copy_over", "none"]


@pytest.mark.parametrize("seed", range(16))
def test_sabotage_between_steps_never_changes_a_token(bundled, tmp_path, monkeypatch, seed):
    """Seeded random sabotage of the storage folder between engine steps (a property test over
    sabotage points: which step, which damage, which file): every request ends with generate()'s
    tokens and the engine keeps serving. "disk_full" makes every write raise ENOSPC for a while
    (root ignores a read-only directory, so a raising write plays it too)."""
    import safetensors.torch

    model, _ = bundled
    rng = random.Random(seed)
    full = [0]
    real_save = safetensors.torch.save_file

    def save_file(*a, **kw):
        if full[0] > 0:
            raise OSError(28, "No space left on device")
        return real_save(*a, **kw)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    root = tmp_path / "store"
    prompts = _prompts(seed, 8)
    want = [generate(model, p, 3, "paged", block_size=BLOCK_SIZE).sequences for p in prompts]
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, check=True, host_ratio=0.5, storage=root,
                 write_policy=rng.choice(["write_through", "write_back"]),
                 storage_write=rng.choice(["on_host_evict", "write_through"]))
    states = [eng.submit(p, 3, arrival_step=2 * i) for i, p in enumerate(prompts)]
    try:
        while eng.pending or not eng.scheduler.is_finished():
            eng.step()
            full[0] -= 1
            if rng.random() < 0.5:
                how = rng.choice(SABOTAGE + ["disk_full"])
                if how == "disk_full":
                    full[0] = rng.randint(1, 4)
                _sabotage(root, how, rng)
    finally:
        if root.is_dir():
            root.chmod(stat.S_IRWXU)
    assert [s.outputs for s in states] == want
    eng.check_integrity()


def test_the_sabotage_runs_reach_the_disk(bundled, tmp_path):
    """The property test above is not vacuous: its engine saves and fetches pages, and a write into
    a folder that became a file fails, is counted, and changes no token."""
    model, _ = bundled
    root = tmp_path / "store"
    prompts = _prompts(3, 8)
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, check=True, host_ratio=0.5, storage=root)
    prompts = prompts + prompts[:3]
    states = [eng.submit(p, 3, arrival_step=2 * i) for i, p in enumerate(prompts)]
    eng.run()
    st = eng.cache_manager.tier_stats
    assert st.saved_tokens > 0 and st.fetched_tokens > 0
    _sabotage(root, "dir_is_a_file", random.Random(0))
    more = [eng.submit(p[::-1], 3, arrival_step=eng.step_no) for p in prompts]
    eng.run()
    assert eng.copier.storage.write_errors > 0
    want = [generate(model, p, 3, "paged", block_size=BLOCK_SIZE).sequences for p in prompts]
    assert [s.outputs for s in states] == want
    assert [s.outputs for s in more] == [generate(model, p[::-1], 3, "paged", block_size=BLOCK_SIZE).sequences
                                         for p in prompts]
