"""Where the K and V tensors live: a contiguous per-layer cache, and a paged pool.

:class:`ContiguousKV` preallocates, per layer, K and V for ``batch`` sequences of up to
``max_len`` tokens (the "reserve the maximum" policy of pre-vLLM servers): memory is claimed up
front whether or not a sequence ever gets that long.

:class:`PagedKVPool` holds, per layer, ``k_cache, v_cache (num_blocks, block_size, nkv, hs)``,
the layout of vLLM and of ``kvlab.kernels``. It does not decide which block belongs to whom:
that is the job of ``kvlab.memory`` (BlockManager / BlockTable, driven by the CacheManager); the
pool only stores the numbers and copies blocks when a table asks for copy-on-write.

:func:`kernel_ops` picks the attention/store functions: ``"torch"`` gives the plain-torch
``*_ref`` references of ``kvlab.kernels`` (fast on a CPU), ``"triton"`` the Triton kernels
(native on a GPU, the slow interpreter on a CPU).

Mirrors nano-vllm ``nanovllm/engine/model_runner.py`` (``allocate_kv_cache``: one
``(2, layers, num_blocks, block_size, nkv, hs)`` tensor) and vLLM's ``CacheEngine`` (``copy_blocks``);
kvlab keeps K and V as two tensors and names the pool.

Not handled here: quantized caches, swapping to host memory, eviction policy.

Example:
    >>> pool = PagedKVPool(num_layers=2, num_blocks=8, block_size=4, num_kv_heads=2, head_dim=32)
    >>> tuple(pool.k_cache[0].shape)
    (8, 4, 2, 32)
    >>> pool.bytes_per_token()   # K and V, 2 layers, 2 heads x 32 dims, fp32
    1024
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Sequence

import torch

__all__ = ["BACKENDS", "kernel_ops", "ContiguousKV", "PagedKVPool"]

BACKENDS = ("torch", "triton")


def kernel_ops(backend: str) -> SimpleNamespace:
    """The four paged operations for ``backend`` ('torch' references or 'triton' kernels).

    Returns a namespace with store_kvcache, paged_decode_attention, extend_attention,
    copy_blocks and naive_attention, all with kvlab.kernels' signatures.
    """
    if backend not in BACKENDS:
        raise ValueError(f"attention_backend={backend!r} is not one of {BACKENDS}")
    from .. import kernels as K

    if backend == "torch":
        return SimpleNamespace(store_kvcache=K.store_kvcache_ref, paged_decode_attention=K.paged_decode_attention_ref,
                               extend_attention=K.extend_attention_ref, copy_blocks=K.copy_blocks_ref,
                               naive_attention=K.naive_attention, name=backend)
    return SimpleNamespace(store_kvcache=K.store_kvcache, paged_decode_attention=K.paged_decode_attention,
                           extend_attention=K.extend_attention, copy_blocks=K.copy_blocks,
                           naive_attention=K.naive_attention, name=backend)


def _kv_pair(shape: tuple[int, ...], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two zero tensors (K and V) of ``shape``."""
    return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)


def _model_dims(model) -> dict:
    c = model.config
    return dict(num_layers=c.num_hidden_layers, num_kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                dtype=model.dtype, device=model.device)


@dataclass
class ContiguousKV:
    """Per-layer K/V preallocated to ``max_len`` tokens for each of ``batch`` sequences.

    k, v: (num_layers, batch, max_len, nkv, hs). ``lengths[b]`` counts tokens written so far.

    Example: ContiguousKV(4, batch=1, max_len=256, num_kv_heads=2, head_dim=32).nbytes -> 524288
    (fp32), reserved before the first token is generated.
    """

    num_layers: int
    batch: int
    max_len: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"

    def __post_init__(self) -> None:
        shape = (self.num_layers, self.batch, self.max_len, self.num_kv_heads, self.head_dim)
        self.k, self.v = _kv_pair(shape, self.dtype, self.device)  # each (L, B, max_len, nkv, hs)

    @classmethod
    def for_model(cls, model, batch: int, max_len: int) -> "ContiguousKV":
        return cls(batch=batch, max_len=max_len, **_model_dims(model))

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v (B or 1, T, nkv, hs) -> positions start .. start+T-1 of every sequence."""
        T = k.shape[1]
        if start + T > self.max_len:
            raise ValueError(f"writing positions {start}..{start + T - 1} overflows max_len={self.max_len}")
        self.k[layer, :, start : start + T] = k  # (B, T, nkv, hs), broadcast over B when k has batch 1
        self.v[layer, :, start : start + T] = v

    def read(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of positions 0 .. end-1: two (B, end, nkv, hs) views (no copy)."""
        return self.k[layer, :, :end], self.v[layer, :, :end]


@dataclass
class PagedKVPool:
    """K/V storage for ``num_blocks`` blocks of ``block_size`` tokens, per layer.

    k_cache, v_cache: (num_layers, num_blocks, block_size, nkv, hs); ``k_cache[layer]`` is the
    (num_blocks, block_size, nkv, hs) tensor the kernels take. Blocks are handed out by a
    kvlab.memory.BlockManager over the same num_blocks / block_size.
    """

    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.block_size < 1:
            raise ValueError(f"num_blocks={self.num_blocks} and block_size={self.block_size} must be >= 1")
        shape = (self.num_layers, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        self.k_cache, self.v_cache = _kv_pair(shape, self.dtype, self.device)  # each (L, NB, bs, nkv, hs)

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int) -> "PagedKVPool":
        return cls(num_blocks=num_blocks, block_size=block_size, **_model_dims(model))

    @property
    def nbytes(self) -> int:
        return self.k_cache.numel() * self.k_cache.element_size() * 2

    def bytes_per_token(self) -> int:
        """K and V of one token over all layers: 2 x layers x nkv x hs x dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.k_cache.element_size()

    def copy_blocks(self, pairs: Sequence[tuple[int, int]], backend: str = "torch") -> None:
        """Copy-on-write: for each (src, dst) in order, block dst of every layer becomes a copy of
        block src. A pair that reads a block an earlier pair writes (or the reverse) goes into a
        later kernel call, so the result is that of copying one pair after the other."""
        ops = kernel_ops(backend)
        for wave in _independent_runs(pairs):
            for layer in range(self.num_layers):
                ops.copy_blocks(self.k_cache[layer], self.v_cache[layer], wave)

    def gather(self, layer: int, block_table: Sequence[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of one sequence's first ``length`` tokens, read through its block table: (length, nkv, hs)."""
        from ..kernels.reference import gather_kv

        table = torch.as_tensor(list(block_table), dtype=torch.long, device=self.k_cache.device)
        return gather_kv(self.k_cache[layer], table, length), gather_kv(self.v_cache[layer], table, length)


def _independent_runs(pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Consecutive runs of (src, dst) pairs in which no block is written twice or both read and
    written, the condition the copy kernel needs to run a run's pairs in parallel.

    Example: [(1, 2), (3, 4), (2, 5)] -> [[(1, 2), (3, 4)], [(2, 5)]] (block 2 is written, then read).
    """
    runs: list[list[tuple[int, int]]] = []
    srcs: set[int] = set()
    dsts: set[int] = set()
    for src, dst in pairs:
        if not runs or src in dsts or dst in srcs or dst in dsts:
            runs.append([])
            srcs, dsts = set(), set()
        runs[-1].append((src, dst))
        srcs.add(src)
        dsts.add(dst)
    return runs
