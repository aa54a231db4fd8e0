"""A small Llama-style decoder, written for reading, that also loads real Llama checkpoints.

The architecture is Llama's: token embedding, then ``num_hidden_layers`` blocks of
(RMSNorm -> grouped-query attention with rotary positions -> residual, RMSNorm -> SwiGLU MLP ->
residual), a final RMSNorm and a linear head to vocabulary logits. Parameter names are exactly
Hugging Face's (``model.layers.{i}.self_attn.q_proj.weight``...), and rotary embeddings use HF's
``rotate_half`` convention, so a Llama-architecture checkpoint folder (SmolLM, TinyLlama, Llama)
loads with :func:`load_pretrained` and gives the same numbers as ``transformers`` would.

The model knows nothing about KV caches. Each attention layer computes q, k, v for the tokens
it is given and hands them to an ``attention`` callback: ``attention(layer, q, k, v) -> out``.
``kvlab.generate`` supplies the three callbacks (naive recomputation, a contiguous cache, a
paged cache); with no callback the model runs plain causal attention over a (B, T) batch, which
is what training uses.

Shapes: B batch, T tokens, N packed tokens, C hidden_size, nh query heads, nkv KV heads,
hs head_dim, V vocab_size.

Not handled here: quantized checkpoints, bias terms in projections (``attention_bias``),
sliding windows, rope scaling types other than none/"linear"/"llama3", and .bin (pickle)
checkpoints. Each of these raises :class:`CheckpointError` naming it.

Example:
    >>> model, tok = load_bundled()
    >>> ids = torch.tensor([tok.encode("Return the list")])   # (B=1, T)
    >>> logits = model(ids)                                     # (1, T, V)
    >>> logits.shape[-1] == model.config.vocab_size
    True
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

ASSETS_MODEL_DIR = Path(__file__).resolve().parents[2] / "assets" / "model"

# attention(layer_idx, q (..., nh, hs), k (..., nkv, hs), v (..., nkv, hs)) -> (..., nh, hs)
AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


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


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in fp32 (as HF's LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., C)
        return self.weight * x.to(dtype)


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """Rotary frequencies theta^(-2i/hs), i = 0 .. hs/2 - 1, with optional Llama-3 / linear scaling."""
    hs = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))  # (hs/2,)
    rs = cfg.rope_scaling
    if not rs:
        return inv_freq.float()
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return inv_freq.float()
    if kind == "linear":
        return (inv_freq / rs["factor"]).float()
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / lo, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        return torch.where(medium, smoothed, scaled).float()
    raise CheckpointError(f"rope_scaling type {kind!r} is not supported (none, 'linear', 'llama3')")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF convention: split the last dim in halves (x1, x2) -> (-x2, x1). Pairs are (i, i + hs/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., heads, hs), cos/sin (..., hs) for the same positions -> x rotated by its position."""
    return x * cos.unsqueeze(-2) + rotate_half(x) * sin.unsqueeze(-2)  # (..., heads, hs)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal GQA attention over whole sequences: q (B, T, nh, hs), k/v (B, T, nkv, hs)."""
    group = q.shape[-2] // k.shape[-2]
    q = q.transpose(1, 2)                                        # (B, nh, T, hs)
    k = k.transpose(1, 2).repeat_interleave(group, dim=1)        # (B, nh, T, hs)
    v = v.transpose(1, 2).repeat_interleave(group, dim=1)        # (B, nh, T, hs)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
    return y.transpose(1, 2)                                     # (B, T, nh, hs)


class Attention(nn.Module):
    """Grouped-query self-attention: nh query heads share nkv K/V heads (nh // nkv queries each)."""

    def __init__(self, cfg: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        C, hs = cfg.hidden_size, cfg.head_dim
        self.layer_idx, self.nh, self.nkv, self.hs = layer_idx, cfg.num_attention_heads, cfg.num_key_value_heads, hs
        self.q_proj = nn.Linear(C, self.nh * hs, bias=False)
        self.k_proj = nn.Linear(C, self.nkv * hs, bias=False)
        self.v_proj = nn.Linear(C, self.nkv * hs, bias=False)
        self.o_proj = nn.Linear(self.nh * hs, C, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: AttentionFn | None) -> torch.Tensor:
        lead = x.shape[:-1]                                      # (B, T) or (N,)
        q = self.q_proj(x).view(*lead, self.nh, self.hs)         # (..., nh, hs)
        k = self.k_proj(x).view(*lead, self.nkv, self.hs)        # (..., nkv, hs)
        v = self.v_proj(x).view(*lead, self.nkv, self.hs)        # (..., nkv, hs)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if attention is None:
            y = causal_attention(q, k, v)                        # (B, T, nh, hs)
        else:
            y = attention(self.layer_idx, q, k, v)               # (..., nh, hs)
        return self.o_proj(y.reshape(*lead, self.nh * self.hs))  # (..., C)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., C)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, attention):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attention)  # (..., C)
        return x + self.mlp(self.post_attention_layernorm(x))                  # (..., C)


class _Body(nn.Module):
    """The ``model.`` prefix of HF names: embed_tokens, layers, norm."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Llama(nn.Module):
    """The whole decoder. ``forward(input_ids, positions=None, attention=None) -> logits``.

    input_ids (B, T) with positions defaulting to 0..T-1 and plain causal attention; or packed
    (N,) tokens of several sequences with explicit positions (N,) and an ``attention`` callback
    that knows where each sequence starts (see kvlab.generate).
    Returns logits (..., V) in fp32.
    """

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)  # (hs/2,)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (...) -> cos, sin (..., hs) in HF layout (frequencies repeated twice)."""
        freqs = positions.to(self.inv_freq.device).float()[..., None] * self.inv_freq  # (..., hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)                                          # (..., hs)
        return emb.cos(), emb.sin()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None, attention: AttentionFn | None = None) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(input_ids.shape[-1]).expand(input_ids.shape)  # (B, T)
        dtype = self.model.embed_tokens.weight.dtype
        cos, sin = self.rope(positions)                          # (..., hs)
        cos, sin = cos.to(dtype), sin.to(dtype)
        x = self.model.embed_tokens(input_ids)                   # (..., C)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attention)                    # (..., C)
        x = self.model.norm(x)                                   # (..., C)
        return self.lm_head(x).float()                           # (..., V)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    def flops_per_token(self, context_len: int) -> int:
        """Multiply-adds x 2 for one token attending to ``context_len`` tokens (matmuls only).

        Example: projections and MLP cost the same at every position; attention grows with it.
        """
        c = self.config
        C, I, hs, nh, nkv, L = c.hidden_size, c.intermediate_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.num_hidden_layers
        proj = C * hs * (2 * nh + 2 * nkv) + 3 * C * I
        attn = 2 * nh * hs * context_len
        return 2 * (L * (proj + attn) + C * c.vocab_size)


# ----------------------------------------------------------------------------------------------
# loading and saving

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


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not (folder / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {index.name} is missing from {folder}")
            tensors.update(load_file(str(folder / shard)))
        return tensors
    if single.is_file():
        return load_file(str(single))
    if list(folder.glob("*.bin")):
        raise CheckpointError(f"{folder} has only .bin (pickle) weights; convert them to safetensors")
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {folder}")


def load_state(model: Llama, tensors: dict[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into ``model``; raise CheckpointError naming every missing,
    unexpected or mis-shaped tensor (the model is left unchanged on error)."""
    cfg = model.config
    want = expected_shapes(cfg)
    tensors = {k: v for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:
        if not torch.equal(tensors["lm_head.weight"], tensors.get("model.embed_tokens.weight", tensors["lm_head.weight"])):
            raise CheckpointError("tie_word_embeddings=True but lm_head.weight differs from model.embed_tokens.weight")
        tensors = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
    missing = sorted(set(want) - set(tensors))
    unexpected = sorted(set(tensors) - set(want))
    mismatched = sorted(f"{k}: checkpoint {tuple(tensors[k].shape)} vs config {want[k]}"
                        for k in set(want) & set(tensors) if tuple(tensors[k].shape) != want[k])
    problems = []
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    if mismatched:
        problems.append(f"mismatched shapes {mismatched}")
    if problems:
        raise CheckpointError("; ".join(problems))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k in want:
            params[k].copy_(tensors[k].to(params[k].dtype))


def load_pretrained(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """Load a Llama-architecture checkpoint in the Hugging Face layout from a local folder.

    The folder holds config.json (Llama keys), model.safetensors or model.safetensors.index.json
    with its shards, and tokenizer.json. Returns (model in eval mode, kvlab.tokenizer.Tokenizer or
    None when there is no tokenizer.json). Nothing is downloaded.

    Example: model, tok = load_pretrained("~/models/SmolLM2-135M")
    """
    from .tokenizer import load_tokenizer

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"no config.json in {folder}")
    cfg = LlamaConfig.from_dict(json.loads(cfg_path.read_text()))
    tensors = _read_safetensors(folder)
    # Built on the CPU and then overwritten. (Not under `with torch.device("meta")`: after that,
    # importing Triton's interpreter breaks: "Cannot call @triton.jit'd outside of the scope of a kernel".)
    model = Llama(cfg)
    load_state(model, tensors)
    model = model.to(device=device, dtype=dtype)
    model.inv_freq = rope_inv_freq(cfg).to(device)         # keep the rotary frequencies in fp32
    model.eval()
    tok = load_tokenizer(folder) if (folder / "tokenizer.json").is_file() else None
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

    Example:
        >>> model, tok = load_bundled()
        >>> model.config.num_attention_heads, model.config.num_key_value_heads
        (4, 2)
    """
    return load_pretrained(ASSETS_MODEL_DIR, dtype=dtype, device=device)
