"""Reading measured decode-step times beside counted FLOPs (lesson 01): what the numbers of one run show.

    along_the_lines     which moves along a line of step times are the model (its FLOPs grew) and which the machine
    fixed_and_growing   a step's time split into a fixed per-step cost and a part that grows with its FLOPs
    why_time_grew_less  the sentences lesson 01 prints from that split, when time grew less than the FLOPs
    growth_verdict      the sweep's verdict (the two paths side by side) and its time-against-FLOPs margin

Every sentence is chosen by the numbers it is given, so it holds on whatever machine ran the steps:
a rise the FLOPs explain is called the model, a move they do not explain the machine, and a busy
machine is named only when the run shows one (a step that got faster with twice the FLOPs).

Not handled here: timing (the lesson times the steps), more than two paths, fits (the lesson fits
its median lines itself). Mirrors no vLLM or SGLang file (a lesson's reading of its own run).

Example:
    >>> s = [dict(L=32, naive_ms=2.9, cached_ms=1.93, naive_flops=81_821_696),
    ...      dict(L=1024, naive_ms=49.76, cached_ms=2.51, naive_flops=3_658_481_664)]
    >>> p = fixed_and_growing(s)
    >>> round(p["fixed_share"], 2), round(p["growing_x"], 1)
    (0.67, 48.7)
"""
from __future__ import annotations

import math
import statistics
from typing import Sequence

__all__ = ["along_the_lines", "fixed_and_growing", "why_time_grew_less", "growth_verdict", "FLOPS_BAND"]

FLOPS_BAND = 2.0  # the time's growth "within a factor of two" of the FLOPs': runs on a busy machine stay inside it


def _halves(values: Sequence[float]) -> float:
    """The median of the second half of ``values`` over the median of the first (an odd middle one
    goes to the second half). Example: ``_halves([1, 1, 2, 2]) -> 2.0``."""
    half = len(values) // 2
    return statistics.median(values[half:]) / statistics.median(values[:half])


def _one_line(name: str, times: Sequence[float], flops: Sequence[int], runs_apart: float) -> str:
    """One line's sentence. Its rise is the model when the counted FLOPs grew by more than 2% and the
    time rose between half and twice as much (on a log scale); a rise past twice is partly the
    machine; any other move (a fall, or a rise with flat FLOPs) is the machine's. Example: a naive
    line x1.14 up with FLOPs x1.25 -> '... that rise is what its FLOPs predict: the model ...'."""
    rise_t, rise_f = _halves(times), _halves(flops)
    wander, grown = max(times) / min(times), flops[-1] / flops[0]
    rose = (f"the {name} step's time {'rose' if rise_t > 1 else 'fell'} x{max(rise_t, 1 / rise_t):.2f} from the first "
            "half of the positions to the second (medians)")
    noise = f"the same step, run against run, differed by up to x{runs_apart:.2f}"
    share = math.log(rise_t) / math.log(rise_f) if rise_f > 1.02 else 0.0
    if 0.5 <= share <= 2:
        return (f"{rose}, its counted FLOPs x{rise_f:.2f}: that rise is what its FLOPs predict, the model (each "
                "step has more to do)" + (f"; {noise}, so this run alone does not prove it" if runs_apart > rise_t
                                          else ""))
    if share > 2:
        return (f"{rose}, more than its counted FLOPs' x{rise_f:.2f} explain: part of that rise is the model, the "
                f"rest the machine ({noise})")
    lost = rise_f > 1.02 and grown < runs_apart   # a growth smaller than the spread of one step's timings
    return (f"{rose} and moved x{wander:.2f} between its lowest and highest point, while its counted FLOPs grew "
            f"only x{grown:.3f}: " + (f"a growth that small is lost in the machine's noise ({noise}), so the moves "
                                      "along the line are the machine, not the model" if lost else
                                      f"those moves are the machine ({noise}), not the model"))


def along_the_lines(times: dict[str, Sequence[float]], flops: dict[str, Sequence[int]], runs_apart: float,
                    names: dict[str, str] | None = None) -> list[str]:
    """One sentence per line of step times (``times[key]``: the minimum of the runs at each position,
    ``flops[key]``: the counted FLOPs of the same steps): whether its rise is the model or its moves the
    machine (:func:`_one_line`). ``runs_apart``: the largest ratio between two timings of one step.
    Example: ``along_the_lines({"naive": [.11, .11, .13, .13]}, {"naive": [40, 41, 50, 51]}, 1.1)``
    -> ``["the naive step's time rose x1.18 ... that rise is what its FLOPs predict, the model ..."]``."""
    names = names or {}
    return [_one_line(names.get(k, k), times[k], flops[k], runs_apart) for k in times]


def fixed_and_growing(sweep: Sequence[dict]) -> dict:
    """Split each naive step of a sweep (rows with ``L``, ``naive_ms``, ``cached_ms``, ``naive_flops``;
    :func:`why_time_grew_less` also reads ``cached_flops``)
    into a fixed per-step cost, taken as the cached step's time at the same context (it runs one token:
    what is left is the cost of a step whatever its FLOPs), and the rest, which grows with the FLOPs.
    Returns ``fixed_share`` (the cached step's share of the naive step at the shortest context),
    ``growing_x`` (how much the rest grew from the first row whose rest is positive to the last),
    ``flops_x`` (the naive FLOPs' growth over the same rows), ``rates`` (GFLOP/s of the rest at those
    two rows) and ``first`` / ``last`` (the rows). See the module's example."""
    rest = [r["naive_ms"] - r["cached_ms"] for r in sweep]
    i = next((i for i, x in enumerate(rest) if x > 0), None)
    last, fixed = sweep[-1], sweep[0]["cached_ms"] / sweep[0]["naive_ms"]
    if i is None or i == len(sweep) - 1:
        return dict(fixed_share=fixed, growing_x=None, flops_x=None, rates=None, first=sweep[0], last=last)
    first = sweep[i]
    return dict(fixed_share=fixed, growing_x=rest[-1] / rest[i],
                flops_x=last["naive_flops"] / first["naive_flops"], first=first, last=last,
                rates=(first["naive_flops"] / rest[i] / 1e6, last["naive_flops"] / rest[-1] / 1e6))


def why_time_grew_less(sweep: Sequence[dict]) -> list[str]:
    """Why the naive step's time grew less than its FLOPs, from the sweep's own numbers: a fixed
    per-step cost (:func:`fixed_and_growing`) plus a part that grows with the FLOPs, and how closely
    that part followed them. Example: the module's two rows -> ['  Why less: ... the cached step ...
    already takes 1.93 ms of the naive step's 2.90 ms ...', '  Take it off ... x48.7 ... x44.7 ...']."""
    p = fixed_and_growing(sweep)
    s0 = sweep[0]
    out = [f"  Why less: every step has a fixed cost, whatever its FLOPs (Python, the framework, the output "
           f"layer). The cached step runs one token, {s0['cached_flops'] / s0['naive_flops']:.0%} of the naive "
           f"step's FLOPs at L = {s0['L']}, yet it takes {s0['cached_ms']:.2f} ms of the naive step's "
           f"{s0['naive_ms']:.2f} ms there ({p['fixed_share']:.0%}): the fixed cost is most of a short step, and it "
           "does not grow with the context."]
    if p["growing_x"] is None:
        return out + ["  Take that fixed cost off and nothing is left to grow: on this run the naive step never took "
                      "longer than the cached one, so the measured times cannot show the FLOPs here."]
    a, b = p["first"], p["last"]
    ratio = p["growing_x"] / p["flops_x"]
    how = ("about as much: time = a fixed part + a part that grows with the FLOPs" if 1 / 1.5 < ratio < 1.5 else
           f"{'less' if ratio < 1 else 'more'} than them, so beyond the fixed cost this CPU also ran the longer steps "
           f"at a {'higher' if ratio < 1 else 'lower'} rate")
    return out + [f"  Take it off (the cached step's time at each L) and the rest of the naive step grew "
                  f"x{p['growing_x']:.1f} from L = {a['L']} to {b['L']}, its FLOPs x{p['flops_x']:.1f}: {how} (that "
                  f"part ran at {p['rates'][0]:.0f} GFLOP/s at L = {a['L']} and {p['rates'][1]:.0f} at L = {b['L']}: "
                  "counted FLOPs / measured ms)."]


def growth_verdict(span: float, time_x: dict[str, float], flops_x: dict[str, float]) -> dict:
    """Lesson 01's sweep verdict, worded so that it holds on a busy machine: how much more the naive
    step's time grew with the context than the cached step's (both timed in the same passes, so a busy
    spell slows both), and, as a margin, the naive time's growth over its counted FLOPs' growth, named
    only as within :data:`FLOPS_BAND` of it, more or less (that ratio moves from run to run; the band
    does not, unless the machine is far off). ``time_x``/``flops_x``: ``{"naive": x, "cached": x}``.
    Returns ``grows`` (the naive step grew > 3x and > 2x the cached one), ``apart`` (the ratio of the
    two growths), ``per_flop`` (the naive time's growth / its FLOPs'), ``band`` ("within", "more",
    "less") and the sentences ``verdict`` (<= 76 characters) and ``margin``.

    Example (32x the context; the three runs the reviews saw grew x77.3, x20.6 and x39.4):
        >>> [growth_verdict(32, {"naive": t, "cached": 1.3}, {"naive": 44.7, "cached": 1.78})["grows"]
        ...  for t in (77.3, 20.6, 39.4)]
        [True, True, True]
        >>> growth_verdict(32, {"naive": 39.4, "cached": 1.32}, {"naive": 44.7, "cached": 1.78})["verdict"]
        "verdict (measured): 32x the context: naive step's time x39, cached x1.3"
    """
    n, c = time_x["naive"], time_x["cached"]
    grows = n > 3 and n > 2 * c
    per_flop = n / flops_x["naive"]
    band = "within" if 1 / FLOPS_BAND <= per_flop <= FLOPS_BAND else "more" if per_flop > 1 else "less"
    verdict = f"verdict (measured): {span:.0f}x the context: naive step's time x{n:.0f}, cached x{c:.1f}"
    words = {"within": f"within a factor of {FLOPS_BAND:g} of", "more": f"more than {FLOPS_BAND:g}x",
             "less": f"less than 1/{FLOPS_BAND:g} of"}[band]
    margin = (f"  against the FLOPs: the naive step's time grew x{n:.1f}, its counted FLOPs x{flops_x['naive']:.1f} "
              f"({per_flop:.2f} of it: {words} what the FLOPs predict); the cached step's x{c:.2f}, its FLOPs "
              f"x{flops_x['cached']:.2f}. That ratio moves from run to run on a busy machine (the short steps are "
              "disturbed most); the counted FLOPs do not, nor does the verdict")
    return {"grows": grows, "apart": n / c, "per_flop": per_flop, "band": band, "verdict": verdict,
            "margin": margin + "."}
