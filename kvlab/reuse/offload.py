"""When offloading pays: recompute a cached prefix (prefill FLOPs) or load its KV back (bytes over a link).

A prefix of ``L`` tokens that is no longer on the GPU can be computed again or copied back::

    recompute(L) = (2 x params x L  +  2 x layers x hidden x L^2) / (peak_flops x mfu)
    load(L)      = latency  +  L x bytes_per_token / bandwidth

The first term of ``recompute`` is the matmuls (2 FLOPs per parameter per token); the second is
causal attention over the prefix (QK^T and PV, half of an L x L score matrix each, every layer;
``hidden`` = query heads x head_dim). ``load`` is one copy: a fixed cost (a DMA launch, an SSD
read) plus the bytes. Per token, loading costs ``bytes_per_token / bandwidth`` and recomputing
at least ``2 x params / flops``; a GQA model has few bytes per token, so loading wins early.
:func:`break_even_tokens` solves ``load(L) < recompute(L)`` for the shortest such prefix.

Stated numbers (spec sheets, not measurements): dense fp16/bf16 tensor-core peaks
(:data:`PEAK_FLOPS`, A100 312 TFLOP/s, H100/H200 989 TFLOP/s), a model FLOPs utilisation
``mfu`` of 0.5 (the simulator's ``CostModel.flops_eff``), links in :data:`LINKS` (PCIe 4.0 x16
~32 GB/s and PCIe 5.0 x16 ~64 GB/s per direction; one NVMe SSD ~7 GB/s (PCIe 4.0 x4) or ~14 GB/s
(PCIe 5.0 x4) sequential read), with a 10 us fixed cost per host copy and 100 us per SSD read.
Real copies reach less than the link's peak: lower ``bandwidth`` to see how far it moves.

Mirrors no SGLang file: HiCache's ``load_back_threshold`` (skip loads under 10 tokens) is the
same decision made with a constant. Pure Python; the measured version on the bundled model is
``kvlab.compute.host_pool.measure_offload``.

Example (Llama-3 8B on an H100: 128 KiB of KV per token):
    >>> c = offload_costs("llama-3-8b", 4096, gpu="h100-80gb", link="pcie-gen5-x16")
    >>> round(c.recompute_s * 1e3, 1), round(c.load_s * 1e3, 2), c.pays
    (141.9, 8.4, True)
    >>> break_even_tokens("llama-3-8b", "h100-80gb", "pcie-gen5-x16")
    1
    >>> break_even_tokens("llama-3-8b", "h100-80gb", LinkSpec("slow-disk", 3e9, 100e-6))
    21162
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..memory.kvspec import GPUS, GPUSpec, KVSpec, get_gpu, get_model

__all__ = ["PEAK_FLOPS", "LinkSpec", "LINKS", "get_link", "OffloadCost", "recompute_seconds", "load_seconds",
           "offload_costs", "break_even_tokens"]

# Dense fp16/bf16 tensor-core peaks (FLOP/s), from the GPU presets (kvlab.memory.kvspec.GPUS).
PEAK_FLOPS = {name: g.peak_fp16_flops for name, g in GPUS.items() if g.peak_fp16_flops is not None}


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A link KV moves over: ``bandwidth`` bytes/s one way, ``latency`` seconds per copy."""

    name: str
    bandwidth: float
    latency: float = 0.0
    note: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.bandwidth, (int, float)) and math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError(f"LinkSpec {self.name!r}: bandwidth must be a number > 0, got {self.bandwidth!r}")
        if not (isinstance(self.latency, (int, float)) and math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"LinkSpec {self.name!r}: latency must be a number >= 0, got {self.latency!r}")

    def seconds(self, nbytes: float) -> float:
        """One copy of ``nbytes`` bytes (0 bytes: no copy, no cost)."""
        return self.latency + nbytes / self.bandwidth if nbytes else 0.0


LINKS: dict[str, LinkSpec] = {
    "pcie-gen4-x16": LinkSpec("pcie-gen4-x16", 32e9, 10e-6, "host DRAM <-> A100: PCIe 4.0 x16, ~32 GB/s per direction"),
    "pcie-gen5-x16": LinkSpec("pcie-gen5-x16", 64e9, 10e-6, "host DRAM <-> H100/H200: PCIe 5.0 x16, ~64 GB/s per direction"),
    "nvme-gen4": LinkSpec("nvme-gen4", 7e9, 100e-6, "one NVMe SSD on PCIe 4.0 x4: ~7 GB/s sequential read"),
    "nvme-gen5": LinkSpec("nvme-gen5", 14e9, 100e-6, "one NVMe SSD on PCIe 5.0 x4: ~14 GB/s sequential read"),
}


def get_link(link: str | LinkSpec) -> LinkSpec:
    """A LinkSpec, or the preset of that name (ValueError listing them otherwise)."""
    if isinstance(link, LinkSpec):
        return link
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; choose one of {', '.join(LINKS)} or give a LinkSpec")
    return LINKS[link]


def _spec(model: str | KVSpec) -> KVSpec:
    spec = get_model(model) if isinstance(model, str) else model
    if not isinstance(spec, KVSpec) or spec.params_b is None:
        raise ValueError(f"model {getattr(spec, 'name', spec)!r} needs a parameter count (a KVSpec with params_b)")
    return spec


def _flops(gpu: str | GPUSpec | float, mfu: float) -> float:
    if not (isinstance(mfu, (int, float)) and 0 < mfu <= 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    if isinstance(gpu, (int, float)) and not isinstance(gpu, bool):
        if not (math.isfinite(gpu) and gpu > 0):
            raise ValueError(f"gpu FLOP/s must be > 0, got {gpu!r}")
        return gpu * mfu
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if g.peak_fp16_flops is None:
        raise ValueError(f"no FLOP/s preset for gpu {g.name!r}; give the FLOP/s as a number")
    return g.peak_fp16_flops * mfu


def _tokens(prefix_len: int) -> int:
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
        raise ValueError(f"prefix_len must be an int >= 0, got {prefix_len!r}")
    return prefix_len


def recompute_seconds(model: str | KVSpec, prefix_len: int, gpu: str | GPUSpec | float = "h100-80gb",
                      mfu: float = 0.5) -> float:
    """Seconds to prefill ``prefix_len`` tokens again (see the module docstring)."""
    spec, n = _spec(model), _tokens(prefix_len)
    return (2 * spec.params_b * 1e9 * n + 2 * spec.layers * spec.hidden_size * n * n) / _flops(gpu, mfu)


def load_seconds(model: str | KVSpec, prefix_len: int, link: str | LinkSpec = "pcie-gen5-x16") -> float:
    """Seconds to copy the KV of ``prefix_len`` tokens back over ``link``."""
    return get_link(link).seconds(_spec(model).bytes_per_token * _tokens(prefix_len))


@dataclass(frozen=True, slots=True)
class OffloadCost:
    """One prefix: recompute against load, and whether loading is faster."""

    prefix_len: int
    kv_bytes: int
    recompute_s: float
    load_s: float

    @property
    def pays(self) -> bool:
        return self.load_s < self.recompute_s

    @property
    def speedup(self) -> float:
        """How many times faster loading is than recomputing (< 1: recomputing wins)."""
        return self.recompute_s / self.load_s if self.load_s else math.inf


def offload_costs(model: str | KVSpec, prefix_len: int, gpu: str | GPUSpec | float = "h100-80gb",
                  link: str | LinkSpec = "pcie-gen5-x16", mfu: float = 0.5) -> OffloadCost:
    """Recompute and load times of one prefix (simulated from the stated numbers)."""
    spec = _spec(model)
    return OffloadCost(prefix_len, spec.kv_bytes(_tokens(prefix_len)), recompute_seconds(spec, prefix_len, gpu, mfu),
                       load_seconds(spec, prefix_len, link))


def break_even_tokens(model: str | KVSpec, gpu: str | GPUSpec | float = "h100-80gb",
                      link: str | LinkSpec = "pcie-gen5-x16", mfu: float = 0.5) -> int:
    """The shortest prefix (tokens, >= 1) whose KV loads faster than it recomputes.

    ``recompute(L) - load(L) = b L^2 + (a - c) L - latency`` with ``a`` the matmul seconds per
    token, ``b`` the attention term and ``c`` the link's seconds per token: its positive root.
    Below it (only when the link is slow or the fixed cost is large) recomputing is faster.
    """
    spec, ln = _spec(model), get_link(link)
    f = _flops(gpu, mfu)
    a = 2 * spec.params_b * 1e9 / f
    b = 2 * spec.layers * spec.hidden_size / f
    c = spec.bytes_per_token / ln.bandwidth
    lo = max(1, int((-(a - c) + math.sqrt((a - c) ** 2 + 4 * b * ln.latency)) / (2 * b)))
    while lo > 1 and recompute_seconds(spec, lo - 1, f / mfu, mfu) > load_seconds(spec, lo - 1, ln):
        lo -= 1
    while recompute_seconds(spec, lo, f / mfu, mfu) <= load_seconds(spec, lo, ln):
        lo += 1
    return lo
