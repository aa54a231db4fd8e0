"""Solutions to lesson 08 (eviction and scheduling): same names as the stubs."""


def lru_evict(root, num_tokens):
    removed = set()
    order = []
    freed = 0

    def nodes(n):
        for c in n.children.values():
            yield c
            yield from nodes(c)

    all_nodes = list(nodes(root))
    while freed < num_tokens:
        leaves = [n for n in all_nodes
                  if n.id not in removed and n.lock_ref == 0
                  and all(c.id in removed for c in n.children.values())]
        if not leaves:
            break
        victim = min(leaves, key=lambda n: (n.last_access_time, n.id))
        removed.add(victim.id)
        order.append(victim.id)
        freed += len(victim.key)
    return order


def inc_lock_ref(node):
    delta = 0
    while node.parent is not None:       # the root has no parent and is never locked again
        if node.lock_ref == 0:
            delta -= len(node.key)
        node.lock_ref += 1
        node = node.parent
    return delta


def admit_plan(root, tokens, num_free):
    # 1. the longest match, leaving at least one token to compute; keep the path
    limit = len(tokens) - 1
    node, pos, path = root, 0, []             # path: (node, how many of its tokens matched)
    while pos < limit:
        child = node.children.get(tokens[pos])
        if child is None:
            break
        k = 0
        while k < len(child.key) and pos + k < limit and child.key[k] == tokens[pos + k]:
            k += 1
        path.append((child, k))
        pos += k
        if k < len(child.key):                # the match ends inside this node
            break
        node = child
    # 2. after the lock, the matched part of the path is no longer evictable
    evictable, stack = 0, list(root.children.values())
    while stack:
        n = stack.pop()
        evictable += len(n.key) if n.lock_ref == 0 else 0
        stack.extend(n.children.values())
    evictable -= sum(k for n, k in path if n.lock_ref == 0)
    # 3. fits as it is, fits after eviction, or waits
    need = len(tokens) - pos
    if need <= num_free:
        return (pos, 0)
    if need > num_free + evictable:
        return None
    return (pos, need - num_free)
