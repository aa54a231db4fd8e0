"""Hit statistics shared by the radix tree and the block-hash cache.

Example:
    >>> s = HitStats(num_matches=2, hit_tokens=30, missed_tokens=10)
    >>> s.hit_rate, s.prefill_tokens_saved
    (0.75, 30)
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HitStats"]


@dataclass(slots=True)
class HitStats:
    """Lookups counted by ``match_prefix`` (calls with ``record_stats=True``).

    hit_tokens: prompt tokens found in the cache (their prefill is skipped);
    missed_tokens: prompt tokens not found (they must be prefilled).
    """

    num_matches: int = 0
    hit_tokens: int = 0
    missed_tokens: int = 0

    @property
    def prefill_tokens_saved(self) -> int:
        return self.hit_tokens

    @property
    def hit_rate(self) -> float:
        total = self.hit_tokens + self.missed_tokens
        return self.hit_tokens / total if total else 0.0
