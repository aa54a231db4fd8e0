"""What a request asks for, one sample's state while it runs, and what was measured: kept apart.

    SamplingParams(max_new_tokens, n=1, temperature=0.0, seed=0,   how to sample (checked)
                   top_p=1.0, stop_token_ids=())
    Request(rid, prompt_ids, sampling_params, arrival_step=0)      what was asked: inputs only
    Sequence(seq_id, request, index)                               one sample while it runs
    RequestMetrics()                                               what the engine measured
    RequestState.new(request)                                      the handle ``Engine.submit`` returns:
                                                                   request + its samples + metrics

A request with ``n`` samples has ``n`` sequences (``seq_id`` is the request id when ``n == 1``,
else ``"R1.0"``, ``"R1.1"``...). Each holds its generated ``output_ids``, ``num_computed_tokens``
(tokens whose K/V are in the cache), its ``status`` and its own ``torch.Generator`` (seeded
``seed + index``, so sample ``i`` draws the same noise wherever it runs)::

    WAITING --admit--> RUNNING --last token--> FINISHED    (finish_reason "length": max_new_tokens,
       ^                  |                                  "stop": a token of stop_token_ids,
       +----preempt-------+                                  "abort": Engine.abort)
                   (its blocks are freed; it is recomputed when admitted again)

A sample ends at its ``max_new_tokens``-th token or at the first token of ``stop_token_ids``
(the model's end-of-turn / EOS ids; the stop token is kept as the last output id, as vLLM keeps it).

While it runs, ``block_table`` is the :class:`~kvlab.memory.block_table.BlockTable` the cache
manager keeps for it: the sequence reads it, only the BlockManager changes it.

Every argument is checked once, here: ids and counts follow :mod:`kvlab.memory.ids` (Python ints,
numpy integers converted, ``bool``, floats, strings and ``None`` refused with a TypeError that
names the value); a value out of range raises :class:`GenerateError` (a ValueError).

Mirrors nano-vllm ``nanovllm/engine/sequence.py`` (``Sequence``, ``SequenceStatus``) and
``nanovllm/sampling_params.py``, and vLLM v0 ``vllm/sequence.py`` (``SequenceGroup``,
``RequestMetrics``). Names that differ: nano-vllm's ``max_tokens`` is ``max_new_tokens``,
``num_cached_tokens`` is ``num_computed_tokens`` (vLLM v1's name), ``completion_token_ids`` is
``output_ids``; vLLM's ``SequenceGroup`` is ``RequestState``; ``n`` and ``seed`` are vLLM's.

Not handled here: stop strings (text: the server's detokenizer finds them and aborts the
request, as vLLM's output processor does), top-k, priorities.

Example:
    >>> params = SamplingParams(max_new_tokens=2, n=2, temperature=0.8, seed=7)
    >>> state = RequestState.new(Request("R1", [5, 6, 7], params))
    >>> [s.seq_id for s in state.seqs], state.outputs
    (['R1.0', 'R1.1'], [[], []])
    >>> s = state.seqs[1]
    >>> s.append_token(9); s.token_ids, s.is_finished
    ([5, 6, 7, 9], False)
    >>> SamplingParams(4, temperature=float("nan"))
    Traceback (most recent call last):
    ...
    kvlab.compute.sequence.GenerateError: temperature must be a finite number >= 0, got nan
    >>> Request("R2", [5, 7.2], params)
    Traceback (most recent call last):
    ...
    TypeError: prompt_ids[1] = 7.2 is not an int (float)
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

import torch

from ..memory.block_table import BlockTable
from ..memory.ids import as_ids, check_int
from ..reuse.radix_cache import RadixKey

__all__ = ["GenerateError", "EmptyPromptError", "ContextOverflowError", "SamplingParams", "Request",
           "SequenceStatus", "Sequence", "sequences_for", "RequestMetrics", "RequestState"]


class GenerateError(ValueError):
    """A bad value for a request (``generate()`` or ``Engine.submit``); nothing was allocated or queued."""


class EmptyPromptError(GenerateError):
    pass


class ContextOverflowError(GenerateError):
    pass


def _count(name: str, value: Any, minimum: int) -> int:
    """An int (TypeError otherwise) that is >= ``minimum`` (GenerateError otherwise)."""
    value = check_int(name, value)
    if value < minimum:
        raise GenerateError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def _temperature(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"temperature must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise GenerateError(f"temperature must be a finite number >= 0, got {value}")
    return value


def _top_p(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"top_p must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not 0 < value <= 1:                                # also refuses nan
        raise GenerateError(f"top_p must be in (0, 1], got {value}")
    return value


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``max_new_tokens`` per sample (>= 0), ``n`` samples (>= 1), ``temperature``
    (0 = greedy; finite, >= 0), ``seed`` (sample ``i`` uses ``seed + i``), ``top_p`` (nucleus
    sampling: the smallest set of tokens holding ``top_p`` of the probability; 1 = all) and
    ``stop_token_ids`` (a sample ends at the first of them it generates; a tuple of ids)."""

    max_new_tokens: int
    n: int = 1
    temperature: float = 0.0
    seed: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(self.stop_token_ids, "__iter__"):
            raise TypeError(f"stop_token_ids must be a sequence of int token ids, got {self.stop_token_ids!r:.60}")
        try:
            stops = tuple(as_ids(self.stop_token_ids, "stop_token_ids"))
        except ValueError as e:                           # a negative id
            raise GenerateError(str(e)) from None
        checked = {"max_new_tokens": _count("max_new_tokens", self.max_new_tokens, 0),
                   "n": _count("n", self.n, 1), "temperature": _temperature(self.temperature),
                   "seed": check_int("seed", self.seed), "top_p": _top_p(self.top_p), "stop_token_ids": stops}
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def _prompt(prompt_ids: Any) -> RadixKey:
    """Token ids as a :class:`~kvlab.reuse.radix_cache.RadixKey` (a list of Python ints, checked
    once: the cache manager admits it without checking it again); a 1-D integer tensor or array
    is accepted."""
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.flatten().tolist()
    if isinstance(prompt_ids, (str, bytes)) or not hasattr(prompt_ids, "__iter__"):
        raise TypeError(f"prompt_ids must be a sequence of int token ids, got {prompt_ids!r:.60}")
    try:
        ids = RadixKey(prompt_ids, "prompt_ids")
    except ValueError as e:                               # a negative id
        raise GenerateError(str(e)) from None
    if not ids:
        raise EmptyPromptError("prompt_ids is empty: a prompt needs at least one token")
    return ids


@dataclass(frozen=True)
class Request:
    """The inputs of one request: its id, prompt token ids, sampling parameters and the engine
    step at which it arrives. Checked on construction; :meth:`check_model` checks it against a
    model's vocabulary and context length."""

    rid: str
    prompt_ids: RadixKey
    sampling_params: SamplingParams
    arrival_step: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.rid, str):
            raise TypeError(f"rid must be a str, got {self.rid!r} ({type(self.rid).__name__})")
        if not isinstance(self.sampling_params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {self.sampling_params!r}")
        object.__setattr__(self, "prompt_ids", _prompt(self.prompt_ids))
        object.__setattr__(self, "arrival_step", _count("arrival_step", self.arrival_step, 0))

    def check_model(self, config: Any) -> None:
        """Token ids in ``[0, config.vocab_size)``; prompt + max_new_tokens within
        ``config.max_position_embeddings``. Raises GenerateError / ContextOverflowError."""
        V, ctx = config.vocab_size, config.max_position_embeddings
        bad = [t for t in self.prompt_ids if t >= V]
        if bad:
            raise GenerateError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {V})")
        bad = [t for t in self.sampling_params.stop_token_ids if t >= V]
        if bad:
            raise GenerateError(f"stop_token_ids {bad[:5]} are outside the vocabulary [0, {V})")
        P, M = len(self.prompt_ids), self.sampling_params.max_new_tokens
        if P > ctx:
            raise ContextOverflowError(f"prompt has {P} tokens, longer than the model's context of {ctx}")
        if P + M > ctx:
            raise ContextOverflowError(f"prompt ({P}) + max_new_tokens ({M}) exceeds the model's context of {ctx}")


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One sample of a request while it is served (compared by identity)."""

    seq_id: str
    request: Request
    index: int = 0
    output_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0                       # tokens whose K/V are in the cache
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: BlockTable | None = field(default=None, repr=False)   # read-only; set while RUNNING
    finish_reason: str | None = None                   # once FINISHED: "length", "stop" or "abort"
    generator: torch.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.request.sampling_params.seed + self.index)

    @property
    def token_ids(self) -> list[int]:
        """Prompt + generated tokens (a new list)."""
        return self.request.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt_ids) + len(self.output_ids)

    @property
    def last_token_id(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.request.prompt_ids[-1]

    @property
    def temperature(self) -> float:
        return self.request.sampling_params.temperature

    @property
    def top_p(self) -> float:
        return self.request.sampling_params.top_p

    @property
    def is_finished(self) -> bool:
        """True once it holds ``max_new_tokens`` generated tokens or its last is a stop token."""
        return self.stop_reason() is not None

    def stop_reason(self) -> str | None:
        """Why its generated tokens are complete: "stop" (its last is a stop token), "length"
        (it has ``max_new_tokens``), or None. Example: stop ids (2,), outputs [5, 2] -> "stop"."""
        p = self.request.sampling_params
        if self.output_ids and self.output_ids[-1] in p.stop_token_ids:
            return "stop"
        return "length" if len(self.output_ids) >= p.max_new_tokens else None

    def append_token(self, token_id: int) -> None:
        if self.is_finished:
            raise ValueError(f"{self.seq_id} already has its {len(self.output_ids)} token(s)")
        self.output_ids.append(token_id)


def sequences_for(request: Request, seq_ids: Iterable[str] | None = None) -> list[Sequence]:
    """The ``n`` samples of ``request``; ids ``rid`` (n = 1) or ``rid.0 .. rid.{n-1}`` unless given."""
    n = request.sampling_params.n
    ids = list(seq_ids) if seq_ids is not None else \
        ([request.rid] if n == 1 else [f"{request.rid}.{i}" for i in range(n)])
    if len(ids) != n or len(set(ids)) != n:
        raise ValueError(f"need {n} distinct sequence ids, got {ids}")
    return [Sequence(sid, request, i) for i, sid in enumerate(ids)]


@dataclass
class RequestMetrics:
    """Measured for one request (times from ``time.perf_counter``; counts summed over its samples
    and re-prefills). ``prefill_computed`` / ``prefill_saved``: prompt tokens run through the
    model / found in the radix tree."""

    arrival_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    prefill_computed: int = 0
    prefill_saved: int = 0
    preemptions: int = 0
    admitted_step: int | None = None
    finished_step: int | None = None

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first token."""
        if self.first_token_time is None or self.arrival_time is None:
            return None
        return self.first_token_time - self.arrival_time


@dataclass(eq=False)
class RequestState:
    """One request as the engine serves it: the inputs, its samples, what was measured.

    The properties are the short spellings the lessons use: ``outputs`` (one token list per
    sample), ``done``, ``ttft``, ``tokens_per_s``, ``prefill_computed``, ``prefill_saved``,
    ``preemptions``, and the request's ``rid``, ``prompt_ids``, ``max_new_tokens``, ``n``,
    ``temperature``, ``seed``.
    """

    request: Request
    seqs: list[Sequence]
    metrics: RequestMetrics = field(default_factory=RequestMetrics)

    @classmethod
    def new(cls, request: Request, seq_ids: Iterable[str] | None = None) -> "RequestState":
        return cls(request, sequences_for(request, seq_ids))

    rid = property(lambda self: self.request.rid)
    prompt_ids = property(lambda self: self.request.prompt_ids)
    max_new_tokens = property(lambda self: self.request.sampling_params.max_new_tokens)
    n = property(lambda self: self.request.sampling_params.n)
    temperature = property(lambda self: self.request.sampling_params.temperature)
    seed = property(lambda self: self.request.sampling_params.seed)
    prefill_computed = property(lambda self: self.metrics.prefill_computed)
    prefill_saved = property(lambda self: self.metrics.prefill_saved)
    preemptions = property(lambda self: self.metrics.preemptions)
    ttft = property(lambda self: self.metrics.ttft)

    @property
    def outputs(self) -> list[list[int]]:
        return [s.output_ids for s in self.seqs]

    @property
    def finish_reasons(self) -> list[str | None]:
        """One per sample: "length", "stop", "abort", or None while it runs."""
        return [s.finish_reason for s in self.seqs]

    @property
    def done(self) -> bool:
        return self.metrics.finish_time is not None

    @property
    def tokens_per_s(self) -> float | None:
        """Generated tokens (all samples) per second, from arrival to finish."""
        m = self.metrics
        if m.finish_time is None or m.arrival_time is None:
            return None
        return sum(map(len, self.outputs)) / max(1e-9, m.finish_time - m.arrival_time)
