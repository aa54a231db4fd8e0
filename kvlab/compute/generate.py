"""Decode with a real model three ways: naive recomputation, a contiguous cache, a paged cache.

All three produce the same tokens; what differs is the work per step and where K/V live.

- ``naive``: no cache. Step t runs the whole sequence (prompt + t tokens) through the model
  again, so K and V of every earlier token are recomputed: O(n) work per step, O(n^2) in all.
- ``contiguous``: per-layer K/V tensors preallocated to the maximum length
  (:class:`kvlab.kvstore.ContiguousKV`); each step computes only the new token's q, k, v.
- ``paged``: K/V in a :class:`kvlab.kvstore.PagedKVPool` whose blocks are handed out by a
  :class:`kvlab.paged.BlockManager`. The prompt is prefilled with ``extend_attention``, each new
  token's K/V are written with ``store_kvcache`` and read back through the block table with
  ``paged_decode_attention``. ``n > 1`` samples fork the prompt's blocks (shared, ref counted)
  and copy on write when a sample first writes into a shared partial block.

``attention_backend`` picks the paged operations: ``"torch"`` (the ``*_ref`` references, the
CPU default) or ``"triton"`` (the kernels; in the interpreter on a CPU, so keep it short). The
naive and contiguous paths always use dense torch attention.

Sampling: ``temperature=0`` is greedy. Otherwise sample i draws Gumbel noise from its own
``torch.Generator`` seeded ``seed + i`` (token = argmax(logits / T + noise)), so every strategy
draws the same noise and, given equal logits, the same tokens.

Not handled here: stop tokens (every sample generates exactly max_new_tokens), beam search,
top-k/top-p. The continuous-batching loop is ``kvlab.engine``.

Example:
    >>> from kvlab.model import load_bundled
    >>> model, tok = load_bundled()
    >>> ids = tok.encode("Return the")
    >>> a = generate(model, ids, 8, strategy="naive")
    >>> b = generate(model, ids, 8, strategy="paged")
    >>> a.tokens == b.tokens
    True
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .kv_tensors import BACKENDS, ContiguousKV, PagedKVPool, block_tables_tensor, kernel_ops
from ..memory import BlockManager, KVCacheError, blocks_needed, slot_mapping

STRATEGIES = ("naive", "contiguous", "paged")


class GenerateError(ValueError):
    """Bad arguments to generate(); nothing was allocated."""


class EmptyPromptError(GenerateError):
    pass


class ContextOverflowError(GenerateError):
    pass


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


# ----------------------------------------------------------------------------------- helpers

def validate(model, prompt_ids, max_new_tokens, strategy, attention_backend, n) -> list[int]:
    """Check every argument; raise a GenerateError subclass naming the bad value."""
    if strategy not in STRATEGIES:
        raise UnknownStrategyError(f"strategy={strategy!r} is not one of {STRATEGIES}")
    if attention_backend not in BACKENDS:
        raise GenerateError(f"attention_backend={attention_backend!r} is not one of {BACKENDS}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise GenerateError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise GenerateError(f"n must be an int >= 1, got {n!r}")
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.flatten().tolist()
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise EmptyPromptError("prompt_ids is empty: a prompt needs at least one token")
    V, ctx = model.config.vocab_size, model.config.max_position_embeddings
    bad = [t for t in prompt if not 0 <= t < V]
    if bad:
        raise GenerateError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {V})")
    if len(prompt) > ctx:
        raise ContextOverflowError(f"prompt has {len(prompt)} tokens, longer than the model's context of {ctx}")
    if len(prompt) + max_new_tokens > ctx:
        raise ContextOverflowError(
            f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) exceeds the model's context of {ctx}")
    return prompt


def sample_next(logits: torch.Tensor, temperature: float, generators: list[torch.Generator]) -> list[int]:
    """logits (n, V) -> n token ids: argmax when temperature == 0, else Gumbel-max sampling."""
    if temperature == 0:
        return logits.argmax(-1).tolist()
    out = []
    for i, g in enumerate(generators):
        u = torch.rand(logits.shape[-1], generator=g, dtype=torch.float64).clamp_(1e-20, 1.0)  # (V,)
        gumbel = -torch.log(-torch.log(u))
        out.append(int((logits[i].double().cpu() / temperature + gumbel).argmax()))
    return out


def paged_forward(model, pool: PagedKVPool, ops, token_ids: Sequence[int], tables: Sequence[Sequence[int]],
                  prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> torch.Tensor:
    """One forward pass of several sequences' new tokens over the paged cache.

    token_ids: the new tokens of every sequence, packed: sum(extend_lens) ids. Sequence r's new
    tokens sit at positions prefix_lens[r] .. prefix_lens[r] + extend_lens[r] - 1 and its blocks
    (already reserved in the BlockManager) are tables[r]. K/V of the new tokens are stored with
    store_kvcache; attention uses paged_decode_attention when every sequence adds one token,
    extend_attention otherwise. Returns logits (N, V) for every new token.
    """
    dev, bs = model.device, pool.block_size
    positions, slots = [], []
    for table, p, e in zip(tables, prefix_lens, extend_lens):
        positions.extend(range(p, p + e))
        slots.extend(slot_mapping(table, p, p + e, bs))
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=dev)   # (N,)
    pos = torch.tensor(positions, dtype=torch.long, device=dev)         # (N,)
    slot_t = torch.tensor(slots, dtype=torch.long, device=dev)          # (N,)
    bt = block_tables_tensor(tables, dev)                               # (num_seqs, max_blocks)
    decode = all(e == 1 for e in extend_lens)
    ctx_lens = torch.tensor([p + e for p, e in zip(prefix_lens, extend_lens)], dtype=torch.int32, device=dev)
    pre = torch.tensor(list(prefix_lens), dtype=torch.int32, device=dev)
    ext = torch.tensor(list(extend_lens), dtype=torch.int32, device=dev)

    def attention(layer: int, q, k, v):                                 # q (N, nh, hs); k, v (N, nkv, hs)
        kc, vc = pool.k_cache[layer], pool.v_cache[layer]               # (NB, bs, nkv, hs)
        ops.store_kvcache(k, v, kc, vc, slot_t)
        if decode:
            return ops.paged_decode_attention(q, kc, vc, bt, ctx_lens)   # (N, nh, hs)
        return ops.extend_attention(q, kc, vc, bt, pre, ext)            # (N, nh, hs)

    return model(ids, pos, attention)                                   # (N, V)


def _dense_attention(ops):
    """Attention callback over whole (B, T) batches where queries are the last T of S keys."""

    def run(q, k, v):                                                   # q (B, T, nh, hs); k, v (B, S, nkv, hs)
        return torch.stack([ops.naive_attention(q[b], k[b], v[b], causal=True) for b in range(q.shape[0])])

    return run


# ----------------------------------------------------------------------------------- generate

@torch.no_grad()
def generate(model, prompt_ids: Sequence[int], max_new_tokens: int, strategy: str = "naive",
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
    """
    prompt = validate(model, prompt_ids, max_new_tokens, strategy, attention_backend, n)
    ops = kernel_ops(attention_backend)
    gens = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    P, V = len(prompt), model.config.vocab_size
    seqs: list[list[int]] = [[] for _ in range(n)]
    logits_all = torch.zeros((n, max_new_tokens, V))                    # (n, steps, V)
    times: list[float] = []
    flops: list[int] = []
    ctx_lens: list[int] = []
    res = GenerationResult(prompt, seqs, logits_all, times, flops, ctx_lens, strategy, attention_backend)
    if max_new_tokens == 0:
        return res

    def record(step: int, logits: torch.Tensor, t0: float, step_flops: int, ctx: int) -> list[int]:
        nxt = sample_next(logits, temperature, gens)                    # logits (n, V)
        logits_all[:, step] = logits.float().cpu()
        for i, t in enumerate(nxt):
            seqs[i].append(t)
        times.append(time.perf_counter() - t0)
        flops.append(step_flops)
        ctx_lens.append(ctx)
        return nxt

    fpt = model.flops_per_token
    dev = model.device
    if strategy == "naive":
        for step in range(max_new_tokens):                              # no cache: the model's own causal attention
            t0 = time.perf_counter()
            L = P + step
            ids = torch.tensor([prompt + s for s in seqs], dtype=torch.long, device=dev)  # (n, L)
            logits = model(ids)[:, -1]                                                     # (n, V)
            record(step, logits, t0, n * sum(fpt(i + 1) for i in range(L)), L)
        return res

    if strategy == "contiguous":
        cache = ContiguousKV.for_model(model, batch=n, max_len=P + max_new_tokens)
        res.kv_bytes = cache.nbytes
        dense = _dense_attention(ops)
        state = {"start": 0}

        def attention(layer, q, k, v):                                  # q (B, T, nh, hs); k, v (B, T, nkv, hs)
            start, T = state["start"], q.shape[1]
            cache.write(layer, start, k, v)
            K, Vv = cache.read(layer, start + T)                        # (n, start+T, nkv, hs)
            if q.shape[0] == 1 and n > 1:                               # the prompt: one pass, copied to n rows
                K, Vv = K[:1], Vv[:1]
            return dense(q, K, Vv)                                      # (B, T, nh, hs)

        t0 = time.perf_counter()
        ids = torch.tensor([prompt], dtype=torch.long, device=dev)      # (1, P)
        logits = model(ids, torch.arange(P, device=dev)[None], attention)[:, -1].expand(n, V)  # (n, V)
        nxt = record(0, logits, t0, sum(fpt(i + 1) for i in range(P)), P)
        for step in range(1, max_new_tokens):
            t0 = time.perf_counter()
            L = P + step - 1                                            # position of the token fed now
            state["start"] = L
            ids = torch.tensor(nxt, dtype=torch.long, device=dev)[:, None]  # (n, 1)
            pos = torch.full((n, 1), L, dtype=torch.long, device=dev)       # (n, 1)
            logits = model(ids, pos, attention)[:, -1]                  # (n, V)
            nxt = record(step, logits, t0, n * fpt(L + 1), L + 1)
        return res

    # paged
    bs = block_size if manager is None else manager.block_size
    if manager is None:
        nb = num_blocks if num_blocks is not None else n * blocks_needed(P + max_new_tokens, bs) + 1
        manager = BlockManager(nb, bs)
    if pool is None:
        pool = PagedKVPool.for_model(model, manager.num_blocks, bs)
    if (pool.num_blocks, pool.block_size) != (manager.num_blocks, manager.block_size):
        raise GenerateError(f"pool has {pool.num_blocks} blocks of {pool.block_size}, manager "
                            f"{manager.num_blocks} of {manager.block_size}")
    ids_ = [f"{seq_id}{i}" for i in range(n)]
    clash = [s for s in ids_ if s in manager.tables]
    if clash:
        raise GenerateError(f"sequence ids {clash} already exist in the block manager")
    res.manager, res.pool, res.seq_ids, res.kv_bytes = manager, pool, ids_, pool.nbytes
    try:
        t0 = time.perf_counter()
        manager.add_sequence(ids_[0], P)
        table0 = manager.tables[ids_[0]].block_ids
        logits = paged_forward(model, pool, ops, prompt, [table0], [0], [P])[-1:].expand(n, V)  # (n, V)
        for s in ids_[1:]:
            manager.fork(ids_[0], s)                                    # share the prompt's blocks
        nxt = record(0, logits, t0, sum(fpt(i + 1) for i in range(P)), P)
        for step in range(1, max_new_tokens):
            t0 = time.perf_counter()
            L = P + step - 1
            copies = []
            for s in ids_:
                copies += manager.append(s, 1)                         # may copy a shared partial block
            pool.copy_blocks(copies, attention_backend)
            res.copies += copies
            tables = [manager.tables[s].block_ids for s in ids_]
            logits = paged_forward(model, pool, ops, nxt, tables, [L] * n, [1] * n)  # (n, V)
            nxt = record(step, logits, t0, n * fpt(L + 1), L + 1)
    except BaseException:
        for s in ids_:
            if s in manager.tables:
                manager.free(s)
        raise
    if not keep:
        for s in ids_:
            manager.free(s)
    return res
