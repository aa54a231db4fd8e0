"""Solutions to lesson 02's exercises (injected in place of the stubs by tests/test_notebooks.py)."""

def kv_heads_for_budget(layers, num_heads, head_dim, tokens, budget_bytes, dtype_bytes=2):
    if min(layers, num_heads, head_dim, tokens, dtype_bytes) < 1:
        raise ValueError("layers, num_heads, head_dim, tokens and dtype_bytes must be >= 1")
    per_head = 2 * layers * head_dim * tokens * dtype_bytes         # K and V of ONE KV head, whole request
    allowed = [g for g in range(1, num_heads + 1) if num_heads % g == 0]   # GQA: equal groups
    fits = [g for g in allowed if g * per_head <= budget_bytes]
    if not fits:
        raise ValueError(f"not even one KV head ({per_head} bytes) fits in {budget_bytes} bytes")
    return max(fits)


def bytes_per_token_from_config(config):
    dtype_bytes = {"float16": 2, "bfloat16": 2, "float32": 4}
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)          # absent: multi-head attention
    head_dim = config.get("head_dim", config["hidden_size"] // heads)
    dtype = config.get("torch_dtype", "float16")
    if dtype not in dtype_bytes:
        raise ValueError(f"unknown torch_dtype {dtype!r}")
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * dtype_bytes[dtype]


def longest_context(kv_budget_bytes, bytes_per_token, users, block_size=16):
    if bytes_per_token < 1 or users < 1 or block_size < 1:
        raise ValueError(f"bytes_per_token {bytes_per_token}, users {users} and block_size {block_size} must be >= 1")
    if kv_budget_bytes < 0:
        raise ValueError(f"kv_budget_bytes must be >= 0, got {kv_budget_bytes}")
    blocks = kv_budget_bytes // (bytes_per_token * block_size)   # the pool: whole blocks only
    return blocks // users * block_size                          # each user: whole blocks, in tokens


def max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    if block_size < 1 or bytes_per_token < 1 or any(n < 1 for n in lengths):
        raise ValueError("block_size, bytes_per_token and every length must be >= 1")
    budget = int(gpu_bytes * utilization) - weight_bytes
    free_blocks = max(0, budget) // (block_size * bytes_per_token)
    count = 0
    for n in sorted(lengths):                      # shortest first: the most requests fit
        need = -(-n // block_size)                 # whole blocks, the last one partly empty
        if need > free_blocks:
            break
        free_blocks -= need
        count += 1
    return count
