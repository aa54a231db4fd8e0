"""What a simulated run measured: memory breakdown, batch sizes, sharing, hits, latency proxies.

Every average is over decode **iterations** (each iteration counts once, as when a
server logs its batch every step). The memory breakdown follows the vLLM paper's
Figure 2, as fractions of the KV budget (they sum to 1):

- ``token_states``: slots holding a token of a running sequence (a shared slot once);
- ``reservation``: slots reserved for tokens a request will still produce (contiguous);
- ``internal_fragmentation``: reserved or allocated slots that will never hold a token
  (contiguous: what the length estimate reserved past the final length; paged: the unfilled
  end of each last block);
- ``rounding``: slots the allocator added to what was asked for (the buddy allocator's
  power-of-two rounding of the Orca baselines);
- ``external_fragmentation``: free slots outside the largest free range (contiguous);
- ``cached``: slots of cached prefixes no running request uses (radix, block hash);
- ``free``: the rest.

The paper's "external fragmentation & others" is ``rounding + external_fragmentation + free``
(its Orca (Oracle) bar has no internal fragmentation, so the buddy's rounding is not counted
there).
``loaded`` averages count only iterations where some request was waiting: the server
was out of memory, which is when the waste matters (and what the paper measured).

Mirrors the vLLM paper's measures (Kwon et al., SOSP 2023: Fig. 2's categories, Fig. 13's mean
batched requests, Fig. 15's sharing saving) rather than a vLLM file; SGLang's hit rate is
prompt tokens found cached / prompt tokens (``SimResult.hit_rate``).

Example:
    >>> m = RunMetrics(capacity=100)
    >>> m.add_segment(k=2, requests=1, seqs=1, token_states=30.0, held=48, will_use=None, cached=0, ext=0,
    ...               dup=0, logical=3, physical=3, loaded=False)
    >>> round(m.breakdown()["token_states"], 2), round(m.breakdown()["internal_fragmentation"], 2)
    (0.3, 0.18)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["RunMetrics", "RequestRecord", "SimResult", "format_table", "CATEGORIES"]

CATEGORIES = ("token_states", "reservation", "internal_fragmentation", "rounding", "external_fragmentation", "cached",
              "free")


@dataclass
class RunMetrics:
    """Sums over iterations (``add_segment`` adds ``k`` identical-shape iterations)."""

    capacity: int
    iterations: int = 0
    loaded_iterations: int = 0
    sum_requests: float = 0.0
    sum_seqs: float = 0.0
    max_requests: int = 0
    sums: dict = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    loaded_sums: dict = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    sum_logical_blocks: float = 0.0
    sum_physical_blocks: float = 0.0
    sum_loaded_requests: float = 0.0
    max_token_states: float = 0.0
    max_internal_per_seq: float = 0.0  # paged: the worst iteration's (unfilled slots / sequences)
    prompt_steps: int = 0  # separate prompt steps (vLLM 2023), not counted in ``iterations``
    sum_prompt_requests: int = 0  # requests those prompt steps ran

    def add_segment(self, k: int, requests: int, seqs: int, token_states: float, held: int, will_use: int | None,
                    cached: int, ext: int, dup: int, logical: int, physical: int, loaded: bool,
                    requested: int | None = None) -> None:
        """``token_states``: the mean over the k iterations (logical: shared slots counted per user);
        ``requested``: the slots the reservations asked for before the allocator rounded them
        (None: no rounding, ``held``)."""
        ts = token_states - dup
        rounding = 0 if requested is None else held - requested
        if will_use is None:
            res, internal = 0.0, held - rounding - ts
        else:
            res, internal = will_use - ts, held - rounding - will_use
        free = self.capacity - held - cached - ext
        if seqs:
            first = internal + (seqs * (k - 1) / 2 if will_use is None else 0)  # largest at the segment's start
            self.max_internal_per_seq = max(self.max_internal_per_seq, first / seqs)
            self.max_token_states = max(self.max_token_states, ts + seqs * (k - 1) / 2)
        self.iterations += k
        self.sum_requests += requests * k
        self.sum_seqs += seqs * k
        self.max_requests = max(self.max_requests, requests)
        if loaded:
            self.loaded_iterations += k
            self.sum_loaded_requests += requests * k
        for sums in (self.sums, self.loaded_sums) if loaded else (self.sums,):  # CATEGORIES, spelled out (hot)
            sums["token_states"] += ts * k
            sums["reservation"] += res * k
            sums["internal_fragmentation"] += internal * k
            sums["rounding"] += rounding * k
            sums["external_fragmentation"] += ext * k
            sums["cached"] += cached * k
            sums["free"] += free * k
        self.sum_logical_blocks += logical * k
        self.sum_physical_blocks += physical * k

    def breakdown(self, loaded: bool = False) -> dict[str, float]:
        """Fractions of the budget per category (loaded iterations only, when asked and any)."""
        if loaded and self.loaded_iterations:
            n, s = self.loaded_iterations, self.loaded_sums
        else:
            n, s = self.iterations, self.sums
        if n == 0:
            return dict.fromkeys(CATEGORIES, 0.0)
        return {c: s[c] / n / self.capacity for c in CATEGORIES}

    @property
    def mean_batch(self) -> float:
        return self.sum_requests / self.iterations if self.iterations else 0.0

    @property
    def mean_batch_per_step(self) -> float:
        """Requests per model execution when a separate prompt step counts as a step of its own,
        with only its new requests in it (equal to ``mean_batch`` without separate prompt steps)."""
        n = self.iterations + self.prompt_steps
        return (self.sum_requests + self.sum_prompt_requests) / n if n else 0.0

    @property
    def mean_loaded_batch(self) -> float:
        return self.sum_loaded_requests / self.loaded_iterations if self.loaded_iterations else self.mean_batch

    @property
    def mean_blocks_saved(self) -> float:
        """Blocks saved by sharing (fork, or a prefix cache shared by running requests), per iteration."""
        return (self.sum_logical_blocks - self.sum_physical_blocks) / self.iterations if self.iterations else 0.0

    @property
    def sharing_saving(self) -> float:
        """Blocks saved by sharing / blocks needed without sharing (the vLLM paper's Fig. 15 measure)."""
        if self.sum_logical_blocks == 0:
            return 0.0
        return 1.0 - self.sum_physical_blocks / self.sum_logical_blocks


@dataclass(frozen=True, slots=True)
class RequestRecord:
    req_id: int
    release: float  # when it could start (arrival, or its parent turn's finish + think time)
    first_token: float
    finish: float
    prompt_len: int
    output_len: int
    hit_tokens: int  # prompt tokens found cached at its first admission
    preemptions: int

    @property
    def ttft(self) -> float:
        return self.first_token - self.release

    @property
    def latency(self) -> float:
        return self.finish - self.release


@dataclass
class SimResult:
    """Everything one ``simulate`` run measured. ``timeline``: sampled rows (time, iteration,
    requests running, waiting, then the categories in slots) for plots."""

    policy: str
    trace: str
    order: str
    capacity: int
    block_size: int
    metrics: RunMetrics
    records: list
    duration: float  # simulated seconds until the last request finished
    preemptions: int
    prompt_tokens: int  # prompt tokens over all admissions (recomputation included)
    hit_tokens: int
    prefill_tokens: int  # computed (prompt tokens - hits)
    output_tokens: int
    bytes_copied: int
    timeline: list
    wall_seconds: float
    params: dict = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        return len(self.records)

    @property
    def mean_batch(self) -> float:
        return self.metrics.mean_batch

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per simulated second (a proxy: see the cost model)."""
        return self.output_tokens / self.duration if self.duration > 0 else math.inf

    @property
    def request_throughput(self) -> float:
        return self.num_requests / self.duration if self.duration > 0 else math.inf

    def ttft(self, q: float = 50) -> float:
        return float(np.percentile([r.ttft for r in self.records], q)) if self.records else 0.0

    def mean_latency_per_token(self) -> float:
        """The vLLM paper's normalized latency: mean of (end-to-end latency / output length)."""
        return float(np.mean([r.latency / r.output_len for r in self.records])) if self.records else 0.0

    def breakdown(self, loaded: bool = True) -> dict[str, float]:
        return self.metrics.breakdown(loaded)

    def timeline_rows(self) -> list[dict]:
        """The sampled timeline as dicts: time (s), iteration, running and waiting requests,
        the categories in slots (at the end of that iteration) and blocks saved by sharing."""
        out = []
        for t, it, run, wait, ts, held, will_use, cached, ext, saved, requested in self.timeline:
            rounding = 0 if requested is None else held - requested
            if will_use is None:
                res, internal = 0, held - rounding - ts
            else:
                res, internal = will_use - ts, held - rounding - will_use
            out.append({"time": t, "iteration": it, "running": run, "waiting": wait, "token_states": ts,
                        "reservation": res, "internal_fragmentation": internal, "rounding": rounding,
                        "external_fragmentation": ext, "cached": cached, "free": self.capacity - held - cached - ext,
                        "blocks_saved": saved})
        return out

    def summary(self, loaded: bool = True) -> dict:
        b = self.breakdown(loaded)
        return {
            "policy": self.policy, "order": self.order, "requests": self.num_requests,
            "mean_batch": self.metrics.mean_batch, "max_batch": self.metrics.max_requests,
            "token_states": b["token_states"], "reservation": b["reservation"],
            "internal_frag": b["internal_fragmentation"], "rounding": b["rounding"],
            "external_frag": b["external_fragmentation"],
            "cached": b["cached"], "free": b["free"],
            "ext_others": b["rounding"] + b["external_fragmentation"] + b["free"],
            "sharing_saving": self.metrics.sharing_saving,
            "blocks_saved": self.metrics.mean_blocks_saved,
            "hit_rate": self.hit_rate, "prefill_saved": self.hit_tokens, "preemptions": self.preemptions,
            "throughput_tok_s": self.throughput, "ttft_p50_s": self.ttft(50), "ttft_p99_s": self.ttft(99),
            "duration_s": self.duration, "wall_s": self.wall_seconds,
        }


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def format_table(rows: list[dict], columns: list[str] | None = None, percent: tuple[str, ...] = ()) -> str:
    """Rows of dicts as an aligned text table; columns in ``percent`` print as percentages.

    Example:
        >>> print(format_table([{"policy": "paged", "token_states": 0.963}], percent=("token_states",)))
        policy  token_states
        paged          96.3%
    """
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    cells = [[c for c in columns]]
    for r in rows:
        cells.append([f"{100 * r[c]:.1f}%" if c in percent and isinstance(r.get(c), (int, float)) else _fmt(r.get(c, ""))
                      for c in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, len(columns))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
