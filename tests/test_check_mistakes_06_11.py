"""Issue 28, lessons 06-11: wrong answers a reviewer types, each rejected by its checker AND named.

Every wrong answer is the reference solution (solutions/NN_*.py) with one plausible mistake edited in:
off-by-one, units, a float for an int, swapped values, mutating the input, a partial rule, a lock or a
shared block ignored, a non-default parameter ignored, a change made before an error. Each must FAIL
and the first failing case must carry a note that names that mistake (the words below). The three
answers the issue found accepted (09 ``1 << n.bit_length()``, 10 the threshold per segment, 11
``torch.round``) have their own tests, written from the reproducers. A sampled mutation run of
lessons 06-11 (scripts/mutants.py) closes the file; ``make mutants LESSONS="06 07 08 09 10 11"`` is
the whole run.
"""
from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest

from kvlab import check

ROOT = Path(__file__).resolve().parent.parent
_SOLUTIONS: dict = {}


def _solution(nn: str):
    if nn not in _SOLUTIONS:
        path = next((ROOT / "solutions").glob(f"{nn}_*.py"))
        spec = importlib.util.spec_from_file_location(f"solutions_{nn}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        _SOLUTIONS[nn] = mod
    return _SOLUTIONS[nn]


def wrong_answer(nn: str, name: str, edits: list[tuple[str, str]]):
    """The reference ``name`` of lesson ``nn`` with each ``old`` text replaced by ``new`` (once)."""
    mod = _solution(nn)
    src = inspect.getsource(getattr(mod, name))
    for old, new in edits:
        assert old in src, f"the solution changed: {old!r} is not in {name}"
        src = src.replace(old, new, 1)
    scope = dict(vars(mod))
    exec(compile(src, f"<wrong {nn} {name}>", "exec"), scope)  # noqa: S102 - a test-made variant of our own file
    return scope[name]


# (lesson, exercise, the mistake, edits of the reference, words the FAIL note must contain)
WRONG = [
    ('06', 'cow_append', 'no fresh block for a full private last block',
     [('if num_tokens % block_size == 0:', 'if not block_table:')],
     'the last block was full: it is nev'),
    ('06', 'cow_append', 'copied block keeps its reference',
     [('    ref_count[src] -= 1\n', '')],
     'the copied block P1 kept this table'),
    ('06', 'cow_append', 'takes the last free block',
     [('dst = free_blocks.pop(0)', 'dst = free_blocks.pop()')],
     'take the FIRST free block (the front'),
    ('06', 'cow_append', 'returns the pair itself, not a list of pairs (crashed the checker)',
     [('return [(src, dst)]', 'return (src, dst)')],
     'returned the pair (1, 2) itself'),
    ('06', 'cow_append', 'the new block counted twice',
     [('    ref_count[dst] = 1\n', '    ref_count[dst] = 2\n')],
     'only this table holds it'),
    ('06', 'cow_append', 'copy returned but the table keeps the shared block',
     [('    block_table[-1] = dst\n', '')],
     'the table still points at the shared'),
    ('06', 'sampling_blocks', 'blocks rounded down',
     [('without = num_samples * blocks_needed(prompt_len + gen_len, block_size)',
       'without = num_samples * ((prompt_len + gen_len) // block_size)')],
     'round its tokens UP'),
    ('06', 'sampling_blocks', 'one count, not the pair',
     [('return without, full +', 'return full +')],
     'return both counts'),
    ('06', 'cow_append', 'drops the reference before raising',
     [('    if not free_blocks:                        # partial and shared: copy it first', '    ref_count[src] -= 1\n    if not free_blocks:'), ('    ref_count[dst] = 1\n    ref_count[src] -= 1\n', '    ref_count[dst] = 1\n')],
     'it changed the lists before raisin'),
    ('06', 'cow_append', 'writes into a shared block in place',
     [('if ref_count[src] == 1:', 'if ref_count[src] >= 1:')],
     'no block was copied: a sequence wr'),
    ('06', 'cow_append', 'IndexError instead of OutOfBlocks',
     [('        if not free_blocks:\n            raise OutOfBlocks(1, 0)\n', '')],
     'raised IndexError where OutOfBlock'),
    ('06', 'cow_append', 'off by one on fullness',
     [('num_tokens % block_size == 0', '(num_tokens + 1) % block_size == 0')],
     'num_tokens counts the tokens already held'),
    ('06', 'sampling_blocks', 'partial prompt block counted as shared',
     [('full = prompt_len // block_size', 'full = blocks_needed(prompt_len, block_size)')],
     'the partial last prompt block does'),
    ('06', 'sampling_blocks', 'gen_len 0 not special',
     [('    if gen_len == 0:\n        return without, blocks_needed(prompt_len, block_size)\n', '')],
     'when no token is generated nothing'),
    ('06', 'sampling_blocks', 'swapped pair',
     [('return without, full + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full)', 'return full + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full), without')],
     'without sharing and with sharing a'),
    ('06', 'sampling_blocks', 'float division for blocks',
     [('without = num_samples * blocks_needed(prompt_len + gen_len, block_size)', 'without = num_samples * float(blocks_needed(prompt_len + gen_len, block_size))')],
     'item 0: returned the float 16.0 wh'),
    ('06', 'sampling_blocks', 'counts tokens without sharing',
     [('without = num_samples * blocks_needed(prompt_len + gen_len, block_size)', 'without = num_samples * (prompt_len + gen_len)')],
     'without sharing: count each sample'),
    ('07', 'match_prefix', 'whole edge counted',
     [('        pos += i\n        if i < len(key):          # the match ends inside this edge\n            break', '        if i < len(key):\n            pos += len(key)\n            break\n        pos += i')],
     'a match that ends inside an edge c'),
    ('07', 'match_prefix', 'stops at a partial edge with 0',
     [('        pos += i\n        if i < len(key):          # the match ends inside this edge\n            break', '        if i < len(key):\n            break\n        pos += i')],
     'a match may end inside an edge: co'),
    ('07', 'match_prefix', 'first child',
     [('child = node.children.get(tokens[pos])', 'child = next(iter(node.children.values()), None)')],
     'follow the child keyed by the next'),
    ('07', 'match_prefix', 'consumes the tokens list',
     [('    node, pos = root, 0\n', '    node, pos = root, 0\n    tokens.append(-1)\n')],
     'it changed its argument `tokens` i'),
    ('07', 'match_prefix', 'off by one at the end',
     [('while pos < len(tokens):', 'while pos < len(tokens) - 1:')],
     'a match may end inside an edge: co'),
    ('07', 'prefill_tokens', 'no cap at len-1',
     [('out.append(len(p) - min(best, len(p) - 1))', 'out.append(len(p) - best)')],
     'the last prompt token is always co'),
    ('07', 'prefill_tokens', 'only the previous prompt',
     [('for q in seen:', 'for q in seen[-1:]:')],
     'the tree keeps every prompt served'),
    ('07', 'prefill_tokens', 'returns reused',
     [('out.append(len(p) - min(best, len(p) - 1))', 'out.append(min(best, len(p) - 1))')],
     'that is the number of tokens reuse'),
    ('07', 'prefill_tokens', 'mutates prompts',
     [('seen.append(p)', 'seen.append(p)\n        p.append(0)')],
     'it changed its argument `prompts`'),
    ('07', 'prefill_tokens', 'off by one in the prefix',
     [('best = max(best, n)', 'best = max(best, n - 1)')],
     'count 1 is off by one (expected 2,'),
    ('07', 'block_hash_reuse', 'no cap',
     [('limit = (len(p) - 1) // block_size', 'limit = len(p) // block_size')],
     'a fully cached prompt still comput'),
    ('07', 'block_hash_reuse', 'blocks by content, not chained',
     [('tuple(p[:(n + 1) * block_size]) in cached', 'tuple(p[n * block_size:(n + 1) * block_size]) in cached'), ('cached.add(tuple(p[:k * block_size]))', 'cached.add(tuple(p[(k - 1) * block_size:k * block_size]))')],
     'a block is reused only if every bl'),
    ('07', 'block_hash_reuse', 'only the previous prompt',
     [('        for k in range(1, len(p) // block_size + 1):', '        cached = set()\n        for k in range(1, len(p) // block_size + 1):')],
     'the cache holds the blocks of ever'),
    ('07', 'block_hash_reuse', 'mutates prompts',
     [('    cached = set()', '    prompts.sort(key=len)\n    cached = set()')],
     'it changed its argument `prompts`'),
    ('07', 'block_hash_reuse', 'token granularity',
     [('        out.append(n * block_size)', '        best = max([next((i for i in range(min(len(p), len(q))) if p[i] != q[i]), min(len(p), len(q))) for q in done] or [0])\n        out.append(min(best, len(p) - 1))\n        done.append(p)'), ('    out = []', '    out, done = [], []')],
     'some counts are not whole blocks o'),
    ('08', 'lru_evict', 'tie-break by the larger id (the review found it accepted)',
     [('(n.last_access_time, n.id)', '(n.last_access_time, -n.id)')],
     'a tie in last_access_time goes to the SMALLER id'),
    ('08', 'lru_evict', 'the nodes, not their ids',
     [('order.append(victim.id)', 'order.append(victim)')],
     "return the nodes' ids (node.id)"),
    ('08', 'inc_lock_ref', 'nodes counted, not tokens',
     [('delta -= len(node.key)', 'delta -= 1')],
     'count tokens, not nodes'),
    ('08', 'admit_plan', '>= for > in the fit test',
     [('if need > num_free + evictable:', 'if need >= num_free + evictable:')],
     'wait only when the need is MORE'),
    ('07', 'match_prefix', 'returns the node, not the count',
     [('    return pos', '    return node')],
     'returned a tree node'),
    ('07', 'block_hash_reuse', 'blocks counted, not tokens',
     [('out.append(n * block_size)', 'out.append(n)')],
     'that is a count of blocks'),
    ('09', 'fit_requests', '>= for > in the paged fit',
     [('if need > free_blocks:', 'if need >= free_blocks:')],
     'refuse only when it needs MORE'),
    ('09', 'optimal_hit_rate', 'None for an empty input',
     [('        return 0.0', '        return None')],
     'returned None'),
    ('10', 'write_back_evict', 'host eviction from the newest end',
     [('old = host_only.pop(0)', 'old = host_only.pop()')],
     'takes the OLDEST host-only leaf'),
    ('10', 'arc_victims', 'evicts from the newest end',
     [('(t1 if from_t1 else t2).pop(0)', '(t1 if from_t1 else t2).pop()')],
     'evict from its front'),
    ('11', 'streaming_keep', 'one window block too many',
     [('window = range(max(0, num_blocks - -(-window_tokens // block_size)), num_blocks)',
       'window = range(max(0, num_blocks - -(-window_tokens // block_size) - 1), num_blocks)')],
     'the window holds one block too many'),
    ('11', 'streaming_keep', 'token positions, not blocks',
     [('    return sorted(set(sinks) | set(window))',
       '    return sorted(p for b in set(sinks) | set(window) for p in range(b * block_size, min(num_tokens, (b + 1) * block_size)))')],
     'those are token positions'),
    ('08', 'lru_evict', 'MRU',
     [('victim = min(leaves', 'victim = max(leaves')],
     'least recently used goes first: th'),
    ('08', 'lru_evict', 'ignores locks',
     [('and n.lock_ref == 0\n', '\n')],
     'a locked node (lock_ref > 0) is in'),
    ('08', 'lru_evict', 'inner nodes',
     [('                  and all(c.id in removed for c in n.children.values())]', '                  ]')],
     'only leaves can go: an inner node'),
    ('08', 'lru_evict', 'one too many',
     [('while freed < num_tokens:', 'while freed <= num_tokens:')],
     'stop as soon as the freed tokens r'),
    ('08', 'lru_evict', 'by size',
     [('key=lambda n: (n.last_access_time, n.id)', 'key=lambda n: (len(n.key), n.id)')],
     'LRU orders the leaves by last_acce'),
    ('08', 'lru_evict', 'touches the tree',
     [('removed.add(victim.id)', 'removed.add(victim.id)\n        victim.last_access_time = -1')],
     'it changed the tree: work the order'),
    ('08', 'inc_lock_ref', 'locks the root',
     [('while node.parent is not None:', 'while node is not None:')],
     'the root was locked too: stop belo'),
    ('08', 'inc_lock_ref', 'sign',
     [('delta -= len(node.key)', 'delta += len(node.key)')],
     'the sign: locking takes tokens awa'),
    ('08', 'inc_lock_ref', 'counts already locked',
     [('if node.lock_ref == 0:', 'if True:')],
     'nodes that were already locked wer'),
    ('08', 'inc_lock_ref', 'only the node',
     [('        node = node.parent', '        break')],
     'not every node up the path was loc'),
    ('08', 'inc_lock_ref', "stops one below the root's child",
     [('while node.parent is not None:', 'while node.parent is not None and node.parent.parent is not None:')],
     'not every node up the path was loc'),
    ('08', 'admit_plan', 'ignores its own lock',
     [('    evictable -= sum(k for n, k in path if n.lock_ref == 0)\n', '')],
     'the request locks its matched pref'),
    ('08', 'admit_plan', 'no cap',
     [('limit = len(tokens) - 1', 'limit = len(tokens)')],
     'a fully cached prompt still comput'),
    ('08', 'admit_plan', 'evicts the whole need',
     [('return (pos, need - num_free)', 'return (pos, need)')],
     'evict only what the free slots do'),
    ('08', 'admit_plan', 'evicts even when it cannot fit',
     [('    if need > num_free + evictable:\n        return None\n', '')],
     'when even every unlocked token is'),
    ('08', 'admit_plan', 'locks the whole node',
     [('sum(k for n, k in path if n.lock_ref == 0)', 'sum(len(n.key) for n, k in path if n.lock_ref == 0)')],
     'a match that ends inside a node lo'),
    ('08', 'admit_plan', "ignores another request's lock on the path (review r12: accepted)",
     [('sum(k for n, k in path if n.lock_ref == 0)', 'sum(k for n, k in path)')],
     "it ignores another request's lock"),
    ('08', 'admit_plan', 'counts locked nodes as unlocked',
     [("evictable += len(n.key) if n.lock_ref == 0 else 0", "evictable += len(n.key)")],
     'a node locked by a running request'),
    ('08', 'admit_plan', 'one token evicted too many',
     [('return (pos, need - num_free)', 'return (pos, need - num_free + 1)')],
     'one more is one too many'),
    ('08', 'lru_evict', 'LFU for LRU',
     [('key=lambda n: (n.last_access_time, n.id)', 'key=lambda n: (n.hit_count, n.id)')],
     'not by hit_count'),
    ('08', 'admit_plan', 'locks the path for real',
     [('        path.append((child, k))', '        path.append((child, k))\n        child.lock_ref += 1')],
     'it changed the tree: plan only, th'),
    ('09', 'orca_reservation', '1 << n.bit_length()',
     [('1 << (output_len - 1).bit_length()', '1 << output_len.bit_length()')],
     'the next power of two of a power o'),
    ('09', 'orca_reservation', 'no power-of-two run',
     [('return 1 << (blocks - 1).bit_length()', 'return blocks')],
     'no power-of-two rounding: the budd'),
    ('09', 'orca_reservation', 'slots not blocks',
     [('return 1 << (blocks - 1).bit_length()', 'return (1 << (blocks - 1).bit_length()) * block_size')],
     'the answer is in blocks, not token'),
    ('09', 'orca_reservation', 'no cap',
     [('tokens = min(prompt_len + estimate, max_len)', 'tokens = prompt_len + estimate')],
     'the reservation is capped at max_l'),
    ('09', 'orca_reservation', 'floor blocks',
     [('blocks = -(-tokens // block_size)', 'blocks = tokens // block_size')],
     'rounded the blocks down: a run mus'),
    ('09', 'orca_reservation', 'float result',
     [('return 1 << (blocks - 1).bit_length()', 'return float(1 << (blocks - 1).bit_length())')],
     'returned the float 32.0 where an i'),
    ('09', 'orca_reservation', 'block_size ignored',
     [('blocks = -(-tokens // block_size)', 'blocks = -(-tokens // 16)')],
     'hard-coded block size: the answer '),
    ('09', 'orca_reservation', 'slots rounded before blocks',
     [('blocks = -(-tokens // block_size)', 'blocks = -(-(1 << (tokens - 1).bit_length()) // block_size)'),
      ('return 1 << (blocks - 1).bit_length()', 'return blocks')],
     'rounded the token slots to a power'),
    ('09', 'orca_reservation', 'no ValueError',
     [('        raise ValueError(f"mode must be \'max\', \'pow2\' or \'oracle\', got {mode!r}")', '        estimate = output_len')],
     'this input must raise ValueError:'),
    ('09', 'fit_requests', 'skips ahead',
     [('            break                                              # admission stops at the first misfit', '            continue')],
     'admission is in order and stops at'),
    ('09', 'fit_requests', 'floor blocks',
     [('need = -(-n // block_size)', 'need = n // block_size')],
     'a request of n tokens takes ceil(n'),
    ('09', 'fit_requests', 'reserve_max not capped by the count',
     [('reserve_max = min(len(lengths), capacity // max_len)', 'reserve_max = capacity // max_len')],
     'reserving max_len: no more request'),
    ('09', 'fit_requests', 'tokens not blocks',
     [('need = -(-n // block_size)', 'need = n * 1'), ('free_blocks = capacity // block_size', 'free_blocks = capacity')],
     'paged: count blocks, not tokens'),
    ('09', 'fit_requests', 'float reserve',
     [('capacity // max_len', 'capacity / max_len')],
     'item 0: returned the float 2.0 whe'),
    ('09', 'fit_requests', 'sorts the lengths',
     [('    free_blocks = capacity // block_size', '    lengths.sort()\n    free_blocks = capacity // block_size')],
     'it changed its argument `lengths`'),
    ('09', 'optimal_hit_rate', 'distinct tokens',
     [('prefixes = {tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}', 'prefixes = {t for p in prompts for t in p}')],
     'count distinct prefixes (nodes of'),
    ('09', 'optimal_hit_rate', 'percent',
     [('return 1 - len(prefixes) / total', 'return 100 * (1 - len(prefixes) / total)')],
     'that is a percentage (x 100): retu'),
    ('09', 'optimal_hit_rate', 'empty prompts divide by zero',
     [('    if total == 0:\n        return 0.0\n', '')],
     'no prompt tokens: return 0.0 (noth'),
    ('09', 'optimal_hit_rate', 'counts the empty prefix',
     [('range(1, len(p) + 1)', 'range(0, len(p) + 1)')],
     'the empty prefix holds no token: c'),
    ('09', 'optimal_hit_rate', 'hits over distinct',
     [('return 1 - len(prefixes) / total', 'return (total - len(prefixes)) / len(prefixes)')],
     'the hit rate is a fraction of all'),
    ('09', 'optimal_hit_rate', 'sorts the prompts',
     [('    total = sum(len(p) for p in prompts)', '    prompts.sort()\n    total = sum(len(p) for p in prompts)')],
     'it changed its argument `prompts`'),
    ('10', 'write_back_evict', 'never writes back',
     [('        if not backed:\n', '        if False:\n')],
     'write_back copies a leaf that has'),
    ('10', 'write_back_evict', 'endless host',
     [('            if host_free >= p:\n', '            if True:\n')],
     'the host pool is finite: a write-b'),
    ('10', 'write_back_evict', 'evicts everything',
     [('        if freed >= need:\n            break\n', '')],
     'stop as soon as `need` pages are f'),
    ('10', 'write_back_evict', 'newest first',
     [('for name, p, backed in leaves:', 'for name, p, backed in reversed(leaves):')],
     'least recently used first: the lis'),
    ('10', 'write_back_evict', "empties the caller's list",
     [('    return state', '    leaves.clear()\n    return state')],
     'it changed its argument `leaves` i'),
    ('10', 'write_back_evict', 'one leaf too many',
     [('if freed >= need:', 'if freed > need:')],
     'stop as soon as `need` pages are f'),
    ('10', 'load_back_plan', 'threshold per segment',
     [('            beyond += take', '            beyond += take if take >= threshold else 0')],
     'the threshold applies to all the h'),
    ('10', 'load_back_plan', '> threshold',
     [('beyond >= threshold', 'beyond > threshold')],
     'a hit of exactly load_back_thresho'),
    ('10', 'load_back_plan', 'no cap',
     [('limit = prompt_len - 1', 'limit = prompt_len')],
     'the match stops one token early: t'),
    ('10', 'load_back_plan', 'both is not device',
     [('where in ("device", "both")', 'where == "device"')],
     "'both' is on the device too: reuse"),
    ('10', 'load_back_plan', 'swapped device and loaded',
     [('return device, loaded, prompt_len - device - loaded', 'return loaded, device, prompt_len - device - loaded')],
     'device and loaded are swapped'),
    ('10', 'load_back_plan', 'pops the segments',
     [('    for tokens, where in segments:', '    while segments:\n        tokens, where = segments.pop(0)')],
     'it changed its argument `segments`'),
    ('10', 'next_placement', 'both evict -> evicted',
     [('("both", "evict"): "host"', '("both", "evict"): "evicted"')],
     'evict removes the DEVICE copy'),   # review r2: a question, not the answer
    ('10', 'next_placement', 'storage ignored',
     [('"disk" if storage else "evicted"', '"evicted"')],
     'with storage attached, what does h'),
    ('10', 'next_placement', 'disk load_back -> both',
     [('("disk", "load_back"): "device"', '("disk", "load_back"): "both"')],
     'a disk load-back copies the chunk'),
    ('10', 'next_placement', 'None for an impossible event',
     [('        raise ValueError(f"a {state} node cannot {event}")', '        return None')],
     "a 'new' node cannot 'write': raise"),
    ('10', 'next_placement', 'host load_back -> device',
     [('("host", "load_back"): "both"', '("host", "load_back"): "device"')],
     'loading back from the host is a co'),
    ('10', 'arc_victims', 'always T1',
     [('from_t1 = t1 and (sum(p for _, p in t1) >= target or not t2)', 'from_t1 = bool(t1)')],
     'T1 first until it is empty ignores'),
    ('10', 'arc_victims', '> target',
     [('sum(p for _, p in t1) >= target', 'sum(p for _, p in t1) > target')],
     'T1 goes first when it holds at lea'),
    ('10', 'arc_victims', 'nodes not pages',
     [('sum(p for _, p in t1) >= target', 'len(t1) >= target')],
     'target counts pages, not nodes'),
    ('10', 'arc_victims', "pops the caller's lists",
     [('t1, t2, out, freed = list(t1), list(t2), [], 0', 'out, freed = [], 0')],
     'it changed its argument `t1` in pl'),
    ('10', 'arc_victims', 'one victim too many',
     [('while freed < need and', 'while freed <= need and')],
     'stop as soon as need pages are fre'),
    ('11', 'streaming_keep', 'no sinks',
     [('sinks = range(min(-(-sink_tokens // block_size), num_blocks))', 'sinks = range(0)')],
     'you kept the recent window but dro'),
    ('11', 'streaming_keep', 'floor sinks',
     [('-(-sink_tokens // block_size)', 'sink_tokens // block_size')],
     'the sinks were counted with floor:'),
    ('11', 'streaming_keep', 'duplicates',
     [('return sorted(set(sinks) | set(window))', 'return list(sinks) + list(window)')],
     'a block appears twice: when sinks'),
    ('11', 'streaming_keep', 'window in tokens',
     [('-(-window_tokens // block_size)', 'window_tokens')],
     'window_tokens counts tokens, not blocks'),
    ('11', 'streaming_keep', 'no validation',
     [('        if not isinstance(v, int) or v < lo:\n            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")\n', '        pass\n')],
     'this input must raise ValueError:'),
    ('11', 'streaming_keep', 'floor num_blocks',
     [('num_blocks = -(-num_tokens // block_size)', 'num_blocks = num_tokens // block_size')],
     'the window missed the newest (part'),
    ('11', 'quest_pick', 'q . max',
     [('bound = torch.maximum(q * k_max, q * k_min).sum(-1)', 'bound = (q * k_max).sum(-1)')],
     'you ranked blocks by q . max: wher'),
    ('11', 'quest_pick', 'centre',
     [('bound = torch.maximum(q * k_max, q * k_min).sum(-1)', 'bound = (q * (k_max + k_min) / 2).sum(-1)')],
     'you ranked blocks by q . (min + ma'),
    ('11', 'quest_pick', 'ranked order',
     [('return sorted(order[:top_k])', 'return order[:top_k]')],
     'return the chosen blocks in ascend'),
    ('11', 'quest_pick', 'tensor result',
     [('return sorted(order[:top_k])', 'return torch.tensor(sorted(order[:top_k]))')],
     'returned a Tensor where a plain li'),
    ('11', 'quest_pick', 'changes q',
     [('    bound = torch.maximum', '    q.abs_()\n    bound = torch.maximum')],
     'it changed its argument `q` in pla'),
    ('11', 'quest_pick', 'no ValueError',
     [('    if top_k < 1:\n        raise ValueError(f"top_k must be >= 1, got {top_k}")\n', '')],
     'this input must raise ValueError:'),
    ('11', 'quest_pick', 'ties to the higher block',
     [('key=lambda b: (-float(bound[b]), b)', 'key=lambda b: (-float(bound[b]), -b)')],
     'on a tie the lower block goes firs'),
    ('11', 'quantize_per_token', 'torch.round',
     [('torch.floor(x / scale[..., None] + 0.5)', 'torch.round(x / scale[..., None])')],
     'torch.round sends a value exactly'),
    ('11', 'quantize_per_token', '128 levels',
     [('scale = x.abs().amax(dim=-1) / 127', 'scale = x.abs().amax(dim=-1) / 128')],
     'the largest |value| of each (token'),
    ('11', 'quantize_per_token', 'one scale for the tensor',
     [('scale = x.abs().amax(dim=-1) / 127', 'scale = (x.abs().max() / 127).expand(x.shape[:2]).clone()')],
     'one scale for the whole tensor ('),
    ('11', 'quantize_per_token', 'divides x in place',
     [('xq = torch.clamp(torch.floor(x / scale[..., None] + 0.5)', 'xq = torch.clamp(torch.floor(x.div_(scale[..., None]) + 0.5)')],
     'it changed its argument `x` in pla'),
    ('11', 'quantize_per_token', 'scale keeps head_dim',
     [('    return xq, scale', '    return xq, scale[..., None]')],
     'scale must have shape (num_tokens,'),
    ('11', 'quantize_per_token', 'no int8',
     [(', -127, 127).to(torch.int8)', ', -127, 127)')],
     'xq must be a torch.int8 tensor (.t'),
    ('11', 'quantize_per_token', 'zero scale kept',
     [('    scale = torch.where(scale > 0, scale, torch.ones_like(scale))\n', '')],
     'an all-zero head gives scale 0 (an'),
    ('11', 'quantize_per_token', 'truncates',
     [('torch.floor(x / scale[..., None] + 0.5)', '(x / scale[..., None])')],
     'values truncated toward zero (.to('),
    ('09', 'orca_reservation', 'max_len ignored (a non-default parameter)',
     [('tokens = min(prompt_len + estimate, max_len)', 'tokens = min(prompt_len + estimate, 2048)'), ('estimate = max_len ', 'estimate = 2048 ')],
     'max_len is a parameter'),
    ('11', 'streaming_keep', 'block_size ignored (a non-default parameter)',
     [('num_blocks = -(-num_tokens // block_size)', 'num_blocks = -(-num_tokens // 16)')],
     'as if block_size were 16'),
    ('10', 'load_back_plan', 'threshold ignored',
     [('loaded = beyond if beyond and beyond >= threshold else 0', 'loaded = beyond')],
     'hits shorter than load_back_thresho'),
    ('08', 'admit_plan', 'free slots ignored',
     [('    if need <= num_free:\n        return (pos, 0)\n', '')],
     'when the free slots cover the need'),
    ('10', 'write_back_evict', 'need ignored',
     [('if freed >= need:', 'if freed >= 1:')],
     'as if need were 1'),
    ('08', 'lru_evict', 'stops one token short',
     [('while freed < num_tokens:', 'while freed < num_tokens - 1:')],
     'as if num_tokens were one less'),
    ("10", "write_back_evict", "a dropped leaf counted as host room",
     [("        if backed:\n            host_only.append(name)", "        host_only.append(name)")],
     "a dropped leaf has no host copy"),
]

# Rejected but not named (a constant in place of block_size in one of two formulas): the FAIL shows
# expected beside actual only. Counted in the named fraction of the report.
REJECTED_UNNAMED = [
    ("06", "sampling_blocks", "block_size ignored in the shared count only",
     [("full = prompt_len // block_size", "full = prompt_len // 16")]),
    ("07", "block_hash_reuse", "block_size ignored in the cap only",
     [("limit = (len(p) - 1) // block_size", "limit = (len(p) - 1) // 4")]),
]


@pytest.mark.parametrize("nn,name,mistake,edits", REJECTED_UNNAMED)
def test_partial_wrong_answers_are_rejected(nn, name, mistake, edits):
    assert not getattr(check, name)(wrong_answer(nn, name, edits), verbose=False).passed, mistake



@pytest.mark.parametrize("nn,name,mistake,edits,words", WRONG, ids=[f"{w[0]}-{w[1]}-{w[2]}" for w in WRONG])
def test_wrong_answer_is_rejected_and_named(nn, name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer(nn, name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary  # what the student reads: the FAIL line names it


def test_at_least_four_wrong_answers_an_exercise():
    per = {}
    for nn, name, *_ in WRONG:
        per[name] = per.get(name, 0) + 1
    assert len(per) == 18 and min(per.values()) >= 4, per


def test_issue_28_next_power_of_two_of_a_power_of_two():
    """Reproducer: 1 << n.bit_length() takes 256 to 512; no case had a power-of-two output."""
    bad = wrong_answer("09", "orca_reservation", [("1 << (output_len - 1).bit_length()", "1 << output_len.bit_length()")])
    assert bad(1, 256, "pow2") == 64 and _solution("09").orca_reservation(1, 256, "pow2") == 32
    r = check.orca_reservation(bad, verbose=False)
    assert not r.passed and "power of two of a power of two is itself" in r.summary


def test_issue_28_load_back_threshold_on_the_sum_not_each_segment():
    """Reproducer: [(2, device), (2, host), (2, disk)], prompt 10, threshold 3: (2, 4, 4), not (2, 0, 8)."""
    bad = wrong_answer("10", "load_back_plan", [("            beyond += take", "            beyond += take if take >= threshold else 0")])
    segs = [(2, "device"), (2, "host"), (2, "disk")]
    assert bad(segs, 10, 3) == (2, 0, 8) and _solution("10").load_back_plan(segs, 10, 3) == (2, 4, 4)
    r = check.load_back_plan(bad, verbose=False)
    assert not r.passed and "not to each segment" in r.summary


def test_issue_28_torch_round_is_not_round_half_up():
    """Reproducer: torch.round sends 2.5 to 2 (half to even); the format rounds halves up."""
    bad = wrong_answer("11", "quantize_per_token", [("torch.floor(x / scale[..., None] + 0.5)", "torch.round(x / scale[..., None])")])
    r = check.quantize_per_token(bad, verbose=False)
    assert not r.passed and "EVEN neighbour" in r.summary


@pytest.mark.parametrize("name", sorted({w[1] for w in WRONG}))
def test_reference_still_passes(name):
    nn = next(w[0] for w in WRONG if w[1] == name)
    assert getattr(check, name)(getattr(_solution(nn), name), verbose=False).passed


# ------------------------------------------------------------------ mutation testing, sampled
_spec = importlib.util.spec_from_file_location("kvlab_mutants_06_11", ROOT / "scripts" / "mutants.py")
mutants = importlib.util.module_from_spec(_spec)
sys.modules["kvlab_mutants_06_11"] = mutants
_spec.loader.exec_module(mutants)  # type: ignore[union-attr]


@pytest.mark.parametrize("nn", ["06", "07", "08", "09", "10", "11"])
def test_sampled_mutants_are_killed(nn):
    outs = mutants.run_lesson(nn, sample=3, timeout=3)  # a mutant that loops forever is a timeout: killed
    assert len(outs) >= 3
    bad = [(o.mutant_id, o.status, o.change) for o in outs if o.status not in ("killed", "equivalent", "timeout")]
    assert not bad, f"mutants the checker accepts (or crashes on): {bad}"


def test_equivalent_survivors_06_11_exist_and_say_why():
    ids = {s.mutant_id for nn in ("06", "07", "08", "09", "10", "11") for s in mutants.lesson_sites(nn)[1]}
    listed = {k: v for k, v in mutants.load_equivalent().items() if k[:2] in ("06", "07", "08", "09", "10", "11")}
    assert listed and all(k in ids for k in listed), [k for k in listed if k not in ids]
    assert all(len(reason) > 20 for reason in listed.values())


# ------------------------------------------------------------------ hints and statements (item 4)
def _markdown(stem: str) -> str:
    return (ROOT / "notebooks" / "src" / f"{stem}.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("stem", ["06_sharing", "07_radix", "08_eviction_scheduling", "09_at_scale", "10_tiers",
                                  "11_fewer_bytes"])
def test_hints_06_11_do_not_quote_the_solution(stem):
    """Issue 28: 07 ex. 3, 08 ex. 1 and 09 ex. 1's hints added up to the solution (the next power of
    two's expression, the set of block prefixes, the scan with its stopping rules)."""
    sol = (ROOT / "solutions" / f"{stem}.py").read_text(encoding="utf-8")
    code = {ln.split("#")[0].strip() for ln in sol.splitlines()}
    code = {ln for ln in code if len(ln) > 14 and not ln.startswith(('"""', "def ", "raise", "return None"))}
    flat = re.sub(r"\s+", "", sol)
    for h in re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", _markdown(stem), re.S):
        assert not [ln for ln in code if ln in h], f"{stem}: a hint quotes the solution"
        spans = [re.sub(r"\s+", "", x) for x in re.findall(r"`([^`]+)`", re.sub(r"\n# ?", " ", h)) if len(x) >= 28]
        assert not [x for x in spans if x in flat], f"{stem}: a hint hands over an expression of the solution: {spans}"


@pytest.mark.parametrize("stem,heading,formula", [
    ("09_at_scale", "### Exercise 3", "distinct non-empty prefixes"),
    ("11_fewer_bytes", "### Exercise 3", "floor(x / scale + 0.5)"),
])
def test_former_transcriptions_are_design_questions(stem, heading, formula):
    statement = _markdown(stem).split(heading)[1].split("# %%")[0]
    assert "design question" in statement and formula not in statement and "predict" in statement.lower()


def test_06_exercise_1_is_a_design_question():
    """Review: exercise 1 listed the three cases and what to do in each (the algorithm)."""
    statement = _markdown("06_sharing").split("### Exercise 1")[1].split("# %%")[0]
    assert "You design" in statement and "Rules:" not in statement and "ref_count > 1" not in statement


@pytest.mark.parametrize("stem,giveaway", [
    ("07_radix", "p[:k * block_size]"),                       # ex. 3: the set of cached prefixes, then the count, then the cap
    ("07_radix", "rounded **down** to whole blocks"),
    ("08_eviction_scheduling", "all its children are removed"),  # ex. 1: the candidate rule, the key, both stopping rules
    ("08_eviction_scheduling", "Two stopping rules"),
    ("09_at_scale", "1 << (n - 1).bit_length()"),            # ex. 1: the estimate, the cap, both roundings, in code
    ("09_at_scale", "-(-slots // block_size)"),
    ("09_at_scale", "Collect every prefix of every prompt in a set"),
    ("11_fewer_bytes", "x.abs().amax(dim=-1)"),
    ("06_sharing", "prompt_len // block_size"),                 # ex. 2: the shared count, then the exception
    ("06_sharing", "Check \"is it full?\" **before**"),            # ex. 1: the case order
])
def test_issue_28_hint_giveaways_are_gone(stem, giveaway):
    hints = "".join(re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", _markdown(stem), re.S))
    assert giveaway not in hints


# ------------------------------------------------------------------ round 6: lessons 07, 08, 11's review
# (lesson, exercise, the mistake, edits of the reference, words the FAIL note must contain)
REVIEW_07_08_11 = [
    # accepted by the checker in the review (the reproducers)
    ("08", "lru_evict", "a do-while loop: num_tokens=0 still evicts one node (accepted)",
     [("    while freed < num_tokens:\n", "    while True:\n"),
      ("        freed += len(victim.key)\n", "        freed += len(victim.key)\n        if freed >= num_tokens:\n            break\n")],
     "asked for 0 tokens"),
    ("08", "admit_plan", "fully cached, 0 free: the need from the uncapped match (accepted)",
     [("    limit = len(tokens) - 1\n", "    limit = len(tokens)\n"),
      ("    need = len(tokens) - pos\n", "    need = len(tokens) - pos\n    pos = min(pos, len(tokens) - 1)\n")],
     "the need counts the last token too"),
    # rejected without naming it in the review
    ("08", "inc_lock_ref", "lock_ref == 0 tested after incrementing",
     [("        if node.lock_ref == 0:\n            delta -= len(node.key)\n        node.lock_ref += 1\n",
       "        node.lock_ref += 1\n        if node.lock_ref == 0:\n            delta -= len(node.key)\n")],
     "BEFORE you add"),
    ("07", "match_prefix", "capped at len(tokens) - 1 (the request cycle's rule, not the lookup's)",
     [("    return pos\n", "    return min(pos, max(len(tokens) - 1, 0))\n")],
     "the cap at len(tokens) - 1 belongs to"),
    ("07", "prefill_tokens", "the prompt itself among the earlier ones",
     [("    for p in prompts:\n        best = 0\n", "    for p in prompts:\n        seen.append(p)\n        best = 0\n")],
     "among the earlier ones"),
    ("07", "prefill_tokens", "exact repeats only",
     [("            best = max(best, n)\n", "            best = max(best, len(p) if p == q else 0)\n")],
     "not only an exact repeat"),
    ("07", "block_hash_reuse", "no chain: the same block at the same index of any earlier prompt",
     [("tuple(p[:(n + 1) * block_size]) in cached", "(n, tuple(p[n * block_size:(n + 1) * block_size])) in cached"),
      ("cached.add(tuple(p[:k * block_size]))", "cached.add((k - 1, tuple(p[(k - 1) * block_size:k * block_size])))")],
     "the same block at the same place"),
    ("07", "block_hash_reuse", "always leaves the last matched block out",
     [("        out.append(n * block_size)\n", "        out.append(max(n - 1, 0) * block_size)\n")],
     "one block short"),
    ("07", "block_hash_reuse", "parameters swapped in the signature",
     [("def block_hash_reuse(prompts, block_size):", "def block_hash_reuse(block_size, prompts):")],
     "takes (block_size, prompts)"),
    ("11", "streaming_keep", "sink_tokens and window_tokens swapped in the signature",
     [("def streaming_keep(num_tokens, block_size, sink_tokens, window_tokens):",
       "def streaming_keep(num_tokens, block_size, window_tokens, sink_tokens):")],
     "sink_tokens and window_tokens are swapped"),
    ("11", "quest_pick", "torch.topk without a clamp (top_k > num_blocks raised RuntimeError)",
     [("    order = sorted(range(len(bound)), key=lambda b: (-float(bound[b]), b))\n    return sorted(order[:top_k])",
       "    return sorted(torch.topk(bound, top_k).indices.tolist())")],
     "more than the blocks there are"),
]


# ------------------------------------------------------------------ round 7: lessons 07, 08's student review
# (lesson, exercise, the mistake, edits of the reference, words the FAIL note must contain)
REVIEW_07_08_ROUND7 = [
    # accepted by the checker in the review (the reproducers)
    ("08", "inc_lock_ref", "a float change (-2.0 for -2) (accepted)",
     [("            delta -= len(node.key)\n", "            delta -= float(len(node.key))\n")],
     "the float"),
    ("08", "admit_plan", "a list with a float count ([5, 0.0]) for the tuple (accepted)",
     [("        return (pos, 0)\n", "        return [pos, 0.0]\n")],
     "the float 0.0"),
    ("08", "admit_plan", "locks the uncapped match (accepted)",
     [("    limit = len(tokens) - 1\n", "    limit = len(tokens)\n"),
      ("    need = len(tokens) - pos\n", "    pos = min(pos, len(tokens) - 1)\n    need = len(tokens) - pos\n")],
     "lock only the capped prefix"),
    # rejected without naming it in the review
    ("08", "lru_evict", "counts nodes, not tokens",
     [("        freed += len(victim.key)\n", "        freed += 1\n")],
     "count tokens"),
    ("08", "lru_evict", "the root goes once childless",
     [("        if not leaves:\n", "        if not leaves and root.id not in removed and all(c.id in removed for c in root.children.values()):\n"
                               "            leaves = [root]\n        if not leaves:\n")],
     "the root may never go"),
    ("08", "inc_lock_ref", "lock_ref = 1, not += 1",
     [("        node.lock_ref += 1\n", "        node.lock_ref = 1\n")],
     "lock_ref = 1 overwrites other requests' locks"),
    ("07", "match_prefix", "one level down only (stops after a whole edge)",
     [("        node = child\n", "        break\n")],
     "after a whole edge, continue into its child"),
    ("07", "match_prefix", "one level down only (looks under the root again)",
     [("        node = child\n", "")],
     "after a whole edge, continue into its child"),
    ("07", "block_hash_reuse", "block size hard-coded to 16",
     [("    for p in prompts:\n", "    block_size = 16\n    for p in prompts:\n")],
     "use block_size, not a constant"),
    ("07", "block_hash_reuse", "the chain checked with the previous block only",
     [("tuple(p[:(n + 1) * block_size]) in cached", "tuple(p[max(n - 1, 0) * block_size:(n + 1) * block_size]) in cached"),
      ("cached.add(tuple(p[:k * block_size]))", "cached.add(tuple(p[max(k - 2, 0) * block_size:k * block_size]))")],
     "not only the previous block"),
]


@pytest.mark.parametrize("nn,name,mistake,edits,words", REVIEW_07_08_11 + REVIEW_07_08_ROUND7,
                         ids=[f"{w[0]}-{w[1]}-{w[2]}" for w in REVIEW_07_08_11 + REVIEW_07_08_ROUND7])
def test_review_07_08_11_wrong_answer_is_rejected_and_named(nn, name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer(nn, name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary
