# Lesson 04 source (jupytext percent format). Edit this file, then run
# `.venv/bin/python scripts/build_notebooks.py 04` to rebuild notebooks/04_paging.ipynb.

# %% [markdown]
# # 04 · Paging: blocks, the block table, address translation
#
# Lesson 03 showed what goes wrong when every request gets one contiguous range: memory
# reserved for tokens that never come, copies when a request outgrows its range, free space in
# holes too small to use, and no sharing. PagedAttention's answer is the operating system's:
# cut the KV cache into fixed-size **blocks** and give each request a **block table** (块表).
#
# **What you will learn**
# - how a token position becomes a physical address: the notes' pos 9 → L2, offset 1 → P1, and
#   where its K and V really sit in vLLM's and kvlab's per-layer tensors;
# - how a request grows on demand, one block at a time, and where its blocks end up;
# - why the waste is at most one partly filled block per request (15 tokens with blocks of 16,
#   31 with blocks of 32), and why vLLM's default block size is 16;
# - how an allocator with reference counts (引用计数) hands out and takes back blocks.
#
# Terms in Chinese: [glossary](glossary.md). The block bookkeeping below is **simulated**
# (kvlab's allocator does what a server does); the bytes of section 1 are **measured** on real
# tensors.

# %%
import kvlab
from kvlab.check import self_test

self_test();

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
from kvlab.lessons import NOTES_TABLE

t = kvlab.translate(NOTES_TABLE, pos=9, block_size=4)
print(f"block table {NOTES_TABLE}, block_size 4")
print("\n".join(t.steps(block_size=4, bytes_per_token=1)))

# %% [markdown]
# In bytes, the notes write `address = base(P1) + offset × bytes_per_token`, where one token
# costs `bytes_per_token` = its K and V for **every layer** (lesson 02). For Llama-2 7B that is
# 512 KiB a token, so P1 would start at `1 × 4 × 524,288` bytes and token 9 one slot further:

# %%
# NBVAL_CHECK_OUTPUT
llama7 = kvlab.get_model("llama-2-7b")
bpt = llama7.bytes_per_token
t7 = kvlab.translate(NOTES_TABLE, pos=9, block_size=4, bytes_per_token=bpt)
print(f"bytes_per_token = {bpt:,}")
print(t7.steps(block_size=4, bytes_per_token=bpt)[-1])

# %% [markdown]
# That formula is the address in **one** buffer laid out block by block, each slot holding a
# token's K and V of all layers together. Neither vLLM nor kvlab stores it that way: kvlab
# gives each layer its own K tensor and V tensor of shape `(num_blocks, block_size, kv_heads,
# head_dim)` (`PagedKVPool.k_cache[layer]`); vLLM v1 keeps a layer's K and V together in one
# tensor of shape `(2, num_blocks, block_size, kv_heads, head_size)` (its FlashAttention
# backend's `get_kv_cache_shape`), the same layout with K and V side by side. In both, **the
# same block id indexes every layer's tensors**: the
# kernel for layer 3 reads `k_cache[3][P1, 1]`. So token 9's K and V are 2 × 32 pieces, one per
# layer and per K or V, each at slot 5 of its own tensor. Measured on a real pool with
# Llama-2 7B's shapes (fp16, 10 blocks of 4):

# %%
# NBVAL_CHECK_OUTPUT
import torch

from kvlab.compute.kv_tensors import PagedKVPool

pool = PagedKVPool(num_layers=llama7.layers, num_blocks=10, block_size=4, num_kv_heads=llama7.kv_heads,
                   head_dim=llama7.head_dim, dtype=torch.float16)
k3 = pool.k_cache[3]                                                  # layer 3's K: (num_blocks, block_size, kv_heads, head_dim)
offset = k3[t.physical_block, t.offset].data_ptr() - k3.data_ptr()    # bytes from the start of that tensor
per_slot = llama7.kv_heads * llama7.head_dim * 2                      # one token's K (or V) in one layer
print(f"k_cache[3] has shape {tuple(k3.shape)}; token 9 (P{t.physical_block}, offset {t.offset}) starts "
      f"{offset:,} bytes into it")
print(f"= slot {t.slot} x {per_slot:,} bytes (kv_heads {llama7.kv_heads} x head_dim {llama7.head_dim} x 2): {offset == t.slot * per_slot}")
print(f"2 (K, V) x {llama7.layers} layers x {per_slot:,} = {2 * llama7.layers * per_slot:,} bytes = bytes_per_token "
      f"{pool.bytes_per_token():,}: the same bytes, in {2 * llama7.layers} tensors")

# %% [markdown]
# The slot (5) and the byte count agree; what differs is where the bytes sit. A per-layer
# layout is what the kernels want: one layer's attention reads only that layer's K and V,
# contiguously per block.
#
# ## 2. The picture: move the position
#
# Drag **pos**, or change the **block size** (tokens per block: vLLM's `block_size`, its
# `--block-size` option), or type another block table (a bad entry, or bytes per token that is not
# a whole number of at least 1, is refused with a message in red; the walk and the figure keep the
# last good values, and the box shows what you typed). The table on top of the widget
# walks the steps, one row each; the figure shows which physical block and slot the token lands
# in. Positions 8, 9, 10, 11 all land in P1, at offsets 0 to 3; position 12 jumps to P5. The
# request's blocks do not need to be in order or next to each other: that is the whole point.
# Every block is drawn the same width whatever the block size; type a table with a block far
# away (3, 7, 1, 5, 99) and the pool's runs that the table does not use are drawn as "…".

# %%
import kvlab.viz as viz

viz.TranslationWidget(block_table=NOTES_TABLE, pos=9, block_size=4)

# %% [markdown]
# > **Analogy box: the KV cache as a search index (the second source note).** The notes compare
# > the **KV cache** to a search engine's **forward index** (each document → the terms it holds,
# > built once when the document is indexed and read by every query) and the **block table** to
# > a **skip list** (jump ahead in a long sorted list instead of reading every entry).
# >
# > *Where it holds.* A forward index is built once and then only read, and so is the cache: a
# > token's K and V are computed once and read at every later decode step (lesson 01). And like a
# > skip list, the block table lets the kernel reach position 9 without walking positions 0 to 8.
# >
# > *Where it breaks.* A skip list is still a **search**: O(log n) hops, comparing keys at each.
# > A block table is a **page table**: `block_table[pos // block_size]` is one array read, no
# > search and no comparison, the same cost for every position. And an index is consulted for a
# > few entries per query, while attention reads **every** cached token at every step: the cache
# > is scanned, not searched (lesson 11 measures what that costs).
#
# > **Analogy box: virtual memory.** PagedAttention is named after the operating system's
# > paging: block = page, block table = page table, a sequence = a process, a token position = a
# > virtual address.
# >
# > *Where it holds.* The translation arithmetic; pages allocated on demand, anywhere; no
# > external fragmentation; pages shared after a fork and copied on write (lesson 06).
# >
# > *Where it breaks.* No MMU or TLB does the lookup: the attention kernel reads the table itself,
# > in software, for every block it reads. No page faults: a sequence's blocks are allocated before
# > the kernel runs. And the unit is a token slot, not a byte: a slot holds a token's K and V.
#
# > **Analogy box: mmap (the source notes: "mmap = block table").** `mmap` gives a process one
# > contiguous range of virtual addresses whose pages sit anywhere in physical memory, filled in
# > when first touched.
# >
# > *Where it holds.* A sequence sees one contiguous run of positions 0, 1, 2, ... while its
# > blocks sit anywhere in the pool (the notes' table: P3, P7, P1, P5, P9); a block is given out
# > only when a position in it is first needed; two processes that map the same file share its
# > pages, as two requests with the same prefix share its blocks (lessons 06 and 07).
# >
# > *Where it breaks.* `mmap` is backed by a file and the MMU translates in hardware, filling a
# > page on a fault; a KV block is backed by nothing (its K and V are computed, not read from a
# > file, until lesson 10 adds host memory and disk), the attention kernel translates in software,
# > and the scheduler allocates before the kernel runs, so nothing ever faults.
#
# ## 3. The real run: requests grow on demand
#
# A pool of 12 blocks of 4 tokens. R1 arrives with a 6-token prompt, R2 with 3 tokens. Each
# decode step appends one token to each; a request gets a new block **only when its last block
# is full**. Then R1 finishes and its blocks go back to the pool, and R3 (9 tokens) arrives.
# kvlab's `BlockManager` records a snapshot after every event; step through them below: each
# step is one action, said in words. Every used block names its request and logical block
# (`R2 L1` is R2's second block), so each request's block table reads off the pool, and the
# legend lists only the requests that hold blocks at that step (the integrity check runs on
# every frame). Each caption ends with the free queue, front first: watch R1's blocks join its
# back at the step where R1 finishes, and R3 take P6, P7, P8 from its front.

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

cols = 12   # one row: the stepper fits one screen, and the page's width
viz.memory_map_stepper(m.snapshots, m.log, title="Paged KV pool: on-demand growth", cols=cols, tables=False,
                       step_legend=True, free_queue=True, tight=True)  # blocks named "R1 L0": no arrows

# %% [markdown]
# The same recording as a plotly animation (press play, or drag the slider: its steps are
# numbered as the stepper's). It needs no running kernel, so it also plays in an exported HTML
# page. As in the stepper, each step's legend lists only the requests that hold blocks at that
# step; the free queue is not printed here: read it in the stepper's captions above.

# %%
viz.animate_memory_map(m.snapshots, m.log, title="Paged KV pool: on-demand growth", duration_ms=500, cols=cols,
                       tables=False)

# %% [markdown]
# The final state, as data, and what it says about where blocks come from (printed from the
# run):

# %%
# NBVAL_CHECK_OUTPUT
final = m.snapshot()
for seq, table in final.tables.items():
    print(f"{seq}: {final.num_tokens[seq]} tokens, block table {list(table)}")
print("free queue (front first):", list(final.free_block_ids))
print("events recorded (one per table operation):", len(m.log), "=", len(m.snapshots) - 1, "frames")
r2, r3 = final.tables["R2"], final.tables["R3"]
r1_blocks = next(e.block_ids for e in m.log if e.kind == "free_seq" and e.seq_id == "R1")
between = [b for a, c in zip(r2, r2[1:]) for b in range(a + 1, c)]
if between:
    print(f"R2's blocks {list(r2)} are not next to each other: {', '.join(f'P{b}' for b in between)} between them "
          f"{'was' if len(between) == 1 else 'were'} {'R1' if set(between) <= set(r1_blocks) else 'another'}'s, "
          "taken while R2 was still filling its block")
else:
    print(f"R2's blocks {list(r2)} happen to be next to each other")
print(f"R1's freed blocks {list(r1_blocks)} joined the back of the free queue, so R3 got {list(r3)}: "
      f"{'none' if not set(r3) & set(r1_blocks) else sorted(set(r3) & set(r1_blocks))} of R1's")

# %% [markdown]
# The free pool is a first-in first-out queue, and freed blocks join its back (as in vLLM's
# free-block queue; it is also what makes a freed block the last to be reused, which lesson 08's
# prefix cache relies on).
#
# The notes compare this to two things a programmer knows. Each is judged on the run above
# (simulated), with the numbers printed below the boxes.
#
# > **Analogy box: a shared memory pool (the notes: "shared memory pool = block pool").** One
# > pool of equal blocks, set aside when the server starts, that every request draws from.
# >
# > *Where it holds.* No request owns a region of memory: any free block serves any request, and
# > the blocks R1 freed joined the one free queue that R3 and every later request draw from. The
# > pool's size is fixed up front, by a measurement: vLLM's worker runs one forward pass on
# > dummy inputs of the largest batch it will schedule (`profile_run`, called by
# > `determine_available_memory` in `vllm/v1/worker/gpu_worker.py`), takes the peak memory that
# > pass used (weights plus activations, plus what other libraries allocated), and gives the KV
# > cache `total memory × gpu_memory_utilization` (0.9 by default) minus that peak; divided by
# > one block's bytes (all layers' K and V) that is the number of blocks, `num_gpu_blocks`.
# >
# > *Where it breaks.* "Shared" means shared **over time**: at any moment a block has one
# > writer; it is shared at the same time only when its reference count is above 1, and then
# > only read (copy-on-write, lesson 06). And it is not a GPU's "shared memory": that is the
# > on-chip SRAM of one streaming multiprocessor, at most 164 KB on an A100 and 228 KB on an
# > H100, that a kernel uses for its tiles.
#
# > **Analogy box: L2 on-demand loading (the notes: "L2 on-demand loading = on-demand
# > allocation").** The notes' L2 is not a CPU cache: it is the warm tier of their ad index,
# > whose entries are loaded into memory only when a query first asks for them. A KV block is
# > likewise allocated only when the request's last block is full.
# >
# > *Where it holds.* Nothing is taken ahead of need: R1 and R2 each took a block at the step
# > their last block filled, never before, so a request that stops early never held memory for
# > tokens it did not produce (lesson 03's over-reservation is gone).
# >
# > *Where it breaks.* The warm tier loads, on a miss, a copy of entries that already exist on a
# > slower tier; a KV block is allocated ahead of the write and holds data that exists nowhere
# > else until the model computes it. And a warm tier drops cold entries on its own (they can be
# > loaded again); a full KV pool cannot drop a running request's blocks: the scheduler must
# > preempt it (lesson 08). Lesson 10 puts real tiers under the KV cache.

# %%
# NBVAL_CHECK_OUTPUT
decode = list(m.log)[2:14]                          # the twelve one-token appends of the six decode steps
grow = [e for e in decode if e.block_ids]            # those that had to take a new block
print(f"on demand: {len(grow)} blocks were taken while decoding, each at the step its request's last block was full: "
      + ", ".join(f"{e.seq_id} -> P{e.block_ids[0]}" for e in grow))
held_max = max(len(s.tables.get("R1", ())) for s in m.snapshots)
print(f"R1 held at most {held_max} blocks ({held_max * m.block_size} slots) for its {6 + 6} tokens; reserving its "
      f"maximum length up front (say 4,096) would have held {4096 // m.block_size:,} blocks, more than the whole pool of {m.num_blocks}")
print(f"one pool, drawn on by everyone: R1's freed blocks {list(r1_blocks)} joined the free queue "
      f"{list(final.free_block_ids)} that R3 took {list(r3)} from; blocks shared at this moment (ref count > 1): "
      f"{sum(1 for c in final.ref_count if c > 1)}")

# %% [markdown]
# ## 4. Waste is at most one block per request
#
# A request with `n` tokens holds `ceil(n / block_size)` blocks, so only its last block can be
# partly empty: at most `block_size - 1` wasted slots, whatever `n` is: 15 tokens with blocks of
# 16, 31 with blocks of 32. Measured on the allocator, for 1,000 requests with lengths from 1 to
# 4,096 (simulated, seed 0), beside a contiguous arena that reserves the maximum length:

# %%
# NBVAL_CHECK_OUTPUT
import random

rng = random.Random(0)
lengths = [min(4096, max(1, int(rng.lognormvariate(6.0, 0.9)))) for _ in range(1000)]


def waste_on_allocator(lengths, block_size):
    """Admit every request into a pool just big enough; return (slots held, wasted slots per request)."""
    pool = kvlab.BlockManager(num_blocks=sum(kvlab.blocks_needed(n, block_size) for n in lengths), block_size=block_size)
    for i, n in enumerate(lengths):
        pool.add_sequence(f"r{i}", n)
    snap = pool.snapshot()
    waste = [len(snap.tables[s]) * block_size - snap.num_tokens[s] for s in snap.tables]
    pool.check_integrity()
    return sum(len(t) for t in snap.tables.values()) * block_size, waste


tokens = sum(lengths)
print(f"{len(lengths)} requests, {tokens:,} tokens (median {sorted(lengths)[len(lengths) // 2]})")
for bs in (16, 32):
    held, waste = waste_on_allocator(lengths, bs)
    print(f"block_size {bs}: {held:,} slots held, waste {held - tokens:,} ({(held - tokens) / held:.1%}); "
          f"largest waste of one request {max(waste)} (bound {bs - 1}); mean {sum(waste) / len(waste):.1f}")
print(f"contiguous, max_len 4096: {len(lengths) * 4096:,} slots, waste {len(lengths) * 4096 - tokens:,} "
      f"({1 - tokens / (len(lengths) * 4096):.1%})")

# %% [markdown]
# ## 5. Why blocks of 16?
#
# vLLM's default block size (`block_size`, `--block-size`) is 16 tokens. The table below puts
# the two sides of the choice next to each other, for the same 1,000 requests:
# - **waste** and **max waste/request**, measured on the allocator: the smaller the block, the
#   less of it stays empty;
# - **lookups/request**: one block-table read per block, so they grow as blocks shrink;
# - **K bytes/block/layer**: what the kernel reads for one block of one layer's K (Llama-2 7B,
#   fp16: block_size × 32 KV heads × 128 × 2 bytes, one contiguous piece in the layout above,
#   `(num_blocks, block_size, kv_heads, head_dim)`); the smaller the block, the shorter each read;
# - **blocks per tile**: how many blocks kvlab's decode kernel gathers in one loop iteration
#   (`tile_tokens`: whole blocks, at least 64 tokens).
#
# The kernel side is counted, not timed (there is no GPU here). The vLLM paper (Kwon et al.,
# 2023, section 7.2) timed it: blocks that are too small may not use the GPU's parallelism for
# reading and processing the KV cache, blocks that are too large waste more memory and are
# shared less often, and vLLM sets 16 as its default.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.kernels.paged_decode import tile_tokens

rows = []
print(f"{'block_size':>10} {'waste':>6} {'max waste/request':>17} {'lookups/request':>15} {'K bytes/block/layer':>19} "
      f"{'blocks per tile':>15}")
for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
    held, waste = waste_on_allocator(lengths, bs)
    lookups = sum(kvlab.blocks_needed(n, bs) for n in lengths) / len(lengths)
    read = bs * llama7.kv_heads * llama7.head_dim * 2                  # one block of one layer's K, all heads
    rows.append((bs, (held - tokens) / held, max(waste), lookups))
    print(f"{bs:>10} {(held - tokens) / held:>6.1%} {max(waste):>17} {lookups:>15.1f} {read:>19,} "
          f"{tile_tokens(bs) // bs:>15}")
w = {bs: share for bs, share, _, _ in rows}
lk = {bs: n for bs, _, _, n in rows}
print(f"from 16 to 256 the waste grows {w[256] / w[16]:.0f}x ({w[16]:.1%} -> {w[256]:.1%}); from 16 down to 1 the "
      f"lookups per request grow {lk[1] / lk[16]:.0f}x ({lk[16]:.0f} -> {lk[1]:.0f}) while the waste falls by "
      f"{w[16] - w[1]:.1%} of the memory")

# %% [markdown]
# The same rows as a picture: move the block size and watch the two costs pull against each
# other, the empty slots on the left, the lookups on the right (log scale); the sentence
# compares the size you pick with half and double it.

# %%
viz.BlockSizeControl(rows, block_size=16)

# %% [markdown]
# Where the balance lies depends on the workload's lengths (short requests make big blocks
# waste more of their memory), which is why vLLM's `--block-size` is a setting, 16 by default.
#
# The notes' fragmentation example from lesson 03, run on the paged pool: the 6,144 tokens
# that fit nowhere contiguously fit in blocks, and D (8,192 tokens) fits too once B and C hold
# only the tokens they have produced so far instead of their reservations (on-demand growth).
# `fragmentation_example()` runs both allocators (simulated; its docstring explains the
# numbers):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import fragmentation_example

ex = fragmentation_example()
print(f"contiguous: {ex.contiguous_free} free, largest hole {ex.contiguous_largest_free}: "
      f"{ex.d_small_tokens} fits? {ex.d_small_fits_contiguous}")
print(f"paged ({ex.block_size}-token blocks): {ex.d_small_tokens} fits? {ex.d_small_fits_paged}")
print(f"paged, D = {ex.d_tokens} with B, C at their reservations: fits? {ex.d_fits_paged_same_sizes}")
print(f"paged, D = {ex.d_tokens} with B = {ex.b_used}, C = {ex.c_used} tokens so far: "
      f"fits? {ex.d_fits_paged_on_demand} ({ex.paged_free_blocks_on_demand} free blocks before D)")

# %% [markdown]
# ## 6. Paging's four benefits, each with its number
#
# The notes credit paging with four things: no external fragmentation, at most one block's
# waste per request, growth without moving what is stored (扩容零搬迁, "growing moves nothing"),
# and sharing. Each is checked here on this lesson's runs (simulated), and the line says whether
# it held:

# %%
# NBVAL_CHECK_OUTPUT
held16, waste16 = waste_on_allocator(lengths, 16)
fork = kvlab.BlockManager(num_blocks=512, block_size=16)
fork.add_sequence("S0", 1000)
for i in range(1, 4):
    fork.fork("S0", f"S{i}")                      # four samples of one 1,000-token prompt
shared_slots = (fork.num_blocks - fork.allocator.num_free_blocks) * 16
grew = moved = 0                                  # the on-demand run m of section 3: did growing move a block?
for before, after in zip(m.snapshots, m.snapshots[1:]):
    for seq, table in before.tables.items():
        later = list(after.tables.get(seq, ()))
        if later:
            grew += max(0, len(later) - len(table))
            moved += sum(a != b for a, b in zip(table, later))
benefits = [
    ("no external fragmentation", ex.d_small_fits_paged and not ex.d_small_fits_contiguous,
     f"{ex.d_small_tokens:,} tokens fit in blocks where the largest contiguous hole was {ex.contiguous_largest_free:,}"),
    ("waste of at most one block per request", max(waste16) <= 15,
     f"{(held16 - tokens) / held16:.1%} of the slots wasted with blocks of 16 (largest {max(waste16)} per request), "
     f"against {1 - tokens / (len(lengths) * 4096):.1%} reserving 4,096 each"),
    ("growth without copying (扩容零搬迁)", grew and not moved,
     f"the requests of section 3 took {grew} new blocks as they grew, and {moved} of the blocks they already held moved "
     "(a contiguous request that outgrows its region is copied whole: lesson 03)"),
    ("blocks shared between requests", shared_slots < 4 * 1000,
     f"4 samples of a 1,000-token prompt hold {shared_slots:,} slots, not {4 * 1000:,} (ref counts, lesson 06)"),
]
for i, (name, held, evidence) in enumerate(benefits, 1):
    print(f"{i}. {name}: {'holds' if held else 'does NOT hold'} -- {evidence}")
fork.check_integrity()

# %% [markdown]
# ## 7. Exercises
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
# Work the example by hand once more with `bytes_per_token = 1024` (the address is 5,120), and
# then with `pos = -1`: what would a Python list do with that index, and what does the contract
# want?
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
# Python's `//` rounds down. Whatever you write, try it on `2**60 + 1` tokens in blocks of 16
# (the answer is `2**56 + 1`): Python's ints are exact at any size, floats are not.
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
# Draw the two examples of the contract with blocks of 4: the blocks before the append and after
# it. What does your drawing show that the request did not hold before, and where did the new
# tokens go first?
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
#   nothing) if a block is already free, or is listed more times than it has references.
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
# A `deque` takes from one end and adds at the other: which end is the front of the queue, and
# which end must a freed block join so that it is reused last?
# </details>
#
# ## Summary
#
# - A block table maps a request's logical blocks to physical blocks anywhere in the pool;
#   position `pos` lives in logical block `pos // block_size` at offset `pos % block_size`.
#   The notes' pos 9 → L2, offset 1 → P1 (slot 5); its K and V sit at slot 5 of each layer's K
#   and V tensor, all indexed by the same block id.
# - Requests grow on demand, one block when the last one is full; freed blocks return to the
#   pool and can be reused by anyone: no external fragmentation.
# - The waste is at most `block_size - 1` slots per request (the last block): 15 with vLLM's
#   default of 16, which trades little waste against a kernel that reads whole blocks.
# - Reference counts let several holders share a block; it is freed when the count reaches 0.
#
# Next: [05 The paged kernel](05_paged_kernel.ipynb), where K and V are real tensors and a
# Triton kernel reads them through the block table. Words: [glossary](glossary.md).
