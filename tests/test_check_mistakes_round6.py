"""Issue 28 (round 6): wrong answers the independent review of commit 06d2538 typed that came back
rejected without the mistake named (or misnamed), and the helper's own slips typed after it. Each
must be rejected with a note that says the likely mistake (the phrase given beside it)."""
from __future__ import annotations

import pytest

from kvlab import check
from kvlab.check import l02_how_big
from test_check_memory import _solutions

S05 = _solutions("05_paged_kernel")


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def _notes(r) -> str:
    return " | ".join(c.note for c in r.failures)


# ------------------------------------------------------------------ lesson 05, exercise 3
def _gather_slips():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(cache_ptr, block_table_ptr, out_ptr, context_len,
               HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, RULE: tl.constexpr):
        offs_t = tl.arange(0, TILE_N)
        offs_d = tl.arange(0, HEAD_DIM)
        num_tiles = (context_len + TILE_N - 1) // TILE_N
        for tile in range(0, num_tiles):
            pos = tile * TILE_N + offs_t
            if RULE == "le":
                valid = pos <= context_len
            elif RULE == "offs_mask":        # review r5: the mask from offs_t (misnamed a missing store mask)
                valid = offs_t < context_len
            else:
                valid = pos < context_len
            if RULE == "swapped":            # review r1 of 1dabd17: misnamed as a missing mask
                physical = tl.load(block_table_ptr + pos % BLOCK_SIZE, mask=valid, other=0)
            elif RULE == "table_by_pos":     # review r5: misnamed '// and % swapped'
                physical = tl.load(block_table_ptr + pos, mask=valid, other=0)
            elif RULE == "tile_div" or RULE == "tile_both" or RULE == "tile_all":
                physical = tl.load(block_table_ptr + pos // TILE_N, mask=valid, other=0)
            else:
                physical = tl.load(block_table_ptr + pos // BLOCK_SIZE, mask=valid, other=0)
            if RULE == "swapped":
                row = physical * BLOCK_SIZE + pos // BLOCK_SIZE
            elif RULE == "no_bs":
                row = physical + pos % BLOCK_SIZE
            elif RULE == "tile_both":
                row = physical * BLOCK_SIZE + pos % TILE_N
            elif RULE == "tile_all":
                row = physical * TILE_N + pos % TILE_N
            elif RULE == "offset_tile":      # review of 6b9afee: the offset taken modulo TILE_N
                row = physical * BLOCK_SIZE + pos % TILE_N
            elif RULE == "units_head_dim":   # review of 6b9afee: the block scaled by HEAD_DIM, not BLOCK_SIZE
                row = physical * HEAD_DIM + pos % BLOCK_SIZE
            elif RULE == "units_twice":      # the slot already in elements, then * HEAD_DIM again
                row = (physical * BLOCK_SIZE + pos % BLOCK_SIZE) * HEAD_DIM
            else:
                row = physical * BLOCK_SIZE + pos % BLOCK_SIZE
            if RULE == "k_unmasked":         # review r1 of 1dabd17: accepted (the masked store hides it)
                k = tl.load(cache_ptr + row[:, None] * HEAD_DIM + offs_d[None, :])
            elif RULE == "no_stride":
                k = tl.load(cache_ptr + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
            else:
                k = tl.load(cache_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=valid[:, None], other=0.0)
            tl.store(out_ptr + pos[:, None] * HEAD_DIM + offs_d[None, :], k, mask=valid[:, None])
    return kernel


class _Gather:
    template = None

    def __init__(self, rule: str) -> None:
        if _Gather.template is None:
            _Gather.template = _gather_slips()
        self.rule = rule

    def __call__(self, *args, **kwargs):
        raise TypeError("launch with kernel[grid](...)")

    def __getitem__(self, grid):
        return lambda *a, **kw: self.template[grid](*a, **kw, RULE=self.rule)


@pytest.mark.parametrize("rule, says", [
    ("right", None),
    ("le", "pos < context_len, not <="),
    ("tile_div", "pos // BLOCK_SIZE, not pos // TILE_N"),
    ("no_bs", "physical * BLOCK_SIZE"),
    ("tile_both", "TILE_N where BLOCK_SIZE belongs"),     # issue 28 review: pos // TILE_N and pos % TILE_N
    ("tile_all", "TILE_N where BLOCK_SIZE belongs"),
    ("no_stride", "the row stride is missing"),
    ("offset_tile", "pos % BLOCK_SIZE, not pos % TILE_N"),  # the review of 6b9afee: both named as a missing mask
    ("units_head_dim", "physical * HEAD_DIM mixes units"),
    ("units_twice", "multiplied by HEAD_DIM twice"),
    ("k_unmasked", "give the K load the mask too"),
    ("swapped", "// and % swapped"),
    ("table_by_pos", "indexed by the LOGICAL BLOCK"),
    ("offs_mask", "for THIS tile's positions"),
])
def test_paged_gather_kernel_names_the_review_slips(rule, says):
    r = check.paged_gather_kernel(_Gather(rule), verbose=False)
    if says is None:
        assert r.passed, _notes(r)
        return
    assert not r.passed
    assert says in _notes(r), _notes(r)
    if rule in ("swapped", "table_by_pos", "tile_both", "tile_all", "no_stride", "offset_tile", "units_head_dim", "units_twice"):
        assert says in r.failures[0].note, _notes(r)
        assert "mask" not in r.failures[0].note, _notes(r)


# ------------------------------------------------------------------ lesson 06
S06 = _solutions("06_sharing")


def _cow(slip):
    """cow_append with one slip (the checker's own variants are not used: these are typed apart)."""
    def fn(bt, n, rc, fr, bs):
        if slip == "share_first" and bt and rc[bt[-1]] > 1:
            src, dst = bt[-1], fr.pop(0)
            rc[dst], rc[src], bt[-1] = 1, rc[src] - 1, dst
            return [(src, dst)]
        if slip == "copy_full_too" and n % bs == 0 and bt and rc[bt[-1]] > 1:
            src, dst = bt[-1], fr.pop(0)
            rc[dst], rc[src], bt[-1] = 1, rc[src] - 1, dst
            b = fr.pop(0)
            rc[b] = 1
            bt.append(b)
            return [(src, dst)]
        if slip == "drop_full_ref" and n % bs == 0 and bt:
            rc[bt[-1]] -= 1
        copies = S06.cow_append(bt, n + (slip == "full_off"), rc, fr, bs)
        return [(b, a) for a, b in copies] if slip == "swap_pair" else copies
    return fn


def _blocks(p, bs):
    return -(-p // bs)


def _floor_both(p, n, g, bs):
    full = p // bs
    return (n * ((p + g) // bs), full + n * ((p + g) // bs - full)) if g else (n * ((p + g) // bs), full)


def _floor_with(p, n, g, bs):
    full = p // bs
    return (n * _blocks(p + g, bs), full + n * ((p + g) // bs - full)) if g else S06.sampling_blocks(p, n, g, bs)


def _saved(p, n, g, bs):
    w, s = S06.sampling_blocks(p, n, g, bs)
    return w, w - s


def _n_minus_1(p, n, g, bs):
    full = p // bs
    return (n * _blocks(p + g, bs), full + (n - 1) * (_blocks(p + g, bs) - full)) if g else S06.sampling_blocks(p, n, g, bs)


WRONG_06 = [
    (check.cow_append, _cow("share_first"), "ask 'is it full?' before 'is it shared?'"),
    (check.cow_append, _cow("copy_full_too"), "copying the full shared block too"),
    (check.cow_append, _cow("drop_full_ref"), "drops no reference"),
    (check.cow_append, _cow("full_off"), "num_tokens counts the tokens already"),
    (check.cow_append, _cow("swap_pair"), "a copy is (src, dst)"),
    (check.sampling_blocks, _floor_both, "round its tokens UP to blocks (ceil), not down, with sharing and without"),
    (check.sampling_blocks, _floor_with, "with sharing: a sample's own blocks are its whole blocks, rounded UP"),
    (check.sampling_blocks, _saved, "not the blocks saved"),
    (check.sampling_blocks, lambda p, n, g, bs: (S06.sampling_blocks(p, n, g, bs)[0], p + n * g), "count blocks, not tokens"),
    (check.sampling_blocks, _n_minus_1, "(n, not n - 1)"),
]


@pytest.mark.parametrize("checker, wrong, says", WRONG_06, ids=[f"06-{i}" for i in range(len(WRONG_06))])
def test_lesson_06_slips_named_first(checker, wrong, says):
    r = checker(wrong, verbose=False)
    assert not r.passed
    assert says in r.failures[0].note, _notes(r)


# ------------------------------------------------------------------ the helper's own slips, typed as edits of the reference
def _edit(nn, name, edits):
    from test_check_mistakes_06_11 import wrong_answer
    return wrong_answer(nn, name, edits)


CHECKER_OF = {"predict_cached": "predict_cached_tokens", "pick_worker": "choose_worker"}  # solution -> checker
EDITS = [  # (lesson, exercise, edits of the reference, words the first FAIL note must contain)
    ("05", "paged_decode_torch", [("dim=-1)", "dim=0)")], "the softmax ran over the heads"),
    ("05", "paged_decode_torch", [("k = k_cache[slots_block, pos % block_size]", "k = k_cache[slots_block, pos // block_size]")],
     "K was read at offset pos // block_size"),
    ("05", "kernel_tiles", [("        out.append(tiles)", "        if tiles:\n            out.append(tiles)")],
     "a program with no tile was left out"),
    ("05", "kernel_tiles", [("(end - 1) // block_size + 1", "end // block_size")], "a tile that ends inside a block misses"),
    ("05", "kernel_tiles", [("num_tiles = -(-context_len // tile_tokens)", "num_tiles = -(-context_len // block_size)")],
     "the tiles were counted in blocks"),
    ("05", "kernel_tiles", [("per = -(-num_tiles // num_splits)", "per = num_tiles // num_splits")],
     "tiles per program is a ceiling too"),
    # lesson 02 (the review's four, then the helper's own)
    ("02", "kv_heads_for_budget", [("allowed = [g for g in range(1, num_heads + 1) if num_heads % g == 0]",
                                    "allowed = [2 ** i for i in range(num_heads.bit_length()) if 2 ** i <= num_heads]")],
     "powers of two are not the rule"),
    ("02", "bytes_per_token_from_config", [('        raise ValueError(f"unknown torch_dtype {dtype!r}")',
                                            '        return 2 * config["num_hidden_layers"] * kv_heads * head_dim * 2')],
     "for an unknown torch_dtype: raise ValueError naming it"),
    ("02", "bytes_per_token_from_config", [('"bfloat16": 2, ', "")], "bfloat16 is 2 bytes"),
    ("02", "longest_context", [("    if kv_budget_bytes < 0:", "    if kv_budget_bytes <= 0:")], "a promise of 0 tokens, not an error"),
    ("02", "kv_heads_for_budget", [("per_head = 2 * layers", "per_head = 2 * 2 * layers")], "the 2 for K and V was counted twice"),
    ("02", "kv_heads_for_budget", [("return max(fits)", "return num_heads // max(fits)")], "that is the group size"),
    ("02", "kv_heads_for_budget", [("per_head = 2 * layers * head_dim * tokens * dtype_bytes",
                                    "per_head = 2 * layers * head_dim * tokens * dtype_bytes * num_heads")], "no num_heads in it"),
    ("02", "bytes_per_token_from_config", [('kv_heads = config.get("num_key_value_heads", heads)',
                                            'kv_heads = config.get("num_key_value_heads", 1)')], "not 1"),
    ("02", "bytes_per_token_from_config", [('dtype = config.get("torch_dtype", "float16")',
                                            'dtype = config.get("torch_dtype", "float32")')], "no torch_dtype counts 2 bytes"),
    ("02", "max_concurrent", [("budget = int(gpu_bytes * utilization) - weight_bytes",
                               "budget = int((gpu_bytes - weight_bytes) * utilization)")], "utilization is a share of the whole GPU"),
    # lesson 00
    ("00", "common_prefix_len", [("    n = 0\n", "    n = 0\n    a, b = sorted(a), sorted(b)\n")],
     "compare the lists position by position"),
    ("00", "reusable_tokens", [("    shared = min(common_prefix_len(finished, new), len(new) - 1)   # the last token is always computed\n"
                                "    return shared // block_size * block_size",
                                "    shared = common_prefix_len(finished, new) // block_size * block_size\n"
                                "    return min(shared, len(new) - 1)")], "cap first, then round"),
    ("00", "reusable_tokens", [("min(common_prefix_len(finished, new), len(new) - 1)",
                                "min(common_prefix_len(finished, new), len(new)) - 1")], "do not take 1 from every match"),
    # lesson 09
    ("09", "orca_reservation", [("estimate = 1 << (output_len - 1).bit_length()",
                                 "estimate = 1 << (prompt_len + output_len - 1).bit_length()")],
     "not the power of two of prompt + output"),
    ("09", "fit_requests", [("reserve_max = min(len(lengths), capacity // max_len)",
                             "reserve_max = min(len(lengths), -(-capacity // max_len))")], "only WHOLE reservations fit"),
    ("09", "fit_requests", [("return reserve_max, paged", "return paged, reserve_max")], "the pair is (reserve_max, paged)"),
    ("09", "fit_requests", [("free_blocks = capacity // block_size", "free_blocks = capacity")],
     "capacity counts token slots, not blocks"),
    ("09", "optimal_hit_rate", [("    return 1 - len(prefixes) / total", "    return len(prefixes) / total")], "the MISS rate"),
    ("09", "optimal_hit_rate", [("prefixes = {tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}",
                                 "prefixes = {tuple(p) for p in prompts}")], "not only a whole earlier prompt"),
    # lesson 10, exercises 1 and 2 (segment ends, the threshold, host/device order, units)
    ("10", "write_back_evict", [('state = {name: "both" if backed else "device"', 'state = {name: "device"')],
     "a backed-up one stays 'both'"),
    ("10", "write_back_evict", [("        freed += p\n", "        freed += p if backed else 0\n")],
     "a dropped leaf frees its device pages too"),
    ("10", "write_back_evict", [("if host_free < p and host_free + evictable >= p:", "if host_free < p:")],
     "Check first that evicting them makes enough room"),
    ("10", "write_back_evict", [("        freed += p\n", "        freed += 1\n")], "need counts PAGES, not leaves"),
    ("10", "load_back_plan", [("    limit = prompt_len - 1", "    limit = prompt_len - 2")], "not len(prompt) - 2"),
    ("10", "load_back_plan", [("        take = min(tokens, limit - pos)", "        take = min(tokens, limit - pos - 1)")],
     "not len(prompt) - 2"),
    ("10", "load_back_plan", [("    return device, loaded, prompt_len - device - loaded", "    return device, loaded, prompt_len - device")],
     "computed is what is neither reused"),
    ("10", "load_back_plan", [("    return device, loaded, prompt_len - device - loaded",
                               "    return device, loaded, prompt_len - 1 - device - loaded")], "the last prompt token included"),
    ("10", "load_back_plan", [("            device += take", "            device += 1")], "count tokens, not nodes"),
    # lesson 12 (the review's five, then the helper's own)
    ("12", "predict_cached", [("    pos = min(pos, len(prompt) - 1)             # the last token is always computed\n"
                               "    return pos // page_size * page_size         # whole pages only",
                               "    pos = pos // page_size * page_size\n    return min(pos, len(prompt) - 1)")],
     "the two limits in the wrong order"),
    ("12", "predict_cached", [("            if m > k:", "            if m > k and k == 0:")], "not the first one that matches"),
    ("12", "pick_worker", [("if hi - lo > 64 and hi > 1.5 * lo:", "if hi - lo > 64 or hi > 1.5 * lo:")], "(and, not or)"),
    ("12", "pick_worker", [("if hi - lo > 64 and", "if hi - lo >= 64 and")], "(> 64, not >=)"),
    ("12", "pick_worker", [("hi > 1.5 * lo:", "hi >= 1.5 * lo:")], "(> 1.5 x min, not >=)"),
    ("12", "pick_worker", [("    w = match.index(max(match))", "    w = len(match) - 1 - match[::-1].index(max(match))")],
     "ties go to the LOWER index"),
    ("12", "pick_worker", [("    return loads.index(lo)                      # a miss",
                            "    return len(loads) - 1 - loads[::-1].index(lo)  # a miss")],
     "ties go to the LOWER index"),
    ("12", "pick_worker", [("        return loads.index(lo)\n", "        return loads.index(hi)\n")], "not the most loaded"),
    ("12", "pick_worker", [("    if hi - lo > 64 and hi > 1.5 * lo:          # unbalanced: the least loaded worker\n"
                            "        return loads.index(lo)\n", "")],
     "the loads come FIRST"),
    ("12", "pick_worker", [("    return loads.index(lo)                      # a miss",
                            "    return [len({s[:k] for s in t for k in range(1, len(s) + 1)}) for t in sent].index(\n"
                            "        min(len({s[:k] for s in t for k in range(1, len(s) + 1)}) for t in sent))  # a miss")],
     "not to the smallest tree"),
    ("12", "predict_cached", [('        if k < len(nxt["ids"]):                 # the match ends inside this node\n'
                               '            break\n', "")], "a match that ends inside a node stops there"),
    ("12", "predict_cached", [("    return pos // page_size * page_size", "    return -(-pos // page_size) * page_size")],
     "round the match DOWN to whole pages"),
    ("12", "predict_cached", [("    return pos // page_size * page_size", "    return pos // page_size")],
     "not the number of pages"),
]


@pytest.mark.parametrize("nn, name, edits, says", EDITS, ids=[f"{e[0]}-{e[1]}-{i}" for i, e in enumerate(EDITS)])
def test_typed_slip_is_named_first(nn, name, edits, says):
    checker = getattr(check, CHECKER_OF.get(name, name))
    r = checker(_edit(nn, name, edits), verbose=False)
    assert not r.passed
    assert says in r.failures[0].note, _notes(r)
    assert sum(1 for c in r.failures if not c.note) <= len(r.failures) // 10, _notes(r)


# ------------------------------------------------------------------ lesson 05, exercises 1 and 2: kvlab's own
def test_wrapping_kvlabs_own_function_is_no_answer():
    """Review of 9a9dd5d: lesson 05 names the functions its checkers compare with, and an answer that
    only called them passed both exercises (7/7 and 18/18). Calling them is refused and named; the
    reference solutions still pass."""
    import kvlab.kernels as K
    import torch
    from kvlab.kernels import paged_decode_attention_ref
    from kvlab.viz.kernel_view import kernel_access_order

    def decode(q, k_cache, v_cache, table, n, scale):    # imported name
        t = torch.tensor([table], dtype=torch.int32)
        return paged_decode_attention_ref(q[None], k_cache, v_cache, t, torch.tensor([n]), scale=scale)[0]

    def decode_via_module(q, k_cache, v_cache, table, n, scale):   # through the module
        t = torch.tensor([table], dtype=torch.int32)
        return K.paged_decode_attention_ref(q[None], k_cache, v_cache, t, torch.tensor([n]), scale=scale)[0]

    def tiles(n, bs, tile, splits):
        out = [[] for _ in range(splits)]
        for r in kernel_access_order(list(range(-(-n // bs))), n, bs, splits, tile):
            prog = out[r.split]
            if len(prog) <= r.iteration:
                prog.append([])
            prog[r.iteration].append(r.logical)
        return out

    for fn, checker, name in ((decode, check.paged_decode_torch, "paged_decode_attention_ref"),
                              (decode_via_module, check.paged_decode_torch, "paged_decode_attention_ref"),
                              (tiles, check.kernel_tiles, "kernel_access_order")):
        r = checker(fn, verbose=False)
        assert not r.passed, fn.__name__
        shown = " | ".join(f"{c.actual} {c.note}" for c in r.failures)
        assert f"kvlab's own {name}" in shown, shown
    assert K.paged_decode_attention_ref is paged_decode_attention_ref            # put back after the check
    assert check.paged_decode_torch(S05.paged_decode_torch, verbose=False).passed
    assert check.kernel_tiles(S05.kernel_tiles, verbose=False).passed


# ------------------------------------------------------------------ issue 28, the independent review's round-6 answers
S02 = _solutions("02_how_big")


def _float_requests(kv, b, t):
    if b < 1 or t < 1 or kv < 0:
        raise ValueError("bad input")
    return int(kv / (b * t))


def _float_budget(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    """Lesson 02's max_concurrent with the budget left a float (no int())."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    if block_size < 1 or bytes_per_token < 1 or any(n < 1 for n in lengths):
        raise ValueError("block_size, bytes_per_token and every length must be >= 1")
    free = max(0, gpu_bytes * utilization - weight_bytes) // (block_size * bytes_per_token)
    count = 0
    for n in sorted(lengths):
        need = -(-n // block_size)
        if need > free:
            break
        free -= need
        count += 1
    return count


def _sixteen(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    return S02.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, 16) if block_size >= 1 \
        else S02.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)


@pytest.mark.parametrize("checker, wrong, says", [
    (l02_how_big.requests_that_fit, _float_requests, "float division"),
    (check.max_concurrent, _float_budget, "int(gpu_bytes x utilization)"),
    (check.max_concurrent, _sixteen, "block_size ignored (16 hard-coded)"),
], ids=["02-float-division", "02-float-budget", "02-block-size-16"])
def test_lesson_02_round6_named_first(checker, wrong, says):
    r = checker(wrong, verbose=False)
    assert not r.passed
    assert says in r.failures[0].note, _notes(r)


def test_paged_decode_blocks_in_physical_order_named():
    """Issue 28 review: an answer that read the blocks sorted (physical order), not in the table's order."""
    def decode(q, k_cache, v_cache, table, n, scale):
        return S05.paged_decode_torch(q, k_cache, v_cache, sorted(table), n, scale)

    r = check.paged_decode_torch(decode, verbose=False)
    assert not r.passed
    assert "the block table's order" in r.failures[0].note, _notes(r)


@pytest.mark.parametrize("wrong", [
    lambda a, b, bs: min(-(-_prefix00(a, b) // bs) * bs, len(b) - 1),                          # round up, then cap
    lambda a, b, bs: min(-(-min(_prefix00(a, b), len(b) - 1) // bs) * bs, len(b) - 1),         # cap, round up, cap
], ids=["up-then-cap", "cap-up-cap"])
def test_lesson_00_rounded_up_then_capped_named_first(wrong):
    """Issue 28 review: warm-up 3 rounded UP to whole blocks (then capped at len(new) - 1); the first FAIL
    showed only expected and actual."""
    def answer(a, b, bs):
        if bs < 1:
            raise ValueError(f"block_size must be >= 1, got {bs}")
        return wrong(a, b, bs)

    r = check.reusable_tokens(answer, verbose=False)
    assert not r.passed
    assert "rounded up" in r.failures[0].note, _notes(r)


def _prefix00(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ================================================================== k-checkers: lessons 06, 09, 10, 12


def _first_note(r) -> str:
    return next(c.note for c in r.failures)


def test_cow_append_names_a_rebound_table_and_the_wrong_exception():
    from kvlab.memory.block_pool import OutOfBlocks

    def rebind(bt, n, rc, free, bs):
        mine = list(bt)
        copies = S06.cow_append(mine, n, rc, free, bs)
        bt = mine  # noqa: F841 -- the slip: a new list the caller never sees
        return copies

    def value_error(bt, n, rc, free, bs):
        try:
            return S06.cow_append(bt, n, rc, free, bs)
        except OutOfBlocks:
            raise ValueError("no free block") from None

    r = check.cow_append(rebind, verbose=False)
    assert not r.passed and "rebound to a new list" in _first_note(r), _notes(r)
    r = check.cow_append(value_error, verbose=False)
    assert not r.passed and "out of blocks" in _first_note(r) and "raise kvlab.OutOfBlocks" in _first_note(r), _notes(r)
    assert "check the arguments first" not in _notes(r)
    assert check.cow_append(S06.cow_append, verbose=False).passed


def test_sampling_blocks_names_separate_blocks_and_one_too_few():
    from kvlab.memory.block_table import blocks_needed as bn

    def separate(p, n, g, bs):
        return n * (bn(p, bs) + bn(g, bs)), bn(p, bs) + n * bn(g, bs)

    def one_too_few(p, n, g, bs):
        without, with_ = S06.sampling_blocks(p, n, g, bs)
        return without, with_ - 1

    for fn, says in ((separate, "not in separate blocks"), (one_too_few, "one block too few")):
        r = check.sampling_blocks(fn, verbose=False)
        assert not r.passed and says in _first_note(r), _notes(r)
    assert check.sampling_blocks(S06.sampling_blocks, verbose=False).passed


def test_pick_worker_names_ge_for_gt_on_both_balance_thresholds():
    import inspect
    s12 = _solutions("12_real_server")
    src = inspect.getsource(s12.pick_worker)

    def variant(old: str, new: str):
        ns: dict = {}
        exec(src.replace(old, new), ns)  # noqa: S102 -- the solution with one slip typed in
        return ns["pick_worker"]

    for old, new, says in (("hi - lo > 64 and hi > 1.5 * lo", "hi - lo >= 64 and hi >= 1.5 * lo", ">= where > is due"),
                           ("hi - lo > 64 and hi > 1.5 * lo", "hi - lo > 64 or hi > 1.5 * lo", "(and, not or)")):
        assert old in src
        r = check.choose_worker(variant(old, new), verbose=False)
        assert not r.passed and says in _first_note(r), _notes(r)
    assert check.choose_worker(s12.pick_worker, verbose=False).passed


def _pow2(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


def _lcp(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_lesson_09_names_cap_after_rounding_ceil_pool_and_four_hit_rate_slips():
    s09 = _solutions("09_at_scale")

    def cap_after_rounding(p, o, mode, block_size=16, max_len=2048):
        if mode not in ("max", "pow2", "oracle"):
            raise ValueError(mode)
        est = max_len if mode == "max" else _pow2(o) if mode == "pow2" else o
        return min(_pow2(-(-(p + est) // block_size)), -(-max_len // block_size))

    r = check.orca_reservation(cap_after_rounding, verbose=False)
    assert not r.passed and "cap comes BEFORE the rounding" in _first_note(r), _notes(r)
    assert all("cap comes BEFORE the rounding" in c.note for c in r.failures), _notes(r)   # one mistake throughout

    def ceil_pool(cap, bs, ml, lengths):
        free, n_in = -(-cap // bs), 0
        for n in lengths:
            if -(-n // bs) > free:
                break
            free, n_in = free - -(-n // bs), n_in + 1
        return min(len(lengths), cap // ml), n_in

    r = check.fit_requests(ceil_pool, verbose=False)
    assert not r.passed and "WHOLE blocks only" in _first_note(r), _notes(r)

    def trie_rate(ps):
        total = sum(map(len, ps))
        return 1 - len({tuple(p[:i]) for p in ps for i in range(1, len(p) + 1)}) / total if total else 0.0

    def pairs(ps):
        total = sum(map(len, ps))
        return 1 - len({(i, t) for p in ps for i, t in enumerate(p)}) / total if total else 0.0

    def one_common_prefix(ps):
        total = sum(map(len, ps))
        common = min(_lcp(ps[0], p) for p in ps) if ps else 0
        return common * (len(ps) - 1) / total if total else 0.0

    def next_only(ps):
        total = sum(map(len, ps))
        return sum(_lcp(ps[i - 1], ps[i]) for i in range(1, len(ps))) / total if total else 0.0

    def dedup_first(ps):
        return trie_rate([list(t) for t in dict.fromkeys(map(tuple, ps))])

    assert check.optimal_hit_rate(trie_rate, verbose=False).passed
    for fn, says in ((pairs, "(position, token) pair"), (one_common_prefix, "common to ALL prompts"),
                     (next_only, "not only the one just before it"), (dedup_first, "do not drop them first")):
        r = check.optimal_hit_rate(fn, verbose=False)
        assert not r.passed and says in _first_note(r), (fn.__name__, _notes(r))
    for name in ("orca_reservation", "fit_requests", "optimal_hit_rate"):
        assert getattr(check, name)(getattr(s09, name), verbose=False).passed


def _with_slip(fn, old: str, new: str):
    """``fn`` (a lesson solution) with one line typed wrong."""
    import inspect
    import textwrap
    src = textwrap.dedent(inspect.getsource(fn))
    assert old in src, old
    ns: dict = {}
    exec(src.replace(old, new), ns)  # noqa: S102
    return ns[fn.__name__]


def test_lesson_10_names_host_pages_of_a_backed_up_leaf_disk_miss_and_counted_names():
    s10 = _solutions("10_tiers")
    backed_pays = _with_slip(s10.write_back_evict, "        state[name] = \"host\" if backed else \"evicted\"",
                             "        if backed and name not in host_only and dict((n, b) for n, _, b in leaves)[name]:\n"
                             "            host_free -= p\n"
                             "        state[name] = \"host\" if backed else \"evicted\"")
    r = check.write_back_evict(backed_pays, verbose=False)
    assert not r.passed and "uses no host page" in _first_note(r), _notes(r)

    def miss_stays(state, event, storage=False):
        return "disk" if (state, event) == ("disk", "miss") else s10.next_placement(state, event, storage)

    r = check.next_placement(miss_stays, verbose=False)
    assert not r.passed and "is anything left to load?" in _first_note(r), _notes(r)

    for old, new, says in (("freed += pages", "freed += 1", "need counts PAGES, not victims"),
                           ("while freed < need", "while freed <= need", "one victim more is one too many"),
                           ("sum(p for _, p in t1) >= target", "len(t1) >= target", "target counts pages, not nodes")):
        r = check.arc_victims(_with_slip(s10.arc_victims, old, new), verbose=False)
        assert not r.passed and says in _first_note(r), (new, _notes(r))
    for name in ("write_back_evict", "next_placement", "arc_victims"):
        assert getattr(check, name)(getattr(s10, name), verbose=False).passed


def test_paged_decode_torch_names_a_softmax_that_overflows():
    """Review r5 of lesson 05 (5bfbfa0): exp(scores) without subtracting the max passed (no case had large
    scores); a case with scale 40 makes exp overflow float32, and the note says so."""
    import torch

    def naive_exp(q, k_cache, v_cache, block_table, context_len, scale):
        bs = k_cache.shape[1]
        pos = torch.arange(context_len)
        phys = torch.tensor(block_table)[pos // bs]
        k, v = k_cache[phys, pos % bs], v_cache[phys, pos % bs]              # (T, kv_heads, head_dim)
        group = q.shape[0] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        w = torch.exp(torch.einsum("hd,thd->ht", q, k) * scale)
        return torch.einsum("ht,thd->hd", w / w.sum(-1, keepdim=True), v)

    r = check.paged_decode_torch(naive_exp, verbose=False)
    assert not r.passed and "overflows float32" in r.summary, r.summary


def test_kernel_tiles_names_one_block_per_tile():
    """Review r5 of lesson 05 (5bfbfa0): a tile listed as its first block only got expected beside actual."""
    def one_block(context_len, block_size, tile_tokens, num_splits):
        num = -(-context_len // tile_tokens)
        per = -(-num // num_splits)
        tiles = [[t * tile_tokens // block_size] for t in range(num)]
        return [tiles[s * per:(s + 1) * per] for s in range(num_splits)]

    r = check.kernel_tiles(one_block, verbose=False)
    assert not r.passed and "one block per tile" in r.summary, r.summary
