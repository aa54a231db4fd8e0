"""Keep fewer tokens, or fewer bytes per token: KV compression as block-table operations.

Under dense attention every decode step reads every cached token's K and V. Three papers keep or
read fewer of them, at block granularity here (a block is the unit the pool hands out):

* **StreamingLLM** (Xiao et al. 2023, "Efficient Streaming Language Models with Attention
  Sinks", arXiv:2309.17453): keep the first blocks (the *attention sinks*) and a recent window;
  the middle blocks leave the table (``BlockManager.drop_blocks``) and go back to the pool. Kept
  tokens keep their original positions (RoPE), as the paper's cache does.
* **H2O** (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of
  Large Language Models", arXiv:2306.14048): keep a recent window plus the *heavy hitters*, the
  blocks with the most accumulated attention (summed over layers, heads and queries so far).
* **Quest** (Tang et al. 2024, "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
  Inference", arXiv:2406.10774): keep everything, but each decode step reads only the top-k
  blocks by an upper bound of q.k computed from each block's per-channel key min and max:
  ``bound = sum_d max(q_d * max_d, q_d * min_d)`` (>= q.k for every key of the block).

Plus fewer bytes per kept token: ``"int8"`` / ``"fp8"`` store K and V in one byte with a scale per
token and head (:class:`~kvlab.compute.kv_quant.QuantizedKVPool`).

:class:`CompressedDecoder` runs a model over one sequence with a :class:`CompressionConfig`:
``prefill`` the prompt (dense attention, recording the attention each key receives), then
``step`` a token at a time; after every step that fills a block the policy drops blocks again.
``backend="torch"`` attends in plain torch (and records attention and reads by position);
``"triton"`` runs kvlab.kernels' decode kernels (quantized, selected-block, paged).

Example (the selection rules, block size 4, a 38-token sequence = 10 blocks, 9 of them full):
    >>> streaming_drop(num_blocks=10, num_full=9, sink_blocks=1, window_blocks=3)
    [1, 2, 3, 4, 5, 6]
    >>> h2o_drop([9.0, 1, 7, 1, 1, 1, 1, 1, 1, 1], num_full=9, budget_blocks=4, window_blocks=2)
    [1, 3, 4, 5, 6, 7]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..memory.block_manager import BlockManager
from ..memory.ids import as_ids
from .kv_quant import QuantizedKVPool, kv_dtype_by_name
from .kv_tensors import PagedKVPool

__all__ = ["METHODS", "CompressionConfig", "PrefillState", "streaming_drop", "h2o_drop", "block_key_minmax", "quest_bounds",
           "quest_select", "CompressedDecoder"]

METHODS = ("full", "streaming", "h2o", "quest", "int8", "fp8")


@dataclass(frozen=True)
class CompressionConfig:
    """Which method, and how many tokens it may keep (streaming, h2o) or read per step (quest).

    ``budget_tokens`` and ``sink_tokens`` are rounded up to whole blocks. H2O keeps half its
    budget as the recent window (the paper's split), Quest always reads the newest block.
    """

    method: str = "full"
    budget_tokens: int = 64
    sink_tokens: int = 4

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is not one of {METHODS}")
        for name in ("budget_tokens", "sink_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")

    @property
    def label(self) -> str:
        return self.method if self.method in ("full", "int8", "fp8") else f"{self.method} {self.budget_tokens}"


def streaming_drop(num_blocks: int, num_full: int, sink_blocks: int, window_blocks: int) -> list[int]:
    """StreamingLLM: the full logical blocks to drop so that the first ``sink_blocks`` and the last
    ``window_blocks`` remain (the partial last block, if any, is never dropped)."""
    keep = set(range(min(sink_blocks, num_blocks))) | set(range(max(0, num_blocks - window_blocks), num_blocks))
    return [i for i in range(num_full) if i not in keep]


def h2o_drop(block_scores: Sequence[float], num_full: int, budget_blocks: int, window_blocks: int) -> list[int]:
    """H2O: keep the last ``window_blocks`` blocks plus the highest-scoring others, ``budget_blocks``
    in all; return the full blocks to drop. Ties go to the earlier block."""
    n = len(block_scores)
    recent = set(range(max(0, n - window_blocks), n))
    others = sorted((i for i in range(n) if i not in recent), key=lambda i: (-float(block_scores[i]), i))
    keep = recent | set(others[:max(0, budget_blocks - len(recent))])
    return [i for i in range(num_full) if i not in keep]


def block_key_minmax(k: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block, per-channel min and max of keys: k (n, nkv, hs) -> k_min, k_max (num_blocks, nkv, hs).
    The last block may be partial: only its real tokens count."""
    n, nkv, hs = k.shape
    nb = -(-n // block_size)
    pad = nb * block_size - n
    lo = torch.cat([k.float(), k.new_full((pad, nkv, hs), float("inf"), dtype=torch.float32)])   # (nb*bs, nkv, hs)
    hi = torch.cat([k.float(), k.new_full((pad, nkv, hs), float("-inf"), dtype=torch.float32)])
    return lo.view(nb, block_size, nkv, hs).amin(1), hi.view(nb, block_size, nkv, hs).amax(1)


def quest_bounds(q: torch.Tensor, k_min: torch.Tensor, k_max: torch.Tensor) -> torch.Tensor:
    """Quest's upper bound of q.k over each block: q (nh, hs), k_min/k_max (nb, nkv, hs) -> (nh, nb).

    Per channel the larger of q_d * max_d and q_d * min_d (the min wins where q_d < 0), summed:
    no key of the block can score higher. Example: q [1, -1], min [0, 0], max [2, 3] -> 2 + 0 = 2.
    """
    group = q.shape[0] // k_min.shape[1]
    lo = k_min.repeat_interleave(group, dim=1)                             # (nb, nh, hs)
    hi = k_max.repeat_interleave(group, dim=1)
    qf = q.float()[None]                                                   # (1, nh, hs)
    return torch.maximum(qf * hi, qf * lo).sum(-1).T                      # (nh, nb)


def quest_select(bounds: torch.Tensor, top_k: int) -> list[int]:
    """The ``top_k`` blocks with the highest bound (max over heads), always with the newest block;
    sorted. bounds (nh, nb). Example: bounds [[5, 1, 4, 0]], top_k 2 -> [0, 3]."""
    nb = bounds.shape[1]
    if top_k >= nb:
        return list(range(nb))
    score = bounds.max(dim=0).values.clone()                               # (nb,)
    score[-1] = float("inf")                                               # the block being written
    return sorted(torch.topk(score, top_k).indices.tolist())


@dataclass(frozen=True)
class PrefillState:
    """What a dense prefill produced, to start other decoders from without running the model again
    (every method's prefill computes the same numbers; only what it keeps afterwards differs).

    kv: per layer (k, v), each (T, nkv, hs); received (T,): attention each key received;
    last_row_mass: per layer (T,); logits (V,): the last prompt token's.
    """

    kv: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    received: torch.Tensor
    last_row_mass: tuple[torch.Tensor, ...]
    logits: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.received.shape[0]


@dataclass
class _Record:
    """What a run saw: per original position, attention received and K/V reads."""

    last_row_mass: list[torch.Tensor] = field(default_factory=list)      # per layer (T,): the prompt's last query
    reads: torch.Tensor = field(default_factory=lambda: torch.zeros(0))   # (positions,) layer-reads during decode
    decode_mass: dict[int, torch.Tensor] = field(default_factory=dict)    # per layer (positions,): attention summed
                                                                           # over decode steps (mean over heads)


class CompressedDecoder:
    """One sequence of ``model`` over a paged cache compressed by ``config`` (see the module docstring).

    ``positions[i]`` is the original position of the token in slot ``i`` of the table;
    ``token_scores[i]`` the attention it has received (H2O). ``record.reads[p]`` counts the
    (layer, step) pairs in which position p's K and V were read during decode.
    """

    def __init__(self, model, config: CompressionConfig = CompressionConfig(), block_size: int = 16,
                 num_blocks: int = 256, backend: str = "torch") -> None:
        if backend not in ("torch", "triton"):
            raise ValueError(f"backend must be 'torch' or 'triton', got {backend!r}")
        self.model, self.config, self.backend = model, config, backend
        if config.method in ("int8", "fp8"):
            self.pool = QuantizedKVPool.for_model(model, num_blocks, block_size, kv_dtype_by_name(config.method))
        else:
            self.pool = PagedKVPool.for_model(model, num_blocks, block_size)
        self.manager = BlockManager(num_blocks, block_size)
        self.seq_id = "S"
        self.positions: list[int] = []
        self.token_scores = torch.zeros(0, dtype=torch.float64)          # (kept,) attention received (H2O)
        self.record = _Record()
        self.prefill_state: PrefillState | None = None
        self.scale = 1.0 / math.sqrt(model.config.head_dim)

    # ------------------------------------------------------------------ sizes
    @property
    def block_size(self) -> int:
        return self.manager.block_size

    @property
    def num_kept(self) -> int:
        return len(self.positions)

    def kv_bytes(self) -> int:
        """Bytes of K and V this sequence holds now (kept tokens x bytes per token)."""
        return self.num_kept * self.pool.bytes_per_token()

    def budget_blocks(self) -> int:
        return -(-self.config.budget_tokens // self.block_size)

    def _token_ids(self, token_ids: Sequence[int], what: str) -> list[int]:
        """``token_ids`` as ints in ``[0, vocab_size)``; TypeError / ValueError naming the first bad
        one (the embedding would raise a bare ``IndexError: index out of range in self``)."""
        ids = as_ids(token_ids, what)
        V = self.model.config.vocab_size
        bad = next((i for i, t in enumerate(ids) if t >= V), None)
        if bad is not None:
            raise ValueError(f"{what}[{bad}] = {ids[bad]} is not a token id of this model (vocabulary [0, {V}))")
        return ids

    # ------------------------------------------------------------------ the passes
    @torch.no_grad()
    def prefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Run the prompt with dense causal attention, storing K/V; returns the last token's logits (V,)."""
        if self.positions:
            raise ValueError("prefill once per decoder; make a new one for another prompt")
        token_ids = self._token_ids(token_ids, "prompt token_ids")
        T = len(token_ids)
        if T < 1:
            raise ValueError("the prompt needs at least one token")
        received = torch.zeros(T)
        kv, rows = [], []

        def attention(layer, q, k, v):                                     # q (T, nh, hs); k, v (T, nkv, hs)
            kv.append((k, v))
            nkv, hs = k.shape[1], k.shape[2]
            qg = q.float().view(T, nkv, -1, hs)                            # (T, nkv, group, hs)
            scores = torch.einsum("tkgd,skd->kgts", qg, k.float()) * self.scale                    # (nkv, g, T, T)
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            probs = scores.softmax(-1)
            received.add_(probs.sum((0, 1, 2)))                            # (T,) attention each key received
            rows.append(probs[:, :, -1].mean((0, 1)))                      # (T,) averaged over heads
            return torch.einsum("kgts,skd->tkgd", probs, v.float()).reshape(T, -1, hs).to(q.dtype)  # (T, nh, hs)

        ids = torch.tensor(list(token_ids), device=self.model.device)
        logits = self.model(ids, torch.arange(T, device=self.model.device), attention)             # (T, V)
        self.prefill_state = PrefillState(tuple(kv), received, tuple(rows), logits[-1])
        return self.start_from(self.prefill_state)

    def start_from(self, state: PrefillState) -> torch.Tensor:
        """Fill the cache from a prefill (this decoder's or another's, same model), then apply the
        method; returns the last prompt token's logits (V,)."""
        if self.positions:
            raise ValueError("this decoder already holds a sequence; make a new one")
        T = state.num_tokens
        table = self.manager.add_sequence(self.seq_id, T)
        slots = torch.tensor(table.slot_mapping(0, T), dtype=torch.long)
        for layer, (k, v) in enumerate(state.kv):
            self._store(layer, k, v, slots)
        self.positions = list(range(T))
        self.token_scores = state.received.double().clone()
        self.record.last_row_mass = list(state.last_row_mass)
        self.compress()
        return state.logits

    @torch.no_grad()
    def step(self, token_id: int) -> torch.Tensor:
        """Feed one token at the next original position; returns its logits (V,)."""
        (token_id,) = self._token_ids([token_id], "step token_id")
        pos = self.positions[-1] + 1 if self.positions else 0
        if self.manager.append(self.seq_id, 1):                            # the table is never shared here
            raise RuntimeError("unexpected copy-on-write in a private table")
        table = self.manager.table(self.seq_id)
        n = table.num_tokens
        slot = torch.tensor(table.slot_mapping(n - 1, n), dtype=torch.long)
        self.positions.append(pos)
        self.token_scores = torch.cat([self.token_scores, self.token_scores.new_zeros(1)])
        rec = self.record
        if rec.reads.shape[0] <= pos:
            rec.reads = torch.cat([rec.reads, rec.reads.new_zeros(pos + 1 - rec.reads.shape[0])])
        positions = torch.tensor(self.positions)                           # (n,) original position of each slot

        def attention(layer, q, k, v):                                     # q (1, nh, hs); k, v (1, nkv, hs)
            self._store(layer, k, v, slot)
            if self.backend == "triton":
                return self._attend_kernel(layer, q, table.block_ids, n)
            return self._attend_torch(layer, q, table.block_ids, n, positions)

        logits = self.model(torch.tensor([token_id], device=self.model.device),
                            torch.tensor([pos], device=self.model.device), attention)[-1]
        if n % self.block_size == 0:
            self.compress()
        return logits

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], max_tokens: int, state: PrefillState | None = None) -> list[int]:
        """Greedy decoding: ``max_tokens`` new tokens after the prompt (its prefill ``state`` if given)."""
        logits = self.prefill(prompt_ids) if state is None else self.start_from(state)
        out: list[int] = []
        for _ in range(max_tokens):
            out.append(int(logits.argmax()))
            logits = self.step(out[-1])
        return out

    @torch.no_grad()
    def continuation_nll(self, prompt_ids: Sequence[int], continuation: Sequence[int],
                         state: PrefillState | None = None) -> float:
        """Mean negative log-likelihood of ``continuation`` after the prompt (teacher forcing; the
        prompt's prefill ``state`` if given); exp() is perplexity."""
        continuation = self._token_ids(continuation, "continuation token_ids")
        logits = self.prefill(prompt_ids) if state is None else self.start_from(state)
        total = 0.0
        for i, t in enumerate(continuation):
            total -= float(torch.log_softmax(logits.float(), -1)[t])
            if i + 1 < len(continuation):
                logits = self.step(int(t))
        return total / max(1, len(continuation))

    # ------------------------------------------------------------------ the policy
    def compress(self) -> list[int]:
        """Apply the method's rule to the table now; returns the logical blocks dropped."""
        m, bs = self.config.method, self.block_size
        table = self.manager.table(self.seq_id)
        nb, full, budget = len(table.block_ids), table.num_full_blocks, self.budget_blocks()
        if m not in ("streaming", "h2o") or nb <= budget:
            return []
        if m == "streaming":
            sinks = min(-(-self.config.sink_tokens // bs), budget - 1)
            drop = streaming_drop(nb, full, sinks, budget - sinks)
        else:
            scores = [float(self.token_scores[i * bs:(i + 1) * bs].sum()) for i in range(nb)]
            drop = h2o_drop(scores, full, budget, max(1, budget // 2))
        self.manager.drop_blocks(self.seq_id, drop)
        gone = set(drop)
        keep = [i for i in range(len(self.positions)) if i // bs not in gone]
        self.positions = [self.positions[i] for i in keep]
        self.token_scores = self.token_scores[keep]
        self.manager.check_integrity()
        return drop

    # ------------------------------------------------------------------ storing and attending
    def _store(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """Write k, v (N, nkv, hs) into ``slots``: the store kernel ("triton"), or one indexed copy
        (torch; the same numbers as ``store_kvcache_ref`` / ``store_kvcache_quant_ref``, whose loop
        over tokens is slow for a 300-token prompt)."""
        p = self.pool
        if self.backend == "triton":
            if isinstance(p, QuantizedKVPool):
                p.store(layer, k, v, slots, "triton")
                return
            from .. import kernels as K

            K.store_kvcache(k, v, p.k_cache[layer], p.v_cache[layer], slots)
            return
        nkv, hs = k.shape[1], k.shape[2]
        if isinstance(p, QuantizedKVPool):
            from ..kernels.reference import quantize_kv_ref

            for x, cache, scale in ((k, p.k_cache, p.k_scale), (v, p.v_cache, p.v_scale)):
                xq, xs = quantize_kv_ref(x, p.kv_dtype)                    # (N, nkv, hs), (N, nkv)
                cache[layer].view(-1, nkv, hs)[slots] = xq
                scale[layer].view(-1, nkv)[slots] = xs
            return
        p.k_cache[layer].view(-1, nkv, hs)[slots] = k.to(p.k_cache.dtype)  # slot = block * bs + offset
        p.v_cache[layer].view(-1, nkv, hs)[slots] = v.to(p.v_cache.dtype)

    def _selected_blocks(self, q: torch.Tensor, k: torch.Tensor) -> list[int] | None:
        """Quest's blocks for this query (None: read everything)."""
        if self.config.method != "quest":
            return None
        k_min, k_max = block_key_minmax(k, self.block_size)
        return quest_select(quest_bounds(q, k_min, k_max), self.budget_blocks())

    def _attend_torch(self, layer: int, q: torch.Tensor, block_ids: list[int], n: int,
                      positions: torch.Tensor) -> torch.Tensor:
        """Attention of one query over the kept (or selected) slots, recording what it read."""
        k, v = self.pool.gather(layer, block_ids, n)                       # (n, nkv, hs), fp32 (dequantized)
        idx = torch.arange(n)
        blocks = self._selected_blocks(q[0], k)
        if blocks is not None:
            idx = torch.cat([torch.arange(b * self.block_size, min(n, (b + 1) * self.block_size)) for b in blocks])
        nkv, hs = k.shape[1], k.shape[2]
        qg = q[0].float().view(nkv, -1, hs)                                # (nkv, group, hs)
        probs = (torch.einsum("kgd,skd->kgs", qg, k[idx]) * self.scale).softmax(-1)   # (nkv, group, m)
        out = torch.einsum("kgs,skd->kgd", probs, v[idx])                 # (nkv, group, hs)
        rec = self.record
        self.token_scores.index_add_(0, idx, probs.sum((0, 1)).double())  # H2O's accumulated attention
        pos = positions[idx]                                               # (m,) original positions read
        rec.reads.index_add_(0, pos, torch.ones(len(idx), dtype=rec.reads.dtype))
        mass = rec.decode_mass.get(layer, torch.zeros(0))
        if mass.shape[0] < rec.reads.shape[0]:
            mass = torch.cat([mass, mass.new_zeros(rec.reads.shape[0] - mass.shape[0])])
        rec.decode_mass[layer] = mass.index_add_(0, pos, probs.mean((0, 1)))
        return out.reshape(1, -1, hs).to(q.dtype)                          # (1, nh, hs)

    def _attend_kernel(self, layer: int, q: torch.Tensor, block_ids: list[int], n: int) -> torch.Tensor:
        from .. import kernels as K

        table = torch.tensor([block_ids], dtype=torch.int32)
        ctx = torch.tensor([n], dtype=torch.int32)
        p = self.pool
        if isinstance(p, QuantizedKVPool):
            return K.quantized_decode_attention(q, p.k_cache[layer], p.v_cache[layer], p.k_scale[layer],
                                                p.v_scale[layer], table, ctx, self.scale)
        if self.config.method == "quest":
            k, _ = p.gather(layer, block_ids, n)
            blocks = self._selected_blocks(q[0], k)
            return K.selected_decode_attention(q, p.k_cache[layer], p.v_cache[layer], table, ctx,
                                               torch.tensor([blocks], dtype=torch.int32),
                                               torch.tensor([len(blocks)], dtype=torch.int32), self.scale)
        return K.paged_decode_attention(q, p.k_cache[layer], p.v_cache[layer], table, ctx, self.scale)
