"""One forward pass over the paged K/V pool: its inputs, built in one place, and the pass itself.

    runner = ModelRunner(model, kv_pool, attention_backend="torch")
    batch = runner.prepare_prefill(seqs)      # or prepare_decode(seqs), or prepare(...) from plain lists
    logits = runner.run(batch)                # (num_seqs, V): each sequence's last new token

Sequence ``r`` of a batch feeds its new tokens: those at positions ``prefix_lens[r] ..
context_lens[r] - 1`` (``extend_lens[r]`` of them; the first ``prefix_lens[r]`` are already
in the cache: a radix hit, or the tokens decoded so far). Everything the attention kernels need
is derived here, from the sequences' block tables, which are read and never changed (the
scheduler reserved the slots through the cache manager first)::

    input_ids     (N,)            the new tokens of every sequence, packed
    positions     (N,)            their positions (RoPE)
    slot_mapping  (N,)            where their K/V go: block_table[pos // bs] * bs + pos % bs
    block_tables  (B, max_blocks) each sequence's blocks, padded with 0
    context_lens  (B,)            tokens each sequence attends over after this pass
    prefix_lens, extend_lens (B,) cached / new tokens per sequence
    *_lens_cpu                    the same lengths as host tuples: the kernels size their grids and
                                  split-K plans from these, so a step makes no device-to-host copy

``run`` stores the new K/V with ``store_kvcache`` and attends with ``paged_decode_attention``
when every sequence adds one token (``forward_mode == "decode"``), ``extend_attention``
otherwise, then returns the logits of each sequence's last new token. Sampling is
``kvlab.compute.sampler``'s job. The index tensors are built on the host and uploaded without a
sync (``kvlab.kernels.plan.upload_ints``); ``kernel_checks=True`` makes the kernels re-validate
every input against the device tensors (tests), ``kernel_checks=False`` (the default) trusts the
lengths the runner computed itself.

Mirrors nano-vllm ``nanovllm/engine/model_runner.py`` (``prepare_prefill``, ``prepare_decode``,
``prepare_block_tables``, ``run``) and SGLang ``forward_batch_info.py`` (``ForwardBatch``,
``extend_prefix_lens``, ``extend_seq_lens``, ``out_cache_loc`` = ``slot_mapping``). Differences:
nano-vllm's ``cu_seqlens`` are per-sequence lengths here; the model gets the cache through an
attention callback, not a global context; no CUDA graphs.

Example (block size 4; a 6-token prompt whose first 4 tokens are cached in block 3):
    >>> from kvlab.compute.loader import load_bundled
    >>> from kvlab.compute.kv_tensors import PagedKVPool
    >>> model, tok = load_bundled()
    >>> runner = ModelRunner(model, PagedKVPool.for_model(model, num_blocks=8, block_size=4))
    >>> b = runner.prepare([7, 8], block_tables=[[3, 5]], prefix_lens=[4], extend_lens=[2])
    >>> b.positions.tolist(), b.slot_mapping.tolist(), b.context_lens.tolist(), b.forward_mode
    ([4, 5], [20, 21], [6], 'extend')
    >>> runner.run(b).shape == (1, model.config.vocab_size)
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from collections import abc

import torch

from ..memory.block_table import slot_mapping
from .kv_tensors import PagedKVPool, kernel_ops
from .model import causal_attention, decode_attention
from .sequence import Sequence

__all__ = ["ForwardBatch", "ModelRunner", "block_tables_tensor", "fresh_prefill_attention", "paged_decode_sdpa"]


def upload_ints(rows, device, dtype=torch.int32) -> torch.Tensor:
    """``kvlab.kernels.plan.upload_ints`` (host ints to ``device`` without a sync), imported when
    first used so that importing kvlab.compute does not load Triton."""
    from ..kernels.plan import upload_ints as upload

    return upload(rows, device, dtype)


def block_tables_tensor(tables: abc.Sequence[abc.Sequence[int]], device="cpu") -> torch.Tensor:
    """Ragged block tables -> (num_seqs, max_blocks) int32, padded with 0 (ignored past each length)."""
    width = max(1, max((len(t) for t in tables), default=0))
    rows = [list(t) + [0] * (width - len(t)) for t in tables]
    return upload_ints(rows, device) if rows else torch.zeros((0, width), dtype=torch.int32, device=device)


def fresh_prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            extend_lens: abc.Sequence[int]) -> torch.Tensor:
    """Causal attention of packed sequences that have nothing cached: each attends only over its
    own new tokens. q (N, nh, hs), k/v (N, nkv, hs), extend_lens summing to N -> (N, nh, hs).

    Example: extend_lens [3, 2] -> tokens 0-2 attend among themselves, tokens 3-4 among themselves.
    """
    out, start = [], 0
    for e in extend_lens:
        sl = slice(start, start + e)
        out.append(causal_attention(q[None, sl], k[None, sl], v[None, sl])[0])   # (e, nh, hs)
        start += e
    return torch.cat(out) if len(out) > 1 else out[0]                              # (N, nh, hs)


def paged_decode_sdpa(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                      context_lens: abc.Sequence[int]) -> torch.Tensor:
    """Paged decode attention in torch: q (B, nh, hs), caches (NB, bs, nkv, hs), block tables
    (B, max_blocks), host context lengths -> (B, nh, hs). Sequence b reads its first
    ``context_lens[b]`` tokens through its block table (as ``paged_decode_attention_ref``).

    Example: block_size 4, table [2, 0], length 5 -> tokens 0-3 of block 2, then token 0 of block 0.
    """
    bs = k_cache.shape[1]
    out = torch.empty_like(q)                                                     # (B, nh, hs)
    for b, n in enumerate(context_lens):
        blocks = block_tables[b, :-(-n // bs)].long()                             # (used blocks,)
        k = k_cache.index_select(0, blocks).flatten(0, 1)[:n]                     # (n, nkv, hs): one copy
        v = v_cache.index_select(0, blocks).flatten(0, 1)[:n]                     # (faster than k_cache[blocks])
        out[b] = decode_attention(q[b], k, v)                                     # (nh, hs)
    return out


@dataclass(frozen=True)
class ForwardBatch:
    """The inputs of one forward pass (see the module docstring). N new tokens, B sequences."""

    forward_mode: str            # "decode" (every sequence adds one token) or "extend"
    input_ids: torch.Tensor      # (N,) long
    positions: torch.Tensor      # (N,) long
    slot_mapping: torch.Tensor   # (N,) long
    block_tables: torch.Tensor   # (B, max_blocks) int32
    context_lens: torch.Tensor   # (B,) int32
    prefix_lens: torch.Tensor    # (B,) int32
    extend_lens: torch.Tensor    # (B,) int32
    last_rows: torch.Tensor      # (B,) long: the row of each sequence's last new token
    context_lens_cpu: tuple[int, ...] = ()   # the same lengths on the host
    prefix_lens_cpu: tuple[int, ...] = ()
    extend_lens_cpu: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]


class ModelRunner:
    """Runs ``model`` over ``kv_pool`` with the ``attention_backend`` ops ("torch" references or
    "triton" kernels)."""

    def __init__(self, model, kv_pool: PagedKVPool, attention_backend: str = "torch", kernel_checks: bool = False) -> None:
        self.ops = kernel_ops(attention_backend)
        self.model = model
        self.kv_pool = kv_pool
        self.attention_backend = attention_backend
        self.kernel_checks = kernel_checks

    # ------------------------------------------------------------------ inputs
    def prepare(self, token_ids: abc.Sequence[int], block_tables: abc.Sequence[abc.Sequence[int]],
                prefix_lens: abc.Sequence[int], extend_lens: abc.Sequence[int]) -> ForwardBatch:
        """The batch for plain lists: sequence r feeds ``extend_lens[r]`` tokens of ``token_ids``
        (packed) after ``prefix_lens[r]`` cached ones, through the blocks ``block_tables[r]``
        (checked here: plain lists come from outside the block manager)."""
        bs = self.kv_pool.block_size
        if not len(block_tables) == len(prefix_lens) == len(extend_lens) >= 1:
            raise ValueError(f"{len(block_tables)} block tables, {len(prefix_lens)} prefix and "
                             f"{len(extend_lens)} extend lengths: need one of each per sequence")
        if sum(extend_lens) != len(token_ids) or min(extend_lens) < 1:
            raise ValueError(f"extend_lens {list(extend_lens)} must be >= 1 and add up to the {len(token_ids)} tokens")
        slots: list[int] = []
        for r, (table, p, e) in enumerate(zip(block_tables, prefix_lens, extend_lens)):
            if p + e > len(table) * bs:
                raise ValueError(f"sequence {r}: positions up to {p + e - 1} need more than its {len(table)} block(s)")
            slots.extend(slot_mapping(table, p, p + e, bs))
        return self._batch(token_ids, block_tables, prefix_lens, extend_lens, slots)

    def _batch(self, token_ids: abc.Sequence[int], block_tables: abc.Sequence[abc.Sequence[int]],
               prefix_lens: abc.Sequence[int], extend_lens: abc.Sequence[int], slots: list[int]) -> ForwardBatch:
        """The batch, from lengths and ``slots`` (one per new token) already checked."""
        dev = self.model.device
        positions = [q for p, e in zip(prefix_lens, extend_lens) for q in range(p, p + e)]
        ctx = tuple(p + e for p, e in zip(prefix_lens, extend_lens))
        pre, ext = tuple(prefix_lens), tuple(extend_lens)
        last, acc = [], 0
        for e in ext:
            acc += e
            last.append(acc - 1)
        return ForwardBatch(
            forward_mode="decode" if max(ext) == 1 else "extend",
            input_ids=upload_ints(list(token_ids), dev, torch.long),   # (N,)
            positions=upload_ints(positions, dev, torch.long),         # (N,)
            slot_mapping=upload_ints(slots, dev, torch.long),          # (N,)
            block_tables=block_tables_tensor(block_tables, dev),       # (B, max_blocks)
            context_lens=upload_ints(list(ctx), dev),                  # (B,)
            prefix_lens=upload_ints(list(pre), dev),                   # (B,)
            extend_lens=upload_ints(list(ext), dev),                   # (B,)
            last_rows=upload_ints(last, dev, torch.long),              # (B,)
            context_lens_cpu=ctx, prefix_lens_cpu=pre, extend_lens_cpu=ext,
        )

    def prepare_prefill(self, seqs: abc.Sequence[Sequence]) -> ForwardBatch:
        """Each sequence feeds every token past ``num_computed_tokens`` (a prompt's unmatched
        suffix; after a preemption, prompt + outputs). A batch in which each sequence computes
        one token runs the decode kernel, which gives the same numbers."""
        tokens: list[int] = []
        for s in seqs:
            ids = self._table_holds(s)
            if not 0 <= s.num_computed_tokens < len(ids):
                raise ValueError(f"{s.seq_id}: {s.num_computed_tokens} of {len(ids)} tokens computed: nothing to prefill")
            tokens += ids[s.num_computed_tokens:]
        return self._from_tables(tokens, seqs, [s.num_computed_tokens for s in seqs])

    def prepare_decode(self, seqs: abc.Sequence[Sequence]) -> ForwardBatch:
        """Each sequence feeds its last token (every earlier one is in the cache)."""
        for s in seqs:
            self._table_holds(s)
            if s.num_computed_tokens != s.num_tokens - 1:
                raise ValueError(f"{s.seq_id}: {s.num_computed_tokens} of {s.num_tokens} tokens computed; "
                                 f"decode needs all but the last")
        return self._from_tables([s.last_token_id for s in seqs], seqs, [s.num_tokens - 1 for s in seqs])

    def _from_tables(self, tokens: list[int], seqs: abc.Sequence[Sequence], prefix_lens: list[int]) -> ForwardBatch:
        """The batch of ``seqs``, each feeding its tokens past ``prefix_lens``: the slots come from
        each sequence's :class:`~kvlab.memory.block_table.BlockTable`, whose ids its block manager
        checked (they are not checked again)."""
        if not seqs:
            raise ValueError("no sequences: a batch needs at least one")
        extend_lens = [s.num_tokens - p for s, p in zip(seqs, prefix_lens)]
        slots = [slot for s, p in zip(seqs, prefix_lens) for slot in s.block_table.slot_mapping(p, s.num_tokens)]
        return self._batch(tokens, [s.block_table.block_ids for s in seqs], prefix_lens, extend_lens, slots)

    @staticmethod
    def _table_holds(s: Sequence) -> list[int]:
        """``s.token_ids``, after checking that its block table has a slot for each."""
        ids = s.token_ids
        if s.block_table is None or s.block_table.num_tokens < len(ids):
            have = "no block table" if s.block_table is None else f"{s.block_table.num_tokens} slots"
            raise ValueError(f"{s.seq_id}: {len(ids)} tokens but {have}: reserve slots before a forward pass")
        return ids

    # ------------------------------------------------------------------ the pass
    @torch.no_grad()
    def run(self, batch: ForwardBatch) -> torch.Tensor:
        """Store the new tokens' K/V, attend through the block tables; returns logits (B, V) of
        each sequence's last new token (fp32)."""
        ops, pool, check = self.ops, self.kv_pool, self.kernel_checks
        decode = batch.forward_mode == "decode"
        # A fresh prefill (nothing cached before the new tokens) on the torch backend attends over
        # the K/V it has just stored, with torch's fused causal SDPA, as vLLM's prefill runs
        # flash-attention on the new K/V; the Triton backend keeps its extend kernel (the lessons').
        fresh = (not decode and self.attention_backend == "torch" and len(batch.prefix_lens_cpu) > 0
                 and not any(batch.prefix_lens_cpu) and len(batch.extend_lens_cpu) == len(batch.prefix_lens_cpu))
        # Decode on the torch backend: each sequence's K/V gathered through its block table, then
        # torch's fused SDPA with the GQA group as the query axis (the *_ref reference repeats K/V
        # per query head and does the softmax by hand: same numbers, slower).
        torch_decode = decode and self.attention_backend == "torch" and \
            len(batch.context_lens_cpu) == batch.block_tables.shape[0]

        def attention(layer: int, q, k, v):                                   # q (N, nh, hs); k, v (N, nkv, hs)
            kc, vc = pool.k_cache[layer], pool.v_cache[layer]                 # (NB, bs, nkv, hs)
            ops.store_kvcache(k, v, kc, vc, batch.slot_mapping, check=check)
            if decode and torch_decode:
                return paged_decode_sdpa(q, kc, vc, batch.block_tables, batch.context_lens_cpu)  # (N, nh, hs)
            if decode:
                return ops.paged_decode_attention(q, kc, vc, batch.block_tables, batch.context_lens,  # (N, nh, hs)
                                                  context_lens_cpu=batch.context_lens_cpu, check=check)
            if fresh:
                return fresh_prefill_attention(q, k, v, batch.extend_lens_cpu)  # (N, nh, hs)
            return ops.extend_attention(q, kc, vc, batch.block_tables, batch.prefix_lens, batch.extend_lens,
                                        prefix_lens_cpu=batch.prefix_lens_cpu, extend_lens_cpu=batch.extend_lens_cpu,
                                        check=check)

        return self.model(batch.input_ids, batch.positions, attention, logits_rows=batch.last_rows)  # (B, V)
