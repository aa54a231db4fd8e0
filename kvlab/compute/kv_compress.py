"""Keep fewer tokens, or fewer bytes per token: KV compression as block-table operations.

Under dense attention every decode step reads every cached token's K and V. Three papers keep or
read fewer of them; each is here as its paper defines it, beside the variant a paged cache (or a
cheaper index) suggests, so that the lesson can measure both:

* **StreamingLLM** (Xiao et al. 2023, "Efficient Streaming Language Models with Attention
  Sinks", arXiv:2309.17453): keep the first blocks (the *attention sinks*) and a recent window;
  the middle blocks leave the table (``BlockManager.drop_blocks``) and go back to the pool.
  ``"streaming"`` (the paper, section 3.2, and its ``pos_shift`` code) gives RoPE positions
  *within the cache*: slot i is position i, the new query is the last slot. kvlab's pool stores K
  after RoPE (the kernels read it as it is), so when a drop moves a kept block up by d slots its
  keys are rotated by -d once (:func:`~kvlab.compute.model.apply_rope`; rotations compose), which
  gives the numbers of the paper's code, where K is stored before RoPE and rotated at 0..n-1 each
  step. ``"streaming-orig"`` (variant) keeps every token's original position instead.
* **H2O** (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of
  Large Language Models", arXiv:2306.14048): keep a recent window plus the *heavy hitters*, the
  tokens with the most accumulated attention. ``"h2o"`` (the paper): per layer and KV head, token
  by token, after every step (half the budget recent, half heavy hitters; a KV head's score is
  the attention its query heads gave). Different heads keep different tokens, so the paged pool
  can free a block only when no (layer, head) keeps any of its tokens; the kept bytes are those a
  per-head token cache (the paper's code) would hold. ``"h2o-block"`` (kvlab's adaptation): one
  score per block summed over layers and heads, whole blocks dropped from the table: what the
  paged cache can actually give back.
* **Quest** (Tang et al. 2024, "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
  Inference", arXiv:2406.10774): keep everything, but each decode step reads only the top-k
  pages (blocks) by an upper bound of q.k computed from each block's per-channel key min and max:
  ``bound = sum_d max(q_d * max_d, q_d * min_d)`` (>= q.k for every key of the block).
  ``"quest"`` (the paper): each KV head picks its own blocks (scored by the largest bound among
  its query heads), the first two layers stay dense. ``"quest-shared"`` (variant): one set of
  blocks for all heads of all layers (the bound's maximum over the heads): one top-k per layer
  instead of one per head, and a kernel that needs no per-head list, at a cost in quality that
  the lesson measures.

Plus fewer bytes per kept token: ``"int8"`` / ``"fp8"`` store K and V in one byte with a scale per
token and head (:class:`~kvlab.compute.kv_quant.QuantizedKVPool`).

:class:`CompressedDecoder` runs a model over one sequence with a :class:`CompressionConfig`:
``prefill`` the prompt (dense attention, recording the attention each key receives), then
``step`` a token at a time; after every step that fills a block (every step for ``"h2o"``) the
policy drops again. ``backend="torch"`` attends in plain torch (and records attention and reads
by position); ``"triton"`` runs kvlab.kernels' decode kernels (quantized, selected-block, paged;
not ``"h2o"``, whose per-head token masks no paged kernel reads).

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
from .model import apply_rope

__all__ = ["METHODS", "METHOD_KIND", "QUEST_DENSE_LAYERS", "CompressionConfig", "PrefillState", "streaming_drop",
           "h2o_drop", "h2o_keep_heads", "block_key_minmax", "quest_bounds", "quest_select", "quest_select_heads",
           "CompressedDecoder"]

METHODS = ("full", "streaming", "streaming-orig", "h2o", "h2o-block", "quest", "quest-shared", "int8", "fp8")
# which methods are a paper's as published, and which are variants of one (see the module docstring)
METHOD_KIND = {"full": "reference", "streaming": "paper", "streaming-orig": "variant", "h2o": "paper",
               "h2o-block": "variant", "quest": "paper", "quest-shared": "variant", "int8": "kvlab", "fp8": "kvlab"}
QUEST_DENSE_LAYERS = 2          # Quest leaves its first two layers dense (the paper, and its code's layer_id < 2)


@dataclass(frozen=True)
class CompressionConfig:
    """Which method, and how many tokens it may keep (streaming, h2o) or read per step (quest).

    ``budget_tokens`` and ``sink_tokens`` are rounded up to whole blocks (not by ``"h2o"``, which
    counts tokens). H2O keeps half its budget as the recent window (the paper's split), Quest
    always reads the newest block.
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

    @property
    def kind(self) -> str:
        """"paper", "variant", "reference" (the full cache) or "kvlab" (int8/fp8, kvlab's own scheme)."""
        return METHOD_KIND[self.method]


def streaming_drop(num_blocks: int, num_full: int, sink_blocks: int, window_blocks: int) -> list[int]:
    """StreamingLLM: the full logical blocks to drop so that the first ``sink_blocks`` and the last
    ``window_blocks`` remain (the partial last block, if any, is never dropped)."""
    keep = set(range(min(sink_blocks, num_blocks))) | set(range(max(0, num_blocks - window_blocks), num_blocks))
    return [i for i in range(num_full) if i not in keep]


def h2o_drop(block_scores: Sequence[float], num_full: int, budget_blocks: int, window_blocks: int) -> list[int]:
    """H2O at block level (kvlab's adaptation): keep the last ``window_blocks`` blocks plus the
    highest-scoring others, ``budget_blocks`` in all; return the full blocks to drop. Ties go to
    the earlier block."""
    n = len(block_scores)
    recent = set(range(max(0, n - window_blocks), n))
    others = sorted((i for i in range(n) if i not in recent), key=lambda i: (-float(block_scores[i]), i))
    keep = recent | set(others[:max(0, budget_blocks - len(recent))])
    return [i for i in range(num_full) if i not in keep]


def h2o_keep_heads(scores: torch.Tensor, keep: torch.Tensor, budget: int, window: int) -> torch.Tensor:
    """H2O as the paper: per (layer, KV head), the last ``window`` tokens plus the ``budget - window``
    kept others with the highest accumulated attention. scores (L, nkv, n) float, keep (L, nkv, n)
    bool -> the new keep mask (L, nkv, n); a head with at most ``budget`` kept tokens keeps them all.

    Example: one head, scores [5, 1, 4, 2, 9], all kept, budget 3, window 1 -> keeps 0, 2 and 4.
        >>> h2o_keep_heads(torch.tensor([[[5., 1, 4, 2, 9]]]), torch.ones(1, 1, 5, dtype=torch.bool), 3, 1).int().tolist()
        [[[1, 0, 1, 0, 1]]]
    """
    n = keep.shape[-1]
    recent = torch.zeros(n, dtype=torch.bool, device=keep.device)
    recent[max(0, n - window):] = True                                      # (n,)
    new = keep & recent                                                     # (L, nkv, n)
    heavy = min(budget - window, n)
    if heavy > 0:
        cand = scores.masked_fill(~keep | recent, float("-inf"))            # (L, nkv, n)
        top = cand.topk(heavy, dim=-1).indices                              # (L, nkv, heavy)
        new |= torch.zeros_like(keep).scatter_(-1, top, True) & keep & ~recent
    return new


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
    """The variant (``"quest-shared"``): one set of ``top_k`` blocks for every head, by the highest
    bound over all heads, always with the newest block; sorted. bounds (nh, nb).
    Example: bounds [[5, 1, 4, 0]], top_k 2 -> [0, 3]."""
    nb = bounds.shape[1]
    if top_k >= nb:
        return list(range(nb))
    score = bounds.max(dim=0).values.clone()                               # (nb,)
    score[-1] = float("inf")                                               # the block being written
    return sorted(torch.topk(score, top_k).indices.tolist())


def quest_select_heads(bounds: torch.Tensor, num_kv_heads: int, top_k: int) -> list[list[int]]:
    """The paper (``"quest"``): per KV head, the ``top_k`` blocks with the highest bound among that
    head's query heads (they read the same K/V), always with the newest block; each list sorted.
    bounds (nh, nb), query head h belongs to KV head h // (nh // num_kv_heads).

    Example: 2 query heads, 2 KV heads, top_k 2 -> head 0 picks block 0, head 1 block 1 (+ the newest).
        >>> quest_select_heads(torch.tensor([[5.0, 1, 4, 0], [0.0, 6, 1, 2]]), 2, 2)
        [[0, 3], [1, 3]]
    """
    nh, nb = bounds.shape
    if top_k >= nb:
        return [list(range(nb)) for _ in range(num_kv_heads)]
    score = bounds.reshape(num_kv_heads, nh // num_kv_heads, nb).amax(1)  # (nkv, nb)
    score[:, -1] = float("inf")                                            # the block being written
    return torch.topk(score, top_k, dim=-1).indices.sort(-1).values.tolist()


@dataclass(frozen=True)
class PrefillState:
    """What a dense prefill produced, to start other decoders from without running the model again
    (every method's prefill computes the same numbers; only what it keeps afterwards differs).

    kv: per layer (k, v), each (T, nkv, hs), K after RoPE at positions 0..T-1; received (T,):
    attention each key received (all layers and heads); received_heads (L, nkv, T): the same per
    layer and KV head (H2O's scores); last_row_mass: per layer (T,); logits (V,): the last token's.
    """

    kv: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    received: torch.Tensor
    received_heads: torch.Tensor
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

    ``positions[i]`` is the original position of the token in slot ``i`` of the table (its RoPE
    position too, except under ``"streaming"``, where slot i is RoPE position i);
    ``token_scores[i]`` the attention it has received over all layers and heads (``"h2o-block"``);
    ``head_keep`` / ``head_scores`` (L, nkv, slots): which slots each layer's KV head still keeps,
    and the attention they received (``"h2o"``). ``record.reads[p]`` counts the (layer, step)
    pairs in which position p's K and V were read during decode (a fraction when only some heads
    read it).
    """

    def __init__(self, model, config: CompressionConfig = CompressionConfig(), block_size: int = 16,
                 num_blocks: int = 256, backend: str = "torch") -> None:
        if backend not in ("torch", "triton"):
            raise ValueError(f"backend must be 'torch' or 'triton', got {backend!r}")
        if backend == "triton" and config.method == "h2o":
            raise ValueError("method 'h2o' keeps different tokens per layer and head, which no paged kernel reads; "
                             "use backend='torch', or 'h2o-block' (whole blocks) with the kernels")
        self.model, self.config, self.backend = model, config, backend
        if config.method in ("int8", "fp8"):
            self.pool = QuantizedKVPool.for_model(model, num_blocks, block_size, kv_dtype_by_name(config.method))
        else:
            self.pool = PagedKVPool.for_model(model, num_blocks, block_size)
        self.manager = BlockManager(num_blocks, block_size)
        self.seq_id = "S"
        self.positions: list[int] = []
        self.token_scores = torch.zeros(0, dtype=torch.float64)          # (kept,) attention received (h2o-block)
        L, nkv = model.config.num_hidden_layers, model.config.num_key_value_heads
        self.head_keep = torch.zeros(L, nkv, 0, dtype=torch.bool)       # (L, nkv, kept) h2o's per-head masks
        self.head_scores = torch.zeros(L, nkv, 0, dtype=torch.float64)  # (L, nkv, kept) h2o's per-head scores
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
        """Bytes of K and V this sequence keeps now: kept tokens x bytes per token; for ``"h2o"``,
        what a per-head token cache would hold (tokens kept per layer and head, summed)."""
        if self.config.method == "h2o":
            L, nkv = self.head_keep.shape[:2]
            return int(self.head_keep.sum()) * self.pool.bytes_per_token() // (L * nkv)
        return self.num_kept * self.pool.bytes_per_token()

    def pool_bytes(self) -> int:
        """Bytes of the pool's blocks this sequence's table holds (whole blocks)."""
        return len(self.manager.table(self.seq_id).block_ids) * self.block_size * self.pool.bytes_per_token()

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
        kv, rows, heads = [], [], []

        def attention(layer, q, k, v):                                     # q (T, nh, hs); k, v (T, nkv, hs)
            kv.append((k, v))
            nkv, hs = k.shape[1], k.shape[2]
            qg = q.float().view(T, nkv, -1, hs)                            # (T, nkv, group, hs)
            scores = torch.einsum("tkgd,skd->kgts", qg, k.float()) * self.scale                    # (nkv, g, T, T)
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            probs = scores.softmax(-1)
            heads.append(probs.sum((1, 2)))                                # (nkv, T) attention each key received
            rows.append(probs[:, :, -1].mean((0, 1)))                      # (T,) averaged over heads
            return torch.einsum("kgts,skd->tkgd", probs, v.float()).reshape(T, -1, hs).to(q.dtype)  # (T, nh, hs)

        ids = torch.tensor(list(token_ids), device=self.model.device)
        logits = self.model(ids, torch.arange(T, device=self.model.device), attention)             # (T, V)
        per_head = torch.stack(heads)                                      # (L, nkv, T)
        self.prefill_state = PrefillState(tuple(kv), per_head.sum((0, 1)), per_head, tuple(rows), logits[-1])
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
        self.head_scores = state.received_heads.double().clone()
        self.head_keep = torch.ones(self.head_scores.shape, dtype=torch.bool)
        self.record.last_row_mass = list(state.last_row_mass)
        self.compress()
        return state.logits

    @torch.no_grad()
    def step(self, token_id: int) -> torch.Tensor:
        """Feed one token at the next position; returns its logits (V,)."""
        (token_id,) = self._token_ids([token_id], "step token_id")
        pos = self.positions[-1] + 1 if self.positions else 0
        if self.manager.append(self.seq_id, 1):                            # the table is never shared here
            raise RuntimeError("unexpected copy-on-write in a private table")
        table = self.manager.table(self.seq_id)
        n = table.num_tokens
        slot = torch.tensor(table.slot_mapping(n - 1, n), dtype=torch.long)
        self.positions.append(pos)
        self.token_scores = torch.cat([self.token_scores, self.token_scores.new_zeros(1)])
        L, nkv = self.head_keep.shape[:2]
        self.head_keep = torch.cat([self.head_keep, self.head_keep.new_ones(L, nkv, 1)], -1)
        self.head_scores = torch.cat([self.head_scores, self.head_scores.new_zeros(L, nkv, 1)], -1)
        rec = self.record
        if rec.reads.shape[0] <= pos:
            rec.reads = torch.cat([rec.reads, rec.reads.new_zeros(pos + 1 - rec.reads.shape[0])])
        positions = torch.tensor(self.positions)                           # (n,) original position of each slot
        rope_pos = n - 1 if self.config.method == "streaming" else pos    # the paper's: the position in the cache

        def attention(layer, q, k, v):                                     # q (1, nh, hs); k, v (1, nkv, hs)
            self._store(layer, k, v, slot)
            if self.backend == "triton":
                return self._attend_kernel(layer, q, table.block_ids, n)
            return self._attend_torch(layer, q, table.block_ids, n, positions)

        logits = self.model(torch.tensor([token_id], device=self.model.device),
                            torch.tensor([rope_pos], device=self.model.device), attention)[-1]
        if n % self.block_size == 0 or self.config.method == "h2o":
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
        """Apply the method's rule now; returns the logical blocks dropped from the table."""
        m, bs = self.config.method, self.block_size
        if m == "h2o":
            return self._compress_heads()
        table = self.manager.table(self.seq_id)
        nb, full, budget = len(table.block_ids), table.num_full_blocks, self.budget_blocks()
        if m not in ("streaming", "streaming-orig", "h2o-block") or nb <= budget:
            return []
        if m == "h2o-block":
            scores = [float(self.token_scores[i * bs:(i + 1) * bs].sum()) for i in range(nb)]
            return self._drop(h2o_drop(scores, full, budget, max(1, budget // 2)))
        sinks = min(-(-self.config.sink_tokens // bs), budget - 1)
        return self._drop(streaming_drop(nb, full, sinks, budget - sinks))

    def _compress_heads(self) -> list[int]:
        """H2O as the paper: each (layer, KV head) evicts tokens down to the budget; then the blocks
        no head keeps any token of leave the table (the only memory the paged pool gets back)."""
        budget = self.config.budget_tokens
        self.head_keep = h2o_keep_heads(self.head_scores, self.head_keep, budget, max(1, budget // 2))
        bs, full = self.block_size, self.manager.table(self.seq_id).num_full_blocks
        used = self.head_keep.any(1).any(0)                               # (slots,) kept by some head
        return self._drop([i for i in range(full) if not used[i * bs:(i + 1) * bs].any()])

    def _drop(self, drop: list[int]) -> list[int]:
        """Drop these full logical blocks from the table and every per-slot record; under
        ``"streaming"`` re-rotate the keys that moved to their new slots' positions."""
        if not drop:
            return []
        bs = self.block_size
        self.manager.drop_blocks(self.seq_id, drop)
        gone = set(drop)
        keep = [i for i in range(len(self.positions)) if i // bs not in gone]
        self.positions = [self.positions[i] for i in keep]
        self.token_scores = self.token_scores[keep]
        self.head_keep, self.head_scores = self.head_keep[..., keep], self.head_scores[..., keep]
        self.manager.check_integrity()
        if self.config.method == "streaming":
            self._rerotate_keys(keep)
        return drop

    def _rerotate_keys(self, old_slots: list[int]) -> None:
        """Slot j now holds the token that was in slot ``old_slots[j]``, its K rotated for that old
        slot: rotate it by j - old_slots[j] (RoPE's rotations compose: R(a) R(b) = R(a + b)), so
        every key is rotated for its slot, as the paper's code does at each step from K before RoPE."""
        delta = torch.arange(len(old_slots)) - torch.tensor(old_slots)     # (n,) <= 0
        moved = delta.nonzero().flatten()                                  # (m,)
        if not len(moved):
            return
        table = self.manager.table(self.seq_id)
        slots = torch.tensor(table.slot_mapping(0, table.num_tokens), dtype=torch.long)[moved]   # (m,)
        cos, sin = self.model.rope(delta[moved].to(self.model.device))    # (m, hs)
        p = self.pool
        for layer in range(p.num_layers):
            kc = p.k_cache[layer].view(-1, p.num_kv_heads, p.head_dim)    # (slots, nkv, hs)
            kc[slots] = apply_rope(kc[slots].float(), cos, sin).to(kc.dtype)

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

    def _selected_blocks(self, layer: int, q: torch.Tensor, k: torch.Tensor) -> list[list[int]] | None:
        """Quest's blocks for this query, one list per KV head (None: read everything). q (nh, hs),
        k (n, nkv, hs): the paper's per-head choice from layer 2 on, or the variant's one set."""
        m, nkv = self.config.method, k.shape[1]
        if m == "quest-shared":
            k_min, k_max = block_key_minmax(k, self.block_size)
            return [quest_select(quest_bounds(q, k_min, k_max), self.budget_blocks())] * nkv
        if m != "quest" or layer < QUEST_DENSE_LAYERS:
            return None
        k_min, k_max = block_key_minmax(k, self.block_size)
        return quest_select_heads(quest_bounds(q, k_min, k_max), nkv, self.budget_blocks())

    def _read_mask(self, layer: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
        """(nkv, n) bool: which slots each KV head reads in this step (None: all of them)."""
        if self.config.method == "h2o":
            return self.head_keep[layer]
        blocks = self._selected_blocks(layer, q, k)
        if blocks is None:
            return None
        n, bs = k.shape[0], self.block_size
        mask = torch.zeros(len(blocks), -(-n // bs) * bs, dtype=torch.bool)                  # (nkv, blocks x bs)
        mask.view(len(blocks), -1, bs)[torch.arange(len(blocks))[:, None], torch.tensor(blocks)] = True
        return mask[:, :n]

    def _attend_torch(self, layer: int, q: torch.Tensor, block_ids: list[int], n: int,
                      positions: torch.Tensor) -> torch.Tensor:
        """Attention of one query over the kept (or selected) slots of each KV head, recording what
        it read and the attention each slot received."""
        k, v = self.pool.gather(layer, block_ids, n)                       # (n, nkv, hs), fp32 (dequantized)
        nkv, hs = k.shape[1], k.shape[2]
        qg = q[0].float().view(nkv, -1, hs)                                # (nkv, group, hs)
        scores = torch.einsum("kgd,skd->kgs", qg, k) * self.scale          # (nkv, group, n)
        mask = self._read_mask(layer, q[0], k)                             # (nkv, n) or None
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        probs = scores.softmax(-1)                                         # (nkv, group, n), 0 where not read
        out = torch.einsum("kgs,skd->kgd", probs, v)                      # (nkv, group, hs)
        self.token_scores += probs.sum((0, 1)).double()                    # h2o-block's accumulated attention
        self.head_scores[layer] += probs.sum(1).double()                   # h2o's, per KV head
        rec = self.record
        read = torch.ones(n) if mask is None else mask.float().mean(0)     # (n,) share of KV heads that read it
        rec.reads.index_add_(0, positions, read.to(rec.reads.dtype))
        mass = rec.decode_mass.get(layer, torch.zeros(0))
        if mass.shape[0] < rec.reads.shape[0]:
            mass = torch.cat([mass, mass.new_zeros(rec.reads.shape[0] - mass.shape[0])])
        rec.decode_mass[layer] = mass.index_add_(0, positions, probs.mean((0, 1)))
        return out.reshape(1, -1, hs).to(q.dtype)                          # (1, nh, hs)

    def _attend_kernel(self, layer: int, q: torch.Tensor, block_ids: list[int], n: int) -> torch.Tensor:
        from .. import kernels as K

        table = torch.tensor([block_ids], dtype=torch.int32)
        ctx = torch.tensor([n], dtype=torch.int32)
        p = self.pool
        if isinstance(p, QuantizedKVPool):
            return K.quantized_decode_attention(q, p.k_cache[layer], p.v_cache[layer], p.k_scale[layer],
                                                p.v_scale[layer], table, ctx, self.scale)
        if self.config.method in ("quest", "quest-shared"):
            k, _ = p.gather(layer, block_ids, n)
            blocks = self._selected_blocks(layer, q[0], k)                 # per KV head, or None: dense
            if blocks is not None:
                sel = torch.tensor([blocks], dtype=torch.int32)            # (1, nkv, k)
                num = torch.full((1, len(blocks)), len(blocks[0]), dtype=torch.int32)
                return K.selected_decode_attention(q, p.k_cache[layer], p.v_cache[layer], table, ctx, sel, num,
                                                   self.scale)
        return K.paged_decode_attention(q, p.k_cache[layer], p.v_cache[layer], table, ctx, self.scale)
