"""A chat on a real model served with the radix cache: the notes' customer-service requests as chat turns.

:class:`ChatSession` is a conversation (a system prompt, few-shot examples, then the turns)
rendered through the model's chat template, each turn served by
:class:`kvlab.compute.engine.Engine` (a paged K/V pool with the radix tree in front). Every turn
records which prompt tokens the tree matched (reused) and which were prefilled (computed now),
the reply and the time to first token (measured). ``clear_cache()`` starts a fresh engine (an
empty pool and tree) but keeps the conversation; ``new_conversation()`` keeps the cache and
starts over from the system prompt and the examples. ``ask(question, history=...)`` continues
any earlier turn's conversation (the notes' R4 is R1's second turn).

The shop's texts: :data:`SUPPORT_SYSTEM` is the notes' [A], :data:`SUPPORT_EXAMPLES` their [B],
:data:`SUPPORT_QUESTIONS` R1-R4 (in English for a small English model, the notes' Chinese
beside them). The model is loaded once per process (:func:`cached_model`). A reply is cut at
the model's end-of-turn token (the engine itself has no stop tokens). Drawing:
:mod:`kvlab.viz.chat_demo`.

Example (the bundled model, whose tokenizer has no chat template: turns are joined as text):
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> chat = ChatSession(model, tok, system="You document Python.", max_new_tokens=4)
    >>> t1 = chat.ask("What is socket?"); t2 = chat.ask("And json?")
    >>> t1.matched, t2.matched > 0, t2.matched + t2.prefilled == len(t2.prompt_ids)
    (0, True, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["ChatSession", "ChatTurn", "cached_model", "path_node_ids", "SUPPORT_SYSTEM", "SUPPORT_EXAMPLES",
           "SUPPORT_QUESTIONS", "support_session", "serve_support_requests", "fastest_ttft", "ttft_runs",
           "ttft_on_and_off", "support_node_labels"]

SUPPORT_SYSTEM = ("You are the customer-service assistant of an online shop. "
                  "Answer in one or two short, friendly sentences.")                                  # [A]
SUPPORT_EXAMPLES = [                                                                                  # [B]
    ("Can I change my delivery address?", "Yes: open the order page and choose Change address before it ships."),
    ("Do you ship abroad?", "Yes, to most countries; the shipping cost is shown at checkout."),
]
SUPPORT_QUESTIONS = {  # request -> (what the user types, the notes' original)
    "R1": ("How do I apply for a refund?", "怎么申请退款"),
    "R2": ("When will my order ship?", "订单什么时候发货"),
    "R3": ("How do I get an invoice?", "发票怎么开"),
    "R4": ("A human, please.", "人工呢"),          # R1's second turn
}


_MODELS: dict[str, tuple[Any, Any]] = {}


def cached_model(name: str = "smollm2") -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``name`` ("smollm2", "bundled", or a checkpoint path), loaded
    once per process (loading SmolLM2 takes seconds; a demo should not pay it twice)."""
    if name not in _MODELS:
        from ..compute import loader

        _MODELS[name] = loader.load_bundled() if name == "bundled" else loader.load_pretrained(name)
    return _MODELS[name]


@dataclass
class ChatTurn:
    """One turn: its prompt (the whole conversation so far), what the tree matched, the reply."""

    rid: str
    question: str
    prompt_ids: list[int]
    matched: int                  # prompt tokens reused from the tree (green)
    prefilled: int                # prompt tokens computed now (blue)
    reply_ids: list[int]
    reply: str
    ttft: float                   # seconds, measured
    cache_was_cleared: bool = False
    hit_nodes: frozenset[int] = frozenset()
    miss_nodes: frozenset[int] = frozenset()
    messages: list[dict[str, str]] = field(default_factory=list)   # the conversation after this turn
    output_ids: list[int] = field(default_factory=list)           # every generated token (the tree holds them)


def path_node_ids(snapshot: Any, tokens: Sequence[int]) -> list[tuple[int, int]]:
    """The nodes a sequence of tokens runs through in a radix snapshot, as (node id, end
    position), root excluded; stops where the tree stops holding the tokens.

    Example: a tree [1 2 3] -> [4 5]: tokens [1, 2, 3, 4, 5, 6] -> [(id of [1 2 3], 3), (id of [4 5], 5)].
    """
    page = getattr(snapshot, "page_size", 1) or 1
    children: dict[int, dict[tuple[int, ...], Any]] = {}
    for n in snapshot.nodes:                     # children are keyed by their first page, as in the tree
        children.setdefault(n.parent_id, {})[tuple(n.tokens[:page])] = n
    out, node_id, pos = [], 0, 0
    while pos < len(tokens):
        n = children.get(node_id, {}).get(tuple(tokens[pos:pos + page]))
        if n is None or list(tokens[pos:pos + len(n.tokens)]) != list(n.tokens)[: len(tokens) - pos]:
            break
        pos += min(len(n.tokens), len(tokens) - pos)
        out.append((n.id, n.start + len(n.tokens)))
        node_id = n.id
    return out


class ChatSession:
    """A conversation served by an engine with a radix cache (see the module doc).

    ``system``: the system prompt ([A] in the notes); ``examples``: few-shot turns ([B]), a list
    of (question, answer) pairs; ``num_blocks`` x ``block_size``: the K/V pool.
    """

    def __init__(self, model: Any, tok: Any, system: str, examples: Sequence[tuple[str, str]] = (),
                 max_new_tokens: int = 24, num_blocks: int = 256, block_size: int = 4, radix: bool = True) -> None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= 256:
            raise ValueError(f"max_new_tokens must be an int in 1..256, got {max_new_tokens!r}")
        self.model, self.tok = model, tok
        self.system, self.examples = system, list(examples)
        self.max_new_tokens, self.num_blocks, self.block_size, self.radix = max_new_tokens, num_blocks, block_size, radix
        self.turns: list[ChatTurn] = []
        self.clear_cache()
        self._cleared = False  # a new session's empty cache was never cleared: its first turn says nothing of it
        self.new_conversation()

    # ------------------------------------------------------------------ state
    def clear_cache(self) -> None:
        """An empty pool and tree (the conversation stays)."""
        from ..compute.engine import Engine

        self.engine = Engine(self.model, num_blocks=self.num_blocks, block_size=self.block_size, radix=self.radix)
        self._cleared = True
        self._since = len(self.turns)  # the turns from here on were served by this engine

    @property
    def turns_in_cache(self) -> list[ChatTurn]:
        """The turns served since the cache was last emptied (the ones the pool and the tree hold)."""
        return self.turns[self._since:]

    def new_conversation(self) -> None:
        """Back to the system prompt and the examples (the cache stays)."""
        self.messages: list[dict[str, str]] = [{"role": "system", "content": self.system}]
        for q, a in self.examples:
            self.messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]

    @property
    def conversation_turns(self) -> list[ChatTurn]:
        """The turns of the conversation a new question continues (each one's conversation is a
        start of the current one): after the notes' R4, R1 and R4."""
        n = len(self.messages)
        return [t for t in self.turns if len(t.messages) <= n and self.messages[:len(t.messages)] == t.messages]

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt ids: the tokenizer's chat template when it has one, else the turns as text."""
        if getattr(self.tok, "chat_template", None):
            return list(self.tok.apply_chat_template(messages, add_generation_prompt=True))
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return self.tok.encode(text)

    def next_prompt_start(self) -> list[int]:
        """The tokens every next question's prompt begins with: the conversation so far as the chat
        template renders it before a user turn (not ``render(self.messages)``, which ends in the
        template's "assistant" header that a next prompt does not have).

        Example: after *new conversation*: the system prompt, the examples and the next user turn's
        header; the tree holds them (in whole pages) if an earlier conversation started the same way.
        """
        a = self.render([*self.messages, {"role": "user", "content": "a"}])
        b = self.render([*self.messages, {"role": "user", "content": "?"}])
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return a[:n]

    def _end_ids(self) -> set[int]:
        ids = {getattr(self.tok, "eos_id", None)}
        hf = getattr(self.tok, "hf", None)
        if hf is not None:
            ids.add(hf.token_to_id("<|im_end|>"))
        return {i for i in ids if i is not None}

    # ------------------------------------------------------------------ a turn
    def ask(self, question: str, history: Sequence[dict[str, str]] | None = None, rid: str | None = None) -> ChatTurn:
        """Serve one user turn after ``history`` (default: the current conversation; give an
        earlier turn's ``messages`` to continue that one); the reply joins the conversation.
        An empty question is a ValueError and changes nothing."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"a question must be non-empty text, got {question!r}")
        messages = list(self.messages if history is None else history) + [{"role": "user", "content": question}]
        prompt = self.render(messages)
        rid = rid or f"T{len(self.turns) + 1}"
        req = self.engine.submit(prompt, self.max_new_tokens, rid=rid, arrival_step=self.engine.step_no)
        self.engine.run()
        out = req.outputs[0]
        end = next((i for i, t in enumerate(out) if t in self._end_ids()), len(out))
        reply_ids = out[:end]
        reply = self.tok.decode(reply_ids).strip()
        hit, miss = set(), set()
        if self.engine.cache is not None:
            for node_id, node_end in path_node_ids(self.engine.cache.snapshot(), prompt + out):
                (hit if node_end <= req.prefill_saved else miss).add(node_id)
        self.messages = messages + [{"role": "assistant", "content": reply}]
        turn = ChatTurn(rid, question, prompt, req.prefill_saved, req.prefill_computed, reply_ids, reply,
                        req.ttft, self._cleared, frozenset(hit), frozenset(miss), list(self.messages), list(out))
        self._cleared = False
        self.turns.append(turn)
        return turn


# ---------------------------------------------------------------------- the notes' four requests
def support_session(model: Any, tok: Any, radix: bool = True, max_new_tokens: int = 24) -> ChatSession:
    """A session of the shop's assistant: system prompt [A], few-shot examples [B]."""
    return ChatSession(model, tok, SUPPORT_SYSTEM, SUPPORT_EXAMPLES, max_new_tokens=max_new_tokens, radix=radix)


def serve_support_requests(session: ChatSession) -> dict[str, ChatTurn]:
    """R1, R2, R3 as first questions (each a new conversation after [A] [B]), then R4 as R1's
    second turn, one after another through ``session``."""
    turns: dict[str, ChatTurn] = {}
    for rid in ("R1", "R2", "R3"):
        session.new_conversation()
        turns[rid] = session.ask(SUPPORT_QUESTIONS[rid][0], rid=rid)
    turns["R4"] = session.ask(SUPPORT_QUESTIONS["R4"][0], history=turns["R1"].messages, rid="R4")
    return turns


def fastest_ttft(model: Any, turns: dict[str, ChatTurn], radix: bool, repeats: int = 3,
                 num_blocks: int = 256, block_size: int = 4) -> dict[str, float]:
    """Each request's time to first token, the fastest of ``repeats`` runs (other programs on the
    machine can only add time), served again in order on a fresh engine with the same prompts,
    one token each. With the tree, R1's reply is then put in the tree as the real run left it
    (its prompt and generated tokens, prefilled: only the reply is computed), so that R4 finds
    R1's whole turn cached."""
    from ..compute.engine import Engine

    best: dict[str, float] = {}
    for _ in range(repeats):
        eng = Engine(model, num_blocks=num_blocks, block_size=block_size, radix=radix)
        for rid, t in turns.items():
            r = eng.submit(t.prompt_ids, 1, rid=rid, arrival_step=eng.step_no)
            eng.run()
            best[rid] = min(best.get(rid, float("inf")), r.ttft)
            if radix and rid == "R1":                     # R1's reply into the tree (not timed)
                eng.submit(t.prompt_ids + t.output_ids, 1, rid="R1 reply", arrival_step=eng.step_no)
                eng.run()
    return best


def ttft_runs(model: Any, turns: dict[str, ChatTurn], repeats: int = 3, num_blocks: int = 128,
              block_size: int = 4, timed: Sequence[str] | None = None) -> dict[str, dict[str, list[float]]]:
    """The time to first token (seconds, measured) of every request after the first, with the tree
    and without it: ``{"tree": {rid: [...]}, "no tree": {rid: [...]}}``, the prompts served again,
    one token each.

    First, untimed, one pass puts the first request's whole turn (R1's prompt and the tokens the
    real run generated) in a fresh engine's tree, as the real run left it, so that R4 finds R1's
    turn cached; it is also the cell's first forward pass, so no timed pass is the first. R1 itself
    is not timed: with nothing cached it does a full prefill, the same work with the tree as
    without it (the no-tree runs measure that work). Then ``repeats`` times: the other requests, in
    order, on a copy of that engine and on one without the tree, a request's two runs back to back
    (which goes first alternates), so that the machine's load falls on both alike. ``num_blocks``:
    each engine's pool, room for the four requests (a pool is zeroed and copied per repetition;
    its size does not change a prefill's work; an eviction would, and raises). ``timed``: the
    requests to time (default: every one after the first); the others are not served again (a
    request's reuse is checked against the real run's, so one left out that would have changed
    what a later one finds raises).

    Example: ``median(ttft_runs(model, turns)["no tree"]["R2"])`` is R2's time without the tree.
    """
    import copy

    from ..compute.engine import Engine

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    (first, t1), *rest = turns.items()
    if timed is not None:
        unknown = [r for r in timed if r not in dict(rest)]
        if unknown or not timed:
            raise ValueError(f"timed must name some of {[r for r, _ in rest]}, got {list(timed)!r}")
        rest = [(r, t) for r, t in rest if r in timed]
    seeded = Engine(model, num_blocks=num_blocks, block_size=block_size, radix=True)
    seeded.submit(t1.prompt_ids + t1.output_ids, 1, rid=first, arrival_step=0)
    seeded.run()                                          # R1's turn into the tree (not timed)
    runs: dict[str, dict[str, list[float]]] = {"tree": {}, "no tree": {}}
    for i in range(repeats):
        engines = {"tree": copy.deepcopy(seeded, memo={id(model): model}),   # the same tree, its own pool
                   "no tree": Engine(model, num_blocks=num_blocks, block_size=block_size, radix=False)}
        for rid, t in rest:
            for side in (("tree", "no tree") if i % 2 == 0 else ("no tree", "tree")):
                eng = engines[side]
                r = eng.submit(t.prompt_ids, 1, rid=rid, arrival_step=eng.step_no)
                eng.run()
                if r.prefill_saved != (t.matched if side == "tree" else 0):   # not the work the table says
                    raise RuntimeError(f"{rid} ({side}): reused {r.prefill_saved} tokens, the real run {t.matched}")
                runs[side].setdefault(rid, []).append(r.ttft)
    return runs


def ttft_on_and_off(model: Any, turns: dict[str, ChatTurn], repeats: int = 3, num_blocks: int = 128,
                    block_size: int = 4) -> tuple[dict[str, float], dict[str, float]]:
    """``(with the tree, without it)``: each request's median time to first token over
    :func:`ttft_runs`' repetitions (one slow run, another program's burst, moves a median
    little); the first request (R1, the same work both ways) is not timed."""
    from statistics import median

    runs = ttft_runs(model, turns, repeats, num_blocks, block_size)
    return ({r: median(v) for r, v in runs["tree"].items()}, {r: median(v) for r, v in runs["no tree"].items()})


def support_node_labels(session: ChatSession, turns: dict[str, ChatTurn]) -> dict[int, str]:
    """The notes' letters on the session's tree: [A+B] the shared system prompt and examples (one
    node while every request used both), then each request's own part: [C] R1's turn, [D] R2's,
    [E] R3's and [F] R4's, from where R4 leaves R1's path. A part that takes several nodes numbers
    them: [C1] R1's prompt to its last full page (cached after its prefill), [C2] the rest of
    its prompt and its reply (cached when it finished).

    Example: a tree root -> [A+B] -> {R1's prompt -> R1's reply, ...} labels R1's nodes C1 and C2.
    """
    snap = session.engine.cache.snapshot()
    paths = {rid: [n for n, _ in path_node_ids(snap, t.prompt_ids + t.output_ids)] for rid, t in turns.items()}
    shared = [n for n, _ in path_node_ids(snap, turns["R2"].prompt_ids)][:1]
    labels = {shared[0]: "A+B"} if shared else {}
    for rid, letter, before in (("R1", "C", shared), ("R2", "D", shared), ("R3", "E", shared), ("R4", "F", paths["R1"])):
        own = [n for n in paths[rid] if n not in before and n not in labels]
        for i, n in enumerate(own):
            labels[n] = letter if len(own) == 1 else f"{letter}{i + 1}"
    return labels
