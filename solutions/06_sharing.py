"""Solutions to lesson 06 (sharing): one function per exercise, same names as the stubs."""
from kvlab import OutOfBlocks, blocks_needed


def cow_append(block_table, num_tokens, ref_count, free_blocks, block_size):
    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one
        if not free_blocks:
            raise OutOfBlocks(1, 0)
        b = free_blocks.pop(0)
        ref_count[b] = 1
        block_table.append(b)
        return []
    src = block_table[-1]
    if ref_count[src] == 1:                    # partial and private: write in place
        return []
    if not free_blocks:                        # partial and shared: copy it first
        raise OutOfBlocks(1, 0)
    dst = free_blocks.pop(0)
    ref_count[dst] = 1
    ref_count[src] -= 1
    block_table[-1] = dst
    return [(src, dst)]


def sampling_blocks(prompt_len, num_samples, gen_len, block_size):
    without = num_samples * blocks_needed(prompt_len + gen_len, block_size)
    if gen_len == 0:
        return without, blocks_needed(prompt_len, block_size)
    full = prompt_len // block_size            # full prompt blocks stay shared by every sample
    return without, full + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full)
