"""Lesson 05's control: shuffle the physical blocks, change the split count, run the kernel again.

One sequence's K and V sit in a paged pool. Each *shuffle* moves every block of the pool to a
new place (``new_pool[perm[b]] = pool[b]``) and rewrites the block table (``b -> perm[b]``);
the *programs* slider sets split-K's ``num_splits``. After every change the real
``paged_decode_attention`` kernel runs (the Triton interpreter on a CPU) and its output is
compared with the first run (original layout, one program): a shuffle alone gives the same
output bit for bit; split-K adds the partial results in another order, so it agrees up to
rounding. The picture is the kernel's read order over the shuffled pool
(:func:`kvlab.viz.kernel_view.kernel_access_figure`), one colour per program, right under the
controls; the caption (what the run gave) comes under the picture.

``table_snapshot`` builds the pool picture's data from block tables alone. Mirrors no vLLM or
SGLang file (a picture of ``kernels/paged_decode.py`` at work).

Example (no kernel run: the layout alone):
    >>> s = table_snapshot(6, 4, {"R1": [4, 1, 2]}, {"R1": 10})
    >>> s.owner, s.tokens_in_block, s.free_block_ids
    ((None, 'R1', 'R1', None, 'R1', None), (0, 4, 2, 0, 4, 0), (0, 3, 5))
    >>> permuted_table([4, 1, 2], [5, 0, 1, 2, 3, 4])
    [3, 0, 1]
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from ..memory.snapshot import MemorySnapshot
from .control import LiveControl
from .kernel_view import kernel_access_figure
from .palette import is_classroom

__all__ = ["table_snapshot", "permuted_table", "ShuffleControl", "SOURCE_NOTE"]

# The picture's blocks and table are those the real kernel ran on; the read order drawn over them is
# kernel_access_order's, the kernel's loop bounds worked out in Python (not recorded from the run).
SOURCE_NOTE = "the layout the kernel ran on; read order simulated"


def table_snapshot(num_blocks: int, block_size: int, tables: dict[str, Sequence[int]],
                   num_tokens: dict[str, int], caption: str = "") -> MemorySnapshot:
    """A pool of ``num_blocks`` whose only holders are ``tables`` (each block held once)."""
    owner: list[str | None] = [None] * num_blocks
    filled = [0] * num_blocks
    for seq, table in tables.items():
        for i, b in enumerate(table):
            if not 0 <= b < num_blocks or owner[b] is not None:
                raise ValueError(f"block {b} of {seq!r} is outside the pool or held twice")
            owner[b] = seq
            filled[b] = min(block_size, num_tokens[seq] - i * block_size)
    return MemorySnapshot(num_blocks=num_blocks, block_size=block_size,
                          ref_count=tuple(int(o is not None) for o in owner), owner=tuple(owner),
                          tables={s: tuple(t) for s, t in tables.items()}, num_tokens=dict(num_tokens),
                          tokens_in_block=tuple(filled),
                          free_block_ids=tuple(b for b in range(num_blocks) if owner[b] is None), caption=caption)


def permuted_table(table: Sequence[int], perm: Sequence[int]) -> list[int]:
    """The table after block ``b`` moved to ``perm[b]``."""
    return [int(perm[b]) for b in table]


class ShuffleControl(LiveControl):
    """Shuffle the pool / choose split-K's programs; the kernel runs after every change.

    ``q``: (1, heads, head_dim); ``k_cache``, ``v_cache``: (num_blocks, block_size, kv_heads,
    head_dim); ``block_table``: the sequence's blocks; ``context_len``: its tokens. Inputs:
    ``shuffles`` (0 = the original layout; shuffle ``k`` uses the permutation seeded ``k``)
    and ``num_splits`` (1 to ``max_splits``). ``result``: ``table``, ``identical`` (bit for
    bit), ``max_diff``, ``seconds`` (the kernel call, measured).
    """

    css_class = "kvlab-shuffle"
    caption_below = True  # the figure right under the buttons it answers; what happened, under it

    def __init__(self, q: Any, k_cache: Any, v_cache: Any, block_table: Sequence[int], context_len: int,
                 seq_id: str = "R1", max_splits: int = 4, static: bool | None = None) -> None:
        import torch

        from ..kernels import paged_decode_attention
        from ..kernels.paged_decode import tile_tokens

        self._run_kernel = paged_decode_attention
        self.q, self.k_cache, self.v_cache = q, k_cache, v_cache
        self.block_table, self.context_len, self.seq_id = list(block_table), context_len, seq_id
        self.num_blocks, self.block_size = k_cache.shape[0], k_cache.shape[1]
        self.tile = tile_tokens(self.block_size)
        self.max_splits = max_splits
        self._lens = torch.tensor([context_len], dtype=torch.int32, device=k_cache.device)
        self.shuffles, self.num_splits = 0, 1
        self.first = self._kernel(list(range(self.num_blocks)), 1)[0]   # original layout, one program
        super().__init__(static=static)

    def _kernel(self, perm: list[int], num_splits: int) -> tuple[Any, list[int], float]:
        import torch

        p = torch.tensor(perm, device=self.k_cache.device)
        k, v = torch.empty_like(self.k_cache), torch.empty_like(self.v_cache)
        k[p], v[p] = self.k_cache, self.v_cache                        # block b moves to perm[b]
        table = permuted_table(self.block_table, perm)
        t = torch.tensor([table], dtype=torch.int32, device=self.k_cache.device)
        t0 = time.perf_counter()
        out = self._run_kernel(self.q, k, v, t, self._lens, num_splits=num_splits)   # (1, heads, head_dim)
        return out, table, time.perf_counter() - t0

    def permutation(self) -> list[int]:
        """Where each block goes in the current layout (identity before the first shuffle)."""
        import torch

        if self.shuffles == 0:
            return list(range(self.num_blocks))
        return torch.randperm(self.num_blocks, generator=torch.Generator().manual_seed(self.shuffles)).tolist()

    def check(self) -> None:
        for name, v, lo, hi in (("shuffles", self.shuffles, 0, 10**6), ("num_splits", self.num_splits, 1, self.max_splits)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in {lo}..{hi}, got {v!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        return {"shuffles": [0, 1, 2, 3], "num_splits": list(range(1, self.max_splits + 1))}

    def update(self) -> None:
        out, table, secs = self._kernel(self.permutation(), self.num_splits)
        diff = float((out - self.first).abs().max())
        self.result = dict(table=table, identical=bool((out == self.first).all()), max_diff=diff, seconds=secs)

    def caption(self) -> str:
        r = self.result
        layout = "the original layout" if self.shuffles == 0 else f"shuffle {self.shuffles}: every block moved"
        kv_heads, tiles = self.k_cache.shape[2], -(-self.context_len // self.tile)
        work = (f"num_splits = {self.num_splits}: {kv_heads * self.num_splits} programs (one per KV head and range), "
                f"each reading at most {-(-tiles // self.num_splits)} of the {tiles} tiles")
        if r["identical"]:
            same = "bit-for-bit identical to the first run (original layout, num_splits = 1)"
        else:
            same = (f"equal to the first run up to rounding (largest difference {r['max_diff']:.1e}): "
                    "split-K adds the programs' partial results in another order")
        if is_classroom():   # a projector: one line, the outcome, so that it shares the 599 px screen with the controls
            same = "output bit-for-bit identical" if r["identical"] else f"equal up to rounding ({r['max_diff']:.1e})"
            where = "original layout" if self.shuffles == 0 else f"shuffle {self.shuffles}"
            return f"{where}, num_splits {self.num_splits}, {1e3 * r['seconds']:.0f} ms (measured): {same}"
        return (f"{layout}; {self.seq_id}'s table starts {r['table'][:6]}. The kernel ran with {work}, in "
                f"{1e3 * r['seconds']:.0f} ms, one call (measured, CPU interpreter); its output is {same}.")

    def figure(self) -> Any:
        snap = table_snapshot(self.num_blocks, self.block_size, {self.seq_id: self.result["table"]},
                              {self.seq_id: self.context_len})
        # classroom: the control's caption says what happened; the figure's own sentence would push the
        # figure and its controls past one 599 px projector screen
        return kernel_access_figure(snap, self.seq_id, num_splits=self.num_splits, tile_tokens=self.tile,
                                    subtitle=not is_classroom(), tiles=True,   # the strip: where tiles end, whose
                                    source_note=SOURCE_NOTE)

    def shuffle(self) -> None:
        self.set(shuffles=self.shuffles + 1)

    def _inputs(self, W: Any) -> list[Any]:
        shuffle = W.Button(description="shuffle the blocks", layout=W.Layout(width="auto"))
        shuffle.add_class("kvlab-shuffle-button")
        back = W.Button(description="original layout", layout=W.Layout(width="auto"))
        back.add_class("kvlab-unshuffle-button")
        splits = W.IntSlider(value=self.num_splits, min=1, max=self.max_splits, description="programs (split-K)",
                             style={"description_width": "initial"}, continuous_update=False,
                             layout=W.Layout(width="min(460px, 100%)"))   # classroom: the track was 40 px
        splits.add_class("kvlab-splits-slider")
        shuffle.on_click(lambda _b: self.shuffle())
        back.on_click(lambda _b: self.set(shuffles=0))
        splits.observe(lambda ch: self.set(num_splits=ch["new"]), names="value")
        return [shuffle, back, splits]
