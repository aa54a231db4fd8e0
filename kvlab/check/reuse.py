"""Checkers for the reuse lessons (01, 05 to 09): each runs the learner's function against kvlab.

Every checker takes the learner's function, runs it on several sizes, seeds and edge cases,
computes the expected answer with kvlab's own implementation (the real allocator, the real
radix tree, the real kernels' references), and prints expected beside actual with a PASS /
FAIL summary through the harness in :mod:`kvlab.check`. An exception raised by the learner's
code becomes a FAIL line naming it; the checker itself never shows a traceback.

Checkers (lesson: name -> the function it grades):
    01  count_flops            FLOPs per decode step, naive recomputation vs a KV cache
    01  attend_with_cache      one decode step: append K/V to the cache, attend over it
    05  paged_gather_kernel    a Triton kernel: the paged kernel's block loop (gather K rows)
    05  paged_decode_torch     decode attention for one sequence through its block table
    06  cow_append             append one token with copy-on-write and ref counts
    06  sampling_blocks        blocks used by parallel sampling, with and without sharing
    07  match_prefix           longest prefix match on a small radix tree
    07  prefill_tokens         tokens each request must prefill with a radix cache
    08  lru_evict              LRU eviction of unlocked leaves
    08  inc_lock_ref           lock a path of the tree (lock references)
    09  fit_requests           how many requests fit at once, reserving max_len vs paged
    09  optimal_hit_rate       the best prefix hit rate any cache could reach

What this module does not do: time anything (timings are never graded), or need a GPU.

Example:
    >>> from kvlab.check import reuse
    >>> r = reuse.sampling_blocks(lambda p, n, g, bs: (0, 0), verbose=False)
    >>> r.passed
    False
"""
from __future__ import annotations

import copy
import random
from typing import Any, Callable

from ..paged import BlockManager, OutOfBlocks, blocks_needed
from . import Checker, Raised, Raises, same_outcome

__all__ = [
    "count_flops",
    "attend_with_cache",
    "fit_requests",
    "optimal_hit_rate",
    "lru_evict",
    "inc_lock_ref",
    "match_prefix",
    "prefill_tokens",
    "cow_append",
    "sampling_blocks",
    "paged_gather_kernel",
    "paged_decode_torch",
]


# ----------------------------------------------------------------------------- plumbing
def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run the learner's code on the very arguments (no copy: some exercises work in place);
    an exception comes back as :class:`Raised`, never raised."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- the learner's bug is data here, not a crash
        return Raised(exc)


# ------------------------------------------------------------------- 06: copy-on-write
def _random_manager(rng: random.Random, num_blocks: int, block_size: int) -> BlockManager:
    """A pool with a few sequences, some forked (shared blocks), built with the real allocator."""
    m = BlockManager(num_blocks=num_blocks, block_size=block_size)
    m.add_sequence("R1", rng.randint(1, 3 * block_size))
    for i in range(rng.randint(1, 3)):
        parent = rng.choice(sorted(m.tables))
        if m.allocator.num_free_blocks >= 2:
            m.fork(parent, f"R1.{i + 1}")
            if rng.random() < 0.5:
                try:
                    m.append(f"R1.{i + 1}", rng.randint(1, block_size + 1))
                except OutOfBlocks:
                    pass
    return m


def _cow_state(m: BlockManager, seq: str) -> dict:
    t = m.tables[seq]
    return {
        "block_table": list(t.block_ids),
        "ref_count": list(m.allocator.ref_count),
        "free_blocks": list(m.allocator.free_block_ids),
    }


def cow_append(fn: Callable, verbose: bool = True):
    """Grade ``fn(block_table, num_tokens, ref_count, free_blocks, block_size) -> copies``.

    The contract (lesson 06): make room for ONE more token of a sequence whose blocks may
    be shared. ``block_table``, ``ref_count`` and ``free_blocks`` are lists changed in place;
    the free list is used from the front. Returns the copies to do, ``[]`` or ``[(src, dst)]``.
    Raise ``kvlab.OutOfBlocks`` (changing nothing) when a block is needed and none is free.
    The expected result is what ``kvlab.BlockTable.append_tokens(1)`` does on the same state.
    """
    rng = random.Random(6)
    scenarios: list[tuple[str, BlockManager, str]] = []
    # Hand-made edge cases first: shared partial block, shared full block, private partial block.
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("shared partial last block (6 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 8)
    m.fork("A", "B")
    scenarios.append(("shared FULL last block (8 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 5)
    scenarios.append(("private partial last block", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 0)
    scenarios.append(("empty sequence", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    m.fork("A", "C")
    scenarios.append(("block shared three ways", m, "C"))
    for seed in range(8):
        bs = rng.choice([2, 4, 8])
        m = _random_manager(rng, num_blocks=rng.randint(10, 16), block_size=bs)
        seq = rng.choice(sorted(m.tables))
        scenarios.append((f"random pool seed {seed} (bs {bs}), append to {seq}", m, seq))
    # Out of blocks: a shared partial block and an empty free list.
    m = BlockManager(num_blocks=2, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("no free block left (must raise OutOfBlocks)", m, "B"))

    c = Checker("cow_append", fn, verbose=verbose)
    for label, m, seq in scenarios:
        before = _cow_state(m, seq)
        mine = copy.deepcopy(before)
        num_tokens, bs = m.tables[seq].num_tokens, m.block_size
        try:
            copies = m.append(seq, 1)
            expected: Any = dict(copies=copies, **_cow_state(m, seq))
        except OutOfBlocks:
            expected = Raises(OutOfBlocks)
        if not c.ok:
            c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
            continue
        got = _call(fn, mine["block_table"], num_tokens, mine["ref_count"], mine["free_blocks"], bs)
        if isinstance(got, Raised) or isinstance(expected, Raises):
            changed = mine != before
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the lists first" if changed else "")
            continue
        actual = dict(copies=[tuple(x) for x in got] if isinstance(got, (list, tuple)) else got, **mine)
        c.record(label, expected, actual)
    return c.done()


# ---------------------------------------------------------- 06: memory saved by sharing
def measured_sampling_blocks(prompt_len: int, num_samples: int, gen_len: int, block_size: int) -> tuple[int, int]:
    """Blocks held at the end of parallel sampling, (without sharing, with sharing), measured
    by running the real :class:`kvlab.BlockManager`.

    Without sharing every sample stores its own prompt; with sharing the samples are forks of
    one prefilled prompt and copy a block only when they write into a shared one.

    Example:
        >>> measured_sampling_blocks(prompt_len=10, num_samples=4, gen_len=5, block_size=4)
        (16, 10)
    """
    total = num_samples * blocks_needed(prompt_len + gen_len, block_size) + 4
    alone = BlockManager(num_blocks=total, block_size=block_size)
    for s in range(num_samples):
        alone.add_sequence(f"S{s}", prompt_len)
    shared = BlockManager(num_blocks=total, block_size=block_size)
    shared.add_sequence("S0", prompt_len)
    for s in range(1, num_samples):
        shared.fork("S0", f"S{s}")
    for _ in range(gen_len):  # decode: every sample appends one token per step
        for s in range(num_samples):
            alone.append(f"S{s}", 1)
            shared.append(f"S{s}", 1)
    alone.check_integrity()
    shared.check_integrity()
    return alone.allocator.num_used_blocks, shared.allocator.num_used_blocks


def sampling_blocks(fn: Callable, verbose: bool = True):
    """Grade ``fn(prompt_len, num_samples, gen_len, block_size) -> (without_sharing, with_sharing)``.

    The expected numbers are measured on the real allocator (:func:`measured_sampling_blocks`).
    """
    cases_in = [(10, 4, 5, 4), (8, 4, 5, 4), (10, 4, 0, 4), (1, 1, 1, 4), (16, 3, 16, 16),
                (17, 2, 15, 16), (100, 8, 37, 16), (5, 6, 3, 1)]
    rng = random.Random(66)
    for _ in range(4):
        cases_in.append((rng.randint(1, 60), rng.randint(1, 8), rng.randint(0, 40), rng.choice([2, 4, 8, 16])))
    c = Checker("sampling_blocks", fn, reference=measured_sampling_blocks, verbose=verbose,
                compare=lambda e, a: isinstance(a, (tuple, list)) and tuple(a) == tuple(e))
    for p, n, g, bs in cases_in:
        c.run(f"prompt {p}, {n} samples, {g} new tokens each, block_size {bs}", p, n, g, bs)
    return c.done()


# ------------------------------------------------------ 05: the paged kernel's block loop
def _gather_cases() -> list[tuple[int, int, int, int, int]]:
    """(block_size, context_len, TILE_N, head_dim, seed): partial blocks, a tile of several blocks..."""
    return [(4, 5, 4, 8, 0), (4, 8, 4, 8, 1), (4, 1, 4, 8, 2), (4, 19, 16, 8, 3),
            (8, 13, 8, 16, 4), (2, 9, 8, 4, 5), (16, 3, 16, 8, 6), (4, 30, 8, 8, 7)]


def paged_gather_kernel(kernel: Callable, verbose: bool = True):
    """Grade a Triton kernel that copies one sequence's K rows out of the paged cache.

    Launched as ``kernel[(1,)](cache, block_table, out, context_len, HEAD_DIM=..,
    BLOCK_SIZE=.., TILE_N=..)`` with ``cache`` (num_blocks, BLOCK_SIZE, HEAD_DIM) fp32,
    ``block_table`` (num_logical_blocks,) int32 and ``out`` (context_len + guard, HEAD_DIM)
    fp32 pre-filled with the canary -7. Expected: ``out[:context_len]`` equals
    ``kvlab.kernels.reference.gather_kv`` of the cache, and the guard rows keep the canary
    (the interpreter does not catch out-of-bounds stores; the canary does).
    """
    import torch

    import kvlab.kernels  # noqa: F401  -- sets the kernel mode before any launch
    from kvlab.kernels import DEVICE
    from kvlab.kernels.reference import gather_kv

    c = Checker("paged_gather_kernel", kernel, verbose=verbose)
    for bs, n, tile, d, seed in _gather_cases():
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)          # shuffled physical blocks
        cache = torch.randn((num_blocks, bs, d), generator=g)                          # (num_blocks, bs, head_dim)
        guard = bs + tile
        out = torch.full((n + guard, d), -7.0)                                          # (n + guard, head_dim)
        want = gather_kv(cache[:, :, None, :], table, n)[:, 0, :]                     # (n, head_dim)
        label = f"block_size {bs}, context_len {n}, TILE_N {tile}, table {table.tolist()}"
        expected = f"rows 0..{n - 1} = K through the table; {guard} guard rows untouched"
        cache_d, table_d, out_d = cache.to(DEVICE), table.to(DEVICE), out.to(DEVICE)
        if not c.ok:
            c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
            continue
        err = _call(lambda: kernel[(1,)](cache_d, table_d, out_d, n, HEAD_DIM=d, BLOCK_SIZE=bs, TILE_N=tile))
        if isinstance(err, Raised):
            c.record(label, expected, err, passed=False)
            continue
        got = out_d.cpu()
        bad_rows = [i for i in range(n) if not torch.allclose(got[i], want[i])]
        guard_hit = [n + i for i in range(guard) if not torch.all(got[n + i] == -7.0)]
        if not bad_rows and not guard_hit:
            actual = expected
        else:
            parts = []
            if bad_rows:
                parts.append(f"wrong rows {bad_rows[:6]}{'...' if len(bad_rows) > 6 else ''}")
            if guard_hit:
                parts.append(f"wrote past context_len into rows {guard_hit[:4]}")
            actual = "; ".join(parts)
        c.record(label, expected, actual, passed=not bad_rows and not guard_hit)
    return c.done()


def paged_decode_torch(fn: Callable, verbose: bool = True):
    """Grade ``fn(q, k_cache, v_cache, block_table, context_len, scale) -> out`` (plain torch).

    q (num_heads, head_dim); k_cache, v_cache (num_blocks, block_size, num_kv_heads, head_dim);
    block_table a list of ints; out (num_heads, head_dim). Query head h uses KV head
    ``h // (num_heads // num_kv_heads)``. Expected: ``kvlab.kernels.paged_decode_attention_ref``.
    """
    import torch

    from kvlab.kernels.reference import paged_decode_attention_ref

    c = Checker("paged_decode_torch", fn, verbose=verbose)
    configs = [  # (num_heads, num_kv_heads, head_dim, block_size, context_len, seed)
        (1, 1, 8, 4, 5, 0), (2, 2, 8, 4, 8, 1), (4, 2, 8, 4, 11, 2), (4, 1, 16, 8, 3, 3),
        (8, 2, 16, 4, 1, 4), (2, 1, 4, 2, 9, 5),
    ]
    for h, kvh, d, bs, n, seed in configs:
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)
        q = torch.randn((h, d), generator=g)                                            # (num_heads, head_dim)
        k_cache = torch.randn((num_blocks, bs, kvh, d), generator=g) * 2               # (num_blocks, bs, kv_heads, head_dim)
        v_cache = torch.randn((num_blocks, bs, kvh, d), generator=g)
        scale = 1.0 / d**0.5
        want = paged_decode_attention_ref(q[None], k_cache, v_cache, table[None], torch.tensor([n]), scale=scale)[0]
        label = f"{h} heads / {kvh} KV heads, head_dim {d}, block_size {bs}, context_len {n}, table {table.tolist()}"
        exp_s = f"out[0,:3] = {[round(x, 4) for x in want[0, :3].tolist()]}"
        if not c.ok:
            c.record(label, exp_s, Raised(TypeError(c.result.error)), passed=False)
            continue
        got = _call(fn, q.clone(), k_cache.clone(), v_cache.clone(), table.tolist(), n, scale)
        if isinstance(got, Raised):
            c.record(label, exp_s, got, passed=False)
            continue
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            c.record(label, exp_s, f"shape {shape}, expected {tuple(want.shape)}", passed=False)
            continue
        ok = torch.allclose(got.float(), want, atol=1e-4, rtol=1e-4)
        act_s = f"out[0,:3] = {[round(x, 4) for x in got[0, :3].float().tolist()]}"
        if not ok:
            act_s += f" (max |diff| {float((got.float() - want).abs().max()):.3g})"
        c.record(label, exp_s, act_s, passed=bool(ok))
    return c.done()


# ------------------------------------------------------------- 07: longest prefix match
def _random_tree(rng: random.Random, num_seqs: int, alphabet: int, max_len: int) -> tuple["RadixCache", list[list[int]]]:
    """A RadixCache (page_size 1) holding ``num_seqs`` random sequences over a small alphabet."""
    from ..paged import BlockAllocator
    from ..radix import RadixCache, serve_request

    cache = RadixCache(BlockAllocator(num_seqs * max_len + 8, block_size=1))
    seqs = []
    for _ in range(num_seqs):
        base = rng.choice(seqs) if seqs and rng.random() < 0.7 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(alphabet) for _ in range(rng.randint(1, max_len - cut) if cut < max_len else 0)]
        if s:
            serve_request(cache, s)
            seqs.append(s)
    return cache, seqs


def match_prefix(fn: Callable, verbose: bool = True):
    """Grade ``fn(root, tokens) -> int``: the longest prefix match (最长前缀匹配) on a radix tree.

    ``root`` is a :class:`kvlab.radix.TreeNode` (page_size 1): ``node.children`` maps the first
    token of a child's key to the child, ``node.key`` is the list of tokens on the edge into
    the node (empty for the root). Return how many leading tokens of ``tokens`` the tree holds,
    a match may end inside an edge. Do not change the tree. Expected:
    ``RadixCache.peek_prefix_len(tokens)``; the tree must be unchanged afterwards.
    """
    from ..paged import BlockAllocator
    from ..radix import RadixCache, serve_request

    c = Checker("match_prefix", fn, verbose=verbose)
    trees: list[tuple[str, RadixCache, list[list[int]]]] = []
    cache = RadixCache(BlockAllocator(32, block_size=1))
    for s in ([1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7]):
        serve_request(cache, s)
    trees.append(("tree [1 2 3]->{[4 5], [9]}, [7 7]", cache, [
        [1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2], [1, 2, 3, 9, 9], [1, 2, 3, 8], [7, 7, 7], [7], [8], [], [1, 2, 4]]))
    trees.append(("empty tree", RadixCache(BlockAllocator(4, block_size=1)), [[1, 2], []]))
    rng = random.Random(77)
    for seed in range(4):
        cache, seqs = _random_tree(rng, num_seqs=6, alphabet=3, max_len=10)
        queries = []
        for _ in range(6):
            s = rng.choice(seqs)
            cut = rng.randint(0, len(s))
            queries.append(s[:cut] + [rng.randrange(4) for _ in range(rng.randint(0, 4))])
        trees.append((f"random tree {seed} ({cache.num_nodes} nodes)", cache, queries))
    for name, cache, queries in trees:
        for q in queries:
            label = f"{name}: tokens {q}"
            expected = cache.peek_prefix_len(q)
            before = cache.snapshot()
            if not c.ok:
                c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
                continue
            got = _call(fn, cache.root, list(q))
            changed = cache.snapshot() != before
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the tree" if changed else "")
            if changed:  # rebuild nothing: later cases on this tree would be unfair, so stop here
                break
    return c.done()


def served_prefill_tokens(prompts: list[list[int]]) -> list[int]:
    """Tokens each prompt must prefill when served in order through a real :class:`RadixCache`
    (``serve_request``: match, leaving at least one token to compute; then insert).

    Example:
        >>> served_prefill_tokens([[1, 2, 3], [1, 2, 4], [1, 2, 3]])
        [3, 1, 1]
    """
    from ..paged import BlockAllocator
    from ..radix import RadixCache, serve_request

    cache = RadixCache(BlockAllocator(sum(len(p) for p in prompts) + 1, block_size=1))
    out = [serve_request(cache, p).prefill_len for p in prompts]
    cache.check_integrity()
    return out


def prefill_tokens(fn: Callable, verbose: bool = True):
    """Grade ``fn(prompts) -> list[int]``: with a radix cache that keeps every served prompt,
    how many tokens each prompt (served in order) must prefill. At least one token of each
    prompt is always computed (its logits give the first output token). Expected:
    :func:`served_prefill_tokens` on the real tree.
    """
    from ..radix import FOUR_REQUEST_TEXTS as T, char_tokenize

    sys_, shots = char_tokenize(T["A"]), char_tokenize(T["B"])
    cases = [
        ("one prompt", [[1, 2, 3]]),
        ("same prompt twice (the last token is recomputed)", [[1, 2, 3], [1, 2, 3]]),
        ("prefix of an earlier prompt", [[1, 2, 3, 4], [1, 2]]),
        ("extends an earlier prompt", [[1, 2], [1, 2, 3, 4]]),
        ("shares only with an older prompt", [[5, 6, 7], [1, 2], [5, 6, 8]]),
        ("a common token that is not a prefix", [[1, 2, 3], [9, 2, 3]]),
        ("the notes' R1, R2, R3 (chars)", [sys_ + shots + char_tokenize(T[r]) for r in ("R1", "R2", "R3")]),
        ("empty list", []),
    ]
    rng = random.Random(7)
    for i in range(4):
        ps: list[list[int]] = []
        for _ in range(6):
            base = rng.choice(ps) if ps and rng.random() < 0.7 else []
            cut = rng.randint(0, len(base))
            ps.append(base[:cut] + [rng.randrange(3) for _ in range(rng.randint(1, 6))])
        cases.append((f"random prompts {i}", ps))
    c = Checker("prefill_tokens", fn, reference=served_prefill_tokens, verbose=verbose,
                compare=lambda e, a: isinstance(a, (list, tuple)) and list(a) == e)
    for label, ps in cases:
        c.run(f"{label}: lengths {[len(p) for p in ps]}", ps)
    return c.done()


# --------------------------------------------------------------- 08: eviction and locks
def _pressure_tree(seed: int) -> tuple["RadixCache", list]:
    """A small tree with varied access times and some locked paths (returns cache, locked nodes)."""
    from ..paged import BlockAllocator
    from ..radix import RadixCache, serve_request

    rng = random.Random(seed)
    cache = RadixCache(BlockAllocator(256, block_size=1))
    seqs: list[list[int]] = []
    for _ in range(rng.randint(4, 8)):
        base = rng.choice(seqs) if seqs and rng.random() < 0.75 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(4) for _ in range(rng.randint(1, 6))]
        serve_request(cache, s, output=[rng.randrange(4) for _ in range(rng.randint(0, 3))])
        seqs.append(s)
    for s in rng.sample(seqs, k=min(len(seqs), rng.randint(2, 5))):  # touch some again (LRU order changes)
        cache.match_prefix(s[: rng.randint(1, len(s))])
    locked = []
    for s in rng.sample(seqs, k=rng.randint(0, 2)):
        m = cache.match_prefix(s[: rng.randint(1, len(s))])
        cache.inc_lock_ref(m.last_node)
        locked.append(m.last_node)
    cache.check_integrity()
    return cache, locked


def _find(cache: "RadixCache", node_id: int):
    if node_id == 0:
        return cache.root
    return next(n for n in cache._iter_nodes() if n.id == node_id)


def _tree_state(cache: "RadixCache") -> dict:
    return {n.id: (tuple(n.key), n.lock_ref, n.last_access_time, len(n.children)) for n in [cache.root, *cache._iter_nodes()]}


def lru_evict(fn: Callable, verbose: bool = True):
    """Grade ``fn(root, num_tokens) -> list of node ids``: the nodes LRU eviction removes, in order.

    Rules (SGLang's, as ``RadixCache.evict`` with policy ``"lru"``): only leaves with
    ``lock_ref == 0`` can go, never the root; the one with the smallest
    ``(last_access_time, id)`` goes first; when a node's last child goes, it becomes a leaf and
    may go next; stop as soon as at least ``num_tokens`` tokens (``len(node.key)`` each) are
    freed, or when nothing is evictable. Do not change the tree. Expected: what
    ``RadixCache.evict(num_tokens)`` removes on a copy of the same tree.
    """
    c = Checker("lru_evict", fn, verbose=verbose)
    for seed in range(8):
        cache, _locked = _pressure_tree(seed)
        total = cache.evictable_size()
        for want in sorted({1, max(1, total // 3), total, total + 5}):
            ref = copy.deepcopy(cache)
            expected = ref.evict(want).node_ids
            label = f"tree {seed} ({cache.num_nodes} nodes, {total} evictable tokens, {cache.protected_size()} locked): evict {want}"
            if not c.ok:
                c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
                continue
            before = _tree_state(cache)
            got = _call(fn, cache.root, want)
            changed = _tree_state(cache) != before
            if isinstance(got, (list, tuple)):
                got = list(got)
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the tree" if changed else "")
            if changed:
                break
    return c.done()


def inc_lock_ref(fn: Callable, verbose: bool = True):
    """Grade ``fn(node) -> int``: lock ``node`` and every ancestor below the root.

    Each node from ``node`` up to (not including) the root gets ``lock_ref += 1``; return the
    change of the evictable size: minus the tokens of every node that was unlocked
    (``lock_ref == 0``) before. The root (``parent is None``) is never touched. Expected:
    ``RadixCache.inc_lock_ref`` on a copy of the same tree; every node's ``lock_ref`` is compared.
    """
    c = Checker("inc_lock_ref", fn, verbose=verbose)
    for seed in range(8):
        cache, _locked = _pressure_tree(100 + seed)
        rng = random.Random(seed)
        ids = [n.id for n in cache._iter_nodes()]
        for node_id in rng.sample(ids, k=min(3, len(ids))) + ([0] if seed == 0 else []):
            ref, mine = copy.deepcopy(cache), copy.deepcopy(cache)
            delta = ref.inc_lock_ref(_find(ref, node_id))
            expected = {"returned": delta, "lock_ref": {n: s[1] for n, s in _tree_state(ref).items()}}
            label = f"tree {seed} ({cache.num_nodes} nodes), lock node {node_id}" + (" (the root)" if node_id == 0 else "")
            if not c.ok:
                c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
                continue
            got = _call(fn, _find(mine, node_id))
            if isinstance(got, Raised):
                c.record(label, expected, got)
                continue
            c.record(label, expected, {"returned": got, "lock_ref": {n: s[1] for n, s in _tree_state(mine).items()}})
    return c.done()


# ------------------------------------------------------------------------- 09: at scale
def measured_fit(capacity: int, block_size: int, max_len: int, lengths: list[int]) -> tuple[int, int]:
    """How many of ``lengths`` (admitted in order, stopping at the first that does not fit)
    fit at once, (reserving max_len contiguously, paged), on the real arena and allocator.

    Example:
        >>> measured_fit(capacity=64, block_size=4, max_len=32, lengths=[5, 9, 3, 20])
        (2, 4)
    """
    from ..contiguous import ContiguousArena, OutOfContiguousSpace

    def admitted(admit: Callable[[str, int], object], full: type) -> int:
        """Admit the requests in order; how many went in before the first that did not fit."""
        for i, n in enumerate(lengths):
            try:
                admit(f"R{i}", n)
            except full:
                return i
        return len(lengths)

    arena = ContiguousArena(capacity=capacity, policy="max", max_len=max_len)
    m = BlockManager(num_blocks=capacity // block_size, block_size=block_size)
    contiguous = admitted(arena.admit, OutOfContiguousSpace)
    paged = admitted(m.add_sequence, OutOfBlocks)
    m.check_integrity()
    return contiguous, paged


def fit_requests(fn: Callable, verbose: bool = True):
    """Grade ``fn(capacity, block_size, max_len, lengths) -> (reserve_max, paged)``: how many
    requests of the given token lengths fit at once in ``capacity`` token slots, admitted in
    order until the first one that does not fit, when each reserves ``max_len`` contiguous
    slots, and when each takes ``ceil(length / block_size)`` blocks of a pool of
    ``capacity // block_size`` blocks. Expected: :func:`measured_fit` (real arena, real allocator).
    """
    cases = [(64, 4, 32, [5, 9, 3, 20]), (64, 4, 16, [16, 16, 16, 16, 1]), (64, 16, 64, [1, 1, 1, 1, 1]),
             (100, 8, 30, [7, 8, 9, 30, 2, 2]), (4096, 16, 2048, [161, 338, 90, 700, 1200, 55, 400]),
             (10, 4, 10, [10, 1]), (32, 4, 8, [])]
    rng = random.Random(9)
    for _ in range(5):
        bs = rng.choice([1, 2, 4, 8, 16])
        max_len = rng.choice([16, 32, 64])
        cases.append((rng.randint(max_len, 6 * max_len), bs, max_len,
                      [rng.randint(1, max_len) for _ in range(rng.randint(1, 12))]))
    c = Checker("fit_requests", fn, reference=measured_fit, verbose=verbose,
                compare=lambda e, a: isinstance(a, (tuple, list)) and tuple(a) == tuple(e))
    for cap, bs, ml, lengths in cases:
        c.run(f"capacity {cap}, block_size {bs}, max_len {ml}, lengths {lengths}", cap, bs, ml, lengths)
    return c.done()


def optimal_prompt_hit_rate(prompts: list[list[int]]) -> float:
    """The best prefix hit rate for ``prompts`` with unlimited memory: :func:`kvlab.sim.optimal_hit_rate`
    of a trace holding them (outputs not counted).

    Example:
        >>> optimal_prompt_hit_rate([list(range(10)), list(range(8)) + [50, 51]])
        0.4
    """
    from ..sim.workloads import Request, Trace, optimal_hit_rate

    reqs = [Request(i, 0.0, len(p), 1, tuple(p), ()) for i, p in enumerate(prompts)]
    return optimal_hit_rate(Trace("prompts", reqs))


def optimal_hit_rate(fn: Callable, verbose: bool = True):
    """Grade ``fn(prompts) -> float``: the best hit rate any prefix cache could reach on these
    prompts with unlimited memory: 1 - (distinct prefixes, i.e. tokens of a trie of the
    prompts) / (all prompt tokens). Expected: :func:`optimal_prompt_hit_rate` (kvlab.sim).
    """
    from ..radix import FOUR_REQUEST_TEXTS as T, char_tokenize

    a, b = char_tokenize(T["A"]), char_tokenize(T["B"])
    cases = [
        ("two prompts sharing 8 tokens", [list(range(10)), list(range(8)) + [50, 51]]),
        ("one prompt", [[1, 2, 3]]),
        ("the same prompt three times", [[1, 2, 3]] * 3),
        ("a prompt and its prefix", [[1, 2, 3, 4], [1, 2]]),
        ("no sharing", [[1, 2], [3, 4], [5]]),
        ("same tokens, different order", [[1, 2, 3], [3, 2, 1]]),
        ("the notes' R1, R2, R3 (chars)", [a + b + char_tokenize(T[r]) for r in ("R1", "R2", "R3")]),
    ]
    rng = random.Random(99)
    for i in range(5):
        ps: list[list[int]] = []
        for _ in range(rng.randint(2, 8)):
            base = rng.choice(ps) if ps and rng.random() < 0.7 else []
            cut = rng.randint(0, len(base))
            ps.append(base[:cut] + [rng.randrange(3) for _ in range(rng.randint(1, 6))])
        cases.append((f"random prompts {i}", ps))
    c = Checker("optimal_hit_rate", fn, reference=optimal_prompt_hit_rate, verbose=verbose,
                compare=lambda e, a: isinstance(a, (int, float)) and abs(a - e) < 1e-9)
    for label, ps in cases:
        c.run(f"{label}: lengths {[len(p) for p in ps]}", ps)
    return c.done()


# ----------------------------------------------------------------- 01: why a KV cache
def generate_step_flops(prompt_len: int, new_tokens: int) -> tuple[list[int], list[int]]:
    """FLOPs per step that :func:`kvlab.generate.generate` counts on the bundled model,
    (naive recomputation, contiguous cache), for a prompt of ``prompt_len`` tokens."""
    from ..generate import generate

    import torch

    model, _tok = _bundled()
    ids = [(7 * i + 3) % model.config.vocab_size for i in range(prompt_len)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and immune to a busy machine
    try:
        naive = generate(model, ids, new_tokens, strategy="naive").step_flops
        cached = generate(model, ids, new_tokens, strategy="contiguous").step_flops
    finally:
        torch.set_num_threads(threads)
    return list(naive), list(cached)


_BUNDLED: list = []


def _bundled():
    """The bundled model and tokenizer, loaded once per process."""
    if not _BUNDLED:
        import kvlab.kernels  # noqa: F401  -- the kernel mode is decided before anything imports triton
        from ..model import load_bundled

        _BUNDLED.append(load_bundled())
    return _BUNDLED[0]


def count_flops(fn: Callable, verbose: bool = True):
    """Grade ``fn(flops_per_token, prompt_len, new_tokens) -> (naive_steps, cached_steps)``.

    ``flops_per_token(c)``: FLOPs to run one token that attends to ``c`` tokens (itself
    included). Step 0 yields the first new token; step t yields token t. Naive recomputation
    runs the whole sequence at every step (step t: ``prompt_len + t`` tokens, the i-th of
    them attending to i tokens); with a cache, step 0 is the prefill of the prompt and every
    later step runs one token. Return one list per strategy, ``new_tokens`` FLOP counts each.
    Expected: the per-step FLOPs that ``kvlab.generate.generate`` counts on the bundled model
    (strategies ``"naive"`` and ``"contiguous"``).
    """
    model, _tok = _bundled()
    c = Checker("count_flops", fn, verbose=verbose,
                compare=lambda e, a: isinstance(a, (tuple, list)) and len(a) == 2 and [list(x) for x in a] == [list(x) for x in e])
    for p, n in [(1, 1), (1, 4), (5, 1), (5, 6), (12, 3), (30, 10)]:
        expected = generate_step_flops(p, n)
        label = f"prompt {p} tokens, {n} new tokens"
        if not c.ok:
            c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
            continue
        c.record(label, expected, _call(fn, model.flops_per_token, p, n))
    return c.done()


def attend_with_cache(fn: Callable, verbose: bool = True):
    """Grade ``fn(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)``: one decode step.

    q (num_heads, head_dim) is the new token's query; k_new, v_new (num_kv_heads, head_dim) its
    key and value; k_cache, v_cache (T, num_kv_heads, head_dim) the cache of the T earlier tokens
    (T may be 0). Append the new K/V to the cache, then attend q over all T + 1 tokens (scale
    1/sqrt(head_dim); query head h uses KV head ``h // (num_heads // num_kv_heads)``). Return the
    output (num_heads, head_dim) and the grown caches (T + 1, num_kv_heads, head_dim). Run token
    by token from an empty cache, each output must equal ``kvlab.kernels.naive_attention`` over
    the whole sequence recomputed (causal), at that position.
    """
    import torch

    from kvlab.kernels import naive_attention

    c = Checker("attend_with_cache", fn, verbose=verbose)
    for h, kvh, d, n, seed in [(1, 1, 8, 4, 0), (2, 2, 8, 6, 1), (4, 2, 16, 7, 2), (4, 1, 8, 5, 3), (8, 2, 4, 3, 4)]:
        g = torch.Generator().manual_seed(seed)
        q = torch.randn((n, h, d), generator=g)                                     # (n, heads, head_dim)
        k = torch.randn((n, kvh, d), generator=g)                                   # (n, kv_heads, head_dim)
        v = torch.randn((n, kvh, d), generator=g)
        want = naive_attention(q, k, v, causal=True)                                # (n, heads, head_dim)
        label = f"{h} heads / {kvh} KV heads, head_dim {d}, {n} tokens one by one"
        expected = f"{n} steps match recomputation; cache grows to ({n}, {kvh}, {d})"
        if not c.ok:
            c.record(label, expected, Raised(TypeError(c.result.error)), passed=False)
            continue
        kc, vc = torch.zeros((0, kvh, d)), torch.zeros((0, kvh, d))
        actual = expected
        for t in range(n):
            got = _call(fn, q[t].clone(), k[t].clone(), v[t].clone(), kc, vc)
            if isinstance(got, Raised):
                actual = f"step {t}: {got!r}"
                break
            try:
                out, kc, vc = got
                shape_ok = tuple(out.shape) == (h, d) and tuple(kc.shape) == (t + 1, kvh, d) and tuple(vc.shape) == (t + 1, kvh, d)
            except Exception as exc:  # noqa: BLE001
                actual = f"step {t}: returned {type(got).__name__}, not (out, k_cache, v_cache) ({exc})"
                break
            if not shape_ok:
                actual = f"step {t}: shapes out {tuple(out.shape)}, k_cache {tuple(kc.shape)}, v_cache {tuple(vc.shape)}"
                break
            if not torch.allclose(out.float(), want[t], atol=1e-4, rtol=1e-4):
                actual = f"step {t}: max |out - recomputed| = {float((out.float() - want[t]).abs().max()):.3g}"
                break
        c.record(label, expected, actual, passed=actual == expected)
    return c.done()
