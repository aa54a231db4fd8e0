"""The checkers of lessons 01 and 05-09 accept the solutions and reject plausible wrong answers.

Each checker gets the solution from solutions/ (must PASS), an untouched stub (must FAIL
cleanly, without raising), and at least two plausible wrong implementations (must FAIL).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvlab import check
from kvlab.memory.block_pool import OutOfBlocks
from kvlab.memory.block_table import blocks_needed


ROOT = Path(__file__).resolve().parent.parent


def solution(lesson: str):
    path = ROOT / "solutions" / f"{lesson}.py"
    spec = importlib.util.spec_from_file_location(f"solution_{lesson}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stub(*args, **kwargs):
    raise NotImplementedError("your code here")


def passes(checker, fn) -> bool:
    return checker(fn, verbose=False).passed


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


# ------------------------------------------------------------------------------ 06 sharing


S06 = solution("06_sharing")


def cow_no_decref(table, n, rc, free, bs):
    """Forgets to drop the shared block's reference."""
    if n % bs == 0:
        b = free.pop(0); rc[b] = 1; table.append(b); return []
    src = table[-1]
    if rc[src] == 1:
        return []
    dst = free.pop(0); rc[dst] = 1; table[-1] = dst
    return [(src, dst)]


def cow_shared_first(table, n, rc, free, bs):
    """Checks 'shared?' before 'full?': copies a shared FULL block instead of taking a new one."""
    if table and rc[table[-1]] > 1:
        src = table[-1]; dst = free.pop(0); rc[dst] = 1; rc[src] -= 1; table[-1] = dst
        return [(src, dst)]
    if n % bs == 0:
        b = free.pop(0); rc[b] = 1; table.append(b)
    return []


def cow_always_copy(table, n, rc, free, bs):
    """Copies a partial block even when it is private."""
    if n % bs == 0:
        b = free.pop(0); rc[b] = 1; table.append(b); return []
    src = table[-1]; dst = free.pop(0); rc[dst] = 1; rc[src] -= 1; table[-1] = dst
    return [(src, dst)]


def cow_pop_back(table, n, rc, free, bs):
    if n % bs == 0:
        b = free.pop(); rc[b] = 1; table.append(b); return []
    src = table[-1]
    if rc[src] == 1:
        return []
    dst = free.pop(); rc[dst] = 1; rc[src] -= 1; table[-1] = dst
    return [(src, dst)]


def cow_pop_before_check(table, n, rc, free, bs):
    """Raises OutOfBlocks but only after changing the ref counts."""
    if n % bs and rc[table[-1]] > 1:
        rc[table[-1]] -= 1
    if not free:
        raise OutOfBlocks(1, 0)
    return S06.cow_append(table, n, rc, free, bs)


def test_cow_append_accepts_solution_rejects_wrong():
    assert passes(check.cow_append, S06.cow_append)
    for wrong in (stub, cow_no_decref, cow_shared_first, cow_always_copy, cow_pop_back, cow_pop_before_check):
        assert not passes(check.cow_append, wrong), wrong.__name__


def sampling_share_partial(p, n, g, bs):
    """Thinks the partial prompt block stays shared too."""
    prompt = blocks_needed(p, bs)
    return n * blocks_needed(p + g, bs), prompt + n * (blocks_needed(p + g, bs) - prompt)


def sampling_ceil_everything(p, n, g, bs):
    """Counts the generated tokens of all samples together."""
    return n * blocks_needed(p + g, bs), blocks_needed(p, bs) + blocks_needed(n * g, bs)


def sampling_no_g0(p, n, g, bs):
    """Forgets that nothing is copied when nothing is generated."""
    full = p // bs
    return n * blocks_needed(p + g, bs), full + n * (blocks_needed(p + g, bs) - full)


def test_sampling_blocks_accepts_solution_rejects_wrong():
    assert passes(check.sampling_blocks, S06.sampling_blocks)
    for wrong in (stub, sampling_share_partial, sampling_ceil_everything, sampling_no_g0, lambda *a: 3):
        assert not passes(check.sampling_blocks, wrong)


def test_checker_prints_expected_and_actual(capsys):
    r = check.sampling_blocks(sampling_no_g0)
    out = capsys.readouterr().out
    assert "expected (12, 3)" in out and "actual   (12, 6)" in out and out.strip().splitlines()[0].startswith("FAIL")
    assert not r.passed


# ------------------------------------------------------------------------ 05 paged kernel
S05 = solution("05_paged_kernel")


def _gather_template():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(cache_ptr, block_table_ptr, out_ptr, context_len,
               HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
               RULE: tl.constexpr, MASKED: tl.constexpr, LOOP: tl.constexpr, LOADS_MASKED: tl.constexpr):
        offs_t = tl.arange(0, TILE_N)
        offs_d = tl.arange(0, HEAD_DIM)
        num_tiles = (context_len + TILE_N - 1) // TILE_N
        if not LOOP:
            num_tiles = 1
        for tile in range(0, num_tiles):
            pos = tile * TILE_N + offs_t
            valid = pos < context_len
            if LOADS_MASKED:
                physical = tl.load(block_table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)
            else:
                physical = tl.load(block_table_ptr + pos // BLOCK_SIZE)
            if RULE == "no_table":
                slot = pos
            elif RULE == "div_offset":
                slot = physical * BLOCK_SIZE + pos // BLOCK_SIZE
            else:
                slot = physical * BLOCK_SIZE + pos % BLOCK_SIZE
            if LOADS_MASKED:
                k = tl.load(cache_ptr + slot[:, None] * HEAD_DIM + offs_d[None, :], mask=valid[:, None], other=0.0)
            else:
                k = tl.load(cache_ptr + slot[:, None] * HEAD_DIM + offs_d[None, :])
            if RULE == "slot_store":
                tl.store(out_ptr + slot[:, None] * HEAD_DIM + offs_d[None, :], k, mask=valid[:, None])
            elif MASKED:
                tl.store(out_ptr + pos[:, None] * HEAD_DIM + offs_d[None, :], k, mask=valid[:, None])
            else:
                tl.store(out_ptr + pos[:, None] * HEAD_DIM + offs_d[None, :], k)

    return kernel


class _GatherVariant:
    """Launches the template with one plausible bug switched on (``kernel[(1,)](...)`` like a JIT kernel)."""

    template = None

    def __init__(self, rule: str, masked: bool = True, loop: bool = True, loads_masked: bool = True) -> None:
        if _GatherVariant.template is None:
            _GatherVariant.template = _gather_template()
        self.flags = dict(RULE=rule, MASKED=masked, LOOP=loop, LOADS_MASKED=loads_masked)

    def __call__(self, *args, **kwargs):
        raise TypeError("launch with kernel[grid](...)")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.template[grid](*args, **kwargs, **self.flags)


def test_paged_gather_kernel_accepts_solution_rejects_wrong():
    assert passes(check.paged_gather_kernel, S05.paged_gather_kernel)
    assert passes(check.paged_gather_kernel, _GatherVariant("right"))  # the template itself is right
    wrong = [_GatherVariant("no_table"), _GatherVariant("div_offset"),
             _GatherVariant("right", masked=False), _GatherVariant("right", loop=False), stub, lambda *a: None]
    for w in wrong:
        assert not passes(check.paged_gather_kernel, w)


def decode_no_scale(q, k, v, table, n, scale):
    return S05.paged_decode_torch(q, k, v, table, n, 1.0)


def decode_ignores_table(q, k, v, table, n, scale):
    return S05.paged_decode_torch(q, k, v, list(range(len(table))), n, scale)


def decode_whole_blocks(q, k, v, table, n, scale):
    bs = k.shape[1]
    return S05.paged_decode_torch(q, k, v, table, -(-n // bs) * bs, scale)


def decode_gqa_modulo(q, k, v, table, n, scale):
    """Maps query head h to KV head h % num_kv_heads instead of h // group."""
    h, kvh = q.shape[0], k.shape[2]
    idx = [i % kvh for i in range(h)]
    return S05.paged_decode_torch(q, k[:, :, idx], v[:, :, idx], table, n, scale)


def test_paged_decode_torch_accepts_solution_rejects_wrong():
    assert passes(check.paged_decode_torch, S05.paged_decode_torch)
    for wrong in (stub, decode_no_scale, decode_ignores_table, decode_whole_blocks, decode_gqa_modulo):
        assert not passes(check.paged_decode_torch, wrong), wrong.__name__


# ----------------------------------------------------------------------------------- 07 radix
S07 = solution("07_radix")


def lpm_full_edges_only(root, tokens):
    """Forgets that a match can end inside an edge."""
    node, pos = root, 0
    while pos < len(tokens):
        child = node.children.get(tokens[pos])
        if child is None or tokens[pos:pos + len(child.key)] != child.key:
            break
        pos, node = pos + len(child.key), child
    return pos


def lpm_first_child(root, tokens):
    """Always follows the first child instead of the one keyed by the next token."""
    node, pos = root, 0
    while node.children and pos < len(tokens):
        child = next(iter(node.children.values()))
        i = 0
        while i < len(child.key) and pos + i < len(tokens) and child.key[i] == tokens[pos + i]:
            i += 1
        pos += i
        if i < len(child.key):
            break
        node = child
    return pos


def lpm_mutates(root, tokens):
    """Right answer, but it prunes the tree while walking."""
    n = S07.match_prefix(root, tokens)
    root.children.clear()
    return n


def test_match_prefix_accepts_solution_rejects_wrong():
    assert passes(check.match_prefix, S07.match_prefix)
    for wrong in (stub, lpm_full_edges_only, lpm_first_child, lpm_mutates, lambda root, t: len(t)):
        assert not passes(check.match_prefix, wrong)


def prefill_no_cap(prompts):
    """Forgets that the last prompt token is always computed."""
    out, seen = [], []
    for p in prompts:
        best = max((next((i for i, (a, b) in enumerate(zip(p, q)) if a != b), min(len(p), len(q))) for q in seen), default=0)
        out.append(len(p) - best)
        seen.append(p)
    return out


def prefill_previous_only(prompts):
    """Compares only with the previous prompt, not with everything cached."""
    out, prev = [], []
    for p in prompts:
        n = 0
        while n < min(len(p), len(prev)) and p[n] == prev[n]:
            n += 1
        out.append(len(p) - min(n, len(p) - 1))
        prev = p
    return out


def prefill_shared_tokens(prompts):
    """Counts tokens in common anywhere, not a common prefix."""
    out, seen = [], set()
    for p in prompts:
        hits = sum(1 for t in p if t in seen)
        out.append(max(1, len(p) - hits))
        seen.update(p)
    return out


def test_prefill_tokens_accepts_solution_rejects_wrong():
    assert passes(check.prefill_tokens, S07.prefill_tokens)
    for wrong in (stub, prefill_no_cap, prefill_previous_only, prefill_shared_tokens):
        assert not passes(check.prefill_tokens, wrong), wrong.__name__


# ------------------------------------------------------------------ 08 eviction, scheduling
S08 = solution("08_eviction_scheduling")


def _below(root):
    for c in root.children.values():
        yield c
        yield from _below(c)


def _evict_by(key, respect_locks=True, cascade=True):
    """An eviction order builder with one rule switched (each a plausible bug)."""
    def fn(root, num_tokens):
        nodes, removed, order, freed = list(_below(root)), set(), [], 0
        if not cascade:
            leaves = sorted((n for n in nodes if not n.children and n.lock_ref == 0), key=key)
            for n in leaves:
                if freed >= num_tokens:
                    break
                order.append(n.id)
                freed += len(n.key)
            return order
        while freed < num_tokens:
            cands = [n for n in nodes if n.id not in removed and (n.lock_ref == 0 or not respect_locks)
                     and all(c.id in removed for c in n.children.values())]
            if not cands:
                break
            v = min(cands, key=key)
            removed.add(v.id)
            order.append(v.id)
            freed += len(v.key)
        return order
    return fn


def test_lru_evict_accepts_solution_rejects_wrong():
    lru = lambda n: (n.last_access_time, n.id)  # noqa: E731
    assert passes(check.lru_evict, S08.lru_evict)
    assert passes(check.lru_evict, _evict_by(lru))  # the builder itself is right
    wrong = [stub, _evict_by(lru, respect_locks=False), _evict_by(lru, cascade=False),
             _evict_by(lambda n: (-n.last_access_time, n.id)), _evict_by(lambda n: (len(n.key), n.id)),
             lambda root, k: S08.lru_evict(root, k + 1)]
    for w in wrong:
        assert not passes(check.lru_evict, w)


def lock_node_only(node):
    d = -len(node.key) if node.lock_ref == 0 else 0
    node.lock_ref += 1
    return d


def lock_with_root(node):
    d = 0
    while node is not None:
        if node.lock_ref == 0:
            d -= len(node.key)
        node.lock_ref += 1
        node = node.parent
    return d


def lock_counts_locked_too(node):
    d = 0
    while node.parent is not None:
        d -= len(node.key)
        node.lock_ref += 1
        node = node.parent
    return d


def test_inc_lock_ref_accepts_solution_rejects_wrong():
    assert passes(check.inc_lock_ref, S08.inc_lock_ref)
    for wrong in (stub, lock_node_only, lock_with_root, lock_counts_locked_too, lambda n: -S08.inc_lock_ref(n)):
        assert not passes(check.inc_lock_ref, wrong)


# -------------------------------------------------------------------------------- 09 at scale
S09 = solution("09_at_scale")


def _est(o, mode, max_len):
    return max_len if mode == "max" else (1 << (o - 1).bit_length()) if mode == "pow2" else o


def orca_no_rounding(p, o, mode, block_size=16, max_len=2048):
    """Forgets the buddy allocator's power-of-two run."""
    S09.orca_reservation(p, o, mode, block_size, max_len)  # same errors
    return -(-min(p + _est(o, mode, max_len), max_len) // block_size)


def orca_floor_blocks(p, o, mode, block_size=16, max_len=2048):
    """Rounds the blocks down before the power of two."""
    S09.orca_reservation(p, o, mode, block_size, max_len)
    b = max(1, min(p + _est(o, mode, max_len), max_len) // block_size)
    return 1 << (b - 1).bit_length()


def orca_tokens(p, o, mode, block_size=16, max_len=2048):
    """Returns token slots, not blocks."""
    return block_size * S09.orca_reservation(p, o, mode, block_size, max_len)


def orca_pow2_of_total(p, o, mode, block_size=16, max_len=2048):
    """Orca (Pow2) rounding prompt + output instead of the output."""
    if mode != "pow2":
        return S09.orca_reservation(p, o, mode, block_size, max_len)
    b = -(-min(1 << (p + o - 1).bit_length(), max_len) // block_size)
    return 1 << (b - 1).bit_length()


def orca_no_cap(p, o, mode, block_size=16, max_len=2048):
    """Forgets min(prompt + estimate, max_len)."""
    S09.orca_reservation(p, o, mode, block_size, max_len)
    b = -(-(p + _est(o, mode, max_len)) // block_size)
    return 1 << (b - 1).bit_length()


def orca_estimate_only(p, o, mode, block_size=16, max_len=2048):
    """Reserves the estimate without the prompt."""
    S09.orca_reservation(p, o, mode, block_size, max_len)
    b = -(-min(_est(o, mode, max_len), max_len) // block_size)
    return 1 << (b - 1).bit_length()


def orca_any_mode(p, o, mode, block_size=16, max_len=2048):
    """Treats an unknown mode as the oracle instead of raising."""
    return S09.orca_reservation(p, o, mode if mode in ("max", "pow2") else "oracle", block_size, max_len)


def test_orca_reservation_accepts_solution_rejects_wrong_and_names_the_mistake():
    from kvlab.check.l09_at_scale import orca_reservation

    assert passes(orca_reservation, S09.orca_reservation)
    wrongs = (stub, orca_no_rounding, orca_floor_blocks, orca_tokens, orca_pow2_of_total, orca_no_cap,
              orca_estimate_only, orca_any_mode)
    for wrong in wrongs:
        assert not passes(orca_reservation, wrong), wrong.__name__
    assert "power-of-two rounding" in orca_reservation(orca_no_rounding, verbose=False).summary
    assert "blocks, not token slots" in orca_reservation(orca_tokens, verbose=False).summary
    assert "capped at max_len" in orca_reservation(orca_no_cap, verbose=False).summary
    assert "raise ValueError" in orca_reservation(orca_any_mode, verbose=False).summary


def fit_floor_blocks(cap, bs, max_len, lengths):
    """Rounds blocks down."""
    free, n = cap // bs, 0
    for x in lengths:
        if x // bs > free:
            break
        free, n = free - x // bs, n + 1
    return min(len(lengths), cap // max_len), n


def fit_skip_ahead(cap, bs, max_len, lengths):
    """Admits later requests that fit after one did not (a queue does not skip ahead)."""
    free, n = cap // bs, 0
    for x in lengths:
        need = -(-x // bs)
        if need <= free:
            free, n = free - need, n + 1
    return min(len(lengths), cap // max_len), n


def fit_tokens_not_blocks(cap, bs, max_len, lengths):
    """Counts tokens, forgetting that memory is handed out in whole blocks."""
    used, n = 0, 0
    for x in lengths:
        if used + x > cap:
            break
        used, n = used + x, n + 1
    return min(len(lengths), cap // max_len), n


def fit_no_cap(cap, bs, max_len, lengths):
    """Reserve-max count not capped by the number of requests."""
    return cap // max_len, S09.fit_requests(cap, bs, max_len, lengths)[1]


def test_fit_requests_accepts_solution_rejects_wrong():
    assert passes(check.fit_requests, S09.fit_requests)
    for wrong in (stub, fit_floor_blocks, fit_skip_ahead, fit_tokens_not_blocks, fit_no_cap):
        assert not passes(check.fit_requests, wrong), wrong.__name__


def hit_distinct_tokens(prompts):
    """Counts distinct tokens, not distinct prefixes."""
    total = sum(map(len, prompts))
    return 1 - len({t for p in prompts for t in p}) / total if total else 0.0


def hit_consecutive_only(prompts):
    """Shares only with the previous prompt (unsorted)."""
    total, computed, prev = sum(map(len, prompts)), 0, []
    for p in prompts:
        n = 0
        while n < min(len(p), len(prev)) and p[n] == prev[n]:
            n += 1
        computed, prev = computed + len(p) - n, p
    return 1 - computed / total if total else 0.0


def hit_distinct_prompts(prompts):
    """Only identical prompts are reused."""
    total = sum(map(len, prompts))
    return 1 - sum(map(len, {tuple(p) for p in prompts})) / total if total else 0.0


def test_optimal_hit_rate_accepts_solution_rejects_wrong():
    assert passes(check.optimal_hit_rate, S09.optimal_hit_rate)
    for wrong in (stub, hit_distinct_tokens, hit_consecutive_only, hit_distinct_prompts):
        assert not passes(check.optimal_hit_rate, wrong), wrong.__name__


# ------------------------------------------------------------------------- 01 why a KV cache
S01 = solution("01_why_kv_cache")


def flops_off_by_one(f, p, n):
    """Cached steps attend to one token too few."""
    naive, cached = S01.count_flops(f, p, n)
    return naive, cached[:1] + [f(p + t - 1) for t in range(1, n)]


def flops_no_prefill(f, p, n):
    """Forgets that step 0 is the prefill of the whole prompt."""
    naive, cached = S01.count_flops(f, p, n)
    return naive, [f(p)] + cached[1:]


def flops_naive_flat(f, p, n):
    """Charges every recomputed token the full context."""
    return [(p + t) * f(p + t) for t in range(n)], S01.count_flops(f, p, n)[1]


def test_count_flops_accepts_solution_rejects_wrong():
    assert passes(check.count_flops, S01.count_flops)
    for wrong in (stub, flops_off_by_one, flops_no_prefill, flops_naive_flat, lambda f, p, n: ([], [])):
        assert not passes(check.count_flops, wrong)


def attend_before_append(q, k_new, v_new, k_cache, v_cache):
    """Attends over the old cache only (a token must see itself)."""
    import torch

    if k_cache.shape[0] == 0:
        return S01.attend_with_cache(q, k_new, v_new, k_cache, v_cache)
    out, _, _ = S01.attend_with_cache(q, k_cache[-1], v_cache[-1], k_cache[:-1], v_cache[:-1])
    return out, torch.cat([k_cache, k_new[None]]), torch.cat([v_cache, v_new[None]])


def attend_no_scale(q, k_new, v_new, k_cache, v_cache):
    return S01.attend_with_cache(q * q.shape[1] ** 0.5, k_new, v_new, k_cache, v_cache)


def attend_cache_not_grown(q, k_new, v_new, k_cache, v_cache):
    out, _, _ = S01.attend_with_cache(q, k_new, v_new, k_cache, v_cache)
    return out, k_cache, v_cache


def attend_gqa_modulo(q, k_new, v_new, k_cache, v_cache):
    """Maps query head h to KV head h % num_kv_heads."""
    import torch

    kvh, h = k_new.shape[0], q.shape[0]
    idx = [i % kvh for i in range(h)]
    k_all = torch.cat([k_cache, k_new[None]])
    v_all = torch.cat([v_cache, v_new[None]])
    w = torch.softmax(torch.einsum("hd,thd->ht", q, k_all[:, idx]) / q.shape[1] ** 0.5, dim=-1)
    return torch.einsum("ht,thd->hd", w, v_all[:, idx]), k_all, v_all


def attend_k_v_swapped(q, k_new, v_new, k_cache, v_cache):
    out, _, _ = S01.attend_with_cache(q, v_new, k_new, v_cache, k_cache)
    return out, *S01.attend_with_cache(q, k_new, v_new, k_cache, v_cache)[1:]


def attend_softmax_over_heads(q, k_new, v_new, k_cache, v_cache):
    import torch

    k_all, v_all = torch.cat([k_cache, k_new[None]]), torch.cat([v_cache, v_new[None]])
    group = q.shape[0] // k_new.shape[0]
    k, v = k_all.repeat_interleave(group, dim=1), v_all.repeat_interleave(group, dim=1)
    w = torch.softmax(torch.einsum("hd,thd->ht", q, k) / q.shape[1] ** 0.5, dim=0)
    return torch.einsum("ht,thd->hd", w, v), k_all, v_all


def test_attend_with_cache_accepts_solution_rejects_wrong():
    assert passes(check.attend_with_cache, S01.attend_with_cache)
    for wrong in (stub, attend_before_append, attend_no_scale, attend_cache_not_grown, attend_gqa_modulo,
                  attend_k_v_swapped, attend_softmax_over_heads):
        assert not passes(check.attend_with_cache, wrong), wrong.__name__
    for wrong, words in ((attend_k_v_swapped, "keys and values swapped"), (attend_softmax_over_heads, "softmax over the heads"),
                         (attend_cache_not_grown, "return the grown caches")):
        r = check.attend_with_cache(wrong, verbose=False)
        assert any(words in c.note for c in r.failures), wrong.__name__


# ------------------------------------------- new exercises of lessons 05, 07, 08 (issue 16)
from kvlab.check import l05_paged_kernel as L05  # noqa: E402
from kvlab.check import l07_radix as L07  # noqa: E402
from kvlab.check import l08_eviction as L08  # noqa: E402


def _note(result) -> str:
    return result.failures[0].note if result.failures else ""


def test_kernel_tiles_accepts_solution_rejects_wrong_and_names_the_mistake():
    assert passes(L05.kernel_tiles, S05.kernel_tiles)
    assert L05.kernel_tiles_reference(18, 4, 8, 2) == [[[0, 1], [2, 3]], [[4]]]
    assert L05.kernel_tiles_reference(5, 4, 4, 4) == [[[0]], [[1]], [], []]
    for message, wrong in L05.TILE_MISTAKES.items():
        r = L05.kernel_tiles(wrong, verbose=False)
        assert not r.passed, message
        assert any(message in c.note for c in r.failures), message
    assert not passes(L05.kernel_tiles, stub)
    assert not passes(L05.kernel_tiles, lambda n, bs, t, s: [[list(range(-(-n // bs)))]] + [[]] * (s - 1))


def test_paged_decode_torch_names_the_mistake():
    for wrong, words in ((decode_no_scale, "scale"), (decode_ignores_table, "block table"),
                         (decode_whole_blocks, "past context_len"), (decode_gqa_modulo, "h // (num_heads")):
        assert words in _note(check.paged_decode_torch(wrong, verbose=False)), wrong.__name__


def test_paged_gather_kernel_names_the_mistake():
    notes = {rule: _note(check.paged_gather_kernel(_GatherVariant(rule, **kw), verbose=False))
             for rule, kw in (("no_table", {}), ("div_offset", {}))}
    assert "block table" in notes["no_table"] and "pos % BLOCK_SIZE" in notes["div_offset"]
    assert "mask" in _note(check.paged_gather_kernel(_GatherVariant("right", masked=False), verbose=False))
    assert "first tile" in _note(check.paged_gather_kernel(_GatherVariant("right", loop=False), verbose=False))
    assert "canary" in _note(check.paged_gather_kernel(S05_gather_noop(), verbose=False))


def test_paged_gather_kernel_names_unmasked_loads_and_stores_outside_the_output():
    """Issue 28: a kernel that masks the store but not the loads was accepted, and one that stores at the
    cache's slot rows (not pos rows) aborted Python; both are named now, on buffers the checker owns."""
    from kvlab.kernels import KERNEL_MODE

    r = check.paged_gather_kernel(_GatherVariant("slot_store"), verbose=False)
    assert not r.passed and "outside the output" in _note(r)
    assert "slot rows" in " ".join(c.note for c in r.failures)
    if KERNEL_MODE == "interpreter":  # natively a masked-off load is not seen (the values never reach out)
        r = check.paged_gather_kernel(_GatherVariant("right", loads_masked=False), verbose=False)
        assert not r.passed and "every tl.load" in _note(r)


def S05_gather_noop():
    """A kernel whose loop body is still `pass` (the stub as shipped)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(cache_ptr, block_table_ptr, out_ptr, context_len,
               HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
        offs_t = tl.arange(0, TILE_N)
        num_tiles = (context_len + TILE_N - 1) // TILE_N
        for tile in range(0, num_tiles):
            pos = tile * TILE_N + offs_t  # noqa: F841
    return kernel


def block_hash_token_level(prompts, bs):
    """The radix tree's answer (token by token), not whole blocks."""
    return [len(p) - n for p, n in zip(prompts, L07.served_prefill_tokens(prompts))] if prompts else []


def test_block_hash_reuse_accepts_solution_rejects_wrong_and_names_the_mistake():
    assert passes(L07.block_hash_reuse, S07.block_hash_reuse)
    assert passes(L07.block_hash_reuse, L07._reuse_by("right"))  # the mistake builder itself is right
    for message, wrong in L07.REUSE_MISTAKES.items():
        r = L07.block_hash_reuse(wrong, verbose=False)
        assert not r.passed and any(message in c.note for c in r.failures), message
    r = L07.block_hash_reuse(block_hash_token_level, verbose=False)
    assert not r.passed and "whole full blocks only" in _note(r)
    assert not passes(L07.block_hash_reuse, stub)


def test_admit_plan_accepts_solution_rejects_wrong_and_names_the_mistake():
    assert passes(L08.admit_plan, S08.admit_plan)
    assert passes(L08.admit_plan, L08._plan_by("right"))
    for message, wrong in L08.ADMIT_MISTAKES.items():
        r = L08.admit_plan(wrong, verbose=False)
        assert not r.passed and any(message in c.note for c in r.failures), message

    def mutates(root, tokens, num_free):
        out = S08.admit_plan(root, tokens, num_free)
        for child in root.children.values():
            child.lock_ref += 1
        return out

    r = L08.admit_plan(mutates, verbose=False)
    assert not r.passed and "changed the tree" in _note(r)
    assert not passes(L08.admit_plan, stub)
    assert not passes(L08.admit_plan, lambda root, tokens, free: None)


def admit_ignores_other_lock(root, tokens, num_free):
    """Review r12's accepted answer: it takes the matched tokens of EVERY path node off the evictable
    size, also those of a node another running request already locks (never evictable to begin with)."""
    limit, node, pos, path = len(tokens) - 1, root, 0, []
    while pos < limit and (child := node.children.get(tokens[pos])) is not None:
        k = 0
        while k < len(child.key) and pos + k < limit and child.key[k] == tokens[pos + k]:
            k += 1
        path.append((child, k))
        pos, node = pos + k, child
        if k < len(child.key):
            break
    evictable, stack = 0, list(root.children.values())
    while stack:
        n = stack.pop()
        evictable += len(n.key) if n.lock_ref == 0 else 0
        stack.extend(n.children.values())
    evictable -= sum(k for _n, k in path)                  # the slip: no `if n.lock_ref == 0`
    need = len(tokens) - pos
    return (pos, 0) if need <= num_free else None if need > num_free + evictable else (pos, need - num_free)


def test_admit_plan_names_an_answer_that_ignores_another_requests_lock():
    """Review r12: admit_plan accepted an answer that took a locked path node's matched tokens off the
    evictable size again (it ignores the other request's lock); cases where a second request locks a
    node on the matched path and the new one fits exactly, on several trees, sizes and seeds, reject it."""
    r = L08.admit_plan(admit_ignores_other_lock, verbose=False)
    assert not r.passed
    assert "another request" in _note(r) and "lock" in _note(r)
    assert sum("locked by a running request" in c.label or "locked by another" in c.label
               for c in r.failures) >= 3  # several trees, not one hand-made case


def test_admit_plan_names_the_lock_and_count_slips():
    """Review r12: four wrong answers were rejected without a name or with a wrong one; each is named."""
    for rule, words in (("count_locked", "lock_ref == 0"), ("leaves_only", "not only the leaves"),
                        ("evict_plus_one", "one more is one too many"), ("lock_le1", "lock_ref == 1 is a lock")):
        r = L08.admit_plan(L08._plan_by(rule), verbose=False)
        assert not r.passed and words in _note(r), (rule, _note(r))


def test_inc_lock_ref_failures_show_only_the_nodes_that_differ_and_name_the_mistake():
    r = check.inc_lock_ref(lock_node_only, verbose=False)
    why = r.failures[0].why()
    assert "node 0 lock_ref" not in why and "not every node up the path" in why
    assert why.count("lock_ref: expected") <= 3  # only the nodes that differ, never the whole tree
    assert "the root was locked" in _note(check.inc_lock_ref(lock_with_root, verbose=False))
    assert "already protected" in _note(check.inc_lock_ref(lock_counts_locked_too, verbose=False))
    assert "the sign" in _note(check.inc_lock_ref(lambda n: -S08.inc_lock_ref(n), verbose=False))


def lock_stops_at_a_locked_node(node):
    """Stops at the first node another request locks, as if its lock covered this request too."""
    d = 0
    while node.parent is not None and node.lock_ref == 0:
        d -= len(node.key)
        node.lock_ref += 1
        node = node.parent
    return d


def lock_from_the_parent(node):
    """Starts one node too high: the node itself is never locked."""
    return S08.inc_lock_ref(node.parent) if node.parent is not None else 0


def test_lru_evict_and_inc_lock_ref_name_more_wrong_answers():
    """Round 12: wrong answers that were rejected without a name, or with another mistake's name."""
    for rule, words in (("sorted_once", "choose again after every removal"), ("id_only", "the id only breaks a tie"),
                        ("lfu", "not by hit_count")):
        assert words in _note(check.lru_evict(L08._lru_by(rule), verbose=False)), rule
    assert "a set has no order" in _note(check.lru_evict(lambda r, k: set(S08.lru_evict(r, k)), verbose=False))
    r = check.inc_lock_ref(lock_stops_at_a_locked_node, verbose=False)
    assert "still gets this request's +1" in _note(r) and "overwrites" not in _note(r)
    r = check.inc_lock_ref(lock_from_the_parent, verbose=False)
    assert all("the node itself is locked too" in c.note for c in r.failures)


# ------------------------------------------ lesson 08's prose follows its own data (issue 16, bug 4)
def _stored_outputs(stem: str) -> tuple[list[str], list[str]]:
    """(markdown sources, code-cell stdout texts) of a built lesson."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    out = ["".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
           for c in nb.cells if c.cell_type == "code"]
    return md, out


def test_lesson_08_sentences_follow_its_tables():
    """The trend and winner sentences are printed from the tables in the same run, and no
    markdown cell states a trend of its own (the bug: "the difference shrinks as the pool grows"
    under a table whose spread grew from 2.4 to 27.6 points; preemption said to start at 16
    blocks when it started at 24)."""
    import re

    md, out = _stored_outputs("08_eviction_scheduling")
    text = "\n".join(md).lower()
    for claim in ("shrinks as the pool grows", "wins under pressure", "difference shrinks", "at 16 blocks"):
        assert claim not in text, f"lesson 08 markdown states {claim!r}: print it from the data instead"
    hit_table = next(o for o in out if o.startswith("pool (slots)") and "spread" in o)
    spreads = [float(line.split()[-1]) for line in hit_table.splitlines()[1:] if line.strip()]
    sentences = next(o for o in out if "The spread between the policies" in o)
    trend = "grows" if spreads[-1] > spreads[0] else "shrinks"
    assert f"The spread between the policies {trend}" in sentences
    engine = next(o for o in out if o.startswith("pool (blocks)"))
    rows = [line.split() for line in engine.splitlines()[1:] if line.strip() and line.split()[0].isdigit()]
    first_preempt = next(int(r[0]) for r in rows if int(r[5]) > 0)
    said = next(o for o in out if "Preemption starts at" in o)
    assert re.search(rf"Preemption starts at {first_preempt} blocks", said)
    assert "reused per admission" in said and "admissions" in engine


def test_lesson_06_checkers_name_the_mistake():
    notes = {w.__name__: [c.note for c in check.cow_append(w, verbose=False).failures]
             for w in (cow_no_decref, cow_shared_first, cow_always_copy, cow_pop_back)}
    assert any("kept this table's reference" in n for n in notes["cow_no_decref"])
    assert any("the last block was full" in n for n in notes["cow_shared_first"])
    assert any("writes in place" in n for n in notes["cow_always_copy"])
    assert any("FIRST free block" in n for n in notes["cow_pop_back"])
    r = check.cow_append(cow_no_decref, verbose=False)
    assert "free_blocks" not in r.failures[0].why()  # only the fields that differ
    assert "gen_len == 0" in _note(check.sampling_blocks(sampling_no_g0, verbose=False))
    assert "partial last prompt block" in _note(check.sampling_blocks(sampling_share_partial, verbose=False))
    assert "swapped" in _note(check.sampling_blocks(lambda p, n, g, bs: S06.sampling_blocks(p, n, g, bs)[::-1],
                                                    verbose=False))


def test_l09_checkers_name_their_common_mistakes_and_empty_input():
    from kvlab.check import l09_at_scale as L9

    def zero_division(prompts):  # the formula without the empty case
        total = sum(len(p) for p in prompts)
        return 1 - len({tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}) / total

    r = L9.optimal_hit_rate(zero_division, verbose=False)
    assert not r.passed and any("ZeroDivisionError" in c.note for c in r.failures)
    for table, check in ((L9.HIT_MISTAKES, L9.optimal_hit_rate), (L9.FIT_MISTAKES, L9.fit_requests)):
        for why, wrong in table.items():
            r = check(wrong, verbose=False)
            assert not r.passed and any(c.note == why for c in r.failures), why
    capped = next(f for m, f in L9.ORCA_MISTAKES.items() if "capped" in m)
    notes = {c.note for c in L9.orca_reservation(capped, verbose=False).failures if c.note}
    assert any("here 4096" in n for n in notes) and any("here 2048" in n for n in notes)  # the case's max_len


def test_cache_census_counts_what_the_tree_holds():
    """Lesson 08 explains the dip of "fewest tokens" with these counts (review r12): the same runs as the
    hit-rate table, and the counts follow from the stream."""
    from kvlab.lessons.eviction import cache_census, popular_prefix_stream, served_hit_rate

    reqs = popular_prefix_stream(60, seed=1)
    for policy in ("lru", "fewest_tokens"):
        k = cache_census(reqs, 120, policy)
        assert k.hit_rate == served_hit_rate(reqs, 120, policy)
        assert 0 < k.found <= k.shared_requests < len(reqs) and 0 <= k.one_off_slots <= 120
    tiny = [([1, 2, 3], [9]), ([7, 8], [9]), ([1, 2, 4], [9])]   # [1 ...] shared, [7 8] a one-off
    k = cache_census(tiny, 20, "lru")
    assert (k.shared_requests, k.found, k.one_off_slots, k.prefixes_held) == (2, 1, 1.5, 0.5)
    with pytest.raises(ValueError):
        cache_census(tiny, 3, "lru")
