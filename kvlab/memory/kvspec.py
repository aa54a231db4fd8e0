"""How big the KV cache is: ``2 x layers x kv_heads x head_dim x tokens x bytes``.

The 2 is one K and one V per token per layer. With grouped-query attention (GQA)
``kv_heads`` is smaller than the number of query heads, so using ``hidden_size``
(= query heads x head_dim) in place of ``kv_heads x head_dim``, as the source notes do,
overstates the cache by ``num_heads / kv_heads`` (8x for Llama-2 70B).

Presets hold each model's published config (config.json on the model hub, as of the
models' releases). GPU presets hold memory and HBM bandwidth from the vendors' spec
sheets. Not handled: quantized KV formats with scales, MLA (DeepSeek), sliding windows.

Example:
    >>> spec = MODELS["llama-2-70b"]
    >>> spec.bytes_per_token
    327680
    >>> spec.kv_bytes(4096)            # 1.34 GB with its 8 KV heads
    1342177280
    >>> spec.hidden_formula_bytes(4096)  # the notes' formula: 10.7 GB
    10737418240
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KVSpec", "GPUSpec", "MODELS", "GPUS", "get_model", "get_gpu", "DTYPE_BYTES", "format_bytes"]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True, slots=True)
class KVSpec:
    """The shape of one model's KV cache.

    layers: decoder layers; kv_heads: key/value heads per layer (GQA: fewer than
    num_heads); head_dim: size of one head; dtype_bytes: 2 for fp16/bf16;
    num_heads: query heads (only for the hidden-size formula); params_b: parameter
    count in billions (for how much GPU memory the weights leave).
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    num_heads: int | None = None
    name: str = "custom"
    params_b: float | None = None

    def __post_init__(self) -> None:
        for f in ("layers", "kv_heads", "head_dim", "dtype_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"KVSpec.{f} must be a positive int, got {v!r}")
        if self.num_heads is not None and (self.num_heads < self.kv_heads or self.num_heads % self.kv_heads):
            raise ValueError(f"num_heads {self.num_heads} must be a multiple of kv_heads {self.kv_heads}")

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of KV for ``tokens`` tokens."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be an int >= 0, got {tokens!r}")
        return self.bytes_per_token * tokens

    @property
    def hidden_size(self) -> int:
        return (self.num_heads or self.kv_heads) * self.head_dim

    def hidden_formula_bytes(self, tokens: int) -> int:
        """The notes' formula 2 x layers x hidden_size x tokens x bytes (right only for MHA)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be an int >= 0, got {tokens!r}")
        return 2 * self.layers * self.hidden_size * tokens * self.dtype_bytes

    @property
    def gqa_ratio(self) -> int:
        return (self.num_heads or self.kv_heads) // self.kv_heads

    def with_dtype(self, dtype: str | int) -> "KVSpec":
        b = DTYPE_BYTES[dtype] if isinstance(dtype, str) else dtype
        return KVSpec(self.layers, self.kv_heads, self.head_dim, b, self.num_heads, self.name, self.params_b)

    def formula(self, tokens: int) -> str:
        """The formula with numbers filled in, e.g. for the CLI."""
        return (
            f"2 x layers {self.layers} x kv_heads {self.kv_heads} x head_dim {self.head_dim} x tokens {tokens} "
            f"x bytes {self.dtype_bytes} = {self.kv_bytes(tokens):,} bytes ({format_bytes(self.kv_bytes(tokens))})"
        )


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """A GPU's memory (bytes), peak HBM bandwidth (bytes/s) and dense fp16/bf16 tensor-core peak
    (FLOP/s), from the vendors' spec sheets (the one place kvlab keeps them)."""

    name: str
    memory_bytes: int
    hbm_bandwidth: float
    peak_fp16_flops: float | None = None  # None: not known (a made-up card), so no FLOP-based figure

    def kv_budget_bytes(self, model: KVSpec, utilization: float = 0.9, activation_reserve: float = 0.0) -> int:
        """Memory left for KV after the fp16 weights, at ``utilization`` of the card (vLLM's gpu_memory_utilization)."""
        if not 0 < utilization <= 1:
            raise ValueError(f"utilization must be in (0, 1], got {utilization}")
        if model.params_b is None:
            raise ValueError(f"model {model.name!r} has no parameter count; give the KV budget directly")
        weights = int(model.params_b * 1e9 * 2)
        left = int(self.memory_bytes * utilization) - weights - int(activation_reserve)
        if left <= 0:
            raise ValueError(
                f"{model.name} weights ({format_bytes(weights)}) do not leave room for KV on {self.name}: "
                f"{utilization:.0%} of {format_bytes(self.memory_bytes)} is {format_bytes(self.memory_bytes * utilization)}"
            )
        return left


GiB = 1024**3
GB = 10**9

MODELS: dict[str, KVSpec] = {
    "llama-2-7b": KVSpec(layers=32, kv_heads=32, head_dim=128, num_heads=32, name="llama-2-7b", params_b=6.74),
    "llama-2-13b": KVSpec(layers=40, kv_heads=40, head_dim=128, num_heads=40, name="llama-2-13b", params_b=13.0),
    "llama-2-70b": KVSpec(layers=80, kv_heads=8, head_dim=128, num_heads=64, name="llama-2-70b", params_b=69.0),
    "llama-3-8b": KVSpec(layers=32, kv_heads=8, head_dim=128, num_heads=32, name="llama-3-8b", params_b=8.03),
    "opt-13b": KVSpec(layers=40, kv_heads=40, head_dim=128, num_heads=40, name="opt-13b", params_b=12.85),
}

MiB = 1024**2

# Memory as ``nvidia-smi`` reports it (MiB), not the spec sheet's round number: an A100's "80GB" is
# 81,920 MiB = 80 GiB, but an H100 80GB HBM3 shows 81,559 MiB and an H200 ("141GB") 143,771 MiB.
GPUS: dict[str, GPUSpec] = {
    "a100-40gb": GPUSpec("a100-40gb", 40_960 * MiB, 1.555e12, 312e12),   # A100-SXM4-40GB: 40,960 MiB
    "a100-80gb": GPUSpec("a100-80gb", 81_920 * MiB, 2.039e12, 312e12),   # A100-SXM4-80GB: 81,920 MiB
    "h100-80gb": GPUSpec("h100-80gb", 81_559 * MiB, 3.35e12, 989e12),    # H100 80GB HBM3 (SXM5): 81,559 MiB
    "h200": GPUSpec("h200", 143_771 * MiB, 4.8e12, 989e12),              # H200 "141GB": 143,771 MiB
}


def get_model(name: str) -> KVSpec:
    """A preset by name (case-insensitive); ValueError listing the choices otherwise."""
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[key]


def get_gpu(name: str) -> GPUSpec:
    key = name.lower()
    if key not in GPUS:
        raise ValueError(f"unknown gpu {name!r}; choose one of: {', '.join(GPUS)}")
    return GPUS[key]


def format_bytes(n: float) -> str:
    """Human-readable, decimal units as the papers use: 1342177280 -> '1.34 GB'."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
