"""What an iteration costs and how much KV fits: the simulator's two documented models.

**Cost model** (a proxy for throughput and time to first token; documented, not measured)::

    iteration time = overhead + weights / (HBM bandwidth x bw_eff)
                     + KV of every running token / (HBM bandwidth x kv_bw_eff)
                     + 2 x params x (decoded + prefilled tokens) / (peak FLOPs x flops_eff)
                     [+ overhead + weights / (HBM bandwidth x bw_eff)   with separate prompt steps]

Decode is memory bound (it reads all weights once per iteration and every cached K and V);
prefill is compute bound (2 FLOPs per parameter per token; attention's own FLOPs are ignored).
A server that runs prompts in a step of their own (vLLM in 2023: ``separate=True``) pays the
fixed part twice in an iteration that admits requests: once for the prompt step, once for the
decode step of everyone else; an Orca-style server mixes both in one step.

Presets (``CostModel.for_model(model, gpu, preset)``), every constant with where it comes from:

- ``"kvlab"`` (the default): overhead 2 ms (kernel launches and scheduling of one step, an
  order of magnitude, not measured), ``bw_eff`` = ``kv_bw_eff`` = 0.7 (the share of peak HBM
  bandwidth a well-tuned memory-bound kernel reaches, a common rule of thumb), ``flops_eff``
  0.5; the weights in fp16 and the GPU's spec-sheet bandwidth and dense fp16 peak. For OPT-13B
  on an A100-40GB a decode step of 30 requests of 500 tokens comes to about 42 ms.
- ``"vllm-2023"``: the same, except the attention kernel: the vLLM paper measured its 2023
  PagedAttention kernel at 20-26% higher latency than FasterTransformer's (Kwon et al., SOSP
  2023, Sec. 7.1 and Fig. 18a, p. 12), so ``kv_bw_eff`` = 0.7 / 1.23 = 0.57 (FasterTransformer's
  kernel taken at the 0.7 of the rest). Its scheduler's separate prompt steps are the
  ``separate`` flag, set by the ``vllm`` policy (``kvlab.sim.policies.paged``).

No constant is fitted to a published serving figure (Fig. 2, 12, 13): the reproductions show
how the results move when the iteration time is scaled (``scale``).

``span`` and ``iterations_until`` sum k iterations in closed form, which is what lets the
simulation jump over iterations in which nothing but decoding happens.

**Budget**: KV slots from a model and a GPU (the share of the card the server may use, vLLM's
``gpu_memory_utilization``, minus the fp16 weights; vLLM measures the rest, activations
included, by a profiling run) or from a given number of bytes. :func:`Budget.table1` is the
vLLM paper's setting: OPT-13B on an A100-40GB keeps 12 GB for KV (Table 1, p. 9: "12 GB",
"15.7K" slots): 12 GiB / 819,200 B per token = 15,728 slots.

Mirrors the vLLM paper's setting (Kwon et al., SOSP 2023, Sec. 6.1 and Table 1); no vLLM file
computes iteration time (real servers measure it).

Not handled: attention FLOPs, tensor parallelism, CPU overheads that grow with the batch.

Example:
    >>> c = CostModel.for_model("opt-13b", "a100-40gb")
    >>> round(c.iteration_time(decode_seqs=30, context_tokens=15_000) * 1000)
    42
    >>> Budget.table1().tokens
    15728
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..memory.kvspec import GPUS, GPUSpec, KVSpec, get_gpu, get_model

__all__ = ["CostModel", "Budget", "PEAK_FP16_FLOPS", "COST_PRESETS", "TABLE1_KV_BYTES"]

# Dense fp16/bf16 tensor-core peaks (FLOP/s), from the GPU presets (kvlab.memory.kvspec.GPUS).
PEAK_FP16_FLOPS = {name: g.peak_fp16_flops for name, g in GPUS.items() if g.peak_fp16_flops is not None}
# The presets' constants (see the module docstring for where each comes from).
COST_PRESETS = {"kvlab": {}, "vllm-2023": {"kv_bw_eff": 0.7 / 1.23}}
# The vLLM paper's Table 1 (p. 9): OPT-13B on one A100-40GB, 26 GB of weights, 12 GB for KV, "15.7K" slots.
TABLE1_KV_BYTES = 12 * 2**30


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
    kv_bw_eff: float | None = None  # None: bw_eff
    scale: float = 1.0  # every iteration time times this (the sensitivity of a result to the model)
    preset: str = "custom"

    def __post_init__(self) -> None:
        for name in ("overhead_s", "bw_eff", "flops_eff", "scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0) or (name != "overhead_s" and v == 0):
                raise ValueError(f"{name} must be a finite number > 0 (overhead_s >= 0), got {v!r}")
        if self.kv_bw_eff is not None and not (math.isfinite(self.kv_bw_eff) and self.kv_bw_eff > 0):
            raise ValueError(f"kv_bw_eff must be a finite number > 0, got {self.kv_bw_eff!r}")

    @classmethod
    def for_model(cls, model: str | KVSpec, gpu: str | GPUSpec, preset: str = "kvlab", **kw) -> "CostModel":
        """The cost model of ``model`` on ``gpu`` with a preset's constants (:data:`COST_PRESETS`;
        ``kw`` overrides any of them)."""
        spec = get_model(model) if isinstance(model, str) else model
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        if spec.params_b is None:
            raise ValueError(f"model {spec.name!r} has no parameter count; the cost model needs one")
        if preset not in COST_PRESETS:
            raise ValueError(f"unknown cost preset {preset!r}; choose one of: {', '.join(COST_PRESETS)}")
        params = spec.params_b * 1e9
        kw = {**COST_PRESETS[preset], "preset": preset, **kw}
        if g.peak_fp16_flops is None:
            raise ValueError(f"gpu {g.name!r} has no FLOP/s figure; the cost model needs one")
        return cls(params * 2, spec.bytes_per_token, params, g.hbm_bandwidth, g.peak_fp16_flops, **kw)

    @cached_property
    def _a(self) -> float:  # per iteration, fixed
        return self.scale * (self.overhead_s + self.weight_bytes / (self.hbm_bandwidth * self.bw_eff))

    @cached_property
    def _c_tok(self) -> float:  # per token computed
        return self.scale * 2 * self.params / (self.peak_flops * self.flops_eff)

    @cached_property
    def _c_kv(self) -> float:  # per cached token read
        return self.scale * self.bytes_per_token / (self.hbm_bandwidth * (self.kv_bw_eff or self.bw_eff))

    def iteration_time(self, decode_seqs: int, context_tokens: float, prefill_tokens: int = 0,
                       separate: bool = False) -> float:
        """One iteration; ``separate``: its ``prefill_tokens`` run in a prompt step of their own."""
        extra = self._a if separate and prefill_tokens else 0.0
        return self._a + self._c_tok * (decode_seqs + prefill_tokens) + self._c_kv * context_tokens + extra

    def span(self, k: int, seqs: int, ctx0: float, prefill_tokens: int, separate: bool = False) -> float:
        """Time of k iterations with ``seqs`` sequences whose context starts at ``ctx0`` tokens
        and grows by ``seqs`` per iteration; prefill only in the first one."""
        extra = self._a if separate and prefill_tokens else 0.0
        return (k * (self._a + self._c_tok * seqs) + self._c_kv * (k * ctx0 + seqs * k * (k - 1) / 2)
                + self._c_tok * prefill_tokens + extra)

    def iterations_until(self, dt: float, seqs: int, ctx0: float, prefill_tokens: int, separate: bool = False) -> int:
        """Smallest k >= 1 with ``span(k) >= dt``."""
        a2 = self._c_kv * seqs / 2
        b = self._a + self._c_tok * seqs + self._c_kv * ctx0 - a2
        c = self._c_tok * prefill_tokens + (self._a if separate and prefill_tokens else 0.0) - dt
        if a2 > 0:
            k = (-b + math.sqrt(max(0.0, b * b - 4 * a2 * c))) / (2 * a2)
        else:
            k = -c / b
        k = max(1, int(math.ceil(k)))
        while k > 1 and self.span(k - 1, seqs, ctx0, prefill_tokens, separate) >= dt:
            k -= 1
        while self.span(k, seqs, ctx0, prefill_tokens, separate) < dt:
            k += 1
        return k


@dataclass(frozen=True)
class Budget:
    """A KV budget in token slots, and where it came from.

    Example (the vLLM paper's setting: OPT-13B on an A100-40GB keeps 12 GiB for KV):
        >>> b = Budget.table1()
        >>> b.tokens, b.bytes_per_token
        (15728, 819200)
        >>> Budget.from_model("opt-13b", "a100-40gb").tokens == b.tokens      # the paper's setting by default
        True
        >>> Budget.from_model("opt-13b", "a100-40gb", utilization=0.9).tokens   # 90% of 40 GiB minus fp16 weights
        15813
    """

    tokens: int
    bytes_per_token: int = 1
    source: str = ""

    @classmethod
    def from_model(cls, model: str | KVSpec, gpu: str | GPUSpec | None = None, utilization: float | None = None,
                   kv_bytes: float | None = None) -> "Budget":
        """The budget of ``model`` on ``gpu``: ``kv_bytes`` when given; else the paper's setting
        where there is one (OPT-13B on an A100-40GB: :meth:`table1`) unless ``utilization`` is
        given; else ``utilization`` (default 0.9) of the card minus the fp16 weights."""
        spec = get_model(model) if isinstance(model, str) else model
        if kv_bytes is None:
            if gpu is None:
                raise ValueError("give a gpu or kv_bytes")
            g = get_gpu(gpu) if isinstance(gpu, str) else gpu
            if utilization is None and (spec.name, g.name) == ("opt-13b", "a100-40gb"):
                return cls.table1()
            utilization = 0.9 if utilization is None else utilization
            if not (isinstance(utilization, (int, float)) and 0 < utilization <= 1):
                raise ValueError(f"utilization must be in (0, 1], got {utilization!r}")
            kv_bytes = g.kv_budget_bytes(spec, utilization)
            src = f"{g.name}: {utilization:.0%} of {g.memory_bytes / 2**30:.0f} GiB minus {spec.name}'s fp16 weights"
        else:
            src = f"{kv_bytes / 1e9:.1f} GB given"
        if not (isinstance(kv_bytes, (int, float)) and math.isfinite(kv_bytes) and kv_bytes > 0):
            raise ValueError(f"kv_bytes must be a finite number > 0, got {kv_bytes}")
        tokens = int(kv_bytes // spec.bytes_per_token)
        return cls(tokens, spec.bytes_per_token, f"{src} = {kv_bytes / 1e9:.2f} GB / {spec.bytes_per_token:,} B per token")

    def with_bytes_per_token(self, bytes_per_token: int, what: str = "") -> "Budget":
        """The same memory in slots of another size (int8 KV, MLA, ...): ``tokens x bytes_per_token``
        bytes re-divided. Example: Table 1's 15,728 fp16 slots of OPT-13B in int8 (2 x 40 x 40 x
        (128 + 4) = 422,400 B) -> 30,502 slots."""
        if isinstance(bytes_per_token, bool) or not isinstance(bytes_per_token, int) or bytes_per_token < 1:
            raise ValueError(f"bytes_per_token must be an int >= 1, got {bytes_per_token!r}")
        if bytes_per_token == self.bytes_per_token:
            return self
        tokens = self.tokens * self.bytes_per_token // bytes_per_token
        return Budget(tokens, bytes_per_token, f"{self.source}; re-divided into {bytes_per_token:,} B per token"
                      + (f" ({what})" if what else ""))

    @classmethod
    def table1(cls) -> "Budget":
        """The vLLM paper's setting (Table 1, p. 9): OPT-13B on an A100-40GB with 12 GiB for KV:
        15,728 slots of 819,200 bytes (the paper's "15.7K")."""
        spec = get_model("opt-13b")
        return cls(TABLE1_KV_BYTES // spec.bytes_per_token, spec.bytes_per_token,
                   "vLLM paper Table 1 (p. 9): OPT-13B on an A100-40GB, 12 GiB for KV = 12 x 2**30 B / 819,200 B per token")
