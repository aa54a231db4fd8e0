# Lesson 00 source (jupytext percent format). Edit this file, then run
# `.venv/bin/python scripts/build_notebooks.py 00` to rebuild notebooks/00_start_here.ipynb.

# %% [markdown]
# # 00 · Start here
#
# This series is about one piece of an LLM inference server: the **KV cache**, the keys and
# values that every generated token leaves behind. You will build up, run and test the two
# ideas that modern servers use to manage it:
#
# > **PagedAttention decides how KV memory is laid out (the physical layer); RadixAttention
# > decides which cached content can be reused across requests (the logical layer);
# > RadixAttention is built on top of paged allocation.**
#
# **What you will learn here**
# - how to check that your set-up works (the self-test below; every lesson starts with it);
# - the map of the thirteen lessons, and which layer each one is about;
# - how the exercises are checked, by trying three warm-ups (the last one needs some thought).
#
# Words in Chinese from the source notes (块表, 前缀树, 写时复制 ...) are in the
# [glossary](glossary.md).

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# If the cell above ends with `self-test OK`, you are set. If it raised an error, the message
# says what to fix (usually: run `scripts/setup.sh`, then restart the kernel). On a laptop the
# kernels run in Triton's **interpreter** on the CPU: correct, but slow, so every lesson uses
# small sizes, and the big runs live in `bench/`.
#
# ## The thesis in four tiny runs
#
# **The physical layer: where a token lives (lesson 04).** The KV cache is cut into fixed-size
# *blocks*. A request keeps a *block table* (块表) that maps its logical blocks to physical ones.
# The source notes' figure: block size 4, table L0→P3, L1→P7, L2→P1, L3→P5, L4→P9. Where is
# token 9? kvlab's real `translate` walks it (simulated: no tensors, just the arithmetic the
# kernel does; here a token takes 1 byte, so its slot and its byte address are one number: lesson 04
# gives a token its real size, its K and V for every layer):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import NOTES_TABLE, notes_translation

t = notes_translation(pos=9)
print("block table:", NOTES_TABLE)
print("\n".join(t.steps(block_size=4, bytes_per_token=1)))

# %% [markdown]
# **Why the cache is worth managing (lesson 02).** Its size is
# `2 × layers × kv_heads × head_dim × tokens × bytes`. For Llama-2 70B at 4096 tokens in fp16
# (computed from the model's published config, not measured), beside the memory of one H100, a
# GPU that servers run this model on (kvlab's figure for the card):

# %%
# NBVAL_CHECK_OUTPUT
spec = kvlab.get_model("llama-2-70b")
print(spec.formula(4096))
one, h100 = spec.kv_bytes(4096), kvlab.get_gpu("h100-80gb")
batch = h100.memory_bytes // one + 1                 # the fewest 4,096-token requests that overflow the card
print(f"one request: {kvlab.format_bytes(one)}, about {one / (4096 * 1e3):.0f} KB for every token; "
      f"{batch} such requests at once: {kvlab.format_bytes(batch * one)}, more than the whole H100 "
      f"({kvlab.format_bytes(h100.memory_bytes)}, which is {h100.memory_bytes / 2**30:.1f} GiB: the '80GB' in its "
      f"name rounds binary gigabytes, lesson 02), before the model's "
      f"{kvlab.format_bytes(spec.params_b * 1e9 * spec.dtype_bytes)} of fp16 weights")

# %% [markdown]
# **Still the physical layer: sharing blocks (lesson 06).** Two requests get their blocks from a
# real `BlockManager`; a third sequence, R3, *forks* the first (a second sample of R1's prompt),
# sharing its blocks by reference count (引用计数) instead of copying them. Nothing here looks at
# what the tokens are: fork and copy-on-write (写时复制) are about how blocks are laid out and
# shared, so they belong to the physical layer (simulated allocator, block size 4, 12 blocks):

# %%
# NBVAL_CHECK_OUTPUT
m = kvlab.BlockManager(num_blocks=12, block_size=4)
m.add_sequence("R1", 10)  # 10 tokens -> 3 blocks
m.add_sequence("R2", 5)   # 5 tokens -> 2 blocks
m.fork("R1", "R3")  # R3, a second sample of R1's prompt, shares R1's 3 blocks
snap = m.snapshot("R3 forks R1: its table points at R1's blocks")
for seq, table in snap.tables.items():
    print(f"{seq:11s} block table {list(table)}")
print("ref counts  ", list(snap.ref_count))
print("free blocks ", snap.num_free_blocks, "of", snap.num_blocks)
m.check_integrity()

# %% [markdown]
# The same pool as a picture (kvlab.viz reads the snapshot; it never changes state). Each block
# is drawn in the colour of a request that **holds** it now (green when only the radix tree does,
# grey when free) and filled from the left as far as it holds tokens. A block with two or more
# holders keeps one request's colour (the one that allocated it, while it still holds it) and
# gets a dark outline and its reference count, `x2`; above the pool, each sequence's block table
# with an arrow into every block it uses shows all its holders. These rules hold in every
# picture of this lesson:

# %%
import kvlab.viz as viz

viz.memory_map_figure(snap, title="Two requests and a fork", by_holder=True)

# %% [markdown]
# **The logical layer: reusing content (lesson 07).** Now the *tokens* matter. A
# `CacheManager` keeps a radix tree (前缀树) over the token ids of finished requests. R1 finishes;
# R2 starts with the same system prompt, so its longest prefix match (最长前缀匹配) finds R1's
# cached blocks and R2 computes only its own question (simulated, one token a character). In the
# picture after the run, the blocks R2 reuses have two holders, R2 and the tree: R2's colour,
# outlined, `x2`, as R1's forked blocks were above; the block only the tree holds is green:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import char_tokenize

cm = kvlab.CacheManager(num_blocks=12, block_size=4)
system = char_tokenize("你是客服助手，请简洁回答")          # a 12-token system prompt (3 blocks)
r1, r2 = system + char_tokenize("怎么退款"), system + char_tokenize("何时发货")
cm.admit("R1", r1)
cm.cache_finished_req("R1", r1)                           # R1 is done: its full blocks stay cached
adm = cm.admit("R2", r2)
print(f"R2: {len(r2)} tokens, {adm.prefix_len} found in the cache (R1's blocks), {len(r2) - adm.prefix_len} to compute")
print("R2's block table:", list(adm.table.block_ids), "| the tree holds:", cm.tree.tree_block_ids())
cm.check_integrity()

# %%
viz.memory_map_figure(cm.snapshot("R2 reuses the system prompt R1 left in the radix tree"),
                      title="The radix tree is a holder too", by_holder=True)

# %% [markdown]
# ## The thesis in one widget
#
# The two layers, working together on one small pool (12 blocks of 4, a real `CacheManager`,
# simulated). R1 runs and finishes; the radix tree keeps its blocks. Then R2 arrives.
#
# R2 has been prefilled and is still running (decoding), so it holds its blocks, and its path in
# the tree is locked against eviction.
#
# - Tick or untick **R2 starts with R1's system prompt**: the radix tree (**show: the radix
#   tree**; matched nodes green, what R2 computed blue, dashed boxes the only ones that could be
#   evicted: in this widget a dashed outline means that and nothing else) finds R1's blocks, or
#   nothing.
# - Pick a **block table** and move the **token position**: the figure (**show: the
#   translation**) walks the translation through that table. The pool is drawn as above, by who
#   holds each block *now*, whichever table you pick: R1 has finished and holds nothing, so only
#   its tokens are in R1's colour, and the block only the radix tree holds is green in every view.
#   The sentence under the picture says whether the token lives in a block R1 computed and R2 reuses. With
#   the prefix shared, R2's positions 0-11 land in R1's blocks: the logical layer chose *which*
#   blocks to reuse, the physical layer says *where* each token is.
# - Controls that would change nothing are greyed out: the tree view greys the table menu and
#   the position (they move the translation only); the notes' example greys the checkbox (the
#   notes' table has no run behind it, so R2's prompt changes nothing in it).

# %%
viz.ThesisWidget(shared=True, table="R2", pos=5)

# %% [markdown]
# ## The map of the series
#
# | Lesson | What it shows | Layer |
# |---|---|---|
# | [00 Start here](00_start_here.ipynb) | this page: the self-test, the map, how exercises work | the map |
# | [01 Why a KV cache](01_why_kv_cache.ipynb) | naive recomputation versus caching on the bundled model and a real LLM (SmolLM2-135M): same tokens, O(n²) versus O(n) work | computation |
# | [02 How big is it](02_how_big.ipynb) | the size formula, MHA versus GQA, the notes' 10.7 GB versus the real 1.34 GB, how many requests fit on a GPU | physical |
# | [03 Contiguous allocation](03_contiguous.ipynb) | the four costs: over-reservation, copy on growth, external fragmentation (外部碎片), no sharing | physical |
# | [04 Paging](04_paging.ipynb) | blocks, the block table (块表), address translation of pos 9, on-demand growth, waste of at most one block, why 16 | physical |
# | [05 The paged kernel](05_paged_kernel.ipynb) | a Triton kernel reads K and V through the block table; shuffled blocks, same answer | physical |
# | [06 Sharing](06_sharing.ipynb) | fork for parallel sampling and beam search, reference counts, copy-on-write (写时复制) | physical |
# | [07 RadixAttention](07_radix.ipynb) | the prefix tree (前缀树), longest prefix match (最长前缀匹配), the four customer-service requests | logical |
# | [08 Eviction and scheduling](08_eviction_scheduling.ipynb) | LRU eviction (驱逐), lock references, cache-aware scheduling, hit rate under memory pressure | logical |
# | [09 At scale](09_at_scale.ipynb) | the simulator checks the notes' claims against published figures; paged versus radix, summed up | both, at scale |
# | [10 Tiers and the lifecycle of a KV block](10_tiers.ipynb) | one block from free to cached to offloaded and back: GPU, host memory and disk under the radix tree | both, beyond the GPU |
# | [11 Fewer bytes per token](11_fewer_bytes.ipynb) | the notes' hot and cold tokens measured on SmolLM2; MHA, GQA, MQA, MLA; int8 and fp8 KV; StreamingLLM, H2O and Quest as block-table operations, against measured quality | bytes per token |
# | [12 A real server](12_real_server.ipynb) | kvlab behind the OpenAI API: the notes' four requests sent for real, the server's live dashboard, `/metrics` beside the simulator, two servers behind SGLang's router (cache-aware versus round robin) | both, on a real server |
#
# Lessons 02 to 06 are the **physical layer**: how KV memory is sized, laid out, read and
# shared block by block (fork and copy-on-write share blocks by reference count; they never ask
# what the tokens are). Lessons 07 and 08 are the **logical layer**: which cached content a new
# request can reuse, found by matching its tokens. 01 connects both to real computation, 09 to
# real scale, 10 to memory beyond the GPU, 11 makes each token's KV smaller, and 12 runs it all
# inside a real server.
#
# ## How a lesson works
#
# Every lesson has the same skeleton: *what you will learn*; a tiny worked example; the
# picture (an interactive view from `kvlab.viz`; set `KVLAB_STATIC=1` before starting Jupyter
# for static images); the real run (the real allocator, kernel or model, never a mock-up); two
# to four exercises; a summary. Every number says whether it is **simulated** (kvlab's
# bookkeeping or simulator) or **measured** (timed or computed on this machine), and every
# sentence that names a trend or a winner is printed from the numbers above it.
#
# Run the cells from top to bottom (Run ▸ Run All Cells works too). Lessons import `kvlab`; if
# you want to see how something is done, open its source: `kvlab.translate??` in a cell.
#
# **Teaching with a projector?** Run `import kvlab.viz as viz; viz.classroom(True)` right after a
# lesson's self-test. Every figure drawn after it takes the width of the output area (laid out
# for a 1280×720 screen with JupyterLab's file browser open), with large fonts, thick lines and
# high contrast, and the widgets' buttons, sliders and captions grow (`viz.classroom(False)`
# switches back; figures already drawn keep their look until their cell runs again). The
# steppers' *play* button walks through a run on its own.
#
# ## How exercises work
#
# Each exercise gives a **contract** (inputs, outputs, errors), a **stub** for you to finish,
# and a **check** cell: `check.<name>(your_function)` runs your function beside kvlab's own
# on several sizes, seeds and edge cases. Its first line is the verdict, `PASS` or `FAIL`, with
# the first failing case; under a `FAIL` come a few failing cases, *expected* beside *actual*. It
# never crashes on your bug: an exception from your code becomes a `FAIL` that names it, and when
# your answer is a common mistake (half the right size, off by one block, two values swapped...)
# the line starting `->` says which. Hints are folded under
# *Hint 1*, *Hint 2* (gentle to strong; none is the whole answer); worked solutions are in the
# `solutions/` folder of the repository, apart from the lessons. Until you finish a stub its
# check says `FAIL`: that is expected.
#
# ### Warm-up 1: logical block and offset
#
# **Contract.** `block_and_offset(pos, block_size) -> (logical_block, offset)`: which logical
# block token position `pos` falls in, and where inside that block. Both count from 0, as
# positions do: the notes' position 9, with blocks of 4, is logical block 2 at offset 1.
# - `pos` and `block_size` are ints. **Decide** which of their values describe no token of a paged
#   sequence (positions count from 0; a block holds at least one token) and raise `ValueError`
#   for exactly those: the check tries the smallest valid value of each and the one below it.
#
# **Predict first**, on paper: with blocks of 4, where are positions 3 and 4? With blocks of
# 16, positions 15 and 16? A block's last position and the next one are where an off-by-one
# shows (the check tries all four). Once your code passes, call it on those four in a new cell
# and compare with what you wrote.

# %% tags=["exercise-stub"]
def block_and_offset(pos, block_size):
    raise NotImplementedError("your code here")

# %%
from kvlab import check

check.block_and_offset(block_and_offset)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# With 4 tokens a block, positions 0-3 are in block 0, 4-7 in block 1, 8-11 in block 2. Which
# block is position 8 in, and how far into it? And position 11?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Write the positions 0, 1, 2, ... in rows of `block_size`, one row a block. Which arithmetic on
# `pos` gives its row, and which its column? Try it on the last position of a row. And which
# inputs leave no rows to write, and must be looked at before any arithmetic?
# </details>
#
# ### Warm-up 2: the shared prefix
#
# **Contract.** `common_prefix_len(a, b) -> int`: how many leading tokens the token-id lists
# `a` and `b` have in common, that is, the length of the longest list both start with. This is
# the question RadixAttention asks about every new request (lesson 07).
# - Example: `common_prefix_len([1, 2, 3, 4, 9], [1, 2, 3, 4, 7, 7]) == 4`.
#
# **Predict first**, on paper, from that definition alone; the check tries each of these, so a
# wrong guess turned into code becomes a `FAIL` line:
# - `[5, 6]` and `[5, 6, 7, 8]` (one list ends first)?
# - `[]` and `[1, 2]`?
# - `[0, 1, 2, 3]` and `[9, 1, 2, 3]` (three tokens agree: do they count)?
# - `[3, 1, 2]` and `[1, 3, 2]` (the same tokens in another order)?

# %% tags=["exercise-stub"]
def common_prefix_len(a, b):
    raise NotImplementedError("your code here")

# %%
check.common_prefix_len(common_prefix_len)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Walk both lists together from the start and stop at the first difference. Be careful when
# one list ends before the other.
# </details>
#
# <details><summary>Hint 2</summary>
#
# A walk along two lists can end two ways: a pair of tokens differs, or a list runs out. Do
# equal tokens after the first difference belong to the *prefix*?
# </details>
#
# ### Warm-up 3: what the radix cache really serves
#
# Warm-up 2 counts the shared tokens; the cache serves fewer. Look back at the run above: R1's
# 16 tokens finished and **only its full blocks** stayed in the radix tree, and R2 reused 12
# tokens because the system prompt filled exactly 3 blocks of 4. One more rule: a request
# always **computes at least its last token**, even when the cache holds all of it, because
# that token's output (its logits) picks the next token.
#
# **Contract.** `reusable_tokens(finished, new, block_size) -> int`: request `finished` ran and
# was cached; then `new` arrives. How many of `new`'s tokens come from the cache? Raise
# `ValueError` if `block_size < 1`, or if `finished` or `new` is empty (a request has at least
# one token; kvlab's `CacheManager` refuses an empty one). The check compares your answer with kvlab's real
# `CacheManager` on the same two requests. Before you write code, work these out by hand
# (blocks of 4):
# - R1 and R2 above: 12 (the shared system prompt is 3 whole blocks);
# - `finished = [1, 2, 3, 4, 5, 6, 7]`, `new = [1, 2, 3, 4, 5, 6, 9, 9]`: 6 tokens shared, how many served?
# - the same 8 tokens sent twice: all 8 are cached, how many served?

# %% tags=["exercise-stub"]
def reusable_tokens(finished, new, block_size):
    raise NotImplementedError("your code here")

# %%
check.reusable_tokens(reusable_tokens)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Start from warm-up 2's answer. The paragraph above the contract says what the cache keeps and
# what a request always computes: each can only make the answer smaller.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Whatever you compute, check it against both rules at once, on the contract's three examples:
# is it made of whole blocks, and does it leave the new request's last token to compute?
# </details>
#
# ## Summary
#
# - The first cell of every lesson is the self-test: versions, kernel mode, one known-answer
#   kernel call.
# - The series goes from how KV memory is laid out and shared block by block (02-06, the
#   physical layer) to which cached content can be reused (07-08, the logical layer), checks the
#   source notes' claims at scale (09), follows a block beyond the GPU (10) and makes every
#   token's K and V take fewer bytes (11), then runs it all inside a real server behind the
#   OpenAI API (12).
# - Exercises: contract, stub, `check.<name>(fn)`, hints; solutions live in `solutions/`.
#
# Next: [01 Why a KV cache](01_why_kv_cache.ipynb). The words: [glossary](glossary.md).
