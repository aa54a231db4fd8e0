"""Solutions to lesson 04's exercises (injected in place of the stubs by tests/test_notebooks.py)."""
from collections import deque

from kvlab import DoubleFree, KVCacheError, OutOfBlocks


def translate(block_table, pos, block_size, bytes_per_token=1):
    if pos < 0 or pos >= len(block_table) * block_size:
        raise ValueError(f"pos {pos} is outside 0..{len(block_table) * block_size - 1}")
    logical_block, offset = divmod(pos, block_size)
    physical_block = block_table[logical_block]
    return logical_block, offset, physical_block, (physical_block * block_size + offset) * bytes_per_token


def blocks_needed(num_tokens, block_size):
    if num_tokens < 0 or block_size < 1:
        raise ValueError(f"need num_tokens >= 0 and block_size >= 1, got {num_tokens}, {block_size}")
    return (num_tokens + block_size - 1) // block_size


def blocks_to_append(num_tokens, n, block_size):
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return blocks_needed(num_tokens + n, block_size) - blocks_needed(num_tokens, block_size)


class TinyAllocator:
    def __init__(self, num_blocks):
        self.ref_count = [0] * num_blocks
        self.free_queue = deque(range(num_blocks))

    @property
    def num_free_blocks(self):
        return len(self.free_queue)

    def allocate(self, n):
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > len(self.free_queue):
            raise OutOfBlocks(n, len(self.free_queue))
        ids = [self.free_queue.popleft() for _ in range(n)]
        for b in ids:
            self.ref_count[b] = 1
        return ids

    def incref(self, ids):
        for b in ids:
            if self.ref_count[b] == 0:
                raise KVCacheError(f"block {b} is free")
        for b in ids:
            self.ref_count[b] += 1

    def free(self, ids):
        for b in ids:  # a block listed k times must hold at least k references
            if self.ref_count[b] < ids.count(b):
                raise DoubleFree(f"block {b} is listed {ids.count(b)} time(s) but has ref_count {self.ref_count[b]}")
        released = []
        for b in ids:
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_queue.append(b)
                released.append(b)
        return released
