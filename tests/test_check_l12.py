"""Lesson 12's checkers: the solutions pass; each usual mistake is rejected and named; a function
that changes its input fails; ``predict_cached_tokens`` also grades the cases a real server
answered (``live=``), and a wrong claim about them fails."""
from __future__ import annotations

import pytest

from kvlab import check
from kvlab.check.l12_real_server import CACHED_MISTAKES, ROUTE_MISTAKES
from test_check_memory import _solutions

S12 = _solutions("12_real_server")


def test_the_solutions_pass():
    assert check.predict_cached_tokens(S12.predict_cached, verbose=False).passed
    assert check.choose_worker(S12.pick_worker, verbose=False).passed


@pytest.mark.parametrize("name", list(CACHED_MISTAKES), ids=range(len(CACHED_MISTAKES)))
def test_each_prediction_mistake_is_named(name):
    r = check.predict_cached_tokens(CACHED_MISTAKES[name], verbose=False)
    assert not r.passed and {c.note for c in r.failures} == {name}


@pytest.mark.parametrize("name", list(ROUTE_MISTAKES), ids=range(len(ROUTE_MISTAKES)))
def test_each_routing_mistake_is_named(name):
    r = check.choose_worker(ROUTE_MISTAKES[name], verbose=False)
    assert not r.passed and {c.note for c in r.failures} == {name}


def test_a_function_that_changes_its_input_fails():
    def pops(nodes, prompt, page_size):
        n = S12.predict_cached(nodes, prompt, page_size)
        nodes.clear()
        return n

    def sorts(sent, text, loads):
        w = S12.pick_worker(sent, text, loads)
        loads.sort()
        return w

    assert "changed its argument `nodes`" in check.predict_cached_tokens(pops, verbose=False).failures[0].note
    assert "changed its argument `loads`" in check.choose_worker(sorts, verbose=False).failures[0].note


def test_live_cases_come_from_a_real_server():
    """The lesson's flow on a bundled-model server: the tree the dashboard shows, the prompt, the
    server's cached_tokens. The solution agrees with the server; a claim one token off fails."""
    import fastapi  # noqa: F401  (installed by the set-up: a missing one fails, never skips)
    from kvlab.serve.app import chat_prompt_ids
    from kvlab.serve.lab import start_lab

    lab = start_lab(workers=1, num_blocks=64, block_size=4)
    try:
        import openai

        client = openai.OpenAI(base_url=lab.url + "/v1", api_key="none", max_retries=0, timeout=30)
        tok = lab.workers[0].loop.tokenizer
        system = [{"role": "system", "content": "You answer questions about trains, briefly."}]
        live = []
        for q in ("When does the first train leave?", "When does the first train leave?", "Is there a bar?"):
            state = lab.state()
            msgs = system + [{"role": "user", "content": q}]
            r = client.chat.completions.create(model=lab.model, messages=msgs, max_tokens=3, temperature=0)
            live.append((state["tree"] + state["evicted_nodes"], chat_prompt_ids(tok, msgs), 4,
                         r.usage.prompt_tokens_details.cached_tokens))
        assert live[1][3] > 0 and live[1][3] % 4 == 0 and live[1][3] < len(live[1][1])
        assert check.predict_cached_tokens(S12.predict_cached, verbose=False, live=live).passed
        wrong = [(n, p, ps, c + 1) for n, p, ps, c in live]
        r = check.predict_cached_tokens(S12.predict_cached, verbose=False, live=wrong)
        assert [c.label.startswith("your server") for c in r.failures] == [True] * 3
    finally:
        lab.stop()


def test_true_division_is_named_as_a_float_where_an_int_is_due():
    """The review's `/` for `//` (7.0 for 4) came back without a name: the shared diagnosis's last
    guess for a float where an int is due names it in every checker."""
    def divides(nodes, prompt, page_size):
        return float(S12.predict_cached(nodes, prompt, 1)) / page_size * page_size + 0.0 * len(prompt)

    r = check.predict_cached_tokens(divides, verbose=False)
    assert not r.passed and r.failures and all("float" in c.note for c in r.failures if c.note), \
        [c.note for c in r.failures][:3]
    assert any("a / somewhere" in c.note for c in r.failures)


# ------------------------------------------------------------------ router_flags (issue 28 review)
_GOOD = {"--policy": "cache_aware", "--cache-threshold": 0.3, "--balance-abs-threshold": 64,
         "--balance-rel-threshold": 1.5}


def test_router_flags_solution_passes():
    assert check.router_flags(S12.router_flags, verbose=False).passed


@pytest.mark.parametrize("wrong, named", [
    ({"--cache-threshold": "--cache-treshold"}, "--cache-treshold is not a flag of sglang-router (did you mean "
                                               "--cache-threshold?)"),
    ({"--balance-abs-threshold": "--balance-abs"}, "--balance-abs is not a flag of sglang-router (did you mean "
                                                   "--balance-abs-threshold?)"),
    ({"--balance-rel-threshold": "--balance-ratio"}, "--balance-ratio is not a flag of sglang-router"),
    ({"--policy": "--routing-policy"}, "--routing-policy is not a flag of sglang-router"),
    ({"--cache-threshold": "cache_threshold"}, "'cache_threshold' is not how the command line spells it: "
                                               "--cache-threshold"),
    ({"--cache-threshold": "--cache_threshold"}, "--cache-threshold (two dashes, words joined by '-'"),
])
def test_a_wrong_flag_name_is_rejected_and_named(wrong, named):
    """Issue 28 review of lesson 12: the flags the exercise is about were not checked against the
    real router. A flag the installed sglang-router does not accept fails, its name in the note."""
    (old, new), = wrong.items()
    flags = {new if k == old else k: v for k, v in _GOOD.items()}
    r = check.router_flags(lambda: flags, verbose=False)
    assert not r.passed
    assert any(named in c.note and new in c.label for c in r.failures), [c.note for c in r.failures]


@pytest.mark.parametrize("flag, value, named", [
    ("--balance-rel-threshold", 64, "swapped"),
    ("--balance-abs-threshold", 1.5, "refused by the router's own parser: it takes int"),
    ("--cache-threshold", 30, "not a percent"),
    ("--cache-threshold", 0.5, "uses 0.3, not 0.5"),
    ("--balance-abs-threshold", 64.5, "refused by the router's own parser: it takes int"),
    ("--policy", "cache-aware", "takes one of"),
])
def test_a_wrong_value_is_rejected_and_named(flag, value, named):
    r = check.router_flags(lambda: {**_GOOD, flag: value}, verbose=False)
    assert not r.passed and any(named in c.note for c in r.failures), [c.note for c in r.failures]


def test_a_real_but_unused_flag_and_a_missing_one_are_named():
    r = check.router_flags(lambda: {**_GOOD, "--max-tree-size": 100}, verbose=False)
    assert not r.passed and "a real flag, but none of pick_worker's rules uses it" in r.failures[0].note
    r = check.router_flags(lambda: {k: v for k, v in _GOOD.items() if k != "--policy"}, verbose=False)
    assert not r.passed and r.failures[0].note.startswith("no --policy among")
    assert not check.router_flags(lambda: list(_GOOD), verbose=False).passed


def test_the_recorded_flags_are_the_installed_routers_and_the_lesson_names_only_real_ones():
    """kvlab.serve.router.ROUTING_FLAGS_032 (the fallback without the package) is what the
    installed sglang-router's parser says, and every router flag lesson 12's text names exists."""
    import re
    from pathlib import Path

    from kvlab.serve.router import ROUTING_FLAGS_032, router_options

    import sglang_router.router_args  # noqa: F401  (installed by the set-up: missing fails, never skips)
    real = router_options()
    assert {k: real[k] for k in ROUTING_FLAGS_032} == ROUTING_FLAGS_032
    assert all(real[k][2] == v for k, v in _GOOD.items())        # the thresholds are the router's defaults
    text = (Path(__file__).parents[1] / "notebooks" / "src" / "12_real_server.py").read_text()
    router_text = text[text.index("## 5. Two servers"):text.index("## 7. ")]
    named = set(re.findall(r"--[a-z][a-z-]+", router_text))
    assert named >= {"--cache-threshold"} and not named - set(real), named - set(real)


def test_a_float_count_fails_named():
    """A reviewer's answer: the right count as a float (4.0 for 4) passed all 42 cases."""
    as_float = lambda nodes, prompt, page_size: float(S12.predict_cached(nodes, prompt, page_size))
    r = check.predict_cached_tokens(as_float, verbose=False)
    assert not r.passed
    assert "float" in r.failures[0].note, r.failures[0].note


# The review of 6b9afee typed these; each was rejected, but named wrongly or not at all.
def _review_walk(nodes, prompt):
    """The reviewer's walk (ex12.py): live nodes, the child matching most, a match may end inside a node."""
    kids = {}
    for n in nodes:
        if not n["evicted"]:
            kids.setdefault(n["parent"], []).append(n)
    cur, k = 0, 0
    while True:
        best = None
        for c in kids.get(cur, []):
            m = 0
            while m < len(c["ids"]) and k + m < len(prompt) and c["ids"][m] == prompt[k + m]:
                m += 1
            if m and (best is None or m > best[1]):
                best = (c, m)
        if best is None:
            return k
        c, m = best
        if m < len(c["ids"]):
            return k + m
        k, cur = k + m, c["id"]


def _review_pick(sent, text, loads, last=False, hi_tie=False, tree=False):
    """The reviewer's pick_worker (ex12.py) with its two switches: match the LAST text sent to a
    worker only; break every tie (loads, matches) to the HIGHER index. A miss goes to the least
    loaded worker (sglang-router 0.3.2's code); ``tree``: to the smallest tree, as the reviewer
    wrote it when the lesson taught that rule."""
    W = range(len(sent))

    def argmin(xs):
        return max(i for i in W if xs[i] == min(xs)) if hi_tie else xs.index(min(xs))

    def lcp(a, b):
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        return k
    hi, lo = max(loads), min(loads)
    if hi - lo > 64 and hi > 1.5 * lo:
        return argmin(loads)
    ms = [max((lcp(text, s) for s in (sent[w][-1:] if last else sent[w])), default=0) for w in W]
    w = max(i for i in W if ms[i] == max(ms)) if hi_tie else ms.index(max(ms))
    if ms[w] and ms[w] / len(text) > 0.3:
        return w
    if tree:
        return argmin([len({t[:i + 1] for t in s for i in range(len(t))}) for s in sent])
    return argmin(loads)


@pytest.mark.parametrize("page", [2, 4, 16])
def test_a_hard_coded_page_size_is_named(page):
    """Review of 6b9afee, W8: `min(k, len(prompt) - 1) // 4 * 4` failed with no reason given."""
    def hard(nodes, prompt, page_size):
        return min(_review_walk(nodes, prompt), len(prompt) - 1) // page * page

    r = check.predict_cached_tokens(hard, verbose=False)
    assert not r.passed
    assert all(f"page size {page}" in c.note and "page_size" in c.note for c in r.failures), r.summary


def test_matching_only_the_last_text_sent_is_named():
    """Review of 6b9afee, W6: a worker's match taken over the last text it was sent only; the
    first failure had no reason, and later ones said "workers are numbered from 0"."""
    r = check.choose_worker(lambda s, t, l: _review_pick(s, t, l, last=True), verbose=False)
    assert not r.passed
    assert all("EVERY text" in c.note for c in r.failures), [c.note for c in r.failures]


def test_ties_to_the_higher_index_are_named_everywhere():
    """Review of 6b9afee, W7: ties broken to the higher index in the loads too; most failures
    said "workers are numbered from 0", the right name came once."""
    r = check.choose_worker(lambda s, t, l: _review_pick(s, t, l, hi_tie=True), verbose=False)
    assert not r.passed
    assert all("LOWER index" in c.note for c in r.failures), [c.note for c in r.failures]


def test_a_miss_sent_to_the_smallest_tree_is_named():
    """Review of 0430388: the lesson taught "a miss goes to the smaller tree" (the policy's source
    comment) while sglang-router 0.3.2 sends it to the least loaded worker (tests/test_serve_router.py
    shows it on the real router). The reviewer's answer, written for the old rule, now fails, named."""
    r = check.choose_worker(lambda s, t, l: _review_pick(s, t, l, tree=True), verbose=False)
    assert not r.passed
    assert all("LEAST LOADED" in c.note and "smallest tree" in c.note for c in r.failures), [c.note for c in r.failures]


def test_a_page_size_hard_coded_in_the_walk_too_is_named_with_its_size():
    """Review of 0430388, 1g: the reviewer's walk (a child chosen by its first page) and floor both
    used a constant 4; the checker named it "hard-coded page size 8?" (its model of a hard-coded page
    floored a correct walk, and on the page-1 trees only 8 gave the same zeros)."""
    def review_walk(nodes, prompt, page_size):             # ex12.py's _walk, as typed
        kids = {}
        for n in nodes:
            if not n.get("evicted"):
                kids.setdefault(n["parent"], []).append(n)
        cur, m = 0, 0
        while True:
            nxt = next((c for c in kids.get(cur, []) if list(c["ids"][:page_size]) == list(prompt[m:m + page_size])
                        and len(prompt) - m >= 1), None)
            if nxt is None:
                return m
            i, ids = 0, nxt["ids"]
            while i < len(ids) and m + i < len(prompt) and ids[i] == prompt[m + i]:
                i += 1
            if i < len(ids):
                return m + i
            m, cur = m + i, nxt["id"]

    def hard_4(nodes, prompt, page_size):
        return min(review_walk(nodes, prompt, 4), len(prompt) - 1) // 4 * 4

    r = check.predict_cached_tokens(hard_4, verbose=False)
    assert not r.passed
    assert all("page size 4" in c.note and "page_size" in c.note for c in r.failures), [c.note for c in r.failures]
