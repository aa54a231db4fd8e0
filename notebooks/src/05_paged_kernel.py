# Lesson 05: the paged attention kernel reads K and V through the block table.
# Source of truth for notebooks/05_paged_kernel.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 05

# %% [markdown]
# # 05 · The paged attention kernel
#
# **What you will learn**
#
# - What one [decode](glossary.md) (解码) step of attention computes, and why, with a paged
#   cache, the kernel must look up every token's K and V through the
#   [block table](glossary.md) (块表).
# - How kvlab's Triton kernel `paged_decode_attention` does it: one program per (sequence, KV head),
#   a loop over tiles of positions, and in that loop the same arithmetic as lesson 04:
#   `logical block = pos // block_size`, `physical block = block_table[logical block]`,
#   `offset = pos % block_size`.
# - Why the physical order of blocks does not matter: shuffle every block in the pool, rewrite
#   the tables, and the answer is bit-for-bit the same.
# - How the loop is cut into tiles (4 or 8 tokens in the pictures, 64 in the kernel) and, with
#   split-K, into ranges of tiles read by separate programs.
# - How to write that block loop yourself in Triton, run in the interpreter on the CPU.
#
# Everything here runs on a CPU in Triton's interpreter: correct, but slow, so the sizes are tiny.
# The same kernels run natively on an NVIDIA GPU (`bench/` has the big runs).

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example: reading a sequence back through its table
#
# The source notes' table, block size 4: L0→P3, L1→P7, L2→P1, L3→P5, L4→P9. We fill a small
# K pool so that **the value stored in a slot is the token position that lives there** (and -1
# in slots nobody uses). Reading positions 0..17 back through the table must then give
# 0, 1, ..., 17 in order, although they sit in five scattered blocks.

# %%
# NBVAL_CHECK_OUTPUT
import torch

from kvlab.lessons import NOTES_TABLE
from kvlab.kernels.reference import gather_kv

block_size, num_blocks, context_len = 4, 10, 18
k_pool = torch.full((num_blocks, block_size, 1, 1), -1.0)   # (num_blocks, block_size, kv_heads=1, head_dim=1)
for pos in range(context_len):
    t = kvlab.translate(NOTES_TABLE, pos, block_size)
    k_pool[t.physical_block, t.offset] = pos                   # token `pos` lives at (P, offset)

print("block table:", NOTES_TABLE)
print("pool, block by block (-1 = unused):")
for b in range(num_blocks):
    print(f"  P{b}: {k_pool[b, :, 0, 0].int().tolist()}")
table = torch.tensor(NOTES_TABLE, dtype=torch.int32)
read_back = gather_kv(k_pool, table, context_len)[:, 0, 0]     # (context_len,)
print("read through the table:", read_back.int().tolist())
t9 = kvlab.translate(NOTES_TABLE, 9, block_size)
print(f"pos 9 -> L{t9.logical_block}, offset {t9.offset} -> P{t9.physical_block}, slot {t9.slot}")

# %% [markdown]
# `gather_kv` is the plain-torch reference the kernel is tested against: it gathers whole
# blocks through the table, flattens them and keeps the first `context_len` positions. The
# kernel does the same lookup, but tile by tile and without ever building the contiguous copy.
#
# ## 2. The picture: where a sequence's blocks really are
#
# Three requests decoding together, sharing one pool of 16 blocks. They grew a token at a time,
# so their blocks are interleaved: no request owns a contiguous range, and the kernel follows
# each request's table to find its blocks (simulated layout, from the real allocator). Each
# block is labelled with the table entry that points at it (`seq3 L4`: logical block 4 of
# seq3's table, printed above); the stepper below draws the walk through one table.

# %%
from kvlab import BlockManager

m = BlockManager(num_blocks=16, block_size=4)
lengths = {"seq1": 5, "seq2": 13, "seq3": 30}
for seq in lengths:
    m.add_sequence(seq, 0)
for step in range(max(lengths.values())):       # decode one token per request per step
    for seq, n in lengths.items():
        if step < n:
            m.append(seq, 1)
m.check_integrity()
for seq, t in m.tables.items():
    print(f"{seq}: {t.num_tokens:>2} tokens, block table {t.block_ids}")

# %%
from kvlab.viz import memory_map_figure

memory_map_figure(m.snapshot("three requests decoding together"), title="The pool the kernel reads",
                  source="simulated", cols=8, tables=False)   # 8 blocks a row: room for each label

# %% [markdown]
# And the order in which the kernel reads seq3's blocks: it walks the positions from 0 up, so it
# follows the block table, L0, L1, L2..., wherever those blocks sit (simulated view of the
# kernel's loop). Step through it: each step draws only the reads done so far, numbered, with
# an arrow from the previous block; the block read in this step is outlined red, blocks not
# read yet are faded, and the other requests' blocks too.

# %%
from kvlab.viz import kernel_access_stepper

kernel_access_stepper(m.snapshot(), "seq3", tile_tokens=4)

# %% [markdown]
# **Tiles of 4 tokens here, 64 in the kernel.** The stepper moves one block (4 tokens) per
# loop iteration so that you can follow the order. The real kernel reads a *tile* of
# `TILE_N` positions per iteration, whole blocks and at least 64 tokens
# (`kvlab.kernels.paged_decode.tile_tokens`): a GPU does the tile's loads and dot products in
# parallel, and fewer, bigger iterations pay the loop's fixed cost (the online-softmax update)
# less often. The *order* is the same; only the grouping differs:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.kernels.paged_decode import tile_tokens
from kvlab.viz.kernel_view import kernel_access_order

r3 = m.tables["seq3"]
for tile in (4, tile_tokens(4)):
    reads = kernel_access_order(r3.block_ids, r3.num_tokens, 4, tile_tokens=tile)
    per_iter = [[f"P{r.physical}" for r in reads if r.iteration == i] for i in range(1 + reads[-1].iteration)]
    print(f"TILE_N = {tile:>2}: {len(per_iter)} loop iteration(s) for seq3's {r3.num_tokens} tokens (simulated):",
          " | ".join(" ".join(blocks) for blocks in per_iter))

# %% [markdown]
# With split-K (section 3) the tiles are cut into ranges, each read by its own program in
# parallel. Here seq3's 30 tokens are read in tiles of 8 (two blocks a tile, the last one 6
# tokens) by **three** programs, one colour each. The strip on top is seq3's table in loop order,
# cut into its tiles: each tile is drawn in the colour of the program that reads it. Count the
# tiles each program gets, and see which program gets none; the pool below shows where those
# blocks sit.

# %%
from kvlab.viz import kernel_access_figure

kernel_access_figure(m.snapshot(), "seq3", num_splits=3, tile_tokens=8, tiles=True)

# %% [markdown]
# ## 3. The real run: the Triton kernel against plain attention
#
# Now with real tensors: 4 query heads sharing 2 KV heads (grouped-query attention), head_dim 16.
# We write each request's K and V into its slots with the `store_kvcache` kernel (the slots come
# from `slot_mapping()`), then run **one** `paged_decode_attention` call for the three requests and
# compare each with `naive_attention` over that request's K/V laid out contiguously.

# %%
# NBVAL_CHECK_OUTPUT
import kvlab.kernels as K

torch.manual_seed(0)
dev = K.DEVICE                                                       # "cpu" in the interpreter, "cuda" on a GPU
heads, kv_heads, head_dim = 4, 2, 16
k_cache = torch.zeros(16, 4, kv_heads, head_dim, device=dev)        # (num_blocks, block_size, kv_heads, head_dim)
v_cache = torch.zeros_like(k_cache)
seqs = list(lengths)
k_seq = {s: torch.randn(n, kv_heads, head_dim) for s, n in lengths.items()}   # contiguous, for comparison
v_seq = {s: torch.randn(n, kv_heads, head_dim) for s, n in lengths.items()}
for s in seqs:
    K.store_kvcache(k_seq[s].to(dev), v_seq[s].to(dev), k_cache, v_cache, torch.tensor(m.tables[s].slot_mapping(), device=dev))

q = torch.randn(len(seqs), heads, head_dim).to(dev)                  # (num_seqs, heads, head_dim): one new token each
width = max(len(t) for t in m.tables.values())
block_tables = torch.tensor([m.tables[s].block_ids + [0] * (width - len(m.tables[s])) for s in seqs],
                            dtype=torch.int32, device=dev)
context_lens = torch.tensor([lengths[s] for s in seqs], dtype=torch.int32, device=dev)
out = K.paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens)   # (num_seqs, heads, head_dim)

for i, s in enumerate(seqs):
    want = K.naive_attention(q[i:i + 1].cpu(), k_seq[s], v_seq[s], causal=False)[0]  # (heads, head_dim)
    print(f"{s}: context {lengths[s]:>2}, paged kernel == contiguous attention (atol 1e-5): "
          f"{torch.allclose(out[i].cpu(), want, atol=1e-5)}")

# %% [markdown]
# ### Shuffle every physical block: the same answer
#
# Paging's promise is that *where* a block sits does not matter. Move every block of the pool
# to a random new place (`new_pool[perm[b]] = pool[b]`), rewrite every table entry `b` as
# `perm[b]`, and run the kernel again. It reads the same tokens in the same logical order, so
# the output is identical, not merely close.

# %%
# NBVAL_CHECK_OUTPUT
perm = torch.randperm(16, generator=torch.Generator().manual_seed(1)).to(dev)
k_shuf, v_shuf = torch.empty_like(k_cache), torch.empty_like(v_cache)
k_shuf[perm], v_shuf[perm] = k_cache, v_cache                        # block b moves to perm[b]
tables_shuf = perm[block_tables.long()].to(torch.int32)
out_shuf = K.paged_decode_attention(q, k_shuf, v_shuf, tables_shuf, context_lens)
print("seq3's table before:", block_tables[2].tolist())
print("seq3's table after: ", tables_shuf[2].tolist())
print("outputs bit-for-bit identical:", torch.equal(out, out_shuf))

# %% [markdown]
# ### Split-K (flash-decoding)
#
# With few sequences and long contexts a GPU has too few programs to stay busy. `num_splits=S`
# cuts each context into `S` ranges of whole tiles handled by separate programs, and a second
# kernel combines their partial softmax results (running max, running sum, weighted values).
# Same maths, so the same answer up to rounding. With 64-token tiles the contexts above are a
# single tile each, so there is nothing to split; we use one longer sequence, 300 tokens in
# blocks of 16, shuffled over a pool of 24 blocks:

# %%
# NBVAL_CHECK_OUTPUT
long_len, bs16 = 300, 16
g = torch.Generator().manual_seed(2)
long_table = torch.randperm(24, generator=g)[:-(-long_len // bs16)].to(torch.int32)
k_long = torch.randn(24, bs16, kv_heads, head_dim, generator=g).to(dev)   # (num_blocks, block_size, kv_heads, head_dim)
v_long = torch.randn(24, bs16, kv_heads, head_dim, generator=g).to(dev)
q_long = torch.randn(1, heads, head_dim, generator=g).to(dev)               # (1, heads, head_dim)
table_long = long_table[None].to(dev)
lens_long = torch.tensor([long_len], dtype=torch.int32, device=dev)
reads = kernel_access_order(long_table.tolist(), long_len, bs16, num_splits=2, tile_tokens=tile_tokens(bs16))
for split in (0, 1):
    mine = [r for r in reads if r.split == split]
    print(f"program {split}: {1 + mine[-1].iteration} tiles of {tile_tokens(bs16)} tokens, "
          f"logical blocks L{mine[0].logical}..L{mine[-1].logical}")
one = K.paged_decode_attention(q_long, k_long, v_long, table_long, lens_long, num_splits=1)
two = K.paged_decode_attention(q_long, k_long, v_long, table_long, lens_long, num_splits=2)
print("num_splits=2 agrees with num_splits=1:", torch.allclose(one, two, atol=1e-5))

# %% [markdown]
# ### What vLLM's kernels do
#
# vLLM's CUDA PagedAttention kernels do this same lookup (`block_table[pos // block_size]`, then
# the offset); they divide the work differently:
#
# - **v1**, `csrc/attention/paged_attention_v1.cu`: `dim3 grid(num_heads, num_seqs, 1)`, one
#   thread block per **query** head and sequence, walking that sequence's whole context.
# - **v2**, `csrc/attention/paged_attention_v2.cu`, is split-K:
#   `dim3 grid(num_heads, num_seqs, max_num_partitions)` cuts the context into partitions of
#   `PARTITION_SIZE = 512` tokens; each thread block writes its partition's max logit, exp-sum and
#   partial output, and a second kernel, `paged_attention_v2_reduce_kernel`, combines them, as
#   kvlab's second kernel does when `num_splits > 1`.
# - **Which one runs** is a heuristic in vLLM's Python wrapper (`vllm/attention/ops/paged_attn.py`,
#   in the versions that ship it): v1 when `max_seq_len <= 8192` and there is a single partition
#   or more than 512 (sequence, head) pairs to keep the GPU busy; v2 otherwise.
#
# Two differences from kvlab's kernel: vLLM fixes the partition *size*, so a longer context gets
# more partitions (seq4's 300 tokens would be a single one), where kvlab's `num_splits` fixes
# their *number*; and vLLM has a thread block per query head, where kvlab has one program per KV
# head serving its whole GQA group. Read `paged_attention_v2.cu` next: its launcher sets both
# grids in a few lines; the kernels' bodies are in `csrc/attention/attention_kernels.cuh`. (vLLM V1
# on NVIDIA GPUs mostly runs FlashAttention's or FlashInfer's paged kernels instead, under
# `vllm/v1/attention/backends/`; they too read K and V through a block table.)

# %% [markdown]
# ### Try it: shuffle the blocks, change the number of programs
#
# The same 300-token sequence (seq4 below). **shuffle the blocks** moves every block of the pool to a new
# place and rewrites the table; **programs (split-K)** sets `num_splits`, cutting the loop into that
# many ranges (each KV head gets that many programs). Each change runs the real kernel again (in the
# interpreter: a fraction of a second), times that one call, and compares its output with the first
# run (original layout, `num_splits = 1`). The picture is drawn over the layout the kernel ran on;
# the read order on it is worked out from the loop's bounds (simulated). Watch the strip on
# top, the table's tiles in loop order: each program reads a contiguous range of the *table*,
# whatever the shuffle does to where its blocks sit in the pool.

# %%
from kvlab.viz import ShuffleControl

ShuffleControl(q_long, k_long, v_long, long_table.tolist(), long_len, seq_id="seq4")

# %% [markdown]
# ## 4. Inside the kernel: the block loop
#
# One iteration of kvlab's kernel handles a tile of `TILE_N` positions: `pos` is a vector, each
# position looks up its physical block in the table (the paging step), K and V are loaded from
# there, and the tile is folded into an online softmax (a running max `m_i`, a running sum `l_i`
# and a running weighted sum `acc`), so the whole context is never held at once. Exercise 3 asks
# you to write that paging step yourself; the kernel's own code is printed after it, to compare.

# %% [markdown]
# **Cost in the interpreter (measured).** The interpreter runs a launch's programs one after
# another in Python, and each program its loop iterations one after another; a *program-iteration*
# is one program's pass over one tile. The cell below times three launches (each the median of 3
# calls, on this machine): the three sequences of section 3 (3 sequences × 2 KV heads = 6
# programs, one 64-token tile each); seq4 of the widget above (2 programs, 5 tiles each: the
# launch the widget times, one call per change, at `num_splits = 1`); and seq4 cut to its first 64 tokens
# (2 programs, 1 tile each). For each it prints the time and that time divided by its
# program-iterations. This is CPU-interpreter time and says nothing about a GPU.

# %%
import time


def median_ms(run, calls=3):
    """The median of `calls` timed calls of `run()`, in ms (measured)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[calls // 2]


tile, tile16 = tile_tokens(4), tile_tokens(bs16)
lens_64 = torch.tensor([tile16], dtype=torch.int32, device=dev)
launches = [  # (what, programs, tiles per program, the call)
    ("the 3 sequences of section 3", len(seqs) * kv_heads, -(-max(lengths.values()) // tile),
     lambda: K.paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens)),
    ("seq4, 300 tokens (the widget's)", kv_heads, -(-long_len // tile16),
     lambda: K.paged_decode_attention(q_long, k_long, v_long, table_long, lens_long)),
    (f"seq4 cut to {tile16} tokens", kv_heads, 1,
     lambda: K.paged_decode_attention(q_long, k_long, v_long, table_long, lens_64)),
]
print(f"{'launch (measured, interpreter)':<32} {'programs x tiles':>16} {'ms':>6} {'ms / program-iteration':>22}")
per_iteration = []
for what, programs, tiles, run in launches:
    ms = median_ms(run)
    per_iteration.append(ms / (programs * tiles))
    print(f"{what:<32} {f'{programs} x {tiles} = {programs * tiles}':>16} {ms:>6.1f} {per_iteration[-1]:>22.1f}")
spread = max(per_iteration) / min(per_iteration)
print(f"the per-program-iteration figure varies {spread:.1f}x between these launches: "
      + ("it is not a price per iteration: a launch's time is a fixed part (the launch, each program's start) "
         "plus a part that grows with its iterations, and the division spreads the fixed part differently"
         if spread > 1.5 else "here it is close to a constant"))
t_ref = median_ms(lambda: K.paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens))
print(f"torch reference (gather + dense) for the 3 sequences: {t_ref:.1f} ms (measured, CPU)")

# %% [markdown]
# ## 5. Exercises
#
# ### Exercise 1: paged decode attention in plain torch
#
# Implement `paged_decode_torch(q, k_cache, v_cache, block_table, context_len, scale)` for
# **one** sequence:
#
# - `q`: `(num_heads, head_dim)`, the new token's queries.
# - `k_cache`, `v_cache`: `(num_blocks, block_size, num_kv_heads, head_dim)`.
# - `block_table`: a list of ints; position `pos` lives in block `block_table[pos // block_size]`
#   at offset `pos % block_size`.
# - `context_len`: attend to positions `0 .. context_len - 1` only (the last block may be partial).
# - Query head `h` uses KV head `h // (num_heads // num_kv_heads)`.
# - Returns `(num_heads, head_dim)`: `softmax(q·K^T × scale) · V` for each head.
#
# The checker compares with `kvlab.kernels.paged_decode_attention_ref` on shuffled tables,
# partial blocks, one-token contexts and grouped-query attention.

# %% tags=["exercise-stub"]
def paged_decode_torch(q, k_cache, v_cache, block_table, context_len, scale):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.paged_decode_torch(paged_decode_torch)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Gather first, compute second. Build the context's K (and V) as one
# `(context_len, num_kv_heads, head_dim)` tensor by indexing `k_cache` with two index tensors
# of length `context_len`: which physical block each position is in, and where inside it.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Grouped-query attention: each KV head serves `num_heads // num_kv_heads` *consecutive*
# query heads (with 4 heads and 2 KV heads: heads 0 and 1 read KV head 0). Repeating each KV
# head in place gives that order; tiling the whole set of KV heads does not.
# </details>
#
# <details><summary>Hint 3</summary>
#
# The scores are one number per (head, position), scaled; the softmax runs over positions;
# the output is the weighted sum of V rows. Each product is one line of `torch.einsum`.
# Only positions `< context_len` may take part.
# </details>

# %% [markdown]
# ### Exercise 2: which blocks does each program read, in which iteration?
#
# Implement `kernel_tiles(context_len, block_size, tile_tokens, num_splits)`, the kernel's loop
# bounds as data. Return one list per program (split), in split order; each holds that
# program's tiles in loop order; each tile is the list of **logical** block numbers it reads.
#
# - The kernel walks the context in tiles of `tile_tokens` positions, from position 0; the
#   last tile may be shorter, and no tile reads past `context_len - 1`. `tile_tokens` is a
#   multiple of `block_size`.
# - The programs share the tiles as section 2's split-K picture does (its strip of tiles): each
#   program takes one **contiguous** run of tiles, in order, and every program takes the same
#   number (the fewest that still covers every tile) until the tiles run out; so a late program
#   may get fewer, or none (an empty list). Work out how many from the picture before you write
#   code.
#
# Example: 18 tokens, block size 4, 8-token tiles, 2 programs: `[[[0, 1], [2, 3]], [[4]]]`.
# The checker compares with `kvlab.viz.kernel_view.kernel_access_order`, the view of section 2.

# %% tags=["exercise-stub"]
def kernel_tiles(context_len, block_size, tile_tokens, num_splits):
    raise NotImplementedError("your code here")


# %%
check.kernel_tiles(kernel_tiles)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Count the tiles of an 18-token context in 8-token tiles by hand: if your count says 2, where
# did the last 2 tokens go? Ask the same question of "how many tiles per program" with 5 tiles
# and 2 programs. (Rounding up in Python without floats: `-(-a // b)`.)
# </details>
#
# <details><summary>Hint 2</summary>
#
# Write the tiles of an 18-token context out by hand (tiles of 8, blocks of 4): where does
# each tile start and end, and which blocks hold its first and its last position? Where does
# the last tile stop?
# </details>
#
# <details><summary>Hint 3</summary>
#
# Splits get **contiguous** ranges of tiles, not every `num_splits`-th tile: with 5 tiles and
# 2 programs, program 0 reads tiles 0, 1, 2 and program 1 tiles 3, 4.
# </details>

# %% [markdown]
# ### Exercise 3: the block loop, in Triton
#
# Write the paging part of the kernel: a Triton kernel that copies one sequence's K rows out of
# a paged cache into a contiguous output, tile by tile. It is launched with **one** program:
#
# ```python
# paged_gather_kernel[(1,)](cache, block_table, out, context_len, HEAD_DIM=..., BLOCK_SIZE=..., TILE_N=...)
# ```
#
# - `cache`: `(num_blocks, BLOCK_SIZE, HEAD_DIM)` float32, contiguous: token slot `s` starts at
#   element `s * HEAD_DIM`, and slot = `physical_block * BLOCK_SIZE + offset`.
# - `block_table`: `(num_logical_blocks,)` int32.
# - `out`: `(context_len + guard, HEAD_DIM)` float32; write row `pos` for every
#   `pos < context_len`, and **nothing else** (the guard rows hold a canary value that must
#   survive: in the interpreter an unmasked store silently writes past the end).
#
# **Predict first**, on paper: with `context_len = 10`, `BLOCK_SIZE = 4`, `TILE_N = 8` and the
# block table `[2, 0, 1]`, how many tiles run, which positions of the last tile are real, and
# from which slots of `cache` do they come? Your kernel must get exactly that right.
#
# The loop over tiles is given; fill in its body. The checker runs your kernel in the
# interpreter on shuffled tables, partial blocks and tiles that span several blocks, and
# compares with `gather_kv`.

# %% tags=["exercise-stub"]
import triton
import triton.language as tl


@triton.jit
def paged_gather_kernel(cache_ptr, block_table_ptr, out_ptr, context_len,
                        HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    offs_t = tl.arange(0, TILE_N)                      # (TILE_N,)
    offs_d = tl.arange(0, HEAD_DIM)                    # (HEAD_DIM,)
    num_tiles = (context_len + TILE_N - 1) // TILE_N   # ceil(context_len / TILE_N)
    for tile in range(0, num_tiles):
        pos = tile * TILE_N + offs_t                   # (TILE_N,) positions of this tile
        # your code here: which positions are valid, their physical blocks, their slots,
        # then load the K rows from cache_ptr and store them at rows `pos` of out_ptr
        pass


# %%
check.paged_gather_kernel(paged_gather_kernel)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# The last tile may run past the context. Which of its positions are real? Make that a
# boolean vector and give it to every load and store of the tile as its mask (a 2-D load
# needs it broadcast over `head_dim`).
# </details>
#
# <details><summary>Hint 2</summary>
#
# The paging step is lesson 04's translation, done on a whole vector of positions at once:
# the logical block of each position, its entry in the block table (a load from
# `block_table_ptr`), and its offset inside the block. A token's slot then follows as in the
# exercise's description.
# </details>
#
# <details><summary>Hint 3</summary>
#
# A K row is `HEAD_DIM` contiguous floats; a 2-D tile of addresses is a column of row starts
# plus a row of `offs_d`. The output row of a position is addressed the same way, from `pos`
# instead of its slot.
# </details>

# %% [markdown]
# ### After exercise 3: kvlab's own block loop
#
# Here is the loop of kvlab's kernel, printed from its source (nothing copied by hand) once your
# kernel passes the check above (it holds the answer); compare it with your gather kernel. Its
# paging step is yours; the rest is the online softmax.

# %%
import inspect

from kvlab.kernels import paged_decode

lines = inspect.getsource(paged_decode.paged_decode_kernel.fn).splitlines()
start = next(i for i, line in enumerate(lines) if "for tile in range" in line)
indent = len(lines[start]) - len(lines[start].lstrip())
end = next(i for i, line in enumerate(lines)                 # the loop ends where the indent comes back
           if i > start and line.strip() and len(line) - len(line.lstrip()) <= indent)
gather_passed = check.paged_gather_kernel(paged_gather_kernel, verbose=False).passed   # silent, 0.5 s
if gather_passed:
    print("\n".join(lines[start - 1:end]).rstrip())
else:
    print("kvlab's block loop is shown here once your paged_gather_kernel passes its check (it would give "
          "the answer away); run this cell again then.")

# %% [markdown]
# And `load_kv_tile` (whole once your kernel passes, its signature until then), which turns (physical block, offset) into
# element addresses with the cache's strides; `kv_head * stride_cache_head` picks this
# program's KV head:

# %%
tile_src = inspect.getsource(paged_decode.load_kv_tile.fn).rstrip()
if gather_passed:
    print(tile_src)
else:                                            # the signature only: the body holds the answer
    print(tile_src[:tile_src.index("):") + 2] + "\n    ...  # the body is shown once your kernel passes its check")

# %% [markdown]
# ## Summary
#
# - A decode step attends one new query per sequence to its whole context; with paging the
#   kernel finds each position's K and V through the block table:
#   `block_table[pos // block_size]`, offset `pos % block_size`.
# - kvlab's kernel loops over tiles of positions with an online softmax, one program per
#   (sequence, KV head), all query heads of a GQA group together. A tile is at least 64 tokens
#   of whole blocks (the pictures step 4-token tiles to show the order, which is the same);
#   split-K cuts a long context's tiles into contiguous ranges, one program each.
# - Measured here: the kernel matches plain attention on contiguous K/V, and shuffling every
#   physical block leaves the output bit-for-bit identical. Physical placement is free; only
#   the table matters.
# - Next, lesson 06: several block tables pointing at the same blocks (sharing).
