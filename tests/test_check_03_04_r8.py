"""Issue 28 (review r8 of lessons 03 and 04): every wrong answer the reviewer typed that a checker
accepted, left unnamed or named wrong becomes a case here: rejected AND named. The answers are the
reviewer's own code (its ex03.py / ex04.py), copied verbatim."""
from __future__ import annotations

import pytest

from kvlab import check

BASE4 = '\ndef place_first_fit(capacity, ops, *, COALESCE=2, BEST=False, IGNORE_REFUSED_FINISH=True, ZERO_SHARE=True, REFUSED_REUSE=True, DEDUPE=False, SHARE_OF_CAP=False, SORTED=True, BAD_OP=True, NCHECK=True, KEEP_FINISHED=True, NMAX=False):\n    free = [(0, capacity)]\n    placed, starts, refused = {}, {}, []\n    for op in ops:\n        if op[0] == "admit":\n            _, rid, n = op\n            if NCHECK and n < 1: raise ValueError("n")\n            if rid in placed: raise ValueError("already placed")\n            if not REFUSED_REUSE and rid in refused: raise ValueError("already seen")\n            cands = [i for i, (s, l) in enumerate(free) if l >= n]\n            if NMAX and n > capacity: raise ValueError("too big")\n            if not cands:\n                if not (DEDUPE and rid in refused): refused.append(rid)\n                continue\n            i = min(cands, key=lambda i: free[i][1]) if BEST else cands[0]\n            s, l = free[i]\n            if l == n: free.pop(i)\n            else: free[i] = (s + n, l - n)\n            placed[rid] = (s, n); starts[rid] = s\n        elif op[0] == "finish":\n            rid = op[1]\n            if rid not in placed:\n                if IGNORE_REFUSED_FINISH: continue\n                raise KeyError(rid)\n            s, n = placed.pop(rid)\n            if not KEEP_FINISHED: starts.pop(rid, None)\n            if SORTED:\n                free.append((s, n)); free.sort()\n            else:\n                free.append((s, n))\n            if COALESCE:\n                merged = []\n                for fs, fl in (free if SORTED else sorted(free)) if COALESCE == 2 else free:\n                    if merged and merged[-1][0] + merged[-1][1] == fs and (COALESCE == 2 or fs == s):\n                        merged[-1] = (merged[-1][0], merged[-1][1] + fl)\n                    else:\n                        merged.append((fs, fl))\n                if SORTED or COALESCE == 2: free = merged\n                else: free = merged\n        else:\n            if BAD_OP: raise ValueError(op)\n    tot = sum(l for _, l in free); big = max((l for _, l in free), default=0)\n    if SHARE_OF_CAP: share = (tot - big) / capacity\n    elif tot == 0: share = 0.0 if ZERO_SHARE else (tot - big) / tot\n    else: share = (tot - big) / tot\n    return {"starts": starts, "refused": refused, "largest_hole": big, "wasted_share": share}\n'
TA = '\nclass TinyAllocator:\n    FRONT_FREE = False; IGNORE_RC = False; PARTIAL = False; NONATOMIC_FREE = False; DUP_OK = False\n    INCREF_FREE_OK = False; NEG_OK = False; SWAP_OOB = False; RET_IDS = False; POP_BACK = False; SORTED_RET = False; INCREF_NONATOMIC = False\n    def __init__(self, num_blocks):\n        self.ref_count = [0] * num_blocks\n        self.free_queue = deque(range(num_blocks))\n    @property\n    def num_free_blocks(self): return len(self.free_queue)\n    def allocate(self, n):\n        if n < 0 and not self.NEG_OK: raise ValueError(n)\n        if n > len(self.free_queue):\n            if self.PARTIAL:\n                while self.free_queue:\n                    b = self.free_queue.popleft(); self.ref_count[b] = 1\n            raise (OutOfBlocks(len(self.free_queue), n) if self.SWAP_OOB else OutOfBlocks(n, len(self.free_queue)))\n        out = [self.free_queue.pop() if self.POP_BACK else self.free_queue.popleft() for _ in range(max(n, 0))]\n        for b in out: self.ref_count[b] = 1\n        return out\n    def incref(self, ids):\n        ids = list(ids)\n        if not self.INCREF_NONATOMIC and not self.INCREF_FREE_OK:\n            for b in ids:\n                if self.ref_count[b] == 0: raise KVCacheError(f"block {b} is free")\n        for b in ids:\n            if self.INCREF_NONATOMIC and self.ref_count[b] == 0: raise KVCacheError(f"block {b} is free")\n            self.ref_count[b] += 1\n    def free(self, ids):\n        ids = list(ids)\n        if not self.NONATOMIC_FREE:\n            from collections import Counter\n            for b, k in Counter(ids).items():\n                if self.ref_count[b] == 0 or (not self.DUP_OK and k > self.ref_count[b]): raise DoubleFree(b)\n        out = []\n        for b in ids:\n            if self.NONATOMIC_FREE and self.ref_count[b] == 0: raise DoubleFree(b)\n            if self.DUP_OK and self.ref_count[b] == 0: continue\n            self.ref_count[b] -= 1\n            if self.ref_count[b] == 0 or self.IGNORE_RC:\n                if self.IGNORE_RC: self.ref_count[b] = 0\n                if self.FRONT_FREE: self.free_queue.appendleft(b)\n                else: self.free_queue.append(b)\n                out.append(b)\n        if self.SORTED_RET: out = sorted(out)\n        return ids if self.RET_IDS else out\n'
TRANSLATE = '\ndef translate(block_table, pos, block_size, bytes_per_token=1):\n    if pos < 0 or pos >= len(block_table) * block_size: raise ValueError(pos)\n    lb, off = divmod(pos, block_size)\n    pb = block_table[lb]\n    return (lb, off, pb, (pb * block_size + off) * bytes_per_token)'
APPEND = '\ndef blocks_to_append(num_tokens, n, block_size):\n    if num_tokens < 0 or n < 0 or block_size < 1: raise ValueError("bad")\n    return -(-(num_tokens + n) // block_size) - -(-num_tokens // block_size)'
FIRST_FIT = {'worst fit (largest hole)': '\ndef first_fit(free_ranges, n):\n    if n < 1: raise ValueError(n)\n    ok = [(-l, s) for s, l in free_ranges if l >= n]\n    return min(ok)[1] if ok else None', 'only looks at the first hole': '\ndef first_fit(free_ranges, n):\n    if n < 1: raise ValueError(n)\n    if free_ranges and free_ranges[0][1] >= n: return free_ranges[0][0]\n    return None'}
FRAGMENTATION = {'drops every hole tied for largest': '\ndef external_fragmentation(free_ranges):\n    if not free_ranges: return 0\n    m = max(l for _, l in free_ranges)\n    return sum(l for _, l in free_ranges if l != m)', 'uses start instead of length (tuple order swapped)': '\ndef external_fragmentation(free_ranges):\n    if not free_ranges: return 0\n    ls = [s for s, _ in free_ranges]\n    return sum(ls) - max(ls)', 'largest minus smallest': '\ndef external_fragmentation(free_ranges):\n    if len(free_ranges) < 2: return 0\n    ls = [l for _, l in free_ranges]\n    return max(ls) - min(ls)'}
APPEND_FREE_FULL = '\ndef blocks_to_append(num_tokens, n, block_size):\n    if num_tokens < 0 or n < 0 or block_size < 1: raise ValueError("bad")\n    free = 0 if num_tokens == 0 else block_size - num_tokens % block_size\n    return max(0, -(-(n - free) // block_size))'
APPEND_FLOORED = '\ndef blocks_to_append(num_tokens, n, block_size):\n    if num_tokens < 0 or n < 0 or block_size < 1: raise ValueError("bad")\n    free = (-num_tokens) % block_size\n    return max(0, (n - free) // block_size)'


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def _define(code: str, name: str):
    ns: dict = {}
    exec("import math\nfrom collections import deque\nfrom kvlab import DoubleFree, KVCacheError, OutOfBlocks\n" + code, ns)
    return ns[name]


def _notes(result) -> list[str]:
    assert not result.passed, "the checker accepted a wrong answer"
    return [c.note for c in result.failures]


def _named(result, words: str, unwanted: tuple[str, ...] = ()) -> None:
    notes = _notes(result)
    assert words in notes[0], notes
    assert all(n for n in notes), f"a failing case without a name: {notes}"
    for bad in unwanted:
        assert not any(bad in n for n in notes), (bad, notes)


# ------------------------------------------------------------------------------ lesson 03
@pytest.mark.parametrize("label, words, unwanted", [
    ("worst fit (largest hole)", "worst fit", ("exactly n long",)),
    ("only looks at the first hole", "only the first hole", ("missing return",)),
])
def test_03_first_fit(label, words, unwanted):
    _named(check.first_fit(_define(FIRST_FIT[label], "first_fit"), verbose=False), words, unwanted)


@pytest.mark.parametrize("label, words", [
    ("drops every hole tied for largest", "tied"),
    ("uses start instead of length (tuple order swapped)", "start"),
    ("largest minus smallest", "largest minus the smallest"),
])
def test_03_external_fragmentation(label, words):
    _named(check.external_fragmentation(_define(FRAGMENTATION[label], "external_fragmentation"), verbose=False), words)


def _place(kw: str):
    return _define(BASE4 + f"_pf = place_first_fit\ndef place_first_fit(capacity, ops): return _pf(capacity, ops, {kw})",
                   "place_first_fit")


@pytest.mark.parametrize("kw, words, unwanted", [
    ("IGNORE_REFUSED_FINISH=False", "finish of a refused request is ignored", ("default value",)),
    ("KEEP_FINISHED=False", "starts keeps every request ever placed", ("field of the contract",)),
    ("REFUSED_REUSE=False", "refused id may be admitted again", ()),
    ("DEDUPE=True", "each refusal is listed", ()),
    ("NMAX=True", "bigger than the whole arena is refused", ()),
])
def test_03_place_first_fit(kw, words, unwanted):
    _named(check.place_first_fit(_place(kw), verbose=False), words, unwanted)


# ------------------------------------------------------------------------------ lesson 04
def test_04_translate_by_float_division_fails_on_a_huge_position():
    code = TRANSLATE.replace("lb, off = divmod(pos, block_size)", "lb = int(pos / block_size); off = pos - lb * block_size")
    _named(check.translate(_define(code, "translate"), verbose=False), "float division")


@pytest.mark.parametrize("old, new, words, unwanted", [
    ("lb, off = divmod(pos, block_size)", "lb, off = pos // block_size, pos % len(block_table)",
     "offset is pos % block_size", ("off-by-one",)),
    ("return (lb, off, pb,", "return (lb, pb, off,", "offset and physical block swapped", ()),
])
def test_04_translate(old, new, words, unwanted):
    _named(check.translate(_define(TRANSLATE.replace(old, new), "translate"), verbose=False), words, unwanted)


@pytest.mark.parametrize("code, words", [
    (APPEND.replace("return ", "return max(1, ").rstrip() + ")", "at least one block"),
    (APPEND_FREE_FULL, "last one is full"),
    (APPEND_FLOORED, "last one is full"),
])
def test_04_blocks_to_append(code, words):
    _named(check.blocks_to_append(_define(code, "blocks_to_append"), verbose=False), words, ("float division",))


@pytest.mark.parametrize("flags, words, unwanted", [
    ("DUP_OK = True", "listed more times than its ref count", ("already free",)),
    ("RET_IDS = True", "only the blocks whose count reached 0", ()),
    ("POP_BACK = True", "FRONT of the free queue", ("join the BACK",)),
    ("FRONT_FREE = True", "join the BACK", ()),  # still named so once the pop-back answer has its own name
])
def test_04_block_allocator(flags, words, unwanted):
    cls = _define(TA + "\nclass TinyAllocator(TinyAllocator):\n    " + flags, "TinyAllocator")
    _named(check.block_allocator(cls, verbose=False), words, unwanted)
