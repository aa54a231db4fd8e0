"""Request traces for the simulator: who arrives when, with how many tokens in and out.

Every generator is seeded (``numpy.random.default_rng(seed)``) and returns a
:class:`Trace`, a list of :class:`TraceRequest` sorted by arrival time.

Arrivals are a Poisson process: exponential gaps with mean ``1 / rate`` seconds
(``rate=math.inf`` puts every request at time 0, a saturated server).

Lengths. The vLLM paper publishes only the means (and histograms) of its two traces:
ShareGPT, mean input 161.31 and mean output 337.99 tokens; Alpaca, 19.31 and 58.45.
We draw input and output lengths independently from **log-normal** distributions
(the family that fits the long right tails of chat lengths), drop pairs as vLLM's
benchmark does (input or output under 4 tokens, input + output over ``max_len``), and
calibrate each log-normal's ``mu`` so that the means *after* that filter match the
published means. The shapes (``sigma``: 1.0 and 0.85 for ShareGPT, 0.7 and 0.8 for Alpaca)
are our choice, not published figures (and not fitted to any published result). ``shape``
gives the sensitivity rows: ``"gamma"`` (a gamma law with the log-normal's coefficient of
variation, a lighter tail) and ``"wide"`` (log-normal with ``sigma + 0.3``, a heavier tail),
each calibrated to the same means.

Requests that share prefixes (system prompts, few-shot examples, multi-turn chats)
carry token ids, so the radix tree and the block-hash cache can match them; ids are
unique integers from a counter, so two requests share tokens only where the workload
says they do. Plain traces carry no ids (``prompt is None``): they never share.

Not handled: real text or tokenizers, output lengths that depend on the prompt,
bursty (non-Poisson) arrivals.

Mirrors vLLM's ``benchmarks/benchmark_serving.py`` (ShareGPT sampling with its length filter,
Poisson arrivals) and the vLLM paper's Sec. 6.1 traces; the prefix-sharing workloads follow
the SGLang paper's benchmarks (few-shot, multi-turn chat).

Example:
    >>> t = sharegpt(1000, rate=2.0, seed=0)
    >>> len(t), t.requests[0].arrival <= t.requests[-1].arrival
    (1000, True)
    >>> 140 < t.mean_prompt_len < 185 and 300 < t.mean_output_len < 380
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np

from ..memory.ids import check_int

__all__ = [
    "TraceRequest", "Trace", "sharegpt", "alpaca", "long_documents", "multi_turn", "shared_prefix",
    "few_shot", "scenario", "parallel_sampling", "beam_search", "poisson_arrivals", "optimal_hit_rate", "WORKLOADS",
    "LENGTH_STATS", "SHAPES", "synthetic",
]

# Published means (vLLM paper, Sec. 6.1 / Fig. 11) and our log-normal shapes.
LENGTH_STATS: dict[str, dict[str, float]] = {
    "sharegpt": {"mean_in": 161.31, "mean_out": 337.99, "sigma_in": 1.0, "sigma_out": 0.85},
    "alpaca": {"mean_in": 19.31, "mean_out": 58.45, "sigma_in": 0.7, "sigma_out": 0.8},
}
MIN_LEN = 4  # vLLM's benchmark drops prompts or outputs shorter than this
SHAPES = ("lognormal", "gamma", "wide")  # length families (see the module docstring)


@dataclass(slots=True)
class TraceRequest:
    """One request of a trace (the simulator's input; its running state is ``SimRequest``).

    prompt_len, output_len: tokens in and out. ``prompt``: token ids when the request
    may share a prefix with others (else None). ``output``: the ids it will generate
    (needed when a later turn of the same chat reuses them). ``n``: parallel samples
    (n outputs of one prompt); ``beam_width``: beam search width. ``parent``: index of
    the earlier turn this request follows (multi-turn); it is released ``think_time``
    seconds after that turn finishes, or at ``arrival``, whichever is later.
    """

    req_id: int
    arrival: float
    prompt_len: int
    output_len: int
    prompt: tuple[int, ...] | None = None
    output: tuple[int, ...] | None = None
    n: int = 1
    beam_width: int = 1
    parent: int | None = None
    think_time: float = 0.0
    tag: str = ""

    @property
    def num_seqs(self) -> int:
        return max(self.n, self.beam_width)

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len




@dataclass
class Trace:
    """A workload: requests sorted by arrival, plus how it was made."""

    name: str
    requests: list[TraceRequest]
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(self.requests)

    @property
    def mean_prompt_len(self) -> float:
        return float(np.mean([r.prompt_len for r in self.requests])) if self.requests else 0.0

    @property
    def mean_output_len(self) -> float:
        return float(np.mean([r.output_len for r in self.requests])) if self.requests else 0.0

    @property
    def max_total_len(self) -> int:
        return max((r.total_len for r in self.requests), default=0)

    @property
    def has_tokens(self) -> bool:
        return any(r.prompt is not None for r in self.requests)

    def summary(self) -> str:
        return (f"{self.name}: {len(self)} requests, mean input {self.mean_prompt_len:.1f}, "
                f"mean output {self.mean_output_len:.1f}, longest {self.max_total_len} tokens")


def _check_common(num: int, rate: float, what: str = "num_requests") -> None:  # helpers from here on
    check_int(what, num, 1)
    if not isinstance(rate, (int, float)) or math.isnan(rate) or rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s (math.inf: all at once), got {rate!r}")


def poisson_arrivals(num: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of a Poisson process with ``rate`` requests/s; inf -> all at 0."""
    _check_common(num, rate, "num")
    if math.isinf(rate):
        return np.zeros(num)
    return np.cumsum(rng.exponential(1.0 / rate, size=num))


def _draw(rng: np.random.Generator, shape: str, loc: float, sigma: float, m: int) -> np.ndarray:
    """``m`` lengths of one family; ``loc`` is on the log scale (log-normal ``mu``, gamma log-scale)."""
    if shape == "gamma":
        k = 1.0 / math.expm1(sigma**2)  # the log-normal's coefficient of variation
        return np.rint(rng.gamma(k, math.exp(loc), m)).astype(np.int64)
    return np.rint(rng.lognormal(loc, sigma + (0.3 if shape == "wide" else 0.0), m)).astype(np.int64)


def _filtered_pairs(rng: np.random.Generator, n: int, mu_in: float, s_in: float, mu_out: float, s_out: float,
                    max_len: int, max_in: int | None = None, shape: str = "lognormal") -> tuple[np.ndarray, np.ndarray]:
    """``n`` (input, output) pairs drawn from ``shape`` and filtered as vLLM's benchmark does."""
    ins, outs, have = [], [], 0
    while have < n:
        m = max(64, int((n - have) * 1.3))
        a = _draw(rng, shape, mu_in, s_in, m)
        b = _draw(rng, shape, mu_out, s_out, m)
        ok = (a >= MIN_LEN) & (b >= MIN_LEN) & (a + b <= max_len)
        if max_in is not None:
            ok &= a <= max_in
        ins.append(a[ok])
        outs.append(b[ok])
        have += int(ok.sum())
    return np.concatenate(ins)[:n], np.concatenate(outs)[:n]


def _start_loc(shape: str, mean: float, sigma: float) -> float:  # gamma: theta = mean / k
    return math.log(mean * math.expm1(sigma**2)) if shape == "gamma" else \
        math.log(mean) - (sigma + (0.3 if shape == "wide" else 0.0))**2 / 2


@lru_cache(maxsize=64)
def _calibrated_mus(mean_in: float, mean_out: float, s_in: float, s_out: float, max_len: int,
                    shape: str = "lognormal") -> tuple[float, float]:
    """The log-scale location of each length law so that the filtered means equal the targets.

    Fixed-point iteration on a fixed calibration sample (seed 12345, 100,000 pairs), so
    the result is deterministic and does not depend on the caller's seed.
    """
    mu_in, mu_out = _start_loc(shape, mean_in, s_in), _start_loc(shape, mean_out, s_out)
    for _ in range(8):
        a, b = _filtered_pairs(np.random.default_rng(12345), 100_000, mu_in, s_in, mu_out, s_out, max_len, shape=shape)
        mu_in += math.log(mean_in / a.mean())
        mu_out += math.log(mean_out / b.mean())
    return mu_in, mu_out


def synthetic(num_requests: int, rate: float, seed: int, mean_in: float, mean_out: float, shape: str = "lognormal",
              sigma_in: float = 1.0, sigma_out: float = 0.85, max_len: int = 2048, name: str = "synthetic") -> Trace:
    """Independent input and output lengths of one family (``shape``, :data:`SHAPES`), filtered
    as vLLM's benchmark does and calibrated so the filtered means are ``mean_in`` and ``mean_out``.

    Example:
        >>> t = synthetic(2000, 2.0, 0, mean_in=50, mean_out=100, shape="gamma")
        >>> 45 < t.mean_prompt_len < 55 and 90 < t.mean_output_len < 110
        True
    """
    _check_common(num_requests, rate)
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of: {', '.join(SHAPES)}")
    if max_len < 2 * MIN_LEN:
        raise ValueError(f"max_len must be >= {2 * MIN_LEN}, got {max_len}")
    if not (MIN_LEN <= mean_in and MIN_LEN <= mean_out and mean_in + mean_out < max_len):
        raise ValueError(f"means {mean_in} and {mean_out} must be >= {MIN_LEN} with a sum below max_len {max_len}")
    mu_in, mu_out = _calibrated_mus(mean_in, mean_out, sigma_in, sigma_out, max_len, shape)
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(num_requests, rate, rng)
    ins, outs = _filtered_pairs(rng, num_requests, mu_in, sigma_in, mu_out, sigma_out, max_len, shape=shape)
    reqs = [TraceRequest(i, float(arrivals[i]), int(ins[i]), int(outs[i]), tag=name) for i in range(num_requests)]
    return Trace(name, reqs, {"num_requests": num_requests, "rate": rate, "seed": seed, "max_len": max_len,
                              "family": shape, "mean_in": mean_in, "mean_out": mean_out, "sigma_in": sigma_in,
                              "sigma_out": sigma_out})


def _length_trace(name: str, num: int, rate: float, seed: int, max_len: int, shape: str = "lognormal") -> Trace:
    s = LENGTH_STATS[name]
    return synthetic(num, rate, seed, s["mean_in"], s["mean_out"], shape, s["sigma_in"], s["sigma_out"], max_len, name)


# --------------------------------------------------------------------------- workloads
def sharegpt(num_requests: int = 1000, rate: float = 2.0, seed: int = 0, max_len: int = 2048,
             shape: str = "lognormal") -> Trace:
    """ShareGPT-like chats: mean input 161.31, mean output 337.99 tokens (after the filter).

    ``max_len``: the model's context (2048 for OPT, as in the vLLM paper); ``shape``: the
    length family (:data:`SHAPES`).
    """
    return _length_trace("sharegpt", num_requests, rate, seed, max_len, shape)


def alpaca(num_requests: int = 1000, rate: float = 30.0, seed: int = 0, max_len: int = 2048,
           shape: str = "lognormal") -> Trace:
    """Alpaca-like instructions: mean input 19.31, mean output 58.45 tokens."""
    return _length_trace("alpaca", num_requests, rate, seed, max_len, shape)


class _Ids:
    """Unique token ids: ``take(n)`` never returns an id twice."""

    def __init__(self, start: int = 1000) -> None:
        self.next = start

    def take(self, n: int) -> tuple[int, ...]:
        out = tuple(range(self.next, self.next + n))
        self.next += n
        return out


def _lognormal_ints(rng: np.random.Generator, mean: float, sigma: float, size: int, lo: int, hi: int) -> np.ndarray:
    mu = math.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, size)), lo, hi).astype(np.int64)


def long_documents(num_requests: int = 200, rate: float = 0.5, seed: int = 0, doc_mean: int = 6000,
                   output_mean: int = 300, max_len: int = 32768) -> Trace:
    """Long-document requests (summarise or ask about a document): long inputs, short outputs.

    Inputs log-normal with mean ``doc_mean`` (sigma 0.5), outputs mean ``output_mean``
    (sigma 0.6), both clipped so that input + output <= ``max_len``. No shared tokens.
    """
    _check_common(num_requests, rate)
    rng = np.random.default_rng(seed)
    arr = poisson_arrivals(num_requests, rate, rng)
    outs = _lognormal_ints(rng, output_mean, 0.6, num_requests, MIN_LEN, max_len // 4)
    ins = _lognormal_ints(rng, doc_mean, 0.5, num_requests, MIN_LEN, max_len)
    ins = np.minimum(ins, max_len - outs)
    reqs = [TraceRequest(i, float(arr[i]), int(ins[i]), int(outs[i]), tag="document") for i in range(num_requests)]
    return Trace("long_documents", reqs, {"num_requests": num_requests, "rate": rate, "seed": seed,
                                          "doc_mean": doc_mean, "output_mean": output_mean, "max_len": max_len})


def shared_prefix(num_requests: int = 500, rate: float = 4.0, seed: int = 0, num_prefixes: int = 4,
                  prefix_len: int = 800, question_mean: int = 60, output_mean: int = 120,
                  zipf: float = 0.0, max_len: int = 4096, name: str = "shared_prefix") -> Trace:
    """Requests that start with one of ``num_prefixes`` shared prefixes (system prompts).

    Each request = one prefix (chosen uniformly, or Zipf-like with exponent ``zipf`` > 0)
    + its own question (log-normal, mean ``question_mean``) and generates ``output_mean``
    tokens on average. The source notes' customer-service example at scale.
    """
    _check_common(num_requests, rate)
    if num_prefixes < 1 or prefix_len < 1:
        raise ValueError(f"num_prefixes and prefix_len must be >= 1, got {num_prefixes}, {prefix_len}")
    rng = np.random.default_rng(seed)
    ids = _Ids()
    prefixes = [ids.take(prefix_len) for _ in range(num_prefixes)]
    w = 1.0 / np.arange(1, num_prefixes + 1) ** zipf
    which = rng.choice(num_prefixes, size=num_requests, p=w / w.sum())
    arr = poisson_arrivals(num_requests, rate, rng)
    room = max(2 * MIN_LEN, max_len - prefix_len)
    qs = _lognormal_ints(rng, question_mean, 0.5, num_requests, 1, room // 2)
    outs = _lognormal_ints(rng, output_mean, 0.7, num_requests, MIN_LEN, room // 2)
    reqs = []
    for i in range(num_requests):
        prompt = prefixes[which[i]] + ids.take(int(qs[i]))
        reqs.append(TraceRequest(i, float(arr[i]), len(prompt), int(outs[i]), prompt, ids.take(int(outs[i])),
                            tag=f"prefix{which[i]}"))
    return Trace(name, reqs, {"num_requests": num_requests, "rate": rate, "seed": seed, "num_prefixes": num_prefixes,
                              "prefix_len": prefix_len, "question_mean": question_mean, "output_mean": output_mean})


def few_shot(num_requests: int = 500, rate: float = 8.0, seed: int = 0, num_subjects: int = 8,
             shots_len: int = 600, question_mean: int = 60, output_mean: int = 8) -> Trace:
    """Few-shot benchmarks (MMLU 5-shot-like): per subject one few-shot preamble of
    ``shots_len`` tokens, then a question; outputs are short answers."""
    t = shared_prefix(num_requests, rate, seed, num_subjects, shots_len, question_mean, output_mean,
                      max_len=shots_len + 8 * (question_mean + output_mean), name="few_shot")
    t.params.update(num_subjects=num_subjects, shots_len=shots_len)
    return t


def multi_turn(num_sessions: int = 50, turns: int = 4, rate: float = 1.0, seed: int = 0, system_len: int = 200,
               user_mean: int = 60, output_mean: int = 150, think_time: float = 5.0,
               shared_system: bool = True) -> Trace:
    """Multi-turn chats: turn t's prompt = turn t-1's prompt + its answer + a new user message.

    Sessions start as a Poisson process (``rate`` sessions/s); each later turn is released
    ``think_time`` seconds after the previous turn of its session finishes (``parent``).
    With ``shared_system`` every session starts with one common system prompt.
    Example: the notes' R1 then R4 ("人工呢") is a 2-turn session.
    """
    _check_common(num_sessions, rate, "num_sessions")
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    rng = np.random.default_rng(seed)
    ids = _Ids()
    system = ids.take(system_len) if shared_system else ()
    starts = poisson_arrivals(num_sessions, rate, rng)
    users = _lognormal_ints(rng, user_mean, 0.6, num_sessions * turns, 1, 8 * user_mean)
    outs = _lognormal_ints(rng, output_mean, 0.7, num_sessions * turns, MIN_LEN, 8 * output_mean)
    reqs: list[TraceRequest] = []
    for s in range(num_sessions):
        history: tuple[int, ...] = system if shared_system else ids.take(system_len)
        parent = None
        for t in range(turns):
            k = s * turns + t
            prompt = history + ids.take(int(users[k]))
            out = ids.take(int(outs[k]))
            reqs.append(TraceRequest(-1, float(starts[s]), len(prompt), len(out), prompt, out, parent=parent,
                                think_time=think_time if parent is not None else 0.0, tag=f"s{s}t{t}"))
            parent = k
            history = prompt + out
    # ids = index in the list (parents refer to indices); order: by arrival then session
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival, i))
    new_index = {old: new for new, old in enumerate(order)}
    out_reqs = []
    for new, old in enumerate(order):
        r = reqs[old]
        out_reqs.append(replace(r, req_id=new, parent=None if r.parent is None else new_index[r.parent]))
    return Trace("multi_turn", out_reqs, {"num_sessions": num_sessions, "turns": turns, "rate": rate, "seed": seed,
                                          "system_len": system_len, "user_mean": user_mean,
                                          "output_mean": output_mean, "think_time": think_time})


def parallel_sampling(trace: Trace, n: int) -> Trace:
    """The same requests, each asking for ``n`` outputs of its prompt (all of its length)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return Trace(f"{trace.name}+n{n}", [replace(r, n=n) for r in trace.requests], {**trace.params, "n": n})


def beam_search(trace: Trace, width: int) -> Trace:
    """The same requests, each decoded by beam search of ``width`` beams."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    return Trace(f"{trace.name}+beam{width}", [replace(r, beam_width=width) for r in trace.requests],
                 {**trace.params, "beam_width": width})


WORKLOADS = {
    "sharegpt": sharegpt,
    "alpaca": alpaca,
    "long_documents": long_documents,
    "multi_turn": multi_turn,
    "shared_prefix": shared_prefix,
    "few_shot": few_shot,
}


def scenario(name: str, num_requests: int = 500, rate: float = math.inf, seed: int = 0) -> Trace:
    """The source notes' scenario table, one trace each: ``short_chat`` (Alpaca-like),
    ``long_documents``, ``high_concurrency`` (ShareGPT-like, all at once), ``multi_turn``,
    ``shared_prefix``."""
    if name == "short_chat":
        return alpaca(num_requests, rate, seed)
    if name == "long_documents":
        return long_documents(num_requests, rate, seed, doc_mean=1200, output_mean=150, max_len=2048)
    if name == "high_concurrency":
        return sharegpt(num_requests, math.inf, seed)
    if name == "multi_turn":
        return multi_turn(max(1, num_requests // 4), 4, rate, seed, output_mean=120, think_time=1.0)
    if name == "shared_prefix":
        return shared_prefix(num_requests, rate, seed, num_prefixes=4, prefix_len=600, max_len=2048)
    raise ValueError(f"unknown scenario {name!r}; choose one of: short_chat, long_documents, high_concurrency, "
                     f"multi_turn, shared_prefix")


# ------------------------------------------------------------------ optimal hit rate
def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(np.argmax(x)) if x.any() else n


def _trie_size(seqs: Iterable[tuple[int, ...]]) -> int:
    """Number of distinct non-empty prefixes (nodes of a token trie) of ``seqs``."""
    s = sorted(set(seqs))
    total, prev = 0, ()
    for q in s:
        total += len(q) - _lcp(prev, q)
        prev = q
    return total


def optimal_hit_rate(trace: Trace) -> float:
    """The best prefix hit rate any cache and order could reach (infinite memory).

    Every distinct prompt prefix must be computed once, by prefill or (for a later turn
    that repeats an answer) by decoding. So the minimum prefill is
    ``|trie(prompts and prompt+output sequences)| - total output tokens``, and
    ``optimal = 1 - minimum prefill / total prompt tokens`` (SGLang's "optimal hit rate").
    Requests without token ids never hit.

    Example: two requests with one 8-token system prompt and 2 own tokens each:
        >>> a = TraceRequest(0, 0.0, 10, 2, tuple(range(10)), (100, 101))
        >>> b = TraceRequest(1, 0.0, 10, 2, tuple(range(8)) + (50, 51), (102, 103))
        >>> optimal_hit_rate(Trace("t", [a, b]))    # 8 of 20 prompt tokens reusable
        0.4
    """
    prompts = [r.prompt for r in trace.requests if r.prompt is not None]
    total = sum(r.prompt_len for r in trace.requests)
    if not prompts or total == 0:
        return 0.0
    seqs = prompts + [r.prompt + (r.output or ()) for r in trace.requests if r.prompt is not None]
    decoded = sum(len(r.output or ()) for r in trace.requests if r.prompt is not None)
    no_ids = sum(r.prompt_len for r in trace.requests if r.prompt is None)
    min_prefill = _trie_size(seqs) - decoded + no_ids
    return 1.0 - min_prefill / total
