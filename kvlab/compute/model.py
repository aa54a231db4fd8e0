"""A small Llama-style decoder, written for reading; the same module runs real Llama checkpoints.

The architecture is Llama's: token embedding, then ``num_hidden_layers`` blocks of
(RMSNorm -> grouped-query attention with rotary positions -> residual, RMSNorm -> SwiGLU MLP ->
residual), a final RMSNorm and a linear head to vocabulary logits. Parameter names are exactly
Hugging Face's (``model.layers.{i}.self_attn.q_proj.weight``...), and rotary embeddings use HF's
``rotate_half`` convention, so a Llama-architecture checkpoint (SmolLM, TinyLlama, Llama) loads
with :func:`kvlab.compute.loader.load_pretrained` and gives the same numbers as ``transformers``.

The model knows nothing about KV caches. Each attention layer computes q, k, v for the tokens
it is given and hands them to an ``attention`` callback: ``attention(layer, q, k, v) -> out``.
``kvlab.compute.generate`` (naive recomputation, a contiguous cache) and
``kvlab.compute.model_runner`` (the paged cache) supply the callbacks; with no callback the
model runs plain causal attention over a (B, T) batch, which is what training uses.

Shapes: B batch, T tokens, N packed tokens, C hidden_size, nh query heads, nkv KV heads,
hs head_dim, V vocab_size.

Mirrors nano-vllm ``nanovllm/models/qwen3.py`` (a decoder whose attention layer writes and reads
the paged cache through a context) and HF ``modeling_llama.py`` (names, RoPE layout); kvlab
passes the cache as a callback instead of nano-vllm's global context.

Not handled here: loading and saving (``kvlab.compute.loader``), sliding windows, rope scaling
types other than none/"linear"/"llama3" (they raise :class:`CheckpointError`).

Example:
    >>> torch.manual_seed(0) and None
    >>> model = Llama(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
    ...                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    >>> ids = torch.tensor([[5, 9, 2]])                  # (B=1, T=3)
    >>> model(ids).shape                                  # (B, T, V)
    torch.Size([1, 3, 64])
    >>> seen = []
    >>> def attention(layer, q, k, v):                    # q (B, T, nh, hs); k, v (B, T, nkv, hs)
    ...     seen.append((layer, tuple(q.shape), tuple(k.shape)))
    ...     return causal_attention(q, k, v)
    >>> torch.allclose(model(ids, attention=attention), model(ids))
    True
    >>> seen[0]
    (0, (1, 3, 4, 8), (1, 3, 2, 8))
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import CheckpointError, LlamaConfig

__all__ = ["AttentionFn", "RMSNorm", "rope_inv_freq", "rotate_half", "apply_rope", "causal_attention", "decode_attention",
           "Attention", "MLP", "DecoderLayer", "Llama"]

# attention(layer_idx, q (..., nh, hs), k (..., nkv, hs), v (..., nkv, hs)) -> (..., nh, hs)
AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


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


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One query token against S cached ones (no mask: it sees them all), GQA without copying K/V:
    q (nh, hs), k/v (S, nkv, hs) -> (nh, hs). Query head h reads KV head h // (nh // nkv).

    Two batched matmuls over the KV heads read K and V where they lie (token-major, strided per
    head); for one query row that is faster on a CPU than torch's fused SDPA, which first copies a
    strided K/V (SmolLM2, one thread, 1,024 tokens: about 80 us a layer against 240).

    Example: nh 9, nkv 3 -> query heads 0-2 read KV head 0, 3-5 head 1, 6-8 head 2.
    """
    nh, hs = q.shape
    nkv = k.shape[-2]
    qg = q.reshape(nkv, nh // nkv, hs)                                          # (nkv, group, hs)
    scores = torch.bmm(qg, k.permute(1, 2, 0)) * (1.0 / math.sqrt(hs))          # (nkv, group, S)
    probs = scores.float().softmax(-1).to(v.dtype)
    return torch.bmm(probs, v.transpose(0, 1)).reshape(nh, hs)                  # (nkv, group, hs) -> (nh, hs)


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
    that knows where each sequence starts (see kvlab.compute.model_runner).
    Returns logits (..., V) in fp32 (only for ``logits_rows`` when given).
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

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None, attention: AttentionFn | None = None,
                logits_rows: torch.Tensor | slice | None = None) -> torch.Tensor:
        """logits_rows: which tokens (an index along the token axis) get logits; None: all. Decoding
        needs only each sequence's last token, and the head (C x V) is the largest matmul: a prompt of
        256 tokens on SmolLM2 spends ~20% of its prefill FLOPs on logits nobody reads."""
        if positions is None:
            positions = torch.arange(input_ids.shape[-1]).expand(input_ids.shape)  # (B, T)
        dtype = self.model.embed_tokens.weight.dtype
        cos, sin = self.rope(positions)                          # (..., hs)
        cos, sin = cos.to(dtype), sin.to(dtype)
        x = self.model.embed_tokens(input_ids)                   # (..., C)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attention)                    # (..., C)
        if logits_rows is not None:
            x = x[..., logits_rows, :]                           # (..., R, C)
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
