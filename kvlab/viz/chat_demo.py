"""Lesson 07's live classroom demo: a chat box on a real model, the radix cache in plain sight.

:func:`chat_demo` wraps a :class:`kvlab.lessons.chat.ChatSession` (the logic, testable without a
browser) in widgets: a text box and a *send* button, *clear the cache* and *new conversation*
buttons; under them the turn in one sentence (tokens matched, tokens prefilled, time to first
token, the reply), the turn's prompt as token chips (matched green, prefilled blue: token text,
not ids), the radix tree (token text on every node) and the block pool filling. *Clear the
cache* empties the pool and the tree but keeps the conversation, so the next turn recomputes it
all: feel the difference in its time to first token. Without a widget front end it shows the
state after the questions it was given. Replies are short (24 tokens by default) so that a turn
answers in a few seconds on a CPU.

CSS classes: ``kvlab-chat`` (box), ``kvlab-chat-text``, ``kvlab-chat-send``,
``kvlab-chat-clear-the-cache``, ``kvlab-chat-new-conversation``, ``kvlab-control-caption``,
``kvlab-svg`` (the tree), ``kvlab-figure`` (the pool).

Example (the bundled model, fast):
    >>> from kvlab.lessons.chat import ChatSession
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> s = ChatSession(model, tok, system="You document Python.", max_new_tokens=3)
    >>> t = s.ask("What is socket?")
    >>> turn_sentence(t).startswith("T1: ") and "matched in the tree" in turn_sentence(t)
    True
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..lessons.chat import ChatSession, ChatTurn, cached_model, path_node_ids
from .palette import HIT, MISS, theme

__all__ = ["chat_demo", "token_html", "token_view", "turn_sentence", "tree_svg", "pool_figure", "mid_word_decode", "block_turns",
           "start_held", "new_conversation_sentence",
           "classroom_tree_graph", "TREE_MAX_PX"]

CHAT_LEGEND_GAP_PT = 2  # the empty space between the tree's legend and the tree (the stepper's is 12)
TREE_MAX_PX = 380  # classroom mode: the tallest the chat's tree is drawn (599 px hold the controls above it)


def token_html(session: ChatSession, turn: ChatTurn, max_tokens: int = 120) -> str:
    """The turn's prompt as token chips: matched green, prefilled blue (token text, not ids)."""
    th = theme()
    chips = []
    ids = turn.prompt_ids[-max_tokens:]
    first = len(turn.prompt_ids) - len(ids)
    for i, t in enumerate(ids, start=first):
        colour = HIT if i < turn.matched else MISS
        text = html.escape(session.tok.token_text(t) if hasattr(session.tok, "token_text") else str(t))
        chips.append(f"<span style='background:{colour};color:white;padding:1px 3px;margin:1px;"
                     f"border-radius:3px;display:inline-block'>{text}</span>")
    more = f"<i>({first} earlier tokens not shown)</i> " if first else ""
    return (f"<div style='font-size:{th.font_size}px;line-height:1.7;overflow-wrap:anywhere'>{more}"
            + "".join(chips) + "</div>")


def token_view(session: ChatSession) -> str:
    """The chat's "this turn's tokens" view: the last turn's chips while the tree still holds that
    turn and the conversation goes on from it; otherwise one line that says why none are shown
    (after *clear the cache* the chips' green would contradict the empty tree; after *new
    conversation* they belong to the previous one).

    Example: after *clear the cache* -> "<p style=...>The cache was cleared after R4: ...</p>".
    """
    def line(text: str) -> str:  # the chips' text size (the notebook's 14 px is under a projector's 16)
        return f"<p style='font-size:{theme().font_size}px'>{text}</p>"

    last = session.turns[-1] if session.turns else None
    if last is None:
        return line("Ask a question: its prompt appears here token by token (green: matched in the tree, "
                    "blue: prefilled).")
    if not any(t is last for t in session.turns_in_cache):
        return line(f"The cache was cleared after {html.escape(last.rid)}: the tree holds none of its tokens now, "
                    "so the next turn prefills its whole prompt (all blue).")
    if not any(t is last for t in session.conversation_turns):
        held, total = start_held(session)
        return line(f"A new conversation: its first turn's prompt starts with the system prompt and the examples "
                    f"({total} tokens; the tree holds {held} of them). Send a question to see its tokens.")
    return token_html(session, last)


def turn_sentence(turn: ChatTurn) -> str:
    """The turn in one sentence, from its numbers (the reply in quotes)."""
    cleared = " (the cache had just been cleared)" if turn.cache_was_cleared else ""
    return (f"{turn.rid}: {len(turn.prompt_ids)} prompt tokens, {turn.matched} matched in the tree (green), "
            f"{turn.prefilled} prefilled (blue){cleared}; first token after {1e3 * turn.ttft:.0f} ms "
            f"(measured, this CPU). Reply: {turn.reply!r}")


def continues(session: ChatSession) -> str:
    """What a new question continues, in one sentence: the turns of the current conversation.

    Example: after the notes' R1 .. R4 -> "Your next question continues R1 → R4's conversation (new
    conversation: one after the examples)."
    """
    rids = [t.rid for t in session.conversation_turns]
    if len(rids) > 3:
        rids = [rids[0], "…", rids[-1]]
    if not rids:
        return "Your next question starts a new conversation after the system prompt and the examples."
    return (f"Your next question continues {' → '.join(rids)}'s conversation (new conversation: one after the "
            "examples).")


def start_held(session: ChatSession) -> tuple[int, int]:
    """(tokens the radix tree holds now, tokens) of the current conversation's start: the system
    prompt and the examples as the next turn's prompt begins (computed from the tree, not assumed).

    Example: after *clear the cache* -> ``(0, n)``: the next turn prefills all ``n`` again.
    """
    start = session.next_prompt_start()   # what the next prompt begins with, whatever the question
    if session.engine.cache is None:
        return 0, len(start)
    held = session.engine.cache.peek_prefix_len(start)   # changes nothing in the tree
    page = session.block_size
    return held // page * page, len(start)   # the tree matches whole pages: what the next turn reuses


def new_conversation_sentence(session: ChatSession, number: int) -> str:
    """What *new conversation* starts from, true to the tree now (held or emptied).

    Example: after *clear the cache* -> "... the cache is empty, so turn 1 prefills them again (92 tokens)."
    """
    held, total = start_held(session)
    head = f"A new conversation (chat {number}): its turn 1 starts from the system prompt and the examples"
    if held == 0:
        return f"{head}; the cache is empty, so turn 1 prefills them again ({total} tokens)."
    return f"{head}: the tree holds {held} of its {total} tokens, so turn 1 reuses them."


def tree_svg(session: ChatSession, max_chars: int = 18, labels: dict[int, str] | None = None,
             fold: bool = False) -> str:
    """The radix tree now, token text and token count on its nodes (one line each), the last
    turn's path green / blue; ``labels``: node id -> a letter shown on the node (the notes'
    [A]..[F]). ``fold`` (the live chat's view): in classroom mode only the last turn's path, folded
    (:func:`classroom_tree_graph`), for a tree that grows a turn at a time would soon be taller than a
    projector's screen, or its text too small to read; a lesson's own picture of a known tree stays whole."""
    from .radix_state import RadixState
    from .radix_view import fit_svg, radix_tree_graph

    if session.engine.cache is None:
        return "<p>(no radix tree: radix=False)</p>"
    held = session.turns_in_cache   # after *clear the cache* the tree holds no turn: none is named or coloured
    last = held[-1] if held else None
    snap = session.engine.cache.snapshot()
    decode = mid_word_decode(snap, session.tok.decode)
    if fold and theme().high_contrast and last is not None:
        graph = classroom_tree_graph(session, last, decode, max_chars, dict(labels or {}))
        return fit_svg(graph.pipe(format="svg", encoding="utf-8"), TREE_MAX_PX)
    state = RadixState(snap, hit=last.hit_nodes if last else frozenset(),
                       miss=last.miss_nodes if last else frozenset(), detokenize=decode,
                       node_labels=dict(labels or {}),
                       title=f"Radix tree after {last.rid}" if last else "Radix tree (empty)")
    graph = radix_tree_graph(state, source="measured", max_chars=max_chars, compact=True, detail=False,
                             legend_gap_pt=CHAT_LEGEND_GAP_PT)
    graph.graph_attr["pad"] = "0.15"  # a margin round the tree: the widest row's boxes touched the edge (review r7)
    if theme().high_contrast and "rankdir=TB" in graph.source:
        # drawn top to bottom and shrunk to TREE_MAX_PX, rows 0.3 in apart ended ~10 px apart, the arrowheads
        # on the boxes (review r6_04_07): more room between the rows
        graph.attr(ranksep="0.55")  # after radix_tree_graph's own graph attributes: this one counts
    return fit_svg(graph.pipe(format="svg", encoding="utf-8"), TREE_MAX_PX if theme().high_contrast else None)


def classroom_tree_graph(session: ChatSession, last: ChatTurn, decode: Any, max_chars: int = 18,
                         labels: dict[int, str] | None = None) -> Any:
    """The last turn's path in the tree, folded for a projector (:func:`kvlab.viz.radix_fold.fold_to_path`):
    its matched middle as one ``[k nodes]`` box, and under each node a grey dashed box counting the
    branches that leave the path there ("+2 other branches · 40 tok"), drawn top to bottom.

    Example: after R4 and one turn: root -> [A+B] (92 tok, "+2 other branches") -> [3 nodes] ... ->
    the turn's prefilled nodes in blue; nothing is shrunk below 16 px text."""
    from .radix_fold import fold_to_path
    from .radix_state import RadixState
    from .radix_view import radix_tree_graph

    snap = session.engine.cache.snapshot()
    path = [i for i, _end in path_node_ids(snap, last.prompt_ids + last.output_ids)]
    fold = fold_to_path(snap, path, hit=last.hit_nodes)
    names = {**{k: v for k, v in (labels or {}).items()}, **fold.labels}
    hidden = sum(n for n, _t in fold.branches.values())
    state = RadixState(fold.snapshot, hit=last.hit_nodes, miss=last.miss_nodes, detokenize=decode, node_labels=names,
                       title=f"{last.rid}'s path" + (f", {hidden} branch{'es' if hidden > 1 else ''} folded" if hidden else ""))
    graph = radix_tree_graph(state, source="measured", max_chars=max_chars, compact=True, detail=False,
                             legend_gap_pt=CHAT_LEGEND_GAP_PT, rankdir="TB", locks=False)
    graph.graph_attr["pad"] = "0.15"
    th = theme()
    fs = str(th.font_size + 4)
    for node_id, (count, tokens) in fold.branches.items():
        name = "root" if node_id == 0 else f"n{node_id}"
        words = f"+{count} other branch{'es' if count > 1 else ''} · {tokens} tok"
        graph.node(f"{name}_off", words, shape="box", style="dashed,rounded", color="#7f7f7f", fontcolor="#555555",
                   fontsize=fs)
        graph.edge(name, f"{name}_off", color="#9a9a9a", style="dashed")
    return graph


def mid_word_decode(snapshot: Any, decode: Any) -> Any:
    """``decode`` for node labels that starts a node's text with "…" when its first token
    continues its parent's last word: the tree splits only at page boundaries (every
    ``page_size`` tokens), so a node can begin inside a word ("…istant" after "ass").

    Example:
        >>> from types import SimpleNamespace as N
        >>> snap = N(nodes=[N(id=1, parent_id=0, tokens=(7, 8)), N(id=2, parent_id=1, tokens=(9,))])
        >>> text = {7: " the", 8: " ass", 9: "istant"}
        >>> d = mid_word_decode(snap, lambda ids: "".join(text[i] for i in ids))
        >>> d([9]), d([7, 8])
        ('…istant', ' the ass')
    """
    by_id = {n.id: n for n in snapshot.nodes}
    starts: set[tuple[int, ...]] = set()
    for n in snapshot.nodes:
        parent = by_id.get(n.parent_id)
        if parent is None or not parent.tokens or not n.tokens:
            continue
        before, after = decode([parent.tokens[-1]]), decode([n.tokens[0]])
        if before[-1:].isalnum() and after[:1].isalnum():
            starts.add(tuple(n.tokens[:4]))

    def marked(ids: Sequence[int]) -> str:
        text = decode(list(ids))
        return "…" + text if tuple(ids[:4]) in starts else text
    return marked


SHARED_NAME = "hatched: on the path of 2+ turns, computed once (hover: which)"


def block_turns(session: ChatSession) -> dict[int, list[str]]:
    """Block id -> the turns whose prompt and reply run through it in the tree now (turns since
    the cache was last emptied, in order): a block two turns' paths share was computed once,
    by the first, and reused by the others.

    Example: R1, then R4 after R1's turn: R1's blocks -> ["R1", "R4"] (and [A+B]'s, every turn's).
    """
    if session.engine.cache is None:
        return {}
    snap = session.engine.cache.snapshot()
    kv = {n.id: n.kv for n in snap.nodes}
    out: dict[int, list[str]] = {}
    for t in session.turns_in_cache:
        for node_id, _end in path_node_ids(snap, t.prompt_ids + t.output_ids):
            for b in kv[node_id]:
                out.setdefault(b, []).append(t.rid)
    return out


def pool_figure(session: ChatSession) -> Any:
    """The block pool now: the tree's blocks and any running request's, each in the colour of the
    turn that computed it (the legend's swatches); hatched over that colour where 2+ turns' paths
    share it (a legend entry of its own; hover names the turns)."""
    from .memory_map import memory_map_figure

    used = session.engine.allocator.num_used_blocks
    fig = memory_map_figure(session.engine.snapshot(), source="measured",
                            title=f"The block pool: {used} of {session.num_blocks} blocks hold KV")
    tokens = next((t for t in fig.data if t.name == "tokens"), None)
    if tokens is None:  # a pool of over 256 blocks is drawn as a heatmap: hover tells, no hatch
        return fig
    users = block_turns(session)
    shared = sorted(b for b, rids in users.items() if len(rids) > 1)
    owner = session.engine.allocator.owner
    blocks = next(t for t in fig.data if t.name == "blocks")
    hover = list(blocks.hovertext)
    for b, rids in users.items():
        who = f"shared by {', '.join(rids)}" if len(rids) > 1 else f"used by {rids[0]} only"
        hover[b] = f"P{b}: computed by {owner[b]}; {who} (cached in the radix tree)"
    blocks.hovertext = hover
    if shared:
        _hatch_shared(fig, tokens, shared)
    return fig


def _hatch_shared(fig: Any, tokens: Any, shared: Sequence[int]) -> None:
    """Hatching over the ``shared`` blocks' fill, a trace of its own drawn right above the fill (under
    the labels): the blocks keep their turn's colour, solid under the hatch, so every legend swatch
    is drawn as it is shown, and the hatch has its own legend entry (review r7 of 07: R1's and R4's
    swatches were solid while all their blocks were drawn hatched)."""
    import plotly.graph_objects as go

    from .memory_map import _legend_rows

    th = theme()
    pick = lambda values: [values[b] for b in shared]  # noqa: E731 - one column of the tokens trace
    hatch = go.Bar(x=pick(tokens.x), y=pick(tokens.y), base=pick(tokens.base), width=tokens.width,
                   orientation="h", name=SHARED_NAME, showlegend=True, hoverinfo="skip", legendrank=1001,
                   marker=dict(color="rgba(0,0,0,0)", line=dict(width=0),
                               pattern=dict(shape="/", fgcolor="#222222", bgcolor="rgba(0,0,0,0)", size=7,
                                            solidity=0.3)))
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    width = fig.layout.width or th.grid_width
    row = 30 if th.high_contrast else 22
    grow = (_legend_rows({}, width, [*names, SHARED_NAME]) - _legend_rows({}, width, names)) * row
    fig.add_trace(hatch)
    order = list(fig.data)
    at = order.index(tokens) + 1
    fig.data = order[:at] + [order[-1]] + order[at:-1]
    fig.layout.height += grow
    fig.layout.margin.b += grow


# ---------------------------------------------------------------------- the widget
@dataclass
class _Widgets:
    box: Any
    text: Any
    tokens: Any
    tree: Any
    pool: Any
    caption: Any
    buttons: dict[str, Any] = field(default_factory=dict)


def chat_demo(session: ChatSession | None = None, questions: Sequence[str] = (), static: bool | None = None,
              max_new_tokens: int = 24) -> Any:
    """A chat box on a real model (SmolLM2 by default) showing the radix cache at work.

    ``questions`` are asked first (the demo is never empty). Returns the widget box, or in
    static mode an object that displays the last turn, the tree and the pool."""
    from .display import is_static

    if session is None:
        from ..lessons.chat import SUPPORT_EXAMPLES, SUPPORT_SYSTEM

        model, tok = cached_model("smollm2")
        session = ChatSession(model, tok, SUPPORT_SYSTEM, SUPPORT_EXAMPLES, max_new_tokens=max_new_tokens)
    for q in questions:
        session.ask(q)
    if is_static(static):
        return _StaticChat(session)
    return _build(session).box


class _StaticChat:
    def __init__(self, session: ChatSession) -> None:
        self.session = session

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        from .display import static_frames

        s = self.session
        if s.turns and static_frames():  # the static site: every turn this session ran, to pick from
            display(HTML(self._explore()))
        elif s.turns:
            display(HTML(f"<p>{html.escape(turn_sentence(s.turns[-1]))}</p>" + token_html(s, s.turns[-1])))
        display(HTML(tree_svg(s)))
        display(pool_figure(s))

    def _explore(self) -> str:
        """The turns already asked (a real model ran them when the page was built): each one's
        sentence and prompt chips; the tree and the pool below are after the last turn."""
        from .explorer import explorer_html

        s, at = self.session, {"turn": len(self.session.turns)}
        n = list(range(1, len(s.turns) + 1))

        def parts() -> list[str]:
            t = s.turns[at["turn"] - 1]
            return [f"<p>{html.escape(turn_sentence(t))}</p>" + token_html(s, t)]

        return explorer_html(lambda **kw: at.update(kw), parts, {"turn": n}, {"turn": n[-1]},
                             title="Try it here: the turns this session ran (asking a new question needs the live "
                                   "lesson; the tree and the pool below are after the last turn)")


def _on_enter(text: Any, action: Any) -> None:
    """Run ``action()`` when Enter is pressed in the Text widget ``text`` (review r6_04_07: only
    *send* sent). The front end sends ``{"event": "submit"}``; ``on_msg`` hears it without
    ``Text.on_submit``, which ipywidgets 8 deprecates (its replacement also fires on leaving the box).

    Example: ``_on_enter(text, send)``: typing a question and pressing Enter sends it.
    """
    text.on_msg(lambda _w, content, _buffers: action() if content.get("event") == "submit" else None)


def _build(session: ChatSession) -> _Widgets:
    """The live chat box on ``session``: its widgets (:func:`_make_widgets`), wired to the session
    (:func:`_wire`), showing the state after the turns already asked."""
    w = _make_widgets()
    _wire(session, w)
    return w


def _make_widgets() -> _Widgets:
    """The chat's widgets, laid out: the question box and its buttons, the caption, and one view at
    a time under them (:func:`_view_picker`). Nothing is wired to a session yet."""
    import ipywidgets as W

    from .palette import classroom_css

    text = W.Text(placeholder="ask the shop assistant something", layout=W.Layout(width="300px", max_width="100%"))
    text.add_class("kvlab-chat-text")
    buttons = {name: W.Button(description=name, layout=W.Layout(width="auto"))
               for name in ("send", "clear the cache", "new conversation")}
    for name, b in buttons.items():
        b.add_class("kvlab-chat-" + name.replace(" ", "-"))
    caption, tokens, pool = W.HTML(), W.HTML(), W.Output()
    tree = W.HTML(layout=W.Layout(width="100%"))  # its SVG is 100% wide: of a box that has a width
    caption.add_class("kvlab-control-caption")
    tree.add_class("kvlab-svg")
    pool.add_class("kvlab-figure")
    css = classroom_css("kvlab-chat")
    pick, shown = _view_picker(tokens, tree, pool)
    parts = ([W.HTML(css)] if css else []) + [
        W.HBox([text, *buttons.values()], layout=W.Layout(flex_flow="row wrap", max_width="100%")),
        caption, pick, shown]
    box = W.VBox(parts, layout=W.Layout(max_width="100%"))
    box.add_class("kvlab-control")
    box.add_class("kvlab-chat")
    return _Widgets(box, text, tokens, tree, pool, caption, buttons)


def _view_picker(tokens: Any, tree: Any, pool: Any) -> tuple[Any, Any]:
    """Toggle buttons and the box that shows the view they pick: the prompt's tokens, the tree or the pool.

    One view at a time under the controls: the question box, the caption and what the turn changed
    fit one projector screen (599 px at 1280x720). Example: picking "radix tree" shows ``tree`` alone.
    """
    import ipywidgets as W

    views = {"this turn's tokens": tokens, "radix tree": tree, "block pool": pool}
    pick = W.ToggleButtons(options=list(views), value="this turn's tokens",  # no "show:" label: a row less
                           style={"button_width": "auto"},   # classroom mode cut "this turn's tokens"
                           tooltips=["the prompt, token by token: green matched in the tree, blue prefilled",
                                     "the radix tree after the turn", "the block pool after the turn"])
    pick.add_class("kvlab-chat-view")
    shown = W.Box([tokens], layout=W.Layout(width="100%", max_width="100%"))

    def choose(change: Any) -> None:
        shown.children = (views[change["new"]],)

    pick.observe(choose, names="value")
    return pick, shown


def _show(session: ChatSession, w: _Widgets, note: str = "") -> None:
    """Draw the session's state in ``w``: ``note`` (or the last turn's sentence) as the caption, the
    last turn's token chips, the tree and the pool."""
    from .stepper import figure_output

    last = session.turns[-1] if session.turns else None
    w.caption.value = html.escape(note or (turn_sentence(last) + " " + continues(session) if last else
                                           "Ask a question."))
    w.tokens.value = token_view(session)
    w.tree.value = tree_svg(session, fold=True)
    w.pool.outputs = (figure_output(pool_figure(session)),)


def _wire(session: ChatSession, w: _Widgets) -> None:
    """Connect the buttons and Enter to ``session`` (send, clear the cache, new conversation) and show its state."""
    text, caption, buttons = w.text, w.caption, w.buttons
    chats = {"number": 1, "turns": 0}  # the conversation this demo is in, and its turns so far

    def show(note: str = "") -> None:
        _show(session, w, note)

    def send(_b: Any = None) -> None:
        q = text.value
        if not q.strip():
            show("Type a question in the box first: an empty question has nothing to send.")
            return
        # A turn takes seconds on a CPU: say so at once (widget updates reach the browser as they
        # are made), and take no second question until this one is answered.
        caption.value = html.escape(f"computing the reply to {q!r}: prefill the part the tree does not hold, then one "
                                    "token at a time (a few seconds on a CPU)…")
        # every button off until the turn is answered: a *new conversation* or *clear the cache* clicked
        # mid-turn ran after it, on a turn the caption had not shown yet (review r9 of 07: "chat 3, turn 4")
        for b in buttons.values():
            b.disabled = True
        try:
            n = chats["turns"] + 1
            session.ask(q, rid=f"your turn {n}" if chats["number"] == 1 else f"chat {chats['number']}, turn {n}")
            chats["turns"] = n
        except ValueError as e:
            show(str(e))
            return
        finally:
            for b in buttons.values():
                b.disabled = False
        text.value = ""
        show()

    def clear(_b: Any) -> None:
        session.clear_cache()
        show("The cache is empty: the next turn prefills the whole conversation (watch its time to first token).")

    def restart(_b: Any) -> None:
        session.new_conversation()
        chats["number"], chats["turns"] = chats["number"] + 1, 0
        show(new_conversation_sentence(session, chats["number"]))

    buttons["send"].on_click(send)
    _on_enter(text, send)
    buttons["clear the cache"].on_click(clear)
    buttons["new conversation"].on_click(restart)
    show()
