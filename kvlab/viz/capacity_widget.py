"""How many requests fit: a model, the KV cache's number format, a GPU and a request length (lesson 02).

:func:`capacity_state` does lesson 02's arithmetic for one choice: bytes per token
``2 x layers x kv_heads x head_dim x bytes``, one request's cache, the server's share of the
device (``utilization x memory``), the weights (2 bytes a parameter, fp16), the KV budget that
leaves, and how many whole requests fit in it. :func:`capacity_figure` draws the device's memory
as one bar: weights, the KV cache of the requests that fit, what is left of the share, and the
part the server leaves alone. Everything is arithmetic from published configs and spec sheets
(simulated): nothing runs on a GPU.

:class:`CapacityWidget` puts four menus and two sliders over them, with names a student knows:
**model**, **KV numbers stored as** (fp32 / fp16 / fp8), **device**, **tokens per request** and
**share of memory the server uses**. Each change recomputes in milliseconds. The tokens slider
stops at the chosen model's context window (``kvlab.memory.kvspec.CONTEXT_WINDOWS``, named in the model menu): a
longer request is not one the model can take, and :func:`capacity_state` says so (no request fits).

Example:
    >>> from kvlab.memory.kvspec import GPUS, MODELS
    >>> s = capacity_state(MODELS["llama-2-7b"], GPUS["a100-80gb"].memory_bytes, 4096, 2)
    >>> s["bytes_per_token"], s["requests"]
    (524288, 29)
    >>> capacity_state(MODELS["llama-2-70b"], GPUS["a100-80gb"].memory_bytes, 4096, 2)["requests"]   # weights too big
    0
    >>> capacity_state(MODELS["llama-2-7b"], GPUS["h200"].memory_bytes, 8192, 2, context_window=4096)["requests"]
    0
"""
from __future__ import annotations

import html
from typing import Any

from ..memory.kvspec import CONTEXT_WINDOWS, GPUS, MODELS, KVSpec, format_bytes
from .display import display_control, is_static
from .palette import FREE, classroom_css, request_color, theme

__all__ = ["capacity_state", "capacity_figure", "CapacityWidget", "model_label", "model_name", "device_label", "min_share",
           "DTYPES", "TOKEN_CHOICES", "token_choices"]

DTYPES = (("fp32 (4 bytes)", 4), ("fp16 / bf16 (2 bytes)", 2), ("fp8 / int8 (1 byte)", 1))
TOKEN_CHOICES = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)
_MODEL_NAMES = {"llama-2-7b": "Llama-2 7B", "llama-2-13b": "Llama-2 13B", "llama-2-70b": "Llama-2 70B",
                "llama-3-8b": "Llama-3 8B", "opt-13b": "OPT-13B", "falcon-7b": "Falcon-7B", "smollm2-135m": "SmolLM2-135M",
                "deepseek-v2": "DeepSeek-V2", "deepseek-v3": "DeepSeek-V3"}
_DEVICE_NAMES = {"a100-40gb": "A100 40GB", "a100-80gb": "A100 80GB", "h100-80gb": "H100 80GB", "h200": "H200 141GB",
                 "2 x h200": "2 x H200 (one budget)"}
WEIGHTS, RESERVED = "#7f7f7f", "#ffffff"


def token_choices(window: int | None, now: int | None = None) -> list[int]:
    """The slider's request lengths: :data:`TOKEN_CHOICES` up to ``window`` (the window itself included;
    None: all), and ``now`` when it is within it.

    >>> token_choices(4096), token_choices(2048, now=1000)[-3:], token_choices(163840)[-2:]
    ([256, 512, 1024, 2048, 4096], [1000, 1024, 2048], [131072, 163840])
    """
    if window is None:
        return sorted(set(TOKEN_CHOICES) | ({now} if now else set()))
    keep = {now} if now is not None and now <= window else set()
    return sorted({t for t in TOKEN_CHOICES if t <= window} | {window} | keep)


def model_name(spec: KVSpec | str) -> str:
    """The model's published name, for a preset or its id (other names come back as they are).

    >>> model_name("llama-2-70b"), model_name("toy")
    ('Llama-2 70B', 'toy')
    """
    key = spec if isinstance(spec, str) else spec.name
    return _MODEL_NAMES.get(key, key)


def model_label(spec: KVSpec, window: int | None = None) -> str:
    """A name a student knows: ``"Llama-2 70B (80 layers, 8 KV heads)"``; with its context ``window``,
    ``"Llama-2 70B (80 layers, 8 KV heads, up to 4,096 tokens)"``."""
    upto = f", up to {window:,} tokens" if window else ""
    return f"{model_name(spec)} ({spec.layers} layers, {kv_heads_text(spec.kv_heads)}{upto})"


def kv_heads_text(n: int) -> str:
    """``'1 KV head'``, ``'8 KV heads'``."""
    return f"{n} KV head{'' if n == 1 else 's'}"


def device_label(name: str) -> str:
    return _DEVICE_NAMES.get(name, name)


def capacity_state(spec: KVSpec, device_bytes: int, tokens: int, dtype_bytes: int, utilization: float = 0.9,
                   device: str = "device", weight_bytes: int = 2, gpu: bool = True,
                   context_window: int | None = None) -> dict[str, Any]:
    """The numbers for one choice (see module doc); ``requests`` is 0 when the weights leave no room,
    and when ``tokens`` is past the model's ``context_window`` (None: no window checked);
    ``weight_bytes``: bytes a parameter of the weights (2: fp16, as a GPU server loads them; 4: fp32,
    as kvlab runs a model on a CPU); ``gpu``: False for a machine's RAM (the verdict then does not
    send the model to more GPUs)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be an int >= 1, got {tokens!r}")
    if spec.params_b is None:
        raise ValueError(f"model {spec.name!r} has no parameter count")
    kv = spec.with_dtype(dtype_bytes)
    bpt, per_request = kv.bytes_per_token, kv.kv_bytes(tokens)
    share = int(device_bytes * utilization)
    weights = int(spec.params_b * 1e9 * weight_bytes)
    budget = max(0, share - weights)
    past_window = context_window is not None and tokens > context_window
    n = 0 if past_window else budget // per_request
    formula = (f"2 x {kv.layers} layers x {kv_heads_text(kv.kv_heads)} x {kv.head_dim} x {_plural(dtype_bytes, 'byte')} = "
               f"{bpt:,} bytes per token; x {tokens:,} tokens = {format_bytes(per_request)} per request")
    kv_words = WEIGHT_WORDS.get(dtype_bytes, f"{dtype_bytes}-byte numbers")
    name = model_name(spec)
    if past_window:
        verdict = (f"{name} takes at most {context_window:,} tokens (its context window): a request of {tokens:,} "
                   "tokens is past it, so no request this long runs, whatever the memory.")
    elif weights >= share:
        verdict = _weights_verdict(name, weights, weight_bytes, share, device_bytes, utilization, device, gpu)
    elif n == 0:
        verdict = (f"{utilization:.0%} of {_the(device)} is {format_bytes(share)}; minus the weights "
                   f"({format_bytes(weights)}) leaves {format_bytes(budget)} for the KV cache, less than the "
                   f"{format_bytes(per_request)} one request of {tokens:,} tokens needs ({kv_words}): not even one "
                   "request fits.")
    else:
        verdict = (f"{utilization:.0%} of {_the(device)} is {format_bytes(share)}; minus the weights "
                   f"({format_bytes(weights)}) leaves {format_bytes(budget)} for the KV cache ({kv_words}): "
                   f"{_plural(n, 'request')} of {tokens:,} tokens {'fits' if n == 1 else 'fit'} at once "
                   f"({n * tokens:,} tokens in all).")
    return {"model": spec.name, "device": device, "tokens": tokens, "dtype_bytes": dtype_bytes, "weight_bytes": weight_bytes,
            "utilization": utilization, "bytes_per_token": bpt, "per_request": per_request, "device_bytes": device_bytes,
            "share": share, "weights": weights, "kv_budget": budget, "requests": n, "kv_used": n * per_request,
            "formula": formula, "verdict": verdict, "context_window": context_window}


def _plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1.

    >>> _plural(1, "request"), _plural(29, "request"), _plural(2, "byte")
    ('1 request', '29 requests', '2 bytes')
    """
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def min_share(weights: int, device_bytes: int) -> int:
    """The smallest whole percent of ``device_bytes`` whose share (``int(device_bytes x p / 100)``, as
    :func:`capacity_state` takes it) holds more than ``weights``; above 100 when the device cannot.

    >>> min_share(26 * 10**9, 42_949_672_960)   # Llama-2 13B in fp16 on an A100 40GB: 60.5% is not enough
    61
    """
    p = max(1, weights * 100 // device_bytes)
    while p <= 100 and int(device_bytes * (p / 100)) <= weights:
        p += 1
    return p


def _weights_verdict(name: str, weights: int, weight_bytes: int, share: int, device_bytes: int, utilization: float,
                     device: str, gpu: bool) -> str:
    """What to say when the weights leave the KV cache nothing: the share is too small (the device holds
    the weights: raise the share), or the device itself is (more GPUs; on a machine's RAM, no way)."""
    words = WEIGHT_WORDS.get(weight_bytes, f"{weight_bytes}-byte numbers")
    head = f"{name}'s weights ({format_bytes(weights)} in {words})"
    need = min_share(weights, device_bytes)
    if need <= 100:
        return (f"{head} do not fit in {format_bytes(share)}, the {utilization:.0%} of {_the(device)} the server uses: "
                f"no request fits. {_the(device)[0].upper()}{_the(device)[1:]} itself holds them "
                f"({format_bytes(device_bytes)}): raise the share to at least {need}% to leave room for the KV cache.")
    where = "a server splits this model over several GPUs" if gpu else "this machine cannot hold the model at all"
    return f"{head} are more than {_the(device)} holds ({format_bytes(device_bytes)}): no share fits them; {where}."


def _the(device: str) -> str:
    """``device`` with "the" in front, unless it has its own determiner ("this machine's RAM").

    >>> _the("A100 80GB"), _the("this machine's RAM")
    ('the A100 80GB', "this machine's RAM")
    """
    return device if device.split(" ", 1)[0].lower() in ("this", "your", "a", "an") else f"the {device}"


WEIGHT_WORDS = {4: "fp32", 2: "fp16", 1: "fp8"}  # the weights' number format, by bytes a parameter
THIN = 0.05  # weights past the share narrower than this share of the axis get their size written beside them


SLIVER = 1 / 1000  # a part of the bar under this share of it is under a pixel wide (the bar is ~800 px): left out


def _bar_parts(state: dict[str, Any]) -> list[tuple[str, int, str, str]]:
    """The bar's parts, left to right: (legend name, bytes, colour, hatch). Weights past the share are
    hatched up to the device's end, and past it hatched apart (they are more than the device holds)."""
    total, share = state["device_bytes"], state["share"]
    weights = min(state["weights"], share)
    over = min(state["weights"], total) - weights  # weights past the share's edge, up to the device's end
    past = max(0, state["weights"] - total)        # weights past the device's own end
    words = WEIGHT_WORDS.get(state.get("weight_bytes", 2), f"{state.get('weight_bytes')}-byte numbers")
    return [(f"weights ({words})", weights, WEIGHTS, ""),
            (f"weights past the share: {over / 1e9:.1f} GB", over, WEIGHTS, "x"),
            ("weights past the device's end", past, WEIGHTS, "/"),
            (f"KV cache of {_plural(state['requests'], 'request')}", state["kv_used"], request_color("R1"), ""),
            (f"free in the share: {(share - weights - state['kv_used']) / 1e9:.2f} GB", share - weights - state["kv_used"],
             FREE, ""),  # its size named: a sliver may be a pixel wide; short: a classroom legend's half row
            (f"outside the share ({1 - state['utilization']:.0%}: not the server's)", total - share - over, RESERVED, "")]


def _mark_edges(fig: Any, state: dict[str, Any], span: int, th: Any) -> None:
    """Where the share ends (dashed, named above the bar) and, when the weights run past it, where the
    device ends (solid, named on the bar): the title's size is then a line on the bar too."""
    total, share = state["device_bytes"], state["share"]
    edges = []
    if state["weights"] > share and share < total:
        edges.append((share, "dash", f"the share ends: {share / 1e9:.1f} GB", 1, "bottom", None))
    if state["weights"] > total:
        edges.append((total, "solid", f"{html.escape(_the(device_label(state['device'])))} ends: {total / 1e9:.1f} GB",
                      0.5, "middle", "#ffffff"))
    for x, dash, text, y, yanchor, bg in edges:
        fig.add_shape(type="line", x0=x / 1e9, x1=x / 1e9, y0=0, y1=1, yref="paper",
                      line=dict(color="#000000", width=th.line_width + 1, dash=dash))
        left = x < 0.6 * span  # the label reads away from the axis' nearer end, never cut by it
        fig.add_annotation(x=x / 1e9, y=y, yref="paper", yanchor=yanchor, showarrow=False, xanchor="left" if left else "right",
                           xshift=4 if left else -4, text=text, font=dict(size=th.font_size), bgcolor=bg,
                           bordercolor="#000000" if bg else None, borderpad=3 if bg else 0)


def _mark_thin_over(fig: Any, state: dict[str, Any], span: int, th: Any) -> None:
    """Weights past the share that are a sliver of the bar (under :data:`THIN` of it: Llama-2 70B on one
    H200, 2.3 GB of 150.8): an arrow to the hatched part from a boxed label with its size (the legend's
    hatched entry says what it is), on the grey weights; where they are too short for it (under 15% of
    the bar), from the right, low on the bar (the device's end is named at its middle)."""
    share = state["share"]
    over = min(state["weights"], state["device_bytes"]) - min(state["weights"], share)
    if over <= 0 or over >= THIN * span:
        return
    left = share >= 0.15 * span
    fig.add_annotation(x=(share + over / 2) / 1e9, y=0.5 if left else 0.2, yref="paper", showarrow=True, arrowhead=2,
                       arrowwidth=2, ax=-40 if left else 40, ay=0, xanchor="right" if left else "left",
                       text=f"{over / 1e9:.1f} GB", font=dict(size=th.font_size), bgcolor="#ffffff",
                       bordercolor="#000000", borderpad=3)


def capacity_figure(state: dict[str, Any]) -> Any:
    """The device's memory as one horizontal bar (GB): weights, KV of the requests that fit, the rest
    of the server's share, the part left alone (simulated). Weights that do not fit run past the
    share's edge (dashed), and past the device's own end (solid) when they are more than it holds.

    >>> from kvlab.memory.kvspec import GPUS, MODELS
    >>> fig = capacity_figure(capacity_state(MODELS["llama-2-70b"], GPUS["a100-40gb"].memory_bytes, 4096, 2,
    ...                                      device="a100-40gb"))
    >>> [a.text for a in fig.layout.annotations]
    ['the share ends: 38.7 GB', 'the A100 40GB ends: 42.9 GB', '4.3 GB']
    """
    import plotly.graph_objects as go

    th = theme()
    total = state["device_bytes"]
    fig = go.Figure()
    span = max(total, state["weights"])
    for name, size, color, hatch in _bar_parts(state):
        if size < span * SLIVER:  # under a pixel of the bar (or nothing): not drawn, no legend entry either (review
            continue              # r9 of 02: "free in the share: 0.00 GB", weights of 0.27 GB listed on a 301 GB bar)
        # every part drawn is listed, however thin (at most four are: "free in the share" is drawn only
        # when the weights fit, and then nothing is hatched)
        fig.add_trace(go.Bar(y=[""], x=[size / 1e9], orientation="h", name=name, showlegend=True,
                             marker=dict(color=color, line=dict(color="#444444", width=1),
                                         pattern=dict(shape=hatch, fgcolor="#000000", bgcolor="#ffffff") if hatch else None),
                             hovertemplate=f"{html.escape(name)}: %{{x:.2f}} GB<extra></extra>"))
    _mark_edges(fig, state, span, th)
    _mark_thin_over(fig, state, span, th)
    # Fixed pixels, so the legend sits under the axis title at any font size: the bar's height, the
    # axis (ticks and title) and two rows of legend below it. At most four parts are listed, two a row
    # (entrywidth half the figure): the legend is never taller than two rows, so the bar never moves
    # when a menu changes what is listed.
    plot_h, axis_h, legend_h = (90, 60, 60) if not th.high_contrast else (70, 85, 75)  # classroom: the whole
    top = 50 if not th.high_contrast else 60  # control (menus, sliders, this bar) fits a 599 px projector window
    fig.update_layout(
        barmode="stack", plot_bgcolor="white", height=top + plot_h + axis_h + legend_h,  # plotly_white's look: its
        # template=... would deep-copy a whole template per figure (0.15 s; the site's explorer draws ~80)
        autosize=True, font=dict(size=th.font_size),  # the output area's width, in both modes
        title=dict(text=f"{html.escape(device_label(state['device']))}: {total / 1e9:.1f} GB (simulated)", x=0.01,
                   font=dict(size=th.title_size)),
        xaxis=dict(title="GB (10^9 bytes)", range=[0, span / 1e9 * 1.001], gridcolor="#ebf0f8"),
        legend=dict(orientation="h", yanchor="top", y=-axis_h / plot_h, x=0, traceorder="normal",
                    entrywidth=0.5, entrywidthmode="fraction"),
        margin=dict(l=20, r=20, t=top, b=axis_h + legend_h),
    )
    return fig


class CapacityWidget:
    """Menus and sliders over :func:`capacity_state` (see module doc). ``w.state`` is the current
    state; ``w.set(model=..., dtype_bytes=..., device=..., tokens=..., utilization=...)`` moves the controls.

    ``models``: name -> KVSpec (default: kvlab's presets); ``devices``: name -> bytes (default: the GPU
    presets), e.g. ``{"this machine's RAM": 16 * 2**30}`` added by the lesson; ``weight_bytes``:
    device name -> bytes a parameter of the weights there (default 2, fp16; lesson 02 gives this
    machine's RAM the 4 bytes of fp32 kvlab loads models in on a CPU); ``host_devices``: the devices
    that are a machine's RAM, not GPUs (their verdict never speaks of more GPUs); ``context_windows``:
    model name -> its context window (default ``kvspec.CONTEXT_WINDOWS``; a model not in it has none):
    the tokens slider stops there, and the model menu names it.
    """

    def __init__(self, models: dict[str, KVSpec] | None = None, devices: dict[str, int] | None = None,
                 model: str = "llama-3-8b", dtype_bytes: int = 2, device: str = "h200", tokens: int = 4096,
                 utilization: float = 0.9, static: bool | None = None,
                 weight_bytes: dict[str, int] | None = None, host_devices: tuple[str, ...] | list[str] = (),
                 context_windows: dict[str, int] | None = None) -> None:
        self.weight_bytes = dict(weight_bytes or {})
        self.windows = dict(CONTEXT_WINDOWS if context_windows is None else context_windows)
        self.host_devices = set(host_devices)
        self.models = dict(models) if models is not None else dict(MODELS)
        self.devices = dict(devices) if devices is not None else {k: g.memory_bytes for k, g in GPUS.items()}
        for what, key, table in (("model", model, self.models), ("device", device, self.devices)):
            if key not in table:
                raise ValueError(f"{what} must be one of {list(table)}, got {key!r}")
        self.choice = dict(model=model, dtype_bytes=dtype_bytes, device=device, tokens=tokens, utilization=utilization)
        self.static = is_static(static)
        self.widget: Any = None
        self.state = self._compute()
        if not self.static:
            self._build()

    def _compute(self) -> dict[str, Any]:
        c = self.choice
        return capacity_state(self.models[c["model"]], self.devices[c["device"]], c["tokens"], c["dtype_bytes"],
                              c["utilization"], device_label(c["device"]), self.weight_bytes.get(c["device"], 2),
                              gpu=c["device"] not in self.host_devices, context_window=self.windows.get(c["model"]))

    def set(self, **kw: Any) -> None:
        unknown = set(kw) - set(self.choice)
        if unknown:
            raise TypeError(f"set() got unknown argument(s) {sorted(unknown)}")
        if self.widget is None:
            old = dict(self.choice)
            self.choice.update(kw)
            try:
                self.state = self._compute()
            except (ValueError, KeyError):
                self.choice = old
                raise
            return
        for key, value in sorted(kw.items(), key=lambda kv: kv[0] != "model"):  # the model first: it sets the
            self._controls[key].value = value                                      # tokens slider's range

    def _build(self) -> None:
        import ipywidgets as W

        style = {"description_width": "initial"}
        wide = W.Layout(width="min(400px, 100%)")
        # both sliders: one label width (the longer label's), so their tracks start at one x, and a margin
        # that keeps "tokens per request" off the output area's left edge
        slider_style = {"description_width": "17.5em"}
        slider = W.Layout(width="min(660px, 100%)", margin="2px 2px 2px 6px")
        c = self.choice
        window = self.windows.get(c["model"])
        self._wanted_tokens = c["tokens"]  # the length asked for: a model with a longer window gets it back
        if window is not None and c["tokens"] > window:  # the slider stops at the model's window: so does the start
            c["tokens"] = window
            self.state = self._compute()
        self._controls = {
            "model": W.Dropdown(options=[(model_label(s, self.windows.get(k)), k) for k, s in self.models.items()],
                                value=c["model"], description="model", style=style,
                                layout=W.Layout(width="min(660px, 100%)")),  # room for "up to 8,192 tokens"
            "dtype_bytes": W.Dropdown(options=list(DTYPES), value=c["dtype_bytes"], description="KV numbers stored as",
                                      style=style, layout=wide),
            "device": W.Dropdown(options=[(device_label(k), k) for k in self.devices], value=c["device"],
                                 description="device", style=style, layout=wide),
            "tokens": W.SelectionSlider(options=self._token_options(c["model"]), value=c["tokens"],
                                        description="tokens per request", style=slider_style, layout=slider),
            "utilization": W.FloatSlider(value=c["utilization"], min=0.5, max=1.0, step=0.05, readout_format=".0%",
                                         description="share of memory the server uses", style=slider_style,
                                         layout=slider),
        }
        for key, w in self._controls.items():
            w.add_class(f"kvlab-capacity-{key.replace('_', '-')}")
            w.observe(self._changed, names="value")
        self._text = W.HTML()
        self._out = W.Output()
        self._out.add_class("kvlab-figure")
        row = W.Layout(flex_flow="row wrap", max_width="100%")
        ctl = list(self._controls.values())
        # a slider a row: room for its track; the tokens slider in a box of its own, so that renewing it (another
        # model's window) re-renders that box only, never the sentence and the bar under it
        parts = [W.HBox(ctl[:3], layout=row), W.HBox([ctl[3]], layout=row), *ctl[4:], self._text, self._out]
        css = classroom_css("kvlab-capacity")
        if css:
            parts.insert(0, W.HTML(css))
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-capacity")
        self._redraw()

    def _token_options(self, model: str) -> list[tuple[str, int]]:
        """The tokens slider's (label, length) pairs for ``model``: up to its context window."""
        return [(f"{t:,}", t) for t in token_choices(self.windows.get(model), self.choice["tokens"])]

    def _changed(self, change: dict[str, Any]) -> None:
        from .control import renew_slider

        if change.get("owner") is self._controls["model"]:  # another model: the slider stops at its window
            # the length the student last asked for, up to this model's window: after OPT-13B's 2,048
            # tokens, a 4,096-token model is back at 4,096
            window = self.windows.get(change["new"])
            want = min(self._wanted_tokens, window or self._wanted_tokens)
            self.choice["tokens"] = want
            # a NEW slider: the browser's End and Home keys keep the range a slider was made with
            self._controls["tokens"] = renew_slider(self.widget, self._controls["tokens"],
                                                    self._token_options(change["new"]), self._changed, value=want)
        elif change.get("owner") is self._controls["tokens"]:
            self._wanted_tokens = change["new"]
        self.choice = {k: w.value for k, w in self._controls.items()}
        self.state = self._compute()
        self._redraw()

    def _html(self) -> str:
        px = max(theme().font_size + 1, theme().control_px)
        s = self.state
        n = s["requests"]
        head = "No request fits." if n == 0 else f"{_plural(n, 'request')} {'fits' if n == 1 else 'fit'}."
        # Room for the longest text (lines of formula, lines of verdict), so the bar below stays put
        lines = (2, 3) if theme().high_contrast else (1, 2)
        return (f"<div style='font-size:{px}px;line-height:1.45'>"
                f"<p style='margin:4px 0;min-height:{1.45 * lines[0]:.2f}em'><code>{html.escape(s['formula'])}</code></p>"
                f"<p style='margin:4px 0;min-height:{1.45 * lines[1]:.2f}em'><b>{head}</b> {html.escape(s['verdict'])}</p></div>")

    def _redraw(self) -> None:
        from .stepper import figure_output

        self._text.value = self._html()
        self._out.outputs = (figure_output(capacity_figure(self.state)),)

    def __repr__(self) -> str:
        s = self.state
        return (f"<CapacityWidget {s['model']} on {s['device']}, {s['tokens']:,} tokens, {s['dtype_bytes']} bytes: "
                f"{s['bytes_per_token']:,} B/token, {s['requests']:,} requests fit>")

    def _ipython_display_(self) -> None:
        display_control(self.widget, lambda: [self._html(), capacity_figure(self.state)], self._explore)

    def _explore(self) -> str:
        """The site's grid: every model, number format and device at the current request length."""
        from .explorer import explorer_html

        c = dict(self.choice)
        axes = {"model": list(self.models), "dtype_bytes": [b for _, b in DTYPES], "device": list(self.devices)}
        labels = {"model": {k: model_label(s) for k, s in self.models.items()},
                  "dtype_bytes": {b: name for name, b in DTYPES}, "device": {k: device_label(k) for k in self.devices}}
        return explorer_html(self.set, lambda: [self._html(), capacity_figure(self.state)], axes,
                             {k: c[k] for k in axes}, labels)
