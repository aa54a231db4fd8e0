"""The hierarchical radix tree's plain data: transfers, tier counters, matches over tiers, snapshots.

Mirrors SGLang's ``MatchResult`` fields for HiCache (``last_host_node``, ``host_hit_length``,
``mem_cache/base_prefix_cache.py``) and the cache controller's transfer operations; kvlab names
each copy a :class:`Transfer` in one queue.

Example:
    >>> t = Transfer("load", src=(4, 5), dst=(0, 1))
    >>> t.num_pages, TierStats(loaded_tokens=8).bytes_moved(2)["host->device"]
    (2, 16)
"""
from __future__ import annotations

from dataclasses import dataclass

from .radix_cache import MatchResult

__all__ = ["Transfer", "TierStats", "HiMatchResult", "TierSnapshot"]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One copy for the compute layer. ``kind``: "write" (device blocks ``src`` -> host blocks
    ``dst``), "load" (host -> device), "save" (host blocks ``src`` -> the pages ``keys``, one key
    a block), "fetch" (the pages ``keys`` -> device blocks ``dst``). ``node``: whose KV."""

    kind: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    keys: tuple[str, ...] = ()
    node: int = 0

    @property
    def num_pages(self) -> int:
        return len(self.src) if self.kind in ("write", "load", "save") else len(self.dst)


@dataclass(slots=True)
class TierStats:
    """Tokens found and moved per tier (bytes = tokens x the model's bytes per token)."""

    host_hit_tokens: int = 0      # matched on the host (not on the device)
    disk_hit_tokens: int = 0      # matched on disk
    written_tokens: int = 0       # device -> host (backups)
    loaded_tokens: int = 0        # host -> device (load_back)
    saved_tokens: int = 0         # host -> disk
    fetched_tokens: int = 0       # disk -> device (load_back)
    storage_hit_tokens: int = 0   # found in storage beyond the tree (a restart, another engine)
    skipped_tokens: int = 0       # host or disk hits not loaded (fewer than load_back_threshold)
    disk_misses: int = 0          # chunks found missing or corrupt
    host_dropped_tokens: int = 0  # left the host for good (no storage tier)

    def bytes_moved(self, bytes_per_token: int) -> dict[str, int]:
        """Bytes per direction: ``{"device->host": ..., "host->device": ..., "host->disk": ..., "disk->device": ...}``."""
        b = bytes_per_token
        return {"device->host": self.written_tokens * b, "host->device": self.loaded_tokens * b,
                "host->disk": self.saved_tokens * b, "disk->device": self.fetched_tokens * b}


@dataclass(frozen=True, slots=True)
class HiMatchResult(MatchResult):
    """A match over the tiers. ``prefix_len``, ``kv``, ``last_node``: the part on the device (as
    RadixCache's MatchResult); ``beyond``: the nodes after it, off the device (top down),
    ``host_hit_length`` / ``disk_hit_length`` tokens of them on the host / on disk only."""

    beyond: tuple = ()
    host_hit_length: int = 0
    disk_hit_length: int = 0


@dataclass(frozen=True)
class TierSnapshot:
    """Both pools at one moment, as plain data (``kvlab.viz.tier_view`` draws it): each block's
    lifecycle state, the node holding it (0: none), and the caption."""

    device_states: tuple[str, ...]
    host_states: tuple[str, ...]
    device_nodes: tuple[int, ...]
    host_nodes: tuple[int, ...]
    placements: dict[int, str]
    caption: str = ""
    disk_pages: tuple[tuple[int, int], ...] = ()   # (node id, pages) of each node on disk only, oldest node first
