"""The disk tier (L3) as the reuse layer sees it: page keys that cannot lie, and a pluggable storage interface.

**Keys.** Each full page of a prompt has a storage key: a hash chain over page token ids, as
SGLang's ``get_hash_str`` and vLLM's block hashes are, seeded with a **fingerprint** of the model
and the KV layout (:func:`kv_fingerprint`: model id or weights digest, dtype, page size, layers,
KV heads, head_dim)::

    h[-1] = fingerprint
    h[i]  = sha256(h[i-1] || ids of page i)[:32]       (key of page i: covers pages 0..i)

So a key names the page's tokens, every token before them (a token's KV depends on all of them)
and the model that computed it: the same prefix on the same model always gets the same key (a
restart, or a second engine on the same directory, finds it), and two models never share one.

**Pages on disk.** When the host pool must make room and a storage tier is attached, a host-only
radix node is not dropped: each of its pages is saved under its key, and the node stays in the
tree, placement ``disk``, holding its pages' keys (a split node splits its key list). On
admission the tree also asks the storage about the part of the prompt it does not hold at all
(:meth:`HiCacheStorage.batch_exists`: how many of these keys, in order, are there), so pages saved
by an earlier run, or by another engine, come back.

The reuse layer never touches a file or a tensor. It asks a :class:`HiCacheStorage` pure-Python
questions and announces the saves it queues (``add``: the save itself is a queued transfer the
compute layer performs). Before it loads a page it asks ``prefetch``: the storage reads and
checks the pages and keeps them in memory for the queued fetch, so a page that passed cannot fail
or change before it is copied. :class:`MemoryStorage` implements the interface with a dict (the
simulator, the tests, the lessons); ``kvlab.compute.storage.FileStorage`` keeps one file per page.
A missing, corrupt, foreign or copied page is a miss, never a wrong answer.

Mirrors SGLang ``python/sglang/srt/mem_cache/hicache_storage.py`` (``HiCacheStorage``:
``exists``, ``batch_exists``, ``get``, ``set``; ``HiCacheFile``: one file per page key, the key
suffixed with the model name) and ``radix_cache.py``'s page hash chain. Differences: data moves
through the cache manager's transfer queue, not through ``get``/``set`` calls here.

Example:
    >>> fp = kv_fingerprint("tiny", "float32", 2, 2, 1, 8)
    >>> keys = page_keys([1, 2, 3, 4, 5], 2, fp)          # 2 full pages; token 5 is a partial page
    >>> len(keys), keys == page_keys([1, 2, 3, 4], 2, fp), keys[1] != page_keys([9, 9, 3, 4], 2, fp)[1]
    (2, True, True)
    >>> keys[0] != page_keys([1, 2], 2, kv_fingerprint("other", "float32", 2, 2, 1, 8))[0]
    True
    >>> s = MemoryStorage(fp)
    >>> s.add(keys[0]); s.batch_exists(keys), s.exists(keys[0])
    (1, True)
    >>> s.corrupt(keys[0]); s.exists(keys[0])
    False
"""
from __future__ import annotations

import hashlib
from array import array
from typing import Protocol, Sequence, runtime_checkable

__all__ = ["KEY_LEN", "kv_fingerprint", "page_keys", "is_key", "leading", "HiCacheStorage", "MemoryStorage"]

KEY_LEN = 32  # hex digits of a page key


def kv_fingerprint(model_id: str, dtype: str, page_size: int, num_layers: int, num_kv_heads: int,
                   head_dim: int) -> str:
    """32 hex digits naming a model and its KV layout; the seed of every page key.

    ``model_id``: a name or, better, a digest of the weights (two checkpoints of one shape must
    differ). Example: ``kv_fingerprint("tiny", "float32", 4, 2, 1, 8)`` is the same string in every
    run and on every machine, and changes with any argument.
    """
    if not isinstance(model_id, str) or not model_id:
        raise ValueError(f"model_id must be a non-empty str, got {model_id!r}")
    parts = [model_id, str(dtype), *(str(x) for x in (page_size, num_layers, num_kv_heads, head_dim))]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:KEY_LEN]


def page_keys(tokens: Sequence[int], page_size: int, fingerprint: str = "") -> list[str]:
    """The keys of the full pages of ``tokens`` (a prefix from the root), a hash chain seeded with
    ``fingerprint``. Example: ``page_keys([1, 2, 3], 2, fp)`` -> one key (the page ``[1 2]``)."""
    h = fingerprint.encode()
    out = []
    for i in range(len(tokens) // page_size):
        page = array("q", tokens[i * page_size:(i + 1) * page_size]).tobytes()
        h = hashlib.sha256(h + page).hexdigest()[:KEY_LEN].encode()
        out.append(h.decode())
    return out


def is_key(key) -> bool:
    """A page key: ``KEY_LEN`` lowercase hex digits (what :func:`page_keys` makes)."""
    return isinstance(key, str) and len(key) == KEY_LEN and all(c in "0123456789abcdef" for c in key)


@runtime_checkable
class HiCacheStorage(Protocol):
    """What the hierarchical cache asks of a storage tier (pure Python, no tensors). One key = one page.

    ``fingerprint``: the seed of the keys it holds (:func:`kv_fingerprint`).
    ``exists(key)``: the page is there (a cheap check). ``batch_exists(keys)``: how many of
    ``keys``, from the first, are there. ``prefetch(keys)``: read and check them, keep them for
    the queued fetch; how many, from the first, passed (a page that passed is served as read).
    ``add(key)``: a save of that page is queued. ``remove(key)``: forget it (after a miss).
    """

    fingerprint: str

    def exists(self, key: str) -> bool: ...

    def batch_exists(self, keys: Sequence[str]) -> int: ...

    def prefetch(self, keys: Sequence[str]) -> int: ...

    def add(self, key: str) -> None: ...

    def remove(self, key: str) -> None: ...


def leading(keys: Sequence[str], ok) -> int:
    """How many of ``keys``, from the first, satisfy ``ok`` (the run a batch check reports)."""
    n = 0
    for k in keys:
        if not ok(k):
            break
        n += 1
    return n


class MemoryStorage:
    """A storage tier that keeps only the keys (no data): for runs without tensors (simulator,
    tests, lessons). ``corrupt(key)`` and ``drop(key)`` play a damaged or deleted file, so a
    test can check that it becomes a miss. Several managers may share one (a shared store)."""

    def __init__(self, fingerprint: str = "") -> None:
        self.fingerprint = fingerprint
        self.chunks: dict[str, int] = {}   # key -> 1 (a page)
        self.damaged: set[str] = set()

    def exists(self, key: str) -> bool:
        return key in self.chunks and key not in self.damaged

    def batch_exists(self, keys: Sequence[str]) -> int:
        return leading(keys, self.exists)

    def prefetch(self, keys: Sequence[str]) -> int:
        return self.batch_exists(keys)

    def add(self, key: str) -> None:
        if not is_key(key):
            raise ValueError(f"a page key is {KEY_LEN} hex digits, got {key!r}")
        self.chunks[key] = 1
        self.damaged.discard(key)

    def remove(self, key: str) -> None:
        self.chunks.pop(key, None)
        self.damaged.discard(key)

    def corrupt(self, key: str) -> None:
        """Pretend the page's file was damaged (``exists`` says False from now on)."""
        self.damaged.add(key)

    def drop(self, key: str) -> None:
        """Pretend the page's file was deleted behind the cache's back."""
        self.chunks.pop(key, None)

    def __len__(self) -> int:
        return len(self.chunks)
