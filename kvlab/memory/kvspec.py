"""How big the KV cache is: ``2 x layers x kv_heads x head_dim x tokens x bytes``.

The 2 is one K and one V per token per layer. With grouped-query attention (GQA)
``kv_heads`` is smaller than the number of query heads, so using ``hidden_size``
(= query heads x head_dim) in place of ``kv_heads x head_dim``, as the source notes do,
overstates the cache by ``num_heads / kv_heads`` (8x for Llama-2 70B).

Presets hold each model's published config (config.json on the model hub, as of the
models' releases). GPU presets hold memory and HBM bandwidth from the vendors' spec
sheets.

Four ways to spend bytes on a token (``KVSpec.kind``):

=====  ==============================================  ==========================================
MHA    every query head has its own K and V head         2 x layers x heads x head_dim x bytes
GQA    a group of query heads shares one K/V head         2 x layers x kv_heads x head_dim x bytes
MQA    all query heads share one K/V head (kv_heads 1)    2 x layers x 1 x head_dim x bytes
MLA    DeepSeek-V2/V3: one compressed latent per token    layers x (kv_lora_rank + rope_dim) x bytes
       (512 wide) from which K and V are both
       up-projected, plus 64 RoPE dims of the key
=====  ==============================================  ==========================================

MLA caches no separate V (no factor 2): the latent ``c_KV`` (kv_lora_rank) and the shared RoPE
key ``k_R`` (rope_dim) are the whole cache, one "head" per layer (DeepSeek-V2, arXiv:2405.04434,
section 2.1). Quantized KV (``with_dtype("int8")``) stores 1 byte per element plus a scale per
token, KV head and K/V (``scale_bytes``: 4 for an fp32 scale, the layout of
``kvlab.kernels.quantized_decode``); ``"fp8"`` here is vLLM's fp8 cache, one scale per tensor
(``scale_bytes`` 0). Not handled: sliding windows, per-channel or grouped scales.

Example:
    >>> spec = MODELS["llama-2-70b"]
    >>> spec.bytes_per_token
    327680
    >>> spec.kv_bytes(4096)            # 1.34 GB with its 8 KV heads
    1342177280
    >>> spec.hidden_formula_bytes(4096)  # the notes' formula: 10.7 GB
    10737418240
    >>> MODELS["deepseek-v3"].bytes_per_token   # MLA: 61 x (512 + 64) x 2
    70272
    >>> MODELS["llama-3-8b"].with_dtype("int8").bytes_per_token   # 2 x 32 x 8 x (128 + 4)
    67584
"""
from __future__ import annotations

from dataclasses import dataclass

from .ids import check_int

__all__ = ["KVSpec", "GPUSpec", "MODELS", "CONTEXT_WINDOWS", "GPUS", "get_model", "get_gpu", "DTYPE_BYTES", "SCALE_BYTES",
           "KV_DTYPES", "format_bytes"]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
# Scale bytes per token, KV head and K/V: int8 keeps an fp32 scale per token and head (kvlab's
# quantized cache); fp8 is vLLM's cache with one scale per tensor (nothing per token).
SCALE_BYTES = {"fp32": 0, "fp16": 0, "bf16": 0, "fp8": 0, "int8": 4}
KV_DTYPES = tuple(DTYPE_BYTES)


@dataclass(frozen=True, slots=True)
class KVSpec:
    """The shape of one model's KV cache.

    layers: decoder layers; kv_heads: key/value heads per layer (GQA: fewer than
    num_heads); head_dim: size of one head; dtype_bytes: 2 for fp16/bf16;
    num_heads: query heads (only for the hidden-size formula); params_b: parameter
    count in billions (for how much GPU memory the weights leave); scale_bytes: bytes of
    quantization scale per token, KV head and K/V (int8 with an fp32 scale: 4);
    kv_lora_rank, rope_dim: MLA's latent width and RoPE key width (then kv_heads is 1,
    head_dim = kv_lora_rank + rope_dim, and K and V share the one cached vector: use
    :meth:`KVSpec.mla`).
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    num_heads: int | None = None
    name: str = "custom"
    params_b: float | None = None
    scale_bytes: int = 0
    kv_lora_rank: int | None = None
    rope_dim: int = 0

    def __post_init__(self) -> None:
        for f in ("layers", "kv_heads", "head_dim", "dtype_bytes"):
            object.__setattr__(self, f, check_int(f"KVSpec.{f}", getattr(self, f), 1))
        for f in ("scale_bytes", "rope_dim"):
            object.__setattr__(self, f, check_int(f"KVSpec.{f}", getattr(self, f), 0))
        if self.num_heads is not None and (self.num_heads < self.kv_heads or self.num_heads % self.kv_heads):
            raise ValueError(f"num_heads {self.num_heads} must be a multiple of kv_heads {self.kv_heads}")
        if self.kv_lora_rank is not None:
            r = self.kv_lora_rank
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise ValueError(f"KVSpec.kv_lora_rank must be a positive int or None, got {r!r}")
            if self.kv_heads != 1 or self.head_dim != r + self.rope_dim:
                raise ValueError(f"an MLA spec caches one vector of kv_lora_rank + rope_dim = {r + self.rope_dim} "
                                 f"per layer: kv_heads must be 1 and head_dim {r + self.rope_dim}, got "
                                 f"kv_heads {self.kv_heads}, head_dim {self.head_dim}")

    @classmethod
    def mla(cls, layers: int, kv_lora_rank: int = 512, rope_dim: int = 64, dtype_bytes: int = 2,
            num_heads: int | None = None, name: str = "custom-mla", params_b: float | None = None) -> "KVSpec":
        """Multi-head latent attention: one latent of ``kv_lora_rank`` plus ``rope_dim`` RoPE key dims
        per token and layer. Example: ``KVSpec.mla(61).bytes_per_token`` -> 61 x 576 x 2 = 70272."""
        return cls(layers, 1, kv_lora_rank + rope_dim, dtype_bytes, num_heads, name, params_b,
                   kv_lora_rank=kv_lora_rank, rope_dim=rope_dim)

    @property
    def kind(self) -> str:
        """"mla", "mqa" (one KV head for many query heads), "mha" (as many KV heads as query
        heads, or no num_heads given) or "gqa"."""
        if self.kv_lora_rank is not None:
            return "mla"
        if self.num_heads is None or self.num_heads == self.kv_heads:
            return "mha"
        return "mqa" if self.kv_heads == 1 else "gqa"

    @property
    def kv_factor(self) -> int:
        """2 (a K and a V per token) or 1 for MLA (K and V are both rebuilt from one latent)."""
        return 1 if self.kv_lora_rank is not None else 2

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers: 2 x layers x kv_heads x (head_dim x bytes + scale
        bytes); MLA: layers x (kv_lora_rank + rope_dim) x bytes."""
        return self.kv_factor * self.layers * self.kv_heads * (self.head_dim * self.dtype_bytes + self.scale_bytes)

    def per_token_formula(self) -> str:
        """``bytes_per_token`` with its numbers, e.g. ``'2 x 32 x 8 x 128 x 2 = 131,072'`` (GQA) or
        ``'61 x (512 + 64) x 2 = 70,272'`` (MLA); a scale shows as ``(128 x 1 + 4)``."""
        if self.kv_lora_rank is not None:
            inner = f"({self.kv_lora_rank} + {self.rope_dim}) x {self.dtype_bytes}"
            if self.scale_bytes:
                inner = f"(({self.kv_lora_rank} + {self.rope_dim}) x {self.dtype_bytes} + {self.scale_bytes})"
            return f"{self.layers} x {inner} = {self.bytes_per_token:,}"
        elem = f"{self.head_dim} x {self.dtype_bytes}"
        if self.scale_bytes:
            elem = f"({elem} + {self.scale_bytes})"
        return f"2 x {self.layers} x {self.kv_heads} x {elem} = {self.bytes_per_token:,}"

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of KV for ``tokens`` tokens."""
        tokens = check_int("tokens", tokens, 0)
        return self.bytes_per_token * tokens

    @property
    def hidden_size(self) -> int:
        return (self.num_heads or self.kv_heads) * self.head_dim

    def hidden_formula_bytes(self, tokens: int) -> int:
        """The notes' formula 2 x layers x hidden_size x tokens x bytes (right only for MHA)."""
        tokens = check_int("tokens", tokens, 0)
        return 2 * self.layers * self.hidden_size * tokens * self.dtype_bytes

    @property
    def gqa_ratio(self) -> int:
        return (self.num_heads or self.kv_heads) // self.kv_heads

    def with_dtype(self, dtype: str | int, scale_bytes: int | None = None) -> "KVSpec":
        """The same model with another KV dtype: a name from ``DTYPE_BYTES`` (its scale bytes from
        ``SCALE_BYTES``) or a byte count (no scale unless ``scale_bytes`` is given).

        Example: llama-3-8b in int8 -> 2 x 32 x 8 x (128 x 1 + 4) = 67,584 bytes per token.
        """
        if isinstance(dtype, str):
            if dtype not in DTYPE_BYTES:
                raise ValueError(f"unknown KV dtype {dtype!r}; choose one of: {', '.join(DTYPE_BYTES)}")
            b, sb = DTYPE_BYTES[dtype], SCALE_BYTES[dtype]
        else:
            b, sb = dtype, 0
        sb = sb if scale_bytes is None else scale_bytes
        return KVSpec(self.layers, self.kv_heads, self.head_dim, b, self.num_heads, self.name, self.params_b,
                      scale_bytes=sb, kv_lora_rank=self.kv_lora_rank, rope_dim=self.rope_dim)

    def formula(self, tokens: int) -> str:
        """The formula with numbers filled in, e.g. for the CLI."""
        if self.kv_lora_rank is not None or self.scale_bytes:
            per = self.per_token_formula().rsplit(" = ", 1)[0]
            return (f"{self.bytes_per_token:,} bytes per token ({per}) x tokens {tokens} = {self.kv_bytes(tokens):,} "
                    f"bytes ({format_bytes(self.kv_bytes(tokens))})")
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
    # MQA: 71 query heads share one K/V head (tiiuae/falcon-7b config.json: n_head 71, multi_query).
    "falcon-7b": KVSpec(layers=32, kv_heads=1, head_dim=64, num_heads=71, name="falcon-7b", params_b=7.22),
    # GQA 3: the real model of the lessons (HuggingFaceTB/SmolLM2-135M-Instruct).
    "smollm2-135m": KVSpec(layers=30, kv_heads=3, head_dim=64, num_heads=9, name="smollm2-135m", params_b=0.135),
    # MLA: kv_lora_rank 512, qk_rope_head_dim 64 (deepseek-ai/DeepSeek-V2 and -V3 config.json).
    "deepseek-v2": KVSpec.mla(60, 512, 64, num_heads=128, name="deepseek-v2", params_b=236.0),
    "deepseek-v3": KVSpec.mla(61, 512, 64, num_heads=128, name="deepseek-v3", params_b=671.0),
}

# The longest request each preset takes, its context window: ``max_position_embeddings`` of its published
# config.json (Llama-2 4,096; Llama-3 8,192; OPT 2,048; SmolLM2-135M 8,192; DeepSeek-V2 and -V3 163,840),
# Falcon-7B's from its model card (2,048). vLLM's ``max_model_len`` defaults to the same number.
CONTEXT_WINDOWS: dict[str, int] = {
    "llama-2-7b": 4096, "llama-2-13b": 4096, "llama-2-70b": 4096, "llama-3-8b": 8192, "opt-13b": 2048,
    "falcon-7b": 2048, "smollm2-135m": 8192, "deepseek-v2": 163840, "deepseek-v3": 163840,
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
