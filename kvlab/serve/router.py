"""SGLang's router (``sglang-router``, a Rust binary in a wheel) in front of kvlab servers.

At start-up the router calls each worker's ``GET /health``, ``/server_info`` and
``/model_info``, then proxies ``POST /v1/chat/completions`` and ``/v1/completions``. With
``--policy cache_aware`` it keeps an approximate radix tree of what it sent each worker and
sends a request to the worker holding its longest prefix (unless the load is unbalanced);
``round_robin`` ignores prefixes. Same command as SGLang's documentation::

    python -m sglang_router.launch_router --worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002 \\
        --policy cache_aware --host 127.0.0.1 --port 30000

Example (not run: it needs servers):
    router = Router.launch(["http://127.0.0.1:8001", "http://127.0.0.1:8002"], policy="cache_aware")
    ...  # openai.OpenAI(base_url=router.url + "/v1", api_key="none")
    router.stop()
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

__all__ = ["Router", "RouterError", "free_port"]


class RouterError(RuntimeError):
    """The router did not start (the message holds the end of its output)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Router:
    url: str
    proc: subprocess.Popen
    policy: str

    @classmethod
    def launch(cls, worker_urls: list[str], policy: str = "cache_aware", timeout: float = 60.0) -> "Router":
        """Start the router on a free port and wait until its ``/health`` answers 200 (RouterError
        when it exits or does not answer within ``timeout`` seconds)."""
        port = free_port()
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *worker_urls,
               "--policy", policy, "--host", "127.0.0.1", "--port", str(port),
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--log-level", "warn"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RouterError(f"sglang-router exited with {proc.returncode}: {proc.stdout.read()[-1500:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return cls(url, proc, policy)
            except OSError:
                time.sleep(0.2)
        proc.kill()
        raise RouterError(f"sglang-router did not answer on {url} within {timeout:.0f} s: "
                          f"{proc.communicate(timeout=10)[0][-1500:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
