"""What a checkpoint must pass before anything is read into memory or built (the loader's guards).

A config.json can ask for any size: ``vocab_size`` 10**9, a million layers, ``hidden_size``
2**20, 2**40 heads. Building the model first would try to allocate all of it (up to hundreds of
TB: a RuntimeError from torch, or the process is killed) before any shape is compared. So
:func:`kvlab.compute.loader.load_pretrained` checks, in this order, each failure one
:class:`~kvlab.compute.config.CheckpointError` naming the file and the field:

1. the JSON itself (:func:`parse_json`): at most :data:`MAX_JSON_BYTES`, not nested deeper than
   Python's reader goes (a RecursionError otherwise), no int longer than :data:`MAX_JSON_DIGITS`
   digits (a 5,000-digit int is a ValueError inside ``json``; a 4,000-digit one would reach the
   config): the message names the key and the line;
2. every size of the config at most :data:`MAX_DIM` (:func:`check_config_sizes`);
3. the tensors the config needs against the safetensors headers (names and shapes, read without
   reading any tensor): first their number, when it is far more than the files hold (a million
   layers need nine million tensors: that list is never built), then each name and shape
   (:func:`check_tensor_shapes`). A header's shapes
   are backed by the bytes of its file (safetensors checks the offsets), so once every shape
   matches, building the model allocates no more than the files hold.

``build_model`` runs step 3 again on the tensors it is given (the GGUF path), so no path builds a
model whose shapes were not compared first.

Example:
    >>> from kvlab.compute.config import LlamaConfig
    >>> cfg = LlamaConfig(vocab_size=10**9)
    >>> check_tensor_shapes(cfg, {"model.embed_tokens.weight": (4096, 128), "model.norm.weight": (128,)})
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: num_hidden_layers=4 needs 38 tensors (2 + 9 per layer), the checkpoint holds 2
    >>> parse_json('{"vocab_size": 1' + "0" * 40 + '}', "config.json")
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: config.json: vocab_size is a 41-digit int (at most 20 digits are read)
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from .config import CheckpointError, LlamaConfig

__all__ = ["MAX_DIM", "MAX_JSON_BYTES", "MAX_JSON_DIGITS", "parse_json", "check_config_sizes", "expected_shapes",
           "check_tensor_shapes"]

MAX_DIM = 2**31 - 1            # any one size of a config (vocab, widths, heads, layers, positions)
MAX_JSON_BYTES = 64 * 2**20    # config.json and model.safetensors.index.json (real ones: a few KB to 100s of KB)
MAX_JSON_DIGITS = 20           # an int in those files (2**64 has 20 digits)
SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "max_position_embeddings")


class _LongInt:
    """An int too long to convert, kept as its digit count until the key holding it is found."""

    def __init__(self, digits: str) -> None:
        self.ndigits = len(digits.lstrip("-"))


def _parse_int(digits: str) -> int | _LongInt:
    return _LongInt(digits) if len(digits.lstrip("-")) > MAX_JSON_DIGITS else int(digits)


def _find_long_int(data: Any) -> tuple[str, int] | None:
    """(key path like ``rope_scaling.factor`` or ``layers[2]``, digits) of the first long int (no recursion)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, _LongInt):
            return where or "<top level>", v.ndigits
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x) for k, x in reversed(v.items())]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v)))]
    return None


def _deepest(text: str) -> tuple[int, int, int]:
    """(depth, line, column) of the most deeply nested bracket of ``text`` (strings skipped)."""
    depth = best = 0
    at, in_str, esc = 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > best:
                best, at = depth, i
        elif ch in "]}":
            depth -= 1
    line = text.count("\n", 0, at) + 1
    return best, line, at - (text.rfind("\n", 0, at) + 1) + 1


def parse_json(text: str, path: str | os.PathLike) -> Any:
    """``json.loads(text)`` for the loader: CheckpointError naming ``path`` (and the field) for
    invalid JSON, JSON nested deeper than Python's reader goes, or an int longer than
    :data:`MAX_JSON_DIGITS` digits (the message names the key holding it)."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})", file=path,
                              field=f"line {e.lineno} column {e.colno}") from None
    except RecursionError:
        depth, line, col = _deepest(text)
        raise CheckpointError(f"is nested {depth:,} levels deep (at line {line} column {col}); a config is a few "
                              "levels deep", file=path, field=f"line {line} column {col}") from None
    long = _find_long_int(data)
    if long is not None:
        raise CheckpointError(f"{long[0]} is a {long[1]:,}-digit int (at most {MAX_JSON_DIGITS} digits are read)",
                              file=path, field=long[0])
    return data


def check_config_sizes(cfg: LlamaConfig) -> None:
    """Every size of ``cfg`` at most :data:`MAX_DIM`: CheckpointError naming the field otherwise.

    Example: ``LlamaConfig(num_attention_heads=2**40, num_key_value_heads=1, head_dim=64)`` is refused
    here, by name, before a q_proj of 2**46 rows is thought of."""
    for name in SIZE_FIELDS:
        v = getattr(cfg, name)
        if v > MAX_DIM:
            shown = f"{v:,}" if v.bit_length() < 64 else f"a {int(v.bit_length() * 0.30103) + 1:,}-digit int"
            raise CheckpointError(f"{name}={shown} is larger than {MAX_DIM:,}; no checkpoint holds that", field=name)


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name a checkpoint for ``cfg`` must hold, with its shape (HF names)."""
    C, I, hs, nh, nkv = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, C), "model.norm.weight": (C,)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (C,),
            p + "post_attention_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (nh * hs, C),
            p + "self_attn.k_proj.weight": (nkv * hs, C),
            p + "self_attn.v_proj.weight": (nkv * hs, C),
            p + "self_attn.o_proj.weight": (C, nh * hs),
            p + "mlp.gate_proj.weight": (I, C),
            p + "mlp.up_proj.weight": (I, C),
            p + "mlp.down_proj.weight": (C, I),
        })
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, C)
    return out


def _per_layer(cfg: LlamaConfig) -> tuple[int, int]:
    """(tensors outside the layers, tensors per layer) a model for ``cfg`` needs."""
    from dataclasses import replace


    one = len(expected_shapes(replace(cfg, num_hidden_layers=1)))
    two = len(expected_shapes(replace(cfg, num_hidden_layers=2)))
    return one - (two - one), two - one


def check_tensor_shapes(cfg: LlamaConfig, shapes: Mapping[str, Sequence[int]]) -> None:
    """The tensors a model for ``cfg`` needs against ``shapes`` (name -> shape: safetensors
    headers, or tensors in memory), before anything is allocated.

    CheckpointError with ``field`` = ``num_hidden_layers`` when the checkpoint cannot hold that many
    layers, else naming every missing, unexpected or mis-shaped tensor (``field``: the first; at most
    five of each are listed). ``rotary_emb.inv_freq`` tensors are ignored; with tied embeddings a
    ``lm_head.weight`` is allowed (``load_state`` checks it equals the embedding)."""

    check_config_sizes(cfg)
    held = {k: tuple(v) for k, v in shapes.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings:
        held.pop("lm_head.weight", None)
    base, per = _per_layer(cfg)
    need = base + per * cfg.num_hidden_layers
    if need > 2 * len(held) + 16:  # far more than the file holds: say so, never list (or build) them all
        raise CheckpointError(f"num_hidden_layers={cfg.num_hidden_layers:,} needs {need:,} tensors ({base} + {per} "
                              f"per layer), the checkpoint holds {len(held):,}", field="num_hidden_layers")
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(held))
    unexpected = sorted(set(held) - set(want))
    mismatched = sorted(k for k in set(want) & set(held) if held[k] != want[k])

    def some(xs: list[str]) -> str:
        return str(xs[:5])[:-1] + (f", ... {len(xs) - 5} more]" if len(xs) > 5 else "]")

    problems = []
    if mismatched:
        problems.append("mismatched shapes " + some([f"{k}: checkpoint {held[k]} vs config {want[k]}"
                                                     for k in mismatched]))
    if missing:
        problems.append(f"missing tensors {some(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {some(unexpected)}")
    if problems:
        raise CheckpointError("; ".join(problems), field=(mismatched or missing or unexpected)[0])
