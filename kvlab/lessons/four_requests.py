"""The source notes' RadixAttention examples as data and runs: the four customer-service
requests and a multi-turn chat, served through the real :class:`~kvlab.reuse.cache_manager.CacheManager`.

R1 "怎么申请退款" (how do I get a refund), R2 "订单什么时候发货" (when will my order ship),
R3 "发票怎么开" (how do I get an invoice) share a system prompt [A] and few-shot examples [B];
R4 "人工呢" (asking for a human) is R1's follow-up turn, whose longest prefix match covers
root -> A -> B -> C, so history is never recomputed. Lesson 07 draws hits green, misses blue.

Example:
    >>> char_detokenize(char_tokenize("退款"))
    '退款'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..reuse.cache_manager import CacheManager, serve_request
from ..reuse.radix_snapshot import RadixSnapshot

__all__ = ["char_tokenize", "char_detokenize", "FOUR_REQUEST_TEXTS", "MULTI_TURN_TURNS", "Segment",
           "ExampleRequest", "four_request_example", "multi_turn_example"]


def char_tokenize(text: str) -> list[int]:
    """One token per character: ``ord(c)``. Example: ``char_tokenize('ab') -> [97, 98]``."""
    return [ord(c) for c in text]


def char_detokenize(tokens: Sequence[int]) -> str:
    """Inverse of :func:`char_tokenize`. Example: ``char_detokenize([97, 98]) -> 'ab'``."""
    return "".join(map(chr, tokens))


# Segment texts of the notes' example. "C" is R1's turn: its question and, once R1 has
# answered, its answer (R4, the follow-up of R1, carries both in its history).
FOUR_REQUEST_TEXTS: dict[str, str] = {
    "A": "你是一个电商客服助手，请礼貌、简洁地回答用户的问题。",  # system prompt
    "B": "示例：问：怎么修改收货地址？答：在订单详情页点击“修改地址”。",  # few-shot examples
    "R1": "怎么申请退款",
    "R1 answer": "在订单详情页点击“申请退款”，选择原因后提交即可。",
    "R2": "订单什么时候发货",
    "R2 answer": "一般在付款后48小时内发货。",
    "R3": "发票怎么开",
    "R3 answer": "在订单详情页点击“申请发票”，填写抬头即可。",
    "R4": "人工呢",
    "R4 answer": "正在为您转接人工客服，请稍候。",
}


@dataclass(frozen=True)
class Segment:
    """A labelled piece of a prompt, ``tokens[start:end]``, found in the cache (hit) or not (miss)."""

    label: str
    text: str
    start: int
    end: int
    hit: bool

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ExampleRequest:
    """One request of an example, after it ran (the visualizer colours hits green, misses blue).

    ``segments`` cut the prompt at its labelled parts and at ``matched_len``;
    ``tree`` is the cache after the request (prompt and answer inserted); ``node_labels``
    maps each node id of that tree to the segment labels it holds ("A", "B", "C", ...).
    ``running_tree``: the cache while the request ran (admitted, not finished: its matched path
    locked, nothing of it inserted yet), its nodes labelled by ``running_labels``; ``new_blocks``:
    the blocks it was given then for the rest of its prompt and its answer (in its block table,
    not yet in the tree).
    """

    name: str
    text: str
    prompt_tokens: tuple[int, ...]
    matched_len: int
    prefill_len: int
    segments: tuple[Segment, ...]
    answer_text: str
    tree: RadixSnapshot
    node_labels: dict[int, str]
    tree_text: str
    running_tree: RadixSnapshot | None = None
    running_labels: dict[int, str] = field(default_factory=dict)
    new_blocks: tuple[int, ...] = ()

    @property
    def hit_segments(self) -> list[str]:
        return [s.label for s in self.segments if s.hit]

    @property
    def missed_segments(self) -> list[str]:
        return [s.label for s in self.segments if not s.hit]

    @property
    def missed_len(self) -> int:
        return self.prefill_len


Part = tuple[str, Sequence[str]]  # (label, texts): each text is tokenized on its own


def _run_script(script: list[tuple[str, list[Part], Part | None]], tokenize: Callable[[str], list[int]],
                detokenize: Callable[[Sequence[int]], str] | None, num_blocks: int,
                page_size: int) -> list[ExampleRequest]:
    """Run requests given as (name, prompt parts, answer part or None); one record each."""
    cm = CacheManager(num_blocks, page_size)
    spans: list[tuple[tuple[int, ...], str]] = []  # (a sequence up to a part's end, the part's label)
    records = []
    for name, parts, answer_part in script:
        prompt: list[int] = []
        segs = []
        for label, texts in parts:
            start = len(prompt)
            for t in texts:
                prompt += tokenize(t)
            segs.append((label, "".join(texts), start, len(prompt)))
        answer: list[int] = []
        if answer_part is not None:
            for t in answer_part[1]:
                answer += tokenize(t)
        running: list[RadixSnapshot] = []  # the tree between admit and finish (matched path locked)
        rec = serve_request(cm, prompt, answer, rid=name, while_running=lambda _a: running.append(cm.tree.snapshot()))
        mlen = rec.matched_len
        out = _cut_segments(segs, prompt, mlen, detokenize)
        full = prompt + answer
        for label, _text, _s, e in segs:
            spans.append((tuple(full[:e]), label))
        run_snap = running[0]
        run_labels = _label_nodes(run_snap, spans)  # the prompt's parts are known; its answer not yet
        if answer:
            spans.append((tuple(full), answer_part[0]))
        snap = cm.tree.snapshot()
        records.append(ExampleRequest(name, "".join(seg[1] for seg in segs), tuple(prompt), mlen, rec.prefill_len,
                                     tuple(out), "".join(answer_part[1]) if answer_part else "", snap,
                                     _label_nodes(snap, spans), snap.pretty(detokenize), run_snap, run_labels,
                                     rec.new_kv))
        cm.check_integrity()
    return records


def _cut_segments(segs: list[tuple[str, str, int, int]], prompt: list[int], mlen: int,
                  detokenize: Callable[[Sequence[int]], str] | None) -> list[Segment]:
    """The prompt's parts as Segments, hit up to ``mlen``; a part the boundary falls inside is cut in two."""
    out: list[Segment] = []
    for label, text, s, e in segs:
        if s < mlen < e:
            hit_text = detokenize(prompt[s:mlen]) if detokenize else ""
            miss_text = detokenize(prompt[mlen:e]) if detokenize else ""
            out += [Segment(label, hit_text, s, mlen, True), Segment(label, miss_text, mlen, e, False)]
        else:
            out.append(Segment(label, text, s, e, e <= mlen))
    return out


def _label_nodes(snap: RadixSnapshot, spans: list[tuple[tuple[int, ...], str]]) -> dict[int, str]:
    """Name each node by the labels of the parts that end inside it, e.g. "B+C" or "C"."""
    paths: dict[int, tuple[int, ...]] = {}
    for n in snap.nodes:  # parents come first
        paths[n.id] = paths.get(n.parent_id, ()) + n.tokens
    labels: dict[int, str] = {}
    for n in snap.nodes:
        full, end = paths[n.id], n.start + len(n.tokens)
        names: list[str] = []
        for seq, label in spans:
            if n.start < len(seq) <= end and full[:len(seq)] == seq and label not in names:
                names.append(label)
        labels[n.id] = "+".join(names) if names else "?"
    return labels


def four_request_example(tokenize: Callable[[str], list[int]] | None = None,
                         detokenize: Callable[[Sequence[int]], str] | None = None,
                         warm_system_prompt: bool = True, page_size: int = 1,
                         num_blocks: int = 4096) -> list[ExampleRequest]:
    """The source notes' four customer-service requests, run through a real CacheManager.

    Step "warm-up" (when ``warm_system_prompt``) caches the system prompt [A] alone, as a
    server that prefills a fixed system prompt at start-up. Then:
      R1 = A + B + "怎么申请退款": hits A, misses B and its question (prefilled); its
           answer is generated and inserted too, so the tree holds A -> [B + C] where
           C = R1's turn (its question and its answer);
      R2 = A + B + "订单什么时候发货": hits A and B (the node [B + C] is split at the end
           of B), misses only its question;
      R3 = A + B + "发票怎么开": likewise, only its own suffix is missed and prefilled;
      R4 = A + B + C + "人工呢" (R1's follow-up, with R1's question and answer as history):
           its longest prefix match covers root -> A -> B -> C in full; only "人工呢" is
           prefilled.
    Every request's answer is inserted after it (SGLang caches finished requests with
    their output), so the final tree is root -> A -> B -> {C -> R4, R2, R3}.
    Without the warm-up, A and B share one node "A+B": compressed edges only split where
    cached sequences diverge, and no request here separates A from B.

    ``tokenize`` defaults to one token per character (:func:`char_tokenize`, with
    :func:`char_detokenize` for the texts); pass the bundled model's tokenizer
    (``str -> list[int]``, and its decoder) to run it on real tokens. Each text is
    tokenized on its own, so part boundaries are token boundaries.

    Example:
        >>> recs = four_request_example()
        >>> [(r.name, r.matched_len, r.prefill_len) for r in recs]
        [('warm-up', 0, 26), ('R1', 26, 37), ('R2', 57, 8), ('R3', 57, 5), ('R4', 88, 3)]
        >>> recs[-1].hit_segments, recs[-1].missed_segments
        (['A', 'B', 'C'], ['R4'])
        >>> sorted(recs[-1].node_labels.values())
        ['A', 'B', 'C', 'R2', 'R3', 'R4']
    """
    if tokenize is None:
        tokenize, detokenize = char_tokenize, detokenize or char_detokenize
    T = FOUR_REQUEST_TEXTS
    A, B = ("A", [T["A"]]), ("B", [T["B"]])
    script: list[tuple[str, list[Part], Part | None]] = []
    if warm_system_prompt:
        script.append(("warm-up", [A], None))
    script += [
        ("R1", [A, B, ("C", [T["R1"]])], ("C", [T["R1 answer"]])),
        ("R2", [A, B, ("R2", [T["R2"]])], ("R2", [T["R2 answer"]])),
        ("R3", [A, B, ("R3", [T["R3"]])], ("R3", [T["R3 answer"]])),
        ("R4", [A, B, ("C", [T["R1"], T["R1 answer"]]), ("R4", [T["R4"]])], ("R4", [T["R4 answer"]])),
    ]
    return _run_script(script, tokenize, detokenize, num_blocks, page_size)


MULTI_TURN_TURNS: list[tuple[str, str]] = [
    ("我的快递三天没更新了。", "抱歉，我帮您查一下物流信息。"),
    ("单号是SF123456。", "查到了，包裹在中转站，预计明天派送。"),
    ("能加急吗？", "已为您提交加急申请。"),
]


def multi_turn_example(turns: Sequence[tuple[str, str]] | None = None,
                       tokenize: Callable[[str], list[int]] | None = None,
                       system: str | None = None, page_size: int = 1,
                       num_blocks: int = 4096) -> list[ExampleRequest]:
    """A chat whose turn k prompt is the whole history (system, every earlier question and
    answer) plus question k. Each turn matches all of the previous turn, prompt and answer,
    so history is never prefilled twice: turn k prefills only its own question.

    Example:
        >>> recs = multi_turn_example()
        >>> [(r.matched_len, r.prefill_len) for r in recs]
        [(0, 37), (51, 12), (81, 5)]
    """
    if tokenize is None:
        tokenize, detokenize = char_tokenize, char_detokenize
    else:
        detokenize = None
    turns = list(turns if turns is not None else MULTI_TURN_TURNS)
    system = FOUR_REQUEST_TEXTS["A"] if system is None else system
    script: list[tuple[str, list[Part], Part | None]] = []
    history: list[Part] = [("system", [system])] if system else []
    for i, (q, a) in enumerate(turns, 1):
        parts = history + [(f"Q{i}", [q])]
        script.append((f"turn {i}", parts, (f"A{i}", [a])))
        history = parts + [(f"A{i}", [a])]
    return _run_script(script, tokenize, detokenize, num_blocks, page_size)
