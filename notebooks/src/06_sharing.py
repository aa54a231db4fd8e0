# Lesson 06: sharing blocks between sequences (fork, reference counts, copy-on-write).
# Source of truth for notebooks/06_sharing.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 06

# %% [markdown]
# # 06 · Sharing: fork, reference counts and copy-on-write
#
# **What you will learn**
#
# - Why parallel sampling and beam search make several sequences hold **the same prompt**, and how a
#   paged KV cache stores that prompt once: every sequence's [block table](glossary.md)
#   points at the same physical blocks.
# - How a [reference count](glossary.md) (引用计数) per block says how many block
#   tables hold it, and when a block really returns to the free pool.
# - **Copy-on-write** ([写时复制](glossary.md)): a sequence that is about to write into a
#   block it shares first gets a private copy, and only that block is copied.
# - How much memory sharing saves, measured on kvlab's real allocator, and why the notes'
#   "about 55%" is the top of the vLLM paper's beam-search range on the Alpaca dataset
#   (37.6-55.2%), not a paging number.
#
# Lesson 04 built one block table per sequence; here several tables point at the same blocks.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example: one prompt, three samples
#
# Parallel sampling asks for several answers to one prompt (`n=3` in an API call). The prompt's
# K and V are the same for every sample, so they are computed and stored once; each sample is a
# **fork** of the prompt's sequence. We use the real `kvlab.BlockManager` with block size 4 and
# 12 physical blocks, and a 10-token prompt: blocks L0 and L1 are full, L2 holds 2 tokens.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab import BlockManager

m = BlockManager(num_blocks=12, block_size=4, record=True)
m.add_sequence("R1", 10)              # prefill the 10-token prompt once
m.fork("R1", "R2")                    # sample 2 shares every block of R1
m.fork("R1", "R3")                    # sample 3 too
for seq, table in m.tables.items():
    print(f"{seq}: block table {table.block_ids}, {table.num_tokens} tokens")
print("ref_count of P0..P3:", m.allocator.ref_count[:4], "| free blocks:", m.allocator.num_free_blocks)
m.check_integrity()

# %% [markdown]
# Three sequences, 30 tokens in all, and only **3 blocks** used: each of P0, P1, P2 has
# `ref_count = 3`. Forking took no block and copied no byte; it only raised the counts.
#
# Now each sample decodes its first token. Token 10 goes to logical block L2, offset 2. L2 is
# **partial and shared**: if R2 wrote there in place, R1 and R3 would see R2's token. So
# `m.append(seq, 1)` first copies L2 into a fresh block and returns the copy to do, `(src, dst)`.
# The full blocks L0 and L1 are never written again, so they stay shared.

# %%
# NBVAL_CHECK_OUTPUT
for seq in ["R2", "R3", "R1"]:
    copies = m.append(seq, 1)
    print(f"{seq} appends token 10: copies {copies}, table {m.tables[seq].block_ids}")
print("ref_count of P0..P5:", m.allocator.ref_count[:6])
m.check_integrity()

# %% [markdown]
# Read the order carefully: R2 copied P2 to P3 and R3 copied P2 to P4, each dropping one
# reference from P2. When R1's turn came, P2's count was already 1: R1 is its **last holder**, so
# R1 writes in place and nothing is copied. Three samples cost two copies, not three.
#
# Two things decided what each append did: whether the block the token lands in was already
# holding tokens, and how many tables still held it. Exercise 1 asks you to turn that into the
# allocator's rule yourself.
#
# **Fork and copy-on-write are the vLLM paper's design** (vLLM V0's block manager forked a
# sequence's table and copied on write). vLLM V1 serves `n > 1` another way:
# `ParentRequest` in `vllm/v1/engine/parallel_sampling.py` fans the request out into `n` ordinary
# child requests (`get_child_info(index)` names child `index` `f"{index}_{request_id}"` and gives it
# a copy of the sampling parameters with `n = 1`, and `seed + index` when a seed is set), then
# gathers their outputs. With prefix caching on (the V1 default), the children share the prompt: the same prompt
# hashes to the same full blocks (the block-hash cache of lesson 07), which are stored once with a
# reference per child. Only full blocks are hashed, so each child's partial last block is its
# own from the start, and there is nothing to copy on write. The saving on full prompt blocks is
# the same as a fork's.

# %% [markdown]
# ## 2. The picture
#
# Every step of the run above, replayed from its event log (one step per table operation):
# blocks coloured by the sequence that allocated them, shared blocks outlined with their
# reference count (`x3`), the block being touched outlined in red. Step through it with the
# buttons. The buttons above the stepper swap in the same run with an **8-token prompt**, which
# fills L0 and L1 exactly: step to the samples' first tokens in both runs and compare.

# %%
from kvlab.viz import memory_map_choice

m8 = BlockManager(num_blocks=12, block_size=4, record=True)   # the same run, an 8-token prompt
m8.add_sequence("R1", 8)
m8.fork("R1", "R2")
m8.fork("R1", "R3")
for seq in ["R2", "R3", "R1"]:
    m8.append(seq, 1)
m8.check_integrity()
runs = {"10-token prompt (ends inside L2)": m, "8-token prompt (fills L0 and L1)": m8}
memory_map_choice(    # both runs one height, every caption two lines' room: nothing jumps
    runs, title="Parallel sampling: fork and copy-on-write", source="simulated",
    cols=12,           # the 12 blocks in one row: the stepper and its picture fit one projector screen
    step_legend=True,  # each step's legend lists only what it draws
    tight=True)        # no empty subtitle room: the legend stays on a projector screen

# %% [markdown]
# ## 3. Freeing shared blocks
#
# A block returns to the free pool only when its **last** reference goes. When R2 finishes,
# P0 and P1 lose one reference each (they are still held by R1 and R3), and P3, R2's private
# copy, is released.

# %%
# NBVAL_CHECK_OUTPUT
released = m.free("R2")
print("R2 freed; blocks released to the pool:", released)
print("ref_count of P0..P5:", m.allocator.ref_count[:6])
m.check_integrity()

# %% [markdown]
# The same moment as a picture, one step after the stepper's last: R2's table is gone, the shared
# blocks' counts went down by one, and the block outlined red is back in the pool, light grey.

# %%
from kvlab.viz import event_figure

event_figure(m.snapshots, m.log, title="Freeing R2: only its last references go", cols=12)

# %% [markdown]
# ## 4. The real run: K and V really are shared, and copy-on-write keeps samples apart
#
# The allocator only hands out block numbers. Here is the same story with real tensors: a paged
# K/V pool `[num_blocks, block_size, kv_heads, head_dim]`, the prompt's K/V written once with the
# `store_kvcache` kernel, three forks, the copies done by the `copy_blocks` kernel, each sample's
# own new token written into its own block, and then **one batched call of the paged decode
# kernel** for the three samples. We compare each sample with plain attention over that
# sample's own contiguous K/V (prompt + its token). All kernels run in the Triton interpreter
# on the CPU; no time is printed: this cell checks values, not speed.

# %%
# NBVAL_CHECK_OUTPUT
import torch

import kvlab.kernels as K

torch.manual_seed(0)
dev = K.DEVICE                                                      # "cpu" in the interpreter, "cuda" on a GPU
block_size, num_blocks, kv_heads, heads, head_dim = 4, 12, 2, 4, 16
k_cache = torch.zeros(num_blocks, block_size, kv_heads, head_dim, device=dev)  # (num_blocks, block_size, kv_heads, head_dim)
v_cache = torch.zeros_like(k_cache)

run = BlockManager(num_blocks=num_blocks, block_size=block_size)
prompt_k = torch.randn(10, kv_heads, head_dim)                       # (10, kv_heads, head_dim)
prompt_v = torch.randn(10, kv_heads, head_dim)
run.add_sequence("R1", 10)
K.store_kvcache(prompt_k.to(dev), prompt_v.to(dev), k_cache, v_cache, torch.tensor(run.tables["R1"].slot_mapping(), device=dev))
run.fork("R1", "R2")
run.fork("R1", "R3")

new_k = {s: torch.randn(1, kv_heads, head_dim) for s in ["R1", "R2", "R3"]}   # each sample's own token
new_v = {s: torch.randn(1, kv_heads, head_dim) for s in ["R1", "R2", "R3"]}
for s in ["R2", "R3", "R1"]:
    copies = run.append(s, 1)
    if copies:
        K.copy_blocks(k_cache, v_cache, copies)                       # copy-on-write, on the tensors
    slot = torch.tensor(run.tables[s].slot_mapping(10, 11), device=dev)   # where token 10 of s goes
    K.store_kvcache(new_k[s].to(dev), new_v[s].to(dev), k_cache, v_cache, slot)
run.check_integrity()

seqs = ["R1", "R2", "R3"]
q = torch.randn(3, heads, head_dim).to(dev)                          # (num_seqs, heads, head_dim)
tables = torch.tensor([run.tables[s].block_ids for s in seqs], dtype=torch.int32, device=dev)
lens = torch.tensor([11, 11, 11], dtype=torch.int32, device=dev)
out = K.paged_decode_attention(q, k_cache, v_cache, tables, lens)    # (3, heads, head_dim)
for i, s in enumerate(seqs):
    k_full = torch.cat([prompt_k, new_k[s]])                          # (11, kv_heads, head_dim) contiguous
    v_full = torch.cat([prompt_v, new_v[s]])
    want = K.naive_attention(q[i:i + 1].cpu(), k_full, v_full, causal=False)[0]
    print(f"{s}: table {run.tables[s].block_ids}  paged kernel == own contiguous K/V: "
          f"{torch.allclose(out[i].cpu(), want, atol=1e-5)}")
print("prompt blocks P0, P1 stored once, shared by", run.allocator.ref_count[0], "sequences")

# %% [markdown]
# Every sample sees the shared prompt *and only its own* token 10: copy-on-write kept them apart
# while the first 8 tokens' K/V exist once in memory.
#
# ### With the bundled model
#
# `kvlab.compute.generate.generate(..., strategy="paged", n=4)` does all of this inside a real decode:
# it prefills the prompt once, forks it for 4 samples, and copies on write when a sample first
# writes into the shared partial block. The samples draw their own random noise (seeded), so
# they diverge; the same seeds without any cache (`"naive"`, each sample recomputing its whole
# sequence) give the same tokens.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.compute.generate import generate
from kvlab.compute.loader import load_bundled

torch.set_num_threads(1)                      # a tiny model is fastest on one thread
model, tok = load_bundled()
prompt = tok.encode("The socket module provides a")
res = generate(model, prompt, 12, strategy="paged", n=4, temperature=0.8, seed=0, block_size=4, keep=True)
full, rest = divmod(len(prompt), 4)
print(f"prompt: {len(prompt)} tokens = {full} full block{'s' * (full != 1)} + {rest} token{'s' * (rest != 1)} "
      "in a partial block")
print("copy-on-write copies (src, dst):", res.copies)
for sid in res.seq_ids:
    print(f"{sid}: block table {res.manager.tables[sid].block_ids}")
print("ref_count of the full prompt block P0:", res.manager.allocator.ref_count[0])
naive = generate(model, prompt, 12, strategy="naive", n=4, temperature=0.8, seed=0)
print("same samples as recomputing without a cache:", naive.sequences == res.sequences)
held = res.manager.tables[res.seq_ids[0]].num_tokens
if held < len(prompt) + 12:
    print(f"each table holds {held} of its {len(prompt) + 12} tokens: the last sampled token is not fed back "
          "yet, so its K/V is not in the cache")
res.manager.check_integrity()

# %% [markdown]
# The bundled model is tiny (trained from scratch on a CPU in about 13 minutes), so its samples read
# as nonsense. What matters here is that the four differ and that the paged path reproduces,
# token for token, what recomputing without a cache samples.

# %%
for i in range(4):
    print(f"sample {i}: {res.text(tok, i)!r}")

# %% [markdown]
# ## 5. How much memory does sharing save? (measured on the allocator)
#
# **Parallel sampling.** A prompt of `P` tokens, `n` samples, `g` new tokens each. Without
# sharing every sample stores its own copy of the prompt. With sharing, the prompt's full blocks
# are stored once. The helper `measured_sampling_blocks` runs both on the real allocator
# (forks, appends, copy-on-write) and counts the blocks in use at the end.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons.sharing import measured_sampling_blocks

print(f"{'prompt':>6} {'n':>3} {'new':>4} | {'blocks, no sharing':>18} {'with sharing':>12} {'saved':>6}")
for P, n, g in [(10, 3, 1), (200, 4, 50), (500, 4, 50), (500, 8, 200), (2000, 8, 100)]:
    alone, shared = measured_sampling_blocks(P, n, g, block_size=16)
    print(f"{P:>6} {n:>3} {g:>4} | {alone:>18} {shared:>12} {1 - shared / alone:>6.0%}")
by_n = {n: measured_sampling_blocks(500, n, 50, block_size=16) for n in (2, 4, 8)}
rates = {n: 1 - shared / alone for n, (alone, shared) in by_n.items()}
trend = "grows" if all(a < b for a, b in zip(list(rates.values()), list(rates.values())[1:])) else "does not grow"
print(f"prompt 500 and 50 new tokens held fixed, only n changing: the saving {trend} with n ("
      + ", ".join(f"n = {n}: {r:.0%}" for n, r in rates.items()) + ")")

# %% [markdown]
# The saving is large when the prompt is long compared with the answers. Read the rows with
# care: from `(500, 4, 50)` to `(500, 8, 200)` both `n` and the answers grow, and four times
# longer answers (which no sample shares) pull the saving down; the last line holds the prompt
# and the answers fixed and changes only `n`.
# The first row saves nothing: a 10-token prompt fills no block of 16, and a partial block is
# copied as soon as a sample writes into it.
# The vLLM paper measured 6.1% to 9.8% savings for parallel sampling on the Alpaca dataset,
# whose prompts are short; here a 2,000-token prompt with short answers saves far more.
#
# **Beam search** can share more: the `k` beams are re-forked at every step, so they share not only
# the prompt but most of the generated text, and a beam that drops out releases its private
# blocks. Below, a beam search with width 4 over 24 steps, driven by seeded random scores
# (**simulated** scores; the blocks are counted on the **real** allocator). Each step: every
# surviving candidate forks its parent beam, the old beams are freed, each new beam appends one
# token (copy-on-write where needed). Its saving is compared below with parallel sampling on the
# *same* prompt, number of sequences and length. The table's rows above are not comparable
# with this run: a row's saving depends on how long its prompt is against its answers (the
# `(500, 4, 50)` row's prompt is ten times its answers; here 100 against 24), not only on
# whether it samples or searches.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons.sharing import beam_search_blocks   # fork, free, append on the real allocator, each step

shared_used, alone_used = beam_search_blocks(prompt_len=100, width=4, steps=24)
print("blocks in use, with sharing   :", shared_used)
print("blocks in use, without sharing:", alone_used)
beam_saving = 1 - sum(shared_used) / sum(alone_used)
ranges = {"Alpaca": (0.376, 0.552), "ShareGPT": (0.443, 0.663)}   # the paper's Sec. 6.3, beam search (text)
where = {d: "inside" if lo <= beam_saving <= hi else "above" if beam_saving > hi else "below"
         for d, (lo, hi) in ranges.items()}
print(f"average saving over the run: {beam_saving:.0%}: " + "; ".join(
    f"{where[d]} the vLLM paper's beam-search range on {d} ({lo:.1%}-{hi:.1%})" for d, (lo, hi) in ranges.items()))
samp = [measured_sampling_blocks(100, 4, g, block_size=16) for g in range(1, 25)]   # sampling, the same setup:
samp_avg = 1 - sum(s for _, s in samp) / sum(a for a, _ in samp)                   # (no sharing, sharing)
samp_end, beam_end = 1 - samp[-1][1] / samp[-1][0], 1 - shared_used[-1] / alone_used[-1]   # after each step
print(f"\nsaved, prompt 100, 4 sequences, 24 steps:  {'average over the steps':>22} {'after the last step':>20}")
print(f"  beam search, width 4                     {beam_saving:>22.0%} {beam_end:>20.0%}")
print(f"  parallel sampling, 4 samples             {samp_avg:>22.0%} {samp_end:>20.0%}")
verdict = {(True, True): "more, on average and at the end", (False, False): "no more, on average or at the end",
           (True, False): "more on average, but not at the end", (False, True): "more at the end, but not on average"}
print("like for like, beam search shares", verdict[beam_saving > samp_avg, beam_end > samp_end],
      "(a row of the table above is not comparable: another prompt, number of sequences and answer length)")

# %%
import plotly.graph_objects as go

from kvlab.viz.sharing_view import SHARED_COLOR, SHARED_NAME, UNSHARED_COLOR, UNSHARED_NAME  # the control's colours

fig = go.Figure([
    go.Scatter(y=alone_used, name=UNSHARED_NAME, mode="lines+markers", line_color=UNSHARED_COLOR),
    go.Scatter(y=shared_used, name=SHARED_NAME, mode="lines+markers", line_color=SHARED_COLOR),
])
fig.update_layout(title="Beam search, width 4, prompt 100, blocks of 16<br>blocks in use (simulated scores, real allocator)",
                  xaxis_title="decode step", yaxis_title="blocks in use", height=420, margin=dict(t=90, b=120),
                  legend=dict(orientation="h", x=0, y=-0.3))
fig.update_yaxes(rangemode="tozero")          # from 0: the gap between the lines is the saving
fig

# %% [markdown]
# **Checking a claim.** The source notes say paging "saves about 55%" of KV memory. That
# figure is the vLLM paper's *beam search* result (37.6% to 55.2% saved by sharing, on the
# Alpaca dataset; 44.3% to 66.3% on ShareGPT, whose prompts are longer); for parallel sampling
# the paper reports 6.1% to 9.8% on Alpaca (16.2% to 30.5% on ShareGPT). It is a sharing
# saving, not what paging alone saves. Our toy run's saving and where it falls against the
# paper's range are printed under the run above; the exact number depends on prompt length
# (here 100 tokens, long against 24 generated ones, which raises the saving), width and how
# often the beams re-converge.
# Lesson 09 puts the claims side by side.
#
# ### Try it: samples, beam width, new tokens, block size, prompt length
#
# Move a slider: both runs are counted again on the real allocator (a fraction of a second), and
# the caption says how the prompt lies in blocks and how many block copies copy-on-write made
# (the red line under the sampling bars counts them too).
# **The experiment to try:** keep the block size at 16 and set the prompt to 96 tokens, then to 100.
# Then try other block sizes with the same prompt: which ones make the copies disappear? The cell
# under the control prints what you should see at 96 and 100.

# %%
from kvlab.viz import SharingControl

SharingControl(samples=4, beam_width=4, prompt_len=100, new_tokens=24, block_size=16)

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons.sharing import sampling_run   # the control's sampling run: blocks, copies, shared blocks

by_prompt = {P: sampling_run(P, 4, 24, block_size=16) for P in (96, 100)}
for P, r in by_prompt.items():
    full, rest = divmod(P, 16)
    print(f"prompt {P} = {full} blocks of 16" + (f" + {rest} tokens" if rest else "")
          + f": {r.shared_prompt_blocks} blocks shared by 4 samples, {r.copies} block copies; "
          f"{r.shared} blocks in use ({r.alone} without sharing)")
a, b = by_prompt[96], by_prompt[100]
print("the same blocks in use:" if a.shared == b.shared else "different blocks in use:", a.shared, "and", b.shared,
      "| copies:", a.copies, "and", b.copies)

# %% [markdown]
# A prompt that ends on a block boundary leaves no partial block, so no sample ever writes into a
# shared block and nothing is copied. A prompt with a few tokens past the boundary leaves a shared
# partial block, and every sample but the last copies it on its first write. The copy costs a
# block copy (time), but not always memory: each copy becomes the block that sample fills with
# its own tokens, so the count of blocks in use (last line) can come out the same.

# %% [markdown]
# ### "Dedup is a free dividend of batching"
#
# The notes close with this maxim. Is sharing free, and is it a dividend of batching? Both
# halves checked on the allocator (the sentences below are printed from the run):

# %%
# NBVAL_CHECK_OUTPUT
bm = BlockManager(num_blocks=12, block_size=4)
bm.add_sequence("R1", 10)
before = bm.allocator.num_used_blocks
bm.fork("R1", "R2")
bm.fork("R1", "R3")
forked = bm.allocator.num_used_blocks
copies = [c for s in ("R2", "R3", "R1") for c in bm.append(s, 1)]
bm.check_integrity()
BS = 16                                                    # the real-size block of section 4
one = measured_sampling_blocks(500, 1, 50, block_size=BS)
short = measured_sampling_blocks(10, 3, 1, block_size=BS)
short4 = measured_sampling_blocks(10, 3, 1, block_size=bm.block_size)   # section 1's blocks of 4
big = measured_sampling_blocks(2000, 8, 100, block_size=BS)
beam_saved = 1 - sum(shared_used) / sum(alone_used)
print(f"Free: forking 2 more samples from a 10-token prompt (3 sequences in all) took {forked - before} new blocks and copied nothing; "
      f"their first tokens then cost {len(copies)} block copies (copy-on-write of the shared partial block).")
print(f"A dividend of batching, in blocks of {BS}: one sequence alone saves {1 - one[1] / one[0]:.0%}; 3 samples "
      f"of a 10-token prompt {1 - short[1] / short[0]:.0%} (the prompt is shorter than one block; in section 1's "
      f"blocks of {bm.block_size} they save {1 - short4[1] / short4[0]:.0%}, {short4[1]} blocks against {short4[0]}); "
      f"8 samples of a 2,000-token prompt {1 - big[1] / big[0]:.0%}; the beam search above {beam_saved:.0%} on average.")

# %% [markdown]
# So the maxim holds with two provisos the numbers show: "free" means no memory and no copy at
# the fork, but the first write into a shared partial block pays one block copy per writer but
# the last; and the dividend is only as large as what the batch's sequences share: nothing for
# a lone sequence or a prompt shorter than a block, most of the memory for many samples of a
# long prompt or for beams that keep re-converging.

# %% [markdown]
# ## 6. Exercises
#
# ### Exercise 1: copy-on-write append
#
# Write `cow_append(block_table, num_tokens, ref_count, free_blocks, block_size)`: make room
# for **one** more token of a sequence whose blocks other sequences may hold too. You design
# the rule; the contract says only what must be true afterwards.
#
# - `block_table`: the sequence's physical block ids (a list; change it in place).
# - `num_tokens`: how many tokens the sequence holds **before** the append.
# - `ref_count`: `ref_count[b]` is how many block tables hold block `b` (change it in place).
# - `free_blocks`: the free block ids; when you need one, take the **first** (`free_blocks.pop(0)`).
# - Return the block copies the KV store must do, as a list of `(src, dst)` pairs (`[]` for none).
#
# Afterwards: the slot for the new token is in a block that **no other table holds**, every
# other sequence still reads exactly what it read before, `ref_count` counts the tables holding
# each block, and you copied and allocated **as little as possible** (section 1: R1 copied
# nothing; which appends there had to copy, and why?). When the append needs a block and
# `free_blocks` is empty, raise `kvlab.OutOfBlocks(1, 0)` **without changing anything**.
# Before you code: list the situations the last block can be in, and what each one needs.
# The checker compares with `kvlab.BlockManager.append(seq_id, 1)` on hand-made and random pools.

# %% tags=["exercise-stub"]
def cow_append(block_table, num_tokens, ref_count, free_blocks, block_size):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.cow_append(cow_append)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Two facts decide everything: is there room left in the last block, and does anyone else hold
# it? Go back to section 1 and name the case each of R2, R3 and R1 was in.
# </details>
#
# <details><summary>Hint 2</summary>
#
# A block with no room left is never written again. Does it matter then who else holds it?
# </details>
#
# <details><summary>Hint 3</summary>
#
# "Change nothing" on a refused append: in what order must you look at `free_blocks` and change
# the other lists?
# </details>

# %% [markdown]
# ### Exercise 2: blocks saved by parallel sampling
#
# Implement `sampling_blocks(prompt_len, num_samples, gen_len, block_size)` returning
# `(without_sharing, with_sharing)`: how many blocks are in use once every one of
# `num_samples` samples has generated `gen_len` tokens after a `prompt_len`-token prompt.
# Without sharing each sample holds its own prompt; with sharing the samples are forks of one
# prefilled prompt and follow the copy-on-write rule above. The checker compares with
# `measured_sampling_blocks`, which runs the real allocator. Use a formula, not a simulation.

# %% tags=["exercise-stub"]
def sampling_blocks(prompt_len, num_samples, gen_len, block_size):
    raise NotImplementedError("your code here")


# %%
check.sampling_blocks(sampling_blocks)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Without sharing, every sample is an ordinary sequence of `prompt_len + gen_len` tokens with
# its own blocks. How many blocks does one such sequence need (lesson 04)?
# </details>
#
# <details><summary>Hint 2</summary>
#
# With sharing, which prompt blocks are never written after the fork? Exercise 1's rule says
# what happens to the others the moment a sample writes its first token.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Work one small case by hand (prompt 6, 2 samples, 3 new tokens, blocks of 4) and one with no
# new tokens at all: does your formula give both?
# </details>

# %% [markdown]
# ## Summary
#
# - `fork` shares every block of a sequence: no memory, no copy, just `ref_count += 1`.
# - A block is freed when its last reference goes; `check_integrity()` verifies that every
#   block's `ref_count` equals the number of tables holding it.
# - Copy-on-write copies one block, only when a sequence writes into a **partial, shared** block;
#   the last holder writes in place.
# - Measured on the allocator: parallel sampling saves most with long prompts and many samples;
#   beam search also shares part of the generated text, which samples never do (on Alpaca's
#   short prompts the vLLM paper measured 37.6-55.2% saved for beam search against 6.1-9.8% for
#   sampling; the toy run's own figures are printed in section 5).
# - Next, lesson 07: sharing **across requests** (a system prompt every request repeats), found
#   automatically by a radix tree.
