"""The model's hyper-parameters, with Hugging Face's LlamaConfig key names, and the loader's error.

:class:`LlamaConfig` is what :class:`kvlab.compute.model.Llama` is built from and what a
checkpoint's ``config.json`` holds (``from_dict`` / ``to_dict`` round-trip it). Every value is
checked when a config is built: types, ranges (counts >= 1, ``rms_norm_eps`` > 0, token ids inside
the vocabulary...) and anything kvlab cannot honour (another activation, biases, sliding windows,
quantization, rope types other than default / linear / llama3).

The rotary settings come in two layouts, and ``from_dict`` reads both; ``rope_source`` says which:

- transformers >= 5 writes ``"rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0, ...}``;
- older files have top-level ``"rope_theta"`` and ``"rope_scaling": {"rope_type" (or "type"): ..., ...}``.

Both present and disagreeing is an error. ``to_dict`` writes the older layout, which
transformers 4 and 5 both read.

:class:`CheckpointError` is the loader's one error type: ``file`` is the file at fault (set by
``from_dict(d, file=...)`` and by ``kvlab.compute.loader``), ``field`` the config key, tensor name
or JSON location, and the message names the bad value.

Mirrors Hugging Face ``transformers/models/llama/configuration_llama.py`` (same keys) and
``modeling_rope_utils.py`` (the two rope layouts); nano-vllm reads the same file through
``transformers.AutoConfig`` (``nanovllm/config.py``).

Keys a config leaves out take transformers' ``LlamaConfig`` defaults (:data:`HF_LLAMA_DEFAULTS`:
``rms_norm_eps`` 1e-6, ``num_key_value_heads`` = ``num_attention_heads``, ``tie_word_embeddings``
false...), so a config.json means what it means to transformers; the dataclass's own defaults
describe the bundled tiny model and apply only when LlamaConfig is built directly.

Not handled here: any architecture but Llama's (model_type llama, or mistral without a sliding
window), bias terms, activations other than SiLU, several eos ids (the first one is kept).

Example:
    >>> cfg = LlamaConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
    >>> cfg.head_dim, cfg.num_params > 0
    (32, True)
    >>> LlamaConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> new = LlamaConfig.from_dict({"rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}})
    >>> new.rope_theta, new.rope_scaling, new.rope_source
    (500000.0, None, 'rope_parameters')
    >>> LlamaConfig(hidden_act="gelu")
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: hidden_act='gelu' is not supported (only 'silu')
    >>> LlamaConfig.from_dict({"num_key_value_heads": 0}, file="ckpt/config.json")
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: ckpt/config.json: num_key_value_heads=0 must be an int >= 1
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["CheckpointError", "HF_LLAMA_DEFAULTS", "LlamaConfig"]

# transformers' LlamaConfig() defaults for the keys a checkpoint may leave out (checked against
# transformers 5.24; num_key_value_heads defaults to num_attention_heads, head_dim to
# hidden_size // num_attention_heads). kvlab's own dataclass defaults describe the tiny model.
HF_LLAMA_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
}

# rope_type -> the keys it needs (transformers' names); anything else raises CheckpointError
ROPE_TYPES = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
_DTYPES = ("float32", "float16", "bfloat16", "float64")


class CheckpointError(ValueError):
    """A checkpoint or config that cannot be loaded; every loader failure is this one type.

    file: the file at fault (None when the values did not come from a file); field: the config
    key (``"rope_scaling.factor"``), tensor name or JSON location, or None for a whole file.
    ``str(e)`` is ``"<file>: <message>"``; the message names the bad value.
    """

    def __init__(self, message: str, *, file: str | os.PathLike | None = None, field: str | None = None) -> None:
        self.message, self.file, self.field = message, None if file is None else str(file), field
        super().__init__(f"{self.file}: {message}" if self.file else message)

    def __reduce__(self):
        return functools.partial(CheckpointError, file=self.file, field=self.field), (self.message,)

    def with_file(self, file: str | os.PathLike | None) -> "CheckpointError":
        """This error with ``file`` filled in (unchanged when it already names one)."""
        if self.file is not None or file is None:
            return self
        return CheckpointError(self.message, file=file, field=self.field)


def _bad(name: str, value: Any, want: str) -> CheckpointError:
    got = "" if isinstance(value, (int, float)) and not isinstance(value, bool) else f" (got {type(value).__name__})"
    return CheckpointError(f"{name}={value!r} must be {want}{got}", field=name)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(name, value, f"an int >= {minimum}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _bad(name, value, "a finite number > 0")


def _check_token_id(name: str, value: Any, vocab_size: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size):
        raise _bad(name, value, f"null or an int in [0, vocab_size={vocab_size})")


def _normalize_rope_scaling(rs: Any) -> dict | None:
    """None, or {"rope_type": one of ROPE_TYPES but "default", its keys checked, ...}."""
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise _bad("rope_scaling", rs, "null or an object such as {\"rope_type\": \"linear\", \"factor\": 2.0}")
    kind = rs.get("rope_type", rs.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise CheckpointError(f"rope_scaling.rope_type={kind!r} is not supported ({', '.join(ROPE_TYPES)})",
                              field="rope_scaling.rope_type")
    if rs.get("partial_rotary_factor", 1.0) != 1.0:
        raise CheckpointError(f"rope_scaling.partial_rotary_factor={rs['partial_rotary_factor']!r} is not "
                              "supported (every dimension rotates)", field="rope_scaling.partial_rotary_factor")
    if kind == "default":
        return None
    for key in ROPE_TYPES[kind]:
        if key not in rs:
            raise CheckpointError(f"rope_scaling.{key} is missing (rope_type {kind!r} needs "
                                  f"{', '.join(ROPE_TYPES[kind])})", field=f"rope_scaling.{key}")
        if key == "original_max_position_embeddings":
            _check_int(f"rope_scaling.{key}", rs[key], 1)
        else:
            _check_positive(f"rope_scaling.{key}", rs[key])
    if kind == "llama3" and rs["high_freq_factor"] <= rs["low_freq_factor"]:
        raise CheckpointError(f"rope_scaling.high_freq_factor={rs['high_freq_factor']!r} must be > "
                              f"low_freq_factor={rs['low_freq_factor']!r}", field="rope_scaling.high_freq_factor")
    return {"rope_type": kind, **{k: v for k, v in rs.items() if k not in ("type", "rope_type")}}


@dataclass
class LlamaConfig:
    """Hyper-parameters, with Hugging Face's LlamaConfig key names (config.json round-trips).

    rope_scaling: None or {"rope_type": "linear" | "llama3", ...} (normalized from either layout).
    rope_source: where the rotary settings came from: "rope_parameters" (transformers >= 5),
    "rope_theta" (top-level keys) or "default" (neither: theta 10000, no scaling). Not compared,
    not written by ``to_dict``.

    Example: LlamaConfig(hidden_size=128, num_attention_heads=4).head_dim -> 32 when not given.
    """

    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 352
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    hidden_act: str = "silu"
    attention_bias: bool = False
    torch_dtype: str | None = "float32"
    rope_source: str = field(default="rope_theta", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings"):
            _check_int(name, getattr(self, name), 1)
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise CheckpointError(f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads="
                                      f"{self.num_attention_heads} (and head_dim is not given)", field="hidden_size")
            self.head_dim = self.hidden_size // self.num_attention_heads
        _check_int("head_dim", self.head_dim, 2)
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim={self.head_dim} must be even for rotary embeddings", field="head_dim")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}", field="num_key_value_heads")
        _check_positive("rms_norm_eps", self.rms_norm_eps)
        _check_positive("rope_theta", self.rope_theta)
        self.rope_scaling = _normalize_rope_scaling(self.rope_scaling)
        for name in ("tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise _bad(name, getattr(self, name), "true or false")
        _check_token_id("bos_token_id", self.bos_token_id, self.vocab_size)
        _check_token_id("eos_token_id", self.eos_token_id, self.vocab_size)
        if self.hidden_act != "silu":
            raise CheckpointError(f"hidden_act={self.hidden_act!r} is not supported (only 'silu')", field="hidden_act")
        if self.attention_bias:
            raise CheckpointError("attention_bias=True is not supported", field="attention_bias")
        if self.torch_dtype is not None and self.torch_dtype not in _DTYPES:
            raise CheckpointError(f"torch_dtype={self.torch_dtype!r} is not supported ({', '.join(_DTYPES)})",
                                  field="torch_dtype")

    @classmethod
    def from_dict(cls, d: dict, file: str | os.PathLike | None = None) -> "LlamaConfig":
        """From a config.json dict (either rope layout): known keys are taken, the rest ignored,
        anything kvlab cannot honour refused. Errors are CheckpointError naming ``file`` and the field."""
        try:
            return cls._from_dict(d)
        except CheckpointError as e:
            raise e.with_file(file) from None

    @classmethod
    def _from_dict(cls, d: dict) -> "LlamaConfig":
        if not isinstance(d, dict):
            raise CheckpointError(f"the config must be a JSON object, got {type(d).__name__}", field="<top level>")
        mt = d.get("model_type", "llama")
        if mt not in ("llama", "mistral"):
            raise CheckpointError(f"model_type={mt!r} is not a Llama-architecture model (llama, mistral)",
                                  field="model_type")
        sw = d.get("sliding_window")
        if sw is not None:
            _check_int("sliding_window", sw, 1)
            mpe = d.get("max_position_embeddings", 2048)
            if isinstance(mpe, int) and sw < mpe:
                raise CheckpointError(f"sliding_window={sw} is not supported (attention here sees the whole "
                                      "context; it must be null or >= max_position_embeddings)", field="sliding_window")
        if d.get("mlp_bias"):
            raise CheckpointError(f"mlp_bias={d['mlp_bias']!r} is not supported", field="mlp_bias")
        if d.get("quantization_config") is not None:
            raise CheckpointError(f"quantization_config={d['quantization_config']!r}: quantized checkpoints are not "
                                  "supported", field="quantization_config")
        if d.get("partial_rotary_factor", 1.0) != 1.0:
            raise CheckpointError(f"partial_rotary_factor={d['partial_rotary_factor']!r} is not supported",
                                  field="partial_rotary_factor")
        names = {f.name for f in fields(cls)} - {"rope_source", "rope_theta", "rope_scaling"}
        kw: dict[str, Any] = {k: v for k, v in d.items() if k in names}
        if "torch_dtype" not in d and "dtype" in d:          # transformers >= 5 writes "dtype"
            kw["torch_dtype"] = d["dtype"]
        for key in ("bos_token_id", "eos_token_id"):
            if isinstance(kw.get(key), list):
                if not kw[key]:
                    raise CheckpointError(f"{key}=[] is empty (give null or at least one id)", field=key)
                kw[key] = kw[key][0]
        kw.update(_read_rope(d))
        _fill_hf_defaults(kw)
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["rope_source"]
        d.update(model_type="llama", architectures=["LlamaForCausalLM"])
        return d

    @property
    def num_params(self) -> int:
        C, I, hs = self.hidden_size, self.intermediate_size, self.head_dim
        attn = C * hs * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        layer = attn + 3 * C * I + 2 * C
        emb = self.vocab_size * C * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + emb + C


def _fill_hf_defaults(kw: dict[str, Any]) -> None:
    """Missing keys take transformers' LlamaConfig defaults (not the tiny model's dataclass defaults):
    HF_LLAMA_DEFAULTS, num_key_value_heads = num_attention_heads, tie_word_embeddings = False
    (a checkpoint without lm_head.weight then fails naming tie_word_embeddings, see the loader).
    bos/eos ids stay None rather than transformers' 1 and 2, which name no real token.

    Example: {"hidden_size": 64, "num_attention_heads": 4} -> rms_norm_eps 1e-6, 4 KV heads, vocab 32000.
    """
    for key, value in HF_LLAMA_DEFAULTS.items():
        if key != "rope_theta":                   # read with the rope settings (_read_rope)
            kw.setdefault(key, value)
    kw.setdefault("num_key_value_heads", kw["num_attention_heads"])
    kw.setdefault("tie_word_embeddings", False)


def _read_rope(d: dict) -> dict:
    """rope_theta, rope_scaling and rope_source from either layout (see the module docstring)."""
    rp = d.get("rope_parameters")
    legacy_theta, legacy_scaling = d.get("rope_theta"), _normalize_rope_scaling(d.get("rope_scaling"))
    if rp is None:
        source = "rope_theta" if "rope_theta" in d or legacy_scaling else "default"
        return dict(rope_theta=10000.0 if legacy_theta is None else legacy_theta, rope_scaling=legacy_scaling,
                    rope_source=source)
    if not isinstance(rp, dict):
        raise _bad("rope_parameters", rp, "an object such as {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}")
    if any(isinstance(v, dict) for v in rp.values()):
        raise CheckpointError(f"rope_parameters per layer type ({', '.join(rp)}) are not supported",
                              field="rope_parameters")
    theta = rp.get("rope_theta", 10000.0 if legacy_theta is None else legacy_theta)
    try:
        scaling = _normalize_rope_scaling({k: v for k, v in rp.items() if k != "rope_theta"})
    except CheckpointError as e:
        raise CheckpointError(e.message.replace("rope_scaling", "rope_parameters"),
                              field=(e.field or "").replace("rope_scaling", "rope_parameters")) from None
    if legacy_theta is not None and legacy_theta != theta:
        raise CheckpointError(f"rope_theta={legacy_theta!r} disagrees with rope_parameters.rope_theta={theta!r}",
                              field="rope_theta")
    if legacy_scaling is not None and legacy_scaling != scaling:
        raise CheckpointError(f"rope_scaling={legacy_scaling!r} disagrees with rope_parameters={rp!r}",
                              field="rope_scaling")
    return dict(rope_theta=theta, rope_scaling=scaling, rope_source="rope_parameters")
