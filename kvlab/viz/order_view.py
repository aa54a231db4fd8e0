"""Lesson 08's section 5 picture: the order each queue policy serves the same waiting requests in.

:func:`orders_html` draws one row per policy (FCFS, lpm, dfs-weight...), the requests left to
right in the order served, each box coloured by the cached prefix its match runs through (the
first token of that match: the ``[1 2 ...]`` subtree in one colour, ``[9 9 9 ...]`` in another, a
request with nothing cached light grey) and labelled with its tokens and how many of them are
cached; a key under the title names each colour. The prefix colours (``PREFIX_COLORS``: tan,
yellow) are none of lesson 08's policy or order colours. Beside each row: how many times the order
changes from one cached prefix to another (a request with nothing cached is skipped: it needs no
prefix kept), the count a cache-aware order makes small (each change can push the other prefix out
of a full pool). Plain
HTML (a table), so it fits any output width and its text grows with classroom mode.

Everything comes from the arguments (the lesson's queue, ``shared_prefix_lengths`` and
``order_by_shared_prefix``); nothing is recomputed. Mirrors no vLLM or SGLang file (SGLang's
``SchedulePolicy`` orders).

Example:
    >>> q = [[1, 2], [9, 9], [1, 3]]
    >>> prefix_changes([[1, 2], [9, 9], [1, 3]], {0: 1, 1: 2, 2: 1}, q)
    2
    >>> prefix_changes([[1, 2], [5], [1, 3]], {0: 1, 1: None, 2: 1}, [[1, 2], [5], [1, 3]])   # [5]: nothing cached
    0
    >>> "2 changes of prefix" in orders_html(q, [1, 2, 1], {"fcfs": q})
    True
"""
from __future__ import annotations

import html
from typing import Mapping, Sequence

from .palette import FREE, theme

__all__ = ["orders_html", "prefix_changes", "PREFIX_COLORS"]

# The cached prefixes' colours: tan and yellow, none of lesson 08's policy colours (LRU orange, LFU purple,
# fewest-tokens cyan, FCFS pink, cache-aware olive) nor a radix state (hit green, miss blue, free grey).
PREFIX_COLORS: tuple[str, ...] = ("#c49c94", "#ffd92f", "#9edae5", "#dbdb8d")


def _group(request: Sequence[int], cached: int) -> int | None:
    """The cached prefix a request's match runs through (its first token), None when nothing is cached."""
    return request[0] if cached else None


def _index(queue: Sequence[Sequence[int]], request: Sequence[int]) -> int:
    """Where ``request`` stands in ``queue``: the same object, else the first equal one."""
    found = next((i for i, q in enumerate(queue) if q is request), None)
    return [list(q) for q in queue].index(list(request)) if found is None else found


def prefix_changes(order: Sequence[Sequence[int]], groups: Mapping[int, int | None],
                   queue: Sequence[Sequence[int]]) -> int:
    """How many neighbours in ``order`` run through different cached prefixes (``groups``: the queue
    index of a request -> its group, None when nothing is cached; such a request is skipped, as it
    needs no prefix kept; a request is found in ``queue`` by identity, then by value)."""
    g = [x for x in (groups[_index(queue, r)] for r in order) if x is not None]
    return sum(a != b for a, b in zip(g, g[1:]))


def orders_html(queue: Sequence[Sequence[int]], cached: Sequence[int], orders: Mapping[str, Sequence[Sequence[int]]],
                source: str = "simulated") -> str:
    """One row per policy of ``orders`` (policy -> the queue's requests in the order served), each request
    a coloured box (see module doc); ``cached[i]``: the cached prefix length of ``queue[i]``."""
    if len(cached) != len(queue):
        raise ValueError(f"cached has {len(cached)} lengths for {len(queue)} requests")
    th = theme()
    px = th.font_size + (3 if th.high_contrast else 1)
    groups = {i: _group(r, c) for i, (r, c) in enumerate(zip(queue, cached))}
    colours = {g: PREFIX_COLORS[k % len(PREFIX_COLORS)]
               for k, g in enumerate(dict.fromkeys(g for g in groups.values() if g is not None))}
    rows = []
    for policy, order in orders.items():
        cells = []
        for r in order:
            i = _index(queue, r)
            fill = colours.get(groups[i], FREE)
            cells.append(f"<td style='background:{fill};color:#000;border:2px solid #444;padding:3px 4px;"
                         f"white-space:nowrap;text-align:center'><b>{html.escape(' '.join(map(str, r)))}</b>"
                         f"<br>{cached[i]} cached</td>")
        n = prefix_changes(order, groups, queue)
        rows.append(f"<tr><th style='text-align:left;padding-right:6px;white-space:nowrap'>{html.escape(policy)}"
                    f"<br><span style='font-weight:normal'>{n} change{'' if n == 1 else 's'} of prefix</span></th>"
                    f"{''.join(cells)}</tr>")
    title = (f"<b>The order each policy serves the waiting requests in ({html.escape(source)})</b>: left to right; "
             "a colour is the cached prefix a request's match runs through; a change of prefix is counted between "
             "two cached prefixes (the grey request, nothing cached, is skipped)")
    return (f"<div class='kvlab-orders' style='font-size:{px}px;line-height:1.35;max-width:100%'>"
            f"<p style='margin:4px 0'>{title}</p><p style='margin:4px 0'>{_key(queue, cached, groups, colours)}</p><table style='border-collapse:separate;border-spacing:4px'>"
            f"{''.join(rows)}</table></div>")


def _key(queue: Sequence[Sequence[int]], cached: Sequence[int], groups: Mapping[int, int | None],
         colours: Mapping[int, str]) -> str:
    """The picture's key: a swatch per cached prefix, labelled with the cached tokens its requests
    share (``[1 2 ...]``), and the grey of a request with nothing cached."""
    def swatch(fill: str, label: str) -> str:
        return (f"<span style='display:inline-block;background:{fill};color:#000;border:2px solid #444;"
                f"padding:0 6px;margin-right:10px;white-space:nowrap'>{html.escape(label)}</span>")
    items = []
    for g, fill in colours.items():
        heads = [list(queue[i][:cached[i]]) for i, x in groups.items() if x == g]
        n = next((k for k in range(min(map(len, heads))) if len({h[k] for h in heads}) > 1), min(map(len, heads)))
        items.append(swatch(fill, f"[{' '.join(map(str, heads[0][:n]))} …] cached"))
    if any(x is None for x in groups.values()):
        items.append(swatch(FREE, "nothing cached"))
    return "key: " + "".join(items)
