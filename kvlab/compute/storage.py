"""The disk tier's files: one safetensors file per chunk, keyed by the chunk's token hash.

:class:`FileStorage` is a :class:`kvlab.reuse.hicache_storage.HiCacheStorage` (the tree asks it
``exists``, ``add``, ``remove``) that also holds the data: ``write(key, k, v)`` saves the K and V
of a chunk's pages, ``read(key, page_offset, num_pages)`` returns some of them. A file is
``<root>/<key>.safetensors`` with tensors ``k`` and ``v`` of shape ``(layers, pages, block_size,
kv_heads, head_dim)`` and metadata (page count, the pool's page shape and dtype, a sha256 of the
bytes). It is written to a temporary name and renamed, so a crash never leaves a half file under
the key.

A missing file, a file that does not parse, a wrong shape or dtype, or a checksum that does not
match is a **miss**: ``exists`` answers False and the tree recomputes those tokens (never a crash,
never a wrong answer). ``exists`` reads and checks the whole file and keeps it (``max_staged``
chunks) for the ``read`` that follows, so a chunk that passed the check cannot change in between.

Mirrors SGLang ``hicache_storage.py`` ``HiCacheFile`` (one file per key under a directory) and
LMCache's local disk backend. Not handled: a size limit on the directory (files stay until a
miss removes them), several processes writing one directory.

Example:
    >>> import tempfile, torch
    >>> s = FileStorage(tempfile.mkdtemp(), page_shape=(2, 4, 1, 8))
    >>> k = torch.randn(2, 3, 4, 1, 8); v = torch.randn(2, 3, 4, 1, 8)   # 3 pages
    >>> s.add("abc", 3); s.exists("abc")          # announced: its save is queued
    True
    >>> s.write("abc", k, v); s.exists("abc")
    True
    >>> k2, v2 = s.read("abc", page_offset=1, num_pages=2)
    >>> torch.equal(k2, k[:, 1:3]), torch.equal(v2, v[:, 1:3])
    (True, True)
    >>> _ = open(s.path("abc"), "r+b").write(b"garbage"); s.forget_staged(); s.exists("abc")
    False
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path

import torch

__all__ = ["FileStorage"]


def _digest(k: torch.Tensor, v: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in (k, v):
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class FileStorage:
    """Chunks as safetensors files under ``root``; ``page_shape`` = ``(layers, block_size,
    kv_heads, head_dim)`` of the pool whose pages it stores, ``dtype`` its dtype."""

    def __init__(self, root: str | os.PathLike, page_shape: tuple[int, int, int, int],
                 dtype: torch.dtype = torch.float32, max_staged: int = 64) -> None:
        if len(page_shape) != 4 or not all(isinstance(x, int) and x >= 1 for x in page_shape):
            raise ValueError(f"page_shape must be 4 ints >= 1 (layers, block_size, kv_heads, head_dim), got {page_shape!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.page_shape = tuple(page_shape)
        self.dtype = dtype
        self.max_staged = max_staged
        self._pending: dict[str, int] = {}      # announced by add(), written by write()
        self._staged: OrderedDict[str, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self.misses = 0

    @classmethod
    def for_pool(cls, kv_pool, root: str | os.PathLike) -> "FileStorage":
        """A FileStorage for the pages of a ``PagedKVPool``."""
        p = kv_pool
        return cls(root, (p.num_layers, p.block_size, p.num_kv_heads, p.head_dim), p.dtype)

    def path(self, key: str) -> Path:
        if not isinstance(key, str) or not key or not key.isalnum():
            raise ValueError(f"a chunk key is a non-empty alphanumeric str, got {key!r}")
        return self.root / f"{key}.safetensors"

    # ------------------------------------------------------------------ HiCacheStorage
    def exists(self, key: str) -> bool:
        """True when the chunk will be or can be read: announced, or its file passes every check."""
        return key in self._pending or key in self._staged or self._load(key) is not None

    def add(self, key: str, num_pages: int) -> None:
        self.path(key)
        if isinstance(num_pages, bool) or not isinstance(num_pages, int) or num_pages < 1:
            raise ValueError(f"num_pages must be an int >= 1, got {num_pages!r}")
        self._pending[key] = num_pages

    def remove(self, key: str) -> None:
        """Forget a chunk and delete its file (after a miss: a corrupt file is not tried again)."""
        self._pending.pop(key, None)
        self._staged.pop(key, None)
        self.path(key).unlink(missing_ok=True)

    # ------------------------------------------------------------------ data
    def _check(self, k: torch.Tensor, v: torch.Tensor) -> int:
        L, bs, nkv, hs = self.page_shape
        ok = (k.dim() == 5 and k.shape == v.shape and (k.shape[0], *k.shape[2:]) == (L, bs, nkv, hs)
              and k.dtype == v.dtype == self.dtype and k.shape[1] >= 1)
        if not ok:
            raise ValueError(f"chunk K/V must be (layers {L}, pages, {bs}, {nkv}, {hs}) in {self.dtype}, "
                             f"got {tuple(k.shape)} / {tuple(v.shape)} in {k.dtype} / {v.dtype}")
        return k.shape[1]

    def write(self, key: str, k: torch.Tensor, v: torch.Tensor) -> None:
        """Save a chunk (K and V of its pages, ``(layers, pages, block_size, kv_heads, head_dim)``)."""
        from safetensors.torch import save_file

        path = self.path(key)
        pages = self._check(k, v)
        k, v = k.detach().cpu().contiguous(), v.detach().cpu().contiguous()
        meta = {"num_pages": str(pages), "page_shape": json.dumps(self.page_shape), "dtype": str(self.dtype),
                "sha256": _digest(k, v)}
        tmp = path.with_suffix(".tmp")
        save_file({"k": k, "v": v}, str(tmp), metadata=meta)
        os.replace(tmp, path)
        self._pending.pop(key, None)
        self._staged.pop(key, None)

    def _load(self, key: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Read the file into memory (one read, so a later change on disk cannot reach it), check
        it, stage it for ``read``. None (a miss) for any problem."""
        from safetensors.torch import load

        path = self.path(key)
        try:
            data = path.read_bytes()
            n = int.from_bytes(data[:8], "little")
            meta = json.loads(data[8:8 + n]).get("__metadata__") or {}
            tensors = load(data)
            k, v = tensors["k"], tensors["v"]
            pages = self._check(k, v)
            if (meta.get("num_pages") != str(pages) or meta.get("page_shape") != json.dumps(self.page_shape)
                    or meta.get("sha256") != _digest(k, v)):
                raise ValueError("metadata or checksum does not match")
        except Exception:  # missing, truncated, garbage, wrong shape: a miss, never a crash
            if path.exists():
                self.misses += 1
            return None
        self._staged[key] = (k, v)
        while len(self._staged) > self.max_staged:
            self._staged.popitem(last=False)
        return k, v

    def read(self, key: str, page_offset: int, num_pages: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """K and V of pages ``page_offset .. page_offset + num_pages - 1`` of a chunk, each
        ``(layers, num_pages, block_size, kv_heads, head_dim)``; None when the chunk is gone or
        shorter than that."""
        kv = self._staged.pop(key, None) or self._load(key)
        self._staged.pop(key, None)
        if kv is None or page_offset < 0 or num_pages < 1 or page_offset + num_pages > kv[0].shape[1]:
            return None
        k, v = kv
        return k[:, page_offset:page_offset + num_pages], v[:, page_offset:page_offset + num_pages]

    def forget_staged(self) -> None:
        """Drop the chunks kept since their check (the next ``exists`` reads the files again)."""
        self._staged.clear()

    def keys(self) -> list[str]:
        """The keys with a file on disk (checked or not)."""
        return sorted(p.stem for p in self.root.glob("*.safetensors"))
