"""Radix trees in graphviz (SVG): what matched, what was prefilled, what was evicted.

Each node shows its token text (decoded and shortened), its token count, its lock count
and its last access time. Colours follow the notes' legend: the path of the current
match green (reused KV, 命中), the newly prefilled suffix blue (未命中, computed now);
nodes that can be evicted (unlocked) have a dashed border; nodes evicted since the
previous frame are drawn faded where they were.

Sources of frames:
* the notes' four-request example (``kvlab.lessons.four_request_example()``): one frame per
  request, captioned in words, e.g. ``"R3: matched 57 tokens (system prompt [A] +
  few-shot examples [B]), prefilling 5 (R3)"``; see :func:`radix_request_frames`;
* any run on a :class:`~kvlab.reuse.radix_cache.RadixCache`: :class:`RadixRecorder` keeps a
  snapshot after every event (match, split, insert, lock, evict...), and
  :func:`radix_event_frames` turns them into frames.

:func:`radix_tree_graph` renders one tree (any step); :func:`radix_tree_data` is the
plain data behind it (tests check it and the DOT source, never the SVG bytes).

Example:
    >>> from kvlab.lessons.four_requests import four_request_example
    >>> frames = radix_request_frames(four_request_example())
    >>> frames[3].caption
    'R3: matched 57 tokens (system prompt [A] + few-shot examples [B]), prefilling 5 (R3: 发票怎么开)'
    >>> g = radix_tree_graph(frames[3].snapshot)
    >>> 'fillcolor="#2ca02c"' in g.source
    True
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..lessons.four_requests import char_detokenize, char_tokenize, four_request_example
from .palette import EVICTED, HIT, MISS, source_label, theme

__all__ = ["RadixState", "check_radix_snapshot", "radix_tree_data", "radix_tree_graph", "radix_request_frames",
           "RadixRecorder", "radix_event_frames", "radix_stepper", "radix_graph_at", "SEGMENT_WORDS"]

# How captions name the notes' segments.
SEGMENT_WORDS = {"A": "system prompt [A]", "B": "few-shot examples [B]", "C": "R1's turn [C]"}


def check_radix_snapshot(snap: Any) -> None:
    """Invariants of a RadixSnapshot (plain data), AssertionError when broken: parents
    listed before children, each child starts where its parent ends, one block per page,
    no block held by two nodes, first tokens (pages) distinct among siblings, and the
    evictable + protected sizes add up to the tokens of unlocked and locked nodes."""
    seen: dict[int, Any] = {}
    blocks: set[int] = set()
    first: set[tuple[int, Any]] = set()
    ev = pr = 0
    ps = snap.page_size
    for n in snap.nodes:
        assert n.id not in seen and n.id != 0, f"node id {n.id} repeated or root listed"
        if n.parent_id != 0:
            assert n.parent_id in seen, f"node {n.id}: parent {n.parent_id} missing or listed after it"
            p = seen[n.parent_id]
            assert n.start == p.start + len(p.tokens), f"node {n.id} starts at {n.start}, parent ends elsewhere"
            assert n.lock_ref <= p.lock_ref, f"node {n.id} has more locks than its parent"
        else:
            assert n.start == 0, f"root child {n.id} starts at {n.start}"
        assert n.tokens, f"node {n.id} is empty"
        assert len(n.kv) == len(n.tokens) // ps and len(n.tokens) % ps == 0, f"node {n.id}: kv/pages mismatch"
        dup = blocks & set(n.kv)
        assert not dup, f"blocks {sorted(dup)} held by two nodes"
        blocks.update(n.kv)
        key = (n.parent_id, n.tokens[:ps] if ps > 1 else n.tokens[0])
        assert key not in first, f"two children of {n.parent_id} start with the same token(s)"
        first.add(key)
        if n.lock_ref:
            pr += len(n.tokens)
        else:
            ev += len(n.tokens)
        seen[n.id] = n
    for n in snap.nodes:
        assert n.is_leaf == (not any(m.parent_id == n.id for m in snap.nodes)), f"node {n.id}: wrong is_leaf"
    assert (ev, pr) == (snap.evictable_size, snap.protected_size), (
        f"evictable/protected sizes {snap.evictable_size}/{snap.protected_size} != node sums {ev}/{pr}")


@dataclass(frozen=True)
class RadixState:
    """One frame's tree: the snapshot, which nodes matched (hit) or were prefilled now
    (miss), the nodes evicted since the previous frame (as they were), and text for labels."""

    snapshot: Any  # kvlab.reuse.radix_snapshot.RadixSnapshot
    hit: frozenset[int] = frozenset()
    miss: frozenset[int] = frozenset()
    evicted: tuple[Any, ...] = ()  # NodeViews of the previous frame, gone now
    node_labels: dict[int, str] = field(default_factory=dict)
    detokenize: Callable[[Sequence[int]], str] | None = None
    title: str = "Radix tree"

    def check_integrity(self) -> None:
        check_radix_snapshot(self.snapshot)
        ids = {n.id for n in self.snapshot.nodes}
        assert self.hit <= ids and self.miss <= ids, "hit/miss nodes not in the tree"
        assert not (self.hit & self.miss), f"nodes both hit and miss: {sorted(self.hit & self.miss)}"


def _short(text: str, max_chars: int) -> str:
    text = text.replace("\n", "⏎").replace("\\", "\\\\")
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _text(tokens: Sequence[int], detokenize: Callable[[Sequence[int]], str] | None, max_chars: int) -> str:
    if detokenize is not None:
        try:
            return "“" + _short(detokenize(list(tokens)), max_chars) + "”"
        except Exception:  # noqa: BLE001 - a tokenizer that cannot decode a piece: show ids
            pass
    ids = " ".join(map(str, tokens[:6])) + (" …" if len(tokens) > 6 else "")
    return f"[{ids}]"


def radix_tree_data(state: RadixState | Any, max_chars: int = 10) -> dict[str, Any]:
    """Nodes and edges of one tree as plain data.

    ``nodes``: list of dicts (``id``, ``name`` in the DOT source (``n<id>``, root ``root``),
    ``label``, ``fill``, ``font``, ``style``, ``kind`` = hit / miss / cached / evicted / root);
    ``edges``: (parent name, child name, colour). Accepts a bare RadixSnapshot too.
    """
    if not isinstance(state, RadixState):
        state = RadixState(state)
    snap, det = state.snapshot, state.detokenize
    nodes = [dict(id=0, name="root", label="root", fill="#ffffff", font="#000000", style="filled,bold",
                  kind="root", parent=None)]
    edges = []
    for n in list(snap.nodes) + [e for e in state.evicted if e.id not in {m.id for m in snap.nodes}]:
        gone = n not in snap.nodes and n in state.evicted
        tag = state.node_labels.get(n.id)
        head = f"[{tag}] " if tag else ""
        label = (f"{head}{_text(n.tokens, det, max_chars)}\n{len(n.tokens)} tok · lock {n.lock_ref} · "
                 f"t={n.last_access_time}")
        if gone:
            kind, fill, font, style = "evicted", EVICTED, "#9a9a9a", "filled,dotted"
            label += "\n(evicted)"
        elif n.id in state.hit:
            kind, fill, font, style = "hit", HIT, "#ffffff", "filled"
        elif n.id in state.miss:
            kind, fill, font, style = "miss", MISS, "#ffffff", "filled"
        else:
            kind, fill, font, style = "cached", "#ffffff", "#000000", "filled"
        if not gone and n.evictable:
            style += ",dashed"
        nodes.append(dict(id=n.id, name=f"n{n.id}", label=label, fill=fill, font=font, style=style, kind=kind,
                          parent=n.parent_id))
    names = {d["id"]: d["name"] for d in nodes}
    kinds = {d["id"]: d["kind"] for d in nodes}
    for d in nodes[1:]:
        parent = names.get(d["parent"], "root")
        colour = {"hit": HIT, "miss": MISS, "evicted": "#c8c8c8"}.get(d["kind"], "#555555")
        edges.append((parent, d["name"], colour))
    return {"nodes": nodes, "edges": edges, "kinds": kinds,
            "evictable_size": snap.evictable_size, "protected_size": snap.protected_size}


def radix_tree_graph(state: RadixState | Any, caption: str = "", source: str = "simulated",
                     max_chars: int = 10, legend: bool = True) -> Any:
    """One tree as a ``graphviz.Digraph`` (``.source`` is the DOT text, ``.pipe('svg')`` the picture)."""
    import graphviz

    if not isinstance(state, RadixState):
        state = RadixState(state)
    d = radix_tree_data(state, max_chars)
    th = theme()
    fs = str(th.font_size + (4 if th.high_contrast else 0))
    pen = str(th.line_width + (1.5 if th.high_contrast else 0.5))
    lines = [f"<b>{html.escape(state.title)} ({source_label(source)})</b>"]
    if caption:
        lines.append(html.escape(caption))
    lines.append(f"evictable {d['evictable_size']} tokens · protected (locked) {d['protected_size']} tokens")
    rows = "".join(f'<tr><td align="left" colspan="4">{x}</td></tr>' for x in lines)
    if legend:
        rows += _legend_row()
    g = graphviz.Digraph("radix", format="svg")
    g.attr(rankdir="LR", label=f'<<table border="0" cellspacing="3" cellpadding="2">{rows}</table>>', labelloc="t",
           labeljust="l", fontsize=str(int(fs) + 1), fontname="Helvetica,Arial,Noto Sans CJK SC,sans-serif",
           bgcolor="white", nodesep="0.25", ranksep="0.45")
    g.attr("node", shape="box", fontsize=fs, fontname="Helvetica,Arial,Noto Sans CJK SC,sans-serif",
           penwidth=pen, margin="0.12,0.06")
    g.attr("edge", penwidth=pen, arrowsize="0.7")
    for n in d["nodes"]:
        border = {"hit": "#1b6e1b", "miss": "#0d4a7a", "evicted": "#bdbdbd"}.get(n["kind"], "#444444")
        g.node(n["name"], n["label"], style=n["style"], fillcolor=n["fill"], fontcolor=n["font"], color=border)
    for parent, child, colour in d["edges"]:
        g.edge(parent, child, color=colour, style="dotted" if colour == "#c8c8c8" else "solid")
    return g


def _legend_row() -> str:
    return (f'<tr><td bgcolor="{HIT}"><font color="white">matched (hit, reused)</font></td>'
            f'<td bgcolor="{MISS}"><font color="white">prefilled now (miss)</font></td>'
            '<td border="1" style="dashed">dashed: evictable (unlocked)</td>'
            f'<td bgcolor="{EVICTED}"><font color="#9a9a9a">faded: evicted</font></td></tr>')


# ---------------------------------------------------------------------- frames
def _path_ids(snap: Any, tokens: Sequence[int]) -> list[tuple[int, int, int]]:
    """Nodes on the path of ``tokens`` from the root: (id, start, end)."""
    out: list[tuple[int, int, int]] = []
    parent, pos = 0, 0
    kids: dict[int, list[Any]] = {}
    for n in snap.nodes:
        kids.setdefault(n.parent_id, []).append(n)
    while pos < len(tokens):
        # a child on the path: its tokens continue the sequence (the last one may go on past
        # its end: a prompt ends inside the node that also caches its answer)
        nxt = next((c for c in kids.get(parent, [])
                    if tuple(tokens[pos:pos + len(c.tokens)]) == c.tokens[: len(tokens) - pos]), None)
        if nxt is None:
            break
        out.append((nxt.id, pos, pos + len(nxt.tokens)))
        parent, pos = nxt.id, pos + len(nxt.tokens)
    return out


def _words(labels: Sequence[str]) -> str:
    out: list[str] = []
    for lab in labels:
        w = SEGMENT_WORDS.get(lab, lab)
        if w not in out:
            out.append(w)
    return " + ".join(out)


def radix_request_frames(records: Sequence[Any] | None = None, title: str = "Radix tree") -> list[Any]:
    """One frame per request of an example run (default: the notes' four requests).

    ``records``: :class:`~kvlab.lessons.four_requests.ExampleRequest` records
    (``kvlab.lessons.four_request_example()``, ``multi_turn_example()``). The frame's tree is
    the cache after the request; the nodes its prompt matched are green, the nodes holding its
    prefilled suffix (and the answer cached with it) blue; nodes gone since the previous
    request are shown faded.
    """
    from .stepper import Frame

    if records is None:
        records = four_request_example()
    frames = []
    prev = None
    for r in records:
        snap = r.tree
        full_path = _path_ids(snap, r.prompt_tokens)
        hit = {i for i, s, e in full_path if e <= r.matched_len}
        miss = {i for i, s, e in full_path if s >= r.matched_len}
        gone = tuple(n for n in (prev.nodes if prev else ()) if n.id not in {m.id for m in snap.nodes})
        hits = [s.label for s in r.segments if s.hit]
        misses = [s.label for s in r.segments if not s.hit]
        miss_text = "".join(s.text for s in r.segments if not s.hit and s.text)
        cap = f"{r.name}: matched {r.matched_len} tokens" + (f" ({_words(hits)})" if hits else "")
        cap += f", prefilling {r.prefill_len}"
        if misses:
            cap += f" ({_words(misses)}" + (f": {miss_text}" if miss_text and len(miss_text) <= 16 else "") + ")"
        state = RadixState(snap, frozenset(hit), frozenset(miss - hit), gone, dict(r.node_labels), char_detokenize
                           if _decodable(r) else None, f"{title} after {r.name}")
        frames.append(Frame(state, cap))
        prev = snap
    return frames


def _decodable(record: Any) -> bool:
    """The records' texts were tokenized one char a token (the default) -> show text."""
    return tuple(char_tokenize(record.text)) == tuple(record.prompt_tokens)


class RadixRecorder:
    """Keeps ``cache.snapshot()`` after every event of a RadixCache's log (like
    ``BlockManager(record=True)``): ``events`` and ``snapshots`` (one per event, plus the
    state when recording began, first). Reads the tree only; it adds a log listener."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.events: list[Any] = []
        self.snapshots: list[Any] = [cache.snapshot()]
        cache.log.subscribe(self._on_event)

    def _on_event(self, event: Any) -> None:
        self.events.append(event)
        self.snapshots.append(self.cache.snapshot())


_TREE_EVENTS = ("match", "split", "insert", "evict", "lock", "unlock")


def _ancestors(snap: Any, node_id: int) -> set[int]:
    by_id = {n.id: n for n in snap.nodes}
    out: set[int] = set()
    while node_id in by_id:
        out.add(node_id)
        node_id = by_id[node_id].parent_id
    return out


def radix_event_frames(recorder: RadixRecorder, detokenize: Callable[[Sequence[int]], str] | None = None,
                       tree_events_only: bool = True, title: str = "Radix tree") -> list[Any]:
    """One frame per recorded event that changes or colours the tree (by default: match,
    split, insert, evict, and lock / unlock of a path; the other layers' events (allocate,
    admit, cache...) and locks of the bare root, which change nothing, are skipped;
    ``tree_events_only=False`` keeps every event). A match colours its path green; an insert
    colours the nodes it added blue; an evict shows its victims faded.

    The caption says what happened, e.g. ``"R2: matched 6 of 11 tokens, prefilling 5"``; the
    stepper numbers the frames (step 1 / N ...) and ``frame.extra["event"]`` is the event's
    step in the log.
    """
    from .stepper import Frame

    frames = []
    for i, (e, snap) in enumerate(zip(recorder.events, recorder.snapshots[1:])):
        d = e.detail
        if tree_events_only and (e.kind not in _TREE_EVENTS or (e.kind in ("lock", "unlock") and not d["node"])):
            continue
        hit: set[int] = set()
        miss: set[int] = set()
        gone: tuple[Any, ...] = ()
        who = f"{e.seq_id}: " if e.seq_id else ""
        if e.kind == "match":
            hit = _ancestors(snap, d["node"])
            cap = f"{who}matched {d['prefix_len']} of {d['num_tokens']} tokens"
            cap += f", prefilling {d['num_tokens'] - d['prefix_len']}"
        elif e.kind == "insert":
            miss = {n.id for n in snap.nodes if n.id in _ancestors(snap, d["node"]) and n.start >= d["prefix_len"]}
            cap = f"{who}inserted {d['num_tokens'] - d['prefix_len']} new tokens ({d['prefix_len']} were cached)"
        elif e.kind == "evict":
            wanted = set(d["nodes"])  # the victims as they were before (an allocator event may come first)
            found: dict[int, Any] = {}
            for earlier in reversed(recorder.snapshots[: i + 1]):
                for n in earlier.nodes:
                    if n.id in wanted and n.id not in found:
                        found[n.id] = n
                if len(found) == len(wanted):
                    break
            gone = tuple(found[k] for k in d["nodes"] if k in found)
            cap = f"{who}evicted {d['num_tokens']} tokens ({len(d['nodes'])} nodes, policy {d['policy']})"
        elif e.kind == "split":
            cap = f"split node {d['node']} after {d['at']} tokens (new parent node {d['new_node']})"
        elif e.kind in ("lock", "unlock"):
            what = f"the path to node {d['node']}" if d["node"] else "nothing (empty match: the root)"
            cap = f"{who}{'locked' if e.kind == 'lock' else 'unlocked'} {what}"
        else:  # another layer's event (tree_events_only=False): its own description, without "#step"
            cap = e.describe().split(" ", 1)[1]
        frames.append(Frame(RadixState(snap, frozenset(hit), frozenset(miss), gone, {}, detokenize, title), cap,
                            extra={"event": e.step}))
    if not frames:
        raise ValueError("no tree events recorded (was the recorder made before the requests ran?)")
    return frames


class RadixView:
    """Renders RadixState frames as graphviz graphs."""

    def __init__(self, source: str = "simulated", max_chars: int = 10) -> None:
        self.source, self.max_chars = source_label(source), max_chars

    def __call__(self, frame: Any) -> Any:
        return radix_tree_graph(frame.snapshot, frame.caption, self.source, self.max_chars)


def radix_stepper(frames: Sequence[Any] | None = None, static: bool | None = None, source: str = "simulated",
                  max_chars: int = 10) -> Any:
    """A stepper over radix frames (default: the notes' four-request example)."""
    from .stepper import Stepper

    frames = list(frames) if frames is not None else radix_request_frames()
    return Stepper(frames, RadixView(source, max_chars), static=static, title="radix tree")


def radix_graph_at(frames: Sequence[Any], step: int, source: str = "simulated") -> Any:
    """The tree at step ``step`` of a recorded run (frames from :func:`radix_request_frames`
    or :func:`radix_event_frames`), as a graphviz graph; one call."""
    if not 0 <= step < len(frames):
        raise ValueError(f"step {step} is outside 0..{len(frames) - 1}")
    f = frames[step]
    return radix_tree_graph(f.snapshot, f.caption, source)
