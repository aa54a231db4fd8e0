"""Launch plans for the attention kernels: the grid, query rows per program, split-K, and why.

Mirrors SGLang's ``triton_backend.py`` (``get_num_kv_splits``: the number of KV splits is
chosen at run time from the batch, the heads and the sequence lengths against the device's SM
count) and the row cap of its grouped decode kernel (``BLOCK_H = 16`` in
``triton_ops/decode_attention.py``). Differences: kvlab counts work in tiles of ``TILE_N``
tokens, and one batch-wide number, ``split_tiles``, gives every sequence its own split count
inside the kernel (``splits = ceil(tiles / split_tiles)``), so no per-sequence tensor is
written, and nothing is copied to the host.

The split rule (decode). ``base`` programs = sequences x KV heads x row chunks, each walking its
whole context. On a GPU the target is ``4 x SMs`` programs (about one full wave of a
memory-bound kernel); the fair share is ``ceil(total tiles / target)`` tiles a program. If the
longest context is at most 1.5x the fair share, nothing is split (the batch already fills the
GPU evenly, and split-K would only add the combine pass); otherwise contexts are cut into
pieces of ``split_tiles = max(2, fair share)`` tiles, at most 64 splits. In the Triton
interpreter programs run one after another, so the plan never splits there unless asked
(deterministic and cheap). ``num_splits=S`` forces ``min(S, tiles)`` splits per sequence.

Rows per program. A decode program holds the query heads of one KV head, padded to 16 rows
(the GPU's smallest ``tl.dot``), and never more than 16: a group of 64 query heads is four
programs of 16 rows (SGLang's ``BLOCK_H``), so no program pads to 64. head_dim is padded to a
power of two (80 and 96 run as 128-wide tiles with masks).

Example (an H100/H200 has 132 SMs; batch 1 at 32k context, 32 query / 8 KV heads, head_dim 128)::

    >>> import torch
    >>> p = plan_decode(1, 32, 8, 128, 16, torch.float16, context_lens=[32768], num_sms=132)
    >>> p.grid, p.num_splits, p.split_tiles, p.rows_per_program
    ((1, 8, 64), 64, 8, 16)
    >>> plan_decode(64, 32, 8, 128, 16, torch.float16, context_lens=[4096] * 64, num_sms=132).num_splits
    1
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property

import torch

from ._checks import next_power_of_two
from ._mode import KERNEL_MODE

MAX_ROWS = 16          # query rows a decode program holds (SGLang's BLOCK_H); extend: heads per row block
MAX_SPLITS = 64        # the most splits the plan chooses for one sequence
MIN_SPLIT_TILES = 2    # a split walks at least this many tiles (its fixed cost: a partial store + the combine)
PROGRAMS_PER_SM = 4    # resident decode programs an SM holds (registers: ~120 x 128 threads each)
SLACK = 1.5            # the longest program may do this many fair shares before contexts are split


def tile_tokens(block_size: int) -> int:
    """Tokens per decode loop iteration: whole blocks, at least 64 tokens. Example: 4 -> 64, 128 -> 128."""
    return max(block_size, 64)


def attention_meta(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Compile-time constants shared by the decode and extend kernels.

    Example: 32 query heads, 8 KV heads, head_dim 80, fp16 ->
    QUERIES_PER_KV 4, HEAD_DIM 80, BLOCK_D 128 (padded, masked), USE_DOT True, DOT_PRECISION "tf32" (ignored for fp16).
    """
    block_d = next_power_of_two(head_dim)
    return dict(
        QUERIES_PER_KV=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        USE_DOT=block_d >= 16,  # tensor cores; the GPU compiler needs every dot dimension >= 16
        # fp32 inputs: exact fp32 products (no TF32 rounding), so GPU results match the reference.
        DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
    )


def group_rows(group: int, use_dot: bool) -> tuple[int, int]:
    """(query heads a program holds, programs per KV head) for a GQA group.

    With tl.dot a program holds 16 rows (the GPU's minimum dot size; padding rows compute on
    zeros and are never stored), without it the group padded to a power of two, capped at 16.
    Example: group 4 -> (16, 1); group 64 -> (16, 4); group 2 without dot -> (2, 1).
    """
    rows = MAX_ROWS if use_dot else min(MAX_ROWS, next_power_of_two(group))
    return rows, -(-group // rows)


def decode_meta(num_heads, num_kv_heads, head_dim, block_size, num_splits, dtype) -> dict:
    """All constexprs of paged_decode_kernel for one configuration (used by the compile check too).

    NUM_SPLITS is the grid's split axis: the most splits any sequence of the batch gets.
    Example: 64 query heads, 1 KV head, head_dim 128 -> BLOCK_G 16, HEAD_CHUNKS 4.
    """
    meta = attention_meta(num_heads, num_kv_heads, head_dim, dtype)
    rows, chunks = group_rows(meta["QUERIES_PER_KV"], meta["USE_DOT"])
    return dict(meta, BLOCK_G=rows, HEAD_CHUNKS=chunks, BLOCK_SIZE=block_size, TILE_N=tile_tokens(block_size),
                NUM_SPLITS=num_splits)


def extend_meta(num_heads, num_kv_heads, head_dim, block_size, dtype) -> dict:
    """All constexprs of extend_attention_kernel (used by the compile check too).

    A program holds BLOCK_M new tokens x BLOCK_G query heads (at most 16 heads: a bigger group
    is split over HEAD_CHUNKS programs) against TILE_N keys: 64 rows x 64 keys for fp16/bf16
    with tl.dot (>= 16 each, as the GPU needs); 32 x 32 for fp32 or a small head_dim, whose
    tiles take more registers. Example: group 4, fp16 -> BLOCK_G 4, BLOCK_M 16, TILE_N 64;
    group 64 -> BLOCK_G 16, HEAD_CHUNKS 4, BLOCK_M 4. SKIP_FULL_MASK (the unmasked loop over wholly
    visible key tiles) is on for those tensor-core configurations only.
    """
    meta = attention_meta(num_heads, num_kv_heads, head_dim, dtype)
    heads = min(MAX_ROWS, next_power_of_two(meta["QUERIES_PER_KV"]))
    big = meta["USE_DOT"] and dtype != torch.float32
    rows, keys = (64, 64) if big else (32, 32)
    return dict(meta, BLOCK_G=heads, HEAD_CHUNKS=-(-meta["QUERIES_PER_KV"] // heads), BLOCK_SIZE=block_size,
                BLOCK_M=max(1, rows // heads), TILE_N=max(block_size, keys), SKIP_FULL_MASK=big)


@functools.lru_cache(maxsize=None)
def device_sm_count(device_index: int = 0) -> int | None:
    """The GPU's SM count (132 on an H100/H200), or None in the interpreter (no torch.cuda call there)."""
    if KERNEL_MODE != "native":
        return None
    try:
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    except Exception:  # native mode forced for compile-only checks on a machine without a GPU
        return 132


def seq_splits(context_len: int, split_tiles: int, num_splits: int, tile_n: int) -> int:
    """Splits of one sequence, exactly as the kernel computes them (``split_range``).

    Example: 1100 tokens in 64-token tiles = 18 tiles; pieces of 8 tiles -> 3 splits (6, 6, 6 tiles).
    """
    tiles = -(-context_len // tile_n)
    return max(1, min(-(-tiles // split_tiles), num_splits))


@dataclass(frozen=True)
class DecodePlan:
    """How one paged_decode_attention call runs: grid, rows per program, splits, and why."""

    num_seqs: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    max_context_len: int         # exact (host lengths known) or the block table's capacity
    lens_known: bool             # context_lens were given as host ints
    num_splits: int              # grid axis 2: the most splits any sequence gets (NUM_SPLITS)
    split_tiles: int             # tiles per split, batch-wide (a run-time kernel argument)
    num_sms: int | None          # None in the interpreter
    reason: str
    context_lens: tuple[int, ...] | None = None

    @cached_property
    def meta(self) -> dict:
        dtype = getattr(torch, self.dtype)
        return decode_meta(self.num_heads, self.num_kv_heads, self.head_dim, self.block_size, self.num_splits, dtype)

    @property
    def rows_per_program(self) -> int:
        return self.meta["BLOCK_G"]

    @property
    def head_chunks(self) -> int:
        return self.meta["HEAD_CHUNKS"]

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.num_seqs, self.num_kv_heads * self.head_chunks, self.num_splits)

    @property
    def seq_splits(self) -> list[int] | None:
        """Splits per sequence (None when the lengths were not given as host ints)."""
        if self.context_lens is None:
            return None
        tile = tile_tokens(self.block_size)
        return [seq_splits(n, self.split_tiles, self.num_splits, tile) for n in self.context_lens]

    def _per_sequence(self) -> str:
        splits = self.seq_splits
        if splits is None:
            return " (lengths not given as host ints: each sequence's count is set in the kernel)"
        if len(splits) <= 16:
            return f"; per sequence {splits}"
        return f"; per sequence {min(splits)} to {max(splits)}, first 16 {splits[:16]}"

    def explain(self) -> str:
        """A few lines: grid, rows per program, head_dim padding, splits and the reason."""
        m = self.meta
        group = m["QUERIES_PER_KV"]
        lines = [
            f"paged decode: {self.num_seqs} seqs x {self.num_heads} query heads / {self.num_kv_heads} KV heads "
            f"(group {group}), head_dim {self.head_dim}, block {self.block_size}, {self.dtype}",
            f"grid {self.grid} = (sequences, KV heads x {self.head_chunks} row chunk(s), splits)",
            f"rows per program {m['BLOCK_G']} (group {group} padded, at most {MAX_ROWS}); "
            f"head_dim tile {m['BLOCK_D']}" + (" (padded, masked)" if m["BLOCK_D"] != self.head_dim else "")
            + f"; {m['TILE_N']} tokens per loop iteration; tl.dot: {m['USE_DOT']}",
            f"splits: grid {self.num_splits}, {self.split_tiles} tile(s) per split" + self._per_sequence(),
            f"why: {self.reason}",
        ]
        return "\n".join(lines)


def plan_decode(num_seqs: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
                dtype: torch.dtype, *, context_lens=None, max_context_len: int | None = None,
                num_splits: int | None = None, num_sms: int | None = None) -> DecodePlan:
    """Choose the decode grid and split-K for a batch (no device access, no host sync).

    context_lens: the lengths as host ints, if known; else ``max_context_len`` (e.g. the block
    table's capacity) bounds them. num_splits: None = choose (see the module docstring), an int
    = force. num_sms: None = this device's (the interpreter: none, so no split).
    """
    lens = None if context_lens is None else tuple(context_lens)
    max_len = max(lens, default=1) if lens is not None else max(1, max_context_len or 1)
    tile = tile_tokens(block_size)
    max_tiles = -(-max_len // tile)
    sms = device_sm_count() if num_sms is None else num_sms
    _, chunks = group_rows(num_heads // num_kv_heads, next_power_of_two(head_dim) >= 16)
    base = num_seqs * num_kv_heads * chunks
    common = dict(num_seqs=num_seqs, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                  block_size=block_size, dtype=str(dtype).replace("torch.", ""), max_context_len=max_len,
                  lens_known=lens is not None, num_sms=sms, context_lens=lens)
    bound = "" if lens is not None else f" (lengths not given: bounded by the block table, {max_len} tokens)"

    if num_splits is not None:
        reason = f"num_splits={num_splits} given: each sequence gets min({num_splits}, its tiles) splits"
        return DecodePlan(num_splits=num_splits, split_tiles=1, reason=reason, **common)
    if sms is None:
        reason = ("Triton interpreter: programs run one after another on the CPU, so split-K would only add "
                  "the combine pass; 1 split")
        return DecodePlan(num_splits=1, split_tiles=max_tiles, reason=reason, **common)

    target = PROGRAMS_PER_SM * sms
    total = (sum(-(-n // tile) for n in lens) if lens is not None else num_seqs * max_tiles) * num_kv_heads * chunks
    fair = -(-total // target)
    work = (f"{base} programs ({num_seqs} seqs x {num_kv_heads} KV heads x {chunks} row chunk(s)) walk {total} "
            f"tiles of {tile} tokens{bound}; for {target} programs ({PROGRAMS_PER_SM} per SM x {sms} SMs) the fair "
            f"share is {fair} tiles and the longest context has {max_tiles}")
    if max_tiles <= SLACK * fair:
        return DecodePlan(num_splits=1, split_tiles=max_tiles, reason=work + f" (<= {SLACK}x the share): no split",
                          **common)
    split_tiles = max(MIN_SPLIT_TILES, fair, -(-max_tiles // MAX_SPLITS))
    needed = -(-max_tiles // split_tiles)
    grid_splits = min(MAX_SPLITS, next_power_of_two(needed))
    reason = (work + f" (> {SLACK}x the share): contexts cut into pieces of {split_tiles} tiles "
              f"({split_tiles * tile} tokens), at least {MIN_SPLIT_TILES} and at most {MAX_SPLITS} splits; "
              f"the longest gets {needed}, grid axis {grid_splits} (a power of two, to bound recompiles)")
    if needed == 1:
        return DecodePlan(num_splits=1, split_tiles=max_tiles, reason=reason, **common)
    return DecodePlan(num_splits=grid_splits, split_tiles=split_tiles, reason=reason, **common)


@dataclass(frozen=True)
class ExtendPlan:
    """How one extend_attention call runs: grid, rows per program, and the causal-mask rule."""

    num_reqs: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    max_extend_len: int          # exact (host lengths known) or q.shape[0]
    lens_known: bool

    @cached_property
    def meta(self) -> dict:
        return extend_meta(self.num_heads, self.num_kv_heads, self.head_dim, self.block_size,
                           getattr(torch, self.dtype))

    @property
    def grid(self) -> tuple[int, int, int]:
        m = self.meta
        return (self.num_reqs, self.num_kv_heads * m["HEAD_CHUNKS"], -(-self.max_extend_len // m["BLOCK_M"]))

    def explain(self) -> str:
        m = self.meta
        bound = "" if self.lens_known else " (extend lengths not given as host ints: bounded by q's rows)"
        return "\n".join([
            f"extend: {self.num_reqs} requests, up to {self.max_extend_len} new tokens each{bound}, "
            f"{self.num_heads} query heads / {self.num_kv_heads} KV heads, head_dim {self.head_dim}, {self.dtype}",
            f"grid {self.grid} = (requests, KV heads x {m['HEAD_CHUNKS']} head chunk(s), blocks of {m['BLOCK_M']} new tokens)",
            f"rows per program {m['BLOCK_M'] * m['BLOCK_G']} = {m['BLOCK_M']} tokens x {m['BLOCK_G']} heads; "
            f"head_dim tile {m['BLOCK_D']}; {m['TILE_N']} keys per loop iteration",
            ("causal mask: key tiles wholly at or before a program's first new token are read in a loop without "
             "a mask; only the tiles that cross the diagonal are masked" if m["SKIP_FULL_MASK"] else
             "causal mask: one masked loop (fp32 / small head_dim: a second, unmasked loop would spill registers)"),
        ])


def plan_extend(num_reqs: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
                dtype: torch.dtype, max_extend_len: int, lens_known: bool = True) -> ExtendPlan:
    """The extend grid for a batch. Example: 2 requests of up to 40 new tokens, group 8, fp32 -> grid (2, kv, 10)."""
    return ExtendPlan(num_reqs, num_heads, num_kv_heads, head_dim, block_size, str(dtype).replace("torch.", ""),
                      max(1, max_extend_len), lens_known)


def upload_ints(rows, device, dtype=torch.int32) -> torch.Tensor:
    """Host ints -> a tensor on ``device`` with no host sync (pinned memory, non-blocking copy on CUDA).

    A plain ``torch.tensor(..., device="cuda")`` waits for the GPU to drain its queue first.
    """
    t = torch.tensor(rows, dtype=dtype)
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t
