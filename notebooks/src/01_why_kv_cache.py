# Lesson 01: why a KV cache: naive recomputation versus caching, on the bundled model.
# Source of truth for notebooks/01_why_kv_cache.ipynb; build with: .venv/bin/python scripts/build_notebooks.py 01

# %% [markdown]
# # 01 · Why a KV cache?
#
# **What you will learn**
#
# - How a decoder-only language model generates text one token at a time, and why each new token
#   needs the **keys and values** of every token before it.
# - Two ways to get them: **recompute** the whole sequence at every step, or **cache** each
#   token's K and V once (the [KV cache](glossary.md)) and compute only the new token; a stepper
#   walks through both, one decode step at a time: which positions' K and V each step computes,
#   writes and reads.
# - That both give **identical tokens**, on kvlab's bundled model (a 4-layer Llama-style model
#   with grouped-query attention, trained on Python documentation) and on a real chat LLM,
#   SmolLM2-135M-Instruct, while the work per step is O(n) against O(1) in the projections, so
#   O(n²) against O(n) over a whole answer.
# - Time and FLOPs per step, **measured** and **counted** on this CPU, and what this machine can
#   and cannot show of the difference.
#
# The cache is what the rest of the series manages: how big it is (02), where it lives (03-05),
# and how to share and reuse it (06-08).

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. A tiny worked example: what one step needs
#
# At every layer, a token's query `q` is compared with the keys `K` of all tokens up to and
# including itself, and the softmax weights mix their values `V`:
# `out = softmax(q·Kᵀ / √d) · V`. **Positions count from 0** in this lesson, as in vLLM and
# SGLang: a prompt of *P* tokens fills positions 0 to *P* − 1, and the token at position *p*
# attends to the *p* + 1 tokens at positions 0 to *p*, itself included. (Steps and tokens are
# *counted* from 1: step 1, 6 tokens.) In a decoder, the K and V at position *p* depend only on the
# tokens at positions 0 to *p* (causal attention), so **they never change once computed**.
# Recomputing them at every step repeats the same arithmetic.
#
# So there are two ways to decode. **Without a cache**, step *t* runs the whole sequence again and
# recomputes every token's K and V. **With a cache**, step *t* computes the K and V of the newest
# token only, writes them as one more entry of the cache, and reads every earlier entry back. Load
# the bundled model and watch both, one step at a time:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.compute.loader import load_bundled

model, tok = load_bundled()
cfg = model.config
print(f"bundled model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} query heads, "
      f"{cfg.num_key_value_heads} KV heads of {cfg.head_dim}, vocabulary {cfg.vocab_size}")
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# ### Step through it
#
# The stepper below decodes 7 tokens after the 3-token prompt "The socket module" (positions 0
# to 2; greedy, run now on the bundled model). Each column is a position, 0 at the left, its token
# under it, and each cell holds the K and V of one position. The figure's **top row** (no cache)
# is what the step without a cache computes: red, every position's K and V recomputed. Its
# **second row** is the KV cache: light-blue cells were written at earlier steps and are only read
# back; the one blue cell is the only K and V the step computes (step 1 is the prefill: it writes
# the whole prompt, positions 0 to 2). The token a step produces is marked "new" under the next
# column. The number in each cell is one entry of that position's K (layer 0): the number the
# naive step recomputes is the one the cache already held, at every step. The bars add up the
# FLOPs of the steps so far. Press **next ▶** and watch the red row grow while the blue cell moves
# along by one:

# %%
from kvlab.compute.decode_trace import trace_decode

decode_steps = trace_decode(model, tok.encode("The socket module"), 7)   # naive and cached, step by step
diff = max(s.max_diff for s in decode_steps)
print(f"recomputed K and V = cached ones, at every step, to {diff:.0e} (rounding)")
print(f"after {len(decode_steps)} steps: {decode_steps[-1].naive_total / decode_steps[-1].cached_total:.1f}x "
      "the FLOPs without the cache")

# %%
from kvlab.viz.decode_view import decode_stepper

decode_stepper(decode_steps, tok)

# %% [markdown]
# What the stepper showed: the cached step's work is one cell, whatever the position, while the
# naive step's grows by a cell every step; and the K and V it recomputes are the ones the cache
# holds (the same numbers). Now count it for the bundled model. `model.flops_per_token(c)` is the
# number of FLOPs (2 per multiply-add, matrix products only) to run one token through the model
# when it attends to `c` tokens: a fixed part (projections, MLP, output layer) plus an attention
# part that grows with `c`.

# %%
# NBVAL_CHECK_OUTPUT
for c in [1, 10, 100]:
    print(f"flops_per_token({c:>3}) = {model.flops_per_token(c):,}")

# %% [markdown]
# Step *t* after a prompt of *P* tokens (steps counted from 1, as in the stepper: step 1 is the
# prefill and produces the first new token, at position *P*; step *t* produces the *t*-th, at
# position *P* + *t* − 1), when the sequence holds `P + t - 1` tokens, positions 0 to `P + t - 2`:
#
# - **without a cache**, run all `P + t - 1` tokens again, the one at position *p* attending to
#   *p* + 1 tokens: `Σ_{p=0}^{P+t-2} flops_per_token(p + 1)`;
# - **with a cache**, run only the newest token, at position `P + t - 2`:
#   `flops_per_token(P + t - 1)` (for `t ≥ 2`, after the one-time prefill of the prompt at step 1).
#
# For a 10-token prompt (counted):

# %%
# NBVAL_CHECK_OUTPUT
P = 10
ratios = {}
print(f"{'step':>4} {'tokens run (naive)':>19} {'FLOPs naive':>14} {'FLOPs cached':>13} {'ratio':>6}")
for t in [2, 3, 6, 11, 51, 101]:
    naive = sum(model.flops_per_token(i) for i in range(1, P + t))
    cached = model.flops_per_token(P + t - 1)
    ratios[t] = naive / cached
    print(f"{t:>4} {P + t - 1:>19} {naive:>14,} {cached:>13,} {ratios[t]:>6.1f}")
print(f"from step 11 to step 101 the sequence grows {(P + 100) / (P + 10):.1f}x and the ratio {ratios[101] / ratios[11]:.1f}x: "
      f"at step t the naive path does about P + t - 1 times the cached work")

# %% [markdown]
# ## 2. The real run: three decode paths, identical tokens
#
# `kvlab.compute.generate.generate` runs the bundled model three ways (greedy decoding):
#
# - `"naive"`: no cache; every step feeds the whole sequence through the model again;
# - `"contiguous"`: a K/V tensor per layer, preallocated to the maximum length;
# - `"paged"`: K/V in a paged pool, blocks handed out by kvlab's `BlockManager`, attention read
#   through the block table (here with the torch reference of the paged kernels; lesson 05 runs
#   the Triton kernels).

# %%
import torch

from kvlab.compute.generate import generate

torch.set_num_threads(1)   # a model this small runs times on one thread (no thread hand-offs)
torch.manual_seed(0)
prompt = tok.encode("The socket module provides")
new_tokens = 96
runs = {s: generate(model, prompt, new_tokens, strategy=s, keep=s == "paged") for s in ["naive", "contiguous", "paged"]}
print(f"prompt: {len(prompt)} tokens; generated {new_tokens} tokens per path")
print("identical tokens, naive == contiguous == paged:",
      runs["naive"].tokens == runs["contiguous"].tokens == runs["paged"].tokens)
max_diff = max(float((runs[s].logits - runs["naive"].logits).abs().max()) for s in ["contiguous", "paged"])
print(f"largest logit difference from naive: {max_diff:.1e}", "(float rounding)" if max_diff < 1e-3 else "(TOO LARGE)")
print("text:", repr(runs["paged"].text(tok)[:120]))

# %% [markdown]
# Same tokens, same logits up to float rounding: the cache is an optimisation, not an
# approximation.
#
# ### The same on a real LLM: SmolLM2-135M-Instruct
#
# The bundled model is tiny. SmolLM2-135M-Instruct is a real chat model (30 layers, 9 query
# heads sharing 3 KV heads of 64, 135 million parameters), read from its GGUF file (installed by
# the set-up; nothing is downloaded). Ask it the notes' first customer-service question through
# its chat template and let it answer, without a cache and with one (greedy; measured on this CPU,
# one thread, so a busy machine's other jobs disturb it least). Loading it takes a few seconds
# (the weights are dequantized once per kernel):

# %%
import statistics
import time

import plotly.graph_objects as go

import kvlab.viz as viz
from kvlab.compute.loader import load_pretrained

th = viz.theme()  # the fonts and width of the current mode (classroom mode: larger, the output's width)
real, real_tok = load_pretrained("smollm2")           # dequantized once per kernel (cached in memory)
rc = real.config
chat = real_tok.apply_chat_template([{"role": "user", "content": "How do I apply for a refund?"}],
                                    add_generation_prompt=True)
print(f"SmolLM2-135M: {rc.num_hidden_layers} layers, {rc.num_attention_heads} query heads, "
      f"{rc.num_key_value_heads} KV heads of {rc.head_dim}; the chat prompt is {len(chat)} tokens")

# %% [markdown]
# Now the two runs, three times each (a step of tens to hundreds of ms moves by tens of ms from
# run to run on a shared machine; the figure below keeps the median of the three at each
# position, which one disturbed run cannot move).
# `real_new = 5` new tokens keep this cell short; it prints how long it took. Try 20: each naive
# step reruns the whole sequence, so the naive runs take a growing share of the time:

# %%
real_new, real_repeats = 5, 3
started = time.perf_counter()
passes = [{s: generate(real, chat, real_new, strategy=s) for s in ("naive", "contiguous")} for _ in range(real_repeats)]
real_runs = passes[0]
print("identical tokens, naive == cached:", real_runs["naive"].tokens == real_runs["contiguous"].tokens)
print("reply so far:", repr(real_runs["contiguous"].text(real_tok)))
print(f"{real_repeats} x 2 runs of {real_new} tokens took {time.perf_counter() - started:.1f} s here (measured)")

# %% [markdown]
# Each step's time against the position of the token it produces (from 0: a prompt of *P* tokens
# fills positions 0 to *P* − 1 and the prefill, step 1, produces position *P*; the prefill is left
# out, so the first point is position *P* + 1). Measured: the open circles are the three runs, the
# line their median at each position, so one run slowed by the machine's other programs does not
# move it. The naive step reruns all the tokens so far, so it should cost more than the cached step;
# the cell under the figure prints at how many positions it did in this run. By its FLOPs each step also grows a little
# with the position; that cell sets how much each line rose beside how much its counted FLOPs
# grew, and says, from these numbers, which rise is the model (the FLOPs explain it) and which
# moves are the machine (they do not):

# %%
times = {s: [statistics.median(p[s].step_times[i] for p in passes) for i in range(real_new)] for s in real_runs}
rn, rcache = real_runs["naive"], real_runs["contiguous"]
pos = [len(chat) + t for t in range(1, len(rn.step_times))]
slowest = max(t for p in passes for s in p for t in p[s].step_times[1:])
fig = go.Figure()
for s, name, color in (("naive", "naive recomputation", "#d62728"), ("contiguous", "KV cache", "#1f77b4")):
    fig.add_trace(go.Scatter(x=pos, y=[1e3 * t for t in times[s][1:]], name=f"{name} (median)", mode="lines+markers",
                             line_color=color))
    fig.add_trace(go.Scatter(x=pos * real_repeats, y=[1e3 * t for p in passes for t in p[s].step_times[1:]],
                             name=f"{name}: each run", mode="markers", opacity=0.7,      # the spread: the noise
                             marker=dict(color=color, symbol="circle-open", size=10)))
fig.update_layout(title=dict(text=f"SmolLM2-135M: each decode step (measured: {real_repeats} runs and their median)",
                             font=dict(size=th.title_size)),
                  xaxis=dict(title="position of the token being produced (from 0)", tickvals=pos,
                             tickformat="d"),
                  yaxis=dict(title="ms per step", range=[0, 1.12e3 * slowest]),   # room above the highest circle
                  height=360 if not th.high_contrast else 440, font=dict(size=th.font_size),
                  width=None if th.autosize else 760, autosize=th.autosize, legend=dict(orientation="h", y=-0.3, x=0))
fig

# %%
from textwrap import fill

from kvlab.lessons.step_times import along_the_lines, growth_verdict, why_time_grew_less


def say(text):
    """Print a sentence wrapped at 76 characters (a projector's narrow output never cuts a word)."""
    print(fill(text, 76, subsequent_indent="    "))


slower = sum(n > c for n, c in zip(times["naive"][1:], times["contiguous"][1:]))
half = len(pos) // 2
early = {k: statistics.median(times[s][1:half + 1]) for k, s in (("naive", "naive"), ("cached", "contiguous"))}
late = {k: statistics.median(times[s][half + 1:]) for k, s in (("naive", "naive"), ("cached", "contiguous"))}
ratio = late["naive"] / late["cached"]
say(f"verdict (measured): the cache was faster at {slower} of {len(pos)} positions, {ratio:.1f}x later on")
if slower < len(pos):
    say("  where it was not, the machine's other programs slowed a cached step")
runs_apart = max(max(p[s].step_times[i] for p in passes) / min(p[s].step_times[i] for p in passes)
                 for s in real_runs for i in range(1, real_new))               # the same step, run against run
# which moves along each line its counted FLOPs explain (the model) and which not (the machine)
lines = along_the_lines({s: times[s][1:] for s in real_runs},
                        {s: real_runs[s].step_flops[1:] for s in real_runs}, runs_apart, names={"contiguous": "cached"})
for sentence in lines:
    say("  along its line: " + sentence + ".")
say(f"  the signal is the gap between the lines (naive above cached at all {len(pos)} positions)."
    if slower == len(pos) else "  here even the gap between the lines is partly lost in the machine's noise.")
say(f"  ms per step (measured; the median of {real_repeats} runs, then the median over the positions), positions "
    f"{pos[0]}-{pos[half - 1]} | {pos[half]}-{pos[-1]}: naive {1e3 * early['naive']:.0f} | {1e3 * late['naive']:.0f}, "
    f"cached {1e3 * early['cached']:.0f} | {1e3 * late['cached']:.0f}")
flop_x = rn.step_flops[-1] / rcache.step_flops[-1]
say(f"  counted FLOPs per step at position {pos[-1]}: naive {rn.step_flops[-1]:,}, cached {rcache.step_flops[-1]:,} "
    f"({flop_x:.0f}x)")
rate = {k: fl / t / 1e9 for k, fl, t in (("naive", rn.step_flops[-1], times["naive"][-1]),
                                          ("cached", rcache.step_flops[-1], times["contiguous"][-1]))}
say(f"  why: {flop_x:.0f}x the FLOPs but only {ratio:.1f}x the time. The naive step runs its {pos[-1]} tokens "
    f"through each weight matrix together, one matrix product, at {rate['naive']:.1f} GFLOP/s here (measured); "
    f"the cached step multiplies one token's vector by the same matrices and does {rate['cached']:.1f} GFLOP/s: "
    "it spends its time reading the 135 million weights, not on arithmetic. The saving in time is real and grows "
    "with the context (section 3), but it is not the FLOPs ratio.")

# %% [markdown]
# ## 3. Work and time per step, as the context grows
#
# On the run above the context never passes 100 tokens. A step of a model this small also has
# a fixed cost that does not depend on the context (Python, the framework, the output layer),
# so the difference shows best at longer contexts. Time single steps there: for each context
# length `L` (a prompt of `L` tokens of Python source: the `statistics` module), the **naive**
# step is one forward pass over all `L` tokens, the **cached** step one token attending to `L`
# cached ones.
# Each time is the **minimum** of nine steps (three steps, in each of three passes over all the
# contexts): the machine's other programs can only make a step slower, never faster, so the
# minimum is the step's own cost, and a busy spell during one pass does not move it. The FLOPs
# beside it are counted from the model's shapes; the last column divides the naive step's counted
# FLOPs by its measured time: the rate this CPU ran it at.

# %%
import inspect
import statistics

text_ids = tok.encode(inspect.getsource(statistics))          # a long real text to cut prompts from
contexts = [32, 64, 128, 256, 512, 1024]           # doubling: evenly spaced on the log axis
sweep = []
REPEATS = 3                                   # three passes over all the contexts; the fastest step counts
timed = {L: {"naive": [], "cached": []} for L in contexts}
for _ in range(REPEATS):                      # passes, not back-to-back repeats: a busy spell hits one pass
    for L in contexts:
        timed[L]["naive"].append(generate(model, text_ids[:L], 3, strategy="naive"))         # 3 steps over L .. L+2 tokens
        timed[L]["cached"].append(generate(model, text_ids[:L], 4, strategy="contiguous"))   # prefill, then 3 one-token steps
for L in contexts:
    naive, cached = timed[L]["naive"], timed[L]["cached"]
    sweep.append(dict(L=L,
                      naive_ms=1e3 * min(t for r in naive for t in r.step_times),
                      naive_median_ms=1e3 * statistics.median(t for r in naive for t in r.step_times),
                      cached_ms=1e3 * min(t for r in cached for t in r.step_times[1:]),
                      naive_flops=naive[0].step_flops[0], cached_flops=cached[0].step_flops[1]))
    sweep[-1]["gflops"] = sweep[-1]["naive_flops"] / sweep[-1]["naive_ms"] / 1e6   # counted / measured
print("ms per step: measured, the minimum of 9 steps | FLOPs per step: counted")
print(f"{'context L':>9} {'naive ms':>9} {'cached ms':>10} {'naive FLOPs':>14} {'cached FLOPs':>13} {'GFLOP/s':>8}")
for r in sweep:
    print(f"{r['L']:>9} {r['naive_ms']:>9.2f} {r['cached_ms']:>10.2f} {r['naive_flops']:>14,} {r['cached_flops']:>13,} "
          f"{r['gflops']:>8.1f}")

# %%
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import kvlab.viz as viz

xs = [r["L"] for r in sweep]
fig = make_subplots(rows=1, cols=2, subplot_titles=("FLOPs per step (counted)", "time per step (measured, minimum)"))
for key, name, color in [("naive", "naive recomputation", "#d62728"), ("cached", "KV cache", "#1f77b4")]:
    fig.add_trace(go.Scatter(x=xs, y=[r[f"{key}_flops"] for r in sweep], name=name, line_color=color,
                             mode="lines+markers", legendgroup=key), 1, 1)
    fig.add_trace(go.Scatter(x=xs, y=[r[f"{key}_ms"] for r in sweep], name=name, line_color=color, mode="lines+markers",
                             legendgroup=key, showlegend=False), 1, 2)
fig.update_xaxes(title_text="context length L (tokens), log scale", type="log", tickvals=xs)
fig.update_yaxes(title_text="FLOPs, log scale", type="log", exponentformat="SI", dtick=1, row=1, col=1)  # the cached line is ~1,000x lower
# time on a log axis too: on a linear one the cached line lay flat under the naive one, its rise unseen
all_ms = [r[f"{k}_ms"] for r in sweep for k in ("naive", "cached")]
ms_ticks = [m * 10 ** e for e in range(-2, 5) for m in (1, 2, 5) if min(all_ms) / 2 <= m * 10 ** e <= max(all_ms) * 2]
fig.update_yaxes(title_text="ms per step, log scale", type="log", tickvals=ms_ticks,   # 1-2-5 ticks at full size
                 ticktext=[f"{t:g}" for t in ms_ticks], row=1, col=2)
th = viz.theme()  # the fonts and width of the current mode (classroom mode: larger, the output's width)
fig.update_layout(height=420 if not th.high_contrast else 500, font=dict(size=th.font_size),
                  title=dict(text="One decode step at context L, on this CPU (counted | measured)", font=dict(size=th.title_size)),
                  width=None if th.autosize else 860, autosize=th.autosize, legend=dict(orientation="h", y=-0.3, x=0))
fig.update_annotations(font_size=th.font_size + 1)  # the subplot titles
fig

# %% [markdown]
# Both panels have log axes, so equal ratios are equal heights: the cached curve sits far below
# the naive one, and how much each rises, counted and measured, is printed below from the same
# points. What the measurements say is printed from them, so it holds on whatever machine runs this
# cell. A straight line `time ≈ fixed + slope × L` is fitted to each path's points (computed, not drawn): the
# fixed part is what a step costs whatever the context (Python, the framework, the output
# layer), the slope what each token of context adds. One stray point (a step timed while the
# machine was busy) must not decide the verdict, so the line is the **median** line: its slope
# is the median of the slopes between every two points, which one point cannot pull far; the
# growth is read the same way on the log-log axes, from all six points, not from the two ends.

# %%
import math


def fit(xs, ys):
    """The median line through the points (Theil-Sen): (intercept, slope); one outlier barely moves it."""
    slope = statistics.median((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)))
    return statistics.median(y - slope * x for x, y in zip(xs, ys)), slope


first, last = sweep[0], sweep[-1]
span = last["L"] / first["L"]
log_x = [math.log(x) for x in xs]
grow_t = {k: span ** fit(log_x, [math.log(r[f"{k}_ms"]) for r in sweep])[1] for k in ("naive", "cached")}
ends_t = {k: last[f"{k}_ms"] / first[f"{k}_ms"] for k in ("naive", "cached")}
grow_f = {k: last[f"{k}_flops"] / first[f"{k}_flops"] for k in ("naive", "cached")}
(n0, n1), (c0, c1) = fit(xs, [r["naive_ms"] for r in sweep]), fit(xs, [r["cached_ms"] for r in sweep])
dips = [(a, b) for a, b in zip(sweep, sweep[1:]) if b["naive_ms"] < 0.95 * a["naive_ms"]]  # twice the FLOPs, less time
said = growth_verdict(span, grow_t, grow_f)   # the two paths timed side by side, in the same passes
grows = said["grows"]
say(said["verdict"])
say(f"  the naive step's time grew {said['apart']:.0f}x more with the context than the cached step's"
    if grows else "  the measured times do NOT show the counted growth")
print(f"from L = {first['L']} to {last['L']} ({span:.0f}x the context):")
say(f"  counted FLOPs per step: naive x{grow_f['naive']:.1f}, cached x{grow_f['cached']:.2f}")
say(f"  measured time per step (median line through all {len(sweep)} points): naive x{grow_t['naive']:.1f}, "
    f"cached x{grow_t['cached']:.2f} (the two ends alone: x{ends_t['naive']:.1f}, x{ends_t['cached']:.2f})")
if dips:
    a, b = dips[0]
    say(f"  this run was noisy: the naive step measured {a['naive_ms']:.2f} ms at L = {a['L']} but {b['naive_ms']:.2f} ms "
        f"at L = {b['L']}, twice the context and twice the FLOPs ({len(dips)} such dip(s)); the machine was busy "
        "during some steps. The lines and the verdict above lean on all the points, so one such point moves them "
        "little; run the cell again on a quieter machine to see it go.")
say(f"  median lines: naive {n0:.1f} ms + {1e3 * n1:.1f} ms per 1,000 tokens; "
    f"cached {c0:.1f} ms + {1e3 * c1:.1f} ms per 1,000 tokens")
if min(n0, c0) < 0:
    say("  (a fixed part below zero is the line, not the machine: the measured step grows faster than a straight "
        "line in L, so the straight line through it starts below zero)")
if grows:
    say(said["margin"])
    if said["band"] == "less":   # the table says why: a fixed per-step cost + a part that follows the FLOPs
        for sentence in why_time_grew_less(sweep):
            say(sentence)
    elif said["band"] == "more":   # no fixed cost makes time outgrow the FLOPs: the rate fell, at the two ends
        say(f"  The naive step ran at {first['gflops']:.1f} GFLOP/s at L = {first['L']} and "
            f"{last['gflops']:.1f} at L = {last['L']} (the table's last column): at the two ends, that rate "
            f"accounts for x{grow_f['naive'] * first['gflops'] / last['gflops']:.0f} of the time's growth; "
            "the rest of the trend is the machine.")
    say("  The cached step is not free of the context: its attention still reads all L cached tokens; it is only "
        "the projections and the MLP that it runs for one token instead of L.")
else:
    say(f"  so: on this machine the measured times do NOT show the counted growth: a step's fixed cost "
        f"({n0:.1f} ms) is larger than what {last['L']} tokens of context add ({1e3 * n1 * last['L'] / 1e3:.1f} ms naive). "
        "The FLOPs are still counted right; a bigger model, or a GPU, makes the growing part dominate.")


def step_ms(line, key, L):
    """A step's time at context L: the median line from the shortest timed context up; below it, never
    the line's own slope (it says nothing there) but its value at the shortest timed context (or the
    time measured there, if the line's value is not positive)."""
    at_first = line[0] + line[1] * first["L"]
    if L < first["L"]:
        return at_first if at_first > 0 else first[f"{key}_ms"]
    return line[0] + line[1] * L


n = 1000
naive_s = sum(step_ms((n0, n1), "naive", P + t) for t in range(n)) / 1e3
cached_s = sum(step_ms((c0, c1), "cached", P + t) for t in range(n)) / 1e3
say(f"an answer of {n:,} tokens after a {P}-token prompt (estimated: the median lines from L = {first['L']} up, "
    f"their {first['L']}-token values below it): naive {naive_s:.1f} s, cached {cached_s:.1f} s "
    f"({naive_s / cached_s:.0f}x)")

# %% [markdown]
# ## 4. O(n²) versus O(n)
#
# Summing the counted FLOPs over answers of growing length (prompt 10):

# %%
# NBVAL_CHECK_OUTPUT
f = model.flops_per_token
totals = []
print(f"{'answer length n':>15} {'naive total':>18} {'cached total':>16} {'ratio':>7}")
for n in [16, 64, 256, 1024]:
    naive = sum(sum(f(i) for i in range(1, P + t + 1)) for t in range(n))
    cached = sum(f(i) for i in range(1, P + 1)) + sum(f(P + t) for t in range(1, n))
    totals.append((n, naive, cached))
    print(f"{n:>15} {naive:>18,} {cached:>16,} {naive / cached:>7.1f}")
(n_a, na, ca), (n_b, nb, cb) = totals[-2], totals[-1]
k = n_b // n_a
fixed = f(0)                                       # FLOPs a token costs whatever it attends to (projections, MLP, output)
run_cached = lambda n: P + n - 1                   # tokens the cached path runs: the prompt once, then one a step
run_naive = lambda n: sum(P + t for t in range(n))  # the naive path reruns the whole sequence every step
share = run_cached(n_b) * fixed / cb
print(f"{k}x the answer ({n_a} -> {n_b} tokens): naive total x{nb / na:.1f}, cached total x{cb / ca:.1f}.")
print(f"  each total = a fixed part ({fixed:,} FLOPs per token run) + attention ({f(1) - fixed:,} per token attended to)")
print(f"  cached: fixed part x{run_cached(n_b) / run_cached(n_a):.1f} (one token a step: O(n)), {share:.0%} of the "
      f"total at n = {n_b};")
print(f"          attention x{(cb - run_cached(n_b) * fixed) / (ca - run_cached(n_a) * fixed):.1f} (every step still "
      f"reads all cached tokens: O(n²)), so the total grows x{cb / ca:.1f}, more than {k}x")
print(f"  naive:  fixed part x{run_naive(n_b) / run_naive(n_a):.1f} (the whole sequence every step: O(n²)), "
      f"and its attention grows faster still (O(n³))")

# %% [markdown]
# ### Move the context length yourself
#
# Drag **context length** (from 16 tokens, doubling, up to the chosen model's context window: the
# slider and the curves stop there) and watch both costs: the red curve
# (no cache: the step reruns every token) climbs steeply with the context, the blue one (one
# token with the cache) climbs too, far more slowly (its attention still reads every cached
# token); the widget's first line gives both factors over the chosen model's whole range. Both
# axes are logarithmic: each grid line is 10 times the one below, so the cached line stays
# visible even where it is thousands of times lower. The FLOPs are counted from the model's
# shapes. The milliseconds are section 3's measured times at the lengths it timed (its table);
# elsewhere an estimate from the median lines fitted there, and none below its shortest context,
# where a line says nothing. The second model in the menu, SmolLM2-135M, has FLOPs only (its
# steps were timed in section 2).

# %%
from kvlab.viz import CostModel, CostWidget

timed_ms = {r["L"]: (r["naive_ms"], r["cached_ms"]) for r in sweep}   # section 3's table (measured)
bundled = CostModel(model.flops_per_token, (n0, n1), (c0, c1), measured_from=xs[0],
                    context_window=cfg.max_position_embeddings, measured=timed_ms)
smol = CostModel(real.flops_per_token, context_window=rc.max_position_embeddings,
                 note=f"FLOPs only for this model: its steps were timed in section 2, at positions "
                      f"{pos[0]}-{pos[-1]}, not over this range.")
CostWidget({"bundled tiny model": bundled, "SmolLM2-135M": smol}, context=1024)

# %% [markdown]
# ## 5. The price: memory
#
# The cache costs memory that grows with every token. The contiguous path reserved K/V for the
# prompt plus all 96 new tokens up front (it was told the length; a server is not, and must
# reserve the model's maximum); the paged path took 4-token blocks as the sequence grew. Paging
# does not always reserve less: for ONE sequence whose length is known, the contiguous tensor is
# exactly the right size, while a paged pool is made of whole blocks and `generate()` gives it a
# few spare ones (a real server's pool holds many requests' blocks). So below the paged pool is
# a little LARGER than the contiguous tensor. Paging wins where the length is not known and many
# requests share one pool (lessons 03 and 04). What each reserved, and why the paged figure is
# what it is, computed from the runs (measured: the bytes of the runs' own tensors):

# %%
# NBVAL_CHECK_OUTPUT
pool = runs["paged"].manager
(seq,) = pool.tables
table = pool.table(seq)
bpt = runs["paged"].pool.bytes_per_token()
last_fill = table.num_tokens - (len(table) - 1) * pool.block_size
print(f"bytes per token (K and V, {cfg.num_hidden_layers} layers, fp32): {bpt:,}")
for s in ["naive", "contiguous", "paged"]:
    print(f"{s:<10} KV bytes reserved {runs[s].kv_bytes:>9,}")
print(f"contiguous: {len(prompt)} prompt + {new_tokens} new = {len(prompt) + new_tokens} tokens x {bpt:,} = "
      f"{(len(prompt) + new_tokens) * bpt:,} bytes")
print(f"paged: the table holds {table.num_tokens} tokens ({len(prompt)} prompt + {table.num_tokens - len(prompt)} generated; "
      f"the last generated token's K and V would be computed by the next step) in {len(table)} blocks of "
      f"{pool.block_size}, the last holding {last_fill} of {pool.block_size}")
need = kvlab.blocks_needed(len(prompt) + new_tokens, pool.block_size)
print(f"       the pool has {pool.num_blocks} blocks: {need} for {len(prompt) + new_tokens} tokens and "
      f"{pool.num_blocks - need} spare that generate() adds, free at the end; "
      f"{pool.num_blocks} x {pool.block_size} x {bpt:,} = {pool.num_blocks * pool.block_size * bpt:,} bytes")

# %% [markdown]
# The notes put it in one line: **caching trades space for time.** Judged on the 96-token run of
# section 2 (the K and V tensors' bytes, and the steps as timed and counted):

# %%
# NBVAL_CHECK_OUTPUT
space = runs["contiguous"].kv_bytes
t_naive, t_cached = sum(runs["naive"].step_times), sum(runs["contiguous"].step_times)
f_naive, f_cached = sum(runs["naive"].step_flops), sum(runs["contiguous"].step_flops)
print(f"space: {space:,} bytes of K and V ({bpt:,} a token) that naive decoding never holds")
print(f"compute saved: {f_naive / f_cached:.1f}x fewer FLOPs over the {new_tokens} steps (counted), a factor that "
      f"grows with every token (section 4)")

# %% [markdown]
# And the time, measured (not in the checked output: seconds change from run to run); the verdict
# is printed from the two numbers:

# %%
print(f"verdict (measured): {1 - t_cached / t_naive:.0%} of the time saved for {kvlab.format_bytes(space)} of memory"
      if t_cached < t_naive else "verdict (measured): no time saved at this short length (see section 3)")
print(f"  naive {t_naive:.2f} s, cached {t_cached:.2f} s for {new_tokens} tokens")

# %% [markdown]
# Here is that paged pool as kvlab's allocator left it after the real run (the title's
# "measured" means that: the state of the run's own allocator, not a simulation). It has one
# block table, `seq0` (the id `generate()` gives its one sequence); each block names the table
# entry that points at it (`seq0 L3`: entry 3 of seq0's block table, the sequence's positions 12
# to 15), is filled from the left as far as it holds tokens, and has a tick between each two of its
# token slots along its lower edge; the spare block is free. How big this memory gets on real
# models is lesson 02; how the pool is shared by many requests, lessons 04 to 06.

# %%
from kvlab.viz import memory_map_figure

memory_map_figure(pool.snapshot(f"{table.num_tokens} tokens in {len(table)} blocks of {pool.block_size} token "
                                "slots (the ticks)"),
                  title="The paged KV pool the real run left", source="measured", tables=False, cols=9)

# %% [markdown]
# ## 6. Exercises
#
# ### Exercise 1: the FLOPs of each step when part of the prompt is already cached
#
# Section 1 counted the steps of one request alone. Servers do better: when a second request
# starts with the same tokens as an earlier one (the same system prompt, say), the K and V of
# those tokens are already in the cache, and its prefill computes only the rest (lessons 06 and
# 07 build this). Design `count_flops(flops_per_token, prompt_len, new_tokens, cached_prefix=0)`
# for that case. It returns two lists, `(naive_steps, cached_steps)`, with the FLOPs of each of
# the `new_tokens` steps: entry `t - 1` of a list is step `t`, counted from 1 as in section 1
# (step `t` produces the `t`-th new token; positions count from 0). `flops_per_token(c)` gives
# the FLOPs of running one token that attends to `c` tokens (itself included); the first
# `cached_prefix` tokens of the prompt, positions 0 to `cached_prefix - 1`
# (`0 <= cached_prefix < prompt_len`), already have their K and V in the cache.
#
# - naive (no cache at all): step `t` runs the whole sequence, `prompt_len + t - 1` tokens, the
#   one at position `p` attending to `p + 1` tokens;
# - cached: step 1 is the prefill (every prompt token not cached yet, in one pass), step `t ≥ 2`
#   runs the one token produced last.
#
# **Predict before you run anything:** with `prompt_len = 12`, `cached_prefix = 11`, how many
# tokens does the prefill run, and is it cheaper or dearer than cached step 2? And does the
# cached prefix change any naive step? Write your answers down, then check them against the
# lists your function returns. The checker compares with the FLOPs that
# `kvlab.compute.generate.generate` counted on the bundled model (`cached_prefix = 0`) and with
# the same counts less the prefix's work (`cached_prefix > 0`), for several lengths.

# %% tags=["exercise-stub"]
def count_flops(flops_per_token, prompt_len, new_tokens, cached_prefix=0):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.count_flops(count_flops)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Section 1's table is the case `cached_prefix = 0`. What does a cached token save: being run
# again, or being read?
# </details>
#
# <details><summary>Hint 2</summary>
#
# The prefill still runs the tokens after the prefix, and each of them still attends to every
# token before it, cached or not. Which positions does it run?
# </details>

# %% [markdown]
# ### Exercise 2: one decode step with a KV cache
#
# Implement `attend_with_cache(q, k_new, v_new, k_cache, v_cache)` for one layer:
#
# - `q`: `(num_heads, head_dim)`, the new token's query; `k_new`, `v_new`: `(num_kv_heads, head_dim)`;
# - `k_cache`, `v_cache`: `(T, num_kv_heads, head_dim)`, the earlier tokens (`T` may be 0).
#
# Append the new K and V to the caches, then attend `q` over all `T + 1` tokens (scale
# `1/sqrt(head_dim)`; query head `h` uses KV head `h // (num_heads // num_kv_heads)`). Return
# `(out, k_cache, v_cache)`: `out` is `(num_heads, head_dim)`, the caches `(T + 1, num_kv_heads,
# head_dim)`; leave the five inputs as they came (no in-place changes). The checker feeds a
# sequence token by token from an empty cache and compares every output with full causal
# attention recomputed over the whole sequence.

# %% tags=["exercise-stub"]
def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    raise NotImplementedError("your code here")


# %%
check.attend_with_cache(attend_with_cache)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# A token attends to itself: what must the cache hold before the attention reads it? And the
# caches you hand back are the caller's next inputs: are they new tensors, or the ones you were given?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Several query heads read one KV head. Once each query head knows which cached K and V are its
# own, what is left is ordinary attention: one query over `T + 1` keys and values.
# </details>

# %% [markdown]
# ## Summary
#
# - A token's K and V never change once computed (causal attention), so recomputing them every
#   step is wasted work: section 1's stepper showed the naive step recomputing the very numbers
#   the cache already held.
# - The KV cache keeps them: each decode step runs one token, and the attention reads the cache.
#   Measured here: identical tokens from naive, contiguous-cache and paged-cache decoding, on the
#   bundled model and on SmolLM2-135M (section 2 printed how much faster its cached steps were
#   on this machine, and why far less than the FLOPs say: one token at a time reads every weight
#   for little arithmetic).
# - Counted: naive work per step grows with the sequence (O(n²) per answer in the projections
#   alone); a cached step runs one token, so its projections cost O(n) per answer, and only its
#   attention, which still reads every cached token, grows faster (section 4 split the two).
#   Measured: section 3 printed what this CPU shows of it, and how far its time followed the FLOPs.
# - Caching trades space for time: here 204,800 bytes of K and V bought about 49 times fewer
#   FLOPs (section 5, printed from the run). Try other context lengths with the widget of section 4.
# - The cost is memory that grows with every token of every running request. Next,
#   [02 How big is it](02_how_big.ipynb).
