"""Solutions to lesson 09 (at scale): same names as the stubs."""


def fit_requests(capacity, block_size, max_len, lengths):
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
