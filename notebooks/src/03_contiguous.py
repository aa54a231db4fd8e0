# Lesson 03 source (jupytext percent format). Edit this file, then run
# `.venv/bin/python scripts/build_notebooks.py 03` to rebuild notebooks/03_contiguous.ipynb.

# %% [markdown]
# # 03 · Contiguous allocation and its four costs
#
# Before vLLM, serving systems gave each request **one contiguous range** of KV memory. The
# output length is unknown when a request arrives, so the range is sized up front. This lesson
# measures what that costs, on kvlab's `ContiguousArena`, so that lesson 04's paging has
# something to beat.
#
# **What you will learn**
# - the three wastes of memory: **over-reservation** (slots reserved for tokens that never
#   come), **copy on growth** (a request that outgrows its range is moved, token by token), and
#   **external fragmentation** (外部碎片: free space split into holes too small to use);
# - the fourth cost, **no sharing**: two requests with the same prefix each hold their own copy;
# - the source notes' A/B/C/D example and their "87% wasted", and precisely what they show;
# - how much of the memory holds tokens under each policy, on a small serving run.
#
# Terms in Chinese: [glossary](glossary.md). Everything here is **simulated**: the arena does
# the bookkeeping in token slots (no tensors), exactly as a server's allocator would.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. Worked examples: one cost at a time
#
# **Over-reservation.** With policy `"max"` every request reserves the model's maximum length
# (here 16 slots) because it might produce that many. Three requests holding 3, 5 and 2 tokens
# in an arena of 64 slots:

# %%
# NBVAL_CHECK_OUTPUT
arena = kvlab.ContiguousArena(capacity=64, policy="max", max_len=16)
for rid, n in [("R1", 3), ("R2", 5), ("R3", 2)]:
    arena.admit(rid, n)
st = arena.stats()
print(f"token states {st.token_states}, reserved but unused {st.reserved_unused}, free {st.free} (of {st.capacity})")
print(f"fraction of memory holding tokens: {st.token_state_fraction:.0%}")

# %% [markdown]
# The notes put a number on it: *request A reserves 4,096 tokens and finishes at 500: 87% of
# its reservation was wasted.* The same on the arena:

# %%
# NBVAL_CHECK_OUTPUT
arena = kvlab.ContiguousArena(capacity=8192, policy="max", max_len=4096)
arena.admit("A", 20)            # a 20-token prompt reserves the maximum, 4,096 slots
arena.grow("A", 480)            # A produces 480 tokens and stops: 500 in all
r, st = arena.requests["A"], arena.stats()
a_reserved, a_tokens, a_unused = r.reserved, r.length, st.reserved_unused  # for the table of the four costs
print(f"A holds {r.length} tokens in a reservation of {r.reserved}: {st.reserved_unused} slots reserved for tokens "
      f"that never came = {st.reserved_unused / r.reserved:.1%} of the reservation (the notes cut it to 87%: "
      f"truncated, not rounded, which would give {st.reserved_unused / r.reserved:.0%})")

# %% [markdown]
# **Copy on growth.** Policy `"pow2"` reserves less (the next power of two of the current
# length) and doubles when a request outgrows it. R1 (3 tokens, 4 slots) sits right before R2;
# when R1 reaches 5 tokens it needs 8 slots, the slots after it are taken, so the arena moves
# R1 to a free range and copies every token it has (here 1 byte a token; for Llama-2 7B it
# would be 512 KiB a token):

# %%
# NBVAL_CHECK_OUTPUT
arena = kvlab.ContiguousArena(capacity=64, policy="pow2", max_len=64)
arena.admit("R1", 3)
arena.admit("R2", 4)
print("before:", [(r.req_id, r.start, r.reserved) for r in arena.requests.values()], "(request, start, reserved)")
r1_slots = arena.requests["R1"].reserved
copied = arena.grow("R1", 2)
moves = arena.stats().moves
print("after: ", [(r.req_id, r.start, r.reserved) for r in arena.requests.values()])
print(f"bytes copied: {copied}, moves: {moves}")
arena.check_integrity()

# %% [markdown]
# **External fragmentation: the notes' example.** An arena of 12,288 token slots holds
# A (4,096), B (2,048) and C (4,096), with 2,048 free at the end. A finishes. The notes say:
# now D needs 8,192 and fails *although 4,096 + 2,048 = 6,144 are free*. Read that sentence
# carefully: **8,192 is more than 6,144**, so D would fail under *any* allocator, paged or not.
# The example mixes two things. `kvlab.lessons.fragmentation_example()` separates them:
#
# - the fragmentation part: a request of **6,144** tokens (all the free space) fails
#   contiguously, because the largest hole is 4,096, but fits in blocks;
# - the on-demand part: D (8,192) fits in a paged pool once B and C hold only the tokens they
#   have produced (say 1,000 and 2,500) instead of their full reservations.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import fragmentation_example

ex = fragmentation_example()
print(f"free after A finished: {ex.contiguous_free}, largest hole: {ex.contiguous_largest_free}, "
      f"stranded outside it: {ex.contiguous_external_fragmentation}")
print(f"D = {ex.d_tokens}: contiguous fits? {ex.d_fits_contiguous}; paged, same reservations: fits? {ex.d_fits_paged_same_sizes}")
print(f"D' = {ex.d_small_tokens}: contiguous fits? {ex.d_small_fits_contiguous}; paged: fits? {ex.d_small_fits_paged}")
print(f"D = {ex.d_tokens}, paged, B and C at {ex.b_used} and {ex.c_used} tokens: fits? {ex.d_fits_paged_on_demand}")
print("contiguous error:", ex.error_contiguous)

# %% [markdown]
# **No sharing.** The fourth cost wastes no slot inside a range, and it is the one the notes
# list last: a contiguous range belongs to one request, so two requests can never hold the same
# tokens once. Four samples of one answer (parallel sampling, `n = 4`) share a 1,000-token
# prompt and each add 100 tokens. Contiguously, each sample's range holds the whole prompt; in a
# paged pool the four block tables point at the same prompt blocks (a *fork*, lesson 06), and
# only the partly filled last prompt block is copied before a sample writes into it:

# %%
# NBVAL_CHECK_OUTPUT
prompt, new, samples, bs = 1000, 100, 4, 16
arena = kvlab.ContiguousArena(capacity=8192, policy="exact", max_len=8192)
for i in range(samples):
    arena.admit(f"S{i}", prompt, final_len=prompt + new)        # each sample: its own copy of the prompt
pool = kvlab.BlockManager(num_blocks=8192 // bs, block_size=bs)
pool.add_sequence("S0", prompt)
for i in range(1, samples):
    pool.fork("S0", f"S{i}")                                     # shares every prompt block
copies = sum(len(pool.append(f"S{i}", new)) for i in range(samples))
held = (pool.num_blocks - pool.allocator.num_free_blocks) * bs
print(f"contiguous: {samples} x ({prompt} + {new}) = {arena.stats().token_states + samples * new} slots "
      f"({samples * prompt} of them the same prompt, {samples} times)")
print(f"paged, forked: {held} slots in {held // bs} blocks ({copies} block copies on the first write)")
print(f"no sharing costs {samples * (prompt + new) - held} slots here: {1 - held / (samples * (prompt + new)):.0%} "
      "of the contiguous total")
pool.check_integrity()

# %% [markdown]
# The four costs side by side, each from its example above (simulated, slots or tokens):

# %%
# NBVAL_CHECK_OUTPUT
costs = [
    ("over-reservation", f"A: reserved {a_reserved:,}, finished at {a_tokens:,}", f"{a_unused:,} slots never used"),
    ("copy on growth", f"R1 outgrew its {r1_slots} slots", f"{copied} tokens copied, {moves} move{'s' * (moves != 1)}"),
    ("external fragmentation", f"A finished: {ex.contiguous_free:,} free, largest hole {ex.contiguous_largest_free:,}",
     f"{ex.contiguous_external_fragmentation:,} slots stranded"),
    ("no sharing", f"{samples} samples of a {prompt:,}-token prompt", f"{samples * (prompt + new) - held:,} slots duplicated"),
]
for name, example, cost in costs:  # two short lines each: they fit a projector's narrow output too
    print(f"{name:23s} {cost}\n{'':23s} ({example})")

# %% [markdown]
# ## 2. The picture: contiguous and paged, side by side
#
# The same example scaled down by 256 (A 16, B 8, C 16 slots in 48), run on both allocators in
# step. The last request is **D'**, all the free space (6,144 / 256 = 24 slots), not the notes'
# D (8,192 / 256 = 32, more than is free). Step through it: the upper map is the contiguous
# arena, the lower one the paged pool with blocks of 4; dark grey slots are free but stranded
# (external fragmentation). The bars below count the same slots for both. At the last step D'
# fails in the upper map and fits in the lower one.
#
# Why are D''s blocks out of order (`D' L0` near the right end, `D' L2` at the far left)? The
# paged side hands out free blocks **first in, first out**, as vLLM's free-block queue does: at
# the start the queue is P0, P1, P2, ... in address order, each request takes blocks from its
# front, and a finished request's blocks join its **back**. When D' arrives the queue holds the
# two blocks no one has used yet (P10, P11) and then A's four freed blocks, so D' gets P10, P11
# and then A's blocks. kvlab queues a finished request's blocks in table order (P0, P1, P2, P3).
# With prefix caching on (the default in vLLM v1), vLLM queues them **tail first** (P3, P2, P1,
# P0): its `KVCacheManager.free` frees them in reverse "so that the tail blocks are evicted first
# when caching is enabled" (lesson 08), since other requests are likelier to share a request's
# first blocks. There D' would get P10, P11, P3, P2, P1, P0. Without a prefix cache the order
# changes nothing: where a block sits does not matter to the paged side, the request's block
# table records it (lesson 04).

# %%
import kvlab.viz as viz

viz.compare_stepper(viz.notes_trace(), capacity=48, block_size=4)

# %% [markdown]
# Growth, under the `"pow2"` policy: requests outgrow their ranges and are copied; the paged
# side only takes one more block when the last one is full (watch the counter of token slots copied).
# When no free range holds a request's doubled size, the caption says **contiguous FAILS** (no
# free range of that size): the request keeps its range and its tokens so far, but that step's
# new tokens have nowhere to go (a real server would preempt the request: free it and recompute it later); the paged side
# only needs a free block for the new tokens, wherever it lies.

# %%
viz.compare_stepper(viz.growth_trace(), capacity=48, block_size=4, policy="pow2")

# %% [markdown]
# ### Change the policy yourself
#
# The steppers above fix the choices. Here you pick them: how the contiguous side **reserves**
# (the maximum length, here 24 slots; the next power of two, doubled when a request outgrows
# it; or exactly the final length, which no real server knows), which **requests** run, and the
# paged side's **block size**. The sentence sums up the whole run and the figure shows its last
# step (simulated). Try: the maximum on the notes' requests (C is refused: A and B reserved
# everything), the oracle on the same (D' still fails: fragmentation, not reservation), the power
# of two on growing requests (tokens copied, and growths that fail: no free range holds the
# doubled size), and blocks of 16 (paged refuses D' too: big blocks
# waste their last slots).

# %%
viz.PolicyWidget(policy="max", trace="notes", block_size=4)

# %% [markdown]
# ## 3. The real run: a small serving loop
#
# Sixty requests (prompt 8 to 199 tokens, output 8 to 299, seed 0) wait in a queue for an
# arena of 4,096 slots, maximum length 512. Every step the server admits waiting requests in
# order while they fit, then every running request produces one token; a request that cannot
# grow is preempted (freed and queued again, to be recomputed). The loop drives the real
# `ContiguousArena` under each policy, and a paged `BlockManager` (blocks of 16) beside them.
# The paged side admits a request only if one free block per running request stays free for
# their next tokens. That rule is kvlab's own variant of a watermark: vLLM's v0 block manager
# keeps a fixed reserve instead, `int(0.01 × num_gpu_blocks)` blocks (its `watermark` of 1%),
# free at admission, however many requests run. 400 steps, simulated:

# %%
import random
from collections import deque

from kvlab import BlockManager, ContiguousArena, OutOfBlocks, OutOfContiguousSpace


def make_requests(n, seed=0):
    rng = random.Random(seed)
    return [(f"R{i}", rng.randrange(8, 200), rng.randrange(8, 300)) for i in range(n)]  # (id, prompt, output)


def serve(requests, how, capacity=4096, max_len=512, block_size=16, steps=400):
    """Run the loop with a contiguous policy ('max', 'pow2', 'exact') or 'paged'; return its figures."""
    paged = how == "paged"
    if paged:
        pool = BlockManager(num_blocks=capacity // block_size, block_size=block_size)
    else:
        arena = ContiguousArena(capacity=capacity, policy=how, max_len=max_len)
    waiting, running = deque(requests), {}
    used, finished, preempted = [], 0, 0
    for _ in range(steps):
        while waiting:  # admit in order while the head of the queue fits
            rid, prompt, output = waiting[0]
            if paged and pool.allocator.num_free_blocks - kvlab.blocks_needed(prompt, block_size) < len(running) + 1:
                break
            try:
                pool.add_sequence(rid, prompt) if paged else arena.admit(rid, prompt, final_len=prompt + output)
            except (OutOfBlocks, OutOfContiguousSpace):
                break
            waiting.popleft()
            running[rid] = (prompt, output, output)
        for rid, (prompt, output, left) in list(running.items()):  # one decode step
            try:
                pool.append(rid, 1) if paged else arena.grow(rid, 1)
            except (OutOfBlocks, OutOfContiguousSpace):
                pool.free(rid) if paged else arena.finish(rid)
                del running[rid]
                waiting.appendleft((rid, prompt, output))
                preempted += 1
                continue
            if left == 1:
                pool.free(rid) if paged else arena.finish(rid)
                del running[rid]
                finished += 1
            else:
                running[rid] = (prompt, output, left - 1)
        tokens = sum(t.num_tokens for t in pool.tables.values()) if paged else arena.stats().token_states
        used.append(tokens / capacity)
    (pool if paged else arena).check_integrity()
    return {"token states": sum(used) / len(used), "finished": finished, "preempted": preempted,
            "tokens copied": 0 if paged else arena.stats().bytes_copied}


# %%
# NBVAL_CHECK_OUTPUT
requests = make_requests(60)
results = {how: serve(requests, how) for how in ("max", "pow2", "exact", "paged")}
print(f"{'policy':8s} {'memory holding tokens':>22s} {'finished':>9s} {'preempted':>10s} {'tokens copied':>14s}")
for how, r in results.items():
    print(f"{how:8s} {r['token states']:22.1%} {r['finished']:9d} {r['preempted']:10d} {r['tokens copied']:14d}")

# %% [markdown]
# What the table says, printed from it (simulated, this workload):

# %%
# NBVAL_CHECK_OUTPUT
from textwrap import fill

say = lambda text: print(fill(text, 76, subsequent_indent="  "))  # noqa: E731  -- wrapped: no word cut on a projector
share = {h: r["token states"] for h, r in results.items()}
best_share = max(share, key=share.get)
most_done = max(results, key=lambda h: results[h]["finished"])
say(f"- 'max' keeps only {share['max']:.1%} of the memory holding tokens: the rest is reserved for tokens "
    "not produced (yet, or ever).")
say(f"- 'pow2' holds {share['pow2']:.1%} but pays twice: {results['pow2']['tokens copied']:,} tokens copied on growth, "
    f"{results['pow2']['preempted']} preemptions when no range was free for the doubled size.")
say(f"- 'exact' is an oracle (no real server knows the output length) and still holds only {share['exact']:.1%}: "
    "reservations for tokens not yet produced, and holes between requests.")
say(f"- the most memory holding tokens: {best_share} ({share[best_share]:.1%}); the most requests finished: "
    f"{most_done} ({results[most_done]['finished']}).")
if share["pow2"] > share["exact"]:
    say(f"- why 'pow2' ({share['pow2']:.1%}) beats the oracle 'exact' ({share['exact']:.1%}) here, when the vLLM "
        "paper's Fig. 2 ranks Orca (Oracle) above Orca (Pow2): this 'pow2' starts from the CURRENT length and grows "
        "by copying, so its range is never more than twice what the request holds now; the oracle reserves the "
        "whole final length on arrival, and that range stays mostly empty while the output is generated. The "
        "paper's Pow2 never grows: it reserves the prompt plus the power of two above the true OUTPUT length up "
        "front (an output of 25 tokens reserves 32 output slots), always at least the oracle's range. The price "
        "of growing is the copies and preemptions above.")

# %% [markdown]
# The notes close with a maxim: **"fragmentation is the enemy of dynamic allocation."** Judged on
# this lesson's runs (simulated): in the A/B/C/D example, and in the serving loop, where `pow2` is
# the dynamic policy (ranges grow as requests do) and paging has no external fragmentation:

# %%
# NBVAL_CHECK_OUTPUT
stranded = ex.contiguous_external_fragmentation / ex.contiguous_free
say(f"- A/B/C/D: {ex.contiguous_external_fragmentation:,} of the {ex.contiguous_free:,} free slots ({stranded:.0%}) lie "
    f"outside the largest hole, so a request of {ex.d_small_tokens:,} fails with that much memory free")
pw, pg = results["pow2"], results["paged"]
say(f"- serving loop: 'pow2' had to move requests ({pw['tokens copied']:,} tokens copied) and preempted "
    f"{pw['preempted']} when no free range was big enough for a doubled size; paged preempted {pg['preempted']} "
    f"and finished {pg['finished']} requests against {pw['finished']}")
holds = stranded > 0 and pg["finished"] >= pw["finished"] and share["paged"] > share["pow2"]
say(f"- the maxim {'holds here' if holds else 'does NOT hold on this run'}: contiguous ranges that grow leave holes "
    f"that stop the next request; blocks of one size leave none, and hold {share['paged']:.1%} of the memory with "
    f"tokens against {share['pow2']:.1%}")

# %% [markdown]
# The vLLM paper (Kwon et al., 2023, Fig. 2) measured the same thing in real systems: only
# 20.4% to 38.2% of the KV memory held token states in the systems before it, 96.3% in vLLM.
# Our tiny run is not their workload; lesson 09 runs kvlab's workload simulator at the papers'
# scale and puts its figures beside theirs; for the large runs, `bench/bench_sim.py` prints
# them from the command line.
#
# ## 4. Exercises
#
# ### Exercise 1: how much to reserve
#
# **Contract.** `reservation(policy, length, max_len, final_len=None) -> int`: the slots a
# request of `length` tokens reserves under `policy`:
# - `"max"`: `max_len`;
# - `"pow2"`: the smallest power of two ≥ `length`, but at most `max_len`;
# - `"exact"`: `final_len` (raise `ValueError` if it is `None`).
#
# Raise `ValueError` for any other policy, or a `length` outside `[1, max_len]`.
# Example: `reservation("pow2", 5, 2048) == 8`.

# %% tags=["exercise-stub"]
def reservation(policy, length, max_len, final_len=None):
    raise NotImplementedError("your code here")

# %%
from kvlab import check

check.reservation(reservation)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Validate `length` first, then branch on the policy. For `"pow2"`, 8 is its own next power of
# two.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Before you trust your rule for `"pow2"`, work four lengths through it by hand: 1, 5, 8 and 9
# (answers 1, 8, 8, 16). Then one more: a length of 1,500 when `max_len` is 1,600. Read the
# contract's two conditions again. Last, a huge one: `2**53 + 1` when `max_len` is `2**60`
# (the answer is `2**54`): Python's ints are exact at any size, floats are not.
# </details>
#
# ### Exercise 2: first fit
#
# **Contract.** `first_fit(free_ranges, n) -> int | None`: `free_ranges` is a list of
# `(start, length)` holes in address order; return the `start` of the first hole with at least
# `n` slots, or `None` if no hole is big enough. Raise `ValueError` if `n < 1`.
# Example: the notes' holes `[(0, 4096), (10240, 2048)]`: `first_fit(..., 3000) == 0`,
# `first_fit(..., 6144) is None`.

# %% tags=["exercise-stub"]
def first_fit(free_ranges, n):
    raise NotImplementedError("your code here")

# %%
check.first_fit(first_fit)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# A request needs **one** hole that is long enough; the total of all holes does not matter.
# That is external fragmentation.
# </details>
#
# <details><summary>Hint 2</summary>
#
# "First" means the lowest address, not the snuggest hole. Try your function on
# `[(0, 100), (300, 25)]` with `n = 20`, on `[(0, 10), (50, 20)]` with `n = 20`, and on an empty
# list: which answer does the contract want each time?
# </details>
#
# ### Exercise 3: external fragmentation
#
# **Contract.** `external_fragmentation(free_ranges) -> int`: the free slots that are **not**
# in the largest hole (the space a request as big as possible cannot use). 0 when there is at
# most one hole. Example: `[(0, 4096), (10240, 2048)]` gives 2048.

# %% tags=["exercise-stub"]
def external_fragmentation(free_ranges):
    raise NotImplementedError("your code here")

# %%
check.external_fragmentation(external_fragmentation)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# The biggest request that can still be placed uses the largest hole. Everything else that is
# free is stranded.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Work the example by hand, then two more: one hole, and no holes at all (`[]`). Does your
# code give what the contract says for each?
# </details>
#
# ### Exercise 4: run an arena by hand
#
# Put exercises 2 and 3 together, the way a contiguous allocator lives: requests arrive and
# finish, holes open and close.
#
# **Contract.** `place_first_fit(capacity, ops) -> dict`. `ops` is a list of
# `("admit", rid, n)` and `("finish", rid)`. Admit places a request of `n` slots at the start of
# the first hole (lowest address) that holds it; if none does, the request is **refused**: it
# takes no space, and its later finish is ignored; a refused id may be admitted again later (it
# is placed if a hole then holds it; each refusal is listed). Finish frees the request's range; a freed
# range and the free ranges right next to it are then **one** hole. Return
# `{"starts": {rid: start} of every request placed, "refused": [rids, in order],
# "largest_hole": int, "wasted_share": float}`, where `wasted_share` is the share of the free
# memory at the end that lies outside the largest hole (0.0 when nothing is free: no free slots,
# nothing stranded, not 0/0). Raise
# `ValueError` for `n < 1`, for admitting a request that is placed already, or for another
# operation. Example: the notes' ops `A 4096, B 2048, C 4096, finish A, D 8192, E 3000` in
# 12,288 slots: D is refused, E starts at 0; the holes left are 1,096 and 2,048 slots, so
# `largest_hole` is 2048 and `wasted_share` 1096 / 3144 ≈ 0.349.

# %% tags=["exercise-stub"]
def place_first_fit(capacity, ops):
    raise NotImplementedError("your code here")

# %%
check.place_first_fit(place_first_fit)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Keep the free ranges as a list of `(start, length)` in address order, starting with one
# range, the whole arena. Admit cuts the front off a range (or uses it all); finish puts a range
# back.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Two neighbouring requests of 10 slots finish; then a request of 15 arrives. Draw the free
# ranges before and after the two finishes: what must happen to ranges that touch, so that
# the 15 fits?
# </details>
#
# ## Summary
#
# - A contiguous range per request wastes memory three ways: reservation for tokens not yet
#   (or never) produced (the notes' A: 87.8% of its 4,096 slots), copies when a request outgrows
#   its range, and holes too small for the next request (external fragmentation). And it cannot
#   share: requests with a common prefix each hold their own copy.
# - The notes' D (8,192 tokens) cannot fit in 6,144 free slots under any allocator; what
#   fragmentation does is make even 6,144 tokens fail when the largest hole is 4,096. Paging
#   fixes that, and on-demand growth frees enough for D itself.
# - On a small serving run, section 3 printed which policy kept the most memory holding
#   tokens (simulated), as the vLLM paper measured on real systems.
#
# Next: [04 Paging](04_paging.ipynb). Words: [glossary](glossary.md).
