"""Solutions to lesson 11's exercises (kept apart from the lesson; CI injects them)."""
import torch


def streaming_keep(num_tokens, block_size, sink_tokens, window_tokens):
    for name, v, lo in (("num_tokens", num_tokens, 0), ("block_size", block_size, 1),
                        ("sink_tokens", sink_tokens, 0), ("window_tokens", window_tokens, 1)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    num_blocks = -(-num_tokens // block_size)
    sinks = range(min(-(-sink_tokens // block_size), num_blocks))
    window = range(max(0, num_blocks - -(-window_tokens // block_size)), num_blocks)
    return sorted(set(sinks) | set(window))


def quest_pick(q, k_min, k_max, top_k):
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    bound = torch.maximum(q * k_max, q * k_min).sum(-1)        # (num_blocks,)
    order = sorted(range(len(bound)), key=lambda b: (-float(bound[b]), b))
    return sorted(order[:top_k])


def quantize_per_token(x):
    if x.dim() != 3:
        raise ValueError(f"x must be (num_tokens, num_heads, head_dim), got shape {tuple(x.shape)}")
    scale = x.abs().amax(dim=-1) / 127                           # (num_tokens, num_heads)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    xq = torch.clamp(torch.floor(x / scale[..., None] + 0.5), -127, 127).to(torch.int8)
    return xq, scale
