"""What an iteration costs and how much KV fits: the simulator's two documented models.

**Cost model** (a proxy for throughput and time to first token; documented, not measured)::

    step time = overhead + max(memory, compute)
      memory  = weights / (HBM bandwidth x bw_eff) + KV of every running token / (HBM bandwidth x kv_bw_eff)
      compute = 2 x params x (decoded + prefilled tokens) / (peak FLOPs x flops_eff)
    iteration = one mixed step, or (separate prompt steps) a prompt step + a decode step

A step streams the weights and the cached K and V from HBM while the tensor cores work, so it
costs the larger of its memory time and its compute time (a roofline), not their sum: decode is
memory bound (it reads all weights once per step and every cached K and V; its 2 FLOPs per
parameter per sequence hide under that read), prefill of a long prompt is compute bound
(attention's own FLOPs are ignored). ``combine="sum"`` keeps the older additive model, which
charged decode compute on top of the weight read, for comparison.
A server that runs prompts in a step of their own (vLLM in 2023: ``separate=True``) pays the
fixed part twice in an iteration that admits requests: once for the prompt step, once for the
decode step of everyone else; an Orca-style server mixes both in one step.

Presets (``CostModel.for_model(model, gpu, preset)``), every constant with where it comes from:

- ``"kvlab"`` (the default): overhead 2 ms (kernel launches and scheduling of one step, an
  order of magnitude, not measured), ``bw_eff`` = ``kv_bw_eff`` = 0.7 (the share of peak HBM
  bandwidth a well-tuned memory-bound kernel reaches, a common rule of thumb), ``flops_eff``
  0.5; the weights in fp16 and the GPU's spec-sheet bandwidth and dense fp16 peak. For OPT-13B
  on an A100-40GB a decode step of 30 requests of 500 tokens comes to about 37 ms (2 ms + 23.6 ms
  of weights + 11.3 ms of KV; its 4.9 ms of compute hide under the reads).
- ``"vllm-2023"``: the same, except the attention kernel: the vLLM paper measured its 2023
  PagedAttention kernel at 20-26% higher latency than FasterTransformer's (Kwon et al., SOSP
  2023, Sec. 7.1 and Fig. 18a, p. 12), so ``kv_bw_eff`` = 0.7 / 1.23 = 0.57 (FasterTransformer's
  kernel taken at the 0.7 of the rest). Its scheduler's separate prompt steps are the
  ``separate`` flag, set by the ``vllm`` policy (``kvlab.sim.policies.paged``).

No constant is fitted to a published serving figure (Fig. 2, 12, 13): the reproductions show
how the results move when the iteration time is scaled (``scale``).

``span`` sums k iterations in closed form (and ``iterations_until`` bisects on it), which is what lets the
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
    37
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
        37
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
    combine: str = "max"  # "max": memory and compute overlap (a step costs the larger); "sum": the older additive model

    def __post_init__(self) -> None:
        for name in ("overhead_s", "bw_eff", "flops_eff", "scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0) or (name != "overhead_s" and v == 0):
                raise ValueError(f"{name} must be a finite number > 0 (overhead_s >= 0), got {v!r}")
        if self.combine not in ("max", "sum"):
            raise ValueError(f"combine must be 'max' or 'sum', got {self.combine!r}")
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
    def _o(self) -> float:  # per step, fixed: launches and scheduling
        return self.scale * self.overhead_s

    @cached_property
    def _w(self) -> float:  # per step: reading every weight once
        return self.scale * self.weight_bytes / (self.hbm_bandwidth * self.bw_eff)

    @cached_property
    def _c_tok(self) -> float:  # per token computed
        return self.scale * 2 * self.params / (self.peak_flops * self.flops_eff)

    @cached_property
    def _c_kv(self) -> float:  # per cached token read
        return self.scale * self.bytes_per_token / (self.hbm_bandwidth * (self.kv_bw_eff or self.bw_eff))

    def _step(self, read_s: float, tokens: float) -> float:
        """One forward pass: the overhead, then memory (``read_s``) and compute (``tokens``) overlapped
        (the larger of the two), or added up with ``combine="sum"``."""
        compute = self._c_tok * tokens
        return self._o + (max(read_s, compute) if self.combine == "max" else read_s + compute)

    def step_parts(self, decode_seqs: int, context_tokens: float, prefill_tokens: int = 0) -> dict[str, float]:
        """The parts of one mixed step (s): overhead, weight read, KV read, compute; which one bounds it.

        Example:
            >>> p = CostModel.for_model("opt-13b", "a100-40gb").step_parts(30, 15_000)
            >>> p["bound"], round(1e3 * p["weights"], 1), round(1e3 * p["kv"], 1), round(1e3 * p["compute"], 1)
            ('memory', 23.6, 11.3, 4.9)
        """
        mem, comp = self._w + self._c_kv * context_tokens, self._c_tok * (decode_seqs + prefill_tokens)
        return {"overhead": self._o, "weights": self._w, "kv": self._c_kv * context_tokens, "compute": comp,
                "bound": "memory" if mem >= comp else "compute"}

    def iteration_time(self, decode_seqs: int, context_tokens: float, prefill_tokens: int = 0,
                       separate: bool = False) -> float:
        """One iteration; ``separate``: its ``prefill_tokens`` run in a prompt step of their own
        (which reads the weights again), before the decode step of the running sequences."""
        if separate and prefill_tokens:
            return self._step(self._w, prefill_tokens) + self._step(self._w + self._c_kv * context_tokens, decode_seqs)
        return self._step(self._w + self._c_kv * context_tokens, decode_seqs + prefill_tokens)

    def _decode_sum(self, n: int, seqs: int, ctx0: float) -> float:
        """Decode steps i = 1..n with ``seqs`` sequences and ``ctx0 + seqs * i`` cached tokens, in closed form."""
        if n <= 0:
            return 0.0
        m0, g, c = self._w + self._c_kv * ctx0, self._c_kv * seqs, self._c_tok * seqs
        tri = n * (n + 1) / 2
        if self.combine != "max":
            return n * (self._o + m0 + c) + g * tri
        # memory m0 + g*i grows with i; compute c is flat: the first j steps cost c, the rest m0 + g*i
        j = n if g == 0 and m0 < c else 0 if g == 0 else min(n, max(0, math.ceil((c - m0) / g) - 1))
        return n * self._o + j * c + (n - j) * m0 + g * (tri - j * (j + 1) / 2)

    def span(self, k: int, seqs: int, ctx0: float, prefill_tokens: int, separate: bool = False) -> float:
        """Time of k iterations with ``seqs`` sequences whose context starts at ``ctx0`` tokens
        and grows by ``seqs`` per iteration; prefill only in the first one."""
        if k <= 0:
            return 0.0
        return self.iteration_time(seqs, ctx0, prefill_tokens, separate) + self._decode_sum(k - 1, seqs, ctx0)

    def iterations_until(self, dt: float, seqs: int, ctx0: float, prefill_tokens: int, separate: bool = False) -> int:
        """Smallest k >= 1 with ``span(k) >= dt`` (span grows with k: doubling, then bisection)."""
        hi = 1
        while self.span(hi, seqs, ctx0, prefill_tokens, separate) < dt:
            hi *= 2
        lo = hi // 2  # span(lo) < dt (or lo == 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.span(mid, seqs, ctx0, prefill_tokens, separate) >= dt:
                hi = mid
            else:
                lo = mid
        return max(1, hi)


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
