"""Solutions to lesson 10's exercises (injected by tests/test_notebooks.py; learners: try first)."""


def write_back_evict(leaves, host_free, need):
    state = {name: "both" if backed else "device" for name, _, backed in leaves}
    pages = {name: p for name, p, _ in leaves}
    host_only = []  # leaves that left the device with a host copy, oldest first
    freed = 0
    for name, p, backed in leaves:
        if freed >= need:
            break
        if not backed:
            evictable = sum(pages[n] for n in host_only)
            if host_free < p and host_free + evictable >= p:
                while host_free < p:  # host eviction: the oldest host-only leaf leaves for good
                    old = host_only.pop(0)
                    state[old] = "evicted"
                    host_free += pages[old]
            if host_free >= p:
                host_free -= p
                backed = True
        state[name] = "host" if backed else "evicted"
        if backed:
            host_only.append(name)
        freed += p
    return state


def load_back_plan(segments, prompt_len, threshold):
    limit = prompt_len - 1
    device = beyond = pos = 0
    for tokens, where in segments:
        take = min(tokens, limit - pos)
        if take <= 0:
            break
        if where in ("device", "both") and beyond == 0:
            device += take
        else:
            beyond += take
        pos += take
    loaded = beyond if beyond and beyond >= threshold else 0
    return device, loaded, prompt_len - device - loaded


def next_placement(state, event, storage=False):
    table = {
        ("new", "insert"): "device",
        ("device", "write"): "both",
        ("device", "evict"): "evicted",
        ("both", "evict"): "host",
        ("host", "load_back"): "both",
        ("disk", "load_back"): "device",
        ("host", "evict_host"): "disk" if storage else "evicted",
        ("disk", "miss"): "evicted",
    }
    if (state, event) not in table:
        raise ValueError(f"a {state} node cannot {event}")
    return table[(state, event)]


def arc_victims(t1, t2, target, need):
    t1, t2, out, freed = list(t1), list(t2), [], 0
    while freed < need and (t1 or t2):
        from_t1 = t1 and (sum(p for _, p in t1) >= target or not t2)
        name, pages = (t1 if from_t1 else t2).pop(0)
        out.append(name)
        freed += pages
    return out
