"""Run the app with uvicorn: in this thread (``python -m kvlab serve``) or in a background thread
on a free port (tests, the benchmark, a notebook).

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> srv = serve_in_thread(EngineLoop(model, tok, num_blocks=32, block_size=4))
    >>> srv.url.startswith("http://127.0.0.1:")
    True
    >>> srv.stop()
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .app import build_app
from .loop import EngineLoop

__all__ = ["ServerThread", "serve_in_thread", "serve_forever"]


@dataclass
class ServerThread:
    """A running server: ``url`` (``http://host:port``), its ``loop``; ``stop()`` ends both."""

    url: str
    loop: EngineLoop
    server: object
    thread: threading.Thread

    def stop(self) -> None:
        self.loop.dashboard.closing = True          # open /dashboard/events streams end first
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.loop.stop()


def _uvicorn_server(loop: EngineLoop, host: str, port: int, api_key: str | None, model_path: str,
                    stop_token_ids: tuple[int, ...] | None = None, log_level: str = "warning"):
    import uvicorn

    app = build_app(loop, api_key=api_key, model_path=model_path, stop_token_ids=stop_token_ids)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=2)
    return uvicorn.Server(config)


def serve_in_thread(loop: EngineLoop, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None,
                    model_path: str = "", timeout: float = 30.0,
                    stop_token_ids: tuple[int, ...] | None = None) -> ServerThread:
    """Start ``loop`` and a uvicorn server for it in a daemon thread (``port=0``: a free port);
    returns once it accepts connections. ``stop_token_ids``: as :func:`build_app`'s. Logs errors
    only (sglang-router's start-up probes make uvicorn warn "Invalid HTTP request received")."""
    loop.start()
    server = _uvicorn_server(loop, host, port, api_key, model_path, stop_token_ids, log_level="error")
    thread = threading.Thread(target=server.run, name="kvlab-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            loop.stop()
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return ServerThread(f"http://{host}:{bound}", loop, server, thread)


def serve_forever(loop: EngineLoop, host: str, port: int, api_key: str | None, model_path: str) -> None:
    """Serve until interrupted (Ctrl-C), in this thread."""
    loop.start()
    try:
        _uvicorn_server(loop, host, port, api_key, model_path).run()
    finally:
        loop.stop()
