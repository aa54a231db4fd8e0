"""The engine on the bundled model with tiers on: the same tokens as without them, prefixes loaded
back from host and disk, the host tensors holding the device's KV, corrupt disk chunks as misses."""
from __future__ import annotations

import random

import pytest
import torch

from kvlab.compute.engine import Engine

NUM_BLOCKS, BLOCK_SIZE = 24, 2  # 48 token slots: the prompts' history does not fit


def _prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    systems = [[rng.randrange(5, 400) for _ in range(rng.randint(10, 20))] for _ in range(4)]
    prompts: list[list[int]] = []
    for _ in range(12):
        p = list(rng.choice(systems)) + [rng.randrange(5, 400) for _ in range(rng.randint(2, 8))]
        if prompts and rng.random() < 0.4:
            p = prompts[-1] + p[-3:]
        prompts.append(p)
    return prompts


def _serve(model, prompts, between=None, **kw):
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, check=True, **kw)
    states = []
    for i, p in enumerate(prompts):  # one at a time: each arrives when the previous one is done
        states.append(eng.submit(p, 4, arrival_step=eng.step_no))
        eng.run()
        if between is not None:
            between(eng, i)
    return eng, states


def _host_copies_match(eng) -> bool:
    """Every node on both tiers: its host blocks hold its device blocks' K and V."""
    tree, dev, host = eng.cache_manager.tree, eng.kv_pool, eng.copier.host
    for n in tree.iter_nodes():
        hv = tree.host_value.get(n.id)
        if n.value and hv:
            for d, h in ((dev.k_cache, host.k_cache), (dev.v_cache, host.v_cache)):
                if not torch.allclose(d[:, n.value], h[:, hv], atol=1e-5):
                    return False
    return True


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kw", [dict(host_ratio=2), dict(host_ratio=1, write_policy="write_back"),
                                dict(host_ratio=1, write_policy="write_through_selective")],
                         ids=["write_through", "write_back", "selective"])
def test_tiers_give_the_same_tokens_and_reuse_more(bundled, seed, kw):
    model, _ = bundled
    prompts = _prompts(seed)
    _, plain = _serve(model, prompts)
    eng, tiered = _serve(model, prompts, **kw)
    assert [s.outputs for s in tiered] == [s.outputs for s in plain]
    saved_plain, saved_tiered = sum(s.prefill_saved for s in plain), sum(s.prefill_saved for s in tiered)
    assert saved_tiered >= saved_plain
    stats = eng.cache_manager.tier_stats
    if kw.get("write_policy") != "write_through_selective":
        assert stats.loaded_tokens > 0 and saved_tiered > saved_plain, "some prefix should come back from the host"
    assert _host_copies_match(eng)
    rep = eng.run()
    assert rep.tiers["bytes_moved"] == sum(v for k, v in rep.tiers.items() if k.startswith("bytes ")) > 0
    assert rep.tiers["simulated_s"] > 0 and rep.tiers["host_link"] == "pcie-gen5-x16"


def test_prefixes_come_back_from_disk(bundled, tmp_path):
    model, _ = bundled
    prompts = _prompts(0)
    _, plain = _serve(model, prompts)
    eng, tiered = _serve(model, prompts, host_ratio=0.5, storage=tmp_path)
    assert [s.outputs for s in tiered] == [s.outputs for s in plain]
    stats = eng.cache_manager.tier_stats
    assert stats.saved_tokens > 0 and stats.fetched_tokens > 0
    assert len(list(tmp_path.glob("*.safetensors"))) > 0
    assert eng.copier.stats.bytes["disk->device"] > 0


def test_corrupt_and_missing_chunks_are_misses_not_wrong_answers(bundled, tmp_path):
    model, _ = bundled
    prompts = _prompts(0)
    _, plain = _serve(model, prompts)
    def damage(eng, i):  # after every request, every chunk on disk is damaged one of three ways
        eng.copier.storage.forget_staged()
        for j, path in enumerate(sorted(tmp_path.glob("*.safetensors"))):
            if (i + j) % 3 == 0:
                path.write_bytes(path.read_bytes()[:100])  # truncated
            elif (i + j) % 3 == 1:
                data = bytearray(path.read_bytes())
                data[-1] ^= 0xFF  # one flipped byte in the tensors: the checksum catches it
                path.write_bytes(bytes(data))
            else:
                path.unlink()

    eng, tiered = _serve(model, prompts, between=damage, host_ratio=0.5, storage=tmp_path)
    assert [s.outputs for s in tiered] == [s.outputs for s in plain]
    stats = eng.cache_manager.tier_stats
    assert stats.disk_misses > 0 and stats.fetched_tokens == 0


def test_no_tiers_is_the_untiered_engine(bundled, tmp_path):
    from kvlab.reuse.cache_manager import CacheManager

    model, _ = bundled
    eng = Engine(model, num_blocks=8, block_size=2)
    assert type(eng.cache_manager) is CacheManager and eng.copier is None and eng.run().tiers is None
    with pytest.raises(ValueError, match="host tier"):
        Engine(model, num_blocks=8, block_size=2, write_policy="write_back")
    with pytest.raises(ValueError, match="radix"):
        Engine(model, num_blocks=8, block_size=2, radix=False, host_ratio=2)
    with pytest.raises(ValueError, match="host_ratio"):
        Engine(model, num_blocks=8, block_size=2, storage=tmp_path / "disk")
    assert not (tmp_path / "disk").exists()  # refused before anything was made
    with pytest.raises(ValueError, match="host_ratio"):
        Engine(model, num_blocks=8, block_size=2, host_ratio=-1)


def test_storage_arguments_are_checked_when_the_engine_is_built(bundled, tmp_path):
    from kvlab.compute.storage import FileStorage
    from kvlab.reuse.hicache_storage import MemoryStorage

    model, _ = bundled
    a_file = tmp_path / "not_a_dir"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="not_a_dir"):
        Engine(model, num_blocks=8, block_size=2, host_ratio=1, storage=a_file)
    cfg = model.config
    wrong = FileStorage(tmp_path / "s", (cfg.num_hidden_layers, 4, cfg.num_key_value_heads, cfg.head_dim),
                        model_id="m")   # block size 4, the engine's is 2
    with pytest.raises(ValueError, match="storage pages"):
        Engine(model, num_blocks=8, block_size=2, host_ratio=1, storage=wrong)
    with pytest.raises(TypeError, match="storage must be"):
        Engine(model, num_blocks=8, block_size=2, host_ratio=1, storage=MemoryStorage())
    with pytest.raises(ValueError, match="prefetch_policy"):
        Engine(model, num_blocks=8, block_size=2, host_ratio=1, storage=tmp_path / "t", prefetch_policy="eager")
    assert list((tmp_path / "s").iterdir()) == []


def test_one_cache_config_is_passed_down_whole(bundled):
    """Issue 31 item 5: the cache settings are one CacheConfig, built once and passed down; the
    keywords build the same one; both at once is refused; ``check`` and ``kernel_checks`` are two
    names for the two checks."""
    from kvlab.reuse import CacheConfig

    model, _ = bundled
    cfg = CacheConfig(host_ratio=2, write_policy="write_back", host_link="pcie-gen4-x16")
    eng = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, cache_config=cfg)
    assert eng.cache_config is cfg and eng.cache_manager.write_policy == "write_back"
    assert eng.copier.links["host->device"].name == "pcie-gen4-x16"
    kw = Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, host_ratio=2, write_policy="write_back",
                host_link="pcie-gen4-x16")
    assert kw.cache_config == cfg
    with pytest.raises(TypeError, match="not both"):
        Engine(model, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, cache_config=cfg, host_ratio=2)
    assert Engine(model, 8, 4, check=True).runner.kernel_checks is True          # check: both, as before
    assert Engine(model, 8, 4, check=True, kernel_checks=False).runner.kernel_checks is False
    assert Engine(model, 8, 4).runner.kernel_checks is False
