"""The disk tier (L3) as the reuse layer sees it: chunk keys, and a pluggable storage interface.

When the host pool must make room and a storage tier is attached, a host-only radix node is
not dropped: its pages are saved as one **chunk** and the node stays in the tree, placement
``disk``. A chunk is keyed by a hash of every token from the root to the node's end and of where the
node starts (:func:`chunk_key`), so the same pages of the same prefix always get the same key
(as LMCache and HiCache key theirs), and a key says nothing about where the chunk came from. A split node keeps its chunk:
each half reads its own pages of it (``page_offset``).

The reuse layer never touches a file or a tensor. It asks a :class:`HiCacheStorage` only
pure-Python questions (``exists``), announces the chunks it will save (``add``: the save itself
is a queued transfer the compute layer performs, in order), and forgets missing ones
(``remove``). :class:`MemoryStorage` implements it with a dict (the simulator, the tests, the
lessons); ``kvlab.compute.storage.FileStorage`` writes safetensors files. A chunk that is
missing or corrupt answers ``exists() -> False``: a miss, never a wrong answer.

Mirrors SGLang ``python/sglang/srt/mem_cache/hicache_storage.py`` (``HiCacheStorage``:
``exists``, ``get``, ``set``; ``HiCacheFile``: one file per key) and LMCache's chunk keys.
Differences: keys cover a node's page run (SGLang keys one page each); data moves through
the cache manager's transfer queue, not through ``get``/``set`` calls here.

Example:
    >>> s = MemoryStorage()
    >>> k = chunk_key([1, 2, 3, 4])
    >>> len(k), k == chunk_key([1, 2, 3, 4]) != chunk_key([1, 2, 3, 5]), k != chunk_key([1, 2, 3, 4], start=2)
    (32, True, True)
    >>> s.exists(k), s.add(k, 2), s.exists(k), s.num_pages(k)
    (False, None, True, 2)
    >>> s.corrupt(k); s.exists(k)
    False
"""
from __future__ import annotations

import hashlib
from array import array
from typing import Protocol, Sequence, runtime_checkable

__all__ = ["chunk_key", "HiCacheStorage", "MemoryStorage"]


def chunk_key(tokens: Sequence[int], start: int = 0) -> str:
    """The key of the chunk holding the KV of ``tokens[start:]``, where ``tokens`` is the whole
    prefix from the root to the node's end (a token's KV depends on every token before it): the
    first 32 hex digits of sha256 over ``start`` and the ids, as 64-bit integers.

    Example: ``chunk_key([1, 2, 3, 4], start=2)`` is the same string in every run and on every
    machine, and differs from ``chunk_key([1, 2, 3, 4])`` (a chunk of all four tokens).
    """
    return hashlib.sha256(array("q", [start, *tokens]).tobytes()).hexdigest()[:32]


@runtime_checkable
class HiCacheStorage(Protocol):
    """What the hierarchical cache asks of a storage tier (pure Python, no tensors).

    ``exists(key)``: the chunk can be read now (missing, partly written or corrupt -> False).
    ``add(key, num_pages)``: a chunk of that many pages will be saved under ``key`` (its save is
    queued before any read of it). ``remove(key)``: forget it (after a miss).
    """

    def exists(self, key: str) -> bool: ...

    def add(self, key: str, num_pages: int) -> None: ...

    def remove(self, key: str) -> None: ...


class MemoryStorage:
    """A storage tier that keeps only the keys and their page counts (no data).

    For runs without tensors (simulator, tests, lessons). ``corrupt(key)`` and ``drop(key)``
    play a damaged or deleted file, so a test can check that it becomes a miss.
    """

    def __init__(self) -> None:
        self.chunks: dict[str, int] = {}
        self.damaged: set[str] = set()

    def exists(self, key: str) -> bool:
        return key in self.chunks and key not in self.damaged

    def add(self, key: str, num_pages: int) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"a chunk key is a non-empty str, got {key!r}")
        if isinstance(num_pages, bool) or not isinstance(num_pages, int) or num_pages < 1:
            raise ValueError(f"num_pages must be an int >= 1, got {num_pages!r}")
        self.chunks[key] = num_pages
        self.damaged.discard(key)

    def remove(self, key: str) -> None:
        self.chunks.pop(key, None)
        self.damaged.discard(key)

    def num_pages(self, key: str) -> int:
        return self.chunks[key]

    def corrupt(self, key: str) -> None:
        """Pretend the chunk's file was damaged (``exists`` says False from now on)."""
        self.damaged.add(key)

    def drop(self, key: str) -> None:
        """Pretend the chunk's file was deleted behind the cache's back."""
        self.chunks.pop(key, None)

    def __len__(self) -> int:
        return len(self.chunks)
