# Lesson 04 source (jupytext percent format). Edit this file, then run
# `.venv/bin/python scripts/build_notebooks.py 04` to rebuild notebooks/04_paging.ipynb.

# %% [markdown]
# # 04 · Paging: blocks, the block table, address translation
#
# Lesson 03 showed what goes wrong when every request gets one contiguous range: memory
# reserved for tokens that never come, copies when a request outgrows its range, and free
# space in holes too small to use. PagedAttention's answer is the operating system's: cut the
# KV cache into fixed-size **blocks** and give each request a **block table** (块表).
#
# **What you will learn**
# - how a token position becomes a physical address: the notes' pos 9 → L2, offset 1 → P1;
# - how a request grows on demand, one block at a time, and where its blocks end up;
# - why the waste is at most one partly filled block per request;
# - how an allocator with reference counts (引用计数) hands out and takes back blocks.
#
# Terms in Chinese: [glossary](glossary.md). Every number below is **simulated** (kvlab's
# allocator does the bookkeeping a server does; there are no K/V tensors in this lesson:
# lesson 05 adds them).

# %%
import kvlab
from kvlab.check import self_test

self_test()

# %% [markdown]
# ## 1. The worked example: where is token 9?
#
# Block size 4: block `i` of a request holds its positions `4i .. 4i+3`. The request's block
# table says where each of its **logical** blocks (L0, L1, ...) sits in the shared pool of
# **physical** blocks (P0, P1, ...). The source notes' table is L0→P3, L1→P7, L2→P1, L3→P5,
# L4→P9. The walk for position 9, done by kvlab's `translate` (the same arithmetic the paged
# kernel does for every token it reads):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.examples import NOTES_TABLE

t = kvlab.translate(NOTES_TABLE, pos=9, block_size=4)
print(f"block table {NOTES_TABLE}, block_size 4")
print("\n".join(t.steps(block_size=4, bytes_per_token=1)))

# %% [markdown]
# In bytes, each slot holds one token's K and V for every layer: `bytes_per_token` from
# lesson 02. For Llama-2 7B that is 512 KiB a token, so P1 starts at `1 × 4 × 524288` bytes and
# token 9 sits one slot further:

# %%
# NBVAL_CHECK_OUTPUT
bpt = kvlab.get_model("llama-2-7b").bytes_per_token
t7 = kvlab.translate(NOTES_TABLE, pos=9, block_size=4, bytes_per_token=bpt)
print(f"bytes_per_token = {bpt:,}")
print(t7.steps(block_size=4, bytes_per_token=bpt)[-1])

# %% [markdown]
# ## 2. The picture: move the position
#
# Drag **pos** (or change the block size, or type another block table). The chain shows each
# step; the grid shows which physical block and slot the token lands in. Positions 8, 9, 10, 11
# all land in P1, at offsets 0 to 3; position 12 jumps to P5. The request's blocks do not need
# to be in order or next to each other: that is the whole point.

# %%
import kvlab.viz as viz

viz.TranslationWidget(block_table=NOTES_TABLE, pos=9, block_size=4)

# %% [markdown]
# ## 3. The real run: requests grow on demand
#
# A pool of 12 blocks of 4 tokens. R1 arrives with a 6-token prompt, R2 with 3 tokens. Each
# decode step appends one token to each; a request gets a new block **only when its last block
# is full**. Then R1 finishes and its blocks go back to the pool, and R3 (9 tokens) arrives.
# kvlab's `BlockManager` records a snapshot after every event; step through them below
# (the integrity check runs on every frame).

# %%
m = kvlab.BlockManager(num_blocks=12, block_size=4, record=True)
m.add_sequence("R1", 6)   # 6 tokens -> 2 blocks (the second half full)
m.add_sequence("R2", 3)   # 3 tokens -> 1 block
for step in range(6):     # six decode steps
    m.append("R1", 1)
    m.append("R2", 1)
    m.check_integrity()
m.free("R1")              # R1 is done: its blocks return to the back of the free queue
m.add_sequence("R3", 9)   # 9 tokens -> 3 blocks
m.check_integrity()

viz.memory_map_stepper(m.snapshots, m.log, title="Paged KV pool: on-demand growth")

# %% [markdown]
# The same recording as a plotly animation (press play, or drag the slider). It needs no
# running kernel, so it also plays in an exported HTML page:

# %%
viz.animate_memory_map(m.snapshots, m.log, title="Paged KV pool: on-demand growth", duration_ms=500)

# %% [markdown]
# The final state, as data. R2's blocks are P2, P3, P5: not next to each other, because R1
# took P4 while R2 was still filling P3. R3 got P6, P7, P8 and not R1's old P0, P1, P4: the free
# pool is a first-in first-out queue, and freed blocks join its back (as in vLLM's free-block
# queue; it is also what makes a freed block the last to be reused, which lesson 08's prefix
# cache relies on).

# %%
# NBVAL_CHECK_OUTPUT
final = m.snapshot()
for seq, table in final.tables.items():
    print(f"{seq}: {final.num_tokens[seq]} tokens, block table {list(table)}")
print("free queue (front first):", list(final.free_block_ids))
print("events recorded:", len(m.snapshots) - 1)

# %% [markdown]
# ## 4. Waste is at most one block per request
#
# A request with `n` tokens holds `ceil(n / block_size)` blocks, so only its last block can be
# partly empty: at most `block_size - 1` wasted slots, whatever `n` is. Compare with a
# contiguous arena that reserves the maximum length up front (lesson 03), on the same 8 random
# requests (simulated, seed 0):

# %%
# NBVAL_CHECK_OUTPUT
import random

rng = random.Random(0)
lengths = [rng.randrange(1, 200) for _ in range(8)]
block_size, max_len = 16, 2048
paged_slots = sum(kvlab.blocks_needed(n, block_size) * block_size for n in lengths)
print("request lengths:", lengths, "(tokens)")
print(f"tokens held:               {sum(lengths):6d}")
print(f"paged, block_size {block_size}:     {paged_slots:6d} slots, waste {paged_slots - sum(lengths):5d} "
      f"(bound: {len(lengths)} x {block_size - 1} = {len(lengths) * (block_size - 1)})")
print(f"contiguous, max_len {max_len}: {len(lengths) * max_len:6d} slots, waste {len(lengths) * max_len - sum(lengths):5d}")

# %% [markdown]
# And the notes' fragmentation example from lesson 03, run on the paged pool: the 6,144 tokens
# that fit nowhere contiguously fit in blocks, and D (8,192 tokens) fits too once B and C hold
# only the tokens they have produced so far instead of their reservations (on-demand growth).
# `fragmentation_example()` runs both allocators (simulated; its docstring explains the
# numbers):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.examples import fragmentation_example

ex = fragmentation_example()
print(f"contiguous: {ex.contiguous_free} free, largest hole {ex.contiguous_largest_free}: "
      f"{ex.d_small_tokens} fits? {ex.d_small_fits_contiguous}")
print(f"paged ({ex.block_size}-token blocks): {ex.d_small_tokens} fits? {ex.d_small_fits_paged}")
print(f"paged, D = {ex.d_tokens} with B, C at their reservations: fits? {ex.d_fits_paged_same_sizes}")
print(f"paged, D = {ex.d_tokens} with B = {ex.b_used}, C = {ex.c_used} tokens so far: "
      f"fits? {ex.d_fits_paged_on_demand} ({ex.paged_free_blocks_on_demand} free blocks before D)")

# %% [markdown]
# ## 5. Exercises
#
# ### Exercise 1: translate
#
# **Contract.** `translate(block_table, pos, block_size, bytes_per_token=1)` returns the tuple
# `(logical_block, offset, physical_block, byte_address)`, where
# `byte_address = (physical_block × block_size + offset) × bytes_per_token` (the pool starts at
# address 0).
# - Raise `ValueError` if `pos < 0` or `pos` is past the table's last slot
#   (`pos >= len(block_table) × block_size`).
# - Example: `translate([3, 7, 1, 5, 9], 9, 4) == (2, 1, 1, 5)`.

# %% tags=["exercise-stub"]
def translate(block_table, pos, block_size, bytes_per_token=1):
    raise NotImplementedError("your code here")

# %%
from kvlab import check

check.translate(translate)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Two lookups: first which logical block and where in it (integer division and remainder),
# then the block table for the physical block.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `logical_block, offset = divmod(pos, block_size)`; `physical_block = block_table[logical_block]`.
# The slot is `physical_block * block_size + offset`; multiply by `bytes_per_token`. Check the
# range of `pos` first: a negative index would silently read the table from the end.
# </details>
#
# ### Exercise 2: blocks_needed
#
# **Contract.** `blocks_needed(num_tokens, block_size) -> int`: how many blocks hold
# `num_tokens` tokens. 0 tokens need 0 blocks. Raise `ValueError` if `num_tokens < 0` or
# `block_size < 1`. Example: `blocks_needed(9, 4) == 3`, `blocks_needed(8, 4) == 2`.

# %% tags=["exercise-stub"]
def blocks_needed(num_tokens, block_size):
    raise NotImplementedError("your code here")

# %%
check.blocks_needed(blocks_needed)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# It is a division that rounds **up**: 9 tokens in blocks of 4 need 3 blocks, 8 need 2.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `(num_tokens + block_size - 1) // block_size`, or `-(-num_tokens // block_size)`. Avoid
# `math.ceil(num_tokens / block_size)`: floats lose precision for large counts.
# </details>
#
# ### Exercise 3: blocks to append
#
# **Contract.** `blocks_to_append(num_tokens, n, block_size) -> int`: a request holds
# `num_tokens` tokens; how many **new** blocks does it need to append `n` more? Its last block
# may have free slots. Raise `ValueError` if any argument is out of range (`num_tokens < 0`,
# `n < 0`, `block_size < 1`). Example: `blocks_to_append(8, 1, 4) == 1`,
# `blocks_to_append(9, 1, 4) == 0`.

# %% tags=["exercise-stub"]
def blocks_to_append(num_tokens, n, block_size):
    raise NotImplementedError("your code here")

# %%
check.blocks_to_append(blocks_to_append)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# How many blocks does the request hold now, and how many will it hold after the append?
# </details>
#
# <details><summary>Hint 2</summary>
#
# The difference of two `blocks_needed` values: after (`num_tokens + n`) minus now
# (`num_tokens`).
# </details>
#
# ### Exercise 4: an allocator with reference counts
#
# **Contract.** `TinyAllocator(num_blocks)` keeps the free blocks in a first-in first-out
# queue, initially `0, 1, ..., num_blocks - 1`, and a reference count per block.
# - `allocate(n) -> list[int]`: take `n` blocks from the front of the queue, each with ref
#   count 1. All or nothing: if fewer than `n` are free, raise `kvlab.OutOfBlocks(n, free)`
#   and change nothing. `ValueError` if `n < 0`.
# - `incref(ids)`: one more reference to each block (a fork shares blocks this way).
#   Raise `kvlab.KVCacheError` (changing nothing) if a block is free.
# - `free(ids) -> list[int]`: one reference less for each block; blocks that reach 0 join the
#   **back** of the queue, in order, and are returned. Raise `kvlab.DoubleFree` (changing
#   nothing) if a block is already free.
# - Attributes: `ref_count` (a list indexed by block id) and `num_free_blocks`.
#
# The check runs scripted and random sequences of operations on your class and on kvlab's
# `BlockAllocator`, comparing results and state after every step.

# %% tags=["exercise-stub"]
from collections import deque

from kvlab import DoubleFree, KVCacheError, OutOfBlocks


class TinyAllocator:
    def __init__(self, num_blocks):
        self.ref_count = [0] * num_blocks
        self.free_queue = deque(range(num_blocks))

    @property
    def num_free_blocks(self):
        return len(self.free_queue)

    def allocate(self, n):
        raise NotImplementedError("your code here")

    def incref(self, ids):
        raise NotImplementedError("your code here")

    def free(self, ids):
        raise NotImplementedError("your code here")

# %%
check.block_allocator(TinyAllocator)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Validate first, change second: check every error condition before touching `ref_count` or
# the queue, so a failing call leaves everything as it was.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `free` returns a block to the queue only when its count drops to **zero**: a block shared by
# two sequences (ref count 2) stays in use after the first one frees it.
# </details>
#
# <details><summary>Hint 3</summary>
#
# `allocate`: `ids = [self.free_queue.popleft() for _ in range(n)]`, then set each count to 1.
# `free`: decrement; when a count hits 0, `self.free_queue.append(b)` and collect `b`.
# </details>
#
# ## Summary
#
# - A block table maps a request's logical blocks to physical blocks anywhere in the pool;
#   position `pos` lives in logical block `pos // block_size` at offset `pos % block_size`.
#   The notes' pos 9 → L2, offset 1 → P1 (slot 5).
# - Requests grow on demand, one block when the last one is full; freed blocks return to the
#   pool and can be reused by anyone: no external fragmentation.
# - The waste is at most `block_size - 1` slots per request (the last block).
# - Reference counts let several holders share a block; it is freed when the count reaches 0.
#
# Next: [05 The paged kernel](05_paged_kernel.ipynb), where K and V are real tensors and a
# Triton kernel reads them through the block table. Words: [glossary](glossary.md).
