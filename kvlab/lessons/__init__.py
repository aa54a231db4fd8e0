"""kvlab.lessons: the source notes' worked examples, as data and as runs of the real code.

    translation.py     the address-translation figure (block size 4, table [3, 7, 1, 5, 9], pos 9)
    fragmentation.py   [A 4096][B 2048][C 4096][free 2048]: contiguous versus paged
    four_requests.py   the four customer-service requests and a multi-turn chat on the radix tree
    sharing.py         blocks held by parallel sampling and beam search, with and without sharing (lesson 06)
    eviction.py        popular prompts among one-off documents, and a radix cache's hit rate on them (lesson 08)
    step_times.py      lesson 01's reading of its measured step times beside the counted FLOPs (which moves are the
                       model, which the machine; a fixed per-step cost)

The lessons and the checkers call these; nothing here is hard-coded beyond the notes' inputs.
"""
from __future__ import annotations

from .four_requests import (FOUR_REQUEST_TEXTS, MULTI_TURN_TURNS, ExampleRequest, Segment, char_detokenize,
                            char_tokenize, four_request_example, multi_turn_example)
from .fragmentation import FragmentationExample, fragmentation_example
from .translation import NOTES_BLOCK_SIZE, NOTES_TABLE, notes_translation

__all__ = ["FOUR_REQUEST_TEXTS", "MULTI_TURN_TURNS", "ExampleRequest", "Segment", "char_detokenize", "char_tokenize",
           "four_request_example", "multi_turn_example", "FragmentationExample", "fragmentation_example",
           "NOTES_BLOCK_SIZE", "NOTES_TABLE", "notes_translation"]
