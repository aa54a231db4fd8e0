"""Decode with a real model three ways: naive recomputation, a contiguous cache, a paged cache.

All three produce the same tokens; what differs is the work per step and where K/V live.

- ``naive``: no cache. Step t runs the whole sequence (prompt + t tokens) through the model
  again, so K and V of every earlier token are recomputed: O(n) work per step, O(n^2) in all.
- ``contiguous``: per-layer K/V tensors preallocated to the maximum length
  (:class:`~kvlab.compute.kv_tensors.ContiguousKV`); each step computes only the new token's q, k, v.
- ``paged``: K/V in a :class:`~kvlab.compute.kv_tensors.PagedKVPool` whose blocks are handed out
  by a :class:`~kvlab.memory.block_manager.BlockManager`; every forward pass is built and run by
  the :class:`~kvlab.compute.model_runner.ModelRunner` (prefill with ``extend_attention``, each new
  token stored with ``store_kvcache`` and read back through the block table with
  ``paged_decode_attention``). ``n > 1`` samples fork the prompt's blocks (shared, ref counted)
  and copy on write when a sample first writes into a shared partial block.

``attention_backend`` picks the paged operations: ``"torch"`` (the ``*_ref`` references, the
CPU default) or ``"triton"`` (the kernels; in the interpreter on a CPU, so keep it short). The
naive and contiguous paths always use dense torch attention.

Sampling (``kvlab.compute.sampler``): ``temperature=0`` is greedy; otherwise sample i draws
Gumbel noise from its own generator seeded ``seed + i``, so every strategy (and the engine)
draws the same noise and, given equal logits, the same tokens.

Mirrors the one-prompt use of nano-vllm's ``LLMEngine.generate`` (``nanovllm/engine/llm_engine.py``)
on the paged path, with vLLM's sampling names (``n``, ``temperature``, ``seed``); the naive and
contiguous paths are the baselines the lessons compare with.

Not handled here: stop tokens (every sample generates exactly max_new_tokens), beam search,
top-k/top-p. The continuous-batching loop is ``kvlab.compute.engine``.

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> ids = tok.encode("Return the")
    >>> a = generate(model, ids, 8, strategy="naive")
    >>> b = generate(model, ids, 8, strategy="paged")
    >>> a.tokens == b.tokens, len(b.tokens)
    (True, 8)
    >>> generate(model, [5.9, 7.2], 2)
    Traceback (most recent call last):
    ...
    TypeError: prompt_ids[0] = 5.9 is not an int (float)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections import abc

import torch

from ..memory.block_manager import BlockManager
from ..memory.block_table import blocks_needed
from ..memory.ids import check_int
from .kv_tensors import BACKENDS, ContiguousKV, PagedKVPool, kernel_ops
from .model import causal_attention, decode_attention
from .model_runner import ModelRunner
from .sampler import sample_next
from .sequence import (ContextOverflowError, EmptyPromptError, GenerateError, Request, SamplingParams, Sequence,
                       sequences_for)

__all__ = ["STRATEGIES", "UnknownStrategyError", "GenerationResult", "validate", "generate"]

STRATEGIES = ("naive", "contiguous", "paged")


class UnknownStrategyError(GenerateError):
    pass


@dataclass
class GenerationResult:
    """What generate() returns.

    sequences: the n samples' generated tokens (n lists of max_new_tokens ids); ``tokens`` is sample 0.
    logits: (n, max_new_tokens, V) fp32, the logits each generated token was chosen from.
    step_times: seconds per step; step 0 is the prefill (it yields the first token).
    step_flops: counted matmul FLOPs per step (all samples), from Llama.flops_per_token.
    context_lens: tokens each step attended over (step 0: the prompt length).
    kv_bytes: bytes reserved for K/V (0 for naive; contiguous reserves max length up front).
    manager, pool, seq_ids: the paged state (paged only; tables freed unless keep=True).
    """

    prompt_ids: list[int]
    sequences: list[list[int]]
    logits: torch.Tensor
    step_times: list[float]
    step_flops: list[int]
    context_lens: list[int]
    strategy: str
    attention_backend: str
    kv_bytes: int = 0
    copies: list[tuple[int, int]] = field(default_factory=list)
    manager: BlockManager | None = None
    pool: PagedKVPool | None = None
    seq_ids: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return self.sequences[0]

    def text(self, tokenizer, sample: int = 0) -> str:
        return tokenizer.decode(self.sequences[sample])


def validate(model, prompt_ids, max_new_tokens, strategy="naive", attention_backend="torch", n=1,
             temperature=0.0, seed=0, rid="seq") -> Request:
    """Every argument checked (the engine's rules: token ids ints in [0, vocab), counts,
    temperature finite and >= 0); returns the Request. Raises a GenerateError subclass (or a
    TypeError for a value of the wrong type) naming the bad value."""
    if strategy not in STRATEGIES:
        raise UnknownStrategyError(f"strategy={strategy!r} is not one of {STRATEGIES}")
    if attention_backend not in BACKENDS:
        raise GenerateError(f"attention_backend={attention_backend!r} is not one of {BACKENDS}")
    request = Request(rid, prompt_ids, SamplingParams(max_new_tokens, n, temperature, seed))
    request.check_model(model.config)
    return request


class _Recorder:
    """Samples each step's logits and records them, the step's time, FLOPs and context length."""

    def __init__(self, res: GenerationResult, seqs: list[Sequence], temperature: float) -> None:
        self.res, self.seqs, self.temperature = res, seqs, temperature

    def step(self, step: int, logits: torch.Tensor, t0: float, flops: int, ctx: int) -> None:   # logits (n, V)
        for s, tok in zip(self.seqs, sample_next(logits, self.temperature, [s.generator for s in self.seqs])):
            s.append_token(tok)
        self.res.logits[:, step] = logits.float().cpu()
        self.res.step_times.append(time.perf_counter() - t0)
        self.res.step_flops.append(flops)
        self.res.context_lens.append(ctx)


def _naive(model, seqs: list[Sequence], rec: _Recorder, steps: int) -> None:
    """No cache: every step runs every sample's whole sequence through the model's causal attention."""
    fpt, P, n = model.flops_per_token, len(seqs[0].request.prompt_ids), len(seqs)
    for step in range(steps):
        t0 = time.perf_counter()
        L = P + step
        ids = torch.tensor([s.token_ids for s in seqs], dtype=torch.long, device=model.device)  # (n, L)
        logits = model(ids, logits_rows=slice(-1, None))[:, -1]                                # (n, V)
        rec.step(step, logits, t0, n * sum(fpt(i + 1) for i in range(L)), L)


def _contiguous(model, seqs: list[Sequence], rec: _Recorder, steps: int, ops) -> None:
    """A preallocated (n, max_len) cache per layer: the prompt once, then one token per sample per step."""
    fpt, prompt, n, dev = model.flops_per_token, seqs[0].request.prompt_ids, len(seqs), model.device
    P = len(prompt)
    cache = ContiguousKV.for_model(model, batch=n, max_len=P + steps)
    rec.res.kv_bytes = cache.nbytes
    state = {"start": 0}

    def attention(layer, q, k, v):                                      # q (B, T, nh, hs); k, v (B, T, nkv, hs)
        start, T = state["start"], q.shape[1]
        cache.write(layer, start, k, v)
        if start == 0:                                                  # the prompt: its own K/V, fused causal SDPA
            return causal_attention(q, k, v)                            # (B, T, nh, hs)
        K, Vv = cache.read(layer, start + T)                            # (n, start+T, nkv, hs)
        if T == 1:                                                      # a decode step: fused SDPA, GQA unrepeated
            return torch.stack([decode_attention(q[b, 0], K[b], Vv[b]) for b in range(q.shape[0])])[:, None]
        return torch.stack([ops.naive_attention(q[b], K[b], Vv[b], causal=True) for b in range(q.shape[0])])

    t0 = time.perf_counter()
    ids = torch.tensor([prompt], dtype=torch.long, device=dev)          # (1, P)
    logits = model(ids, torch.arange(P, device=dev)[None], attention, logits_rows=slice(-1, None))[:, -1]  # (1, V)
    logits = logits.expand(n, -1)                                       # (n, V)
    rec.step(0, logits, t0, sum(fpt(i + 1) for i in range(P)), P)
    for step in range(1, steps):
        t0 = time.perf_counter()
        L = P + step - 1                                                # position of the token fed now
        state["start"] = L
        ids = torch.tensor([s.last_token_id for s in seqs], dtype=torch.long, device=dev)[:, None]  # (n, 1)
        pos = torch.full((n, 1), L, dtype=torch.long, device=dev)       # (n, 1)
        logits = model(ids, pos, attention)[:, -1]                      # (n, V)
        rec.step(step, logits, t0, n * fpt(L + 1), L + 1)


def _paged_memory(model, seqs: list[Sequence], res: GenerationResult, block_size: int, num_blocks: int | None,
                  manager: BlockManager | None, pool: PagedKVPool | None) -> tuple[BlockManager, PagedKVPool]:
    """The block manager and K/V pool to use (fresh ones just big enough by default), checked
    to match each other and to hold none of ``seqs``' ids yet."""
    bs = check_int("block_size", block_size, 1) if manager is None else manager.block_size
    if manager is None:
        P, M = len(seqs[0].request.prompt_ids), seqs[0].request.sampling_params.max_new_tokens
        manager = BlockManager(num_blocks if num_blocks is not None else len(seqs) * blocks_needed(P + M, bs) + 1, bs)
    if pool is None:
        pool = PagedKVPool.for_model(model, manager.num_blocks, bs)
    if (pool.num_blocks, pool.block_size) != (manager.num_blocks, manager.block_size):
        raise GenerateError(f"pool has {pool.num_blocks} blocks of {pool.block_size}, manager "
                            f"{manager.num_blocks} of {manager.block_size}")
    clash = [s.seq_id for s in seqs if s.seq_id in manager.tables]
    if clash:
        raise GenerateError(f"sequence ids {clash} already exist in the block manager")
    res.manager, res.pool, res.seq_ids, res.kv_bytes = manager, pool, [s.seq_id for s in seqs], pool.nbytes
    return manager, pool


def _paged(model, seqs: list[Sequence], rec: _Recorder, steps: int, manager: BlockManager,
           runner: ModelRunner, keep: bool) -> None:
    """The paged decode; the tables are freed at the end (unless ``keep``) and on any error."""
    try:
        _paged_steps(model, seqs, rec, steps, manager, runner)
    except BaseException:
        for s in seqs:
            if s.seq_id in manager.tables:
                manager.free(s.seq_id)
        raise
    if not keep:
        for s in seqs:
            manager.free(s.seq_id)


def _paged_steps(model, seqs: list[Sequence], rec: _Recorder, steps: int, manager: BlockManager,
                 runner: ModelRunner) -> None:
    """The prompt prefilled once into the block manager's blocks, forked for the other samples,
    then one batched decode pass per step through the block tables."""
    fpt, P, n = model.flops_per_token, len(seqs[0].request.prompt_ids), len(seqs)
    first = seqs[0]
    t0 = time.perf_counter()
    first.block_table = manager.add_sequence(first.seq_id, P)
    logits = runner.run(runner.prepare_prefill([first]))                # (1, V)
    for s in seqs[1:]:
        s.block_table = manager.fork(first.seq_id, s.seq_id)            # share the prompt's blocks
    for s in seqs:
        s.num_computed_tokens = P
    rec.step(0, logits.expand(n, -1), t0, sum(fpt(i + 1) for i in range(P)), P)
    for step in range(1, steps):
        t0 = time.perf_counter()
        L = P + step - 1                                                # position of the token fed now
        copies = [c for s in seqs for c in manager.append(s.seq_id, 1)]  # may copy a shared partial block
        runner.kv_pool.copy_blocks(copies, runner.attention_backend)
        rec.res.copies += copies
        logits = runner.run(runner.prepare_decode(seqs))                # (n, V)
        for s in seqs:
            s.num_computed_tokens = s.num_tokens
        rec.step(step, logits, t0, n * fpt(L + 1), L + 1)


@torch.no_grad()
def generate(model, prompt_ids: abc.Sequence[int], max_new_tokens: int, strategy: str = "naive",
             attention_backend: str = "torch", *, n: int = 1, temperature: float = 0.0, seed: int = 0,
             block_size: int = 4, num_blocks: int | None = None, manager: BlockManager | None = None,
             pool: PagedKVPool | None = None, keep: bool = False, seq_id: str = "seq") -> GenerationResult:
    """Generate ``max_new_tokens`` tokens for ``n`` samples of one prompt.

    strategy: "naive" | "contiguous" | "paged" (see the module docstring).
    attention_backend: "torch" | "triton" (paged path only).
    temperature, seed: 0 = greedy; else Gumbel-max sampling, sample i seeded ``seed + i``.
    block_size, num_blocks, manager, pool (paged): the block manager and K/V pool to use; by
        default a fresh pool just big enough. Sequences are named ``f"{seq_id}{i}"``.
    keep (paged): leave the sequences' blocks allocated afterwards (for inspection); by default
        they are freed. On any error every block this call took is released before it raises.
    Bad arguments raise (GenerateError subclasses, TypeError for wrong types) before anything is allocated.
    """
    if not isinstance(seq_id, str):
        raise TypeError(f"seq_id must be a str, got {seq_id!r}")
    request = validate(model, prompt_ids, max_new_tokens, strategy, attention_backend, n, temperature, seed, seq_id)
    seqs = sequences_for(request, [f"{seq_id}{i}" for i in range(n)])
    prompt, V = request.prompt_ids, model.config.vocab_size
    res = GenerationResult(prompt, [s.output_ids for s in seqs], torch.zeros((n, max_new_tokens, V)),  # (n, steps, V)
                           [], [], [], strategy, attention_backend)
    if max_new_tokens == 0:
        return res
    rec = _Recorder(res, seqs, request.sampling_params.temperature)
    if strategy == "naive":
        _naive(model, seqs, rec, max_new_tokens)
    elif strategy == "contiguous":
        _contiguous(model, seqs, rec, max_new_tokens, kernel_ops(attention_backend))
    else:
        manager, pool = _paged_memory(model, seqs, res, block_size, num_blocks, manager, pool)
        _paged(model, seqs, rec, max_new_tokens, manager, ModelRunner(model, pool, attention_backend), keep)
    return res
