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


def place_first_fit(capacity, ops):
    holes = [(0, capacity)]                 # free (start, length) ranges, in address order
    placed = {}                             # rid -> (start, n) while it holds its range
    starts, refused = {}, []
    for op in ops:
        if op[0] == "admit":
            rid, n = op[1], op[2]
            if n < 1:
                raise ValueError(f"admit {rid}: size must be >= 1, got {n}")
            if rid in placed:
                raise ValueError(f"admit {rid}: it is already placed")
            i = next((i for i, (_, length) in enumerate(holes) if length >= n), None)
            if i is None:
                refused.append(rid)
                continue
            start, length = holes[i]
            holes[i:i + 1] = [(start + n, length - n)] if length > n else []
            placed[rid] = (start, n)
            starts[rid] = start
        elif op[0] == "finish":
            if op[1] not in placed:
                continue                    # refused: it never took space
            start, n = placed.pop(op[1])
            merged = []
            for s, length in sorted(holes + [(start, n)]):
                if merged and merged[-1][0] + merged[-1][1] == s:    # touches the previous hole: one hole
                    merged[-1] = (merged[-1][0], merged[-1][1] + length)
                else:
                    merged.append((s, length))
            holes = merged
        else:
            raise ValueError(f"unknown operation {op[0]!r}")
    free = sum(length for _, length in holes)
    largest = max((length for _, length in holes), default=0)
    return {"starts": starts, "refused": refused, "largest_hole": largest,
            "wasted_share": (free - largest) / free if free else 0.0}
