"""Solutions to lesson 01 (why a KV cache): same names as the stubs."""
import math

import torch


def count_flops(flops_per_token, prompt_len, new_tokens, cached_prefix=0):
    naive, cached = [], []
    for t in range(new_tokens):
        length = prompt_len + t                                   # tokens run at step t without a cache
        naive.append(sum(flops_per_token(i) for i in range(1, length + 1)))
        if t == 0:                                                # the prefill: the prompt after the cached prefix
            cached.append(sum(flops_per_token(i) for i in range(cached_prefix + 1, prompt_len + 1)))
        else:                                                     # one token over a context of prompt_len + t
            cached.append(flops_per_token(prompt_len + t))
    return naive, cached


def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    k_cache = torch.cat([k_cache, k_new[None]])                   # (T + 1, kv_heads, head_dim)
    v_cache = torch.cat([v_cache, v_new[None]])
    num_heads, head_dim = q.shape
    group = num_heads // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)                   # (T + 1, heads, head_dim)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,thd->ht", q, k) / math.sqrt(head_dim)
    out = torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)
    return out, k_cache, v_cache
