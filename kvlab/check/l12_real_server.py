"""Checkers for lesson 12 (a real server): read the tree on the dashboard, route like SGLang's router.

    predict_cached_tokens   ``cached_tokens`` of the next request, from the tree the dashboard shows
    choose_worker           the worker SGLang's cache-aware router sends a request to
    router_flags            the command-line flags that pin that policy and its thresholds

``predict_cached_tokens``: every case is a tree grown by serving requests through the server's own
request cycle (:class:`kvlab.reuse.cache_manager.CacheManager`, page sizes 1, 2 and 4), sometimes
with a branch evicted a moment ago (drawn as a ghost, ``evicted: True``), and the expected number
is what that cycle admits the next prompt with: the ``usage.prompt_tokens_details.cached_tokens``
a kvlab server answers (the lesson also passes the cases it saw on its own server, ``live=``).
``choose_worker``: kvlab's reading of the policy of sglang-router 0.3.2 (``--policy cache_aware``,
defaults ``--cache-threshold 0.3``, ``--balance-abs-threshold 64``, ``--balance-rel-threshold
1.5``), over the texts each worker was sent. ``router_flags``: each flag name is looked up in the
installed sglang-router's own argument parser (:func:`kvlab.serve.router.router_options`), so a
misspelt or invented flag is named. Each FAIL names the usual mistake when the answer is
exactly what that mistake gives. Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> predict_cached_tokens(lambda nodes, prompt, page_size: 0, verbose=False).passed
    False
"""
from __future__ import annotations

import difflib
import random
from typing import Any, Callable, Sequence

from ..reuse.cache_manager import CacheManager, serve_request
from ..serve.dashboard import evicted_nodes, tree_nodes
from ..serve.router import router_options
from .harness import Checker, CheckResult, Raised, call, run_keeping_input, same_int

__all__ = ["predict_cached_tokens", "choose_worker", "router_flags", "cached_by_rule", "route_by_rule",
           "CACHE_THRESHOLD", "BALANCE_ABS", "BALANCE_REL", "ROUTER_FLAGS"]

CACHE_THRESHOLD, BALANCE_ABS, BALANCE_REL = 0.3, 64, 1.5     # sglang-router 0.3.2's defaults
ROUTER_FLAGS = {"--policy": "cache_aware", "--cache-threshold": CACHE_THRESHOLD,
                "--balance-abs-threshold": BALANCE_ABS, "--balance-rel-threshold": BALANCE_REL}


# ------------------------------------------------------------------ predict_cached_tokens
def cached_by_rule(nodes: list[dict], prompt: list[int], page_size: int, *, cap: bool = True, pages: bool = True,
                   ghosts: bool = False, partial: bool = True, walk_page: int = 0, slip: str = "") -> int:
    """The answer with each rule on or off (every ``False`` is a mistake a FAIL names): walk the
    live nodes from the root along ``prompt``; ``cap``: at most ``len(prompt) - 1``; ``pages``: whole
    pages only; ``ghosts``: walk evicted nodes too; ``partial``: count a node matched part-way;
    ``walk_page``: a mistake, a child followed only when its first ``walk_page`` ids are the
    prompt's next ones (a walk by pages of a constant size). ``slip``: one more mistake by name
    (:data:`CACHED_SLIPS`)."""
    kids: dict[int, list[dict]] = {}
    for n in nodes:
        if ghosts or not n["evicted"]:
            kids.setdefault(n["parent"], []).append(n)
    node_id, pos = 0, 0
    while pos < len(prompt):
        step = None
        for child in kids.get(node_id, []):                  # page > 1: children may share a partial first page
            ids, k = child["ids"], 0
            if walk_page and list(ids[:walk_page]) != list(prompt[pos:pos + walk_page]):
                continue
            while k < len(ids) and pos + k < len(prompt) and ids[k] == prompt[pos + k]:
                k += 1
            if k and (step is None or k > step[1]) and not (slip == "first_child" and step):
                step = (child, k)
        if step is None:
            break
        child, k = step
        if k < len(child["ids"]) and slip != "walk_on":
            pos += k if partial else 0
            break
        node_id, pos = child["id"], pos + k
    if slip == "round_first":
        return min(pos // page_size * page_size, max(0, len(prompt) - 1))
    if slip == "minus_one":                                  # a mistake: 1 off every match, not a cap
        pos = max(pos - 1, 0)
    elif cap:
        pos = min(pos, max(0, len(prompt) - 1 - (slip == "cap_2")))
    if slip in ("ceil", "pages"):
        return -(-pos // page_size) * page_size if slip == "ceil" else pos // page_size
    return pos // page_size * page_size if pages else pos


def _rule(**kw) -> Callable:
    return lambda nodes, prompt, page_size: cached_by_rule(nodes, prompt, page_size, **kw)


CACHED_MISTAKES = dict([
    ("the two limits in the wrong order: your answer can end part-way into a page, which the server never "
     "reports (try a prompt the tree holds whole, as Hint 3 says)", _rule(slip="round_first")),
    ("with pages two children can share a first token: follow the child that matches the MOST tokens, not the "
     "first one that matches", _rule(slip="first_child")),
    ("a match that ends inside a node stops there: the rest of the prompt cannot go on into that node's "
     "children", _rule(slip="walk_on")),
    ("only the last prompt token is always computed: at most len(prompt) - 1 tokens are cached, not "
     "len(prompt) - 2", _rule(slip="cap_2")),
    ("round the match DOWN to whole pages (floor): a partly matched page is computed again, not cached",
     _rule(slip="ceil")),
    ("return the cached TOKENS (whole pages x page_size), not the number of pages", _rule(slip="pages")),
    ("one token was taken off every match: the last prompt token is computed only when the tree holds the WHOLE "
     "prompt, so cap the match at len(prompt) - 1 instead of subtracting 1 from it", _rule(slip="minus_one")),
    ("the last prompt token is always computed (its logits give the first output token): at most "
     "len(prompt) - 1 tokens are cached", _rule(cap=False)),
    ("the tree caches whole pages: round the match down to a multiple of page_size", _rule(pages=False)),
    ("a node drawn as a ghost (evicted: True) was evicted a moment ago: its tokens are gone, the match "
     "stops before it", _rule(ghosts=True)),
    ("a match may end inside a node: count the tokens of that node that match", _rule(partial=False)),
    ("that is the number of prompt tokens the server COMPUTES (the rest of the prompt): cached_tokens counts "
     "the ones it found in the tree", lambda nodes, prompt, ps: len(prompt) - cached_by_rule(nodes, prompt, ps)),
    *((f"hard-coded page size {p}? your answer rounds to pages of {p} whatever page_size says (the cases use "
       f"pages of 1, 2 and 4): use the argument", lambda nodes, prompt, ps, p=p: cached_by_rule(nodes, prompt, p))
      for p in (2, 4, 8, 16)),                               # a constant 1 is "no page floor", named above
    *((f"hard-coded page size {p}? your answer walks the tree in pages of {p} and rounds to them whatever "
       f"page_size says (the cases use pages of 1, 2 and 4): use the argument in both places",
       lambda nodes, prompt, ps, p=p: cached_by_rule(nodes, prompt, p, walk_page=p))
      for p in (2, 4)),                 # walking by pages of 8 or 16 finds nothing in these trees: no name
])


def _grow(rng: random.Random, page_size: int, num_seqs: int, alphabet: int) -> tuple[CacheManager, list[list[int]]]:
    cm, seqs = CacheManager(num_blocks=256, block_size=page_size), []
    for i in range(num_seqs):
        base = rng.choice(seqs) if seqs and rng.random() < 0.7 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(alphabet) for _ in range(rng.randint(2, 9))]
        serve_request(cm, s, output=[rng.randrange(alphabet) for _ in range(rng.randint(0, 3))], rid=f"R{i}")
        seqs.append(s)
    return cm, seqs


def _queries(rng: random.Random, seqs: list[list[int]], alphabet: int) -> list[list[int]]:
    out = []
    for _ in range(4):
        s = rng.choice(seqs)
        cut = rng.randint(1, len(s))
        out.append(s[:cut] + [rng.randrange(alphabet) for _ in range(rng.randint(0, 3))])
    return out + [list(rng.choice(seqs))]                     # a prompt the tree holds whole


def _cases(rng: random.Random) -> list[tuple[str, CacheManager, list[dict], list[list[int]]]]:
    """(name, manager, nodes shown, prompts): hand-made trees, then random ones, some with a branch
    just evicted (its nodes kept as ghosts)."""
    out = []
    cm = CacheManager(num_blocks=64, block_size=4)
    serve_request(cm, [1, 2, 3, 4, 5, 6, 7, 8], output=[9, 10], rid="R1")
    serve_request(cm, [1, 2, 3, 4, 11, 12], rid="R2")
    out.append(("page 4, two branches after [1 2 3 4]", cm, tree_nodes(cm.tree),
                [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 77], [1, 2, 3, 4, 5, 6, 99],
                 [1, 2, 3, 4, 11, 12, 13], [1, 2, 3], [5, 6]]))
    cm = CacheManager(num_blocks=64, block_size=1)
    serve_request(cm, [1, 2, 3, 4, 5], rid="R1")
    serve_request(cm, [1, 2, 7, 8], rid="R2")
    before = tree_nodes(cm.tree)
    cm.tree.evict(2)                                         # the least recently used leaf: R2's [7 8]
    out.append(("page 1, a branch evicted a moment ago", cm, tree_nodes(cm.tree) + evicted_nodes(before, cm.tree),
                [[1, 2, 7, 8, 9], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5], [1, 2, 7]]))
    for seed in range(6):
        page = (1, 2, 4)[seed % 3]
        cm, seqs = _grow(rng, page, num_seqs=5, alphabet=3)
        shown = tree_nodes(cm.tree)
        if seed >= 3:
            cm.tree.evict(rng.randint(1, max(1, cm.tree.total_size() // 2)))
            shown = tree_nodes(cm.tree) + evicted_nodes(shown, cm.tree)
        out.append((f"random tree {seed} (page {page}, {cm.tree.num_nodes} nodes"
                    f"{', some just evicted' if seed >= 3 else ''})", cm, shown, _queries(rng, seqs, 3)))
    return out


def server_answer(cm: CacheManager, prompt: list[int]) -> int:
    """What the server's request cycle admits ``prompt`` with (then forgets it, caching nothing)."""
    a = cm.admit("next", list(prompt))
    n = a.prefix_len
    cm.free("next")
    return n


def predict_cached_tokens(fn: Callable, verbose: bool = True, live: Sequence[tuple] = ()) -> CheckResult:
    """Grade ``fn(nodes, prompt, page_size) -> int``: the ``cached_tokens`` a kvlab server will
    report for ``prompt``, read from the tree the dashboard shows.

    ``nodes``: the dashboard's ``state["tree"] + state["evicted_nodes"]``, dicts with ``id``,
    ``parent`` (0: the root), ``ids`` (the node's token ids) and ``evicted`` (True: a ghost, evicted a
    moment ago). ``page_size``: the server's block size. ``live``: more cases, ``(nodes, prompt,
    page_size, cached_tokens)`` as a server answered them (the lesson passes its own).
    """
    c = Checker("predict_cached_tokens", fn, verbose=verbose, compare=same_int)   # a count: 4.0 is not one
    names = ("nodes", "prompt", "page_size")
    for name, cm, shown, prompts in _cases(random.Random(12)):
        for p in prompts:
            want = server_answer(cm, p)
            c.reference = lambda *a, want=want: want
            run_keeping_input(c, f"{name}: prompt {p}", names, shown, p, cm.block_size, mistakes=CACHED_MISTAKES)
    for i, (nodes, prompt, page_size, cached) in enumerate(live):
        c.reference = lambda *a, want=cached: want
        run_keeping_input(c, f"your server, request {i + 1} ({len(prompt)} prompt tokens, page {page_size})", names,
                          list(nodes), list(prompt), page_size, mistakes=CACHED_MISTAKES)
    c.reference = None
    return c.done()


# ------------------------------------------------------------------------- choose_worker
def _lcp(a: Sequence, b: Sequence) -> int:
    """How many leading items two strings (characters) or lists (words) share."""
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _tree_chars(texts: Sequence[str]) -> int:
    """Characters a character trie of ``texts`` holds (shared prefixes counted once)."""
    seen: set[str] = set()
    for t in texts:
        seen.update(t[:k] for k in range(1, len(t) + 1))
    return len(seen)


def route_by_rule(sent: list[list[str]], text: str, loads: list[int], *, balance: bool = True, ratio: bool = True,
                  strict: bool = True, miss: str = "load", best: str = "longest", slip: str = "") -> int:
    """The router's choice with each rule on or off (every change is a mistake a FAIL names);
    ``miss``: where a miss goes (``load``: the least loaded worker, as sglang-router 0.3.2 does;
    ``tree``, ``tree_sum``, ``first``, ``match``: mistakes); ``slip``: one more mistake by name
    (:data:`ROUTE_MISTAKES`)."""
    n = len(sent)
    hi, lo = max(loads), min(loads)
    last = slip == "ties_last"                               # ties: the lower index, unless this slip
    least = max(i for i, x in enumerate(loads) if x == lo) if last else loads.index(lo)
    far = hi - lo >= BALANCE_ABS if slip in ("ge_abs", "ge_both") else hi - lo > BALANCE_ABS
    ratio_big = hi >= lo * BALANCE_REL if slip in ("ge_rel", "ge_both") else hi > lo * BALANCE_REL
    unbalanced = balance and ((far or ratio_big) if slip == "or" else (far and ratio_big))
    if unbalanced:
        return loads.index(hi) if slip == "most_loaded" else least   # unbalanced: the least loaded worker
    if slip == "words":                                      # a mistake: the match counted in whitespace words
        return _route_in_words(sent, text, least)
    match = [max((_lcp(text, s) for s in (texts[-1:] if best == "last" else texts)), default=0)
             if best in ("longest", "last") else sum(_lcp(text, s) for s in texts) for texts in sent]
    w = max(range(n), key=lambda i: (match[i], i if last else -i))
    if slip == "most_texts":                                 # a mistake: the worker sent the most texts
        w = max(range(n), key=lambda i: (len(sent[i]), -i))
    rate = match[w] / len(text) if ratio and text else match[w]
    if rate > CACHE_THRESHOLD if strict else rate >= CACHE_THRESHOLD:
        return w
    if miss == "load":                                       # sglang-router 0.3.2: the least loaded worker
        return least
    if miss == "first":
        return 0
    if miss == "match":
        return w
    chars = [_tree_chars(t) if miss == "tree" else sum(map(len, t)) for t in sent]
    return min(range(n), key=lambda i: (chars[i], -i if last else i))


def _route_in_words(sent: list[list[str]], text: str, least: int) -> int:
    """The choice when prefixes are matched in whitespace-separated words (a mistake: the router matches
    characters); balanced loads assumed (the caller checked them)."""
    words = text.split()
    match = [max((_lcp(words, s.split()) for s in texts), default=0) for texts in sent]
    w = max(range(len(sent)), key=lambda i: (match[i], -i))
    return w if words and match[w] / len(words) > CACHE_THRESHOLD else least


def _route(**kw) -> Callable:
    return lambda sent, text, loads: route_by_rule(sent, text, loads, **kw)


ROUTE_MISTAKES = dict([
    ("the loads come FIRST: when they are unbalanced the least loaded worker gets the request even if another "
     "worker holds its prefix (the balance check overrides the cache)", _route(balance=False)),
    ("unbalanced means max - min MORE than 64 (> 64, not >=): loads exactly 64 apart are balanced",
     _route(slip="ge_abs")),
    ("unbalanced means max MORE than 1.5 x min (> 1.5 x min, not >=): loads exactly 1.5x apart are balanced",
     _route(slip="ge_rel")),
    (">= where > is due, on both balance thresholds: unbalanced means max - min > 64 AND max > 1.5 x min "
     "(loads exactly 64 or exactly 1.5x apart are balanced)", _route(slip="ge_both")),
    ("unbalanced needs BOTH: max - min > 64 AND max > 1.5 x min (and, not or)", _route(slip="or")),
    ("ties go to the LOWER index: the first of the workers with the longest match (or the least load)",
     _route(slip="ties_last")),
    ("unbalanced loads send the request to the LEAST loaded worker (min), not the most loaded",
     _route(slip="most_loaded")),
    ("the match must be MORE than the threshold (> 0.3): a match of exactly 0.3 is a miss", _route(strict=False)),
    ("the threshold is on the matched FRACTION of the request's text (matched characters / len(text) "
     "> 0.3), not on a count", _route(ratio=False)),
    ("a miss goes to the LEAST LOADED worker (ties: the lower index), not to the smallest tree: that is what "
     "the policy's source comment says and what sglang-router did before, but 0.3.2 picks by load "
     "(section 5's run shows it)", _route(miss="tree")),
    ("a miss goes to the LEAST LOADED worker (ties: the lower index), not to the smallest tree (and not "
     "to the fewest characters sent)", _route(miss="tree_sum")),
    ("a miss goes to the LEAST LOADED worker, not always to worker 0: the loads decide (worker 0 only "
     "when it is among the least loaded)", _route(miss="first")),
    ("a match at or under the threshold is a MISS: it goes to the least loaded worker, not to the worker "
     "with the (too short) longest match", _route(miss="match")),
    ("a worker's match is its LONGEST prefix match over the texts it was sent, not a sum over them",
     _route(best="sum")),
    ("a worker's match is its longest prefix match over EVERY text it was sent (its tree holds them all), "
     "not over the last one only", _route(best="last")),
    ("the router matches CHARACTERS, not whitespace words: a worker's match is the number of leading characters "
     "its tree shares with the text, and the threshold is on matched characters / len(text)", _route(slip="words")),
    ("the cache rule picks the worker with the LONGEST prefix match, not the one that was sent the most texts",
     _route(slip="most_texts")),
    ("workers are numbered from 0 (the index into sent and loads), not from 1",
     lambda sent, text, loads: route_by_rule(sent, text, loads) + 1),
])


def _route_cases(rng: random.Random) -> list[tuple[str, list[list[str]], str, list[int]]]:
    sys_a, sys_b = "You are a shop assistant. ", "You grade homework. "
    hand = [
        ("a conversation's next turn goes back to its worker", [[sys_a + "Q1 refund"], [sys_b + "Q2"]],
         sys_a + "Q1 refund A1 Q2 human", [0, 0]),
        ("the second worker holds the prefix", [[sys_b + "hello"], [sys_a + "ship?"]], sys_a + "ship? and now?", [1, 1]),
        ("a miss goes to the least loaded worker, not the smaller tree", [["y" * 5], ["x" * 40]], "zzzzzzzzzz", [3, 1]),
        ("a miss with equal loads: the lower index, not the smaller tree", [["cdefgh", "cdxyz"], ["ab"]], "qqq", [2, 2]),
        ("an idle router: every miss goes to the first worker", [["x" * 40, "w" * 30], []], "zzzzzz", [0, 0]),
        ("a miss: the least loaded, not the longest (too short) match", [["abc"], ["q"]], "abcdefghijklmn", [4, 2]),
        ("a match of exactly 0.3 is a miss", [["abcQQQQ"], ["z"]], "abcdefghij", [1, 0]),
        ("2 of 20 characters match: a miss", [["zz"], ["hello there friend"]], "he" + "x" * 18, [0, 0]),
        ("5 of 30 characters match: a miss", [["hello", "help me"], ["q"]], "hello" + "y" * 25, [1, 0]),
        ("a match that starts past the first character is no match", [["xbcdefghij"], ["q"]], "abcdefghij", [1, 0]),
        ("two workers hold the same prefix: the lower index", [["zz", "abcdef"], ["abcdef"]], "abcdefg", [0, 0]),
        ("a miss on a short text", [["abcdefgh"], ["x"]], "qq", [0, 0]),
        ("a miss among three workers: the least loaded", [["abc", "abd"], ["wxyzq"], ["nopqrstuv"]], "mmmmmmmm",
         [5, 9, 2]),
        ("three workers, two least loaded: the lower index", [["hello"], ["help", "helm", "hex"], ["qwertyuiop"]],
         "zzzz", [3, 1, 1]),
        ("a tree of many short texts, balanced loads", [["ab", "cd", "ef", "g"], ["abcdef"]], "mmmmmmmm", [7, 6]),
        ("balanced loads still decide a miss", [["abcde"], ["ab", "cd", "ef"]], "zzzz", [40, 60]),
        ("loads exactly 64 apart: not unbalanced", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [128, 64]),
        ("loads 65 apart and 2x: unbalanced", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [130, 65]),
        ("loads exactly 1.5x and 70 apart: not unbalanced", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [210, 140]),
        ("a match just over 0.3 is a hit", [["abcdQQ"], ["zzzzzzzzzzzzzzzzz"]], "abcdefghij", [2, 0]),
        ("unbalanced loads win over the cache", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [200, 10]),
        ("loads 60 apart and under 1.5x: not unbalanced", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [200, 140]),
        ("loads 1.5x apart but only 60 apart: not unbalanced", [[sys_a + "Q"], [sys_b]], sys_a + "Q more", [120, 60]),
        ("longest match, not the sum over a worker's texts",
         [["abc1", "abc2", "abc3", "ab"], ["abcdefg"]], "abcdefgh", [0, 0]),
        ("no worker was sent anything yet", [[], [], []], "hello", [0, 0, 0]),
        ("three workers, the third holds it", [["aa"], ["bb"], ["hello wor"]], "hello world", [3, 4, 5]),
    ]
    out = list(hand)
    alphabet = "abc "
    for seed in range(40):
        k = rng.randint(2, 4)
        sent = [["".join(rng.choice(alphabet) for _ in range(rng.randint(3, 12))) for _ in range(rng.randint(0, 3))]
                for _ in range(k)]
        pool = [t for texts in sent for t in texts]
        base = rng.choice(pool) if pool and rng.random() < 0.8 else ""
        text = base[:rng.randint(0, len(base))] + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        loads = [rng.choice((0, 5, 40, 100, 300)) for _ in range(k)]
        out.append((f"random {seed}: {k} workers, loads {loads}", sent, text, loads))
    return out


def choose_worker(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(sent, text, loads) -> int``: the index of the worker sglang-router's
    ``cache_aware`` policy sends ``text`` to. ``sent[w]``: the texts worker ``w`` was sent (what the
    router's approximate tree holds for it); ``loads[w]``: its requests in flight. Thresholds:
    ``CACHE_THRESHOLD`` 0.3, ``BALANCE_ABS`` 64, ``BALANCE_REL`` 1.5; ties go to the lower index.
    A miss goes to the least loaded worker, as the code of 0.3.2 does (sglang PR 14650; the policy's
    source comment still says "smallest tree", and a test of lesson 12 runs the real router to show
    which one it follows).
    """
    c = Checker("choose_worker", fn, reference=lambda sent, text, loads: route_by_rule(sent, text, loads),
                verbose=verbose)
    for label, sent, text, loads in _route_cases(random.Random(34)):
        run_keeping_input(c, f"{label}: text {text!r}", ("sent", "text", "loads"), sent, text, loads,
                          mistakes=ROUTE_MISTAKES)
    return c.done()


# ------------------------------------------------------------------------- router_flags
_FLAG_ROLE = {"--policy": "the policy", "--cache-threshold": "the match threshold (a fraction of the text)",
              "--balance-abs-threshold": "the absolute load gap (requests)",
              "--balance-rel-threshold": "the relative load gap (a ratio)"}


def flag_slip(flag: Any, real: dict[str, tuple]) -> str:
    """Why ``flag`` is not one of ``real``'s flags ("" when it is), naming the likely slip.

    Example: ``flag_slip("--cache-treshold", router_options())`` -> ``"--cache-treshold is not a
    flag of sglang-router (did you mean --cache-threshold?) ..."``."""
    if not isinstance(flag, str):
        return f"a flag is a string such as '--policy', got {flag!r} ({type(flag).__name__})"
    if flag in real:
        return ""
    dashed = "--" + flag.lstrip("-").replace("_", "-")
    if dashed in real:
        return (f"{flag!r} is not how the command line spells it: {dashed} (two dashes, words joined by '-'; "
                "cache_threshold is the name of RouterArgs's field, not the flag)")
    close = difflib.get_close_matches(flag, list(real), n=1, cutoff=0.6)
    return (f"{flag} is not a flag of sglang-router" + (f" (did you mean {close[0]}?)" if close else "")
            + ": python -m sglang_router.launch_router --help lists the real ones")


def _value_slip(flag: str, value: Any, real: dict[str, tuple]) -> str:
    """Why ``value`` is wrong for ``flag`` ("" when it is ROUTER_FLAGS's), naming the likely slip."""
    typ, choices, _default = real.get(flag, (None, None, None))
    want = ROUTER_FLAGS[flag]
    if typ is not None and not isinstance(value, bool):
        try:
            typ(str(value))
        except (TypeError, ValueError):
            return f"{flag} {value!r} is refused by the router's own parser: it takes {typ.__name__} values"
    if choices and value not in choices:
        return f"{flag} takes one of {list(choices)}, got {value!r}"
    if value == want and type(value) is not bool:
        return ""
    pair = {"--balance-abs-threshold": "--balance-rel-threshold", "--balance-rel-threshold": "--balance-abs-threshold"}
    if flag in pair and value == ROUTER_FLAGS[pair[flag]]:
        return (f"{flag} and {pair[flag]} swapped: the absolute gap is {BALANCE_ABS} requests "
                f"(--balance-abs-threshold), the ratio {BALANCE_REL} (--balance-rel-threshold)")
    if flag == "--cache-threshold" and value == 100 * CACHE_THRESHOLD:
        return f"--cache-threshold is a fraction from 0.0 to 1.0 ({CACHE_THRESHOLD}), not a percent"
    return f"{flag} sets {_FLAG_ROLE[flag]}: pick_worker's rule uses {want!r}, not {value!r}"


def router_flags(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn() -> {flag: value}``: the flags of ``python -m sglang_router.launch_router`` that
    pin the policy and the thresholds ``pick_worker`` follows (:data:`ROUTER_FLAGS`). Every flag
    name is looked up in the installed router's parser: an invented or misspelt one is named."""
    c = Checker("router_flags", fn, verbose=verbose)
    if c.unusable("the flags", ROUTER_FLAGS):
        return c.done()
    got = call(fn)
    if isinstance(got, Raised) or not isinstance(got, dict):
        c.record("the flags", ROUTER_FLAGS, got, passed=False,
                 note="" if isinstance(got, Raised) else "return a dict {flag: value}, e.g. {'--policy': ...}")
        return c.done()
    real = router_options()
    for flag in got:
        slip = flag_slip(flag, real)
        if slip:
            c.record(f"the flag {flag!r}", "a flag of sglang-router", flag, passed=False, note=slip)
    for flag in ROUTER_FLAGS:
        label = f"{_FLAG_ROLE[flag]}: {flag}"
        if flag not in got:
            c.record(label, ROUTER_FLAGS[flag], "missing", passed=False,
                     note=f"no {flag} among {sorted(map(str, got))}: the router needs it to follow pick_worker's rules")
            continue
        slip = _value_slip(flag, got[flag], real)
        c.record(label, ROUTER_FLAGS[flag], got[flag], passed=not slip, note=slip)
    for flag in got:
        if flag in real and flag not in ROUTER_FLAGS:
            c.record(f"the flag {flag}", "not given", got[flag], passed=False,
                     note=f"{flag} is a real flag, but none of pick_worker's rules uses it: keep only the policy "
                          "and its three thresholds")
    return c.done()
