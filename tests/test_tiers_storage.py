"""The disk tier's files (kvlab.compute.storage.FileStorage) and the host pool's copies
(kvlab.compute.host_pool): round trips, keys that cannot lie, every damaged or foreign file a
miss, failed writes counted, arguments checked up front, the size cap."""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from kvlab.compute.host_pool import HostKVPool, TierCopier
from kvlab.compute.kv_tensors import PagedKVPool
from kvlab.compute.storage import FileStorage
from kvlab.memory.block_pool import KVCacheError
from kvlab.reuse.hicache_storage import HiCacheStorage, page_keys
from kvlab.reuse.hiradix_node import Transfer

SHAPE = (2, 4, 1, 8)  # layers, block_size, kv_heads, head_dim


def _page(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*SHAPE, generator=g), torch.randn(*SHAPE, generator=g)


def _store(root, model_id="m1", **kw):
    return FileStorage(root, SHAPE, model_id=model_id, **kw)


def _key(s, tokens=(1, 2, 3, 4)):
    return page_keys(list(tokens), 4, s.fingerprint)[-1]


def test_write_then_read(tmp_path):
    s = _store(tmp_path)
    assert isinstance(s, HiCacheStorage)
    k, v = _page()
    key = _key(s)
    assert not s.exists(key)
    assert s.write(key, k, v) and s.exists(key) and s.keys() == [key]
    k2, v2 = s.read(key)
    assert torch.equal(k2, k) and torch.equal(v2, v)
    assert s.read("0" * 32) is None and s.batch_exists([key, "0" * 32, key]) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "delete", "wrong_shape"])
def test_a_damaged_file_is_a_miss(tmp_path, damage):
    s = _store(tmp_path)
    key = _key(s)
    s.write(key, *_page())
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
        FileStorage(tmp_path, (2, 4, 1, 16), model_id="m1").write(key, torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16))
    assert s.read(key) is None and s.prefetch([key]) == 0      # a read checks every byte
    assert s.exists(key) is (damage == "flip")                  # the cheap check reads the header only
    assert s.misses == (0 if damage == "delete" else 2)
    s.remove(key)
    assert not path.exists()


def test_a_copied_or_linked_page_under_another_key_is_a_miss(tmp_path):
    s = _store(tmp_path)
    a, b = _key(s, (1, 2, 3, 4)), _key(s, (5, 6, 7, 8))
    s.write(a, *_page(0))
    shutil.copy(s.path(a), s.path(b))           # a valid page, copied under another key
    assert s.exists(a) and not s.exists(b)
    s.path(b).unlink()
    os.symlink(s.path(a), s.path(b))            # linked: not followed
    assert not s.exists(b)
    s.path(b).unlink()
    os.link(s.path(a), s.path(b))               # hard link: the file says it is a's page
    assert not s.exists(b) and s.read(b) is None and s.exists(a)


def test_another_model_never_sees_a_page(tmp_path):
    s1, s2 = _store(tmp_path, "model one"), _store(tmp_path, "model two")
    assert s1.fingerprint != s2.fingerprint
    k1 = _key(s1)
    s1.write(k1, *_page())
    assert not s2.exists(k1)                    # its file names model one's fingerprint
    assert not s2.exists(_key(s2))              # model two's key for the same tokens differs


def test_a_fifo_is_a_miss_and_never_blocks(tmp_path):
    s = _store(tmp_path)
    key = _key(s)
    os.mkfifo(s.path(key))
    assert s.exists(key) is False and s.batch_exists([key]) == 0


def test_a_failed_write_leaves_nothing_and_is_counted(tmp_path):
    s = _store(tmp_path / "store")
    key = _key(s)
    shutil.rmtree(tmp_path / "store")           # the folder is gone
    assert s.write(key, *_page()) is False and s.write_errors == 1 and not s.exists(key)
    (tmp_path / "store").mkdir()
    assert s.write(key, *_page()) and s.exists(key)


def test_prefetched_pages_cannot_change_before_their_read(tmp_path):
    s = _store(tmp_path)
    key = _key(s)
    k, v = _page()
    s.write(key, k, v)
    assert s.prefetch([key]) == 1
    s.path(key).write_bytes(b"overwritten behind the cache's back")
    k2, _ = s.read(key)
    assert torch.equal(k2, k) and s.read(key) is None  # the second read checks the file again: a miss


def test_storage_arguments_are_checked_up_front(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="a_file"):
        _store(f)
    with pytest.raises(ValueError, match="page_shape"):
        FileStorage(tmp_path, (2, True, 1, 8), model_id="m")
    with pytest.raises(ValueError, match="page_shape"):
        FileStorage(tmp_path, (2, 4, 1), model_id="m")
    with pytest.raises(TypeError, match="dtype"):
        FileStorage(tmp_path, SHAPE, "float32", model_id="m")
    with pytest.raises(ValueError, match="max_staged"):
        _store(tmp_path, max_staged=-1)
    with pytest.raises(ValueError, match="max_bytes"):
        _store(tmp_path, max_bytes=0)
    with pytest.raises(TypeError):
        FileStorage(tmp_path, SHAPE)  # no model_id: a store must say whose KV it holds
    s = _store(tmp_path)
    with pytest.raises(ValueError, match="key"):
        s.path("a" * 300)
    with pytest.raises(ValueError, match="key"):
        s.path("../etc/passwd")
    with pytest.raises(ValueError, match="page"):
        s.write(_key(s), torch.zeros(2, 4, 1, 9), torch.zeros(2, 4, 1, 9))
    dev = PagedKVPool(num_layers=2, num_blocks=6, block_size=4, num_kv_heads=1, head_dim=16)
    with pytest.raises(ValueError, match="storage pages"):
        TierCopier(dev, HostKVPool.like(dev, 4), s)  # the engine's pool has head_dim 16
    assert s.keys() == []


def test_the_size_cap_removes_least_recently_used_pages(tmp_path):
    s = _store(tmp_path)
    keys = [_key(s, (i, i, i, i)) for i in range(4)]
    s.write(keys[0], *_page())
    cap = 3 * s.size_bytes()
    s = _store(tmp_path, max_bytes=cap)
    for k in keys[1:3]:
        s.write(k, *_page())
    assert s.read(keys[0]) is not None          # read: the most recently used now
    s.write(keys[3], *_page())                  # past the cap: keys[1] goes (least recently used)
    assert s.evicted_files == 1 and s.size_bytes() <= cap
    assert [s.exists(k) for k in keys] == [True, False, True, True]


def test_copier_moves_blocks_between_the_tiers_and_counts_bytes(tmp_path):
    dev = PagedKVPool(num_layers=2, num_blocks=6, block_size=4, num_kv_heads=1, head_dim=8)
    dev.k_cache.copy_(torch.randn_like(dev.k_cache))
    dev.v_cache.copy_(torch.randn_like(dev.v_cache))
    want_k, want_v = dev.k_cache[:, [1, 2]].clone(), dev.v_cache[:, [1, 2]].clone()
    host = HostKVPool.like(dev, num_blocks=4)
    storage = FileStorage.for_pool(dev, tmp_path, "m1")
    keys = tuple(page_keys(list(range(8)), 4, storage.fingerprint))
    cp = TierCopier(dev, host, storage)
    cp.apply([Transfer("write", (1, 2), (3, 0)), Transfer("save", (3, 0), (), keys=keys),
              Transfer("load", (3, 0), (4, 5))])
    assert storage.prefetch(keys) == 2
    cp.apply([Transfer("fetch", (), (0, 3), keys=keys)])
    assert torch.equal(dev.k_cache[:, [4, 5]], want_k) and torch.equal(dev.v_cache[:, [0, 3]], want_v)
    assert torch.equal(host.k_cache[:, [3, 0]], want_k)
    page = host.bytes_per_block()
    assert cp.stats.bytes == {"device->host": 2 * page, "host->device": 2 * page, "host->disk": 2 * page,
                              "disk->device": 2 * page}
    assert cp.stats.simulated_s["host->device"] == pytest.approx(10e-6 + 2 * page / 64e9)
    with pytest.raises(KVCacheError, match="cannot be read"):
        cp.apply([Transfer("fetch", (), (1,), keys=("0" * 32,))])
    with pytest.raises(ValueError, match="kind"):
        cp.apply([Transfer("teleport", (1,), (2,))])
    with pytest.raises(ValueError, match="shape"):
        TierCopier(dev, HostKVPool(2, 4, 4, 2, 8))
