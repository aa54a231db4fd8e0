# Lesson 07: RadixAttention: a radix tree of cached prefixes on top of the paged pool.
# Source of truth for notebooks/07_radix.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 07

# %% [markdown]
# # 07 · RadixAttention: reuse what other requests already computed
#
# **What you will learn**
#
# - Why requests to one server repeat each other (a system prompt, few-shot examples, the
#   history of a chat), and why their K/V can be reused only for a shared **prefix**.
# - The [radix tree](glossary.md) (前缀树) that SGLang keeps over token ids: each
#   edge holds a run of tokens and the KV blocks that store them; a new request walks it with
#   its prompt, the [longest prefix match](glossary.md) (最长前缀匹配, LPM).
# - The source notes' four customer-service requests, hits in **green** and misses in **blue**.
# - Multi-turn chat: each turn matches the whole history, so history is never recomputed.
# - Incremental [prefill](glossary.md) (预填充): only the missed suffix is computed, and the
#   result is the same as computing everything.
#
# This is the sentence the series is about: *PagedAttention decides where KV lives (lesson
# 04-06); RadixAttention decides which cached KV a new request can reuse, and it is built on
# the paged allocator.* Every node of the tree below owns blocks of a real `BlockAllocator`.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example
#
# A `RadixCache` over an allocator with block size 1 (one block = one token slot, so block ids
# are slot ids). `serve_request` runs a request's whole memory cycle: match the prompt, lock the
# matched path, allocate blocks for the rest, insert prompt + output into the tree, unlock.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab import BlockAllocator
from kvlab.radix import RadixCache, serve_request

cache = RadixCache(BlockAllocator(num_blocks=16, block_size=1))
r = serve_request(cache, [1, 2, 3, 4], output=[5], rid="R1")
print(f"R1 [1 2 3 4] -> answers [5]: matched {r.matched_len}, prefilled {r.prefill_len}")
print(cache.pretty())
r = serve_request(cache, [1, 2, 3, 9], rid="R2")
print(f"\nR2 [1 2 3 9]: matched {r.matched_len}, prefilled {r.prefill_len}")
print(cache.pretty())
cache.check_integrity()

# %% [markdown]
# R2's match ended **inside** the edge `[1 2 3 4 5]`, after 3 tokens, so the tree split that
# edge into `[1 2 3]` → `[4 5]` and hung R2's own `[9]` beside it. The blocks did not move:
# `[1 2 3]` still uses slots 0-2, which R2 now shares. Children are keyed by their first
# token, so finding the right child is one dictionary lookup.
#
# Two details worth noticing:
#
# - A **prefix** only. The K and V of a token depend on every token before it (through all
#   the layers below), so `[2 3]` at the start of a prompt cannot reuse the K/V of `[2 3]`
#   computed after `[1]`. A tree of prefixes is exactly the structure that respects this.
# - `serve_request` always computes at least the last prompt token, even when the whole
#   prompt is cached (`match_for_prefill`): its logits give the first output token.

# %% [markdown]
# ## 2. The source notes' four requests
#
# An online shop's assistant. Every request starts with the same system prompt **[A]** and the
# same few-shot examples **[B]**:
#
# | request | its own part | what happens |
# |---|---|---|
# | R1 | 怎么申请退款 (how do I get a refund) | [A] hits; [B] and the question are prefilled |
# | R2 | 订单什么时候发货 (when will my order ship) | [A][B] hit; only its question is prefilled |
# | R3 | 发票怎么开 (how do I get an invoice) | [A][B] hit; a miss on its own suffix |
# | R4 | 人工呢 (a human, please?), R1's follow-up | LPM goes root→A→B→C (R1's whole turn); only 人工呢 is prefilled |
#
# `kvlab.radix.four_request_example()` runs them on a real `RadixCache`, one token per character
# (a server that warmed the system prompt first, as many do). Each answer is inserted after its
# request, as SGLang caches finished requests with their output.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.radix import four_request_example

records = four_request_example()
print(f"{'request':<8} {'prompt':>6} {'matched':>7} {'prefilled':>9}  hits (green)   misses (blue)")
for rec in records:
    print(f"{rec.name:<8} {len(rec.prompt_tokens):>6} {rec.matched_len:>7} {rec.prefill_len:>9}  "
          f"{'+'.join(rec.hit_segments) or '-':<14} {'+'.join(rec.missed_segments)}")
print()
print(records[-1].tree_text)

# %% [markdown]
# ## 3. The picture: step through the four requests
#
# The tree after each request (simulated, on the real tree code): the path its prompt matched
# in **green**, the suffix it had to prefill (and the answer cached with it) in **blue**,
# unlocked (evictable) nodes dashed. Press *next*.

# %%
from kvlab.viz import radix_stepper
from kvlab.viz.radix_view import radix_request_frames

radix_stepper(radix_request_frames(records))

# %% [markdown]
# ## 4. Multi-turn chat
#
# In a chat, turn *k*'s prompt is the whole conversation so far plus the new question. With a
# radix cache, turn *k* matches all of turn *k-1* (its prompt **and** its answer), so each
# turn prefills only its own new question, however long the history grows.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.radix import multi_turn_example

turns = multi_turn_example()
for rec in turns:
    print(f"{rec.name}: prompt {len(rec.prompt_tokens):>3} tokens, matched {rec.matched_len:>3}, "
          f"prefilled {rec.prefill_len:>2}  (hits: {'+'.join(rec.hit_segments) or '-'}; new: {'+'.join(rec.missed_segments)})")
no_cache = sum(len(r.prompt_tokens) for r in turns)
with_cache = sum(r.prefill_len for r in turns)
print(f"prefill tokens over the chat: {no_cache} without a cache, {with_cache} with the radix cache")

# %% [markdown]
# ## 5. The real run: prefill only the missed suffix, get the same answer
#
# Does skipping the prefix change the result? Here is the attention of the four requests done
# for real. To keep it small and exact we use **one attention layer** whose K, V and Q come from
# a token embedding plus a position embedding (the first layer of a transformer with learned
# positions: there K/V depend only on the token and its position). The K/V pool is a paged
# tensor whose blocks are the tree's blocks.
#
# For each request: match the prompt in the tree, compute Q/K/V for the **missed suffix only**,
# write its K/V into freshly allocated blocks (`store_kvcache`), and run the `extend_attention`
# kernel, which attends the new tokens over *cached prefix + themselves* through the block
# table. Then compare with plain causal attention over the whole prompt, recomputed from scratch.

# %%
# NBVAL_CHECK_OUTPUT
import torch

import kvlab.kernels as K
from kvlab.radix import char_tokenize

torch.manual_seed(0)
heads, kv_heads, head_dim, dim, num_slots = 2, 1, 16, 32, 256
emb = torch.randn(4096, dim)                                  # token embedding (token id mod 4096)
pos_emb = torch.randn(512, dim)                               # learned position embedding
Wq, Wk, Wv = (torch.randn(dim, n * head_dim) / dim**0.5 for n in (heads, kv_heads, kv_heads))


def qkv(tokens, start):
    """Q, K, V of `tokens` sitting at positions start, start+1, ... (one attention layer)."""
    x = emb[torch.tensor(tokens) % 4096] + pos_emb[start:start + len(tokens)]   # (T, dim)
    return ((x @ Wq).view(-1, heads, head_dim), (x @ Wk).view(-1, kv_heads, head_dim),
            (x @ Wv).view(-1, kv_heads, head_dim))


alloc = BlockAllocator(num_blocks=num_slots, block_size=1)
tree = RadixCache(alloc)
dev = K.DEVICE                                               # "cpu" in the interpreter, "cuda" on a GPU
k_cache = torch.zeros(num_slots, 1, kv_heads, head_dim, device=dev)  # (num_blocks, block_size=1, kv_heads, head_dim)
v_cache = torch.zeros_like(k_cache)
computed = total = 0
for rec in records:
    prompt = list(rec.prompt_tokens)
    m = tree.match_for_prefill(prompt, rid=rec.name)         # longest cached prefix (>= 1 token left)
    tree.inc_lock_ref(m.last_node, rid=rec.name)
    p = m.prefix_len
    new = alloc.allocate(len(prompt) - p, owner=rec.name)    # blocks for the missed suffix only
    q, k, v = qkv(prompt[p:], start=p)                       # computed for the suffix only
    K.store_kvcache(k.to(dev), v.to(dev), k_cache, v_cache, torch.tensor(new, device=dev))
    table = torch.tensor([m.kv + new], dtype=torch.int32, device=dev)   # cached blocks, then the new ones
    out = K.extend_attention(q.to(dev), k_cache, v_cache, table, [p], [len(prompt) - p]).cpu()  # (suffix, heads, head_dim)

    q_all, k_all, v_all = qkv(prompt, start=0)               # from scratch, for comparison
    want = K.naive_attention(q_all, k_all, v_all, causal=True)[p:]
    tree.insert(prompt, m.kv + new, rid=rec.name)            # the tree takes over the new blocks
    tree.dec_lock_ref(m.last_node, rid=rec.name)
    tree.check_integrity()
    computed, total = computed + len(prompt) - p, total + len(prompt)
    print(f"{rec.name:<8} cached {p:>3}, computed {len(prompt) - p:>3} of {len(prompt):>3} tokens; "
          f"same as full recomputation: {torch.allclose(out, want, atol=1e-4)}")
print(f"tokens run through the layer: {computed} of {total} ({1 - computed / total:.0%} saved)")

# %% [markdown]
# Every request's new tokens got exactly the attention output they would have got from a full
# recomputation, while most of the prompt tokens were never computed. (Answers are not inserted
# here, so R4 matches less than in section 2; the engine below inserts them.)

# %% [markdown]
# ### The same with the bundled model, in a serving engine
#
# `kvlab.engine.Engine` is a small continuous-batching server over a paged K/V pool (block size
# 4) with the radix tree in front: each request's prompt is matched, only the missed suffix is
# prefilled (with the extend kernel's torch reference), the answer is decoded through the block
# tables, and the finished sequence goes into the tree. The notes' texts are tokenized with the
# model's own tokenizer (the model was trained on Python documentation, so its Chinese answers are
# nonsense; what matters is that they are the same). R4 is R1's follow-up: R1's prompt, R1's
# actual answer, then 人工呢. We run it twice, with and without the radix tree.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.engine import Engine
from kvlab.model import load_bundled
from kvlab.radix import FOUR_REQUEST_TEXTS as T

torch.set_num_threads(1)                                      # a tiny model is fastest on one thread
model, tok = load_bundled()
system = T["A"] + T["B"]


def serve(radix):
    eng = Engine(model, num_blocks=256, block_size=4, radix=radix, check=True)
    r1 = eng.submit(tok.encode(system + T["R1"]), 8, rid="R1")
    eng.submit(tok.encode(system + T["R2"]), 8, rid="R2", arrival_step=12)
    eng.submit(tok.encode(system + T["R3"]), 8, rid="R3", arrival_step=24)
    eng.run()
    eng.submit(r1.prompt_ids + r1.outputs[0] + tok.encode(T["R4"]), 8, rid="R4", arrival_step=eng.step_no)
    return eng.run()


plain, radix = serve(radix=False), serve(radix=True)
print(f"{'request':<8} {'prompt':>6} | {'prefilled (no tree)':>19} | {'reused (tree)':>13} {'prefilled (tree)':>16}")
for a, b in zip(plain.requests, radix.requests):
    print(f"{a.rid:<8} {len(a.prompt_ids):>6} | {a.prefill_computed:>19} | {b.prefill_saved:>13} {b.prefill_computed:>16}")
print("same answers with and without the tree:", [r.outputs for r in plain.requests] == [r.outputs for r in radix.requests])
print(f"prompt tokens run through the model: {plain.summary()['prefill_computed']} without the tree, "
      f"{radix.summary()['prefill_computed']} with it")
n_shared = len(tok.encode(system))
print(f"[A] + [B]: {n_shared} tokens, reusable in whole pages of 4: {n_shared // 4 * 4}")

# %% [markdown]
# The reuse is cut to whole pages of 4 tokens (a block holds one page), so R2 and R3 reuse the
# whole pages of [A] + [B] and prefill the rest together with their questions. R4 reuses R1's
# prompt and answer (all but the last, partial page) and prefills little more than 人工呢.

# %% [markdown]
# ## 6. Exercises
#
# ### Exercise 1: longest prefix match on a small radix tree
#
# Implement `match_prefix(root, tokens)` returning how many leading tokens of `tokens` the tree
# holds. The tree is kvlab's own (`kvlab.radix.TreeNode`, page size 1):
#
# - `node.children`: a dict from the **first token** of a child's edge to that child;
# - `node.key`: the list of tokens on the edge into `node` (empty for the root).
#
# A match may end in the middle of an edge (then count the tokens that matched). Do not change
# the tree. The checker builds hand-made and random trees with `RadixCache` and compares with
# `RadixCache.peek_prefix_len`.

# %% tags=["exercise-stub"]
def match_prefix(root, tokens):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.match_prefix(match_prefix)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Keep a current node (start at `root`) and a position `pos` in `tokens`. The next child to
# try is `node.children.get(tokens[pos])`: at most one child can match.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Compare the child's `key` with `tokens[pos:]` token by token. If the whole key matches, move
# to the child and continue; otherwise add the matched count and stop: the match ends inside
# this edge.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Watch both ends: stop when `pos == len(tokens)` (the query is used up, maybe in the middle of
# an edge) and when a key runs out.
# </details>

# %% [markdown]
# ### Exercise 2: how many tokens must each request prefill?
#
# Implement `prefill_tokens(prompts)`: the prompts (lists of token ids) are served one after
# another by a server whose radix cache keeps every prompt it has served (nothing is evicted,
# answers are not cached). Return, for each prompt, how many of its tokens must be prefilled:
# its length minus the longest prefix it shares with **any** earlier prompt, but **at least 1**
# (the last token is always computed, for its logits). The checker serves the same prompts
# through a real `RadixCache` (`serve_request`) and compares.

# %% tags=["exercise-stub"]
def prefill_tokens(prompts):
    raise NotImplementedError("your code here")


# %%
check.prefill_tokens(prefill_tokens)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# The tree holds exactly the prefixes of the prompts served so far, so its LPM for `p` is the
# longest common prefix of `p` with any earlier prompt. A plain loop over earlier prompts is fine.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Served twice, `[1, 2, 3]` prefills 1 token, not 0: `len(p) - min(best, len(p) - 1)`.
# </details>

# %% [markdown]
# ## Summary
#
# - RadixAttention keeps every computed prefix in a radix tree over token ids; each node owns
#   paged KV blocks (the tree holds one reference on each).
# - A new request's longest prefix match finds the reusable KV in O(prompt length); a match
#   ending inside an edge splits it; only the missed suffix is prefilled.
# - The notes' example, run for real: R2 and R3 reuse [A][B] and prefill only their questions;
#   R4 matches root→A→B→C and prefills only 人工呢. A chat prefills only each new question.
# - Measured with the real kernels: attention over cached prefix + new suffix equals a full
#   recomputation.
# - Next, lesson 08: the pool is finite. Which cached prefixes to evict, what must never be
#   evicted (lock references), and in which order to serve requests to hit the cache more.
