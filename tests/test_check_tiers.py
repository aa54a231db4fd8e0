"""Lesson 10's checkers: the solutions pass, common wrong answers fail (with the mistake named),
stubs and non-functions fail cleanly, and the rules the exercises state are the real cache's."""
from __future__ import annotations

import budget
import importlib.util
from pathlib import Path

import pytest

from kvlab.check import l10_tiers as L
from kvlab.reuse.lifecycle import is_legal

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sol10", ROOT / "solutions" / "10_tiers.py")
sol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sol)  # type: ignore[union-attr]

NAMES = ["write_back_evict", "load_back_plan", "next_placement", "arc_victims"]


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass(name):
    r = getattr(L, name)(getattr(sol, name), verbose=False)
    assert r.passed, r.report()


@pytest.mark.parametrize("name", NAMES)
def test_stubs_and_non_functions_fail_cleanly(name):
    def stub(*a, **k):
        raise NotImplementedError("your code here")

    r = getattr(L, name)(stub, verbose=False)
    assert not r.passed and r.not_implemented and "NotImplementedError" in r.summary
    r = getattr(L, name)(42, verbose=False)
    assert not r.passed and "expected a function" in r.summary


@pytest.mark.parametrize("mistake", sorted(L.EVICT_MISTAKES))
def test_write_back_evict_rejects_the_common_mistakes(mistake):
    r = L.write_back_evict(L.EVICT_MISTAKES[mistake], verbose=False)
    assert not r.passed
    assert any(c.note == mistake for c in r.failures), [c.note for c in r.failures]


def test_write_back_evict_rejects_write_through_thinking_and_ignoring_need():
    def drop_unbacked(leaves, host_free, need):  # eviction never writes: what write_through would do
        return L._never_write_back(leaves, host_free, need)

    def keep_everything(leaves, host_free, need):
        return {n: "both" if b else "device" for n, _, b in leaves}

    for wrong in (drop_unbacked, keep_everything):
        assert not L.write_back_evict(wrong, verbose=False).passed


@pytest.mark.parametrize("checker,mistake", [("load_back_plan", m) for m in sorted(L.PLAN_MISTAKES)]
                         + [("arc_victims", m) for m in sorted(L.ARC_MISTAKES)])
def test_common_mistakes_are_rejected_and_named(checker, mistake):
    mistakes = L.PLAN_MISTAKES if checker == "load_back_plan" else L.ARC_MISTAKES
    r = getattr(L, checker)(mistakes[mistake], verbose=False)
    assert not r.passed
    assert any(mistake in c.note for c in r.failures), [c.note for c in r.failures]


def test_the_stated_load_back_rule_is_the_real_admission():
    for seed in budget.seeds(8):
        for t in (0, 1, 2, 5):
            for segs, n, thr, expected in L.plan_from_cache(seed, t):
                assert L._plan(segs, n, thr) == expected, (segs, n, thr)


def test_next_placement_rejects_wrong_tables():
    def forgets_the_host_copy(state, event, storage=False):  # both --evict--> evicted
        return "evicted" if (state, event) == ("both", "evict") else sol.next_placement(state, event, storage)

    def disk_to_both(state, event, storage=False):
        return "both" if (state, event) == ("disk", "load_back") else sol.next_placement(state, event, storage)

    def never_raises(state, event, storage=False):
        try:
            return sol.next_placement(state, event, storage)
        except ValueError:
            return state

    def ignores_storage(state, event, storage=False):
        return sol.next_placement(state, event, False)

    for wrong in (forgets_the_host_copy, disk_to_both, never_raises, ignores_storage):
        assert not L.next_placement(wrong, verbose=False).passed, wrong.__name__


def test_the_placement_table_is_made_of_legal_edges():
    for (src, _event), dst in L.PLACEMENT_TABLE.items():
        assert is_legal("node", src, dst)
    assert is_legal("node", "host", "disk")
    for seed in budget.seeds(4):
        for src, event, storage, dst in L._real_run_cases(seed):
            assert L.placement_after(src, event, storage) == dst


def test_the_plain_eviction_rule_is_the_real_tree():
    import random

    rng = random.Random(3)
    for _ in range(400):
        leaves = [(chr(65 + j), rng.randint(1, 5), rng.random() < 0.4) for j in range(rng.randint(1, 7))]
        host_free, need = rng.randint(0, 8), rng.randint(0, sum(p for _, p, _ in leaves) + 2)
        assert L.evict_plain(leaves, host_free, need) == L.evict_with_tiers(leaves, host_free, need), leaves


def test_write_back_evict_catches_host_eviction_that_cannot_make_room():
    # A leaves the device with its copy (host-only); B needs 4 host pages, 1 free + A's 1 = 2: evicting A
    # cannot make room, so A stays on the host and B is dropped
    assert L.evict_with_tiers([("A", 1, True), ("B", 4, False)], 1, 5) == {"A": "host", "B": "evicted"}
    r = L.write_back_evict(L._evict_host_blindly, verbose=False)
    assert not r.passed and "only when that makes enough room" in r.failures[0].note


def test_next_placement_names_its_common_mistakes():
    def forgets_the_host_copy(state, event, storage=False):
        return "evicted" if (state, event) == ("both", "evict") else sol.next_placement(state, event, storage)

    def never_raises(state, event, storage=False):
        try:
            return sol.next_placement(state, event, storage)
        except ValueError:
            return "evicted"

    def ignores_storage(state, event, storage=False):
        return sol.next_placement(state, event, False)

    # the diagnoses ask about the idea, they do not state the answer (review r2)
    for wrong, words in ((forgets_the_host_copy, "what becomes of the copy this node has on the host"),
                         (never_raises, "raise ValueError"), (ignores_storage, "with storage attached, what does")):
        r = L.next_placement(wrong, verbose=False)
        assert not r.passed and any(words in c.note for c in r.failures), [c.note for c in r.failures][:3]


def test_arc_victims_rejects_lru_and_mru():
    lru = lambda t1, t2, target, need: L._arc_rule(t1, t2, target, need, always_t1=True)  # noqa: E731
    assert not L.arc_victims(lru, verbose=False).passed
    def t2_first(t1, t2, target, need):
        return L._arc_rule(t2, t1, 0, need, always_t1=True)
    assert not L.arc_victims(t2_first, verbose=False).passed


def test_the_comparison_printed_is_measured_on_the_real_manager(capsys):
    L.arc_victims(sol.arc_victims)
    out = capsys.readouterr().out
    assert "host hits LRU" in out and "ARC keeps more" in out and "kvlab's own host pools" in out
    # review r10 of 10: not under a stub or a failing answer, where it read as the learner's own result
    L.arc_victims(lambda t1, t2, target, need: L._arc_rule(t1, t2, target, need, always_t1=True))
    assert "host hits LRU" not in capsys.readouterr().out


# ------------------------------------------------------------------ the review of 79ae8b9 (r6): typed wrong answers
def _edited(name: str, old: str, new: str):
    """The reference ``name`` with ``old`` replaced by ``new`` once (one plausible mistake)."""
    import inspect

    src = inspect.getsource(getattr(sol, name))
    assert old in src, f"the solution changed: {old!r} is not in {name}"
    scope = dict(vars(sol))
    exec(compile(src.replace(old, new, 1), f"<wrong {name}>", "exec"), scope)  # noqa: S102 - our own file, edited
    return scope[name]


REVIEW_R6 = [
    # (id, exercise, old, new, words the FAIL must contain)
    ("T7 with storage, device --evict--> disk", "next_placement",
     '("device", "evict"): "evicted"', '("device", "evict"): "disk" if storage else "evicted"',
     "only host eviction writes to the disk"),
    ("E10 an uncopyable leaf stays on the device", "write_back_evict",
     'state[name] = "host" if backed else "evicted"', 'state[name] = "host" if backed else "device"',
     "a leaf taken for eviction leaves the device"),
    ("L8 below the threshold, the off-device tokens vanish", "load_back_plan",
     "return device, loaded, prompt_len - device - loaded", "return device, loaded, prompt_len - device - beyond",
     "tokens not loaded back are recomputed"),
    ("L9 (device, computed, loaded)", "load_back_plan",
     "return device, loaded, prompt_len - device - loaded", "return device, prompt_len - device - loaded, loaded",
     "loaded and computed are swapped"),
    ("R7 the bigger list first, target ignored", "arc_victims",
     "sum(p for _, p in t1) >= target", "sum(p for _, p in t1) >= sum(p for _, p in t2)",
     "compare T1's pages with target"),
    ("R9 target compared with T2's pages", "arc_victims",
     "sum(p for _, p in t1) >= target", "sum(p for _, p in t2) >= target",
     "target is T1's wanted size"),
]


@pytest.mark.parametrize("name,exercise,old,new,words", REVIEW_R6, ids=[w[0] for w in REVIEW_R6])
def test_review_r6_wrong_answers_are_rejected_and_named(name, exercise, old, new, words):
    r = getattr(L, exercise)(_edited(exercise, old, new), verbose=False)
    assert not r.passed, f"accepted: {name}"
    assert words in r.failures[0].note, (r.failures[0].label, r.failures[0].note)
    assert words in r.summary


def test_review_r6_exercise_4_asks_for_a_prediction_and_its_hints_stop_at_the_idea():
    """The review of 79ae8b9: exercise 4's statement gave the rule and hints 1+2 the code ("copy the
    lists, pop from the front", "stop when ... count pages"): transcription. The statement now asks
    for a prediction on one of the checker's cases first; that case's answer is the real tree's."""
    import re

    src = (ROOT / "notebooks" / "src" / "10_tiers.py").read_text(encoding="utf-8")
    part = src.split("### Exercise 4")[1].split("## Summary")[0]
    statement = part.split("# %%")[0]
    assert "Predict first" in statement
    hints = " ".join(re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", part, re.S)).lower()
    assert "pop" not in hints and "copies of the two lists" not in hints and "count pages" not in hints
    assert L.arc_evict_real([("a", 2), ("b", 2)], [("c", 2), ("d", 2)], 3, 6) == ["a", "c", "d"]


def test_review_r6_exercise_2_rules_come_from_a_real_trace_not_the_statement():
    """The review of 79ae8b9: exercise 2 (load_back_plan) was close to transcription: the statement
    gave the rules (cap at prompt_len - 1, threshold on the sum) and hint 2 said "apply the threshold
    to the sum". The statement now states the contract only; the rules are read off a trace of real
    admissions, each row showing what it says it shows, and the prediction is one of the checker's
    cases (its answer the real manager's)."""
    import re

    src = (ROOT / "notebooks" / "src" / "10_tiers.py").read_text(encoding="utf-8")
    part = src.split("### Exercise 2")[1].split("### Exercise 3")[0]
    statement = part.split("# %%")[0]
    assert "Predict first" in part and "print_load_back_trace" in part
    for rule in ("prompt_len - 1", "at least `threshold`", "recomputed"):
        assert rule not in statement, rule
    hints = " ".join(re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", part, re.S)).lower()
    assert "sum" not in hints and "prompt_len - 1" not in hints
    rows = {what: (segs, n, plan) for what, segs, n, plan in L.load_back_trace(3)}
    assert len(rows) == 4
    segs, n, (dev, loaded, comp) = rows["the whole prompt is in the tree"]
    assert sum(k for k, _ in segs) >= n and dev + loaded == n - 1 and comp == 1
    assert "holds all 5 tokens of the prompt" in part and sum(k for k, _ in segs) == n == 5   # hint 1 reads this row
    segs, n, plan = rows["several host segments, each under the threshold"]
    off = [k for k, w in segs if w in ("host", "disk")]
    assert max(off) < 3 <= sum(off) and plan[1] == sum(off)
    segs, n, plan = rows["host or disk tokens, not loaded back"]
    assert plan[1] == 0 and plan[2] == n - plan[0] > 1
    for segs, n, plan in rows.values():
        assert plan == L._plan(segs, n, 3) == sol.load_back_plan(segs, n, 3)
    case = [(2, "device"), (2, "host"), (2, "disk")]
    assert sol.load_back_plan(case, 10, 3) == (2, 4, 4) and sol.load_back_plan(case, 10, 5) == (2, 0, 8)


def test_review_r6_the_edge_list_says_which_edges_exercise_3_has_no_event_for():
    """The review of 79ae8b9: the lesson said what makes each of the node's 12 edges happen is
    exercise 3's question, but new -> both/host/disk (splits) are no event of exercise 3. The
    sentence above the edge list names exactly the edges no (state, event) of the solution takes."""
    from kvlab.reuse.lifecycle import transition_table

    events = ("insert", "write", "evict", "load_back", "evict_host", "miss")
    states = ("new", "device", "both", "host", "disk", "evicted")
    taken = set()
    for st in states:
        for ev in events:
            for storage in (False, True):
                try:
                    taken.add((st, sol.next_placement(st, ev, storage)))
                except ValueError:
                    pass
    missing = [(a, b) for a, b, _ in transition_table("node") if (a, b) not in taken]
    src = (ROOT / "notebooks" / "src" / "10_tiers.py").read_text(encoding="utf-8")
    intro = src.split("The node's edges as a list")[1].split("# %%")[0]
    assert missing and all(f"`{a} -> {b}`" in intro for a, b in missing), (missing, intro)
    assert "split" in intro
