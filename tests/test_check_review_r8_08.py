"""Review r8 of lesson 08, exercise 1 (lru_evict): an answer that evicts in rounds (every current leaf,
oldest first, and only then the parents they leave childless) was rejected, but its first failure named
nothing and a later one blamed ``hit_count``, which the answer never used. Every failure must name the
rounds mistake, and none may mention hit_count."""
from kvlab import check


def _rounds(root, num_tokens):
    """The reviewer's lru_evict (answer 1g): all of this round's leaves go before their parents are looked at."""
    gone, out, freed = set(), [], 0

    def kids(n):
        return [c for c in n.children.values() if c.id not in gone]

    def allnodes(n):
        for c in n.children.values():
            yield c
            yield from allnodes(c)

    while freed < num_tokens:
        cands = sorted([n for n in allnodes(root) if n.id not in gone and not kids(n) and n.lock_ref == 0],
                       key=lambda n: (n.last_access_time, n.id))
        if not cands:
            break
        for v in cands:
            if freed >= num_tokens:
                break
            gone.add(v.id); out.append(v.id); freed += len(v.key)  # noqa: E702 (as typed)
    return out


def test_evicting_in_rounds_is_named_on_every_failure():
    r = check.lru_evict(_rounds, verbose=False)
    assert not r.passed
    assert r.failures
    for f in r.failures:
        assert "re-pick the oldest after every removal" in f.note, (f.label, f.note)
        assert "hit_count" not in f.note, (f.label, f.note)
