"""The model's hyper-parameters, with Hugging Face's LlamaConfig key names, and the loader's error.

:class:`LlamaConfig` is what :class:`kvlab.compute.model.Llama` is built from and what a
checkpoint's ``config.json`` holds (``from_dict`` / ``to_dict`` round-trip it).
:class:`CheckpointError` names anything a checkpoint or config asks for that kvlab does not
support; the loader (``kvlab.compute.loader``) raises it too.

Mirrors Hugging Face ``transformers/models/llama/configuration_llama.py`` (same keys); nano-vllm
reads the same file through ``transformers.AutoConfig`` (``nanovllm/config.py``).

Not handled here: any architecture but Llama's (model_type llama or mistral without a sliding
window), bias terms, activations other than SiLU.

Example:
    >>> cfg = LlamaConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
    >>> cfg.head_dim, cfg.num_params > 0
    (32, True)
    >>> LlamaConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> LlamaConfig(hidden_act="gelu")
    Traceback (most recent call last):
    ...
    kvlab.compute.config.CheckpointError: hidden_act='gelu' is not supported (only 'silu')
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

__all__ = ["CheckpointError", "LlamaConfig"]


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded: missing files, missing/unexpected/mismatched tensors."""


@dataclass
class LlamaConfig:
    """Hyper-parameters, with Hugging Face's LlamaConfig key names (config.json round-trips).

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
    torch_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.hidden_act != "silu":
            raise CheckpointError(f"hidden_act={self.hidden_act!r} is not supported (only 'silu')")
        if self.attention_bias:
            raise CheckpointError("attention_bias=True is not supported")
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim={self.head_dim} must be even for rotary embeddings")

    @classmethod
    def from_dict(cls, d: dict) -> "LlamaConfig":
        """From a config.json dict: known keys are taken, the rest ignored (model_type is checked)."""
        mt = d.get("model_type", "llama")
        if mt not in ("llama", "mistral"):
            raise CheckpointError(f"model_type={mt!r} is not a Llama-architecture model (llama, mistral)")
        sw = d.get("sliding_window")
        if sw and sw < d.get("max_position_embeddings", 0):
            raise CheckpointError(f"sliding_window={sw} is not supported (attention here sees the whole context)")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if isinstance(kw.get("eos_token_id"), list):
            kw["eos_token_id"] = kw["eos_token_id"][0]
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(model_type="llama", architectures=["LlamaForCausalLM"])
        return d

    @property
    def num_params(self) -> int:
        C, I, hs = self.hidden_size, self.intermediate_size, self.head_dim
        attn = C * hs * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        layer = attn + 3 * C * I + 2 * C
        emb = self.vocab_size * C * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + emb + C
