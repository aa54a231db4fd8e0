"""Checkers for lesson 08 (eviction and scheduling): LRU eviction and lock references.

    lru_evict      the nodes LRU eviction removes, in order (unlocked leaves only)
    inc_lock_ref   lock a path of the tree (lock references), returning the evictable change
    admit_plan     does a new request fit, and how many tokens must be evicted for it

The expected answers are :meth:`RadixCache.evict`, :meth:`RadixCache.inc_lock_ref` and
:meth:`CacheManager.admit` on a copy of the same tree or cache. State failures list only the
nodes that differ; each FAIL names the common mistake when the answer is exactly what that
mistake gives. Mirrors no vLLM or SGLang file (exercises); the rules are SGLang's
``RadixCache.evict`` / ``inc_lock_ref`` and its scheduler's admission check.

Example:
    >>> lru_evict(lambda root, num_tokens: [], verbose=False).passed   # evicts nothing
    False
"""
from __future__ import annotations

import copy
import random
from typing import Callable

from ..reuse.cache_manager import CacheManager, serve_request
from ..reuse.radix_cache import RadixCache
from ..reuse.radix_cache import TreeNode
from .diagnose import argument_slip, changed_input, exact_equal, matching_mistake, matching_mistakes, unit_slip
from .harness import Checker, CheckResult, Raised, call_in_place, same_outcome
from .l07_radix import related_prompts

__all__ = ["lru_evict", "inc_lock_ref", "admit_plan"]


def _pressure_tree(seed: int) -> tuple[RadixCache, list[TreeNode]]:
    """A small tree with varied access times and some locked paths (returns the tree, locked nodes).

    The requests go through the request cycle (:func:`serve_request` on a :class:`CacheManager`);
    then some prefixes are matched again (LRU order changes) and some paths locked directly on
    the tree, as lesson 08 does by hand."""
    rng = random.Random(seed)
    cm = CacheManager(256, block_size=1)
    cache = cm.tree
    seqs: list[list[int]] = []
    for _ in range(rng.randint(4, 8)):
        base = rng.choice(seqs) if seqs and rng.random() < 0.75 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(4) for _ in range(rng.randint(1, 6))]
        serve_request(cm, s, output=[rng.randrange(4) for _ in range(rng.randint(0, 3))])
        seqs.append(s)
    for s in rng.sample(seqs, k=min(len(seqs), rng.randint(2, 5))):  # touch some again (LRU order changes)
        cache.match_prefix(s[: rng.randint(1, len(s))])
    locked = []
    for s in rng.sample(seqs, k=rng.randint(0, 2)):
        m = cache.match_prefix(s[: rng.randint(1, len(s))])
        cache.inc_lock_ref(m.last_node)
        locked.append(m.last_node)
    cache.check_integrity()
    return cache, locked


def _tied_tree(seed: int) -> RadixCache:
    """A pressure tree whose leaves were all last used at one tick: LRU's tie-break (the smaller
    id first) decides the whole order."""
    cache, _locked = _pressure_tree(seed)
    tick = max(n.last_access_time for n in _nodes_below(cache.root))
    for n in _nodes_below(cache.root):
        n.last_access_time = tick
    cache.set_eviction_policy("lru")  # rebuilds the eviction heap over the new times
    cache.check_integrity()
    return cache


def _find(cache: RadixCache, node_id: int) -> TreeNode:
    if node_id == 0:
        return cache.root
    return next(n for n in _nodes_below(cache.root) if n.id == node_id)


def _tree_state(cache: RadixCache) -> dict:
    return {n.id: (tuple(n.key), n.lock_ref, n.last_access_time, len(n.children)) for n in [cache.root, *_nodes_below(cache.root)]}


def _lru_by(rule: str) -> Callable:
    """lru_evict with one rule changed (each a plausible mistake)."""
    def fn(root: TreeNode, num_tokens: int) -> list[int]:
        nodes, removed, order, freed = _nodes_below(root), set(), [], 0
        first_leaves = {n.id for n in nodes if not n.children}
        if rule == "sorted_once":                # one pass over the unlocked nodes sorted once: a parent
            for v in sorted((n for n in nodes if n.lock_ref == 0), key=lambda n: (n.last_access_time, n.id)):
                if freed < num_tokens and all(ch.id in removed for ch in v.children.values()):
                    removed.add(v.id)            # seen before its last child went is never seen again
                    order.append(v.id)
                    freed += len(v.key)
            return order
        if rule == "rounds":                     # all of this round's leaves go (oldest first) before any
            while freed < num_tokens:            # parent they leave childless is looked at
                leaves = sorted((n for n in nodes if n.id not in removed and n.lock_ref == 0
                                 and all(ch.id in removed for ch in n.children.values())),
                                key=lambda n: (n.last_access_time, n.id))
                if not leaves:
                    break
                for v in leaves:
                    if freed >= num_tokens:
                        break
                    removed.add(v.id)
                    order.append(v.id)
                    freed += len(v.key)
            return order
        while freed < num_tokens or rule == "no_stop" or (rule == "strict" and freed == num_tokens):
            cands = [n for n in nodes if n.id not in removed
                     and (n.lock_ref == 0 or rule == "locked")
                     and (rule == "inner" or all(ch.id in removed for ch in n.children.values()))
                     and (rule != "no_new_leaves" or n.id in first_leaves)]
            if not cands:
                break
            key = {"mru": lambda n: (-n.last_access_time, n.id), "size": lambda n: (len(n.key), n.id),
                   "tie_desc": lambda n: (n.last_access_time, -n.id), "no_tie": lambda n: n.last_access_time,
                   "id_only": lambda n: n.id, "lfu": lambda n: (n.hit_count, n.last_access_time, n.id)}.get(
                rule, lambda n: (n.last_access_time, n.id))
            victim = min(cands, key=key)
            removed.add(victim.id)
            order.append(victim.id)
            freed += 1 if rule == "nodes" else len(victim.key)
        return order
    return fn


LRU_MISTAKES = dict([
    ("only leaves can go: an inner node holds a prefix its children still need", _lru_by("inner")),
    ("a locked node (lock_ref > 0) is in use by a running request: never evict it", _lru_by("locked")),
    ("when a node's last child goes, it becomes a leaf and may go next", _lru_by("no_new_leaves")),
    ("least recently used goes first: the smallest last_access_time, not the largest", _lru_by("mru")),
    ("stop as soon as at least num_tokens tokens are freed", _lru_by("no_stop")),
    ("count tokens (len(node.key) each), not nodes: stop once the freed TOKENS reach num_tokens", _lru_by("nodes")),
    ("LRU orders the leaves by last_access_time (then id), not by how many tokens they hold", _lru_by("size")),
    ("stop as soon as the freed tokens reach num_tokens (>=): one more node is one too many", _lru_by("strict")),
    ("a tie in last_access_time goes to the SMALLER id first: the key is (last_access_time, id), both ascending",
     _lru_by("tie_desc")),
    ("a parent that became a leaf competes at once with the remaining leaves: re-pick the oldest after every "
     "removal, not only once this round's leaves are all gone", _lru_by("rounds")),
    ("choose again after every removal: a node becomes a leaf only once its last child is gone, and a list sorted "
     "and walked once may have passed it by then", _lru_by("sorted_once")),
    ("LRU orders by last_access_time first: the id only breaks a tie", _lru_by("id_only")),
    ("LRU orders by last_access_time, not by hit_count (that is LFU): the least recently used leaf goes first",
     _lru_by("lfu")),
])
# Only on the trees with tied access times (a tie broken by list order is right elsewhere):
TIE_MISTAKES = dict([
    ("a tie in last_access_time must be broken by the id (smaller first), not by the order you found the nodes in",
     _lru_by("no_tie")),
])


def lru_evict(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(root, num_tokens) -> list of node ids``: the nodes LRU eviction removes, in order.

    Rules (SGLang's, as ``RadixCache.evict`` with policy ``"lru"``): only leaves with
    ``lock_ref == 0`` can go, never the root; the one with the smallest
    ``(last_access_time, id)`` goes first; when a node's last child goes, it becomes a leaf and
    may go next; stop as soon as at least ``num_tokens`` tokens (``len(node.key)`` each) are
    freed, or when nothing is evictable. Do not change the tree. Expected: what
    ``RadixCache.evict(num_tokens)`` removes on a copy of the same tree.
    """
    c = Checker("lru_evict", fn, verbose=verbose)
    for seed in range(11):
        cache = _pressure_tree(seed)[0] if seed < 8 else _tied_tree(seed)
        total = cache.evictable_size()
        for want in sorted({1, max(1, total // 3), total, total + 5}) + ([0] if seed in (2, 9) else []):  # 0 last: `<=` for `<` shows on an earlier want there
            ref = copy.deepcopy(cache)
            expected = ref.evict(want).node_ids
            tied = " every node last used at the same tick," if seed >= 8 else ""
            label = (f"tree {seed} ({cache.num_nodes} nodes,{tied} {total} evictable tokens, {cache.protected_size()} "
                     f"locked): evict {want}")
            if c.unusable(label, expected):
                continue
            before = _tree_state(cache)
            got = call_in_place(fn, cache.root, want)
            changed = _tree_state(cache) != before
            if isinstance(got, (list, tuple)):
                got = list(got)
            ok = same_outcome(expected, got) and not changed
            note = ("it changed the tree: work the order out without removing anything (keep the nodes that "
                    "went in a set of your own)" if changed else "")
            if not ok and not changed and want == 0 and got:
                note = ("asked for 0 tokens, it evicted a node: nothing is owed, so nothing goes (test the stop "
                        "rule before each removal, not after it)")
            elif not ok and not changed and isinstance(got, list) and 0 in got:
                note = ("the root may never go (node 0, even once it has no children left): only nodes below it "
                        "hold tokens that eviction can free")
            elif not ok and not changed:
                note = (matching_mistake(got, {**LRU_MISTAKES, **(TIE_MISTAKES if seed >= 8 else {})}, cache.root, want,
                                         expected=expected) or _evict_note(cache, got)
                        or argument_slip(lambda n, cache=cache: copy.deepcopy(cache).evict(n).node_ids, (want,), got,
                                         ("num_tokens",))
                        or ("every node here was last used at the same tick, so only the id can order them: the "
                            "smaller id goes first, key (last_access_time, id)" if seed >= 8 else ""))
            c.record(label, expected, got, passed=ok, note=note)
            if changed:
                break
    return c.done()


def _evict_note(cache: RadixCache, got: object) -> str:
    """What is wrong in an eviction order no single known mistake gives: an inner or locked node in it."""
    if isinstance(got, (set, frozenset)):
        return "return a list in the order the nodes go: a set has no order"
    if not isinstance(got, list):
        return ""
    if got and all(isinstance(i, TreeNode) for i in got):
        return "return the nodes' ids (node.id), not the node objects"
    by_id = {n.id: n for n in _nodes_below(cache.root)}
    if any(by_id[i].lock_ref > 0 for i in got if isinstance(i, int) and i in by_id):
        return "a locked node (lock_ref > 0) is in the list: a running request uses it, never evict it"
    gone: set[int] = set()
    for i in got:
        n = by_id.get(i) if isinstance(i, int) else None
        if n is not None and any(ch.id not in gone for ch in n.children.values()):
            return f"node {i} still had children when it went: only leaves can go (a parent after its last child)"
        gone.add(i)
    return ""


def inc_lock_ref(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(node) -> int``: lock ``node`` and every ancestor below the root.

    Each node from ``node`` up to (not including) the root gets ``lock_ref += 1``; return the
    change of the evictable size: minus the tokens of every node that was unlocked
    (``lock_ref == 0``) before. The root (``parent is None``) is never touched. Expected:
    ``RadixCache.inc_lock_ref`` on a copy of the same tree; every node's ``lock_ref`` is compared.
    """
    c = Checker("inc_lock_ref", fn, verbose=verbose, compare=exact_equal)
    for seed in range(8):
        cache, _locked = _pressure_tree(100 + seed)
        rng = random.Random(seed)
        ids = sorted(n.id for n in _nodes_below(cache.root))
        for node_id in rng.sample(ids, k=min(3, len(ids))) + ([0] if seed == 0 else []):
            ref, mine = copy.deepcopy(cache), copy.deepcopy(cache)
            delta = ref.inc_lock_ref(_find(ref, node_id))
            expected = {"returned": delta, **_locks(ref)}
            label = f"tree {seed} ({cache.num_nodes} nodes), lock node {node_id}" + (" (the root)" if node_id == 0 else "")
            if c.unusable(label, expected):
                continue
            got = call_in_place(fn, _find(mine, node_id))
            if isinstance(got, Raised):
                c.record(label, expected, got, note=("the root (parent is None) keeps its permanent lock_ref of 1: "
                                                     "leave it as it is and return 0, no error" if node_id == 0 else ""))
                continue
            found = [m for m, rule in LOCK_MISTAKES.items()
                     if _lock_sim(cache, node_id, rule) == _locks(mine) != _lock_sim(cache, node_id, "right")]
            note = ((unit_slip(expected["returned"], got) if not isinstance(got, int) else None)
                    or (found[0] if found else _lock_note(expected, got, _locks(mine))))
            c.record(label, expected, {"returned": got, **_locks(mine)}, note=note).candidates = found
    return c.done()


# What a wrong walk does to the locks (the returned value is diagnosed apart, by _lock_note), likeliest first:
LOCK_MISTAKES = {
    "lock_ref = 1 overwrites other requests' locks: add one (lock_ref += 1), each running request holds its own":
        "overwrite",
    "a node another request already locks still gets this request's +1 (lock_ref += 1 on every node of the path, "
    "locked or not): each running request holds its own lock": "stop_at_locked",
    "the node itself is locked too: start at node, then walk up through node.parent": "skip_self",
    "not every node up the path was locked: walk up through node.parent to the root's child": "node_only",
    "not every node up the path was locked: walk up through node.parent to the root's child, and lock that one "
    "too": "below_child",
}


def _lock_sim(cache: RadixCache, node_id: int, rule: str) -> dict:
    """Every node's lock_ref after locking ``node_id`` on a copy with one rule changed ("right" changes none):
    "overwrite" sets ``lock_ref = 1``, "node_only" locks the node alone, "below_child" stops below the root's child,
    "stop_at_locked" stops at the first node already locked, "skip_self" starts at the node's parent."""
    sim = copy.deepcopy(cache)
    node = _find(sim, node_id)
    if rule == "skip_self" and node.parent is not None:
        node = node.parent
    while node.parent is not None and not (rule == "below_child" and node.parent.parent is None):
        if rule == "stop_at_locked" and node.lock_ref > 0:
            break
        node.lock_ref = 1 if rule == "overwrite" else node.lock_ref + 1
        node = node.parent if rule != "node_only" else sim.root
    return _locks(sim)


def _locks(cache: RadixCache) -> dict:
    """Every node's lock_ref as its own field, so a failure lists only the nodes that differ."""
    return {f"node {n} lock_ref": st[1] for n, st in _tree_state(cache).items()}


def _lock_note(expected: dict, returned: object, locks: dict) -> str:
    """The usual inc_lock_ref mistakes, from what the learner's version did to the tree."""
    wrong = [k for k in expected if k != "returned" and expected[k] != locks.get(k)]
    if "node 0 lock_ref" in wrong:
        return "the root was locked too: stop below it (while node.parent is not None)"
    if wrong and all(locks[k] < expected[k] for k in wrong):
        return "not every node up the path was locked: walk up through node.parent to the root's child"
    if not wrong and isinstance(returned, int) and returned == -expected["returned"] != 0:
        return "the sign: locking takes tokens away from the evictable size (a negative change)"
    if not wrong and isinstance(returned, int) and returned < expected["returned"]:
        return "nodes that were already locked were already protected: only 0 -> 1 changes the evictable size"
    if not wrong and returned == 0 and expected["returned"] < 0:
        return ("returned 0, yet some node went from 0 to 1 lock: look at a node's lock_ref BEFORE you add the "
                "lock (after it, no node reads 0)")
    if not wrong and isinstance(returned, int) and expected["returned"] < returned < 0:
        return "count tokens, not nodes: each newly locked node takes len(node.key) tokens off the evictable size"
    return ""


# -------------------------------------------------------------------------- admission plan
def _nodes_below(root: TreeNode) -> list[TreeNode]:
    out, stack = [], list(root.children.values())
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children.values())
    return out


def _plan_match(root: TreeNode, tokens: list[int], limit: int,
                whole_nodes: bool = False) -> tuple[int, list[tuple[TreeNode, int]]]:
    """The longest match of ``tokens`` up to ``limit`` tokens: (its length, the path as (node, its tokens matched)).
    ``whole_nodes`` (a mistake): a node the match ends inside counts for nothing."""
    node, pos, path = root, 0, []
    while pos < limit:
        child = node.children.get(tokens[pos])
        if child is None:
            break
        k = 0
        while k < len(child.key) and pos + k < limit and child.key[k] == tokens[pos + k]:
            k += 1
        if whole_nodes and k < len(child.key):
            break
        path.append((child, k))
        pos += k
        if k < len(child.key):
            break
        node = child
    return pos, path


def _plan_evictable(root: TreeNode, path: list[tuple[TreeNode, int]], rule: str) -> int:
    """The unlocked tokens once the path is locked, with one rule changed ("right" changes none)."""
    def unlocked(n: TreeNode, in_total: bool) -> bool:
        if rule == "lock_le1":
            return n.lock_ref <= 1
        ignored = rule == "count_locked" and in_total
        leaves = rule == "leaves_only" or (rule == "leaves_total" and in_total)
        return (n.lock_ref == 0 or ignored) and (not leaves or not n.children)
    evictable = sum(len(n.key) for n in _nodes_below(root) if unlocked(n, True))
    if rule == "no_lock":
        return evictable
    return evictable - sum(len(n.key) if rule in ("whole_node", "whole_other") else k for n, k in path
                           if rule in ("other_lock", "whole_other") or unlocked(n, False))


def _plan_by(rule: str):
    """admit_plan with one rule changed (each a plausible mistake; "right" changes none)."""
    def fn(root: TreeNode, tokens: list[int], num_free: int):
        limit = len(tokens) if rule in ("no_cap", "need_uncapped", "lock_uncapped") else len(tokens) - 1
        pos, path = _plan_match(root, tokens, limit, whole_nodes=rule == "whole_match")
        need = len(tokens) - (0 if rule == "no_prefix" else pos)
        free = 0 if rule == "ignore_free_all" else num_free
        pos = min(pos, len(tokens) - 1) if rule == "need_uncapped" else pos
        if rule == "lock_uncapped":
            pos = min(pos, len(tokens) - 1)
            need = len(tokens) - pos
        evictable = _plan_evictable(root, path, rule)
        if need <= num_free and rule not in ("no_free", "ignore_free", "ignore_free_all"):
            return (pos, 0)
        if rule != "partial" and (need >= free + evictable if rule == "ge" else need > free + evictable):
            return None
        if rule in ("evict_need", "ignore_free", "ignore_free_all"):
            return (pos, need)
        return (pos, need - num_free + (rule == "evict_plus_one"))
    return fn


ADMIT_MISTAKES = dict([
    ("it ignores another request's lock: a node on the matched path that another running request already locks "
     "(lock_ref > 0) was never evictable, so locking it again takes nothing off; take off only the matched tokens "
     "of path nodes with lock_ref == 0", _plan_by("other_lock")),
    ("the request locks its matched prefix before anything is evicted: those tokens cannot be evicted "
     "to make room for it", _plan_by("no_lock")),
    ("any lock_ref > 0 protects a node (it counts the running requests): lock_ref == 1 is a lock too",
     _plan_by("lock_le1")),
    ("a node locked by a running request (lock_ref > 0) is not evictable: count only the nodes with "
     "lock_ref == 0 as unlocked tokens", _plan_by("count_locked")),
    ("every unlocked node counts, not only the leaves: once a leaf goes, its parent is a leaf and can go "
     "too", _plan_by("leaves_only")),
    ("every unlocked node counts, not only the leaves: once a leaf goes, its parent is a leaf and can go "
     "too", _plan_by("leaves_total")),
    ("a fully cached prompt still computes its last token: match at most len(tokens) - 1 tokens", _plan_by("no_cap")),
    ("a fully cached prompt still computes its last token: the need counts the last token too "
     "(len(tokens) - prefix_len with the capped prefix_len), even when the match covers it", _plan_by("need_uncapped")),
    ("lock only the capped prefix (prefix_len tokens): the last token is computed again, so its cached slot is "
     "not locked and stays evictable", _plan_by("lock_uncapped")),
    ("evict only what the free slots do not cover (need - num_free)", _plan_by("evict_need")),
    ("evict exactly what the free slots do not cover (need - num_free): one more is one too many",
     _plan_by("evict_plus_one")),
    ("a match that ends inside a node locks only its matched part (the node is split there); the rest "
     "stays evictable", _plan_by("whole_node")),
    ("it ignores another request's lock (a locked path node was never evictable: take off only the path nodes "
     "with lock_ref == 0), and a match that ends inside a node locks only its matched part", _plan_by("whole_other")),
    ("a match may end inside a node: its matched tokens count too (prefix_len includes them; the node is split "
     "there), not only the nodes matched whole", _plan_by("whole_match")),
    ("when even every unlocked token is not enough, nothing is evicted: the request waits (None)",
     _plan_by("partial")),
    ("the matched prefix needs no new slots: need = len(tokens) - prefix_len", _plan_by("no_prefix")),
    ("when the free slots cover the need nothing is evicted (0, never a negative count)", _plan_by("no_free")),
    ("the free slots come first: when num_free covers the need nothing is evicted, and otherwise only what it "
     "does not cover (need - num_free)", _plan_by("ignore_free")),
    ("the free slots come first: when num_free covers the need nothing is evicted, and otherwise only what it "
     "does not cover (need - num_free); the request waits only when free plus unlocked tokens fall short",
     _plan_by("ignore_free_all")),
    ("it fits exactly when the need equals the free slots plus the unlocked tokens: wait only when the need is "
     "MORE than that (> not >=)", _plan_by("ge")),
])


def _admission_cases() -> list[tuple[str, CacheManager, list[int]]]:
    """(label, cache, tokens): hand-made trees first (each mistake shows on one), then random ones."""
    out = []
    for pool in (20, 14):
        cm = CacheManager(pool, block_size=1)
        for seq in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 9, 9, 9]):
            serve_request(cm, seq)
        tree = f"tree [1 2 3]->{{[4 5 6], [7 8]}}, [9 9 9 9]; {cm.allocator.num_free_blocks} free"
        for tokens in ([1, 2, 3, 7, 8, 10, 11], [1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8] + list(range(20, 26)),
                       [1, 2, 3, 7, 8] + list(range(20, 30)), [1, 2, 3, 4] + list(range(20, 29)),
                       list(range(20, 34)), list(range(20, 40)), [5]):
            out.append((f"{tree}: tokens {tokens}", cm, tokens))
    cm = CacheManager(12, block_size=1)                           # the tree fills the pool: 0 free
    for seq in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 9, 9, 9]):
        serve_request(cm, seq)
    for tokens in ([1, 2, 3, 4, 5, 6], [9, 9, 9, 9], [1, 2, 3, 7, 8, 10]):   # fully cached prompts need 1 slot
        out.append((f"same tree, the pool full (0 free): tokens {tokens}", cm, tokens))
    cm = CacheManager(14, block_size=1)
    for seq in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 9, 9, 9]):
        serve_request(cm, seq)
    cm.admit("running", [9, 9, 9, 9, 5])                         # a running request locks [9 9 9 9]
    for tokens in ([9, 9, 9, 9, 6], [1, 2, 3] + list(range(20, 30)), list(range(20, 30)),
                   list(range(20, 29)), [1, 2, 3] + list(range(20, 26))):   # the last two fit exactly
        out.append((f"same tree, [9 9 9 9] locked by a running request, 1 free: tokens {tokens}", cm, tokens))
    cm = CacheManager(20, block_size=1)
    for seq in ([1, 2, 3, 5, 6], [1, 2, 3, 9], [5, 6, 7]):
        serve_request(cm, seq)
    for tokens in ([1, 2, 5, 6, 7, 8], [1, 2, 3, 5, 6], [1, 2, 3, 5, 7] + list(range(20, 33))):
        out.append((f"tree [1 2 3]->{{[5 6], [9]}}, [5 6 7]; {cm.allocator.num_free_blocks} free: tokens {tokens}", cm, tokens))
    cm = CacheManager(3, block_size=1)                            # fully cached, 0 free: its last token's
    serve_request(cm, [1, 2, 3])                                  # slot is evicted for it (after > vs >=)
    out.append(("tree [1 2 3] unlocked, 0 free: tokens [1, 2, 3]", cm, [1, 2, 3]))
    rng = random.Random(8)
    for seed in range(6):
        seqs = related_prompts(rng, rng.randint(3, 6), alphabet=4, max_new=6)
        cm = CacheManager(sum(map(len, seqs)) + rng.randint(2, 6), block_size=1)
        for q in seqs:
            serve_request(cm, q)
        if rng.random() < 0.6:
            s = rng.choice(seqs)
            cm.admit("running", s[: rng.randint(1, len(s))] + [7])
        for _ in range(3):
            s = rng.choice(seqs)
            tokens = s[: rng.randint(1, len(s))] + [rng.randrange(4, 8) for _ in range(rng.randint(0, 8))]
            out.append((f"random cache {seed} ({cm.tree.num_nodes} nodes, {cm.allocator.num_free_blocks} free): "
                        f"tokens {tokens}", cm, tokens))
    return out + _locked_path_cases()


def _exact_fit(cm: CacheManager, prefix: list[int], extra: int = 0) -> list[int]:
    """``prefix`` and new tokens (ids from 20 up, never cached) so many that the request needs exactly the
    free slots plus the unlocked tokens left after its own lock (``extra`` more: one too many)."""
    c = copy.deepcopy(cm)
    m = c.tree.match_prefix(prefix)
    if m.last_node is not c.tree.root:
        c.tree.inc_lock_ref(m.last_node)
    new = c.allocator.num_free_blocks + c.tree.evictable_size() - (len(prefix) - m.prefix_len) + extra
    return list(prefix) + list(range(20, 20 + max(1, new)))


def _locked_path_cases() -> list[tuple[str, CacheManager, list[int]]]:
    """A node on the matched path locked by another running request (once or twice), the new request fitting
    exactly or by one token too many: counting the locked tokens as evictable, or taking them off again, shows."""
    out = []
    for pool, runners in ((14, 1), (18, 2)):
        cm = CacheManager(pool, block_size=1)
        for seq in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 9, 9, 9]):
            serve_request(cm, seq)
        for i in range(runners):
            cm.admit(f"running {i + 1}", [9, 9, 9, 9, 5 + i])
        by = "a running request" if runners == 1 else f"{runners} running requests (lock_ref {runners})"
        for prefix, extra in [(p, e) for p in ([9, 9, 9, 9], [9, 9], [1, 2, 3, 9]) for e in (0, 1)]:
            tokens = _exact_fit(cm, prefix, extra)
            out.append((f"tree [1 2 3]->{{[4 5 6], [7 8]}}, [9 9 9 9] locked by {by}, {cm.allocator.num_free_blocks} "
                        f"free: tokens {tokens} ({'one too many' if extra else 'fits exactly'})", cm, tokens))
    rng = random.Random(12)
    for seed in range(5):
        seqs = related_prompts(rng, rng.randint(3, 6), alphabet=3, max_new=6)
        cm = CacheManager(sum(map(len, seqs)) + 2 + seed, block_size=1)
        for q in seqs:
            serve_request(cm, q)
        s = max(seqs, key=len)
        for i in range(1 + seed % 2):                            # one or two other requests lock a prefix of s
            cm.admit(f"running {i + 1}", s[: rng.randint(1, len(s))] + [7 + i])
        for extra in (0, 1):
            tokens = _exact_fit(cm, s[: rng.randint(1, len(s))], extra)
            out.append((f"random cache {seed} ({cm.tree.num_nodes} nodes, a prefix locked by another request, "
                        f"{cm.allocator.num_free_blocks} free): tokens {tokens}", cm, tokens))
    return out


def admit_reference(cm: CacheManager, tokens: list[int]) -> tuple[int, int] | None:
    """What :meth:`CacheManager.admit` does on a copy of ``cm``: None (does not fit), or
    (prefix_len, tokens the tree was asked to evict)."""
    c = copy.deepcopy(cm)
    start = len(c.log)
    a = c.admit("new request", tokens)
    if a is None:
        return None
    asked = [e.detail["requested"] for e in list(c.log)[start:] if e.kind == "evict"]
    c.check_integrity()
    return (a.prefix_len, asked[0] if asked else 0)


def _plan_slip(expected: tuple[int, int] | None, got: object) -> str:
    """A type slip in an admission plan: a float count, a list for the tuple (both named)."""
    if got is None or expected is None:
        return ""
    if expected is None or not isinstance(got, (list, tuple)):
        return unit_slip(expected, got) or ""
    item = unit_slip(expected, tuple(got)) if len(got) == len(expected) else None
    if isinstance(got, list):
        return f"{item} (and return a tuple, not a list)" if item else (unit_slip(expected, got) or "")
    return item or ""


def admit_plan(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(root, tokens, num_free) -> None | (prefix_len, tokens_to_evict)`` (block size 1):
    does a new request fit, and how much must the tree evict for it. Expected:
    :func:`admit_reference`, ``CacheManager.admit`` on a copy of the same cache; the tree must be
    unchanged afterwards."""
    c = Checker("admit_plan", fn, verbose=verbose,
                compare=lambda e, a: (e is None and a is None) or (isinstance(a, tuple) and exact_equal(e, a)))
    for label, cm, tokens in _admission_cases():
        expected = admit_reference(cm, tokens)
        if c.unusable(label, expected):
            continue
        mine = copy.deepcopy(cm)
        before = _tree_state(mine.tree)
        mine_tokens = list(tokens)
        got = call_in_place(fn, mine.tree.root, mine_tokens, mine.allocator.num_free_blocks)
        changed = _tree_state(mine.tree) != before
        note = ("it changed the tree: plan only, the cache itself admits (lock, evict) afterwards" if changed else
                changed_input((tokens,), (mine_tokens,), ("tokens",)) or "")
        ok = same_outcome(expected, got, c.compare) and not note
        if not ok and not note and not isinstance(got, Raised):
            note = _plan_slip(expected, got)
        if not ok and not note:
            answer = tuple(got) if isinstance(got, list) else got
            found = matching_mistakes(answer, ADMIT_MISTAKES, cm.tree.root, list(tokens), cm.allocator.num_free_blocks,
                                      expected=expected)
            note = found[0] if found else ""
            c.record(label, expected, got, passed=ok, note=note).candidates = found
            continue
        c.record(label, expected, got, passed=ok, note=note)
    return c.done()
