"""Frames for the radix view: one per request of an example run, or one per event of a recorded run.

Part of :mod:`kvlab.viz.radix_view` (which re-exports everything here); split off so that each
file stays short. Frames are plain data (:class:`~kvlab.viz.stepper.Frame` holding a
:class:`~kvlab.viz.radix_state.RadixState`); the view draws them.

* :func:`radix_request_frames`: the notes' four-request example (or a multi-turn chat), one frame
  per request: its matched path green, its prefilled suffix blue, a node split named in the
  caption of the request that caused it, nodes lettered as in the notes' figure ([A] system
  prompt, [B] few-shot examples, [C] R1's turn, [D] R2, [E] R3, [F] R4), and where a node holds
  a question and the answer cached after it, where the answer starts.
* :class:`RadixRecorder` and :func:`radix_event_frames`: any run on a RadixCache, one frame per
  tree event, a match that splits a node shown before the split it causes; nodes are labelled
  by id (``[node 2]``), as the captions name them.

Mirrors no vLLM or SGLang file (kvlab's pictures).

Example:
    >>> frames = radix_request_frames()
    >>> [f.caption.split(":")[0] for f in frames]
    ['warm-up', 'R1', 'R2', 'R3', 'R4']
    >>> sorted(frames[-1].snapshot.node_labels.values())
    ['A', 'B', 'C', 'D', 'E', 'F']
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..lessons.eviction import POLICY_NAMES
from ..lessons.four_requests import char_detokenize, char_tokenize, four_request_example
from .radix_state import RadixState

__all__ = ["NOTES_LETTERS", "SEGMENT_WORDS", "radix_request_frames", "RadixRecorder", "radix_event_frames"]

# The notes' figure letters its nodes [A] .. [F]; the example's records label them by segment.
NOTES_LETTERS = {"A": "A", "B": "B", "C": "C", "R2": "D", "R3": "E", "R4": "F"}
# How captions name the notes' segments.
SEGMENT_WORDS = {"A": "system prompt [A]", "B": "few-shot examples [B]", "C": "R1's turn [C]",
                 "R2": "R2's question [D]", "R3": "R3's question [E]", "R4": "R4's follow-up [F]"}



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


def radix_request_frames(records: Sequence[Any] | None = None, title: str = "Radix tree",
                         letters: dict[str, str] | None = None, running: Sequence[str] = ()) -> list[Any]:
    """One frame per request of an example run (default: the notes' four requests), and one more
    before it for each request named in ``running``: the tree *while* that request runs.

    ``records``: :class:`~kvlab.lessons.four_requests.ExampleRequest` records
    (``kvlab.lessons.four_request_example()``, ``multi_turn_example()``). The frame's tree is
    the cache after the request; the nodes its prompt matched are green, the nodes holding its
    prefilled suffix (and the answer cached with it) blue; nodes gone since the previous
    request are shown faded. A node the request's match split is named in the caption.
    ``letters``: segment label -> the letter its node carries (default :data:`NOTES_LETTERS`,
    the notes' figure: R2's node is [D], R3's [E], R4's [F]).
    ``running``: request names (e.g. ``("R4",)``) drawn also between admit and finish, from the
    record's ``running_tree`` (the real cache at that moment): its matched path green and locked,
    its new blocks allocated but not in the tree yet (the caption counts them); the frame after it
    is the request finished, its path unlocked again.

    Example:
        >>> fr = radix_request_frames(running=("R4",))
        >>> fr[-2].caption.split(" (")[0], fr[-2].snapshot.snapshot.protected_size, fr[-1].caption[:3]
        ('R4 running', 88, 'R4:')
    """
    from .stepper import Frame

    if records is None:
        records = four_request_example()
    letters = NOTES_LETTERS if letters is None else letters
    frames = []
    prev, prev_labels = None, {}
    seen: list[tuple[int, ...]] = []  # the prompts so far: their answers are marked in the labels
    for r in records:
        if r.name in running and r.running_tree is not None:
            frames.append(_running_frame(r, prev, prev_labels, letters, title, seen))
            prev, prev_labels = r.running_tree, frames[-1].snapshot.node_labels
        snap = r.tree
        full_path = _path_ids(snap, r.prompt_tokens)
        hit = {i for i, s, e in full_path if e <= r.matched_len}
        miss = {i for i, s, e in full_path if s >= r.matched_len}
        gone = tuple(n for n in (prev.nodes if prev else ()) if n.id not in {m.id for m in snap.nodes})
        labels = {i: _lettered(lab, letters) for i, lab in r.node_labels.items()}
        hits = [s.label for s in r.segments if s.hit]
        misses = [s.label for s in r.segments if not s.hit]
        miss_text = "".join(s.text for s in r.segments if not s.hit and s.text)
        cap = f"{r.name}: matched {r.matched_len} tokens" + (f" ({_words(hits)})" if hits else "")
        cap += f", prefilling {r.prefill_len}"
        if misses:
            cap += f" ({_words(misses)}" + (f": {miss_text}" if miss_text and len(miss_text) <= 16 else "") + ")"
        for old, upper, lower in _splits(prev, snap):
            cap += (f"; its match ended inside node [{prev_labels.get(old.id, old.id)}] after {lower.start - old.start} "
                    f"of its {len(old.tokens)} tokens, so that node was split into [{labels.get(upper.id, upper.id)}] -> "
                    f"[{labels.get(lower.id, lower.id)}]")
        if r.name in running:
            cap += "; finished: prompt and answer inserted, its path unlocked"
        seen.append(tuple(r.prompt_tokens))
        state = RadixState(snap, frozenset(hit), frozenset(miss - hit), gone, labels, char_detokenize
                           if _decodable(r) else None, f"{title} after {r.name}", _answers(snap, seen))
        frames.append(Frame(state, cap))
        prev, prev_labels = snap, labels
    return frames


def _running_frame(r: Any, prev: Any, prev_labels: dict[int, str], letters: dict[str, str], title: str,
                   seen: Sequence[tuple[int, ...]]) -> Any:
    """The frame of request ``r`` while it runs: ``r.running_tree`` (admitted: matched path locked,
    its new blocks in its block table, not in the tree), the matched path green."""
    from .stepper import Frame

    snap = r.running_tree
    path = _path_ids(snap, r.prompt_tokens)
    hit = {i for i, s, e in path if e <= r.matched_len}
    labels = {i: _lettered(lab, letters) for i, lab in r.running_labels.items()}
    locked = [n for n in snap.nodes if n.lock_ref > 0]
    hits = [s.label for s in r.segments if s.hit]
    refs = sorted({n.lock_ref for n in locked})
    miss_text = "".join(s.text for s in r.segments if not s.hit and s.text)
    new_for = f"{miss_text}, then" if miss_text and len(miss_text) <= 16 else f"its {r.prefill_len} new prompt tokens, then"
    cap = (f"{r.name} running (admitted, not finished): the {len(locked)} node{'s' if len(locked) != 1 else ''} "
           f"it matched ({_words(hits) or '-'}: {r.matched_len} tokens) {'are' if len(locked) != 1 else 'is'} locked, lock "
           + "/".join(map(str, refs)) + f", so {snap.protected_size} tokens are protected from eviction; its "
           f"{len(r.new_blocks)} new blocks (for {new_for} its answer) are in its block table, not yet in the tree")
    for old, upper, lower in _splits(prev, snap):
        cap += (f"; its match ended inside node [{prev_labels.get(old.id, old.id)}] after {lower.start - old.start} "
                f"of its {len(old.tokens)} tokens, so that node was split into [{labels.get(upper.id, upper.id)}] -> "
                f"[{labels.get(lower.id, lower.id)}]")
    state = RadixState(snap, frozenset(hit), frozenset(), (), labels, char_detokenize if _decodable(r) else None,
                       f"{title} while {r.name} runs", _answers(snap, seen))
    return Frame(state, cap)


def _lettered(label: str, letters: dict[str, str]) -> str:
    """"R2" -> "D", "B+C" -> "B+C": each part of a node's label by the notes' letter."""
    return "+".join(letters.get(part, part) for part in label.split("+"))


def _splits(prev: Any, snap: Any) -> list[tuple[Any, Any, Any]]:
    """Nodes of ``prev`` split on the way to ``snap``: (the node before, its new upper part,
    its lower part). A split keeps the node's id on the lower part (kvlab.reuse.radix_cache)."""
    if prev is None:
        return []
    before = {n.id: n for n in prev.nodes}
    now = {n.id: n for n in snap.nodes}
    out = []
    for n in snap.nodes:
        old = before.get(n.id)
        upper = now.get(n.parent_id)
        if old is not None and n.start > old.start and upper is not None and upper.id not in before:
            out.append((old, upper, n))
    return out


def _answers(snap: Any, prompts: Sequence[Sequence[int]]) -> dict[int, int]:
    """node id -> where an answer starts in it: the node a prompt ends inside (its tokens go on
    past the prompt's last one, so the rest is the answer cached with it)."""
    out: dict[int, int] = {}
    for p in prompts:
        for i, s, e in _path_ids(snap, p):
            if s < len(p) < e:
                out[i] = len(p) - s
    return out


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

    A match that ends inside a node splits it. The tree logs the split first (it happens
    during the walk); here the match comes first, drawn on the tree before the split with
    the node it ends inside green only as far as it matched ("3 of 8 tok matched"), then
    the split, drawn after it. A split made by an insert is
    captioned with the request that inserts.

    The caption says what happened, e.g. ``"R2: matched 6 of 11 tokens, prefilling 5"``; the
    stepper numbers the frames (step 1 / N, consecutive: captions carry no event numbers) and
    ``frame.extra["event"]`` is the event's step in the log.
    """
    from .stepper import Frame

    def state(snap: Any, hit: set[int] = frozenset(), miss: set[int] = frozenset(), gone: tuple = (),
              partial: dict[int, int] | None = None) -> Any:
        ids = {n.id: f"node {n.id}" for n in (*snap.nodes, *gone)}  # the captions name nodes by id
        return RadixState(snap, frozenset(hit), frozenset(miss), gone, ids, detokenize, title, partial=partial or {})

    frames: list[Any] = []
    split: tuple[int, Any] | None = None  # a split waiting for the match or insert that made it
    for i, (e, snap) in enumerate(zip(recorder.events, recorder.snapshots[1:])):
        d = e.detail
        if tree_events_only and (e.kind not in _TREE_EVENTS or (e.kind in ("lock", "unlock") and not d["node"])):
            continue
        who = f"{e.seq_id}: " if e.seq_id else ""
        if split is not None and (e.kind not in ("match", "insert") or e.kind == "split"):
            frames.append(_split_frame(Frame, state, recorder, split, ""))  # a split on its own
            split = None
        if e.kind == "split":
            split = (i, e)
            continue
        hit: set[int] = set()
        miss: set[int] = set()
        gone: tuple[Any, ...] = ()
        if e.kind == "match":
            cap = f"{who}matched {d['prefix_len']} of {d['num_tokens']} tokens, prefilling {d['num_tokens'] - d['prefix_len']}"
            if d["prefix_len"] == d["num_tokens"] > 0:  # a bare lookup: a request always computes its last token
                cap = f"{who}a lookup matched all {d['num_tokens']} tokens (a request would prefill 1: its last token)"
            if split is not None:  # first the match, on the tree before the split it causes
                si, se = split
                before = recorder.snapshots[si]
                node = next(n for n in before.nodes if n.id == se.detail["node"])
                cap += f": the match ends inside node {node.id}, after {se.detail['at']} of its {len(node.tokens)} tokens"
                frames.append(Frame(state(before, _ancestors(before, node.id), partial={node.id: se.detail["at"]}),
                                    cap, extra={"event": e.step}))
                frames.append(_split_frame(Frame, state, recorder, split, who, hit=_ancestors(snap, d["node"])))
                split = None
                continue
            hit = _ancestors(snap, d["node"])
        elif e.kind == "insert":
            if split is not None:
                frames.append(_split_frame(Frame, state, recorder, split, who))
                split = None
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
            k = len(d["nodes"])
            cap = (f"{who}evicted {d['num_tokens']} tokens ({k} node{'s' if k != 1 else ''}); policy: "
                   f"{POLICY_NAMES.get(d['policy'], d['policy'])}")
        elif e.kind in ("lock", "unlock"):
            what = f"the path to node {d['node']}" if d["node"] else "nothing (empty match: the root)"
            cap = f"{who}{'locked' if e.kind == 'lock' else 'unlocked'} {what}"
        else:  # another layer's event (tree_events_only=False): its own description, without "#step"
            cap = e.describe().split(" ", 1)[1]
        frames.append(Frame(state(snap, hit, miss, gone), cap, extra={"event": e.step}))
    if split is not None:
        frames.append(_split_frame(Frame, state, recorder, split, ""))
    if not frames:
        raise ValueError("no tree events recorded (was the recorder made before the requests ran?)")
    return frames


def _split_frame(Frame: Any, state: Callable, recorder: RadixRecorder, split: tuple[int, Any], who: str,
                 hit: set[int] = frozenset()) -> Any:
    """The frame of one split, on the tree right after it (``hit``: the matched path, green)."""
    i, e = split
    d = e.detail
    cap = (f"{who}split node {d['node']} after {d['at']} tokens: its first {d['at']} tokens become the new node "
           f"{d['new_node']}, the rest stays node {d['node']}, now below it")
    return Frame(state(recorder.snapshots[i + 1], hit), cap, extra={"event": e.step})
