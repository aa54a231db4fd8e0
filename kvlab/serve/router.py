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
from typing import Any
from dataclasses import dataclass

__all__ = ["Router", "RouterError", "free_port", "router_view", "conversations", "router_options", "ROUTING_FLAGS_032",
           "LAUNCH_FLAG_WHY", "launch_command", "explain_command"]

# The routing flags of sglang-router 0.3.2 (``sglang_router/router_args.py``, add_cli_args; the
# same names and defaults in sgl-model-gateway's router_args.py at sglang commit 05e589ad):
# flag -> (type, choices or None, default). Used when the package is not installed; a test
# compares it with the installed parser.
ROUTING_FLAGS_032 = {
    "--policy": (str, ("random", "round_robin", "cache_aware", "power_of_two", "manual"), "cache_aware"),
    "--cache-threshold": (float, None, 0.3),
    "--balance-abs-threshold": (int, None, 64),
    "--balance-rel-threshold": (float, None, 1.5),
    "--eviction-interval-secs": (int, None, 60),
    "--max-tree-size": (int, None, 2 ** 26),
}


def _die_with_parent() -> None:
    """In the router's child process (Linux): SIGTERM it when the process that started it dies
    (a notebook kernel killed or restarted leaves no orphan router)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG


def conversations(requests: list[dict]) -> dict[str, list[dict]]:
    """Group finished requests (in time order) into conversations: a request continues the
    conversation whose last prompt is the longest prefix of its own prompt (a chat's next turn
    repeats the history), else it starts one. Named by the client's ``user`` when it sent one
    (sglang-router drops it), else ``chat 1``, ``chat 2``... in order of their first turn.

    >>> rows = [{"ids": [1, 2], "name": ""}, {"ids": [1, 3], "name": ""}, {"ids": [1, 2, 9, 4], "name": ""}]
    >>> {k: [r["ids"] for r in v] for k, v in conversations(rows).items()}
    {'chat 1': [[1, 2], [1, 2, 9, 4]], 'chat 2': [[1, 3]]}
    """
    convs: dict[str, list[dict]] = {}
    for r in requests:
        best, best_len = None, -1
        for name, turns in convs.items():
            last = turns[-1]["ids"]
            if len(last) > best_len and len(last) < len(r["ids"]) and r["ids"][:len(last)] == last:
                best, best_len = name, len(last)
        if best is None:
            best = r["name"] or f"chat {len(convs) + 1}"
            while best in convs:
                best += "'"
        convs.setdefault(best, []).append(r)
    return convs


def router_view(worker_urls: list[str], api_key: str | None = None) -> dict:
    """Which worker served each conversation, turn by turn, and each worker's hit rate, measured:
    read from every worker's ``GET /dashboard/served`` (its last finished requests).

    Returns ``{"workers": [{"url", "requests", "prompt_tokens", "cached_tokens", "hit_rate"}],
    "conversations": {name: [worker index of turn 1, turn 2, ...]}}`` (see :func:`conversations`).
    Example (not run: it needs servers): ``router_view([a.url, b.url])["conversations"]``
    -> ``{"chat 1": [0, 0, 0], "chat 2": [1, 1]}``.
    """
    import json

    workers, rows = [], []
    for w, url in enumerate(worker_urls):
        q = f"?key={api_key}" if api_key else ""
        with urllib.request.urlopen(url + "/dashboard/served" + q, timeout=10) as r:
            served = json.loads(r.read())["requests"]
        prompt, cached = sum(r["prompt"] for r in served), sum(r["cached"] for r in served)
        workers.append({"url": url, "requests": len(served), "prompt_tokens": prompt, "cached_tokens": cached,
                        "hit_rate": cached / prompt if prompt else 0.0})
        rows += [{**r, "worker": w} for r in served]
    rows.sort(key=lambda r: r["time"])
    convs = conversations(rows)
    return {"workers": workers, "conversations": {k: [r["worker"] for r in v] for k, v in convs.items()}}


def router_options() -> dict[str, tuple]:
    """Every command-line flag of ``python -m sglang_router.launch_router`` -> ``(type, choices,
    default)``, read from the installed sglang-router's own argument parser (the flags it really
    accepts); without the package, :data:`ROUTING_FLAGS_032` (its routing flags).

    Example: ``router_options()["--cache-threshold"]`` -> ``(float, None, 0.3)``.
    """
    try:
        from sglang_router.router_args import RouterArgs
    except ImportError:
        return dict(ROUTING_FLAGS_032)
    actions: list[Any] = []
    RouterArgs.add_cli_args(_recording_parser(actions))
    return {flag: (a.type, tuple(a.choices) if a.choices else None, a.default)
            for a in actions for flag in a.option_strings}


def _recording_parser(actions: list[Any]) -> Any:
    """An ``argparse.ArgumentParser`` that appends to ``actions`` every Action its ``add_argument``
    returns, its argument groups' (and their exclusive groups') too: the parser's flags through
    argparse's public calls, not its private ``_actions`` list.

    Example:
        >>> got = []
        >>> p = _recording_parser(got)
        >>> _ = p.add_argument_group("g").add_argument("--policy", choices=["a", "b"], default="a")
        >>> [(a.option_strings, a.default) for a in got]
        [(['-h', '--help'], '==SUPPRESS=='), (['--policy'], 'a')]
    """
    import argparse

    def recorded(container: Any) -> Any:
        add, group, exclusive = (container.add_argument, container.add_argument_group,
                                 container.add_mutually_exclusive_group)

        def add_argument(*args: Any, **kw: Any) -> Any:
            action = add(*args, **kw)
            actions.append(action)
            return action
        container.add_argument = add_argument
        container.add_argument_group = lambda *a, **kw: recorded(group(*a, **kw))
        container.add_mutually_exclusive_group = lambda *a, **kw: recorded(exclusive(*a, **kw))
        return container

    parser = argparse.ArgumentParser(add_help=False)
    recorded(parser).add_argument("-h", "--help", action="help", default=argparse.SUPPRESS,
                                  help="show this help message and exit")
    return parser


# why Router.launch passes each flag (the lesson prints the command with these, not the --help)
LAUNCH_FLAG_WHY = {
    "--worker-urls": "the kvlab servers the router sends requests to",
    "--policy": "how it picks one: cache_aware or round_robin, the two section 5 compares",
    "--host": "listen on this machine only (the default, 0.0.0.0, is every network), as the kvlab servers do",
    "--port": "a port free now, picked by the OS",
    "--prometheus-host": "the router's own metrics on this machine only too (default 0.0.0.0)",
    "--prometheus-port": "and on a free port (its default, 29000, may be taken)",
    "--log-level": "quiet (default info): the router prints only warnings and errors into the notebook",
}


def launch_command(worker_urls: list[str], policy: str, port: int, prometheus_port: int) -> list[str]:
    """The command :meth:`Router.launch` runs: each flag in :data:`LAUNCH_FLAG_WHY`, everything on
    127.0.0.1, the thresholds left at the router's defaults.

    Example: ``launch_command(["http://127.0.0.1:8001"], "round_robin", 30000, 29000)[3:6]``
    -> ``['--worker-urls', 'http://127.0.0.1:8001', '--policy']``."""
    return [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *worker_urls,
            "--policy", policy, "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port), "--log-level", "warn"]


def explain_command(cmd: list[str]) -> list[str]:
    """The flags of a router command line, one line each: the flag, its value(s), why it is given
    (:data:`LAUNCH_FLAG_WHY`; a flag not in it is named as such).

    Example: ``explain_command(["python", "-m", "sglang_router.launch_router", "--policy", "round_robin"])``
    -> ``['--policy round_robin: how it picks one: cache_aware or round_robin, the two section 5 compares']``."""
    lines: list[str] = []
    flag, values = None, []
    for arg in cmd[cmd.index("sglang_router.launch_router") + 1:] + ["--"]:
        if arg.startswith("--"):
            if flag is not None:
                lines.append(f"{flag} {' '.join(values)}: {LAUNCH_FLAG_WHY.get(flag, 'not one the lesson uses')}")
            flag, values = arg, []
        else:
            values.append(arg)
    return lines


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
        cmd = launch_command(worker_urls, policy, port, free_port())
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
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
