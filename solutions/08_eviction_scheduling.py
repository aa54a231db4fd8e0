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
