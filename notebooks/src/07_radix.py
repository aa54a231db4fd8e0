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
#   result is the same as computing everything; then the four requests as real chat turns on a
#   real model (SmolLM2), the time to first token measured with the tree and without it, and a
#   live chat you can type into.
# - vLLM's other way to share prefixes, a [block hash](glossary.md) (块哈希) chained over full
#   blocks: what it and the radix tree can share, and what neither can, on the same requests.
#
# This is the sentence the series is about: *PagedAttention decides where KV lives (lesson
# 04-06); RadixAttention decides which cached KV a new request can reuse, and it is built on
# the paged allocator.* Every node of the tree below owns blocks of a real `BlockAllocator`, and
# every request goes through one request cycle, `kvlab.reuse.CacheManager`.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example
#
# A `CacheManager` with block size 1 (one block = one token slot, so block ids are slot ids):
# a pool, the block tables of running requests, and the radix tree `cm.tree` over the pool.
# `serve_request` runs a request's whole memory cycle through it: match the prompt, lock the
# matched path, allocate blocks for the rest, insert prompt + output into the tree, unlock.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.reuse import CacheManager, serve_request

cm = CacheManager(num_blocks=16, block_size=1)
cache = cm.tree
r = serve_request(cm, [1, 2, 3, 4], output=[5], rid="R1")
print(f"R1 [1 2 3 4] -> answers [5]: matched {r.matched_len}, prefilled {r.prefill_len}")
print(cache.pretty())
r = serve_request(cm, [1, 2, 3, 9], rid="R2")
print(f"\nR2 [1 2 3 9]: matched {r.matched_len}, prefilled {r.prefill_len}")
print(cache.pretty())
a = cm.admit("R3", [1, 2, 3, 9, 7])                 # match and lock, but do not finish yet
print(f"\nR3 [1 2 3 9 7] admitted, still running: matched {a.prefix_len}")
print(cache.pretty())
cm.cache_finished_req("R3", [1, 2, 3, 9, 7])        # insert its prompt, unlock
print("\nR3 finished (its prompt inserted, its path unlocked): locks", [n.lock_ref for n in cache.snapshot().nodes])
print(cache.pretty())
cm.check_integrity()

# %% [markdown]
# R2's match ended **inside** the edge `[1 2 3 4 5]`, after 3 tokens, so the tree split that
# edge into `[1 2 3]` → `[4 5]` and hung R2's own `[9]` beside it. The blocks did not move:
# `[1 2 3]` still uses slots 0-2, which R2 now shares. Children are keyed by their first
# token, so finding the right child is one dictionary lookup.
#
# While R3 ran, the nodes its match went through were **locked**: `lock=1` is the node's
# `lock_ref`, how many running requests hold it (its KV is being read, so it must not be evicted);
# finishing inserted R3's own token `[7]`, a new leaf under `[9]`, and unlocked them: every lock
# went back to 0.
#
# Two details worth noticing:
#
# - A **prefix** only. The K and V of a token depend on every token before it (through all
#   the layers below), so `[2 3]` at the start of a prompt cannot reuse the K/V of `[2 3]`
#   computed after `[1]`. A tree of prefixes is exactly the structure that respects this.
# - `serve_request` always computes at least the last prompt token, even when the whole
#   prompt is cached (`match_prefix(limit=len(prompt) - 1)`): its logits give the first output token.

# %% [markdown]
# ## 2. The source notes' four requests
#
# An online shop's assistant. Every request starts with the same system prompt **[A]** and the
# same few-shot examples **[B]**. [A], [B] and [C] are lettered as in the notes' figure; the
# requests' own parts are lettered in the order the requests arrive, here and in lesson 10:
#
# | the notes' letter | this lesson's letter |
# |---|---|
# | [A] system prompt, [B] few-shot examples, [C] R1's turn | the same: [A], [B], [C] |
# | [E] R2's question | [D] |
# | [F] R3's question | [E] |
# | [D] R4's follow-up | [F] |
#
# | request | its own part | node | what happens |
# |---|---|---|---|
# | R1 | 怎么申请退款 (how do I get a refund) | [C] | [A] hits; [B] and the question are prefilled |
# | R2 | 订单什么时候发货 (when will my order ship) | [D] | [A][B] hit; only its question is prefilled |
# | R3 | 发票怎么开 (how do I get an invoice) | [E] | [A][B] hit; a miss on its own suffix |
# | R4 | 人工呢 (a human, please?), R1's follow-up | [F] | LPM goes root→A→B→C (R1's whole turn); only 人工呢 is prefilled |
#
# `kvlab.lessons.four_request_example()` runs them through a real `CacheManager`, one token per
# character, after a warm-up pass that caches the system prompt (as many servers do: the table's
# first row, `warm-up`). Each answer is inserted
# after its request, as SGLang caches finished requests with their output, so node [C] holds
# R1's question *and* its answer.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import four_request_example
from kvlab.viz.radix_frames import NOTES_LETTERS


def letters(labels):
    """Segment labels as the notes' node letters: ['A', 'R2'] -> 'A+D'."""
    return "+".join(NOTES_LETTERS.get(x, x) for x in labels) or "-"


records = four_request_example()
print(f"{'request':<8} {'prompt':>6} {'matched':>7} {'prefilled':>9}  hits (green)   misses (blue)")
for rec in records:
    print(f"{rec.name:<8} {len(rec.prompt_tokens):>6} {rec.matched_len:>7} {rec.prefill_len:>9}  "
          f"{letters(rec.hit_segments):<14} {letters(rec.missed_segments)}")
print()
print(records[-1].tree_text)

# %% [markdown]
# **"Leaves are requests."** The notes put it this way. Every leaf of the tree is where some
# request's sequence (its prompt and answer) ends; the converse does not hold, because a later
# request can continue an earlier one's sequence and turn its last node into an inner node.
# Checked on the tree of the warm-up and the four requests (five sequences):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import char_tokenize

cm4 = CacheManager(num_blocks=512, block_size=1)
seqs = {rec.name: (list(rec.prompt_tokens), char_tokenize(rec.answer_text)) for rec in records}
for name, (prompt, answer) in seqs.items():
    serve_request(cm4, prompt, answer, rid=name)
ends = {name: cm4.tree.match_prefix(p + a).last_node for name, (p, a) in seqs.items()}
for name, node in ends.items():
    seq = seqs[name][0] + seqs[name][1]
    later = [m for m, (p, a) in seqs.items() if len(p + a) > len(seq) and (p + a)[:len(seq)] == seq]
    kind = "a leaf" if not node.children else f"an inner node ({', '.join(later)} continue{'s' if len(later) == 1 else ''} it)"
    print(f"{name:<8} ends at node {node.id} ({len(node.key)} tokens): {kind}")
leaves = [n for n in cm4.tree.snapshot().nodes if n.is_leaf]
ending = {node.id for node in ends.values()}
print(f"{len(leaves)} leaves for {len(ends)} sequences (the warm-up and 4 requests); every leaf ends one: "
      f"{all(n.id in ending for n in leaves)}; requests that end at an inner node: "
      f"{[name for name, node in ends.items() if node.children]}")

# %% [markdown]
# ## 3. The picture: step through the four requests
#
# The stepper shows the tree after each request, and once *while* a request runs (step 5: R4
# admitted, not finished yet). It is simulated, on the real tree code.
#
# - **Green** is the path the request's prompt matched: KV it reused.
# - **Blue** is the suffix it had to prefill, and the answer cached with it.
# - A **dashed** border marks an unlocked node: one that can be evicted; a **solid** border, a
#   locked one (step 5).
# - The legend under the title says the same; the tree starts below it, from `root`.
#
# Each node shows its text. A node that holds a question and its answer shows them on two lines.
# Its last line has three numbers:
#
# - `tok`: how many tokens the node holds.
# - `lock`: its `lock_ref` from section 1, the number of running requests that hold it. After a
#   request finishes it is 0 again, so most steps show `lock 0` everywhere. Step 5 is the real
#   `CacheManager`'s tree between R4's `admit` and its `cache_finished_req`: the path R4 matched
#   reads `lock 1`, the header counts its tokens as *protected (locked)*, and R4's new blocks
#   are allocated in its block table but not in the tree yet (the caption counts them). Step 6,
#   R4 finished, has its answer inserted and its path unlocked.
# - `t`: its last access time. This is the tree's clock. It ticks at every match and every insert
#   (twice a request here). The match or insert stamps it on each node it went through.
#
# Eviction (lesson 08) frees the unlocked leaf with the smallest `t` first: least recently used.
#
# Watch step 3. R2's match ends inside node [B+C]: the few-shot examples and R1's turn, one edge
# until then. So the tree **splits** that node into [B] and [C], and the caption says so.
# Press *next*.

# %%
from kvlab.viz import radix_stepper
from kvlab.viz.radix_frames import radix_request_frames

radix_stepper(radix_request_frames(records, running=("R4",)))   # R4 also drawn while it runs

# %% [markdown]
# ## 4. Multi-turn chat
#
# In a chat, turn *k*'s prompt is the whole conversation so far plus the new question. With a
# radix cache, turn *k* matches all of turn *k-1* (its prompt **and** its answer), so each
# turn prefills only its own new question, however long the history grows.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import multi_turn_example

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
# Does skipping the prefix change the result? Here is the attention of section 2's five rows
# (the warm-up that caches [A], then the four requests, R1 computing [B]) done for real. To keep it small and exact we use **one attention layer** whose K, V and Q come from
# a token embedding plus a position embedding (the first layer of a transformer with learned
# positions: there K/V depend only on the token and its position). The K/V pool is a paged
# tensor whose blocks are the tree's blocks.
#
# For each request: `cm.admit` matches the prompt in the tree and gives the request a block
# table that starts with the cached blocks; we compute Q/K/V for the **missed suffix only**,
# write its K/V into the new blocks (`store_kvcache`, at the slots `slot_mapping` gives), and run
# the `extend_attention` kernel, which attends the new tokens over *cached prefix + themselves*
# through the block table. Then compare with plain causal attention over the whole prompt,
# recomputed from scratch; `cm.cache_finished_req` puts the prompt into the tree.

# %%
# NBVAL_CHECK_OUTPUT
import torch

import kvlab.kernels as K

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


cm = CacheManager(num_blocks=num_slots, block_size=1)
dev = K.DEVICE                                               # "cpu" in the interpreter, "cuda" on a GPU
k_cache = torch.zeros(num_slots, 1, kv_heads, head_dim, device=dev)  # (num_blocks, block_size=1, kv_heads, head_dim)
v_cache = torch.zeros_like(k_cache)
computed = total = 0
for rec in records:
    prompt = list(rec.prompt_tokens)
    a = cm.admit(rec.name, prompt)            # match (>= 1 token left), lock, adopt the cached blocks, allocate the rest
    p = a.prefix_len
    q, k, v = qkv(prompt[p:], start=p)                       # computed for the suffix only
    slots = torch.tensor(a.table.slot_mapping(p, len(prompt)), device=dev)
    K.store_kvcache(k.to(dev), v.to(dev), k_cache, v_cache, slots)
    table = torch.tensor([a.table.block_ids], dtype=torch.int32, device=dev)   # cached blocks, then the new ones
    out = K.extend_attention(q.to(dev), k_cache, v_cache, table, [p], [len(prompt) - p]).cpu()  # (suffix, heads, head_dim)

    q_all, k_all, v_all = qkv(prompt, start=0)               # from scratch, for comparison
    want = K.naive_attention(q_all, k_all, v_all, causal=True)[p:]
    cm.cache_finished_req(rec.name, prompt)                  # the tree takes over the new blocks; unlock
    cm.check_integrity()
    computed, total = computed + len(prompt) - p, total + len(prompt)
    print(f"{rec.name:<8} cached {p:>3}, computed {len(prompt) - p:>3} of {len(prompt):>3} tokens; "
          f"same as full recomputation: {torch.allclose(out, want, atol=1e-4)}")
print(f"tokens run through the layer: {computed} of {total} ({1 - computed / total:.0%} saved)")

# %% [markdown]
# Every request's new tokens got exactly the attention output they would have got from a full
# recomputation, while most of the prompt tokens were never computed. (Answers are not inserted
# here, so R4 matches less than in section 2; the engine below inserts them.)

# %% [markdown]
# ### The real thing: the four requests as chat turns on SmolLM2
#
# Now a real model, SmolLM2-135M-Instruct (30 layers, 3 KV heads of 64 dimensions; read offline
# from its GGUF file, see lesson 01), and the notes' four requests as real chat turns, rendered
# through the model's own chat template. The shop's system prompt is **[A]**, two example
# questions with their answers are **[B]**; R1 (a refund, 怎么申请退款), R2 (shipping,
# 订单什么时候发货) and R3 (an invoice, 发票怎么开) are first questions, each after [A] [B];
# R4 ("A human, please", 人工呢) is R1's **second turn**. The model is small and English, so the
# questions are asked in English. They are served one after another by
# `kvlab.compute.engine.Engine`: a paged K/V pool (block size 4, so reuse comes in whole pages of
# 4 tokens) with the radix tree in front. Replies are cut at 8 tokens to keep the lesson fast.
# A model of 135M parameters often echoes the question or drifts off topic: that does not
# matter here, because what the lesson measures is the prompt, how much of it the tree reuses
# and how fast the first token comes, not what the reply says.

# %%
import torch

from kvlab.lessons.chat import SUPPORT_QUESTIONS, cached_model, serve_support_requests, support_session

torch.set_num_threads(1)                         # one thread: steadier on a shared CPU
model, tok = cached_model("smollm2")             # loaded once per kernel (a few seconds)
chat = support_session(model, tok, max_new_tokens=8)
turns = serve_support_requests(chat)             # R1, R2, R3, then R4 after R1's turn
print(f"{'request':<8} {'prompt tokens':>13} {'matched':>8} {'prefilled':>9}   the question, and the reply (measured run)")
for rid, t in turns.items():
    q, zh = SUPPORT_QUESTIONS[rid]
    print(f"{rid:<8} {len(t.prompt_ids):>13} {t.matched:>8} {t.prefilled:>9}   {q} ({zh})")
    print(f"{'':<43}-> {t.reply!r}")
total = sum(len(t.prompt_ids) for t in turns.values())
computed = sum(t.prefilled for t in turns.values())
print(f"prompt tokens run through the model: {computed} of {total} ({1 - computed / total:.0%} reused from the tree)")

# %% [markdown]
# The radix tree after R4, over the real token ids (each node shows the start of its text and
# its tokens). [A] and [B] are one node here, [A+B], because every request so far used both; a
# request that used only [A] would split it. Then each request's own part, lettered as in
# section 2: [C] R1's turn, [D] R2's, [E] R3's, [F] R4's. Each takes two nodes here, numbered:
# the tree caches a request's prompt after its prefill ([C1]: R1's question, to the last full
# page of its prompt) and the rest when it finishes ([C2]: the end of the prompt and the reply).
#
# The tree holds whole **pages** of KV (a page is one block of the pool), so a node's length is a
# multiple of the page size. Two things follow, and the lines under the tree give this run's
# numbers. R4's path is green over [A+B] → [C1] → [C2], all the tree holds of R1's turn, but
# the last tokens of R1's reply did not fill a page, so the tree does not hold them: [F1], blue
# like the rest of what R4 computes now, starts with them, then R4's question; [F2] holds the
# end of R4's prompt and its reply. And a split can fall inside a word: a leading "…" marks a node whose first token
# continues its parent's last word.
#
# In section 2's letters: [C1] and [C2] are together [C] (R1's turn), [F1] and [F2] together [F]
# (R4's follow-up, the notes' [D]).

# %%
from IPython.display import HTML, display

from kvlab.lessons.chat import support_node_labels
from kvlab.viz.chat_demo import mid_word_decode, tree_svg

snap = chat.engine.cache.snapshot()
decode = mid_word_decode(snap, tok.decode)
parent_of = {n.id: n for n in snap.nodes}
mid = [n for n in snap.nodes if decode(n.tokens).startswith("…")]
if mid:
    first, before = tok.decode(mid[0].tokens[:1]), tok.decode(parent_of[mid[0].parent_id].tokens[-1:])
    where = f"{len(mid)} node(s) here do:\n“…{first}” follows “{before}”, the last token of its parent"
else:
    where = "no node here does"
display(HTML(tree_svg(chat, labels=support_node_labels(chat, turns))))
r1, r4 = turns["R1"], turns["R4"]
r1_turn = r1.prompt_ids + r1.output_ids                       # R1's turn as the engine served it
shared = next((i for i, (a, b) in enumerate(zip(r1_turn, r4.prompt_ids)) if a != b), len(r1_turn))
tail = r4.prompt_ids[r4.matched:shared]                       # R1's turn that R4 finds no KV for
print(f"R4 matched {r4.matched} tokens: [A+B], [C1], [C2], all the tree holds of R1's turn.\n"
      f"The last {len(tail)} token(s) of R1's reply ({tok.decode(tail)!r}) did not fill a page of {snap.page_size}:\n"
      f"R4 computes their K/V now, at the start of [F1].")
print(f"Nodes split only every {snap.page_size} tokens (one page, one block of the pool), so a\n"
      f"node can start inside a word; {where}.")

# %% [markdown]
# ### Try it: the page size
#
# The page size is this lesson's parameter: a tree of whole pages matches only whole pages. Move
# **page size** and the notes' four requests run again on a real `CacheManager` (one token a
# character, a few milliseconds): green is what each request found in the tree, blue what it
# prefilled. Compare 1 with 16 (SGLang's default page size is 1; vLLM's blocks are 16).

# %%
from kvlab.viz import PageSizeControl

PageSizeControl(page_size=16)

# %% [markdown]
# ### Time to first token, with the tree and without it (measured)
#
# A request's first token is sampled from the logits of its prefill, so a shorter prefill is a
# sooner first token. The same prompts are served again (`ttft_runs`):
#
# 1. Untimed, one pass puts R1's turn in a fresh engine's tree, as the real run left it (so no
#    timed pass is the cell's first).
# 2. R1 itself is not timed: with nothing cached it prefills every token with the tree as without
#    it, the work the "no tree" column measures.
# 3. R2 (a first question: it reuses [A] [B]) and R4 (a second turn: it reuses R1's whole turn)
#    run **three times** with that tree and three times without one, a request's two runs back to
#    back so that the machine's load falls on both alike.
# 4. R3, a first question like R2, is not timed (each run costs a forward pass).
# 5. The table prints each request's **median** (one slow run moves it little); the sentences
#    under it are printed from it.

# %%
from statistics import median

from kvlab.lessons.chat import ttft_runs

runs = ttft_runs(model, turns, repeats=3, timed=("R2", "R4"))   # 3 times each way (measured)
ttft_on = {rid: median(times) for rid, times in runs["tree"].items()}
ttft_off = {rid: median(times) for rid, times in runs["no tree"].items()}
MARGIN = 1.2                                                 # below it, the medians cannot tell a saving from noise
print(f"TTFT, measured on this CPU (one thread): the median of {len(runs['no tree']['R2'])} runs each")
print(f"{'request':<8} {'prefilled':>9} {'TTFT ms':>8} | {'prefilled':>9} {'TTFT ms':>8} | speed-up")
print(f"{'':<8} {'no tree':>18} | {'radix tree':>18} |")
for rid, t in turns.items():
    if rid not in ttft_off:                                  # R1: the same tokens either way; R3: like R2
        why = "none: nothing cached yet" if t.matched == 0 else "not timed (like R2)"
        print(f"{rid:<8} {len(t.prompt_ids):>9} {'-':>8} | {t.prefilled:>9} {'-':>8} | {why}")
        continue
    ratio = ttft_off[rid] / ttft_on[rid]
    gain = f"{ratio:>4.1f}x" + ("" if ratio >= MARGIN else " (within noise)")
    print(f"{rid:<8} {len(t.prompt_ids):>9} {1e3 * ttft_off[rid]:>8.0f} | {t.prefilled:>9} {1e3 * ttft_on[rid]:>8.0f} | {gain}")
hits = list(ttft_off)
sooner = [rid for rid in hits if ttft_off[rid] >= MARGIN * ttft_on[rid]]
fewer = sum(len(turns[r].prompt_ids) for r in hits) / sum(turns[r].prefilled for r in hits)
faster = sum(ttft_off[r] for r in hits) / sum(ttft_on[r] for r in hits)
print(f"The {len(hits)} timed requests that hit the tree ({', '.join(hits)}) computed {fewer:.1f}x fewer prompt tokens;")
if faster >= MARGIN:
    print(f"taken together their first tokens came {faster:.1f}x sooner,\nless than the {fewer:.1f}x of the tokens "
          f"saved." if faster < fewer else f"taken together their first tokens came {faster:.1f}x sooner.")
else:
    print(f"taken together their first tokens came {faster:.1f}x sooner: within noise on this run (the machine's "
          f"load\nhides the saving; run the cell again on a quiet machine).")
if sooner == hits:
    print(f"Every one of them got its first token at least {MARGIN}x sooner with the tree.")
else:
    print(f"At least {MARGIN}x sooner with the tree: {', '.join(sooner) or 'none'}; within noise on this run: "
          f"{', '.join(r for r in hits if r not in sooner)}.")

# %% [markdown]
# R4's time to first token in this table need not match the one in the live chat's first
# caption below: that caption reports R4's one run in the real run above (measured once, under
# whatever load the machine had then), this table the median of three runs made after an untimed
# warm-up pass.

# %% [markdown]
# On a quiet machine the first token comes sooner by less than the tokens saved (the two
# factors above): a forward pass has a fixed cost (launching every layer's operations for 30 layers, sampling)
# that does not shrink with the prompt. The longer the shared prefix (a long system prompt, a
# long chat history), the closer the time saved follows the tokens saved.
#
# ### Live: chat with the shop's assistant
#
# The same session, live, and it goes on where section 5 stopped: your first question
# **continues R1's conversation after R4** (the caption says whose conversation a question
# continues). A turn takes a few seconds on a CPU; the buttons wait until it is answered.
#
# - **Ask**: type a question, press Enter or *send*. The caption gives the turn's numbers and
#   its time to first token.
# - **Three views** (one at a time, under the caption): *this turn's tokens*, the prompt token by
#   token, matched in the tree (green) or prefilled (blue); *radix tree*; *block pool*, where a
#   block on the path of two or more turns (computed once, reused by the others) is hatched and
#   its hover names them.
# - **On a projector** (classroom mode) the tree view shows only the last turn's path: the
#   matched nodes between its first and its last fold into one box, `[k nodes]`, and each grey
#   dashed box counts the branches that leave the path there (other conversations, other turns).
# - ***new conversation*** starts one after [A] [B]; its caption says how many of their tokens
#   the tree still holds (none after *clear the cache*).
# - ***clear the cache*** empties the pool and the tree but keeps the conversation: ask again and
#   compare the time to first token.

# %%
from kvlab.viz import chat_demo

chat_demo(chat)

# %% [markdown]
# ## 6. vLLM's way: a hash chained over full blocks
#
# The notes say PagedAttention does no reuse across requests. vLLM's PagedAttention alone does
# not, but vLLM (v1) turns on **automatic prefix caching** by default, without a tree: every
# *full* block of `block_size` tokens gets a hash of its tokens **chained with the hash of the
# block before it**, so equal hashes mean equal prefixes up to the end of that block. A map
# `hash -> block` finds cached blocks; a freed block keeps its hash in the free queue until the
# block is reused (that is its eviction, least recently freed first).
# `kvlab.reuse.BlockHashCache` is that cache, with vLLM's names (`match_prefix` is vLLM's
# `get_computed_blocks`). Each request runs vLLM's cycle: match, allocate, compute, cache the
# full blocks, free. The same four requests (one token per character, answers cached too),
# against the radix tree at page size 1 (SGLang's default) and 16:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons import FOUR_REQUEST_TEXTS as T
from kvlab.lessons import char_detokenize, char_tokenize
from kvlab.reuse import BlockHashCache


def hash_cache_reuse(requests, block_size):
    """Tokens each (rid, prompt, answer) reuses in vLLM's cycle; and the cache afterwards."""
    pc = BlockHashCache(num_blocks=512, block_size=block_size)
    reused = []
    for rid, prompt, answer in requests:
        m = pc.match_for_prefill(prompt, rid)                 # whole cached blocks, >= 1 token left
        table = pc.allocate(len(prompt) + len(answer), m, rid)
        pc.cache_full_blocks(prompt + answer, table, rid)    # the full blocks' hashes, once computed
        pc.free_blocks(table, rid)                           # finished: the blocks stay cached
        reused.append(m.prefix_len)
    pc.check_integrity()
    return reused, pc


requests = [(r.name, list(r.prompt_tokens), char_tokenize(r.answer_text)) for r in records]
radix_1 = [r.matched_len for r in records]
radix_16 = [r.matched_len for r in four_request_example(page_size=16)]
hashed_16, pc = hash_cache_reuse(requests, 16)
print("tokens reused (simulated: the caches' own bookkeeping, no model runs)")
print(f"{'request':<8} {'prompt':>6} | reused: {'radix, page 1':>13} {'radix, page 16':>14} {'block hash, 16':>14}")
for (rid, prompt, _), a, b, c in zip(requests, radix_1, radix_16, hashed_16):
    print(f"{rid:<8} {len(prompt):>6} |         {a:>13} {b:>14} {c:>14}")
print("block hash, 16 == radix tree, page 16, for every request:", hashed_16 == radix_16)

# %% [markdown]
# Page for page they reuse exactly the same tokens: both share whole full blocks of the same
# prefix. The radix tree at page size 1 reuses more because a match may end anywhere, even in
# the middle of what would be a block. What each can and cannot share, computed on the caches
# that just served the four requests:

# %%
# NBVAL_CHECK_OUTPUT
cm = CacheManager(num_blocks=512, block_size=1)
for rid, prompt, answer in requests:
    serve_request(cm, prompt, answer, rid)
r2 = requests[2][1]
b_only = char_tokenize(T["B"] + T["R2"])                     # [B] without [A] in front
print(f"R2's prompt ({len(r2)} tokens, all cached): the radix tree finds {cm.cached_prefix_len(r2)}, "
      f"the block hash {pc.match_prefix(r2).prefix_len}\n  (whole blocks of 16; the last token sits in a partial block)")
print(f"R2's first 20 tokens: the radix tree finds {cm.cached_prefix_len(r2[:20])}, "
      f"the block hash {pc.match_prefix(r2[:20]).prefix_len}\n  (a partial block is never shared)")
print(f"[B] + R2's question, without [A] first: the radix tree finds {cm.cached_prefix_len(b_only)}, "
      f"the block hash {pc.match_prefix(b_only).prefix_len}\n  (the same text after a different prefix: neither)")
print(f"structures: radix tree {cm.tree.num_nodes} nodes (walked by every match, split where one ends inside an edge);\n  "
      f"block hash {len(pc.cached_block_hash_to_block)} cached blocks (one dict lookup per block)")

# %% [markdown]
# | | radix tree (SGLang) | block hash (vLLM) |
# |---|---|---|
# | shares | any cached prefix, to the token (page size 1) or the page | cached prefixes in whole full blocks |
# | cannot share | the same text after a different prefix | that, and a prompt's last partial block |
# | lookup | walk the tree, split a node where a match ends inside it | hash each full block, one dict lookup each |
# | eviction | unlocked leaves, LRU by default (lesson 08) | reuse a freed block: the free queue is the LRU order |
#
# Lesson 09's simulator has both as memory policies ("radix" and "block-hash").
#
# > **Analogy: field dedup (the second note: "field dedup saves 15%").** A search index
# > stores a field value that many documents repeat once and points at it. That much holds
# > for prefix sharing: equal content stored once, with a reference count per holder, and the
# > saving is whatever repeats: there is no fixed 15%. Below, on the four requests in blocks of
# > 4 tokens: the full blocks stored without sharing, with prefix sharing, and by field dedup,
# > and which blocks field dedup would merge although their K/V differ. Where it breaks: dedup does
# > not care *where* a value sits, but a token's K and V depend on its position and on every
# > token before it. Two blocks with the same four characters after different prefixes have
# > different K/V and must both be stored. That is why vLLM chains each block's hash with its
# > parent's: without the chain, its cache would be field dedup, and wrong.

# %%
# NBVAL_CHECK_OUTPUT
bs = 4
seqs = [prompt + answer for _, prompt, answer in requests]
chain = BlockHashCache(num_blocks=1, block_size=bs)          # used only to compute the chained hashes
stored = sum(len(s) // bs for s in seqs)
prefix_shared = len({h for s in seqs for h in chain.compute_block_hashes(s)})
by_content = len({tuple(s[i:i + bs]) for s in seqs for i in range(0, len(s) // bs * bs, bs)})
print(f"full blocks of {bs} tokens in the four requests (prompt + answer): {stored} (simulated: counted, no model)")
print(f"stored with prefix sharing (chained hash): {prefix_shared} ({1 - prefix_shared / stored:.0%} saved)")
print(f"stored by field dedup (equal content anywhere): {by_content} ({1 - by_content / stored:.0%} 'saved')")
seen = {}
for s in seqs:
    for i, h in enumerate(chain.compute_block_hashes(s)):
        block = tuple(s[i * bs:(i + 1) * bs])
        first = seen.setdefault(block, (h, i * bs))
        if first[0] != h:
            print(f"dedup would wrongly share '{char_detokenize(block)}' at position {i * bs}\n"
                  f"  with the same text at position {first[1]}: same characters, different K/V")

# %% [markdown]
# ## 7. Exercises
#
# ### Exercise 1: longest prefix match on a small radix tree
#
# Implement `match_prefix(root, tokens)` returning how many leading tokens of `tokens` the tree
# holds. The tree is kvlab's own (`kvlab.reuse.TreeNode`, page size 1):
#
# - `node.children`: a dict from the **first token** of a child's edge to that child;
# - `node.key`: the list of tokens on the edge into `node` (empty for the root).
#
# A match may end in the middle of an edge (then count the tokens that matched). Do not change
# the tree. The checker builds hand-made and random trees through `CacheManager` and compares with
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
# Children are keyed by the first token of their edge. How many children can match the next
# token of the query, and how do you find it?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Once you are on an edge, in how many ways can comparing it with the rest of the query end?
# Which of them let you go further down?
# </details>
#
# <details><summary>Hint 3</summary>
#
# Try by hand: a tree holding `[1, 2, 3, 4]`, queried with `[1, 2]`, with `[1, 2, 3, 4, 5]` and
# with `[1, 9]`. Does your code give 2, 4 and 1?
# </details>

# %% [markdown]
# ### Exercise 2: how many tokens must each request prefill?
#
# Implement `prefill_tokens(prompts)`: the prompts (lists of token ids) are served one after
# another by a server whose radix cache keeps every prompt it has served (nothing is evicted,
# answers are not cached). Return, for each prompt, how many of its tokens must be prefilled,
# under the two details of section 1. You do not need a tree: work out what the tree would
# hold. The checker serves the same prompts through a real `CacheManager` (`serve_request`)
# and compares.
#
# Predict first: `[[5, 6, 7], [1, 2], [5, 6, 8], [5, 6, 8]]`. What are the four counts?

# %% tags=["exercise-stub"]
def prefill_tokens(prompts):
    raise NotImplementedError("your code here")


# %%
check.prefill_tokens(prefill_tokens)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# After serving some prompts, which token sequences can a lookup in the tree match? Which of
# them matters for the next prompt?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Served twice, `[1, 2, 3]` prefills 1 token, not 0: a prompt may reuse at most all but its
# last token.
# </details>

# %% [markdown]
# ### Exercise 3: what does vLLM's block-hash cache reuse?
#
# Implement `block_hash_reuse(prompts, block_size)`: the prompts are served one after another
# by a vLLM-style cache that keeps the full blocks of every prompt it has served (nothing is
# evicted, answers are not cached). Return, for each prompt, how many of its tokens are reused:
#
# - only **full** blocks are cached and matched, from the start of the prompt, one after the
#   other; a block matches only if it **and every block before it** equal an earlier prompt's
#   (that is what the chained hash means);
# - at least one token is always computed: a prompt of exactly 32 cached tokens in blocks of 16
#   reuses 16, not 32.
#
# You may use Python's `hash` of tuples or just compare token lists. The checker serves the same
# prompts through `kvlab.reuse.BlockHashCache` and compares.

# %% tags=["exercise-stub"]
def block_hash_reuse(prompts, block_size):
    raise NotImplementedError("your code here")


# %%
check.block_hash_reuse(block_hash_reuse)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# A chained hash of block `k` stands for everything from the prompt's first token to the end of
# block `k`. So what exactly does the cache remember about an earlier prompt, and why does the
# same block of tokens after a different start not match?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Try it by hand with blocks of 2: served `[1, 2, 3, 4, 5]`, then `[1, 2, 3, 9, 9]`, then
# `[7, 7, 3, 4]`. How many tokens does each reuse? Which block of the third prompt looks familiar,
# and why does it not count?
# </details>
#
# <details><summary>Hint 3</summary>
#
# Two rules cut the count: whole blocks only, and at least one token computed. Does the order in
# which you apply them matter? Serve a prompt of 16 tokens twice, then one of 17 twice, in blocks
# of 16, and count by hand.
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
#   recomputation. Measured on SmolLM2 with real chat turns: a request that hits the tree
#   prefills only its own question; how much sooner its first token comes is printed in
#   section 5 from this run's times.
# - vLLM's automatic prefix caching shares the same prefixes in whole blocks, found by a hash
#   chained over the blocks instead of a tree walk; neither can share the same text after a
#   different prefix (the chain is what makes it prefix sharing, not field dedup).
# - Next, lesson 08: the pool is finite. Which cached prefixes to evict, what must never be
#   evicted (lock references), and in which order to serve requests to hit the cache more.
