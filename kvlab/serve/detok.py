"""One sample's text as its tokens arrive: incremental detokenizing and stop strings.

``TextStream(decode, stops)`` takes each step's new token ids and returns the text that is safe
to send now. It holds back what could still change: a trailing ``\\ufffd`` (the first bytes of a
character split over tokens) and the last ``len(longest stop) - 1`` characters (they may be the
start of a stop string). When a stop string appears, the text ends just before it,
``finish_reason`` becomes ``"stop"`` and the caller aborts the request in the engine (vLLM's
output processor does the same: stop strings are found in text, after the engine).

Example (a decoder over single characters):
    >>> ts = TextStream(lambda ids: "".join(map(chr, ids)), stops=["\\n\\n"])
    >>> ts.add([ord(c) for c in "ab\\n"])           # "\\n" could start the stop string: held back
    'ab'
    >>> ts.add([ord(c) for c in "\\ncd"]), ts.finish_reason, ts.text
    ('', 'stop', 'ab')
"""
from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["TextStream"]


class TextStream:
    """The text of one sample; ``decode`` maps all its token ids so far to text."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str] = ()) -> None:
        self.decode = decode
        self.stops = list(stops)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.token_ids: list[int] = []
        self.text = ""               # the text sent so far
        self.finish_reason: str | None = None

    def add(self, new_ids: Sequence[int], final: bool = False) -> str:
        """Take new token ids; return the next piece of text to send ('' when nothing is safe yet).
        ``final``: the engine has finished the sample, so nothing is held back."""
        if self.finish_reason is not None:
            return ""
        self.token_ids += list(new_ids)
        full = self.decode(self.token_ids)
        hit = min((i for i in (full.find(s) for s in self.stops) if i >= 0), default=-1)
        if hit >= 0:
            full, final, self.finish_reason = full[:hit], True, "stop"
        if not final:
            safe = len(full) - self.hold
            while safe > len(self.text) and full[safe - 1] == "\ufffd":   # a character still incomplete
                safe -= 1
            full = full[:max(safe, len(self.text))]
        if not full.startswith(self.text):          # a merge changed earlier text: send nothing new
            return ""
        piece, self.text = full[len(self.text):], full
        return piece
