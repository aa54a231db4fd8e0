"""The review of lesson 10 (r8): three wrong answers got a right first line and a misleading later
one, and one message wrote out code. Exercise 1: an off-by-one stop (``freed > need``) and a
``host_free`` never decremented also read "hard-coded need?" / "hard-coded host_free?" further down;
exercise 3: a ``storage`` flag read backwards got, on a replay of a real run, the diagnosis of the
last (state, event) pair of the table ("... what 'miss' does to a 'evicted' node"); exercise 2's
"the cap inside a segment" note spelled out ``min(tokens, prompt_len - 1 - pos)``."""
from __future__ import annotations

from kvlab.check import l10_tiers as L


def _load(src: str, name: str):
    scope: dict = {}
    exec(compile(src, f"<wrong 10 {name}>", "exec"), scope)  # noqa: S102 - a test-made wrong answer
    return scope[name]


_EVICT = '''
def write_back_evict(leaves, host_free, need):
    out = {n: ('both' if b else 'device') for n, p, b in leaves}
    freed = 0; hostonly = []
    for name, pages, backed in leaves:
        if freed >= need: break
        if backed:
            out[name] = 'host'; hostonly.append((name, pages))
        else:
            if host_free < pages and host_free + sum(p for _, p in hostonly) >= pages:
                while host_free < pages:
                    n, p = hostonly.pop(0); out[n] = 'evicted'; host_free += p
            if host_free >= pages:
                host_free -= pages; out[name] = 'host'; hostonly.append((name, pages))
            else:
                out[name] = 'evicted'
        freed += pages
    return out
'''
OFF_BY_ONE_STOP = _EVICT.replace("if freed >= need", "if freed > need")
NO_DECREMENT = _EVICT.replace("host_free -= pages; ", "")

CAP_DEVICE_ONLY = '''
def load_back_plan(segments, prompt_len, threshold):
    cap = max(prompt_len - 1, 0)
    dev = sum(n for n, p in segments if p in ('device', 'both'))
    off = sum(n for n, p in segments if p in ('host', 'disk'))
    dev = min(dev, cap)
    if off < threshold:
        off = 0
    return (dev, off, prompt_len - dev - off)
'''

STORAGE_SWAPPED = '''
def next_placement(state, event, storage=False):
    T = {('new', 'insert'): 'device', ('device', 'write'): 'both', ('both', 'evict'): 'host',
         ('device', 'evict'): 'evicted', ('host', 'load_back'): 'both', ('disk', 'load_back'): 'device',
         ('disk', 'miss'): 'evicted', ('host', 'evict_host'): 'HOSTEV'}
    if (state, event) not in T:
        raise ValueError(f"{event} cannot happen in {state}")
    r = T[(state, event)]
    if r == 'HOSTEV':
        r = 'evicted' if storage else 'disk'
    return r
'''


def test_10_review_r8_reference_evict_passes():
    assert L.write_back_evict(_load(_EVICT, "write_back_evict"), verbose=False).passed


def test_10_review_r8_no_hard_coded_guess_once_the_mistake_is_named():
    for src, named in ((OFF_BY_ONE_STOP, "stop as soon as"), (NO_DECREMENT, "the host pool is finite")):
        r = L.write_back_evict(_load(src, "write_back_evict"), verbose=False)
        notes = [c.note or "" for c in r.failures]
        assert not r.passed and named in notes[0], notes
        assert not any("hard-coded" in n or "as if " in n for n in notes), notes


def test_10_review_r8_cap_note_names_the_idea_not_the_code():
    r = L.load_back_plan(_load(CAP_DEVICE_ONLY, "load_back_plan"), verbose=False)
    notes = [c.note or "" for c in r.failures]
    assert not r.passed and any("cap" in n for n in notes), notes
    assert not any("min(" in n or "prompt_len - 1 - pos" in n for n in notes), notes


def test_10_review_r8_replays_are_diagnosed_by_their_own_state_and_event():
    r = L.next_placement(_load(STORAGE_SWAPPED, "next_placement"), verbose=False)
    assert not r.passed
    for c in r.failures:
        note = c.note or ""
        assert "'miss'" not in note and "a 'evicted'" not in note, (c.label, note)
        if c.label.startswith("real run"):
            assert "evict_host" in note or "host eviction" in note or not note, (c.label, note)


def test_10_review_r8_a_right_answer_from_a_changed_input_is_not_expected_x_got_x():
    """Exercise 4, a learner who pops from ``t1``: the headline read "expected ['a'], got ['a']"
    before the reason. A right value that fails for another reason now says so."""
    def pops(t1, t2, target, need):
        out, freed = [], 0
        while freed < need and (t1 or t2):
            side = t1 if (t1 and sum(p for _, p in t1) >= target) or not t2 else t2
            name, pages = side.pop(0)
            out.append(name)
            freed += pages
        return out

    r = L.arc_victims(pops, verbose=False)
    first = r.failures[0]
    assert "in place" in first.note
    assert "the value expected, yet the case fails" in first.why(), first.why()
    assert f"expected {first.expected!r}, got" not in first.why()
