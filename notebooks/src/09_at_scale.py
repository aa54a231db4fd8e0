# Lesson 09: at scale: the vLLM paper's figures reproduced on its own baselines, the notes' claims re-judged.
# Source of truth for notebooks/09_at_scale.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 09

# %% [markdown]
# # 09 · At scale: the vLLM paper's figures re-run, the notes' claims re-judged
#
# **What you will learn**
#
# - How `kvlab.sim` serves thousands of requests on a laptop: the allocators of the earlier
#   lessons driven by a continuous-batching loop and a cost model, for a GPU we do not have.
#   Every number it prints is **simulated**; every published number names its figure and page.
# - How the vLLM paper built its baselines (Orca on a **buddy allocator**, lesson 03's contiguous
#   memory with power-of-two runs), and why that detail moves the results by about a third
#   (section 5 prints how much).
# - The paper's Fig. 13 (requests served at once) and Fig. 2 (where the memory goes) re-run
#   with 95% intervals over seeds against a 15% tolerance, which numbers land inside it and
#   which do not. The three Orca baselines land close; vLLM's batch and its share of memory
#   holding tokens come out below the paper's, and the lesson shows why: its batch follows the
#   simulator's step time (a step costs the larger of its memory time and its compute time),
#   so you will move the step time and watch those two numbers move.
# - The source notes' claims ("saves about 55%", "5 requests become 12", "a must above 2,000
#   tokens or 20 requests") judged against the numbers.
#
# The paper: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
# PagedAttention", SOSP 2023 (arXiv:2309.06180); page numbers are that PDF's. Terms:
# [glossary](glossary.md).

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. The setting: one budget, the paper's Table 1
#
# The paper serves OPT-13B on one A100 with 40 GB: 26 GB of weights, **12 GB for the KV cache,
# "15.7K" slots** (Table 1, p. 9). The paper's GB are binary here: 15.7K slots of 800 KiB
# (lesson 02) are 12 GiB, as the cell below computes. The [KV size](glossary.md) of one token is
# `2 × layers × kv_heads × head_dim × bytes` (lesson 02). Every run in this lesson uses that one
# budget, and so do the tests and `python -m kvlab simulate --model opt-13b --gpu a100-40gb`.

# %%
# NBVAL_CHECK_OUTPUT
import kvlab.viz as viz
from kvlab import sim
from kvlab.sim import claims as C
from kvlab.sim import plots
from kvlab.sim import reproductions as R

spec = kvlab.get_model("opt-13b")
budget, cost = R.setting()
print(f"OPT-13B: {spec.layers} layers x {spec.kv_heads} KV heads x {spec.head_dim} x 2 (K, V) x {spec.dtype_bytes} bytes"
      f" = {spec.bytes_per_token:,} bytes per token")
print(f"12 GiB / {spec.bytes_per_token:,} B = {budget.tokens:,} token slots = {budget.tokens // 16} blocks of 16")
print(f"a 2,048-token reservation takes {2048 / budget.tokens:.1%} of it: {budget.tokens // 2048} fit")

# %% [markdown]
# One colour has one meaning in every figure of this lesson (and its appendix): a system's colour
# is that system's, a memory colour that kind of slot's. The key:

# %%
from IPython.display import HTML

HTML(plots.colour_key_html(names={**R.PAPER_NAMES, "vllm": "vLLM (paged)", "radix": "paged + radix"},
                           font_px=viz.theme().control_px))

# %% [markdown]
# The requests: the paper synthesised them from ShareGPT conversations with Poisson arrivals at 2
# requests a second, and ran **1-hour traces** (Sec. 6.1, p. 10). It publishes the lengths' means
# (Fig. 11, p. 9: 161.31 tokens in, 337.99 out), not the traces; kvlab draws log-normal lengths
# calibrated to those means. This lesson runs **half an hour** (3,600 requests) so that each cell
# stays short; the tests pin the same sizes and `bench/bench_sim.py` runs the full hour.

# %%
# NBVAL_CHECK_OUTPUT
N = 3600            # half an hour at 2 req/s
SEEDS = (0, 1, 2)   # three seeds: every reproduced number gets a 95% interval
trace = sim.sharegpt(N, rate=2.0, seed=0)
print(f"{len(trace)} requests over {trace.requests[-1].arrival / 60:.0f} minutes; mean prompt "
      f"{trace.mean_prompt_len:.1f} tokens (published 161.31), mean output {trace.mean_output_len:.1f} (published 337.99)")

# %% [markdown]
# ## 2. The baselines as the paper built them: a buddy allocator
#
# Orca, the system vLLM compares with, was not public, so the authors re-implemented it: "we
# assume Orca uses the buddy allocation algorithm to determine the memory address to store KV
# cache" (Sec. 6.1, p. 10). A pre-release version of their code still shows how: in
# github.com/vllm-project/vllm's history, before the package was renamed `vllm`,
# `cacheflow/master/block_manager.py` held a `BuddyAllocator` and a `BuddyBlockSpaceManager`
# whose `len_estimator` is `"constant"`, `"power2"` or `"oracle"` (the three Orcas). Later
# versions of that file (commit 38ed06a, for one) hold only the paged `BlockSpaceManager`: the
# buddy code was removed before the release.
#
# 1. **estimate** the output length: 2,048 (**Orca (Max)**), the next power of two of the true
#    output (**Orca (Pow2)**), or the true output (**Orca (Oracle)**, which no real server knows);
# 2. reserve `min(prompt + estimate, 2048)` slots in whole blocks of 16, once, for the whole request;
# 3. the **buddy allocator** rounds the blocks up to a power of two (1, 2, 4, ... 128 blocks) and
#    finds a free run that size, splitting bigger runs in halves and merging freed halves back.
#
# Step 3 is the one a reproduction easily leaves out (section 5 measures what it is worth). Below,
# kvlab's `BuddyAllocator` carves the paper's 983 blocks and one average request is sized three
# ways. Two roundings follow the estimate: step 2 fills the last block (at most 15 slots), step 3
# rounds the blocks up to a power of two. Look at the two "+" columns: which rounding costs more?

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.memory import BuddyAllocator
from kvlab.sim.policies import OrcaPolicy
from kvlab.sim.workloads import TraceRequest

pool = BuddyAllocator(budget.tokens // 16, block_size=16, max_run_tokens=2048)
print("free runs (start block, blocks):", pool.free_runs())
req = TraceRequest(0, 0.0, prompt_len=161, output_len=338)
for mode in ("orca-max", "orca-pow2", "orca-oracle"):
    p = OrcaPolicy(budget.tokens, mode)
    asked = p.reservation(req)
    run = p.run_blocks(req)
    blocks = -(-asked // 16)
    print(f"{R.PAPER_NAMES[mode]:<13} {asked:>4} slots -> {blocks:>3} blocks (+{blocks * 16 - asked:>2} slots) -> a run "
          f"of {run:>3} blocks (+{(run - blocks) * 16:>3} slots of buddy rounding)")

# %% [markdown]
# What the pool looks like once it is full: the first requests of the trace admitted under
# Orca (Oracle) until one no longer fits. Each black outline is one request's run (hover to name
# the request): violet what it asked for, hatched its rounding; grey the free runs left over
# (often too small for the next request).

# %%
pol = OrcaPolicy(budget.tokens, "orca-oracle")
admitted = 0
for r in trace.requests:
    if not pol.admit(sim.SimRequest(r)):
        break
    admitted += 1
st = pol.buddy.stats()
print(f"{admitted} requests fit; rounding {st.rounding_blocks} of {st.num_blocks} blocks "
      f"({st.rounding_blocks / st.num_blocks:.1%}), free {st.free_blocks} (largest free run {st.largest_free_run})")
plots.buddy_layout_figure(pol.buddy, viz.theme(), title="983 blocks under Orca (Oracle), the trace's first requests "
                          "(simulated, seed 0)")

# %% [markdown]
# ## 3. How many requests run at once (Fig. 13a)
#
# The paper's Fig. 13a (p. 10) gives the mean number of requests in the batch for OPT-13B on
# ShareGPT at 2 req/s: **Orca (Max) 7.00, Orca (Pow2) 9.81, Orca (Oracle) 13.62, vLLM 30.42**
# (the figure's bar labels, read off the figure). The text confirms the ratios: vLLM "processes
# 2.2x more requests at the same time than Orca (Oracle) and 4.3x more requests than Orca (Max)"
# (Sec. 6.2, p. 11). The target here: each within 15%. First the four systems on one trace
# (seed 0); look at the "within 15%" column.
#
# The cost model (`kvlab.sim.cost`) prices one step as a fixed overhead plus the **larger** of
# its memory time (every weight and every cached K and V read from HBM) and its compute time (2
# FLOPs per parameter per token): the two overlap on a GPU, so they do not add up.

# %%
print(R.vllm_batched_requests("sharegpt", N, seeds=(0,)).table())

# %% [markdown]
# One trace is one sample of Poisson arrivals and random lengths. Two more seeds give each number
# a 95% interval (Student's t over the three runs): look at how wide the intervals are compared
# with the 15% tolerance.

# %%
fig13 = R.vllm_batched_requests("sharegpt", N, seeds=SEEDS)   # seed 0 again from the cache, then seeds 1 and 2
print(fig13.table())

# %%
plots.compare_bars(fig13, "mean batched requests", theme=viz.theme(), rows=[0, 1, 2, 3])

# %% [markdown]
# Why the bars land where they do, in the reproduction's own words (computed from the runs): a
# memory-bound system's batch is what its reservations let fit; a system that keeps up with the
# arrivals has the batch of Little's law (arrival rate × time in the system), set by the cost model.

# %%
print(fig13.explanation)

# %%
# NBVAL_CHECK_OUTPUT
orca_off = max(abs(r.simulated / r.published - 1) for r in fig13.rows[:3])
v13 = fig13.rows[3]
print(f"the three Orca bars: within {orca_off:.0%} of the paper (memory-bound: the reservations decide)")
print(f"vLLM: {v13.simulated:.1f} against the published {v13.published:.2f} ({v13.simulated / v13.published - 1:+.0%}), "
      f"{'inside' if v13.meets else 'outside'} the 15% tolerance; its batch follows the step time, not its memory")
print("order as published (Max < Pow2 < Oracle < vLLM):",
      fig13.rows[0].simulated < fig13.rows[1].simulated < fig13.rows[2].simulated < fig13.rows[3].simulated)

# %% [markdown]
# ### Try it: rate, system and step time, beside Fig. 13
#
# Two minutes of ShareGPT arrivals (at least 100 requests: at 0.5 req/s that is 200 s) through
# one of the paper's systems, run until the last request finishes, so the time axis goes on past
# the arrivals while the queue drains. Move the rate, pick a system, and scale the cost model's
# step time (1 = kvlab's cost model, the one behind every bar
# in this lesson). The top panel is where the budget goes, grey the memory no request holds; the
# bottom panel counts the requests running (the line) and is hatched while requests **wait** for
# memory. Grey left over while the hatching shows is external fragmentation: memory that is free
# but too scattered (or too small) for the next request's reservation. Under Orca (Max) the grey
# does not close while requests wait (what is left is smaller than one 2,048-slot reservation);
# under vLLM at 4 req/s it does, since paging hands out every last block. The cell prints both,
# from these runs; pick the other Orcas to see where their grey goes.
#
# Then the question of this section and the next: pick vLLM at 2 req/s and slow its steps down;
# its batch grows and its token states rise towards the paper's 96.3%, while an Orca bar stays
# where its memory holds it. Two minutes start from an empty server, so every number here sits
# below the half-hour runs' above; the direction is what to watch. (Without a widget front end
# the cell shows 2 req/s under Orca (Max).)

# %%
def two_minutes(rate, policy, step_time=1.0):
    t = sim.sharegpt(max(100, int(rate * 120)), rate=rate, seed=0)
    return sim.simulate(t, sim.make_policy(policy, budget.tokens), cost=R.setting(step_time)[1], progress=False)


import time

widget = plots.RateWidget(two_minutes, R.PAPER_POLICIES, rate=2.0, static=viz.is_static(), theme=viz.theme(),
                          labels=R.PAPER_NAMES, step_times=(0.6, 2.0, 0.1))


def free_while_waiting(r):
    """The smallest free share of the budget (%) over the iterations where requests waited (None: none did)."""
    shares = [100 * (x["free"] + x["external_fragmentation"]) / r.capacity for x in r.timeline_rows() if x["waiting"]]
    return min(shares) if shares else None


t0 = time.perf_counter()
busy = widget.update(4.0, "vllm", 2.0)   # the slowest setting: the most requests, the biggest batch
slowest = time.perf_counter() - t0
for step_time in (1.0, 1.5):
    widget.update(2.0, "vllm", step_time)
    print(widget.caption)
orca = widget.update(2.0, R.PAPER_POLICIES[0], 1.0)   # the widget opens on Orca (Max), step time x1
for label, r in ((f"{R.PAPER_NAMES['vllm']} at 4 req/s, step time x2", busy),
                 (f"{R.PAPER_NAMES[R.PAPER_POLICIES[0]]} at 2 req/s", orca)):
    low = free_while_waiting(r)
    print(f"{label}: " + ("no request ever waited" if low is None else
                          f"while requests wait, the grey (free) memory closes (down to {low:.1f}% of the budget)"
                          if low < 0.05 else
                          f"the grey (free) memory never closes, even while requests wait ({low:.1f}% of the budget "
                          "or more stays grey, too little for one more reservation: external fragmentation)"))
print(f"(one update at 4 req/s under vLLM, step time x2, took {slowest:.2f} s on this machine)")
widget

# %% [markdown]
# ## 4. Where the memory goes (Fig. 2), inside the same runs
#
# Fig. 2 (p. 2) splits the KV memory "during the experiment in Sec. 6.2" into token states
# (slots holding a real token), reservation (slots kept for tokens still to come), internal
# fragmentation (slots the estimate reserved past the true length) and "external fragmentation
# & others". Its bar labels (read off the figure): Orca (Max) 20.4 / 13.3 / 57.3 / 8.9%,
# Orca (Pow2) 26.8 / 17.9 / 13.6 / 41.6%, Orca (Oracle) 38.2 / 25.2 / none / 36.6%, vLLM 96.3%
# token states. Method here: the same three runs as Fig. 13, every iteration averaged. kvlab also
# separates the buddy's rounding, which the paper counts under "others" (its Oracle bar has no
# internal fragmentation). Look for where each system's waste sits.

# %%
fig2 = R.vllm_memory_breakdown(N, seeds=SEEDS)   # the Fig. 13 runs again: nothing new to simulate
plots.memory_breakdown_bars(fig2, theme=viz.theme())

# %%
print(fig2.table())
for p, row in zip(R.PAPER_POLICIES, fig2.rows):
    b = fig2.results["runs"][0][p].breakdown(loaded=False)
    print(f"{R.PAPER_NAMES[p]:<14} token states {row.simulated:.1%} (published {row.published:.1%}); the largest "
          f"waste: {max(('reservation', 'internal_fragmentation', 'rounding', 'free'), key=b.get).replace('_', ' ')}")
v2, vrun = fig2.rows[3], fig2.results["runs"][0]["vllm"]
bound = vrun.metrics.loaded_iterations / vrun.metrics.iterations
free_all = [run["vllm"].breakdown(loaded=False)["free"] for run in fig2.results["runs"]]
print(f"\nWhere this reproduction stands: Fig. 13's vLLM bar {v13.simulated:.1f} against {v13.published:.2f} "
      f"({v13.simulated / v13.published - 1:+.0%}, {'inside' if v13.meets else 'outside'} the tolerance) and Fig. 2's "
      f"vLLM token states {v2.simulated:.1%} against {v2.published:.1%} ({'inside' if v2.meets else 'outside'} the "
      f"tolerance). kvlab's cost model charges a step max(memory time, compute time); at that step time our vLLM had "
      f"requests waiting in only {bound:.0%} of its iterations on seed 0, and {vrun.breakdown(loaded=False)['free']:.0%} "
      f"of its budget stayed free on that seed ({sum(free_all) / len(free_all):.1%} over the table's {len(free_all)} "
      f"seeds), where the paper's 96.3% says its vLLM ran with full memory.")

# %% [markdown]
# Two choices the paper does not publish could explain the gap: the step time (the cost model)
# and the shape of the length distribution (ours: log-normal with the published means). The cell
# re-runs vLLM alone on the seed-0 trace with each changed, and ranks them by how far they move
# its bar (the appendix does the same for every system, and more variants).

# %%
base_v = fig2.results["runs"][0]["vllm"]
variants = {"the step time (20% longer)": R.paper_runs("sharegpt", N, 0, cost_scale=1.2, policies=("vllm",))["vllm"],
            "the length shape (gamma, same means)": R.paper_runs("sharegpt", N, 0, shape="gamma", policies=("vllm",))["vllm"]}
ranked = sorted(variants.items(), key=lambda kv: -abs(kv[1].mean_batch / base_v.mean_batch - 1))
print(f"vLLM on seed 0: {base_v.mean_batch:.1f} requests, token states {base_v.breakdown(False)['token_states']:.0%} "
      f"(published {v13.published:.2f} and 96.3%). The causes, ranked: " + "; then ".join(
          f"{name}: {r.mean_batch:.1f} requests ({r.mean_batch / base_v.mean_batch - 1:+.0%}), token states "
          f"{r.breakdown(False)['token_states']:.0%}" for name, r in ranked) + ".")
top = ranked[0][1]
print(f"So {ranked[0][0].split(' (')[0]} moves the bar most" +
      (f", and alone brings it within 15% of the paper's {v13.published:.2f}" if abs(top.mean_batch / v13.published - 1)
       <= R.TOLERANCE else "") + ". Slow the step down yourself with the control in section 3 and watch both rise.")

# %% [markdown]
# ## 5. The ablation: the same estimates without the buddy allocator
#
# What the allocator is worth: the Pow2 and Oracle estimates again, on lesson 03's first-fit
# arena in single token slots (no rounding), on the seed-0 trace: the model a reproduction gets
# when it leaves out the paper's allocator. Compare its bars with the buddy's and with the
# published ones.

# %%
first = R.paper_runs("sharegpt", N, 0)
ablation = R.paper_runs("sharegpt", N, 0, policies=("firstfit-pow2", "firstfit-oracle"))
for mode in ("pow2", "oracle"):
    b, f = first[f"orca-{mode}"].mean_batch, ablation[f"firstfit-{mode}"].mean_batch
    print(f"{mode:<7} buddy {b:5.2f} requests, first fit {f:5.2f}: first fit batches {f / b - 1:+.0%} more "
          f"(published for the buddy: {R.PUBLISHED['batch_sharegpt'][f'orca-{mode}']})")

# %% [markdown]
# ## 6. Batch against request rate: where each system becomes memory-bound
#
# One bar at 2 req/s hides a curve. At a low rate every system keeps up and the batch is arrival
# rate × time in the system (Little's law), the same for all; as the rate grows each system hits
# its memory limit and its line goes flat. Filled markers: memory-bound (requests waiting) in
# over half the iterations. Look for the rate at which each line bends, and where the published
# bars (stars) sit. Ten minutes of arrivals at each rate (seed 0).

# %%
sweep = R.batch_vs_rate(rates=(0.5, 1.0, 1.5, 2.0, 2.5), duration_s=600)   # 5 rates x 4 systems, simulated

# %%
fig = plots.batch_vs_rate_figure(sweep, viz.theme(), published=R.PUBLISHED["batch_sharegpt"], seed=0)
fig.update_layout(legend=dict(orientation="h", x=0, yref="container", y=0, yanchor="bottom"),  # under the axis title
                  margin=dict(b=150 if viz.theme().high_contrast else 110), height=480)

# %%
start = R.memory_bound_from(sweep)
for p in R.PAPER_POLICIES:
    at = {r["rate"]: r for r in sweep if r["policy"] == p}
    print(f"{R.PAPER_NAMES[p]:<14} memory-bound from {start[p]} req/s; batch {at[0.5]['mean_batch']:.1f} at 0.5 req/s, "
          f"{at[2.0]['mean_batch']:.1f} at 2 req/s, {at[2.5]['mean_batch']:.1f} at 2.5 req/s")

# %% [markdown]
# ## 7. Sharing (Fig. 15)
#
# Parallel sampling and beam search (lesson 06) at scale. The paper (Sec. 6.3, p. 11) reports
# 6.1%-9.8% of the memory saved by sharing for parallel sampling and 37.6%-55.2% for beam search
# on Alpaca; 16.2%-30.5% and 44.3%-66.3% on ShareGPT. Fig. 15 itself (Alpaca) has one bar per
# width; the lines under the table compare each simulated width with its published bar (Alpaca)
# or with the range (ShareGPT, for which the paper gives only the text). Look at the order, not
# the exact values: beam ancestry is modelled, not sampled from a real model.

# %%
from textwrap import fill

fig15 = R.vllm_sharing_savings({"alpaca": 20, "sharegpt": 6}, widths=(2, 4), seeds=SEEDS)
print(fig15.table())
for (ds, kind), (lo, hi) in R.PUBLISHED["saving"].items():   # each width against the paper's, where it has one
    per_width = R.PUBLISHED["saving_width"].get((ds, kind))
    parts = []
    for w in (2, 4):
        sim_w = fig15.results["saving"][(ds, kind, w)].mean
        if per_width:   # Fig. 15's own bar for this width
            parts.append(f"width {w}: simulated {100 * sim_w:.1f}%, published {100 * per_width[w]:.1f}% "
                         f"({100 * (sim_w - per_width[w]):+.1f} points)")
        else:           # ShareGPT: the text gives only the range over widths
            out = max(lo - sim_w, sim_w - hi)
            parts.append(f"width {w}: simulated {100 * sim_w:.1f}%, " + (
                "inside the published range" if out <= 0 else
                f"{'above' if sim_w > hi else 'below'} the range by {100 * out:.1f} points"))
    where = "Fig. 15" if per_width else f"text only, {100 * lo:.1f}%-{100 * hi:.1f}% over widths 2-6"
    print(f"{R.DATASET_NAMES[ds]}, {'beam search' if kind == 'beam' else 'parallel sampling'} ({where}):\n    "
          + "\n    ".join(parts))   # one width a line: fits a projector's narrow output
print()
print(fill(fig15.explanation, 84))

# %% [markdown]
# ## 8. The notes' claims, re-judged on the paper's baselines
#
# The notes' rule of thumb: "PagedAttention is a must when the average request is over 2,000
# tokens or over 20 requests run at once". Below: every request waiting (so memory sets the
# batch), paging's batch over the baselines' as the mean length changes (Table 1's budget, a
# 4,096-token context) and as the budget changes (which sets how many run at once). Look for a
# threshold: a length or a concurrency below which the ratio falls towards 1. Then compare
# with section 6, where at a low request rate every system batched the same. And "5 requests
# become 12" is tested on 5 and 12: a budget in which a contiguous baseline runs 5 at once,
# and what paging runs in that same budget.

# %%
import math

import plotly.graph_objects as go

adv = C.paging_advantage(lengths=(100, 500, 2000), budgets=(0.25, 1.0, 4.0), num_requests=200)
ln = [r for r in adv if r["sweep"] == "length"]
cc = [r for r in adv if r["sweep"] == "concurrency"]
ys = [r[k] for r in ln for k in ("vllm/oracle", "vllm/max")]
fig = go.Figure([go.Scatter(x=[r["mean_len"] for r in ln], y=[r["vllm/oracle"] for r in ln], name="vs Orca (Oracle), by length",
                            mode="lines+markers", line_color=plots.SYSTEM_COLORS["orca-oracle"]),   # the systems' colours,
                 go.Scatter(x=[r["mean_len"] for r in ln], y=[r["vllm/max"] for r in ln], name="vs Orca (Max), by length",
                            mode="lines+markers", line_color=plots.SYSTEM_COLORS["orca-max"])])     # as in every figure here
fig.update_layout(title="Paging's batch over the baselines'<br>against the mean request length (simulated)",  # 2 lines:
                  margin=dict(t=90),                                                                  # a projector's width
                  xaxis=dict(title="mean request length (tokens)", type="log", tickvals=plots.log_tickvals([r["mean_len"] for r in ln])),
                  yaxis=dict(title="vLLM batch / baseline batch", type="log", tickvals=plots.log_tickvals([1] + ys)),
                  height=380, template="plotly_white", font=dict(size=viz.theme().font_size))
fig.add_hline(y=1, line_dash="dot", line_color="#404040")
fig.add_vline(x=2000, line_dash="dash", line_color="#969696")
# on a log axis an annotation's position is log10 of the value: 0 is 1x, log10(2000) the notes' 2,000 tokens
fig.add_annotation(x=2, y=0, text="1x: paging gains nothing", showarrow=False, xanchor="left", yanchor="bottom")
fig.add_annotation(x=math.log10(2000), y=1, yref="paper", text="the notes' 2,000 tokens", showarrow=False,
                   xanchor="right", yanchor="top")   # inside the plot: above it sat on the two-line title
fig

# %%
for r in cc:
    print(f"{r['slots']:>6,} slots: Orca (Oracle) runs {r['orca-oracle']:5.1f} at once, vLLM {r['vllm']:6.1f} "
          f"({r['vllm/oracle']:.1f}x)")
scenarios = C.scenario_table(150)
claims = C.notes_claims(N, SEEDS, scenarios=scenarios, advantage=adv, sweep=sweep)
for c in claims:
    print(f"\n[{c.verdict}] {c.claim}\n    {c.evidence}")

# %%
# NBVAL_CHECK_OUTPUT
from textwrap import fill

for c in claims:   # each claim whole, wrapped at a word (a projector's narrow output never cuts one)
    print(fill(c.claim, 76, initial_indent=f"{c.verdict:<14} ", subsequent_indent=" " * 15))

# %% [markdown]
# ## 9. Paged versus radix: the notes' scenario table, simulated
#
# The notes' five scenarios, every request waiting at once: requests **finished per minute**
# (one metric for every bar: the queue served from t=0 to the last request) under the two Orca
# baselines, paging, and paging with a radix tree (lessons 07, 08), one dot each on a log axis.
# Look at where the radix dot rises above the paged one, and at the hit rates printed below.

# %%
names = {"orca-max": "Orca (Max)", "orca-oracle": "Orca (Oracle)", "paged": "paged", "radix": "paged + radix"}
words = {s: C.scenario_name(s) for s in C.SCENARIOS}  # "short_chat" -> "short chat": words, not ids
# dots, not bars: a bar on a log axis starts at an arbitrary floor, so its length overstates the ratios
ticks = {s: w.replace(" ", "<br>") for s, w in words.items()}   # two lines: on a projector they ran together
fig = go.Figure([go.Scatter(name=label, x=[ticks[r["scenario"]] for r in scenarios], y=[r[p] for r in scenarios],
                            mode="markers", marker=dict(color=plots.SYSTEM_COLORS[p], size=14, symbol=sym,
                                                        line=dict(color="#000000", width=1)))
                 for (p, label), sym in zip(names.items(), ("circle", "square", "diamond", "triangle-up"))])
fig.update_layout(scattermode="group", title="Requests finished per minute, the notes' scenarios (simulated)",
                  yaxis=dict(title="requests per minute (log)", type="log",
                             tickvals=plots.log_tickvals([r[p] for r in scenarios for p in names])), height=460,
                  template="plotly_white", font=dict(size=viz.theme().font_size), xaxis=dict(tickangle=0),
                  legend=dict(orientation="h", x=0, yref="container", y=0, yanchor="bottom"),  # under the ticks
                  margin=dict(b=140 if viz.theme().high_contrast else 100))
fig

# %%
for r in scenarios:
    gain = r["radix"] / r["paged"]
    radix = ("no shared prefixes: radix runs as paging does" if r["radix_hit"] == 0 else
             f"radix finishes {gain:.2f}x as many per minute as paging alone")
    print(f"{words[r['scenario']]:<17} paged {r['paged_vs_max']:4.1f}x Orca (Max), {r['paged_vs_oracle']:.1f}x Orca (Oracle); "
          f"radix hit rate {r['radix_hit']:.0%}; {radix}")
worse = [r["scenario"] for r in scenarios if r["radix"] < 0.98 * r["paged"]]
print("radix slower than paging alone in: " + (", ".join(worse) if worse else "no scenario (within 2%)"))
shared = [r for r in scenarios if r["radix_hit"] > 0]
print(f"prefix reuse changes something only where prompts share prefixes: "
      f"{', '.join(words[r['scenario']] for r in shared) or 'nowhere'}; paging beats both Orca baselines in "
      f"{sum(r['paged_vs_oracle'] > 1 for r in scenarios)} of {len(scenarios)} scenarios")

# %% [markdown]
# The series in one table:
#
# | | PagedAttention (vLLM) | RadixAttention (SGLang) |
# |---|---|---|
# | decides | **where** KV lives: fixed blocks, a block table per sequence | **which** cached KV a request reuses: a radix tree of prefixes |
# | fixes | reservation and fragmentation waste (lessons 03, 04) | recomputing shared prefixes (lesson 07) |
# | helps | every scenario: more requests fit at once | only where prompts share prefixes: system prompts, few-shot, chat history |
# | costs | one table lookup per token in the kernel (lesson 05) | a tree walk per request; eviction and locking (lesson 08) |
# | shares | within a request (fork, copy-on-write, lesson 06) and across requests: Automatic Prefix Caching finds a shared prefix by a hash of each full block and all before it | across requests: a shared prefix found by walking a tree of prefixes token by token |
#
# Both find a prefix shared across requests automatically: the vLLM paper already promises
# "sharing of KV cache within and across requests", and the appendix's section 5 runs a block-hash
# cache (vLLM's way) beside the radix tree on the same prompts, with close hit rates. What
# RadixAttention adds is the tree: a match may end inside a block, eviction takes the least
# recently used leaves of the tree, and a scheduler can order the queue by the longest match
# (lesson 08).
# %% [markdown]
# ## 10. Exercises
#
# ### Exercise 1: what does Orca reserve?
#
# Implement `orca_reservation(prompt_len, output_len, mode, block_size=16, max_len=2048)`: the
# number of **blocks** in the buddy run that the paper's Orca baseline reserves for one request.
# The contract:
#
# - `mode` is `"max"`, `"pow2"` or `"oracle"`, the three Orcas, each with its own guess of the
#   output's length; any other mode raises `ValueError`;
# - the run holds the whole reservation (the prompt and the guess), and no reservation asks for
#   more than `max_len` tokens (the run the allocator hands out for it may be larger);
# - the run is one that a buddy allocator can hand out.
#
# The checker compares with the simulator's `OrcaPolicy`, also at block sizes and `max_len` other
# than the defaults.
#
# Before you code, predict on paper, for a prompt of 100 tokens and blocks of 16: at which of the
# output lengths 60, 130 and 256 do Orca (Pow2) and Orca (Oracle) get the **same** run, and at
# which is Pow2's run twice Oracle's? Then check your predictions with your function.

# %% tags=["exercise-stub"]
def orca_reservation(prompt_len, output_len, mode, block_size=16, max_len=2048):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.orca_reservation(orca_reservation)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# What does each Orca know about the request before it runs: which of them reads `output_len`,
# and which ignores it? And what is the most any reservation may hold?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Two roundings happen, in two different units, and the order of the cap and the roundings
# matters. Check your function against section 2's printed example (161 + 338 tokens), then at
# sizes that sit exactly on a boundary: what should a quantity that already fits exactly become?
# </details>

# %% [markdown]
# ### Exercise 2: how many requests fit at once?
#
# Implement `fit_requests(capacity, block_size, max_len, lengths)` returning the tuple
# `(reserve_max, paged)` of two ints: how many of the requests (token lengths `lengths`) are in
# memory at once, admitted **in the order given** by a first-come-first-served queue that waits
# at the first request it cannot place, when
#
# - **reserve-max**: each request reserves `max_len` contiguous slots of a `capacity`-slot arena,
#   whatever its length;
# - **paged**: the same arena is cut into whole blocks of `block_size` slots, and each request
#   holds just enough of them for its tokens (a request of 0 tokens holds none).
#
# A request longer than `max_len` can never be served: if any length is over `max_len`, raise
# `ValueError` before admitting anything, wherever that request stands in the list. The
# caller's `lengths` is left unchanged. The checker compares with
# `kvlab.ContiguousArena(policy="max")` and `kvlab.BlockManager` admitting the same requests.
#
# Before you code, predict on paper: capacity 64, blocks of 4, `max_len` 32, lengths
# `[13, 16, 9, 16, 5, 1]`. What is `(reserve_max, paged)`, and which request stops the paged
# queue? A scheduler that skipped that request and admitted the one behind it would run one more
# at once: why does a first-come-first-served server (vLLM's scheduler is one) not do that?
# (Think of the request that was skipped, and of a stream of short ones behind it.) The checker
# runs your prediction's case too.

# %% tags=["exercise-stub"]
def fit_requests(capacity, block_size, max_len, lengths):
    raise NotImplementedError("your code here")


# %%
check.fit_requests(fit_requests)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Reserve-max: what does one request cost there, whatever its length? Could the answer ever be
# more than the number of requests?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Paged memory has no holes to fit into: any free block serves any request, so where the free
# blocks lie never matters, only how many there are.
# </details>

# %% [markdown]
# ### Exercise 3: the best possible hit rate (a design question)
#
# Lesson 08's cache-aware scheduling (section 5) and this lesson's appendix compared the orders
# with a "best possible" hit rate. Implement `optimal_hit_rate(prompts)`: the fraction of all
# prompt tokens (lists of token ids) that a prefix cache could at best serve from cache, with
# unlimited memory and the prompts in the best order. Hits are counted per token (the best cache
# has pages of one token, not whole blocks), every prompt token counts, the last one too (a real
# server recomputes a fully cached prompt's last token for its logits: leave that out here), and
# the rate is over all the prompts' tokens together. Return a fraction (0.0 to 1.0), and 0.0
# when there are no tokens. The checker compares with `kvlab.sim.optimal_hit_rate`.
#
# Before you code, predict on paper: a token's KV depends on every token before it. For the
# prompts `[1, 2, 3]`, `[1, 2, 4]` and `[1, 2]`, which tokens must a cache compute at least once,
# whatever it keeps? Does the order of the three prompts change how many? And for `[1, 2, 3]` and
# `[3, 2, 1]`? Write your counts down, then design the function.

# %% tags=["exercise-stub"]
def optimal_hit_rate(prompts):
    raise NotImplementedError("your code here")


# %%
check.optimal_hit_rate(optimal_hit_rate)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Two tokens with the same id at the same position need not have the same KV. What must also be
# the same for one to reuse the other's?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Write down, for one token, exactly what decides its KV. Two tokens with the same answer need
# computing only once, in any order: how many different answers do the prompts hold?
# </details>

# %% [markdown]
# ## Summary
#
# - The simulator ran the paper's four systems as the paper built them: Orca's three length
#   estimates on a buddy allocator, vLLM's paging with its 2023 scheduler, on Table 1's budget.
# - Fig. 13 and Fig. 2 came from the same Poisson runs, three seeds each, with 95% intervals; the
#   batch-against-rate sweep showed which systems were memory-bound at the paper's rate; the
#   appendix (`09_at_scale_appendix`) shows which assumption (length shape, step time) moves
#   which bar, Alpaca's Fig. 13b and SGLang's hit rates.
# - The notes' claims were judged against those runs. The measured headlines of this run:

# %%
v, o, m = (fig13.rows[i].interval for i in (3, 2, 0))
runs0 = fig2.results["runs"][0]
print(f"vLLM batches {v.mean / o.mean:.1f}x Orca (Oracle) and {v.mean / m.mean:.1f}x Orca (Max) at 2 req/s "
      f"(published 2.2x and 4.3x); vLLM keeps {fig2.rows[3].simulated:.1%} of the budget in token states "
      f"(published 96.3%); {sum(r.meets for r in fig13.rows + fig2.rows)} of {len(fig13.rows + fig2.rows)} "
      f"Fig. 13 and Fig. 2 numbers within 15% (outside: "
      f"{', '.join(r.label.split(' = ')[0] + ' ' + k for k, rs in (('Fig. 13', fig13.rows), ('Fig. 2', fig2.rows)) for r in rs if r.meets is False) or 'none'}).")
print(f"the buddy's rounding holds {runs0['orca-pow2'].breakdown(False)['rounding']:.0%} (Pow2) and "
      f"{runs0['orca-oracle'].breakdown(False)['rounding']:.0%} (Oracle) of the budget; without it (first fit) Orca "
      f"(Oracle) batches {ablation['firstfit-oracle'].mean_batch / first['orca-oracle'].mean_batch - 1:+.0%} more.")
print("the notes' claims:", "; ".join(f"{c.short}: {c.verdict}" for c in claims))
pub = {p: R.PUBLISHED["batch_sharegpt"][p] for p in R.PAPER_POLICIES}
print(f"\nThe notes' three maxims, judged on this run:\n- caching trades space for time: each cached token costs "
      f"{spec.bytes_per_token:,} bytes of HBM and saves recomputing it; the radix tree finished "
      f"{max(r['radix'] / r['paged'] for r in scenarios):.1f}x as many requests per minute where prompts share prefixes.")
print(f"- fragmentation is the enemy of dynamic allocation: Orca (Oracle) kept only {fig2.rows[2].simulated:.0%} of its "
      f"budget in token states (rounding {runs0['orca-oracle'].breakdown(False)['rounding']:.0%}), paging "
      f"{fig2.rows[3].simulated:.0%}.")
beam = fig15.results["saving"]
best = max(beam.items(), key=lambda kv: kv[1].mean)
above = "; above the paper's top, see section 7" if best[1].mean > R.PUBLISHED["saving"][best[0][:2]][1] else ""
print(f"- dedup is a free dividend of batching: sharing saved up to {best[1].mean:.0%} of the memory "
      f"({R.DATASET_NAMES[best[0][0]]}, {'beam search' if best[0][1] == 'beam' else 'parallel sampling'}, width "
      f"{best[0][2]}{above}; beam ancestry is modelled, so this one is qualitative only), "
      "at no cost in tokens (lesson 06).")
print("PagedAttention decides where KV lives; RadixAttention decides which KV is reused; the second is built on the first.")
print("For bigger runs: python -m kvlab simulate --help and bench/bench_sim.py.")
