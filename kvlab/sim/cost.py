"""What an iteration costs and how much KV fits: the simulator's two documented models.

**Cost model** (a proxy for throughput and time to first token; documented, not measured)::

    iteration time = overhead + (weights + KV of every running token) / (HBM bandwidth x bw_eff)
                     + 2 x params x (decoded + prefilled tokens) / (peak FLOPs x flops_eff)

Decode is memory bound (it reads all weights once per iteration and every cached K and V);
prefill is compute bound (2 FLOPs per parameter per token; attention's own FLOPs are ignored).
Defaults: overhead 2 ms, bw_eff 0.7, flops_eff 0.5, fp16 weights and the GPU's dense fp16
tensor-core peak. For OPT-13B on an A100-40GB a decode step of 30 requests of 500 tokens comes
to about 42 ms. ``span`` and ``iterations_until`` sum k iterations in closed form, which is what
lets the simulation jump over iterations in which nothing but decoding happens.

**Budget**: KV slots from a model and a GPU (the share of the card the server may use, vLLM's
``gpu_memory_utilization``, minus the fp16 weights; vLLM measures the rest, activations
included, by a profiling run) or from a given number of bytes (the vLLM paper's 12 GB for
OPT-13B on an A100-40GB).

Mirrors the vLLM paper's setting (Kwon et al., SOSP 2023, Sec. 6.1 and Table 1); no vLLM file
computes iteration time (real servers measure it).

Not handled: attention FLOPs, tensor parallelism, CPU overheads that grow with the batch.

Example:
    >>> c = CostModel.for_model("opt-13b", "a100-40gb")
    >>> round(c.iteration_time(decode_seqs=30, context_tokens=15_000) * 1000)
    42
    >>> Budget.from_model("opt-13b", "a100-40gb", kv_bytes=12e9).tokens
    14648
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..memory.kvspec import GPUSpec, KVSpec, get_gpu, get_model

__all__ = ["CostModel", "Budget", "PEAK_FP16_FLOPS"]

# Dense fp16/bf16 tensor-core peaks from the vendors' spec sheets (FLOP/s).
PEAK_FP16_FLOPS = {"a100-40gb": 312e12, "a100-80gb": 312e12, "h100-80gb": 989e12, "h200": 989e12}


@dataclass(frozen=True)
class CostModel:
    """Iteration time (s) of a simulated server: see the module docstring.

    Example (OPT-13B on an A100-40GB, 30 sequences holding 15,000 tokens, no prefill):
        >>> c = CostModel.for_model("opt-13b", "a100-40gb")
        >>> round(c.iteration_time(decode_seqs=30, context_tokens=15_000, prefill_tokens=0) * 1000)
        42
    """

    weight_bytes: float
    bytes_per_token: int
    params: float
    hbm_bandwidth: float
    peak_flops: float
    overhead_s: float = 0.002
    bw_eff: float = 0.7
    flops_eff: float = 0.5

    @classmethod
    def for_model(cls, model: str | KVSpec, gpu: str | GPUSpec, **kw) -> "CostModel":
        spec = get_model(model) if isinstance(model, str) else model
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        if spec.params_b is None:
            raise ValueError(f"model {spec.name!r} has no parameter count; the cost model needs one")
        params = spec.params_b * 1e9
        return cls(params * 2, spec.bytes_per_token, params, g.hbm_bandwidth, PEAK_FP16_FLOPS.get(g.name, 312e12), **kw)

    @cached_property
    def _a(self) -> float:  # per iteration, fixed
        return self.overhead_s + self.weight_bytes / (self.hbm_bandwidth * self.bw_eff)

    @cached_property
    def _c_tok(self) -> float:  # per token computed
        return 2 * self.params / (self.peak_flops * self.flops_eff)

    @cached_property
    def _c_kv(self) -> float:  # per cached token read
        return self.bytes_per_token / (self.hbm_bandwidth * self.bw_eff)

    def iteration_time(self, decode_seqs: int, context_tokens: float, prefill_tokens: int = 0) -> float:
        return self._a + self._c_tok * (decode_seqs + prefill_tokens) + self._c_kv * context_tokens

    def span(self, k: int, seqs: int, ctx0: float, prefill_tokens: int) -> float:
        """Time of k iterations with ``seqs`` sequences whose context starts at ``ctx0`` tokens
        and grows by ``seqs`` per iteration; prefill only in the first one."""
        return (k * (self._a + self._c_tok * seqs) + self._c_kv * (k * ctx0 + seqs * k * (k - 1) / 2)
                + self._c_tok * prefill_tokens)

    def iterations_until(self, dt: float, seqs: int, ctx0: float, prefill_tokens: int) -> int:
        """Smallest k >= 1 with ``span(k) >= dt``."""
        a2 = self._c_kv * seqs / 2
        b = self._a + self._c_tok * seqs + self._c_kv * ctx0 - a2
        c = self._c_tok * prefill_tokens - dt
        if a2 > 0:
            k = (-b + math.sqrt(max(0.0, b * b - 4 * a2 * c))) / (2 * a2)
        else:
            k = -c / b
        k = max(1, int(math.ceil(k)))
        while k > 1 and self.span(k - 1, seqs, ctx0, prefill_tokens) >= dt:
            k -= 1
        while self.span(k, seqs, ctx0, prefill_tokens) < dt:
            k += 1
        return k


@dataclass(frozen=True)
class Budget:
    """A KV budget in token slots, and where it came from.

    Example (the vLLM paper's setting: OPT-13B on an A100-40GB keeps about 12 GB for KV):
        >>> b = Budget.from_model("opt-13b", "a100-40gb", kv_bytes=12e9)
        >>> b.tokens, b.bytes_per_token
        (14648, 819200)
        >>> Budget.from_model("opt-13b", "a100-40gb").tokens   # 90% of 40 GiB minus fp16 weights
        15813
    """

    tokens: int
    bytes_per_token: int = 1
    source: str = ""

    @classmethod
    def from_model(cls, model: str | KVSpec, gpu: str | GPUSpec | None = None, utilization: float = 0.9,
                   kv_bytes: float | None = None) -> "Budget":
        spec = get_model(model) if isinstance(model, str) else model
        if kv_bytes is None:
            if gpu is None:
                raise ValueError("give a gpu or kv_bytes")
            g = get_gpu(gpu) if isinstance(gpu, str) else gpu
            kv_bytes = g.kv_budget_bytes(spec, utilization)
            src = f"{g.name}: {utilization:.0%} of {g.memory_bytes / 2**30:.0f} GiB minus {spec.name}'s fp16 weights"
        else:
            src = f"{kv_bytes / 1e9:.1f} GB given"
        if kv_bytes <= 0:
            raise ValueError(f"kv_bytes must be > 0, got {kv_bytes}")
        tokens = int(kv_bytes // spec.bytes_per_token)
        return cls(tokens, spec.bytes_per_token, f"{src} = {kv_bytes / 1e9:.2f} GB / {spec.bytes_per_token:,} B per token")
