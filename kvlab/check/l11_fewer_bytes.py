"""Checkers for lesson 11 (fewer bytes per token): StreamingLLM's kept blocks, Quest's block
choice, int8 quantization with a scale per token and head.

    streaming_keep      which logical blocks StreamingLLM keeps (sinks + recent window)
    quest_pick          Quest's top-k blocks by the upper bound of q.k   (torch)
    quantize_per_token  int8 values and one scale per token and head     (torch)

The expected results come from kvlab's own code (``kvlab.compute.kv_compress.streaming_drop``,
``quest_bounds``, ``kvlab.kernels.reference.quantize_kv_ref``). Each FAIL names the common mistake
when it recognises it: the window kept but the sinks dropped, the blocks picked by q.max or by the
centre instead of the bound, one scale for the whole tensor (or the whole token) instead of one
per token and head. Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> streaming_keep(lambda n, bs, s, w: [], verbose=False).passed
    False
"""
from __future__ import annotations

import random
from typing import Any, Callable

from .diagnose import changed_input, exact_equal, unit_slip
from .harness import Checker, CheckResult, Raised, Raises, call, call_in_place, run_keeping_input

__all__ = ["streaming_keep", "quest_pick", "quantize_per_token"]


# ---------------------------------------------------------------- 1. StreamingLLM

def _streaming_keep_ref(num_tokens: int, block_size: int, sink_tokens: int, window_tokens: int) -> list[int]:
    from ..compute.kv_compress import streaming_drop

    for name, v, lo in (("num_tokens", num_tokens, 0), ("block_size", block_size, 1), ("sink_tokens", sink_tokens, 0),
                        ("window_tokens", window_tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    nb = -(-num_tokens // block_size)
    drop = streaming_drop(nb, num_tokens // block_size, -(-sink_tokens // block_size), -(-window_tokens // block_size))
    return [i for i in range(nb) if i not in drop]


SINKS_IN_WINDOW = ("the sinks do not use up the window's budget: the window covers the newest window_tokens tokens "
                   "whatever the sinks hold, and the sink blocks come on top")

STREAMING_MISTAKES = {
    "window_tokens counts tokens, not blocks: you kept window_tokens whole blocks":
        lambda n, bs, s, w: sorted(set(range(min(-(-s // bs), -(-n // bs)))) | set(range(max(0, -(-n // bs) - w),
                                                                                           -(-n // bs)))),
    "you kept the recent window but dropped the sink blocks: StreamingLLM keeps the first blocks too "
    "(the attention sinks)": lambda n, bs, s, w: list(range(max(0, -(-n // bs) - -(-w // bs)), -(-n // bs))),
    "the sinks were counted with floor: a block that holds any sink token must stay (round up)":
        lambda n, bs, s, w: sorted(set(range(min(s // bs, -(-n // bs)))) |
                                   set(range(max(0, -(-n // bs) - -(-w // bs)), -(-n // bs)))),
    "a block appears twice: when sinks and window overlap (a short sequence), keep each block once":
        lambda n, bs, s, w: list(range(min(-(-s // bs), -(-n // bs)))) +
        list(range(max(0, -(-n // bs) - -(-w // bs)), -(-n // bs))),
    "the window missed the newest (partial) block: count the window back from the last block, "
    "partial or not": lambda n, bs, s, w: sorted(set(range(min(-(-s // bs), -(-n // bs)))) |
                                                 set(range(max(0, n // bs - -(-w // bs)), n // bs))),
    "the window holds one block too many (an extra old block kept before the window)":
        lambda n, bs, s, w: sorted(set(range(min(-(-s // bs), -(-n // bs)))) |
                                   set(range(max(0, -(-n // bs) - -(-w // bs) - 1), -(-n // bs)))),
    "the window was rounded down: a window that covers only part of a block still keeps that whole block "
    "(a budget smaller than a block must keep the newest block)": lambda n, bs, s, w: sorted(
        set(range(min(-(-s // bs), -(-n // bs)))) | set(range(max(0, -(-n // bs) - w // bs), -(-n // bs)))),
    "sink blocks past the end of the sequence: a sequence shorter than the sinks has fewer blocks, keep only "
    "blocks that exist": lambda n, bs, s, w: sorted(set(range(-(-s // bs))) |
                                                    set(range(max(0, -(-n // bs) - -(-w // bs)), -(-n // bs)))),
    "the right blocks in descending order: return them ascending, oldest block first":
        lambda n, bs, s, w: sorted(_streaming_keep_ref(n, bs, s, w), reverse=True),
    "sink_tokens and window_tokens are swapped: the parameters are (num_tokens, block_size, sink_tokens, "
    "window_tokens)": lambda n, bs, s, w: _streaming_keep_ref(n, bs, w, s),
    "those are token positions: return the kept BLOCK indices (a block table keeps or drops whole blocks)":
        lambda n, bs, s, w: [t for b in _streaming_keep_ref(n, bs, s, w) for t in range(b * bs, min(n, (b + 1) * bs))],
    SINKS_IN_WINDOW + " (you counted the sink blocks against the window's blocks)":
        lambda n, bs, s, w: _sinks_then_window(n, bs, s, max(1, -(-w // bs) - min(-(-s // bs), -(-n // bs)))),
    SINKS_IN_WINDOW + " (you gave the window window_tokens - sink_tokens)":
        lambda n, bs, s, w: _sinks_then_window(n, bs, s, -(-max(0, w - s) // bs)),
}


def _sinks_then_window(n: int, bs: int, s: int, window_blocks: int) -> list[int]:
    """The sink blocks and the last ``window_blocks`` blocks, ascending, each once (a mistake's window).

    Example: 30 tokens in blocks of 4, 4 sinks, a window of 1 block -> [0, 7]."""
    nb = -(-n // bs)
    return sorted(set(range(min(-(-s // bs), nb))) | set(range(max(0, nb - window_blocks), nb)))


def _set_slip(expected: Any, actual: Any) -> str | None:
    """A set of the right blocks: the contract asks for a list, ascending (a set has no order)."""
    if isinstance(actual, (set, frozenset)) and isinstance(expected, list) and sorted(actual) == expected:
        return ("returned a set (the right blocks): return a list, ascending (sorted(...) of the set); "
                "a set has no order, and the caller walks the blocks oldest first")
    return None


def streaming_keep(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(num_tokens, block_size, sink_tokens, window_tokens) -> list[int]``: the logical
    blocks StreamingLLM keeps, ascending: the first ``ceil(sink_tokens / block_size)`` blocks and
    the last ``ceil(window_tokens / block_size)`` (the newest, partial block included), each once.
    ValueError for a negative count, a block size below 1 or a window below 1."""
    c = Checker("streaming_keep", fn, reference=_streaming_keep_ref, verbose=verbose, compare=exact_equal,
                diagnose=[_set_slip, unit_slip])

    def run(label, *args):
        return run_keeping_input(c, label, ("num_tokens", "block_size", "sink_tokens", "window_tokens"), *args,
                                 mistakes=STREAMING_MISTAKES)

    run("the lesson's example of section 3: 30 tokens, blocks of 4, 4 sinks, window 8", 30, 4, 4, 8)
    run("sinks smaller than a block: 100 tokens, bs 16, 4 sinks, window 32", 100, 16, 4, 32)
    run("a short sequence: sinks and window overlap (10 tokens, bs 4, 4 + 8)", 10, 4, 4, 8)
    run("a whole number of blocks (64 tokens, bs 16, 16 + 16)", 64, 16, 16, 16)
    run("no sinks at all (sink_tokens 0)", 40, 4, 0, 8)
    run("empty sequence", 0, 4, 4, 8)
    run("one token per block (block_size 1), window of one token", 9, 1, 2, 1)
    run("no sinks, the window covers the whole sequence (keep block 0 too)", 8, 4, 0, 8)
    run("one block only", 3, 4, 4, 8)
    rng = random.Random(11)
    for i in range(6):
        bs = rng.choice([2, 4, 8, 16])
        run(f"random case {i}", rng.randint(1, 300), bs, rng.randint(0, 3 * bs), rng.randint(1, 6 * bs))
    run("window_tokens 0 (must raise ValueError)", 40, 4, 4, 0)
    run("num_tokens -1 (must raise ValueError)", -1, 4, 4, 8)
    run("block_size 0 (must raise ValueError)", 40, 0, 4, 8)
    run("sink_tokens -1 (must raise ValueError)", 40, 4, -1, 8)
    return c.done()


# ---------------------------------------------------------------- 2. Quest

def _quest_pick_ref(q, k_min, k_max, top_k: int) -> list[int]:
    import torch

    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    bound = torch.maximum(q[None] * k_max, q[None] * k_min).sum(-1)       # (num_blocks,)
    order = sorted(range(bound.shape[0]), key=lambda b: (-float(bound[b]), b))
    return sorted(order[:top_k])


def _pick_by(score: Callable) -> Callable:
    def pick(q, k_min, k_max, top_k):
        s = score(q, k_min, k_max)
        return sorted(sorted(range(s.shape[0]), key=lambda b: (-float(s[b]), b))[:top_k])
    return pick


QUEST_MISTAKES = {
    "you ranked blocks by q . max: where q_d < 0 the block's MIN gives the larger product": _pick_by(lambda q, lo, hi: (q[None] * hi).sum(-1)),
    "you ranked blocks by q . (min + max) / 2, the centre: that is not an upper bound, and a block "
    "with one high-scoring key is missed": _pick_by(lambda q, lo, hi: (q[None] * (lo + hi) / 2).sum(-1)),
    "you kept only the largest channel's product: the bound adds up the best product of EVERY channel": _pick_by(
        lambda q, lo, hi: _bound_terms(q, lo, hi).amax(-1)),
    "you ranked blocks by |q| . max|k|: a bound, but a loose one that ignores signs": _pick_by(
        lambda q, lo, hi: (q.abs()[None] * hi.abs().maximum(lo.abs())).sum(-1)),
    "you picked the blocks with the LOWEST bounds": lambda q, lo, hi, k: sorted(sorted(
        range(lo.shape[0]), key=lambda b: (float(_bound(q, lo, hi)[b]), b))[:k]),
    "return the chosen blocks in ascending order, not ranked by bound": lambda q, lo, hi, k: sorted(
        range(lo.shape[0]), key=lambda b: (-float(_bound(q, lo, hi)[b]), b))[:k],
    "on a tie the lower block goes first: you kept the higher-numbered one": lambda q, lo, hi, k: sorted(sorted(
        range(lo.shape[0]), key=lambda b: (-float(_bound(q, lo, hi)[b]), -b))[:k]),
    "rank by the largest bound: the k largest, not the k smallest block indices": lambda q, lo, hi, k: list(
        range(min(k, lo.shape[0]))),
}


def _bound_terms(q, lo, hi):
    import torch

    return torch.maximum(q[None] * hi, q[None] * lo)                      # (num_blocks, head_dim)


def _bound(q, lo, hi):
    return _bound_terms(q, lo, hi).sum(-1)


def _tie_slip(q, lo, hi) -> Callable:
    """The right bounds but other blocks among equal ones (``torch.topk`` returns ties in no promised order)."""
    def diagnose(expected: Any, actual: Any) -> str | None:
        try:
            got = [int(b) for b in actual]
        except (TypeError, ValueError):
            return None
        if not isinstance(expected, list) or len(got) != len(expected) or got == expected:
            return None
        bound = _bound(q, lo, hi)
        if sorted(float(bound[b]) for b in got) == sorted(float(bound[b]) for b in expected):
            return ("the right bounds, but among blocks with EQUAL bounds you kept other ones: the contract keeps the "
                    "lowest-numbered (torch.topk promises no order among equal values: break ties by block number yourself)")
        return None
    return diagnose


def quest_pick(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(q, k_min, k_max, top_k) -> list[int]``: q (head_dim,), k_min/k_max (num_blocks,
    head_dim) float64 tensors; the ``top_k`` blocks with the largest upper bound
    ``sum_d max(q_d * k_max[b, d], q_d * k_min[b, d])``, ascending (ties: the lower block);
    all blocks when top_k >= num_blocks; ValueError for top_k < 1."""
    import torch

    c = Checker("quest_pick", fn, reference=_quest_pick_ref, verbose=verbose, compare=exact_equal, diagnose=[unit_slip])

    def run(label, *args):
        c.diagnose = [_tie_slip(*args[:3]), unit_slip]
        case = run_keeping_input(c, label, ("q", "k_min", "k_max", "top_k"), *args, mistakes=QUEST_MISTAKES)
        if not case.passed and not case.note and isinstance(case.actual, Raised) and args[3] > args[1].shape[0]:
            case.note = (f"top_k {args[3]} is more than the blocks there are ({args[1].shape[0]}): return them all, "
                         "do not raise (torch.topk needs k <= the size: clamp it first)")
        return case

    q = torch.tensor([1.0, -1.0], dtype=torch.float64)
    lo = torch.tensor([[0.0, -3.0], [1.0, 0.0], [-2.0, -1.0]], dtype=torch.float64)
    hi = torch.tensor([[1.0, 3.0], [2.0, 1.0], [0.5, 0.0]], dtype=torch.float64)
    run("by hand: q = [1, -1], three blocks, top 1 (block 0's min of -3 on channel 1 wins)", q, lo, hi, 1)
    for i, (nb, hd, k) in enumerate([(6, 4, 2), (10, 8, 3), (16, 16, 4), (5, 8, 5), (12, 4, 1)]):
        g = torch.Generator().manual_seed(100 + i)
        keys = torch.randn(nb, 4, hd, generator=g, dtype=torch.float64)   # 4 tokens per block
        keys[:, 0] *= torch.rand(nb, 1, generator=g, dtype=torch.float64) * 4   # one outlier key per block
        run(f"random: {nb} blocks of 4 keys, head_dim {hd}, top {k}",
            torch.randn(hd, generator=g, dtype=torch.float64), keys.amin(1), keys.amax(1), k)
    run("top_k larger than the number of blocks", q, lo, hi, 7)
    run("top_k equal to the number of blocks", q, lo, hi, 3)
    tq = torch.tensor([1.0, 1.0], dtype=torch.float64)
    tlo = torch.zeros(4, 2, dtype=torch.float64)
    thi = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.5, 0.5]], dtype=torch.float64)
    run("a tie: blocks 1 and 2 have the same bound, top 1 (the lower block)", tq, tlo, thi, 1)
    run("every channel of q negative: the minima decide", -q.abs(), lo, hi, 2)
    elo, ehi = torch.zeros(8, 2, dtype=torch.float64), torch.ones(8, 2, dtype=torch.float64)
    run("several ties: 8 blocks with the same bound, top 3 (the three lowest blocks)", tq, elo, ehi, 3)
    run("top_k 0 (must raise ValueError)", q, lo, hi, 0)
    return c.done()


# ---------------------------------------------------------------- 3. int8 with a scale per token and head

def _same_quant(expected: Any, actual: Any) -> bool:
    import torch

    if isinstance(expected, (Raised, Raises)) or isinstance(actual, Raised):
        return False
    try:
        xq, s = actual
        return (isinstance(xq, torch.Tensor) and xq.dtype == expected[0].dtype and xq.shape == expected[0].shape
                and torch.equal(xq, expected[0]) and s.shape == expected[1].shape
                and torch.allclose(s.float(), expected[1], rtol=1e-6, atol=0))
    except (TypeError, ValueError, AttributeError):
        return False


def _quant_ref(x):
    from ..kernels.reference import quantize_kv_ref

    return quantize_kv_ref(x)


def _q(x, scale, rounding: str = "half_up", low: int = -127):
    import torch

    s = torch.where(scale > 0, scale, torch.ones_like(scale))
    v = {"even": torch.round, "half_down": lambda y: torch.ceil(y - 0.5),
         "away": lambda y: torch.sign(y) * torch.floor(y.abs() + 0.5)}.get(rounding, lambda y: torch.floor(y + 0.5))(x / s)
    return torch.clamp(v, low, 127).to(torch.int8), s


def _per_head(x, levels: int = 127, rounding: str = "half_up", low: int = -127, top=None):
    """Quantization with one scale per (token, head), ``top / levels`` (``top``: the largest |x| of
    each (token, head) unless given, kept dims), and the given rounding (``_q``); scale (T, H)."""
    top = x.abs().amax(-1, keepdim=True) if top is None else top
    xq, s = _q(x, top / levels, rounding, low)
    return xq, s[..., 0]


def _over(x, dims: tuple[int, ...]):
    """One scale from the max over ``dims`` (a wrong axis), returned expanded to (T, H) as the contract's shape."""
    xq, s = _q(x, x.abs().amax(dims, keepdim=True) / 127)
    return xq, s.expand(x.shape)[..., 0].clone()


def _cost(x, actual) -> str:
    """The measured price of a wrong scale axis on this case: the worst error of a (token, head),
    relative to its own largest value, against the contract's format (at most half of 1/127)."""
    import torch

    xq, s = actual
    err = (xq.float() * s.reshape(*x.shape[:2], 1).float() - x).abs().amax(-1)          # (T, H)
    top = x.abs().amax(-1)
    rel = torch.where(top > 0, err / torch.where(top > 0, top, torch.ones_like(top)), torch.zeros_like(top))
    own = (_quant_ref(x)[0].float() * _quant_ref(x)[1][..., None] - x).abs().amax(-1)
    own_rel = torch.where(top > 0, own / torch.where(top > 0, top, torch.ones_like(top)), torch.zeros_like(top))
    worst = int(rel.flatten().argmax())
    t, h = divmod(worst, x.shape[1])
    return (f" (measured on this case: the worst (token, head), token {t} head {h}, is off by {rel.max().item():.1%} of its "
            f"largest value, against {own_rel.flatten()[worst].item():.2%} with a scale of its own)")


HALF_AWAY = ("-2.5 must go to -2 (upper), not -3: you rounded halves away from zero (as C's round() does); the "
             "format sends a value exactly halfway to the UPPER neighbour, 2.5 -> 3 and -2.5 -> -2")
SIGNED_MAX = ("the scale came from the largest value, not the largest |value| (a negative value "
              "counts by its size): where a (token, head)'s biggest magnitude is negative its scale is too small and that value clips at -127")
ASYMMETRIC = ("an asymmetric range, scale (max - min) / 254: the format is symmetric around 0, the scale comes from "
              "the largest |value| alone and lands it on +-127; with (max - min) a (token, head) whose values lean "
              "to one side gets too small a scale and clips")
OVER_TOKENS = ("the max was taken over the token axis: one scale per (head, channel) shared by every token, so a "
               "quiet token gets a loud token's step; a scale belongs to one (token, head) and sees only "
               "that head's values of that token")

QUANT_MISTAKES = {
    "torch.round sends a value exactly halfway to the EVEN neighbour (2.5 -> 2, 0.5 -> 0); the format rounds "
    "halves up, as kvlab's kernels do": lambda x: _per_head(x, rounding="even"),
    "values exactly halfway went down (2.5 -> 2, 0.5 -> 0): the format sends a halfway value up, to the larger "
    "neighbour": lambda x: _per_head(x, rounding="half_down"),
    "the largest |value| of each (token, head) must land on 127 exactly, the top int8 level used (not 128 or 255)":
        lambda x: _per_head(x, levels=128),
    "the largest |value| must land on +-127: int8 is signed, -127..127, so the scale divides by 127, not 255":
        lambda x: _per_head(x, levels=255),
    "scale must have shape (num_tokens, num_heads): drop the kept head_dim axis":
        lambda x: (_per_head(x)[0], _per_head(x)[1][..., None]),
    "xq must be a torch.int8 tensor (.to(torch.int8)), not floats": lambda x: (
        __import__("torch").clamp(__import__("torch").floor(x / _per_head(x)[1][..., None] + 0.5), -127, 127),
        _per_head(x)[1]),
    "one scale for the whole tensor (the max over every token, head and channel): a token with small values "
    "falls on a few coarse steps next to a large one; each (token, head) needs its own scale":
        lambda x: _over(x, (0, 1, 2)),
    "one scale per token, shared across its heads (the max over heads and channels): a quiet head falls on a few "
    "coarse steps next to a loud one": lambda x: _over(x, (1, 2)),
    "one scale per head over ALL tokens (the max over the token and channel axes): a quiet token falls on a few "
    "coarse steps next to a loud one of the same head; the max belongs to one token's row of one head":
        lambda x: _over(x, (0, 2)),
    "-128 used and the scale divides by 128: int8's -128 has no +128, so the format is not symmetric and a "
    "largest value that is positive cannot land on its level; divide by 127 and keep -127..127":
        lambda x: _per_head(x, levels=128, low=-128),
    HALF_AWAY: lambda x: _per_head(x, rounding="away"),
    SIGNED_MAX: lambda x: _per_head(x, top=x.amax(-1, keepdim=True)),
    ASYMMETRIC: lambda x: _per_head(x, levels=254, top=x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)),
    "values truncated toward zero (.to(torch.int8) alone): round to the nearest first":
        lambda x: ((x / _q(x, x.abs().amax(-1, keepdim=True) / 127)[1]).to(__import__("torch").int8),
                   _q(x, x.abs().amax(-1, keepdim=True) / 127)[1][..., 0]),
}


def _quant_diagnosis(x):
    def diagnose(expected, actual):
        for message, wrong in QUANT_MISTAKES.items():
            try:
                if _same_quant(wrong(x), actual):
                    return message + (_cost(x, actual) if "coarse steps" in message else "")
            except Exception:
                continue
        structural = _design_slip(x, actual)
        if structural:
            return structural
        try:
            if bool((actual[0] == -128).any()):
                return ("-128 used: the format is symmetric, -127..127 (int8's -128 has no +128 partner); the "
                        "largest |x| of each (token, head) lands on +-127")
        except (TypeError, AttributeError, IndexError):
            pass
        if not isinstance(actual, Raised):
            try:
                if tuple(actual[1].shape) == (x.shape[0], x.shape[2]) != tuple(x.shape[:2]):
                    return ("the max was taken over the heads axis: your scale has one value per head_dim channel, "
                            "shared by the heads; a scale belongs to one (token, head)")
            except (TypeError, AttributeError, IndexError):
                pass
            try:
                if bool(actual[1].isnan().any()) or bool((actual[1] == 0).any()):
                    return "an all-zero head gives scale 0 (and 0/0 = NaN): use scale 1 there"
            except (TypeError, AttributeError, IndexError):
                pass
        return None
    return diagnose


def _design_slip(x, actual) -> str | None:
    """A wrong design read off the answer itself, whatever its rounding or clamp: xq quantized with
    a scale per (head, channel) over the tokens, or a scale of the signed max or of (max - min)."""
    import torch

    try:
        xq, s = actual
        if tuple(s.shape) == tuple(x.shape[1:]) != tuple(x.shape[:2]) or torch.equal(
                xq, _q(x, x.abs().amax(0, keepdim=True) / 127)[0]):
            return OVER_TOKENS
        if tuple(s.shape) != tuple(x.shape[:2]):
            return None
        for message, top in ((SIGNED_MAX, x.amax(-1)), (ASYMMETRIC, (x.amax(-1) - x.amin(-1)) / 2)):
            want = torch.where(top > 0, top / 127, torch.ones_like(top))
            if not torch.allclose(want, _quant_ref(x)[1]) and torch.allclose(s.float(), want, rtol=1e-5, atol=0):
                return message
    except (TypeError, ValueError, AttributeError, IndexError, RuntimeError):
        return None
    return None


class _Shown(tuple):
    """An (xq, scale) pair that prints one element, where expected and actual first differ (two
    cut-off tensor reprs look the same); it is the pair in every other way.

    Example: ``xq[1, 0, 3] = 27 (scale[1, 0] = 0.0121)`` beside ``xq[1, 0, 3] = 26 (scale[1, 0] = 0.0126)``."""

    text = ""

    def __repr__(self) -> str:
        return self.text or tuple.__repr__(self)


def _at(pair, where: tuple[int, ...]) -> str:
    xq, s = pair
    i = ", ".join(map(str, where))
    ts = ", ".join(map(str, where[:2]))
    scale = f"scale[{ts}] = {s[where[:2]].item():.4g}" if tuple(s.shape) == tuple(xq.shape[:2]) else \
        f"scale of shape {tuple(s.shape)}"
    v = xq[where].item()
    return f"xq[{i}] = {v:g} ({scale}; xq {str(xq.dtype).replace('torch.', '')} {tuple(xq.shape)})"


def _shown(expected, actual) -> tuple[Any, Any]:
    """``expected`` and ``actual`` as :class:`_Shown` pairs that print their first difference (the
    answer as it is when it is not a pair of tensors of the expected shape)."""
    import torch

    try:
        (xe, se), (xa, sa) = expected, actual
        if not all(isinstance(t, torch.Tensor) for t in (xe, se, xa, sa)) or xa.shape != xe.shape:
            return expected, actual
    except (TypeError, ValueError):
        return expected, actual
    e, a = _Shown(expected), _Shown(actual)
    off = (xa.double() != xe.double()).nonzero()
    if len(off):
        where = tuple(int(v) for v in off[0])
        e.text, a.text = _at(expected, where), _at(actual, where)
    elif sa.shape == se.shape and not torch.allclose(sa.double(), se.double(), rtol=1e-6, atol=0):
        where = tuple(int(v) for v in (~torch.isclose(sa.double(), se.double(), rtol=1e-6, atol=0)).nonzero()[0])
        e.text, a.text = f"scale[{', '.join(map(str, where))}] = {se[where].item():.6g}", \
            f"scale[{', '.join(map(str, where))}] = {sa[where].item():.6g} (every xq right)"
    elif xa.dtype == xe.dtype and sa.shape == se.shape:
        e.text = f"xq int8 {tuple(xe.shape)} and scale {tuple(se.shape)}"
        a.text = "the same values as expected"
    return e, a


def quantize_per_token(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(x) -> (xq, scale)``: x (num_tokens, num_heads, head_dim) float32; one scale per
    (token, head), shape (num_tokens, num_heads), 1 for a head of zeros; xq torch.int8, symmetric,
    the largest |x| of each (token, head) on +-127, every value on the nearest level with halves
    going up; x unchanged; ValueError for a tensor that is not 3-D. Expected: ``quantize_kv_ref``."""
    import torch

    c = Checker("quantize_per_token", fn, compare=_same_quant, verbose=verbose)
    cases = []
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 2, 8, generator=g)
    x[0] *= 100                                                            # one loud token
    cases.append(("6 tokens, 2 heads, one token 100x louder", x))
    x = torch.randn(4, 3, 16, generator=g)
    x[:, 1] *= 0.01                                                        # one quiet head
    cases.append(("4 tokens, 3 heads, head 1 100x quieter", x))
    x = torch.randn(3, 1, 4, generator=g)
    x[1] = 0.0
    cases.append(("an all-zero token (scale must be 1, not 0)", x))
    x = torch.tensor([[[127.0, 2.5, -2.5, 0.5, -0.5, 1.5, 3.5, -126.5]]])   # scale 1: values exactly halfway
    cases.append(("scale 1 and values exactly halfway (2.5, -2.5, 0.5...): halves round up", x))
    for i, shape in enumerate([(1, 1, 1), (9, 4, 32), (2, 8, 64)]):
        cases.append((f"random {shape}", torch.randn(*shape, generator=g) * (i + 1) * 3))
    for label, x in cases:
        expected = _quant_ref(x)
        if c.unusable(label, expected):
            continue
        c.diagnose = [_quant_diagnosis(x)]
        mine = x.clone()
        got = call_in_place(fn, mine)
        changed = changed_input((x,), (mine,), ("x",))
        c.record(label, *_shown(expected, got), passed=False if changed else None, note=changed or "")
    bad = torch.randn(4, 8)
    c.diagnose = []
    got = call(fn, bad)
    ok = isinstance(got, Raised) and isinstance(got.exc, ValueError)
    c.record("a 2-D tensor (must raise ValueError)", Raises(ValueError), got, passed=ok,
             note="" if ok else "x is not 3-D: " + ("it raised " + type(got.exc).__name__ if isinstance(got, Raised) else
                                                    "it came back quantized") +
             "; check the shape first and raise ValueError for any x other than (num_tokens, num_heads, head_dim)")
    return c.done()
