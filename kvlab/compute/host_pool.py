"""The host tier's K/V tensors, and the copies between device, host and disk over block ids.

:class:`HostKVPool` is the L2 of a hierarchical cache: per layer, K and V of ``num_blocks``
host blocks, ``(num_layers, num_blocks, block_size, nkv, hs)`` like the device pool, in CPU
memory (pinned when CUDA is there, so host-to-device copies are DMA). It never decides which
block holds what: ``kvlab.reuse.hiradix_cache`` does, and queues every copy as a
:class:`~kvlab.reuse.hiradix_cache.Transfer`.

:class:`TierCopier` performs those transfers, in queue order, with ``index_select`` /
``index_copy_`` over block ids (one call per transfer, every layer at once)::

    write   host.k[:, dst] = device.k[:, src]          device -> host (write_through, write_back)
    load    device.k[:, dst] = host.k[:, src]          host -> device (load_back)
    save    storage.write(key, host.k[:, b], ...)      host -> disk, one page a key (a failed write: counted)
    fetch   device.k[:, dst] = storage.read(key)       disk -> device (pages checked and kept at admission)

It counts the bytes of each direction and reports two times: **measured** (wall clock of the
copies on this machine; on a CPU-only machine both pools are host memory, so a "load" is a
memcpy) and **simulated** (the bytes at a stated link bandwidth, ``kvlab.reuse.offload.LINKS``:
PCIe for device<->host, NVMe for disk).

:func:`measure_offload` times, on a real model, recomputing a prefix against copying its KV.

Mirrors SGLang ``memory_pool_host.py`` (``MHATokenToKVPoolHost``: a host pool sized from the
device pool, pinned) and the cache controller's ``write`` / ``load``; vLLM's ``swap_blocks``.
Not handled: asynchronous copies overlapped with compute (HiCache loads layer N+1 while layer N
computes), page-first layouts.

Example:
    >>> from kvlab.compute.kv_tensors import PagedKVPool
    >>> from kvlab.reuse.hiradix_node import Transfer
    >>> dev = PagedKVPool(num_layers=2, num_blocks=4, block_size=2, num_kv_heads=1, head_dim=4)
    >>> dev.k_cache[:, 1] = 7.0
    >>> host = HostKVPool.like(dev, num_blocks=8)
    >>> cp = TierCopier(dev, host)
    >>> cp.apply([Transfer("write", (1,), (5,)), Transfer("load", (5,), (3,))])
    >>> bool((dev.k_cache[:, 3] == 7).all()), cp.stats.bytes["device->host"]
    (True, 128)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..memory.block_pool import KVCacheError
from ..reuse.hiradix_node import Transfer
from ..reuse.offload import LinkSpec, get_link
from .kv_tensors import PagedKVPool

__all__ = ["HostKVPool", "TransferStats", "TierCopier", "measure_offload"]

_DIRECTION = {"write": "device->host", "load": "host->device", "save": "host->disk", "fetch": "disk->device"}


@dataclass
class HostKVPool(PagedKVPool):
    """K/V of ``num_blocks`` host blocks, laid out as the device pool (``k_cache, v_cache
    (num_layers, num_blocks, block_size, nkv, hs)``), always on the CPU, pinned when CUDA is
    available (``pin=None``) or asked for."""

    pin: bool | None = None

    def __post_init__(self) -> None:
        self.device = "cpu"
        super().__post_init__()
        self.pinned = torch.cuda.is_available() if self.pin is None else self.pin
        if self.pinned:
            self.k_cache, self.v_cache = self.k_cache.pin_memory(), self.v_cache.pin_memory()

    @classmethod
    def like(cls, kv_pool: PagedKVPool, num_blocks: int) -> "HostKVPool":
        """A host pool of ``num_blocks`` blocks shaped like the device pool ``kv_pool``."""
        return cls(kv_pool.num_layers, num_blocks, kv_pool.block_size, kv_pool.num_kv_heads, kv_pool.head_dim,
                   kv_pool.dtype)

    def bytes_per_block(self) -> int:
        return self.nbytes // self.num_blocks


@dataclass
class TransferStats:
    """Per direction ("device->host", ...): pages, bytes, measured and simulated seconds."""

    pages: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_DIRECTION.values(), 0))
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_DIRECTION.values(), 0))
    measured_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_DIRECTION.values(), 0.0))
    simulated_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_DIRECTION.values(), 0.0))

    def summary(self) -> dict:
        """Totals: bytes moved, measured seconds, simulated seconds (with each direction's bytes)."""
        return {"bytes_moved": sum(self.bytes.values()), "measured_s": sum(self.measured_s.values()),
                "simulated_s": sum(self.simulated_s.values()), **{f"bytes {k}": v for k, v in self.bytes.items()}}


class TierCopier:
    """Performs transfers between ``device`` (a PagedKVPool), ``host`` (a HostKVPool) and
    ``storage`` (a FileStorage, or None). ``host_link`` / ``disk_link``: the stated links the
    simulated times use (names from ``kvlab.reuse.offload.LINKS`` or LinkSpecs)."""

    def __init__(self, device: PagedKVPool, host: HostKVPool, storage=None, host_link: str | LinkSpec = "pcie-gen5-x16",
                 disk_link: str | LinkSpec = "nvme-gen4") -> None:
        shape = (device.num_layers, device.block_size, device.num_kv_heads, device.head_dim)
        if (host.num_layers, host.block_size, host.num_kv_heads, host.head_dim, host.dtype) != (*shape, device.dtype):
            raise ValueError("the host pool's blocks must have the device pool's shape and dtype")
        if storage is not None and (getattr(storage, "page_shape", shape) != shape
                                    or getattr(storage, "dtype", device.dtype) != device.dtype):
            raise ValueError(f"storage pages are {storage.page_shape} in {storage.dtype}, the pool's are {shape} in "
                             f"{device.dtype}")
        self.device, self.host, self.storage = device, host, storage
        self.links = {"device->host": get_link(host_link), "host->device": get_link(host_link),
                      "host->disk": get_link(disk_link), "disk->device": get_link(disk_link)}
        self.stats = TransferStats()
        self.page_bytes = host.bytes_per_block()

    def _ids(self, ids: Sequence[int], pool) -> torch.Tensor:
        return torch.tensor(list(ids), dtype=torch.long, device=pool.k_cache.device)

    def apply(self, transfers: Sequence[Transfer]) -> None:
        """Perform ``transfers`` in order (each over every layer at once)."""
        dev, host = self.device, self.host
        on_gpu = dev.k_cache.is_cuda
        for t in transfers:
            way = _DIRECTION.get(t.kind)
            if way is None:
                raise ValueError(f"unknown transfer kind {t.kind!r}")
            t0 = time.perf_counter()
            if t.kind == "write":
                src = self._ids(t.src, dev)
                dst = self._ids(t.dst, host)
                for d, h in ((dev.k_cache, host.k_cache), (dev.v_cache, host.v_cache)):
                    h.index_copy_(1, dst, d.index_select(1, src).to("cpu"))        # (L, n, bs, nkv, hs)
            elif t.kind == "load":
                src, dst = self._ids(t.src, host), self._ids(t.dst, dev)
                for d, h in ((dev.k_cache, host.k_cache), (dev.v_cache, host.v_cache)):
                    d.index_copy_(1, dst, h.index_select(1, src).to(d.device, non_blocking=True))
            elif t.kind == "save":
                if self.storage is None:
                    raise KVCacheError("a save transfer but no storage tier")
                for b, key in zip(t.src, t.keys):  # a write that fails is counted by the storage: a miss later
                    self.storage.write(key, host.k_cache[:, b], host.v_cache[:, b])           # (L, bs, nkv, hs)
            else:
                kvs = [self.storage.read(key) for key in t.keys] if self.storage is not None else [None]
                if any(kv is None for kv in kvs):  # prefetched and kept at admission: only a bug gets here
                    raise KVCacheError(f"disk pages {t.keys} were checked at admission but cannot be read")
                dst = self._ids(t.dst, dev)
                for i, d in enumerate((dev.k_cache, dev.v_cache)):
                    d.index_copy_(1, dst, torch.stack([kv[i] for kv in kvs], 1).to(d.device))  # (L, n, bs, nkv, hs)
            if on_gpu:
                torch.cuda.synchronize()
            s = self.stats
            nbytes = t.num_pages * self.page_bytes
            s.pages[way] += t.num_pages
            s.bytes[way] += nbytes
            s.measured_s[way] += time.perf_counter() - t0
            s.simulated_s[way] += self.links[way].seconds(nbytes)
        if self.storage is not None and hasattr(self.storage, "forget_staged"):
            self.storage.forget_staged()  # every queued fetch ran: pages kept for them are not needed


@torch.no_grad()
def measure_offload(model, prefix_lens: Sequence[int], repeats: int = 3, block_size: int = 16) -> list[dict]:
    """Measured on ``model`` and this machine: for each prefix length, the seconds to prefill it
    (one forward pass over the prefix, the torch attention path) and to copy its KV from a host
    pool to the device pool (``TierCopier`` "load"), best of ``repeats``; plus the KV bytes.

    Example: ``measure_offload(model, [64, 256])`` -> ``[{"prefix_len": 64, "recompute_s": ...,
    "load_s": ..., "kv_bytes": ...}, ...]``.
    """
    from .model_runner import ModelRunner

    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in prefix_lens:
        nb = -(-n // block_size)
        pool = PagedKVPool.for_model(model, nb, block_size)
        host = HostKVPool.like(pool, nb)
        runner = ModelRunner(model, pool)
        ids = torch.randint(0, model.config.vocab_size, (n,), generator=gen).tolist()
        batch = runner.prepare(ids, [list(range(nb))], [0], [n])
        cp = TierCopier(pool, host)
        load = [Transfer("load", tuple(range(nb)), tuple(range(nb)))]
        best_r = best_l = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            runner.run(batch)
            best_r = min(best_r, time.perf_counter() - t0)
            t0 = time.perf_counter()
            cp.apply(load)
            best_l = min(best_l, time.perf_counter() - t0)
        rows.append({"prefix_len": n, "recompute_s": best_r, "load_s": best_l, "kv_bytes": n * pool.bytes_per_token()})
    return rows
