# Lesson 02 source (jupytext percent format). Edit this file, then run
# `.venv/bin/python scripts/build_notebooks.py 02` to rebuild notebooks/02_how_big.ipynb.

# %% [markdown]
# # 02 · How big is the KV cache?
#
# Lesson 01 showed why a server keeps every token's keys and values. This lesson asks what
# that costs. The answer decides how many requests a GPU can serve at once, and it is the
# reason the rest of the series is about managing this memory carefully.
#
# **What you will learn**
# - the size formula `2 × layers × kv_heads × head_dim × tokens × bytes`, and where each
#   factor comes from;
# - why grouped-query attention (GQA) makes a model's cache several times smaller than
#   multi-head attention (MHA) would (from 3 to 71 times among this lesson's models, 8 for
#   Llama-2 70B: section 4), and why the source notes' 10.7 GB for Llama-2 70B is really 1.34 GB
#   (and their "10 requests need 107 GB" really 13.4 GB);
# - what "80 GB" and "141 GB" on a GPU's spec sheet count, and how many requests fit on an A100
#   or an H200 (and, with the widget of section 6, on any device you pick);
# - the real bytes per token of a real LLM, SmolLM2-135M, read from its file and measured on
#   tensors, and what fits in this machine's memory.
#
# Terms in Chinese: [glossary](glossary.md). Model shapes are the published configs; GPU
# memory the vendors' spec sheets. Numbers derived from them are marked **simulated**
# (arithmetic, nothing run on a GPU); numbers from tensors on this machine are **measured**.

# %%
import kvlab
from kvlab.check import self_test

self_test();

# %% [markdown]
# ## 1. The worked example: count the numbers
#
# For every token, every layer stores one key vector and one value vector per **KV head**
# (the 2), each `head_dim` numbers long, each number `bytes` wide (2 for fp16/bf16). A toy model
# with 2 layers, 2 KV heads of dimension 4, in fp16, after 3 tokens:
#
# `2 (K and V) × 2 layers × 2 heads × 4 dims × 3 tokens × 2 bytes = 192 bytes`.
#
# kvlab's `KVSpec` does the same arithmetic:

# %%
# NBVAL_CHECK_OUTPUT
toy = kvlab.KVSpec(layers=2, kv_heads=2, head_dim=4, dtype_bytes=2, name="toy")
print("bytes per token:", toy.bytes_per_token)
print(toy.formula(3))

# %% [markdown]
# ## 2. Real models
#
# The presets hold the published shapes. `bytes_per_token` is the cost of one more token of
# context; a 4,096-token request multiplies it by 4,096 (simulated). The `kind` column says how
# the query heads share K and V heads: MHA (each its own), GQA (in groups), MQA (all share one).
# DeepSeek's MLA presets store a compressed latent instead of K and V heads: lesson 11.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.memory.kvspec import CONTEXT_WINDOWS

LESSON_MODELS = [name for name, spec in kvlab.MODELS.items() if spec.kind != "mla"]
print(f"{'model':12s} {'kind':>4s} {'layers':>6s} {'q heads':>7s} {'kv heads':>8s} {'head_dim':>8s} {'bytes/token':>12s} "
      f"{'4096 tokens':>12s} {'window':>7s}")
for spec in (kvlab.MODELS[n] for n in LESSON_MODELS):
    short = " *" if CONTEXT_WINDOWS[spec.name] < 4096 else ""
    print(f"{spec.name:12s} {spec.kind:>4s} {spec.layers:6d} {spec.num_heads:7d} {spec.kv_heads:8d} {spec.head_dim:8d} "
          f"{spec.bytes_per_token:12,d} {kvlab.format_bytes(spec.kv_bytes(4096)):>12s} {CONTEXT_WINDOWS[spec.name]:7,d}{short}")
short = [n for n in LESSON_MODELS if CONTEXT_WINDOWS[n] < 4096]
print(f"* {' and '.join(short)} take at most {CONTEXT_WINDOWS[short[0]]:,} tokens (their context window):\n"
      f"  their 4,096-token column is two of their longest requests, for comparison")

# %% [markdown]
# OPT-13B in the vLLM paper (Kwon et al., 2023, §3), in two steps:
#
# 1. One token: 819,200 bytes = 800 × 1,024 bytes, that is 800 KiB (1 KiB = 1,024 bytes). The
#    paper writes "800 KB".
# 2. One request of OPT-13B's longest, 2,048 tokens: 2,048 × 819,200 = 1,677,721,600 bytes, that
#    is 1.68 GB (1 GB = 10^9 bytes). The paper's "1.6 GB" is the same size, rounded: 800 × 2,048
#    = 1,638,400 of its "KB", read 1,000 to the MB and 1,000 to the GB. Section 5 says why
#    1,000 and 1,024 both turn up.
#
# ## 3. MHA versus GQA: the notes' 10.7 GB
#
# The source notes write the formula with `hidden_dim` in place of `kv_heads × head_dim`.
# That is right for **multi-head attention**, where every one of the `num_heads` query heads
# has its own K and V head, so `kv_heads × head_dim = num_heads × head_dim = hidden_size`.
# Llama-2 70B uses **grouped-query attention**: its 64 query heads share 8 KV heads (groups
# of 8), so it stores 8 times fewer K and V vectors than the hidden size suggests:

# %%
# NBVAL_CHECK_OUTPUT
llama70 = kvlab.get_model("llama-2-70b")
notes = llama70.hidden_formula_bytes(4096)
real = llama70.kv_bytes(4096)
print(f"the notes' formula, hidden_size {llama70.hidden_size}: 2 x 80 x {llama70.hidden_size} x 4096 x 2 = "
      f"{notes:,} bytes ({kvlab.format_bytes(notes)})")
print(f"with its {llama70.kv_heads} KV heads x head_dim {llama70.head_dim}: {real:,} bytes ({kvlab.format_bytes(real)})")
print(f"ratio {notes // real} = num_heads {llama70.num_heads} / kv_heads {llama70.kv_heads}")

# %% [markdown]
# So the notes' 10.7 GB is what Llama-2 70B **would** need with multi-head attention; the real
# model needs 1.34 GB per 4,096-token request. For the MHA models (Llama-2 7B and 13B, OPT-13B)
# both formulas agree. GQA is one of the main reasons newer models can serve many more requests
# per GPU.
#
# The notes go on: *10 concurrent requests need 107 GB, more than an 80 GB card holds*. Re-checked
# with both formulas (simulated):

# %%
# NBVAL_CHECK_OUTPUT
card = kvlab.get_gpu("a100-80gb")
weights = int(llama70.params_b * 1e9 * 2)
for label, per_request in [("the notes (MHA formula)", notes), ("the real model (GQA)", real)]:
    total = 10 * per_request
    verdict = "more" if total > card.memory_bytes else "less"
    print(f"{label:24s} 10 x {kvlab.format_bytes(per_request)} = {kvlab.format_bytes(total):>9s}: {verdict} than "
          f"the {kvlab.format_bytes(card.memory_bytes)} of an A100 80GB")
print(f"but the fp16 weights alone take {kvlab.format_bytes(weights)} "
      f"({'more' if weights > card.memory_bytes else 'less'} than one card): Llama-2 70B is served on several GPUs either way")

# %% [markdown]
# ## 4. The picture
#
# Both formulas side by side for every preset (simulated: arithmetic from the published
# configs). The sizes span more than a hundredfold (the line above the chart gives the range), so
# the axis is logarithmic: from one labelled line to the next is 3 or 3.3 times. Hover for the
# exact numbers. Where the grey and blue bars are equal the model is MHA; the gap is the GQA
# (or MQA) factor.

# %%
import math

import plotly.graph_objects as go

from textwrap import fill

import kvlab.viz as viz

th = viz.theme()  # the fonts of the current mode (classroom mode: larger)
names = [viz.model_name(n) for n in LESSON_MODELS]   # published names, as in section 6's widget
gb = {"notes": [kvlab.MODELS[n].hidden_formula_bytes(4096) / 1e9 for n in LESSON_MODELS],
      "real": [kvlab.MODELS[n].kv_bytes(4096) / 1e9 for n in LESSON_MODELS]}
lo, hi = min(gb["real"]), max(gb["notes"])
print(f"from {lo:.3f} GB ({names[gb['real'].index(lo)]}, real) to {hi:.1f} GB ({names[gb['notes'].index(hi)]}, "
      f"the notes' formula): {hi / lo:.0f} times")
ratio = {name: round(notes / real) for name, notes, real in zip(names, gb["notes"], gb["real"])}
by_ratio = {r: [n for n in names if ratio[n] == r] for r in sorted(set(ratio.values()))}
parts = [f"{r}x for {', '.join(ns)}" + (" (MHA: the same)" if r == 1 else "")
         for r, ns in by_ratio.items()]
print(fill("the notes' formula over the real one: " + "; ".join(parts), 76))
ticks = [m * 10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in (1, 3)]
ticks = [t for t in ticks if lo / 3.5 <= t <= hi * 3.5]   # 1-3-10 steps: a labelled line under every bar's top
fig = go.Figure([
    go.Bar(name="notes' formula (hidden_size)", x=names, y=gb["notes"], marker_color="#bbbbbb",
           hovertemplate="%{x}, notes' formula: %{y:.3f} GB<extra></extra>"),
    go.Bar(name="real (kv_heads x head_dim)", x=names, y=gb["real"], marker_color="#1f77b4",
           hovertemplate="%{x}, real: %{y:.3f} GB<extra></extra>"),
])
fig.update_layout(title=dict(text="KV cache of one 4,096-token request, fp16 (simulated)", font=dict(size=th.title_size)),
                  yaxis=dict(title="GB, log scale", type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                             range=[math.log10(lo / 2), math.log10(hi * 1.6)]),
                  barmode="group", height=380 if not th.high_contrast else 460,
                  autosize=True, font=dict(size=th.font_size),   # the output area's width, in both modes
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), xaxis=dict(tickangle=-30))
fig

# %% [markdown]
# ## 5. What "80 GB" and "141 GB" count
#
# Two units hide in GPU memory sizes. A **GB** is 10⁹ bytes (what papers and kvlab's
# `format_bytes` print); a **GiB** is 2³⁰ = 1,073,741,824 bytes, 7.4% more. Memory chips come
# in powers of two, so an "A100 80GB" holds 80 GiB, which is 85.9 GB. Not every card is that
# round: `nvidia-smi` reports 81,559 MiB (79.6 GiB) on an "H100 80GB", and the H200's "141 GB" on
# its spec sheet is the 143,771 MiB it reports, 140.4 GiB, which is 150.8 GB. kvlab's presets
# hold the MiB the driver reports; everything below is computed from them:

# %%
# NBVAL_CHECK_OUTPUT
SPEC_SHEET = {"a100-40gb": "40GB", "a100-80gb": "80GB", "h100-80gb": "80GB", "h200": "141GB"}
print(f"{'gpu':10s} {'spec sheet':>10s} {'MiB (nvidia-smi)':>17s} {'GiB':>8s} {'GB (10^9)':>10s}")
for name, gpu in kvlab.GPUS.items():
    b = gpu.memory_bytes
    print(f"{name:10s} {SPEC_SHEET[name]:>10s} {b // 2**20:>17,} {b / 2**30:>8.1f} {b / 1e9:>10.2f}")

# %% [markdown]
# That is all the memory on the card, and a server gives only part of it to the KV cache.
# vLLM's `gpu_memory_utilization` is, in its `CacheConfig` (`vllm/config/cache.py`), "the
# fraction of GPU memory to be used for the model executor": the weights, the activations (vLLM
# measures their peak with a profiling forward pass at start-up) and the KV cache all come out
# of that share, and the KV cache gets what the other two leave of it. The rest is not vLLM's
# at all (headroom, other processes on the card). This lesson quotes the default of vLLM's
# `CacheConfig` at commit c1d8642: 0.9 ("if unspecified, will use the default value of 0.9").
# A later commit (002f10e) raises it to 0.92, so check the version you run; the widget of
# section 6 lets you set any share.
#
# ## 6. How many requests fit on one GPU?
#
# A server loads the weights (2 bytes a parameter in fp16) and gives the rest of its share of
# the card, `utilization × memory − weights`, to the KV cache. `GPUSpec.kv_budget_bytes` does
# that subtraction; the number of 4,096-token requests that fit is the budget divided by one
# request's cache, rounded down (simulated; activations and fragmentation are ignored here,
# lesson 03 adds the fragmentation):

# %%
# NBVAL_CHECK_OUTPUT
util = 0.9
fits = {}  # (gpu, model) -> requests of 4,096 tokens (the summary quotes the range)
for gpu_name in ("a100-80gb", "h200"):
    gpu = kvlab.get_gpu(gpu_name)
    share = int(gpu.memory_bytes * util)
    for model_name in ("llama-2-7b", "llama-2-13b", "llama-3-8b", "llama-2-70b"):
        spec = kvlab.get_model(model_name)
        w = int(spec.params_b * 1e9 * 2)
        head = f"{gpu_name:9s} {model_name:11s} {util:.0%} of {kvlab.format_bytes(gpu.memory_bytes)} is {kvlab.format_bytes(share)}"
        print(head)  # two lines a row: they fit a projector's narrow output too
        if w >= share:
            print(f"{'':10s}the weights alone take {kvlab.format_bytes(w)}: does not fit")
            continue
        budget = gpu.kv_budget_bytes(spec, utilization=util)
        fits[gpu_name, model_name] = budget // spec.kv_bytes(4096)
        print(f"{'':10s}minus weights {kvlab.format_bytes(w)} = KV budget {kvlab.format_bytes(budget)}: "
              f"{budget // spec.kv_bytes(4096)} requests of 4,096 tokens")

# %% [markdown]
# Llama-2 70B's 138 GB of fp16 weights do not fit on one 80 GB card, nor within 90% of an
# H200; servers split it across GPUs (tensor parallelism: each GPU holds a slice of every layer's
# weight matrices, and of its KV heads, and they compute each layer together). Two H200s together,
# as one budget:

# %%
# NBVAL_CHECK_OUTPUT
h200 = kvlab.get_gpu("h200")
two = kvlab.GPUSpec("2 x h200", 2 * h200.memory_bytes, 2 * h200.hbm_bandwidth)
budget = two.kv_budget_bytes(llama70)
print(f"2 x H200, llama-2-70b: KV budget {kvlab.format_bytes(budget)} -> {budget // llama70.kv_bytes(4096)} requests "
      f"of 4,096 tokens (with the notes' MHA formula it would be {budget // llama70.hidden_formula_bytes(4096)})")

# %% [markdown]
# ### Try your own: model, number format, device, request length
#
# Every number above comes from five choices. Change them here and the formula, the budget and
# the count follow (simulated: arithmetic from the configs and spec sheets). The bar is the
# device's memory, and its legend names each colour. Things to try:
#
# - Llama-2 70B on one H200 (the card holds the weights, the server's share does not), then on two;
# - Llama-2 7B against Llama-3 8B (about the same size, MHA against GQA);
# - fp8 instead of fp16 (half the bytes per token, twice the requests);
# - the longest request each model takes: the **tokens per request** slider stops at the model's
#   context window, which the model menu names (4,096 tokens for Llama-2, 2,048 for OPT-13B); a
#   model with a longer window gets back the length you last chose.
#
# The KV menu starts at fp16, the format GPU servers store K and V in. On this machine's RAM
# kvlab stores them in fp32: pick fp32 there. The widget then budgets the RAM as a server budgets
# a GPU, a share of **all** of it, as if nothing else ran. Section 7's last cell counts what is
# free right now instead, and prints both counts and why they differ.

# %%
import inspect
import os
from pathlib import Path

from kvlab.compute.loader import load_pretrained
from kvlab.viz import CapacityWidget, capacity_state

devices = {name: gpu.memory_bytes for name, gpu in kvlab.GPUS.items()}
devices["2 x h200"] = 2 * kvlab.GPUS["h200"].memory_bytes
ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")   # this machine's memory (measured)
here = f"this machine's RAM ({ram / 2**30:.1f} GiB)"
devices[here] = ram
cpu_dtype = inspect.signature(load_pretrained).parameters["dtype"].default   # what kvlab loads a model in on a CPU
print(f"weights: fp16 (2 bytes a parameter) on the GPUs, as a server loads them; on {here}, "
      f"{str(cpu_dtype).removeprefix('torch.')} ({cpu_dtype.itemsize} bytes), as kvlab runs models on this CPU")
CapacityWidget(models={n: kvlab.MODELS[n] for n in LESSON_MODELS}, devices=devices, model="llama-2-70b",
               device="2 x h200", tokens=4096, weight_bytes={here: cpu_dtype.itemsize}, host_devices=[here])

# %% [markdown]
# ## 7. The real run: allocate the cache
#
# The formula is easy to trust on paper. Here it is checked against real tensors: kvlab's
# kernels store the cache as two tensors per layer, `k_cache, v_cache` of shape
# `[num_blocks, block_size, kv_heads, head_dim]`. We allocate them for Llama-3 8B's shape, 16
# blocks of 16 tokens (256 tokens), on the CPU, and count the bytes torch reports (measured):

# %%
# NBVAL_CHECK_OUTPUT
import torch

spec = kvlab.get_model("llama-3-8b")
num_blocks, block_size = 16, 16
caches = [
    (torch.empty(num_blocks, block_size, spec.kv_heads, spec.head_dim, dtype=torch.float16),   # k_cache
     torch.empty(num_blocks, block_size, spec.kv_heads, spec.head_dim, dtype=torch.float16))   # v_cache
    for _ in range(spec.layers)
]
measured = sum(k.nbytes + v.nbytes for k, v in caches)
print(f"measured: {spec.layers} layers x 2 tensors of {tuple(caches[0][0].shape)} fp16 = {measured:,} bytes")
print(f"formula:  {spec.kv_bytes(num_blocks * block_size):,} bytes; equal: {measured == spec.kv_bytes(num_blocks * block_size)}")
del caches

# %% [markdown]
# And for a real model: kvlab's bundled tiny Llama (the one lesson 01 generates text
# with) has 4 query heads sharing 2 KV heads, GQA in miniature. Its config gives a `KVSpec`;
# the paged pool that kvlab's engine allocates for it holds exactly that many bytes (measured
# on the pool's tensors; the model runs in fp32 on the CPU, so 4 bytes a number):

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.compute.kv_tensors import PagedKVPool
from kvlab.compute.loader import load_bundled

model, tokenizer = load_bundled()
cfg = model.config
pool = PagedKVPool.for_model(model, num_blocks=32, block_size=4)
bundled = kvlab.KVSpec(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                       dtype_bytes=pool.k_cache[0].element_size(), num_heads=cfg.num_attention_heads, name="bundled")
print(f"bundled model: {cfg.num_hidden_layers} layers, {cfg.num_attention_heads} query heads, "
      f"{cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}")
print(bundled.formula(32 * 4))
print(f"measured pool: {pool.nbytes:,} bytes; equal: {pool.nbytes == bundled.kv_bytes(32 * 4)}")

# %% [markdown]
# ### A real LLM: SmolLM2-135M-Instruct
#
# This is the model that lesson 01 ran. Its shape is read from its GGUF file's own metadata (not from a
# preset), then its cache is allocated as kvlab's engine allocates it, in fp32 (how it runs on
# this CPU) and in fp16, and its bytes per token are measured on the tensors, beside Llama-2
# 70B's from the formula:

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.compute.gguf import gguf_scalars, require_smollm2

meta = gguf_scalars(require_smollm2())           # the numbers in the file's header (no weights, no tokenizer read)
smol = kvlab.KVSpec(layers=meta["llama.block_count"], kv_heads=meta["llama.attention.head_count_kv"],
                    head_dim=meta["llama.embedding_length"] // meta["llama.attention.head_count"],
                    num_heads=meta["llama.attention.head_count"], name="smollm2-135m",
                    params_b=kvlab.MODELS["smollm2-135m"].params_b)
print(f"SmolLM2-135M from its file: {smol.layers} layers, {smol.num_heads} query heads sharing {smol.kv_heads} KV heads "
      f"of {smol.head_dim} (GQA, groups of {smol.gqa_ratio})")
measured = {}
for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
    p = PagedKVPool(num_layers=smol.layers, num_blocks=8, block_size=16, num_kv_heads=smol.kv_heads,
                    head_dim=smol.head_dim, dtype=dtype)
    measured[name] = p.nbytes // (8 * 16)
print(f"{'bytes per token':24s} {'fp32':>10s} {'fp16':>10s}   (4,096 tokens in fp16)")
print(f"{'SmolLM2-135M (measured)':24s} {measured['fp32']:>10,} {measured['fp16']:>10,}   "
      f"{kvlab.format_bytes(4096 * measured['fp16'])}")
print(f"{'Llama-2 70B (formula)':24s} {llama70.with_dtype('fp32').bytes_per_token:>10,} {llama70.bytes_per_token:>10,}   "
      f"{kvlab.format_bytes(llama70.kv_bytes(4096))}")
print(f"formula for SmolLM2 in fp16: {smol.bytes_per_token:,}; equal to the measured: {smol.bytes_per_token == measured['fp16']}; "
      f"Llama-2 70B needs {llama70.bytes_per_token / smol.bytes_per_token:.0f}x more per token")

# %% [markdown]
# And what fits in **this machine's** memory (the RAM is measured; the kernel runs SmolLM2 in
# fp32, so its weights take 4 bytes a parameter and its cache the fp32 figure above; the amount
# free changes from moment to moment, so these lines are not checked by the tests). The widget of
# section 6 answers the same question its own way, and the last lines say why the two differ:

# %%
total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
# free: Linux's MemAvailable (free pages plus the file cache the system gives back on demand); MemFree
# alone counted that cache as in use, and moved with disk activity (review r9 of 02)
meminfo = Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []
free = next((int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")),
            os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
w_smol = int(smol.params_b * 1e9 * cpu_dtype.itemsize)   # kvlab's CPU number format (section 6)
left = free - w_smol
now = left // (4096 * measured["fp32"])
fmt = kvlab.format_bytes
print(f"this machine: {fmt(total)} of RAM, {fmt(free)} free now (measured)")
print(fill(f"SmolLM2 in {str(cpu_dtype).removeprefix('torch.')}: weights {fmt(w_smol)}; the free "
           f"memory left holds {left // measured['fp32']:,} tokens of KV cache = {now:,} requests "
           "of 4,096 tokens", 76))
w70 = int(llama70.params_b * 1e9 * 2)
print(f"Llama-2 70B in fp16: weights alone {fmt(w70)}: "
      + ("more than this machine's RAM: it does not fit at all" if w70 > total else "they fit"))
# The widget's answer: its "this machine's RAM" entry, fp32 KV, at its default share (section 6's 90%)
fp32 = cpu_dtype.itemsize
widget = capacity_state(kvlab.MODELS["smollm2-135m"], devices[here], 4096, fp32, util, here, fp32,
                        gpu=False)
says = (f"{widget['requests']:,}, not {now:,}" if widget["requests"] != now
        else f"{now:,} too, by chance")
than = "less" if free < widget["share"] else "more"
print(fill(f"The widget says {says}: like a server on a GPU, it takes {util:.0%} of ALL the RAM "
           f"({fmt(widget['share'])}) as if nothing else ran. Here {fmt(total - free)} are in use "
           "already (the operating system, this kernel, other programs; the file cache, which the "
           f"system gives back on demand, counts as free), so {fmt(free)} are free, {than} than that "
           "share.", 76))

# %% [markdown]
# ## 8. Exercises
#
# ### Exercise 1: design a model's KV heads for a budget
#
# You design a model with Llama-2 70B's shape (80 layers, 64 query heads, head_dim 128) and want
# one 4,096-token request's KV cache, in fp16, to fit in 2 GB (2 × 10⁹ bytes). More KV heads
# attend better; fewer cost less. With grouped-query attention every KV head serves the same
# number of query heads. **Predict first**, on paper: how many KV heads do you choose, and would
# the answer change with 12 query heads and a budget that holds exactly 5 KV heads?
#
# **Contract.** `kv_heads_for_budget(layers, num_heads, head_dim, tokens, budget_bytes,
# dtype_bytes=2) -> int`: the most KV heads your design can have so that the K and V of one
# request of `tokens` tokens fit in `budget_bytes` (a cache of exactly the budget fits). Raise
# `ValueError` if `layers`, `num_heads`, `head_dim`, `tokens` or `dtype_bytes` is below 1, or if
# not even one KV head (MQA) fits.

# %% tags=["exercise-stub"]
def kv_heads_for_budget(layers, num_heads, head_dim, tokens, budget_bytes, dtype_bytes=2):
    raise NotImplementedError("your code here")

# %%
from kvlab import check

check.kv_heads_for_budget(kv_heads_for_budget)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Start from what one KV head costs for the whole request (section 1's counting, with one head);
# the budget then bounds how many heads you can pay for.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Not every count the budget pays for is a valid design: 64 query heads cannot be split into 5
# equal groups. Which counts are valid for a given `num_heads`?
# </details>
#
# ### Exercise 2: read a model's config
#
# Real models ship a `config.json`. Its fields are not always all there: OPT has no
# `num_key_value_heads`, most models have no `head_dim`, and some have no `torch_dtype`.
#
# **Contract.** `bytes_per_token_from_config(config) -> int`: K and V bytes of one token over
# all layers, from a dict with the fields `num_hidden_layers`, `num_attention_heads`,
# `hidden_size` and maybe `num_key_value_heads`, `head_dim` and `torch_dtype`. Example:
# Llama-2 70B's config (`num_hidden_layers` 80, `num_attention_heads` 64, `num_key_value_heads`
# 8, `hidden_size` 8192, `torch_dtype` "float16") gives 327,680.
#
# **Predict first**, on paper: what must a missing `num_key_value_heads` or `head_dim` stand for?
# The two configs below leave fields out; under each is the bytes a token of that model really
# takes (section 2's table). Find the values of the missing fields that give those sizes, as
# expressions of the fields the config does give, and write beside each default, in a comment,
# why a config can leave that field out. A missing `torch_dtype` is given: count 2 bytes, as a
# server serving the model in float16 would. And decide which `torch_dtype` strings you can size:
# `float16`, `bfloat16` and `float32` are in the configs the checker reads (seven real ones from
# the Hugging Face hub and kvlab's own); for any other string a guess would give a wrong size
# without a word, so raise `ValueError` naming it.

# %%
# NBVAL_CHECK_OUTPUT
from kvlab.check.l02_how_big import CONFIGS
from kvlab.viz import model_name

for name in ("llama-3-8b", "opt-13b"):
    fields = ", ".join(f"{key} {value}" for key, value in CONFIGS[name].items())
    print(fill(f"{model_name(name)}'s config.json: {fields}", 76, subsequent_indent="    "))
    print(f"    section 2's table: {kvlab.MODELS[name].bytes_per_token:,} bytes per token")

# %% tags=["exercise-stub"]
def bytes_per_token_from_config(config):
    raise NotImplementedError("your code here")

# %%
check.bytes_per_token_from_config(bytes_per_token_from_config)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Write section 1's formula for one token with a missing field as the unknown, put in the
# numbers of the config above that leaves out only one field, and solve it. Then the other.
# </details>
#
# <details><summary>Hint 2</summary>
#
# A default stands in only for a field that is missing. Gemma-7B's config gives `head_dim` 256:
# is that what your default would have computed for it?
# </details>
#
# ### Exercise 3: the longest context you can promise
#
# Section 6 counted the requests of one length that fit. A service asks it the other way round:
# it promises each of `users` users the same context length, all of them served at once, and
# wants the longest promise its KV budget keeps. The pool is paged (lesson 04 builds it): the
# budget is cut into whole blocks of `block_size` tokens, and a request of `n` tokens holds
# `ceil(n / block_size)` of them.
#
# **Predict first**, on paper: a budget of 1 GB (10⁹ bytes), Llama-3 8B (its bytes per token are
# in section 2's table), 16 users, blocks of 16 tokens. The budget divided by 16 users' bytes per
# token gives a number of tokens each, rounded down: can you promise every user that many? If not,
# what is the most you can?
#
# **Contract.** `longest_context(kv_budget_bytes, bytes_per_token, users, block_size=16) -> int`:
# the most tokens `L` such that `users` requests of `L` tokens each fit in the pool at the same
# time (0 when the pool has less than one block a user). Raise `ValueError` if `bytes_per_token`,
# `users` or `block_size` is below 1, or if the budget is below 0 bytes.

# %% tags=["exercise-stub"]
def longest_context(kv_budget_bytes, bytes_per_token, users, block_size=16):
    raise NotImplementedError("your code here")

# %%
check.longest_context(longest_context)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# The pool does not hold tokens, it holds blocks. How many whole blocks does the budget buy, and
# what can each user get of them?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Try your prediction on the pool: how many blocks does one request of that length hold, and how
# many do 16 of them need? Is that more than the pool has?
# </details>
#
# ### Exercise 4: a real mix of requests on a real GPU
#
# Requests are not all 4,096 tokens long. On a paged pool (lesson 04), each request holds whole
# blocks: `ceil(length / block_size)` of them.
#
# **Contract.** `max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token,
# block_size=16) -> int`: the **most** of these requests (`lengths`: tokens each) whose KV can be
# in GPU memory at the same time. The KV cache gets what section 6 gives it: the server's share of
# the GPU, rounded down to whole bytes, minus the weights (nothing if that is not positive), cut
# into whole blocks of `block_size` tokens. Raise `ValueError` for a `utilization` outside (0, 1],
# a `block_size` or `bytes_per_token` below 1, or a length below 1, before anything else (a bad
# length is an error even when nothing would fit).
#
# **Predict first**, on paper: a pool of exactly 20 blocks of 16 tokens, and requests of 200, 40,
# 40, 100, 40, 40 and 40 tokens that arrive in that order. How many can be in memory at once?
# Would a server that admits them as they arrive get as many? Then write, in a comment in your
# code, why no other choice of requests fits more than yours (a sentence is enough).

# %% tags=["exercise-stub"]
def max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    raise NotImplementedError("your code here")

# %%
check.max_concurrent(max_concurrent)

# %% [markdown]
# <details><summary>Hint 1</summary>
#
# Three questions, in order: how many whole blocks does the pool have; how many blocks does
# each request need; which requests do you pick to fit as many as possible?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Take any set of requests that fits, and a request left out that is shorter than one inside the
# set. Swap the two: does the set still fit, and how many requests does it hold?
# </details>

# %% [markdown]
# Section 6's counts on one GPU, from the fewest requests to the most (simulated), for the summary:

# %%
# NBVAL_CHECK_OUTPUT
from textwrap import fill

from kvlab.viz.capacity_widget import device_label, model_name

(lo_gpu, lo_model), (hi_gpu, hi_model) = min(fits, key=fits.get), max(fits, key=fits.get)
on_one = [g for g, m in fits if m == "llama-2-70b"]
say = lambda text: print(fill(text, 76))  # noqa: E731  -- wrapped: a projector's narrow output never cuts a word
say(f"from {fits[lo_gpu, lo_model]} ({model_name(lo_model)} on an {device_label(lo_gpu)}) to "
    f"{fits[hi_gpu, hi_model]} ({model_name(hi_model)} on an {device_label(hi_gpu)}) requests of "
    f"4,096 tokens; Llama-2 70B on one card at {util:.0%}: "
    + (f"fits on {', '.join(on_one)}." if on_one else "none (its weights alone do not fit in the share)."))

# %% [markdown]
# ## Summary
#
# - KV bytes = `2 × layers × kv_heads × head_dim × tokens × bytes`; one token of Llama-2 7B
#   costs 512 KiB, of OPT-13B 800 KiB (the vLLM paper's "800 KB").
# - With GQA, `kv_heads` is smaller than the number of query heads: Llama-2 70B needs 1.34 GB
#   per 4,096-token request, not the 10.7 GB that the hidden-size formula gives (that figure is
#   right only for multi-head attention), and 10 such requests need 13.4 GB, not 107 GB.
# - An "A100 80GB" holds 80 GiB (85.9 GB), an "H100 80GB" 79.6 GiB (section 5); a server gives
#   the KV cache `utilization × memory − weights`; on one GPU that holds the range of 4,096-token
#   requests printed just above this summary (section 6, simulated).
# - Cache memory reserved but filled by no token is room another request could have had, which is
#   why lessons 03 and 04 look at how the cache is laid out.
#
