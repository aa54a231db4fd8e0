"""Solutions to lesson 02's exercises (injected in place of the stubs by tests/test_notebooks.py)."""


def kv_cache_bytes(layers, kv_heads, head_dim, tokens, dtype_bytes=2):
    if min(layers, kv_heads, head_dim, dtype_bytes) < 1:
        raise ValueError("layers, kv_heads, head_dim and dtype_bytes must be >= 1")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return 2 * layers * kv_heads * head_dim * tokens * dtype_bytes


def requests_that_fit(kv_budget_bytes, bytes_per_token, tokens_per_request):
    if bytes_per_token < 1 or tokens_per_request < 1:
        raise ValueError("bytes_per_token and tokens_per_request must be >= 1")
    if kv_budget_bytes < 0:
        raise ValueError(f"kv_budget_bytes must be >= 0, got {kv_budget_bytes}")
    return kv_budget_bytes // (bytes_per_token * tokens_per_request)
