"""Solutions to lesson 00's warm-ups (injected in place of the stubs by tests/test_notebooks.py)."""


def block_and_offset(pos, block_size):
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    return divmod(pos, block_size)


def common_prefix_len(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reusable_tokens(finished, new, block_size):
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not finished or not new:
        raise ValueError(f"a request has at least one token, got {len(finished)} and {len(new)}")
    shared = min(common_prefix_len(finished, new), len(new) - 1)   # the last token is always computed
    return shared // block_size * block_size                         # only whole blocks are cached
