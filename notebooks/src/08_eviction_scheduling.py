# Lesson 08: eviction and scheduling for a radix cache (LRU and others, lock references, cache-aware order).
# Source of truth for notebooks/08_eviction_scheduling.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 08

# %% [markdown]
# # 08 · Eviction and scheduling: a finite cache, used well
#
# **What you will learn**
#
# - What a radix cache does when the pool is full: [eviction](glossary.md) (驱逐) of
#   unlocked **leaves**, least recently used first (SGLang's default), and what other policies do;
#   and why SGLang evicts leaf by leaf, not "the whole subtree" as the first note puts it.
# - Why a running request **locks** its matched path (`lock_ref`), and what `evictable_size` and
#   `protected_size` count.
# - How much the policy matters under memory pressure: hit rates measured on kvlab's real tree.
# - What [preemption](glossary.md) (抢占) does on a real engine, and why the "reused" count
#   rises as memory shrinks.
# - Cache-aware scheduling: serving the waiting requests with the longest cached prefix first
#   (SGLang's longest-shared-prefix-first), and what it does to the hit rate (simulated).

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example: who goes first?
#
# A cache of 16 token slots (block size 1). Three requests: R1 (8 tokens), whose prompt is then
# seen twice more (a popular prompt), R2 (6 tokens, sharing R1's first 3), R3 (2 tokens), seen
# once more. Each node has a `last_access_time` (a logical clock: one tick per match or insert)
# and a `hit_count` (how often a match used it).

# %%
# NBVAL_CHECK_OUTPUT
import copy

from kvlab.reuse import EVICTION_POLICIES, CacheManager, serve_request
from kvlab.viz.radix_frames import RadixRecorder

NAME = {"lru": "LRU", "lfu": "LFU", "fewest_tokens": "fewest tokens"}   # how the text names each policy id

cm = CacheManager(num_blocks=16, block_size=1)                  # 16 slots and the radix tree over them
cache = cm.tree
recorder = RadixRecorder(cache)                                  # keeps a snapshot after every event
R1, R2, R3 = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 9, 9], [7, 7]
serve_request(cm, R1, rid="R1")
cache.match_prefix(R1, rid="R1 again")                          # a popular prompt: seen twice more
cache.match_prefix(R1, rid="R1 again")
serve_request(cm, R2, rid="R2")
serve_request(cm, R3, rid="R3")
cache.match_prefix(R3, rid="R3 again")                          # touch R3's node: the most recent
print(cache.pretty())
print("\nnode   tokens            last_access_time  hit_count  leaf")
for n in cache.snapshot().nodes:
    print(f"{n.id:>4}   {str(list(n.tokens)):<17} {n.last_access_time:>16} {n.hit_count:>10}  {n.is_leaf}")
free = cm.allocator.num_free_blocks
new_len = free + 3                                              # a new request longer than the free slots
print(f"evictable tokens: {cache.evictable_size()} | free slots: {free} | a new request of {new_len} tokens needs "
      f"{new_len} slots: the tree must give back {new_len - free}")

# %% [markdown]
# The new request does not fit in the free slots, so the tree must evict (the numbers are under
# the tree above). Only **leaves** can be evicted: an inner node like `[1 2 3]` is a prefix of
# its children, and its KV is needed by them. Each policy picks a leaf; when a node loses its
# last child it becomes a leaf and can go next. We ask each policy on a copy of the same tree:

# %%
# NBVAL_CHECK_OUTPUT
need = new_len - free
tree_before = cache.snapshot()                   # the tree the three policies are asked about (drawn below)
text = {n.id: str(list(n.tokens)) for n in tree_before.nodes}
victims = {}
for name, policy in EVICTION_POLICIES.items():
    c = copy.deepcopy(cache)
    c.set_eviction_policy(name)
    res = c.evict(need)
    victims[name] = res.node_ids
    print(f"{NAME[name]:<14} evicts {' then '.join(text[i] for i in res.node_ids)} ({res.num_tokens} tokens)"
          f"   -- {policy.description}")
print("the three policies evict three different sets of nodes:",
      len({frozenset(v) for v in victims.values()}) == len(victims))

# %% [markdown]
# The same answers on the tree they came from: each node with the numbers a policy looks at
# (tokens, last access `t`, `hits`), and one cell per policy, in its colour with the order it
# evicts the node in, or "kept":

# %%
from IPython.display import HTML

from kvlab.viz.victims_view import victims_svg

HTML(victims_svg(tree_before, victims, need, names=NAME))

# %% [markdown]
# LRU removes R1's `[4 5 6 7 8]`, untouched the longest although it is the most popular; "fewest
# tokens" takes the shortest leaf first (`[7 7]`, the most recent) and then needs a second one;
# LFU removes `[9 9 9]`, matched least. Evicting more than asked is normal: whole nodes go.
#
# ### "Evict the whole subtree, weighted by token count"?
#
# The first source note says a full radix cache "evicts the whole subtree", "weighted by token
# count". Read literally: drop a child of the root together with everything below it, choosing
# the subtree by how many tokens it holds. SGLang does neither. Its `RadixCache.evict` pops
# unlocked **leaves** from a heap, one at a time, ordered by the eviction policy (LRU by
# default; `--radix-eviction-policy` also offers LFU and a few others), and stops as soon as
# enough tokens are free; a parent goes only after its last child has gone, as a leaf in its own
# turn. Token count enters only as *how much* to free (`evict(num_tokens)`); kvlab's
# `fewest_tokens` policy is the nearest leaf-by-leaf reading of "weighted by token count". The
# same request, the literal way and SGLang's way:

# %%
# NBVAL_CHECK_OUTPUT
snap = cache.snapshot()
by_id = {n.id: n for n in snap.nodes}


def top(n):
    """The child of the root above node n: the subtree n belongs to."""
    while n.parent_id != 0:
        n = by_id[n.parent_id]
    return n.id


subtrees = {}
for n in snap.nodes:
    subtrees.setdefault(top(n), []).append(n)
print("subtrees of the root (simulated, on the real tree):")
for root_child, nodes in subtrees.items():
    print(f"  under node {root_child}: nodes {[n.id for n in nodes]}, {sum(len(n.tokens) for n in nodes)} tokens, "
          f"last used at t={max(n.last_access_time for n in nodes)}")
last = max(snap.nodes, key=lambda n: n.last_access_time)
for rule, pick in [("fewest tokens", min), ("most tokens", max)]:
    victim = pick(subtrees, key=lambda k: sum(len(n.tokens) for n in subtrees[k]))
    lost = subtrees[victim]
    size = sum(len(n.tokens) for n in lost)
    said = (f"{size} of the {need} tokens asked: not enough" if size < need else f"{size} tokens for {need} asked")
    recent = " (the most recently used)" if last in lost else ""
    print(f"whole subtree, {rule} first: drops {[text[n.id] for n in lost]}{recent}, {said}")
res = copy.deepcopy(cache).evict(need)
print(f"SGLang, leaf by leaf, LRU: drops {[text[i] for i in res.node_ids]}, {res.num_tokens} tokens; "
      f"keeps the shared [1, 2, 3]")

# %% [markdown]
# The literal reading either throws away the most recently used prefix because it is small
# (and still frees too little), or drops far more than was asked, including `[1 2 3]`, the
# prefix R1 and R2 share (the lines above). Leaf by leaf, the shared prefix outlives every
# branch below it, and recency decides.
#
# ## 2. Lock references: never evict what a running request uses
#
# Between `match_prefix` and the end of a request, the matched KV is in use: the request attends
# to it at every decode step. So the request **locks** its path: `inc_lock_ref(node)` adds one to
# `lock_ref` of the node and of every ancestor up to, but not including, the root. The root holds
# no tokens and is never evicted: kvlab, like SGLang, gives it a permanent `lock_ref` of 1 when the
# tree is made (print `root.lock_ref`: 1 on an idle tree), and `inc_lock_ref` leaves it alone. Locked tokens count as `protected_size`, unlocked ones as `evictable_size`; eviction
# never touches a locked node.

# %%
# NBVAL_CHECK_OUTPUT
m = cache.match_prefix(R2, rid="R4")                            # R4 runs with R2's prompt as prefix
delta = cache.inc_lock_ref(m.last_node, rid="R4")
print(f"locked {m.prefix_len} tokens: evictable_size changed by {delta}")
print(f"evictable {cache.evictable_size()}, protected {cache.protected_size()}")
res = cache.evict(100)                                          # try to evict everything
print(f"evict(100) freed {res.num_tokens} tokens (nodes {res.node_ids}); satisfied: {res.satisfied}")
print(cache.pretty())
print("after R4 finishes:", cache.dec_lock_ref(m.last_node, rid="R4"), "tokens evictable again")
cache.check_integrity()

# %% [markdown]
# The locked path `[1 2 3] → [9 9 9]` survived an eviction that asked for everything; the request
# that locked it can keep reading its blocks. When it finishes, `dec_lock_ref` makes them
# evictable again (they stay cached until memory is needed).
#
# ## 3. The picture: every step of that run
#
# The recorder kept the tree after every event (match, split, insert, lock, unlock, evict).
# Matched paths are green, inserted nodes blue, evicted nodes faded, evictable (unlocked) nodes
# dashed (simulated, real tree code). Watch R2's match, which ends inside R1's node
# `[1 2 3 4 5 6 7 8]`: only the tokens it matched are green ("3 of 8 tok matched"); the step
# after it shows the split that match causes (the captions say which step).

# %%
from kvlab.viz import radix_stepper
from kvlab.viz.radix_frames import radix_event_frames

radix_stepper(radix_event_frames(recorder), max_ids=8)   # every 8-token key whole

# %% [markdown]
# ## 4. Hit rate under memory pressure (real tree, simulated workload)
#
# A stream of 200 requests: 60% start with one of four popular system prompts (30 tokens; the
# most popular is used 4 times as often as the least) followed by a short question; 40% are
# one-off documents of 20 to 60 tokens that nobody will ask about again. Each request is served
# with `serve_request` on a real `CacheManager`, which evicts when the pool is short. The hit
# rate is the share of prompt tokens found in the cache (`cm.tree.stats.hit_rate`).

# %%
# NBVAL_CHECK_OUTPUT
import random

from kvlab.lessons.eviction import popular_prefix_stream

requests = popular_prefix_stream(200, seed=0)   # (prompt, output) pairs, seeded
capacities = [80, 120, 200, 400]
hit = {name: [] for name in EVICTION_POLICIES}
for cap in capacities:
    for name in EVICTION_POLICIES:
        c = CacheManager(num_blocks=cap, block_size=1, eviction_policy=name)
        for prompt, output in requests:
            serve_request(c, prompt, output)
        c.check_integrity()
        hit[name].append(c.tree.stats.hit_rate)
spread = [100 * (max(hit[n][i] for n in hit) - min(hit[n][i] for n in hit)) for i in range(len(capacities))]
print("pool (slots)  " + "".join(f"{NAME[n]:>15}" for n in hit) + "  spread (points)")
for i, cap in enumerate(capacities):
    print(f"{cap:>12}  " + "".join(f"{hit[n][i]:>15.1%}" for n in hit) + f"  {spread[i]:>15.1f}")

# %% [markdown]
# **Try it.** The control serves the same 200 requests through the real tree once for every
# policy at every pool size its slider offers (`sizes`: 80 to 400 slots in steps of 10), and
# draws the curves through those runs. Pick a pool size and a policy: the markers on the red
# dashed line are the three policies' rates at that size, on their curves; the policy you
# picked is drawn thick.

# %%
from kvlab.viz import HitRateControl

HitRateControl(requests, sizes=range(80, 401, 10), pool_size=120, policy="lru")

# %% [markdown]
# What the table says, in sentences computed from it (so they change when the numbers do):

# %%
# NBVAL_CHECK_OUTPUT
for i, cap in enumerate(capacities):
    ranked = sorted(hit, key=lambda n: hit[n][i], reverse=True)
    print(f"{cap:>3} slots: best {NAME[ranked[0]]} ({hit[ranked[0]][i]:.1%}), worst {NAME[ranked[-1]]} ({hit[ranked[-1]][i]:.1%}), "
          f"spread {spread[i]:.1f} points")
trend = "grows" if spread[-1] > spread[0] else "shrinks"
print(f"The spread between the policies {trend} with the pool: {spread[0]:.1f} points at {capacities[0]} slots, "
      f"{spread[-1]:.1f} at {capacities[-1]}.")
for n in hit:
    worst_at = sum(min(hit, key=lambda m: hit[m][i]) == n for i in range(len(capacities)))
    best_at = sum(max(hit, key=lambda m: hit[m][i]) == n for i in range(len(capacities)))
    print(f"{NAME[n]}: best at {best_at}, worst at {worst_at} of the {len(capacities)} pool sizes")

# %% [markdown]
# What drives those numbers on this stream? First, how much room the smallest pool leaves beside
# the request being served (each request is cached with its answer):

# %%
# NBVAL_CHECK_OUTPUT
import os

groups = {}
for prompt, output in requests:
    groups.setdefault(prompt[0], []).append(prompt + output)
shared = [g for g in groups.values() if len(g) > 1]              # the requests of one popular system prompt
prefix_len = min(len(os.path.commonprefix(g)) for g in shared)
popular = [len(r) for g in shared for r in g]
documents = [len(g[0]) for g in groups.values() if len(g) == 1]
print(f"{len(shared)} popular prefixes of {prefix_len} tokens; a request with one takes {min(popular)} to {max(popular)} "
      f"slots, a document {min(documents)} to {max(documents)}.")
room = capacities[0]
beside = {who: (room - longest) // prefix_len for who, longest in [("popular", max(popular)), ("document", max(documents))]}
print(f"Beside the longest request with a popular prefix, {room} slots hold at most {beside['popular']} other "
      f"prefix{'es' if beside['popular'] != 1 else ''}; beside the longest document, {beside['document']}.")

# %% [markdown]
# So the smallest pool has room for very few prefixes beside the request being served (the
# counts above), and every policy must evict prefixes it will need again soon; with more room the
# policy decides *which* prefixes survive. LFU counts
# how often each node was matched (`hit_count`), so the one-off documents go first: nothing
# matches them after they are cached, and their count stays 0, like R2's `[9 9 9]` in
# section 1's table; the popular prefixes, matched again and again, stay. LRU keeps whatever
# came last, so a burst of documents can push the prefixes out. No policy is best for every
# workload, and on this stream LRU is not the best one (the sentences under the table count at
# how many pool sizes each policy wins). It is nevertheless SGLang's default (`--radix-eviction-policy`
# defaults to `lru`); SGLang's source states no reason for that choice. A stream LRU plausibly
# suits, a chat where each turn's history is the next turn's prefix, is not measured here.
#
# ### Why can "fewest tokens" hit *less* with more memory?
#
# Its column in the table does not rise with the pool. The policy evicts the smallest unlocked
# leaf. Once the short question leaves of a popular prompt are gone, the prompt's own 30-token
# node is a leaf, smaller than every document longer than 30 tokens (a document is cached with
# its 5 output tokens: 25 to 65 tokens), so the prompt goes first and the long documents stay.
# Where the slots go, counted by `kvlab.lessons.eviction.cache_census` at the arrival of each
# request with a popular prompt (the same runs as the table; real tree, simulated stream):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.lessons.eviction import cache_census

census = {cap: cache_census(requests, cap, "fewest_tokens") for cap in capacities}
assert all(census[cap].hit_rate == hit["fewest_tokens"][i] for i, cap in enumerate(capacities))  # the table's runs
print(f"fewest tokens  {'hit rate':>8}  {'found their prompt':>18}  {'slots held by documents':>23}  {'prompts cached':>14}")
for cap, k in census.items():
    print(f"{cap:>4} slots     {k.hit_rate:>8.1%}  {f'{k.found} of {k.shared_requests}':>18}  "
          f"{f'{k.one_off_slots:.0f} of {cap}':>23}  {k.prefixes_held:>14.2f}")
for a, b in zip(capacities, capacities[1:]):
    ka, kb = census[a], census[b]
    if kb.hit_rate < ka.hit_rate:
        more = round(kb.one_off_slots) - round(ka.one_off_slots)
        lfu = cache_census(requests, b, "lfu")
        print(f"From {a} to {b} slots its hit rate falls from {ka.hit_rate:.1%} to {kb.hit_rate:.1%}.\n"
              f"The pool grows by {b - a} slots, the documents' share by {more} ({round(ka.one_off_slots)} -> "
              f"{round(kb.one_off_slots)} on average)" + (":\nthey take room the prompts had" if more > b - a else "")
              + f", and the popular requests that find their prompt\nfall from {ka.found} to {kb.found}. "
              f"LFU at {b} slots: documents hold {lfu.one_off_slots:.0f}, and {lfu.found} find their prompt.")

# %% [markdown]
# In the smallest pool documents cannot pile up: one request alone needs up to 65 slots, so
# each new one evicts most of what is cached, documents included (the first row). In a larger
# pool long documents fit side by side, and every popular prompt that comes back is evicted
# before them: the extra memory is spent on tokens nobody asks for again. A leaf's size says
# nothing about whether it will be used again; recency (LRU) and match counts (LFU) do, which is
# why those two columns rise with the pool.
#
# ### The real run: the bundled model under memory pressure
#
# Eviction and preemption must never change an answer, only the work done. Here the bundled
# model serves 12 requests (three system prompts, four questions, a new request every two
# steps) in `kvlab.compute.engine.Engine` with the radix tree, in pools of shrinking size
# (block size 4). When the pool is short the engine evicts unlocked leaves; when even that is
# not enough for the next decode step it **preempts** the most recently admitted request: kvlab
# inserts its computed tokens (prompt and the tokens generated so far) into the tree, frees its
# blocks, and puts it back at the head of the queue, to be admitted again later. (SGLang keeps
# less of it: see below the next table.) Prompt tokens
# are counted at every admission: `prefilled` ran through the model, `reused` came from the
# tree. `check=True` verifies every reference count after every step (measured on the CPU).

# %%
# NBVAL_CHECK_OUTPUT
import torch

from kvlab.compute.engine import Engine
from kvlab.compute.loader import load_bundled

torch.set_num_threads(1)                                      # a tiny model is fastest on one thread
model, tok = load_bundled()
systems = ["You are a helpful assistant for the socket module. Answer briefly.\n",
           "You document the json module. Give an example for every answer.\n",
           "Explain the os.path functions to a beginner, one sentence each.\n"]
questions = ["How do I open a connection?", "What does this return?", "Is it thread safe?", "Which exceptions are raised?"]
rng = random.Random(0)
texts = [rng.choice(systems) + rng.choice(questions) for _ in range(12)]
prompt_tokens = sum(len(tok.encode(t)) for t in texts)

print(f"{'pool (blocks)':>13} {'prefilled':>9} {'reused':>6} {'admissions':>10} {'evicted tokens':>14} "
      f"{'preemptions':>11}  same answers")
reference, rows = None, []
for num_blocks in [400, 32, 24, 16]:
    eng = Engine(model, num_blocks=num_blocks, block_size=4, radix=True, check=True, max_batch_size=4)
    for i, text in enumerate(texts):
        eng.submit(tok.encode(text), 6, rid=f"R{i + 1}", arrival_step=2 * i)
    report = eng.run()
    answers = [r.outputs for r in report.requests]
    reference = reference or answers
    s = report.summary()
    row = dict(blocks=num_blocks, prefilled=s["prefill_computed"], reused=s["prefill_saved"],
               admissions=len(texts) + s["preemptions"], evicted=eng.cache_manager.tree.stats.evicted_tokens,
               preemptions=s["preemptions"], same=answers == reference)
    rows.append(row)
    print(f"{row['blocks']:>13} {row['prefilled']:>9} {row['reused']:>6} {row['admissions']:>10} {row['evicted']:>14} "
          f"{row['preemptions']:>11}  {row['same']}")
print(f"the 12 prompts hold {prompt_tokens} tokens")

# %% [markdown]
# The same data in sentences, computed from the table above:

# %%
# NBVAL_CHECK_OUTPUT
big, small = rows[0], rows[-1]
evicting = [r["blocks"] for r in rows if r["evicted"]]
preempting = [r for r in rows if r["preemptions"]]
print(f"With {big['blocks']} blocks {big['evicted']} tokens are evicted and {big['reused']} of "
      f"{big['prefilled'] + big['reused']} prompt tokens are reused.")
print(f"Eviction starts at {evicting[0]} blocks." if evicting else "Nothing is evicted in any pool.")
if preempting:
    print(f"Preemption starts at {preempting[0]['blocks']} blocks ({preempting[0]['preemptions']} preemptions) "
          f"and reaches {small['preemptions']} at {small['blocks']} blocks.")
print(f"Every answer is the same in every pool: {all(r['same'] for r in rows)}.")
for r in rows:
    seen = r["prefilled"] + r["reused"]
    print(f"{r['blocks']:>3} blocks: {r['admissions']} admissions saw {seen} prompt tokens "
          f"({seen - prompt_tokens} more than the 12 prompts hold); {r['reused'] / r['admissions']:.1f} reused per admission")
grow = {k: small[k] / big[k] for k in ("reused", "admissions")}
per = (small["reused"] / small["admissions"]) / (big["reused"] / big["admissions"])
print(f"From {big['blocks']} to {small['blocks']} blocks: reused x{grow['reused']:.2f}, admissions x{grow['admissions']:.2f}, "
      f"reused per admission x{per:.2f}.")
if per - 1 < (grow["reused"] - 1) / 2:
    print("So most of the rise in reused comes from the extra admissions, not from better reuse.")

# %% [markdown]
# Why does **reused** rise as memory shrinks? Not because a small pool caches better: every
# preempted request is admitted again, and its second admission matches what its first one left
# in the tree, its own prompt *and* the tokens it had generated (kvlab's preemption inserts them
# with `cache_finished_req`). Those tokens are counted as reused a second time, so the count
# grows with the admissions, while **prefilled** grows too: what was evicted in between must be
# computed again. The last lines above compare the growth of the reused count with the growth
# of the admissions.
#
# **What SGLang does instead.** Its preemption differs from kvlab's in three ways.
#
# *Which request goes.* SGLang's `ScheduleBatch.retract_decode` (`schedule_batch.py`) takes back
# the running request that has generated the fewest tokens (ties: the longest prompt), not the
# newest one.
#
# *What stays in the tree.* Its prompt is there already: SGLang inserts a prompt right after its
# prefill (`cache_unfinished_req`). Preempting it frees the slots of its generated tokens without
# inserting them, and unlocks the prompt's path, which stays cached but evictable (`release_req`
# calls `cache_finished_req(req, is_insert=False)`, in newer versions through `release_kv_cache`;
# the comment: "release memory and don't insert into the tree because we need the space
# instantly"). The tree then evicts enough for a few more decode steps of the requests still
# running.
#
# *What its second admission computes.* It reuses its prompt if nothing evicted it meanwhile, and
# computes its generated tokens again (SGLang's own TODO there: "for preempted requests, we may
# want to insert into the tree").
#
# | preemption | kvlab (the run above) | SGLang |
# |---|---|---|
# | the request taken back | the most recently admitted | the one with the fewest generated tokens |
# | inserted into the tree | its prompt and the tokens generated so far | nothing: the prompt is there already, the generated tokens are freed |
# | computed again when it is admitted again | what was evicted in between | that, and every token it had generated |
#
# So on SGLang the reused count above would grow by the prompts alone (not measured here).
#
# ## 5. Cache-aware scheduling
#
# The order in which waiting requests are served matters as much as what is evicted. If
# requests sharing a prefix are served together, their prefix is computed once and stays hot;
# served first-come-first-served, unrelated requests in between can evict it. SGLang's
# `SchedulePolicy` (`schedule_policy.py`) has two cache-aware orders, the members of its
# `CacheAwarePolicy` enum (its other orders, such as `fcfs` and `lof`, never look at the tree):
#
# - `"lpm"` (longest prefix match): match every waiting request in the tree and sort by the
#   matched length, longest first (a stable sort: ties keep their queue order). SGLang also
#   moves to the back a request whose cached match is at most 32 tokens but which shares at
#   least 32 tokens with a request ahead of it in the queue, so that shared part is computed
#   once; kvlab leaves that refinement out.
# - `"dfs-weight"`: hang each waiting request on the tree node where its match ends; a node's
#   weight is the number of waiting requests at it and below it. Walk the tree depth-first from
#   the root, the heaviest child first, and queue a node's own requests after those of its
#   subtree. One subtree is served at a time, the busiest first, whatever the match lengths.
#
# One limit matters below: matching every waiting request costs time, so when **more than 128**
# requests wait, SGLang turns `lpm` off and serves the queue first-come-first-served
# (`SchedulePolicy._determine_active_policy`; `dfs-weight` has no such limit). From here on,
# **"cache-aware" means `lpm`**: the simulator and the control below order the queue by longest
# cached prefix first; `dfs-weight` appears only in the small example.
# `kvlab.reuse.schedule` has both orders. A tree holding `[1 2 3 4 5]` and `[9 9 9]`, and a queue
# where the two orders differ:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.reuse.schedule import order_by_shared_prefix, shared_prefix_lengths

c = CacheManager(num_blocks=64, block_size=1)
serve_request(c, [1, 2, 3, 4, 5])
serve_request(c, [9, 9, 9])
queue = [[1, 2, 7], [9, 9, 9, 1], [1, 2, 3, 4, 8], [9, 9, 9, 2], [9, 9, 9, 3], [5, 5]]
waiting_cached = shared_prefix_lengths(queue, c.tree)            # read-only lookups (drawn below too)
print("cached prefix of each waiting request:", waiting_cached)
print("the order each policy serves them in (one request between bars):")
orders = {}
for policy in ["fcfs", "lpm", "dfs-weight"]:
    order = orders[policy] = order_by_shared_prefix(queue, c.tree, policy=policy)
    print(f"{policy:<10}", " | ".join(" ".join(map(str, r)) for r in order))

# %% [markdown]
# The same three orders as a picture: one row a policy, the requests left to right as served,
# coloured by the cached prefix their match runs through (the key names each colour), and how
# often each order switches from one cached prefix to the other (every switch can push the other
# prefix out of a full pool). The request with nothing cached, `[5 5]`, needs no prefix kept, so
# moving to it or from it is not counted:

# %%
from IPython.display import HTML

from kvlab.viz.order_view import orders_html

HTML(orders_html(queue, waiting_cached, orders))

# %% [markdown]
# `lpm` serves `[1 2 3 4 8]` first (4 tokens cached), then the three `[9 9 9 …]` requests, and
# comes back to `[1 2 …]` only at the end: the prefix `[1 2]` must survive in between.
# `dfs-weight` serves the `[9 9 9]` subtree first, because three requests wait under it against
# two under `[1 2 …]`, then the whole `[1 2 …]` subtree, deepest match first, and last the
# request with nothing cached.
# %% [markdown]
# At scale, with the simulator (**simulated**: `kvlab.sim`, the same radix tree code, OPT-13B on
# an A100-40GB cost model): 128 requests, all waiting at once, each starting with one of 8
# system prompts of 400 tokens. 128 is SGLang's limit: with one more waiting request its `lpm`
# would serve this queue FCFS until enough of it had been admitted, so the FCFS rows below are
# also what SGLang does with a longer queue. Under memory pressure, FCFS keeps evicting the prefixes it is
# about to need; cache-aware order (`lpm`) approaches the best possible hit rate (every prefix computed
# once), and the throughput follows. (The hit rate also counts the re-prefill of preempted
# requests, which mostly hits, so it can end slightly above the one-pass optimum.)

# %%
from kvlab import sim

LPM_LIMIT = 128                                # SGLang: above this many waiting requests, lpm -> fcfs
trace = sim.shared_prefix(LPM_LIMIT, rate=float("inf"), seed=0, num_prefixes=8, prefix_len=400,
                          question_mean=40, output_mean=40)
best = sim.optimal_hit_rate(trace)
print(f"{len(trace)} requests waiting (SGLang sorts by cached prefix up to {LPM_LIMIT}); "
      f"best possible hit rate for this trace: {best:.1%}")
print(f"{'pool (slots)':>12} {'order':>12} {'hit rate':>9} {'preemptions':>11} {'mean batch':>10} {'tokens/s (sim.)':>15}")
results = {}
for capacity in [2048, 4096]:
    for order in ["fcfs", "cache-aware"]:
        r = results[capacity, order] = sim.simulate(trace, "radix", capacity=capacity, order=order)
        print(f"{capacity:>12} {order.replace('fcfs', 'FCFS'):>12} {r.hit_rate:>9.1%} {r.preemptions:>11} {r.mean_batch:>10.1f} "
              f"{r.throughput:>15.0f}")

# %%
# NBVAL_CHECK_OUTPUT
for capacity in [2048, 4096]:
    fcfs, aware = results[capacity, "fcfs"], results[capacity, "cache-aware"]
    print(f"{capacity} slots: cache-aware hits more than FCFS: {aware.hit_rate > fcfs.hit_rate}; "
          f"within 5 points of the best possible: {aware.hit_rate > best - 0.05}; "
          f"more tokens/s: {aware.throughput > fcfs.throughput}")
    if aware.preemptions > fcfs.preemptions:
        print(f"  but more preemptions ({aware.preemptions} against {fcfs.preemptions}): requests sharing a cached prefix\n"
              f"  need few new slots each, so {aware.mean_batch:.1f} run at once on average against {fcfs.mean_batch:.1f};"
              f" each grows\n  by a token a step, and the fuller pool runs out more often. A preempted request's\n"
              f"  re-prefill mostly hits, so the hit rate does not pay for it.")

# %% [markdown]
# **Try it.** A smaller trace (100 requests, under SGLang's limit of 128; 8 system prompts of
# 200 tokens), simulated once at every pool size for both orders: pick a pool size and an
# order; the markers on the red dashed line are the two orders' hit rates at that size, the
# grey dashed line the best possible, and the grey bracket with its label the chosen order's gap
# to it (cache-aware is `lpm` here too).

# %%
from kvlab.viz import SchedulingControl

control = SchedulingControl(pool_size=1024, order="cache-aware")
control

# %% [markdown]
# At the largest pool the two orders end a few points under the best possible (dashed). Why,
# from the runs behind the chart:

# %%
# NBVAL_CHECK_OUTPUT
largest = control.sizes[-1]
run = control.runs[largest, "cache-aware"]
hits = [rec.hit_tokens for rec in run.records if rec.hit_tokens]
first = control.trace.requests[0].prompt                       # its system prompt: what it shares with the others
prefix = max(next((i for i, (a, b) in enumerate(zip(first, q.prompt)) if a != b), min(len(first), len(q.prompt)))
             for q in control.trace.requests[1:])
print(f"{largest} slots: cache-aware {run.hit_rate:.1%}, FCFS {control.runs[largest, 'fcfs'].hit_rate:.1%}, "
      f"best possible {control.optimum:.1%}; {run.preemptions} preemptions.")
print(f"The simulated radix cache shares whole blocks of {run.block_size} tokens: a later request reuses at most\n"
      f"{max(hits)} tokens of its {prefix}-token system prompt and computes the other {prefix - max(hits)} again.")
lost = sum(prefix - min(h, prefix) for h in hits)
print(f"{len(hits)} requests x about {prefix - max(hits)} tokens = {lost} tokens, {lost / run.prompt_tokens:.1%} of the "
      f"{run.prompt_tokens} prompt tokens;\nthe gap to the best possible (which counts single tokens) is "
      f"{control.optimum - run.hit_rate:.1%}.")

# %% [markdown]
# ## 6. Exercises
#
# ### Exercise 1: LRU eviction
#
# Implement `lru_evict(root, num_tokens)` returning the **ids** of the nodes LRU eviction
# removes, in order, without changing the tree. The tree is kvlab's (`kvlab.reuse.TreeNode`):
# `node.children` (a dict), `node.key` (its tokens), `node.lock_ref`, `node.last_access_time`,
# `node.id`.
#
# The contract: only a node with no remaining children and `lock_ref == 0` can go, never the
# root; the candidate with the smallest `(last_access_time, id)` goes first; stop as soon as the
# removed nodes hold at least `num_tokens` tokens, or when no candidate is left. The checker
# compares with `RadixCache.evict` on copies of random trees, some with locked paths.
#
# Design the loop yourself. Predict first: the root has two children, `A` (3 tokens) with one
# leaf `B` (2 tokens), both last used at tick 1, and a leaf `D` (4 tokens) last used at tick 2;
# nothing is locked. Ask for 5 tokens: which nodes go, in which order, and at which moment does
# `A` become a candidate? What does that tell you about *when* you must choose the next victim?

# %% tags=["exercise-stub"]
def lru_evict(root, num_tokens):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.lru_evict(lru_evict)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# You may not change the tree, yet nodes "go" one by one. How can you pretend a node is gone
# without touching it, so that its parent can become a candidate later?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Draw a root with one child `A` (3 tokens) that has two leaves `B` and `C`, `C` locked. Ask for
# 10 tokens: what goes, in which order, and why does `A` never go?
# </details>
#
# <details><summary>Hint 3</summary>
#
# The loop ends in two ways. Which one can happen while you still owe tokens, and what must you
# not do with an empty list of candidates?
# </details>

# %% [markdown]
# ### Exercise 2: lock a path
#
# A request starts running on the cached prefix that ends at `node`. Implement
# `inc_lock_ref(node)`: protect that prefix from eviction for as long as the request runs (the
# tree counts this with `lock_ref`, one per running request; the root keeps its permanent
# `lock_ref` of 1 and is never changed), and
# return how the **evictable size** (tokens eviction could still take) changes because of this
# call. Design it yourself; the checker compares the returned value and every node's `lock_ref`
# with `RadixCache.inc_lock_ref` on copies of trees where other requests already lock parts of
# the path.
#
# Predict first: a path root -> `A` (3 tokens) -> `B` (2 tokens) -> `C` (4 tokens), where another
# running request already holds `A` -> `B`. What does locking `C` return, and what is each
# node's `lock_ref` afterwards?

# %% tags=["exercise-stub"]
def inc_lock_ref(node):
    raise NotImplementedError("your code here")


# %%
check.inc_lock_ref(inc_lock_ref)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# The request reads its whole prefix, not only the tokens of `node`. And the evictable size
# counts every unlocked node, leaf or not: which nodes must it stop counting?
# </details>
#
# <details><summary>Hint 2</summary>
#
# In the prediction above, which of the 9 tokens were already out of eviction's reach before
# the call? Does a second lock on a node protect anything more?
# </details>

# %% [markdown]
# ### Exercise 3: can a new request be admitted, and what must be evicted?
#
# Implement `admit_plan(root, tokens, num_free)` for a radix cache of block size 1 (one slot
# per token) with `num_free` free slots. It does what `CacheManager.admit` does, as SGLang does:
#
# 1. match the longest cached prefix of `tokens`, leaving at least one token to compute:
#    `prefix_len = min(longest match, len(tokens) - 1)`;
# 2. **lock** the matched path: from now on those tokens cannot be evicted, not even to make
#    room for this very request (if the match ends inside a node, only its matched part is
#    locked: the node is split there);
# 3. the request needs `len(tokens) - prefix_len` new slots. If `num_free` covers them, nothing
#    is evicted. Otherwise the tree must evict the difference, but only if the free slots plus
#    the unlocked cached tokens (after step 2) are enough; if not, the request does not fit,
#    nothing is evicted, and it waits.
#
# Return `None` when it does not fit, else `(prefix_len, tokens_to_evict)`. The tree is the one
# of exercise 1 (`node.children`, `node.key`, `node.lock_ref`, `node.parent`); do not change it.
# The checker runs `CacheManager.admit` on a copy of the same cache and compares.

# %% tags=["exercise-stub"]
def admit_plan(root, tokens, num_free):
    raise NotImplementedError("your code here")


# %%
check.admit_plan(admit_plan)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Lesson 07's `match_prefix` finds how far the prompt matches. What else must your walk remember
# for step 2: which nodes did it pass through, and how much of the last one matched?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Which unlocked tokens does locking the path take out of eviction's reach: all of every node on
# it, or less? And are inner nodes evictable too, or only the leaves you see now?
# </details>
#
# <details><summary>Hint 3</summary>
#
# Predict one case before you run the checker: the tree `[1 2 3]` → {`[4 5 6]`, `[7 8]`} and
# `[9 9 9 9]`, nothing locked, 2 free slots, and a request `[1 2 3 4]` followed by 9 new tokens.
# How many slots does it need, how many could eviction still give it, and what do you return?
# </details>

# %% [markdown]
# ## Summary
#
# - A full radix cache evicts unlocked **leaves**, one at a time, in policy order; a parent whose
#   last child goes becomes a leaf. It never drops a whole subtree at once, and the order is
#   recency (LRU, SGLang's default), not token count: a shared prefix outlives its branches.
# - Running requests lock their matched path (`inc_lock_ref`, up to, but not including, the root); locked tokens
#   are `protected_size` and are never evicted, not even to admit the request that locked them;
#   `dec_lock_ref` releases them.
# - How much the policy matters depends on the workload and the pool: the sentences computed
#   under the hit-rate table say which policy won at which size (real tree, simulated stream).
# - On the bundled model, eviction and preemption change the work, never the answers; a
#   preempted request is admitted again and re-matches what it had cached, so "reused" grows
#   with the preemptions.
# - Serving the longest cached prefix first keeps shared prefixes hot: under memory pressure the
#   simulated hit rate went from FCFS's level to near the optimum.
# - Next, lesson 09: the whole picture at scale, and the notes' claims checked against the
#   published figures.
