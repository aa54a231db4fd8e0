"""Moved to ``kvlab.reuse (radix_cache, cache_manager, eviction, radix_snapshot, stats) and kvlab.lessons.four_requests``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .lessons.four_requests import (FOUR_REQUEST_TEXTS, MULTI_TURN_TURNS, Segment, char_detokenize, char_tokenize,
                                    four_request_example, multi_turn_example)
from .lessons.four_requests import ExampleRequest as RequestRecord
from .reuse.cache_manager import ServeRecord, serve_request
from .reuse.eviction import EVICTION_POLICIES, EvictionPolicy
from .reuse.radix_cache import EvictResult, InsertResult, MatchResult, RadixCache, RadixStats, TreeNode
from .reuse.radix_snapshot import NodeView, RadixSnapshot
from .reuse.stats import HitStats

__all__ = ["TreeNode", "MatchResult", "InsertResult", "EvictResult", "HitStats", "RadixStats", "EvictionPolicy",
           "EVICTION_POLICIES", "RadixCache", "NodeView", "RadixSnapshot", "ServeRecord", "serve_request", "Segment",
           "RequestRecord", "FOUR_REQUEST_TEXTS", "MULTI_TURN_TURNS", "four_request_example", "multi_turn_example",
           "char_tokenize", "char_detokenize"]
