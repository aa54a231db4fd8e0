"""Solutions to lesson 12 (a real server): same names as the stubs."""


def predict_cached(nodes, prompt, page_size):
    children = {}
    for n in nodes:
        if not n["evicted"]:                    # a ghost's tokens are gone
            children.setdefault(n["parent"], []).append(n)
    node, pos = 0, 0
    while pos < len(prompt):
        nxt, k = None, 0
        for child in children.get(node, []):   # with pages, two children may share a first token
            ids = child["ids"]
            m = 0
            while m < len(ids) and pos + m < len(prompt) and ids[m] == prompt[pos + m]:
                m += 1
            if m > k:
                nxt, k = child, m
        if nxt is None:
            break
        pos += k
        if k < len(nxt["ids"]):                 # the match ends inside this node
            break
        node = nxt["id"]
    pos = min(pos, len(prompt) - 1)             # the last token is always computed
    return pos // page_size * page_size         # whole pages only


def pick_worker(sent, text, loads):
    lo, hi = min(loads), max(loads)
    if hi - lo > 64 and hi > 1.5 * lo:          # unbalanced: the least loaded worker
        return loads.index(lo)
    best, best_match = 0, -1
    for w, texts in enumerate(sent):
        for s in texts:
            n = 0
            while n < min(len(s), len(text)) and s[n] == text[n]:
                n += 1
            if n > best_match or (n == best_match and w < best):
                best, best_match = w, n
        if not texts and best_match < 0:
            best, best_match = w, 0
    if best_match / len(text) > 0.3:
        return best
    sizes = []
    for texts in sent:                          # characters each worker's tree holds
        prefixes = set()
        for s in texts:
            for k in range(1, len(s) + 1):
                prefixes.add(s[:k])
        sizes.append(len(prefixes))
    return sizes.index(min(sizes))
