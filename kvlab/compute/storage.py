"""The disk tier's files: one safetensors file per page, named by the page's key, that says whose it is.

:class:`FileStorage` is a :class:`kvlab.reuse.hicache_storage.HiCacheStorage` (the tree asks it
``exists``, ``batch_exists``, ``prefetch``, ``add``, ``remove``) that also holds the data:
``write(key, k, v)`` saves one page's K and V, ``read(key)`` returns them. A file is
``<root>/<key>.safetensors`` with tensors ``k`` and ``v`` of shape ``(layers, block_size,
kv_heads, head_dim)`` and metadata: **its own key, the fingerprint** of the model and KV layout
(``kvlab.reuse.hicache_storage.kv_fingerprint``), the page shape and dtype, and a sha256 over all
of them and the bytes. It is written to a temporary name and renamed, so a crash never leaves a
half file under the key.

Every read checks everything: a missing file, a file that is not a regular file (a FIFO, a
device, a symlink: opened without following links and without blocking), one that does not
parse, a wrong shape or dtype, a checksum that does not match, **a key or fingerprint that is not
this one** (a file copied or linked under another name, another model's page) is a **miss**: the
tree recomputes those tokens (never a crash, never a wrong answer). ``prefetch`` reads and checks
pages and keeps them in memory for the fetch that follows, so a page that passed cannot change
or vanish in between (``TierCopier`` drops what is left once its transfers ran).

**Failures are misses.** A write that fails (a read-only or removed directory, a full disk)
leaves no file and no key behind, and is counted (``write_errors``); a read that fails is counted
(``misses``). ``max_bytes``: a size cap on the directory's page files; past it the least recently
used pages are deleted (as SGLang's file backend evicts), oldest first, **except a staged page**
(a fetch is queued for it): those go once ``forget_staged`` runs. The start-up scan skips (and
counts, ``scan_skipped``) a name that vanished, a link, a directory or a FIFO.

Mirrors SGLang ``hicache_storage.py`` ``HiCacheFile`` (one file per page key under a directory,
the key suffixed with the model name) and LMCache's local disk backend. Not handled: several
processes writing one directory at once (each write is atomic, the size cap is per process).

Example:
    >>> import tempfile, torch
    >>> from kvlab.reuse.hicache_storage import page_keys
    >>> s = FileStorage(tempfile.mkdtemp(), page_shape=(2, 4, 1, 8), model_id="demo")
    >>> key = page_keys([1, 2, 3, 4], 4, s.fingerprint)[0]
    >>> k = torch.randn(2, 4, 1, 8); v = torch.randn(2, 4, 1, 8)   # one page
    >>> s.write(key, k, v), s.exists(key), s.batch_exists([key, "0" * 32])
    (True, True, 1)
    >>> k2, v2 = s.read(key); torch.equal(k2, k) and torch.equal(v2, v)
    True
    >>> other = FileStorage(s.root, page_shape=(2, 4, 1, 8), model_id="another model")
    >>> other.exists(key), other.exists(page_keys([1, 2, 3, 4], 4, other.fingerprint)[0])
    (False, False)
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import torch

from ..reuse.hicache_storage import KEY_LEN, is_key, kv_fingerprint, leading

__all__ = ["FileStorage", "model_digest"]

_MAX_HEADER = 1 << 16


def model_digest(model) -> str:
    """A sha256 over a model's parameters and buffers (names, shapes, dtypes, bytes): the model id a
    storage fingerprint should use, so two checkpoints of one shape never share pages.

    Example: ``model_digest(model) == model_digest(model)``; changing one weight changes it.
    """
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        if t.numel():
            h.update(memoryview(t.view(torch.uint8).numpy()))   # the tensor's own bytes, not a copy of them
    return h.hexdigest()


def _digest(meta: dict, k: torch.Tensor, v: torch.Tensor) -> str:
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for t in (k, v):
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _check_shape(page_shape) -> tuple[int, int, int, int]:
    if not isinstance(page_shape, (tuple, list)) or len(page_shape) != 4 or \
            not all(type(x) is int and x >= 1 for x in page_shape):
        raise ValueError(f"page_shape must be 4 ints >= 1 (layers, block_size, kv_heads, head_dim), got {page_shape!r}")
    return tuple(page_shape)


class FileStorage:
    """Pages as safetensors files under ``root``; ``page_shape`` = ``(layers, block_size,
    kv_heads, head_dim)`` of the pool whose pages it stores, ``dtype`` its torch dtype, ``model_id``
    the model's name or (better) :func:`model_digest`. ``max_staged``: most pages kept in memory
    between ``prefetch`` and ``read``; ``max_bytes``: size cap of the page files (None: none)."""

    def __init__(self, root: str | os.PathLike, page_shape: tuple[int, int, int, int],
                 dtype: torch.dtype = torch.float32, *, model_id: str, max_staged: int = 4096,
                 max_bytes: int | None = None) -> None:
        self.page_shape = _check_shape(page_shape)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype (e.g. torch.float32), got {dtype!r}")
        if type(max_staged) is not int or max_staged < 1:
            raise ValueError(f"max_staged must be an int >= 1, got {max_staged!r}")
        if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 1):
            raise ValueError(f"max_bytes must be an int >= 1 or None, got {max_bytes!r}")
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"storage root {str(root)!r} exists and is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.dtype, self.model_id = root, dtype, model_id
        L, bs, nkv, hs = self.page_shape
        self.fingerprint = kv_fingerprint(model_id, str(dtype), bs, L, nkv, hs)
        self.max_staged, self.max_bytes = max_staged, max_bytes
        self.page_bytes = 2 * L * bs * nkv * hs * torch.empty(0, dtype=dtype).element_size()
        self._staged: OrderedDict[str, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._lru: OrderedDict[str, int] = OrderedDict()   # key -> file size, least recently used first
        self.misses = self.write_errors = self.evicted_files = self.scan_skipped = 0
        self._scan()

    def _scan(self) -> None:
        """The page files already there, oldest first, into the LRU order and the size. A name that
        vanished before its stat (another engine's cap), a link, a directory or a FIFO is skipped and
        counted (``scan_skipped``): a read of it would be a miss anyway. A folder that cannot be
        listed counts once and holds no known page."""
        found = []
        try:
            names = os.listdir(self.root)
        except OSError:     # an unreadable folder: no page is known (every read a miss), never a crash
            names = []
            self.scan_skipped += 1
        for name in names:
            if not name.endswith(".safetensors"):
                continue
            try:
                st = os.lstat(self.root / name)
            except OSError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                self.scan_skipped += 1
                continue
            found.append((st.st_mtime, name[: -len(".safetensors")], st.st_size))
        for _, key, size in sorted(found):
            self._lru[key] = size
        self._bytes = sum(self._lru.values())

    @classmethod
    def for_pool(cls, kv_pool, root: str | os.PathLike, model_id: str, **kw) -> "FileStorage":
        """A FileStorage for the pages of a ``PagedKVPool``."""
        p = kv_pool
        return cls(root, (p.num_layers, p.block_size, p.num_kv_heads, p.head_dim), p.dtype, model_id=model_id, **kw)

    def path(self, key: str) -> Path:
        if not is_key(key):
            raise ValueError(f"a page key is {KEY_LEN} lowercase hex digits, got {key!r}")
        return self.root / f"{key}.safetensors"

    # ------------------------------------------------------------------ HiCacheStorage
    def exists(self, key: str) -> bool:
        """True when the page's file is a regular file of the right size whose header names this
        key, this fingerprint, the page shape and dtype (the bytes are checked by ``prefetch``)."""
        if key in self._staged:
            return True
        try:
            meta = self._header(self._read_regular(self.path(key), header_only=True))
        except Exception:
            return False
        return {x: meta.get(x) for x in self._meta(key)} == self._meta(key)

    def batch_exists(self, keys: Sequence[str]) -> int:
        """How many of ``keys``, from the first, pass every check."""
        return leading(keys, self.exists)

    def prefetch(self, keys: Sequence[str]) -> int:
        """Read and check ``keys`` in order, keep them in memory for ``read``; how many passed (a
        page past ``max_staged`` kept pages is not read: the run ends there)."""
        def stage(key: str) -> bool:
            if key in self._staged:
                return True
            if len(self._staged) >= self.max_staged:
                return False
            kv = self._load(key)
            if kv is not None:
                self._staged[key] = kv
            return kv is not None
        return leading(keys, stage)

    def add(self, key: str) -> None:
        """A save of ``key`` is queued (nothing to record: the file exists once ``write`` succeeds)."""
        self.path(key)

    def remove(self, key: str) -> None:
        """Forget a page and delete its file (after a miss: a bad file is not tried again)."""
        self._staged.pop(key, None)
        self._bytes -= self._lru.pop(key, 0)
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError:
            pass

    # ------------------------------------------------------------------ data
    def _check(self, k: torch.Tensor, v: torch.Tensor) -> None:
        want = self.page_shape
        if not (k.shape == v.shape == want and k.dtype == v.dtype == self.dtype):
            raise ValueError(f"a page's K/V must be {want} in {self.dtype}, "
                             f"got {tuple(k.shape)} / {tuple(v.shape)} in {k.dtype} / {v.dtype}")

    def _meta(self, key: str) -> dict:
        return {"key": key, "fingerprint": self.fingerprint, "page_shape": json.dumps(self.page_shape),
                "dtype": str(self.dtype)}

    def write(self, key: str, k: torch.Tensor, v: torch.Tensor) -> bool:
        """Save one page (K and V, each ``page_shape``). False, counted in ``write_errors``, when the
        file system refuses (nothing is left under the key); raises only for a bad call."""
        from safetensors.torch import save_file

        path = self.path(key)
        self._check(k, v)
        k, v = k.detach().cpu().contiguous(), v.detach().cpu().contiguous()
        meta = self._meta(key)
        meta["sha256"] = _digest(meta, k, v)
        tmp = path.with_name(f".{key}.{os.getpid()}.tmp")
        try:
            save_file({"k": k, "v": v}, str(tmp), metadata=meta)
            os.replace(tmp, path)
            size = path.stat().st_size
        except Exception:  # read-only, removed, full, replaced by a file: a failed write is a miss later
            self.write_errors += 1
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return False
        self._bytes += size - self._lru.pop(key, 0)
        self._lru[key] = size
        self._enforce_cap(keep=key)
        return True

    def _enforce_cap(self, keep: str | None = None) -> None:
        """Delete least recently used page files until the cap holds, never ``keep`` (the page just
        written) nor a staged page (a fetch is queued for it): until ``forget_staged`` the files
        may exceed the cap by the staged pages."""
        if self.max_bytes is None:
            return
        for old in [k for k in self._lru if k != keep and k not in self._staged]:
            if self._bytes <= self.max_bytes:
                break
            self.remove(old)
            self.evicted_files += 1

    def _read_regular(self, path: Path, header_only: bool = False) -> bytes:
        """The bytes of a regular file (or its safetensors header), opened without following a
        link or blocking on a FIFO."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not self.page_bytes < st.st_size <= self.page_bytes + _MAX_HEADER:
                raise ValueError("not a regular page file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                if not header_only:
                    return f.read()
                head = f.read(8)
                return head + f.read(min(int.from_bytes(head, "little"), _MAX_HEADER))
        finally:
            os.close(fd)

    @staticmethod
    def _header(data: bytes) -> dict:
        n = int.from_bytes(data[:8], "little")
        if n > _MAX_HEADER:
            raise ValueError("header too long")
        return json.loads(data[8:8 + n]).get("__metadata__") or {}

    def _load(self, key: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Read the file into memory (one read, so a later change on disk cannot reach it) and check
        it. None (a miss) for any problem."""
        from safetensors.torch import load

        path = self.path(key)
        try:
            data = self._read_regular(path)
            meta = self._header(data)
            tensors = load(data)
            k, v = tensors["k"], tensors["v"]
            self._check(k, v)
            want = self._meta(key)
            if {x: meta.get(x) for x in want} != want or meta.get("sha256") != _digest(want, k, v):
                raise ValueError("key, fingerprint or checksum does not match")
        except FileNotFoundError:
            self._bytes -= self._lru.pop(key, 0)
            return None
        except Exception:  # truncated, garbage, foreign, copied, not a file: a miss, never a crash
            self.misses += 1
            return None
        if key in self._lru:
            self._lru.move_to_end(key)
        return k, v

    def read(self, key: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """K and V of one page, each ``page_shape`` (the copy kept by ``prefetch``, else read and
        checked now); None when the page is missing or bad."""
        kv = self._staged.pop(key, None)
        return kv if kv is not None else self._load(key)

    def forget_staged(self) -> None:
        """Drop the pages kept since ``prefetch`` (the next check reads the files again); the cap,
        which spared them, holds again."""
        self._staged.clear()
        self._enforce_cap()

    def keys(self) -> list[str]:
        """The keys with a file on disk (checked or not)."""
        return sorted(p.stem for p in self.root.glob("*.safetensors"))

    def size_bytes(self) -> int:
        """Bytes of the page files this storage knows of."""
        return self._bytes
