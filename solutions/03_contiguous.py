"""Solutions to lesson 03's exercises (injected in place of the stubs by tests/test_notebooks.py)."""


def reservation(policy, length, max_len, final_len=None):
    if not 1 <= length <= max_len:
        raise ValueError(f"length {length} must be in [1, {max_len}]")
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(1 << (length - 1).bit_length(), max_len)
    if policy == "exact":
        if final_len is None:
            raise ValueError("policy 'exact' needs final_len")
        return final_len
    raise ValueError(f"unknown policy {policy!r}")


def first_fit(free_ranges, n):
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for start, length in free_ranges:
        if length >= n:
            return start
    return None


def external_fragmentation(free_ranges):
    lengths = [length for _, length in free_ranges]
    return sum(lengths) - max(lengths, default=0)
