"""What ``GET /dashboard`` draws: the server's real pool and radix tree, frozen on the engine thread.

The engine loop calls :meth:`Dashboard.track` after every step (which request inserted each new
tree node), :meth:`Dashboard.admitted` when a request is admitted (which earlier requests put
its cached tokens in the tree) and :meth:`Dashboard.capture` between steps; ``capture`` freezes
``Engine.snapshot()`` (a :class:`~kvlab.memory.snapshot.MemorySnapshot`) and
``RadixCache.snapshot()`` (a :class:`~kvlab.reuse.radix_snapshot.RadixSnapshot`) into one plain
dict, at most every ``min_interval`` seconds while the engine is busy and once more when it goes
idle. The HTTP side only reads ``state`` (a new dict each capture, never changed after) and sends
it as server-sent events (``/dashboard/events``, at most 10 a second, only when ``version`` moved).

Block states in ``state["blocks"]["state"]``: 0 free, 1 held by one running request only,
2 cached in the tree only, 3 shared (reference count > 1: the tree and a request, or two samples).
Each tree node carries its token ``ids``, its blocks ``kv`` (the pool's block ids), its ``tier``
(``device``, ``both``, ``host`` or ``disk`` when the server runs with tiers; else ``device``) and
``evicted: False``; a node evicted in the last ``ghost_s`` seconds stays in
``state["evicted_nodes"]`` (``evicted: True``, drawn as a ghost). ``state["cow_blocks"]``: the destination blocks of the copy-on-write copies since the
previous capture (the page flashes them). ``served``: the last finished requests, in order, each
with its prompt's token ids and its client name (``user``, "" if none) (``GET /dashboard/served``:
the router view groups them into conversations).

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> from kvlab.serve.loop import EngineLoop, Submission
    >>> model, tok = load_bundled()
    >>> loop = EngineLoop(model, tok, num_blocks=32, block_size=4)
    >>> loop.start()
    >>> _ = loop.generate_sync(Submission(tok.encode("def hello():"), max_tokens=3))
    >>> _ = loop.generate_sync(Submission(tok.encode("def hello():"), max_tokens=3))
    >>> s = loop.call(lambda e: loop.dashboard.capture(e, loop, force=True))
    >>> s["used_blocks"] == 32 - s["free_blocks"], s["requests"][-1]["cached"] > 0
    (True, True)
    >>> loop.dashboard.sources_of["req-2"][0]["rid"]
    'req-1'
    >>> loop.stop()
"""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any

from ..reuse.radix_cache import common_prefix_len

__all__ = ["Dashboard", "tree_nodes", "evicted_nodes"]

FREE, HELD, CACHED, SHARED = 0, 1, 2, 3
_TEXT_CHARS = 40                       # a node's label on the page


def _path_tokens(node) -> list[int]:
    """The tokens from the root down to the end of ``node``."""
    keys = []
    while node is not None and node.parent is not None:
        keys.append(node.key)
        node = node.parent
    return [t for k in reversed(keys) for t in k]


def _request_tokens(state) -> list[int]:
    """A request's prompt and its first sample's output (what it caches in the tree)."""
    out = state.outputs[0] if state.outputs else []
    return list(state.prompt_ids) + list(out)


def walk(tree, tokens: list[int], upto: int) -> list[tuple[Any, int]]:
    """The tree's nodes that hold ``tokens[:upto]``, root first, each with how many of those
    tokens it holds (reads the tree, changes nothing)."""
    node, pos, out = tree.root, 0, []
    while pos < upto:
        nxt, m = None, 0
        for c in node.children.values():           # children share at most a partial first page
            k = common_prefix_len(c.key, tokens[pos:])
            if k > m:
                nxt, m = c, k
        if nxt is None:
            break
        out.append((nxt, min(m, upto - pos)))
        if m < len(nxt.key):
            break
        pos, node = pos + m, nxt
    return out


def tree_nodes(tree) -> list[dict]:
    """The tree as the page gets it, without text or marks: ``{"id", "parent", "tokens", "ids",
    "evicted": False}`` per node, parents first (root id 0 is not listed). Example: a tree holding
    [1, 2, 3] -> ``[{"id": 1, "parent": 0, "tokens": 3, "ids": [1, 2, 3], "evicted": False}]``."""
    return [{"id": n.id, "parent": n.parent.id, "tokens": len(n.key), "ids": list(n.key), "evicted": False}
            for n in tree.iter_nodes() if n.parent is not None]


def evicted_nodes(before: list[dict], tree) -> list[dict]:
    """The nodes of ``before`` (:func:`tree_nodes` earlier) that ``tree`` no longer has, marked
    ``evicted: True`` (the ghosts the page draws a moment after an eviction)."""
    live = {n.id for n in tree.iter_nodes()}
    return [{**n, "evicted": True} for n in before if n["id"] not in live]


class Dashboard:
    """The dashboard's state of one engine loop (every method but reading ``state``: engine thread)."""

    def __init__(self, tokenizer, min_interval: float = 0.1, history_s: float = 300.0, keep: int = 256,
                 ghost_s: float = 3.0) -> None:
        self.tokenizer = tokenizer
        self.min_interval = min_interval
        self.ghost_s = ghost_s
        self.closing = False                               # set by ServerThread.stop: the event streams end
        self.ghosts: dict[int, dict] = {}                  # evicted node id -> its last picture (+ "until")
        self._seen: dict[int, tuple[int, tuple[int, ...]]] = {}   # node id -> (parent id, key): for ghosts
        self._log_pos = 0
        self.served: deque = deque(maxlen=1024)            # the last finished requests (the router view)
        self.state: dict | None = None
        self.version = 0
        self.source: dict[int, str] = {}                   # tree node id -> the request that inserted it
        self.sources_of: OrderedDict[str, list[dict]] = OrderedDict()   # rid -> where its cached tokens came from
        self.names: dict[str, str] = {}                    # rid -> the chat page's name (written by the app)
        self.finished: deque = deque(maxlen=6)
        self.history: deque = deque(maxlen=int(history_s))  # [t, usage, hit rate over the last minute]
        self.keep = keep
        self._admits: deque = deque()                       # (t, prompt tokens, cached tokens)
        self._tree_key: tuple | None = None
        self._key: tuple | None = None
        self._last = 0.0
        self.last_rid: str | None = None
        self._texts: dict[int, tuple[int, str]] = {}
        self._t0_last = 0.0

    # ------------------------------------------------------------------ provenance
    def track(self, engine, active: dict) -> None:
        """Name the inserter of every node the last step added: a split keeps its child's, a new
        node the earliest running request whose tokens start with the node's path."""
        tree = engine.cache
        if tree is None:
            return
        key = (tree.num_nodes, tree.total_size(), tree.stats.evicted_tokens)
        if key == self._tree_key:
            return
        self._tree_key = key
        nodes = list(tree.iter_nodes())
        for n in nodes:
            if n.id in self.source:
                continue
            known = [c for c in n.children.values() if c.id in self.source]
            self.source[n.id] = self.source[known[0].id] if known else self._inserter(n, active)
        live = {n.id for n in nodes}
        for i in [i for i in self.source if i not in live]:
            self._ghost(i)
            del self.source[i]
            self._texts.pop(i, None)
        self._seen = {n.id: (n.parent.id if n.parent is not None and n.parent.parent is not None else 0,
                             tuple(n.key)) for n in nodes}

    def _ghost(self, node_id: int) -> None:
        """Keep an evicted node's last picture for ``ghost_s`` seconds."""
        seen = self._seen.get(node_id)
        if seen is None:
            return
        parent, key = seen
        text = self._texts.get(node_id, (0, self.tokenizer.decode(list(key))))[1]
        self.ghosts[node_id] = {"id": node_id, "parent": parent, "tokens": len(key), "ids": list(key),
                                "lock": 0, "text": text, "source": self.source.get(node_id, "?"), "mark": "",
                                "tier": "evicted", "evicted": True, "until": time.monotonic() + self.ghost_s}

    def _inserter(self, node, active: dict) -> str:
        path = _path_tokens(node)
        for rid, act in active.items():                     # arrival order
            if act.state is not None and _request_tokens(act.state)[:len(path)] == path:
                return rid
        return "?"

    def admitted(self, engine, rid: str, prompt_ids: list[int], cached: int) -> None:
        """Record which requests inserted the ``cached`` tokens of ``rid``'s prompt."""
        now = time.monotonic()
        self._admits.append((now, len(prompt_ids), cached))
        self.last_rid = rid
        out: list[dict] = []
        if engine.cache is not None and cached:
            for node, n in walk(engine.cache, list(prompt_ids), cached):
                src = self.source.get(node.id, "?")
                if out and out[-1]["rid"] == src:
                    out[-1]["tokens"] += n
                else:
                    out.append({"rid": src, "name": self.names.get(src, ""), "tokens": n})
        self.sources_of[rid] = out
        while len(self.sources_of) > self.keep:
            self.sources_of.popitem(last=False)

    def finished_request(self, row: dict) -> None:
        self.finished.append(row)
        self.served.append({"rid": row["rid"], "name": row.get("name", ""), "time": round(time.time(), 4),
                            "prompt": row["prompt"], "cached": row["cached"], "ids": row["_tokens"][:row["prompt"]]})
        while len(self.names) > 16 * self.keep:                # the oldest names go first
            del self.names[next(iter(self.names))]

    # ------------------------------------------------------------------ the picture
    def maybe_capture(self, engine, loop, idle: bool) -> None:
        """Capture when something changed, at most every ``min_interval`` s while busy."""
        tree = engine.cache
        key = (engine.step_no, len(loop.active), loop.num_unadmitted, len(self.finished),
               tree.num_nodes if tree is not None else 0)
        if key == self._key:
            return
        if not idle and time.monotonic() - self._last < self.min_interval:
            return
        self._key = key
        self.capture(engine, loop)

    def capture(self, engine, loop, force: bool = False) -> dict:
        """Freeze the pool, the tree and the requests into ``state`` (a new dict); returns it."""
        now = time.monotonic()
        self._last = now
        snap = engine.snapshot()
        seq_rid = {s.seq_id: s.request.rid for s in engine.running}
        blocks = self._blocks(snap, seq_rid)
        tree = self._tree(engine)
        used = snap.num_blocks - snap.num_free_blocks
        self._history(now, used / snap.num_blocks)
        self.version += 1
        self.state = {"version": self.version, "time": time.time(), "num_blocks": snap.num_blocks,
                      "block_size": snap.block_size, "used_blocks": used, "free_blocks": snap.num_free_blocks,
                      "tree_nodes": engine.cache.num_nodes if engine.cache is not None else 0,
                      "tree_tokens": engine.cache.total_size() if engine.cache is not None else 0,
                      "evicted_tokens": engine.cache.stats.evicted_tokens if engine.cache is not None else 0,
                      "blocks": blocks, "tree": tree, "requests": self._requests(loop, engine),
                      "last": self.last_rid, "history": list(self.history),
                      "evicted_nodes": self._live_ghosts(now), "cow_blocks": self._cow_blocks(engine),
                      "tiers": hasattr(engine.cache, "placement")}
        return self.state

    def _live_ghosts(self, now: float) -> list[dict]:
        for i in [i for i, g in self.ghosts.items() if g["until"] <= now]:
            del self.ghosts[i]
        return [{k: v for k, v in g.items() if k != "until"} for g in self.ghosts.values()]

    def _cow_blocks(self, engine) -> list[int]:
        """The blocks copy-on-write copied into since the previous capture (from the engine's log)."""
        log = engine.log
        events = log.since(self._log_pos, "cow")
        self._log_pos = len(log)
        return sorted({e.detail["dst"] for e in events})

    def _blocks(self, snap, seq_rid: dict) -> dict:
        holders: list[list[str]] = [[] for _ in range(snap.num_blocks)]
        for name, ids in snap.tables.items():
            who = "tree" if name == "tree" else seq_rid.get(name, name)
            for b in ids:
                if who not in holders[b]:
                    holders[b].append(who)
        states = []
        for b in range(snap.num_blocks):
            ref = snap.ref_count[b]
            states.append(FREE if ref == 0 else SHARED if ref > 1 else CACHED if holders[b] == ["tree"] else HELD)
        return {"state": states, "ref": list(snap.ref_count), "holders": holders}

    def _text(self, node) -> str:
        t = self._texts.get(node.id)                      # (key length, text): a split shortens a key
        if t is None or t[0] != len(node.key):
            text = self.tokenizer.decode(list(node.key))
            t = (len(node.key), text if len(text) <= _TEXT_CHARS else text[:_TEXT_CHARS - 1] + "…")
            self._texts[node.id] = t
        return t[1]

    def _tree(self, engine) -> list[dict]:
        """The tree's nodes (RadixSnapshot order) with text, inserter, and the last request's part:
        "hit" (matched at admission) or "computed"."""
        tree = engine.cache
        if tree is None:
            return []
        snap = tree.snapshot()
        nodes = {n.id: n for n in tree.iter_nodes()}
        marks = self._last_marks(engine)
        tier = getattr(tree, "placement", lambda n: "device")
        return [{"id": v.id, "parent": v.parent_id, "tokens": len(v.tokens), "ids": list(nodes[v.id].key),
                 "kv": list(v.kv), "lock": v.lock_ref, "text": self._text(nodes[v.id]),
                 "source": self.source.get(v.id, "?"),
                 "mark": marks.get(v.id, ""), "tier": tier(nodes[v.id]), "evicted": False} for v in snap.nodes]

    def _last_marks(self, engine) -> dict[int, str]:
        act = next((a for a in self._recent_states(engine) if a[0] == self.last_rid), None)
        if act is None:
            return {}
        _, tokens, cached = act
        marks, pos = {}, 0
        for node, n in walk(engine.cache, tokens, len(tokens)):
            marks[node.id] = "hit" if pos + len(node.key) <= cached else "computed"
            pos += len(node.key)
        return marks

    def _recent_states(self, engine):
        for r in self.finished:
            yield r["rid"], r["_tokens"], r["cached"]
        for st in engine.requests:
            yield st.rid, _request_tokens(st), st.prefill_saved

    def _requests(self, loop, engine) -> list[dict]:
        """The table's rows, each with ``path``: the ids of the tree nodes that hold its tokens now
        (root first; the page highlights them and their blocks when the row is clicked, also once
        the request has finished, as long as the tree keeps them)."""
        paths = {rid: [n.id for n, _ in walk(engine.cache, tokens, len(tokens))] if engine.cache is not None else []
                 for rid, tokens, _ in self._recent_states(engine)}
        rows = [{k: v for k, v in r.items() if k != "_tokens"} for r in self.finished]
        for rid, act in loop.active.items():
            rows.append(request_row(rid, act, self.names.get(rid, "")))
        for row in rows:
            row["path"] = paths.get(row["rid"], [])
        return rows

    def _history(self, now: float, usage: float) -> None:
        while self._admits and self._admits[0][0] < now - 60:
            self._admits.popleft()
        q = sum(a[1] for a in self._admits)
        hit = sum(a[2] for a in self._admits) / q if q else 0.0
        if self.history and now - self._t0_last < 1.0:
            self.history[-1] = [round(time.time(), 2), round(usage, 4), round(hit, 4)]
            return
        self._t0_last = now
        self.history.append([round(time.time(), 2), round(usage, 4), round(hit, 4)])


def request_row(rid: str, act, name: str = "") -> dict:
    """One row of the requests table (an engine loop's ``_Active``)."""
    st = act.state
    if st is None:
        return {"rid": rid, "name": name, "state": "queued", "prompt": len(act.sub.prompt_ids), "output": 0,
                "cached": 0, "ttft": None}
    state = "finished" if st.done else "running" if act.admitted else "waiting"
    ttft = st.ttft
    return {"rid": rid, "name": name, "state": state, "prompt": len(st.prompt_ids),
            "output": sum(len(o) for o in st.outputs), "cached": act.cached_tokens,   # at admission, as usage
            "ttft": round(ttft, 4) if ttft is not None else None}
