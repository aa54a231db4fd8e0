"""The disk tier's files (kvlab.compute.storage.FileStorage) and the host pool's copies
(kvlab.compute.host_pool): round trips, and every kind of damaged file read as a miss."""
from __future__ import annotations

import pytest
import torch

from kvlab.compute.host_pool import HostKVPool, TierCopier
from kvlab.compute.kv_tensors import PagedKVPool
from kvlab.compute.storage import FileStorage
from kvlab.memory.block_pool import KVCacheError
from kvlab.reuse.hicache_storage import HiCacheStorage, chunk_key
from kvlab.reuse.hiradix_node import Transfer

SHAPE = (2, 4, 1, 8)  # layers, block_size, kv_heads, head_dim


def _chunk(pages: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, pages, 4, 1, 8, generator=g), torch.randn(2, pages, 4, 1, 8, generator=g)


def test_write_then_read_any_pages(tmp_path):
    s = FileStorage(tmp_path, SHAPE)
    assert isinstance(s, HiCacheStorage)
    k, v = _chunk(3)
    key = chunk_key([1, 2, 3])
    assert not s.exists(key)
    s.write(key, k, v)
    s.forget_staged()
    assert s.exists(key) and s.keys() == [key]
    for off, n in ((0, 3), (1, 2), (2, 1)):
        k2, v2 = s.read(key, off, n)
        assert torch.equal(k2, k[:, off:off + n]) and torch.equal(v2, v[:, off:off + n])
    assert s.read(key, 2, 2) is None and s.read("0" * 32, 0, 1) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "delete", "wrong_shape"])
def test_a_damaged_file_is_a_miss(tmp_path, damage):
    s = FileStorage(tmp_path, SHAPE)
    key = chunk_key([7])
    s.write(key, *_chunk(2))
    path = s.path(key)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        b = bytearray(data)
        b[-5] ^= 0x01
        path.write_bytes(bytes(b))
    elif damage == "garbage":
        path.write_bytes(b"not a safetensors file at all")
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "delete":
        path.unlink()
    else:
        FileStorage(tmp_path, (2, 4, 1, 16)).write(key, torch.zeros(2, 2, 4, 1, 16), torch.zeros(2, 2, 4, 1, 16))
    s.forget_staged()
    assert s.exists(key) is False and s.read(key, 0, 1) is None
    assert s.misses == (0 if damage == "delete" else 2)
    s.remove(key)
    assert not path.exists()


def test_a_checked_chunk_cannot_change_before_its_read(tmp_path):
    s = FileStorage(tmp_path, SHAPE)
    key = chunk_key([1])
    k, v = _chunk(1)
    s.write(key, k, v)
    assert s.exists(key)  # checked and kept
    s.path(key).write_bytes(b"overwritten behind the cache's back")
    k2, _ = s.read(key, 0, 1)
    assert torch.equal(k2, k)


def test_announced_chunks_exist_and_bad_calls_raise(tmp_path):
    s = FileStorage(tmp_path, SHAPE)
    s.add("abc", 2)
    assert s.exists("abc")
    with pytest.raises(ValueError, match="pages"):
        s.write("abc", torch.zeros(2, 2, 4, 1, 9), torch.zeros(2, 2, 4, 1, 9))
    with pytest.raises(ValueError, match="key"):
        s.path("../etc/passwd")
    with pytest.raises(ValueError, match="num_pages"):
        s.add("abc", 0)
    with pytest.raises(ValueError, match="page_shape"):
        FileStorage(tmp_path, (2, 4, 1))
    assert s.keys() == []


def test_copier_moves_blocks_between_the_tiers_and_counts_bytes(tmp_path):
    dev = PagedKVPool(num_layers=2, num_blocks=6, block_size=4, num_kv_heads=1, head_dim=8)
    dev.k_cache.copy_(torch.randn_like(dev.k_cache))
    dev.v_cache.copy_(torch.randn_like(dev.v_cache))
    want_k, want_v = dev.k_cache[:, [1, 2]].clone(), dev.v_cache[:, [1, 2]].clone()
    host = HostKVPool.like(dev, num_blocks=4)
    storage = FileStorage.for_pool(dev, tmp_path)
    cp = TierCopier(dev, host, storage)
    cp.apply([Transfer("write", (1, 2), (3, 0)), Transfer("save", (3, 0), (), key="abc"),
              Transfer("load", (3, 0), (4, 5)), Transfer("fetch", (), (0, 3), key="abc")])
    for pool in (dev,):
        assert torch.equal(pool.k_cache[:, [4, 5]], want_k) and torch.equal(pool.v_cache[:, [0, 3]], want_v)
    assert torch.equal(host.k_cache[:, [3, 0]], want_k)
    page = host.bytes_per_block()
    assert cp.stats.bytes == {"device->host": 2 * page, "host->device": 2 * page, "host->disk": 2 * page,
                              "disk->device": 2 * page}
    assert cp.stats.simulated_s["host->device"] == pytest.approx(10e-6 + 2 * page / 64e9)
    with pytest.raises(KVCacheError, match="vanished"):
        cp.apply([Transfer("fetch", (), (1,), key="nothere")])
    with pytest.raises(ValueError, match="kind"):
        cp.apply([Transfer("teleport", (1,), (2,))])
    with pytest.raises(ValueError, match="shape"):
        TierCopier(dev, HostKVPool(2, 4, 4, 2, 8))
