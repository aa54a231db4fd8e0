"""A paged KV pool in int8 or fp8: one byte a value plus one fp32 scale per token, KV head and K/V.

:class:`QuantizedKVPool` is :class:`~kvlab.compute.kv_tensors.PagedKVPool`'s layout with 1-byte
values and scales beside them::

    k_cache, v_cache  (num_layers, num_blocks, block_size, nkv, hs)   int8 or float8_e4m3fn
    k_scale, v_scale  (num_layers, num_blocks, block_size, nkv)       fp32

``store`` quantizes new K/V as it writes them (``scale = max|x| / 127`` for int8, ``/ 448`` for
fp8 e4m3: one scale per token and head, so a token with small values keeps its precision next to
one with large values); ``gather`` reads a sequence back through its block table, dequantized.
The ``"triton"`` backend runs ``kvlab.kernels.store_kvcache_quant`` (and the decode kernel
``quantized_decode_attention`` reads the pool directly); ``"torch"`` runs the references.

Bytes per token: ``2 x layers x nkv x (hs x 1 + 4)``, against ``2 x layers x nkv x hs x 2`` in
fp16 (:meth:`QuantizedKVPool.bytes_per_token` counts what the tensors hold; it agrees with
``KVSpec.with_dtype("int8")``).

Mirrors vLLM's ``kv_cache_dtype="fp8"`` (whose scales are per tensor) and the per-token int8
caches of KIVI / LMDeploy; not handled: per-channel keys (KIVI), groups within a head, int4.

Example:
    >>> pool = QuantizedKVPool(num_layers=2, num_blocks=4, block_size=4, num_kv_heads=1, head_dim=4)
    >>> k = torch.tensor([[[0.5, -1.0, 0.0, 0.25]]])                  # (1 token, 1 head, 4)
    >>> pool.store(0, k, k, torch.tensor([5]))                          # slot 5: block 1, offset 1
    >>> pool.k_cache[0, 1, 1, 0].tolist(), round(pool.k_scale[0, 1, 1, 0].item() * 127, 4)
    ([64, -127, 0, 32], 1.0)
    >>> pool.bytes_per_token()                                          # 2 x 2 layers x 1 x (4 + 4)
    32
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["KV_DTYPES", "QuantizedKVPool", "kv_dtype_by_name"]

KV_DTYPES: dict[str, torch.dtype] = {"int8": torch.int8}
if hasattr(torch, "float8_e4m3fn"):
    KV_DTYPES["fp8"] = torch.float8_e4m3fn


def kv_dtype_by_name(name: str) -> torch.dtype:
    """'int8' -> torch.int8, 'fp8' -> torch.float8_e4m3fn (when this torch has it); ValueError otherwise."""
    if name not in KV_DTYPES:
        raise ValueError(f"unknown quantized KV dtype {name!r}; this torch offers {sorted(KV_DTYPES)}")
    return KV_DTYPES[name]


@dataclass
class QuantizedKVPool:
    """int8/fp8 K/V for ``num_blocks`` blocks of ``block_size`` tokens per layer, with scales."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    kv_dtype: torch.dtype = torch.int8
    device: torch.device | str = "cpu"

    def __post_init__(self) -> None:
        if self.kv_dtype not in KV_DTYPES.values():
            raise ValueError(f"kv_dtype must be one of {list(KV_DTYPES.values())}, got {self.kv_dtype}")
        if self.num_blocks < 1 or self.block_size < 1:
            raise ValueError(f"num_blocks={self.num_blocks} and block_size={self.block_size} must be >= 1")
        shape = (self.num_layers, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)   # (L, NB, bs, nkv, hs)
        self.v_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
        self.k_scale = torch.ones(shape[:4], dtype=torch.float32, device=self.device)  # (L, NB, bs, nkv)
        self.v_scale = torch.ones(shape[:4], dtype=torch.float32, device=self.device)

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int, kv_dtype: torch.dtype = torch.int8) -> "QuantizedKVPool":
        c = model.config
        return cls(c.num_hidden_layers, num_blocks, block_size, c.num_key_value_heads, c.head_dim, kv_dtype,
                   model.device)

    @property
    def nbytes(self) -> int:
        """Values and scales of K and V."""
        return 2 * (self.k_cache.numel() * self.k_cache.element_size() + self.k_scale.numel() * 4)

    def bytes_per_token(self) -> int:
        """2 x layers x nkv x (head_dim x 1 byte + a 4-byte scale)."""
        return 2 * self.num_layers * self.num_kv_heads * (self.head_dim * self.k_cache.element_size() + 4)

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
              backend: str = "torch") -> None:
        """Quantize k, v (N, nkv, hs) into slots ``slot_mapping`` (N,) of ``layer`` (-1: skip)."""
        from .. import kernels as K

        fn = K.store_kvcache_quant if backend == "triton" else K.store_kvcache_quant_ref
        fn(k, v, self.k_cache[layer], self.v_cache[layer], self.k_scale[layer], self.v_scale[layer], slot_mapping)

    def gather(self, layer: int, block_table: Sequence[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of a sequence's first ``length`` slots, dequantized to fp32: (length, nkv, hs) each."""
        from ..kernels.reference import dequantize_kv_ref, gather_kv

        table = torch.as_tensor(list(block_table), dtype=torch.long, device=self.k_cache.device)
        out = []
        for cache, scale in ((self.k_cache, self.k_scale), (self.v_cache, self.v_scale)):
            q = gather_kv(cache[layer], table, length)                                 # (length, nkv, hs)
            s = gather_kv(scale[layer][..., None], table, length)[..., 0]              # (length, nkv)
            out.append(dequantize_kv_ref(q, s))
        return out[0], out[1]
