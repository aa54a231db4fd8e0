"""kvlab's command line: ``python -m kvlab <command>``.

    python -m kvlab translate --block-size 4 --table 3,7,1,5,9 --pos 9
    python -m kvlab size --model llama-2-70b --tokens 4096

Bad arguments print one line starting with ``kvlab: error:`` and exit with code 2.
``COMMANDS`` lists every command (name -> (help, add_arguments, run)); a command of a higher
layer (``simulate``) imports its module only when it runs, so this file imports no layer above
``kvlab.memory`` at start and nothing imports this file.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from .memory.block_table import translate
from .memory.kvspec import DTYPE_BYTES, MODELS, format_bytes, get_model


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"kvlab: error: {message} (see: python -m kvlab {self.prog.split()[-1] if ' ' in self.prog else ''} --help)".replace("  ", " "), file=sys.stderr)
        sys.exit(2)


class UsageError(Exception):
    """Bad input found after parsing; printed as one line, exit 2."""


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints like 3,7,1,5,9, got {text!r}") from None


def _add_translate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block-size", type=int, default=4, help="tokens per block (default 4)")
    p.add_argument("--table", type=_ints, default=[3, 7, 1, 5, 9], help="block table, e.g. 3,7,1,5,9")
    p.add_argument("--pos", type=int, required=True, help="token position")
    p.add_argument("--bytes-per-token", type=int, default=None,
                   help="K+V bytes per token (default: from --model, else 1)")
    p.add_argument("--model", default=None, help=f"take bytes per token from a preset: {', '.join(MODELS)}")


def _run_translate(a: argparse.Namespace) -> None:
    if a.model is not None and a.bytes_per_token is not None:
        raise UsageError("--model and --bytes-per-token both set the bytes per token; give one of them")
    bpt = a.bytes_per_token
    if a.model is not None:
        bpt = get_model(a.model).bytes_per_token  # ValueError naming the model for '' or an unknown name
    elif bpt is None:
        bpt = 1
    try:
        t = translate(a.table, a.pos, a.block_size, bpt)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    print(f"block table: {', '.join(f'L{i}->P{b}' for i, b in enumerate(a.table))}   block_size {a.block_size}, "
          f"bytes_per_token {bpt:,}")
    for line in t.steps(a.block_size, bpt):
        print("  " + line)
    print(f"pos {t.pos} -> L{t.logical_block}, offset {t.offset} -> P{t.physical_block} -> slot {t.slot} -> byte {t.byte_address:,}")


def _add_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--tokens", type=int, required=True, help="number of tokens")
    p.add_argument("--dtype", default="fp16", choices=sorted(DTYPE_BYTES), help="KV dtype (default fp16)")


def _run_size(a: argparse.Namespace) -> None:
    if a.tokens < 0:
        raise UsageError(f"--tokens must be >= 0, got {a.tokens}")
    spec = get_model(a.model).with_dtype(a.dtype)
    print(f"{spec.name}: {spec.layers} layers, {spec.num_heads} query heads, {spec.kv_heads} KV heads, head_dim {spec.head_dim}, {a.dtype}")
    print(f"  bytes per token = 2 x {spec.layers} x {spec.kv_heads} x {spec.head_dim} x {spec.dtype_bytes} = {spec.bytes_per_token:,}")
    print(f"  KV for {a.tokens:,} tokens = {spec.formula(a.tokens)}")
    if spec.num_heads and spec.num_heads != spec.kv_heads:
        h = spec.hidden_formula_bytes(a.tokens)
        print(f"  with hidden_size {spec.hidden_size} in place of kv_heads x head_dim (right only for multi-head attention): "
              f"{h:,} bytes ({format_bytes(h)}), {spec.gqa_ratio}x too much")


def _add_simulate(p: argparse.ArgumentParser) -> None:
    from .sim import cli

    cli.add_arguments(p)


def _run_simulate(a: argparse.Namespace) -> None:
    from .sim import cli

    cli.run(a)


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], None]]] = {
    "translate": ("walk a token position through a block table", _add_translate, _run_translate),
    "size": ("KV cache size of a model preset", _add_size, _run_size),
    "simulate": ("simulate serving a workload under memory policies (simulated)", _add_simulate, _run_simulate),
}


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="kvlab", description="kvlab: KV-cache management, run for real.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name, (help_, add, _run) in COMMANDS.items():
        add(sub.add_parser(name, help=help_, description=help_))
    a = parser.parse_args(argv)
    if a.command is None:
        print(f"kvlab: error: choose a command: {', '.join(COMMANDS)} (see: python -m kvlab --help)", file=sys.stderr)
        return 2
    try:
        COMMANDS[a.command][2](a)
    except (UsageError, ValueError) as e:
        print(f"kvlab {a.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
