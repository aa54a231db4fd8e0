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
#   token's K and V once (the [KV cache](glossary.md)) and compute only the new token.
# - That both give **identical tokens** on kvlab's bundled model (a 4-layer Llama-style model
#   with grouped-query attention, trained on Python documentation), while the work per step is
#   O(n) against O(1) in the projections, so O(n²) against O(n) over a whole answer.
# - Time and FLOPs per step, **measured** and **counted** on this CPU.
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
# `out = softmax(q·Kᵀ / √d) · V`. In a decoder, the K and V of token *i* depend only on tokens
# 0..*i* (causal attention), so **they never change once computed**. Recomputing them at every
# step repeats the same arithmetic.
#
# Count it for the bundled model. `model.flops_per_token(c)` is the number of FLOPs (2 per
# multiply-add, matrix products only) to run one token through the model when it attends to
# `c` tokens: a fixed part (projections, MLP, output layer) plus an attention part that grows
# with `c`.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.model import load_bundled

model, tok = load_bundled()
cfg = model.config
print(f"bundled model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} query heads, "
      f"{cfg.num_key_value_heads} KV heads of {cfg.head_dim}, vocabulary {cfg.vocab_size}")
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
for c in [1, 10, 100]:
    print(f"flops_per_token({c:>3}) = {model.flops_per_token(c):,}")

# %% [markdown]
# Generating token *t* after a prompt of *P* tokens:
#
# - **without a cache**, run all `P + t` tokens again: `Σ_{i=1}^{P+t} flops_per_token(i)`;
# - **with a cache**, run only the newest token: `flops_per_token(P + t)` (after a one-time
#   prefill of the prompt, step 0).
#
# For a 10-token prompt:

# %%
# NBVAL_CHECK_OUTPUT
P = 10
print(f"{'step':>4} {'tokens run (naive)':>19} {'FLOPs naive':>14} {'FLOPs cached':>13} {'ratio':>6}")
for t in [1, 2, 5, 10, 50, 100]:
    naive = sum(model.flops_per_token(i) for i in range(1, P + t + 1))
    cached = model.flops_per_token(P + t)
    print(f"{t:>4} {P + t:>19} {naive:>14,} {cached:>13,} {naive / cached:>6.1f}")

# %% [markdown]
# The ratio grows linearly with the sequence: at step *t* the naive path does about `P + t`
# times the work. Summed over an answer of *n* tokens that is O(n²) against O(n).
#
# ## 2. The real run: three decode paths, identical tokens
#
# `kvlab.generate.generate` runs the bundled model three ways (greedy decoding):
#
# - `"naive"`: no cache; every step feeds the whole sequence through the model again;
# - `"contiguous"`: a K/V tensor per layer, preallocated to the maximum length;
# - `"paged"`: K/V in a paged pool, blocks handed out by kvlab's `BlockManager`, attention read
#   through the block table (here with the torch reference of the paged kernels; lesson 05 runs
#   the Triton kernels).

# %%
# NBVAL_CHECK_OUTPUT
import torch

from kvlab.generate import generate

torch.set_num_threads(1)   # a model this small runs fastest on one thread (no thread hand-offs)
torch.manual_seed(0)
prompt = tok.encode("The socket module provides")
new_tokens = 96
runs = {s: generate(model, prompt, new_tokens, strategy=s, keep=s == "paged") for s in ["naive", "contiguous", "paged"]}
print(f"prompt: {len(prompt)} tokens; generated {new_tokens} tokens per path")
print("identical tokens, naive == contiguous == paged:",
      runs["naive"].tokens == runs["contiguous"].tokens == runs["paged"].tokens)
max_diff = max(float((runs[s].logits - runs["naive"].logits).abs().max()) for s in ["contiguous", "paged"])
print("largest logit difference from naive < 1e-3:", max_diff < 1e-3)
print("text:", repr(runs["paged"].text(tok)[:120]))

# %% [markdown]
# Same tokens, same logits up to float rounding: the cache is an optimisation, not an
# approximation.
#
# ## 3. The picture: work per step (counted) and time per step (measured)
#
# `generate` records the FLOPs it ran at each step (counted from the model's shapes) and the
# wall time of each step (measured on this CPU; step 0 is the prefill, which yields the first
# token).

# %%
import plotly.graph_objects as go
from plotly.subplots import make_subplots

steps = list(range(new_tokens))
fig = make_subplots(rows=1, cols=2, subplot_titles=("FLOPs per step (counted)", "time per step, ms (measured, CPU)"))
for s, color in [("naive", "#d62728"), ("contiguous", "#1f77b4"), ("paged", "#2ca02c")]:
    fig.add_trace(go.Scatter(x=steps[1:], y=runs[s].step_flops[1:], name=s, line_color=color, legendgroup=s), 1, 1)
    fig.add_trace(go.Scatter(x=steps[1:], y=[1e3 * x for x in runs[s].step_times[1:]], name=s, line_color=color,
                             legendgroup=s, showlegend=False), 1, 2)
fig.update_xaxes(title_text="decode step")
fig.update_layout(height=380, title="Naive recomputation vs KV cache on the bundled model (step 0, the prefill, left out)")
fig

# %%
# NBVAL_CHECK_OUTPUT
for s in ["naive", "contiguous", "paged"]:
    r = runs[s]
    print(f"{s:<10} total FLOPs {sum(r.step_flops):>16,}  KV bytes reserved {r.kv_bytes:>9,}")
print(f"naive / cached FLOPs over the answer: {sum(runs['naive'].step_flops) / sum(runs['contiguous'].step_flops):.1f}x")

# %%
for s in ["naive", "contiguous", "paged"]:
    t = runs[s].step_times
    print(f"{s:<10} measured: first 10 decode steps {1e3 * sum(t[1:11]) / 10:6.2f} ms/step, "
          f"last 10 {1e3 * sum(t[-10:]) / 10:6.2f} ms/step, total {sum(t):.2f} s")

# %% [markdown]
# The counted FLOPs say it exactly: the naive path's work per step grows linearly, the cached
# paths' stays nearly flat (only the attention part grows). The measured times follow the same
# shape, but on a model this small the CPU spends much of each step on Python and framework
# overhead, so the measured gap is smaller than the FLOP gap; on a real model on a GPU the
# recomputation dominates. (`bench/` times bigger runs.)
#
# The price of the cache is memory. The contiguous path reserved K/V for the prompt plus all 96
# new tokens up front (it was told the length; a server is not, and must reserve the model's
# maximum); the paged path took 4-token blocks as the sequence grew, so its total is rounded up
# to whole blocks. Here is the paged pool after the answer, as kvlab's allocator left it (one
# block table, every block full but the last). How big that memory gets on real models is
# lesson 02; how the pool is shared by many requests, lessons 04 to 06.

# %%
from kvlab.viz import memory_map_figure

pool = runs["paged"].manager
memory_map_figure(pool.snapshot(f"{len(prompt)} prompt + {new_tokens} generated tokens, block size 4"),
                  title="The paged KV pool after decoding", source="measured")
#
# ## 4. O(n²) versus O(n)
#
# Summing the counts over answers of growing length (counted, from `flops_per_token`; prompt 10):

# %%
# NBVAL_CHECK_OUTPUT
f = model.flops_per_token
print(f"{'answer length n':>15} {'naive total':>18} {'cached total':>16} {'ratio':>7}")
for n in [16, 64, 256, 1024]:
    naive = sum(sum(f(i) for i in range(1, P + t + 1)) for t in range(n))
    cached = sum(f(i) for i in range(1, P + 1)) + sum(f(P + t) for t in range(1, n))
    print(f"{n:>15} {naive:>18,} {cached:>16,} {naive / cached:>7.1f}")

# %% [markdown]
# Four times the answer, about four times the ratio: naive total work grows as n², cached as n.
#
# ## 5. Exercises
#
# ### Exercise 1: count the FLOPs of each step
#
# Implement `count_flops(flops_per_token, prompt_len, new_tokens)` returning two lists,
# `(naive_steps, cached_steps)`, with the FLOPs of each of the `new_tokens` steps.
# `flops_per_token(c)` gives the FLOPs of running one token that attends to `c` tokens (itself
# included). Step `t` (0-based) produces new token `t`:
#
# - naive: step `t` runs the whole sequence, `prompt_len + t` tokens, the `i`-th of them
#   (1-based) attending to `i` tokens;
# - cached: step 0 is the prefill (the prompt's tokens, the same way); step `t ≥ 1` runs one
#   token, the last one produced, which attends to `prompt_len + t` tokens.
#
# The checker compares with the FLOPs that `kvlab.generate.generate` counted on the bundled
# model for several prompt and answer lengths.

# %% tags=["exercise-stub"]
def count_flops(flops_per_token, prompt_len, new_tokens):
    raise NotImplementedError("your code here")


# %%
from kvlab import check

check.count_flops(count_flops)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Naive step `t`: `sum(flops_per_token(i) for i in range(1, prompt_len + t + 1))`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Cached: the prefill equals naive step 0; afterwards the token run at step `t` sits at
# position `prompt_len + t - 1` and attends to positions `0 .. prompt_len + t - 1`.
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
# head_dim)`. The checker feeds a sequence token by token from an empty cache and compares every
# output with full causal attention recomputed over the whole sequence.

# %% tags=["exercise-stub"]
def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    raise NotImplementedError("your code here")


# %%
check.attend_with_cache(attend_with_cache)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# `torch.cat([k_cache, k_new[None]])` appends one token. Append **before** attending: a token
# attends to itself.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `k.repeat_interleave(num_heads // num_kv_heads, dim=1)` gives one KV head per query head; then
# `torch.einsum("hd,thd->ht", q, k) / sqrt(head_dim)`, a softmax over `t`, and
# `torch.einsum("ht,thd->hd", weights, v)`.
# </details>

# %% [markdown]
# ## Summary
#
# - A token's K and V never change once computed (causal attention), so recomputing them every
#   step is wasted work.
# - The KV cache keeps them: each decode step runs one token, and the attention reads the cache.
#   Measured here: identical tokens from naive, contiguous-cache and paged-cache decoding.
# - Counted: naive work per step grows with the sequence (O(n²) per answer), cached work stays
#   nearly flat (O(n)); measured times show the same shape on this CPU.
# - The cost is memory that grows with every token of every running request. Next,
#   [02 How big is it](02_how_big.ipynb).
