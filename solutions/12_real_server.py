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
    match = []
    for texts in sent:                          # each worker's longest prefix match
        best = 0
        for s in texts:
            n = 0
            while n < min(len(s), len(text)) and s[n] == text[n]:
                n += 1
            best = max(best, n)
        match.append(best)
    w = match.index(max(match))                 # the first of the longest
    if match[w] / len(text) > 0.3:
        return w
    return loads.index(lo)                      # a miss: the least loaded worker (sglang-router 0.3.2)


def router_flags():
    return {"--policy": "cache_aware", "--cache-threshold": 0.3,
            "--balance-abs-threshold": 64, "--balance-rel-threshold": 1.5}
