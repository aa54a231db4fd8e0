"""Solutions to lesson 09 (at scale): same names as the stubs."""


def orca_reservation(prompt_len, output_len, mode, block_size=16, max_len=2048):
    if mode == "max":
        estimate = max_len                                      # Orca (Max): the model's context
    elif mode == "pow2":
        estimate = 1 << (output_len - 1).bit_length()           # Orca (Pow2): next power of two of the output
    elif mode == "oracle":
        estimate = output_len                                   # Orca (Oracle): the true output length
    else:
        raise ValueError(f"mode must be 'max', 'pow2' or 'oracle', got {mode!r}")
    tokens = min(prompt_len + estimate, max_len)                # cacheflow caps the reservation at 2,048
    blocks = -(-tokens // block_size)                           # whole blocks
    return 1 << (blocks - 1).bit_length()                       # the buddy allocator's power-of-two run


# Exercise 2's prediction (capacity 64, blocks of 4, max_len 32, [13, 16, 9, 16, 5, 1]): (2, 4); the 5 stops the
# paged queue (it needs 2 blocks, 1 is free). Skipping it would admit the 1, but a long request could then wait
# for ever behind a stream of short ones (starvation): first come, first served waits instead.
def fit_requests(capacity, block_size, max_len, lengths):
    if any(n > max_len for n in lengths):
        raise ValueError(f"a length over max_len {max_len}: {max(lengths)}")
    reserve_max = min(len(lengths), capacity // max_len)      # every request reserves max_len slots
    free_blocks = capacity // block_size
    paged = 0
    for n in lengths:
        need = -(-n // block_size)                              # ceil(n / block_size)
        if need > free_blocks:
            break                                              # admission stops at the first misfit
        free_blocks -= need
        paged += 1
    return reserve_max, paged


def optimal_hit_rate(prompts):
    total = sum(len(p) for p in prompts)
    if total == 0:
        return 0.0
    prefixes = {tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}   # trie nodes
    return 1 - len(prefixes) / total
