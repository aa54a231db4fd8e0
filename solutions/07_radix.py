"""Solutions to lesson 07 (RadixAttention): same names as the stubs."""


def match_prefix(root, tokens):
    node, pos = root, 0
    while pos < len(tokens):
        child = node.children.get(tokens[pos])
        if child is None:
            break
        key = child.key
        i = 0
        while i < len(key) and pos + i < len(tokens) and key[i] == tokens[pos + i]:
            i += 1
        pos += i
        if i < len(key):          # the match ends inside this edge
            break
        node = child
    return pos


def prefill_tokens(prompts):
    seen = []
    out = []
    for p in prompts:
        best = 0
        for q in seen:            # the longest common prefix with anything cached so far
            n = 0
            while n < min(len(p), len(q)) and p[n] == q[n]:
                n += 1
            best = max(best, n)
        out.append(len(p) - min(best, len(p) - 1))
        seen.append(p)
    return out


def block_hash_reuse(prompts, block_size):
    cached = set()            # every full-block prefix served so far: p[:k * block_size]
    out = []
    for p in prompts:
        limit = (len(p) - 1) // block_size      # at most len(p) - 1 tokens, in whole blocks
        n = 0
        while n < limit and tuple(p[:(n + 1) * block_size]) in cached:
            n += 1                              # this block and every block before it match
        out.append(n * block_size)
        for k in range(1, len(p) // block_size + 1):
            cached.add(tuple(p[:k * block_size]))
    return out
