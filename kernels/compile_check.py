"""Compile every kernel for a real GPU (sm_90) without needing one: catches interpreter-only code.

The Triton interpreter is more permissive than the GPU compiler (it accepts, for example, a
``tl.dot`` with an inner dimension below 16), so passing the CPU tests proves little about the
GPU. This module compiles each ``@triton.jit`` kernel, for the configurations the lessons use
(block size 4, head_dim 16/32) and real ones (block size 16, head_dim 128, GQA 4 and 8, fp16
and bf16, split-K; head_dim 80 and 96 padded to 128-wide tiles; a group of 64 query heads,
which runs as four programs of 16 rows), to PTX and a cubin with ``triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))``.

It needs the kernels as real ``JITFunction`` objects, i.e. imported in native mode. Run it as::

    python -m kvlab.kernels.compile_check           # re-runs itself with KVLAB_KERNEL_MODE=native

which prints one JSON line per compiled configuration and exits non-zero on any failure.
Importing kvlab.kernels in forced native mode makes no torch.cuda call, so this works on a
machine without a GPU.

Each record also gives shared memory, registers and spill bytes (from Triton's bundled
``ptxas -v``) and the PTX's vector loads and ``cp.async`` copies (pipelined loads), a first
hint of GPU performance; the test requires no spills anywhere. What it does not check: run-time behaviour
or speed (those need a GPU: see bench/bench_kernels.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

TRITON_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

# (num_heads, num_kv_heads, head_dim, block_size, dtype, num_splits): lesson sizes first, then real ones.
ATTENTION_CONFIGS = [
    (1, 1, 16, 4, torch.float32, 1),      # self_test
    (4, 1, 32, 4, torch.float16, 1),      # lesson, GQA 4
    (8, 2, 32, 4, torch.float32, 2),      # lesson, split-K
    (4, 2, 32, 4, torch.float32, 1),      # the bundled tiny model (GQA 2)
    (2, 2, 8, 4, torch.float32, 1),       # head_dim < 16: no tl.dot
    (8, 1, 64, 16, torch.float16, 1),     # GQA 8
    (32, 8, 128, 16, torch.float16, 1),   # Llama-style, the benchmark shape
    (32, 8, 128, 16, torch.bfloat16, 8),  # bf16 + split-K
    (8, 8, 64, 32, torch.float32, 4),     # MHA, fp32 (ieee dot), block 32
    (16, 2, 80, 16, torch.float16, 1),    # head_dim 80: 128-wide tiles, masked
    (32, 8, 96, 16, torch.bfloat16, 4),   # head_dim 96 + split-K
    (8, 2, 80, 16, torch.float32, 2),     # head_dim 80, fp32 (ieee dot) + split-K
    (64, 1, 128, 16, torch.float16, 1),   # MQA, group 64: 4 programs of 16 rows per KV head
    (64, 8, 128, 16, torch.bfloat16, 64), # group 8 (Llama-70B style), the most splits the plan picks
]
# (num_kv_heads, head_dim, block_size, dtype)
CACHE_CONFIGS = [
    (1, 16, 4, torch.float32),
    (2, 32, 4, torch.float16),
    (2, 32, 4, torch.float32),            # the bundled tiny model
    (3, 8, 4, torch.float32),             # row of 24 elements: padded to 32
    (8, 128, 16, torch.float16),
    (8, 128, 16, torch.bfloat16),
]
# Lesson 11's kernels: (num_heads, num_kv_heads, head_dim, block_size, q dtype, cache dtype, selected)
COMPRESSED_CONFIGS = [
    (4, 2, 32, 4, torch.float32, "i8", False),          # the bundled tiny model, int8 cache
    (9, 3, 64, 16, torch.float16, "i8", False),         # SmolLM2's heads, int8
    (9, 3, 64, 16, torch.float16, "fp8e4nv", False),    # SmolLM2's heads, fp8 e4m3
    (32, 8, 128, 16, torch.bfloat16, "fp8e4nv", True),  # Llama-3 8B, fp8 + Quest-selected blocks
    (8, 2, 128, 16, torch.float16, None, True),         # Quest over an fp16 cache
    (2, 2, 24, 4, torch.float32, None, True),           # head_dim 24: padded lanes
]
INDEX_POINTERS = {  # pointer arguments that hold indices, and their dtypes as the wrappers pass them
    "selected_blocks_ptr": "*i32", "num_selected_ptr": "*i32",
    "block_tables_ptr": "*i32", "context_lens_ptr": "*i32", "q_starts_ptr": "*i32",
    "prefix_lens_ptr": "*i32", "extend_lens_ptr": "*i32", "slot_mapping_ptr": "*i64", "block_mapping_ptr": "*i64",
}


def signature_for(fn, constexprs: dict, dtype: torch.dtype, cache_dtype: str | None = None) -> dict:
    """ASTSource signature: each argument of the kernel -> "constexpr", "*fp16", "*i32", "fp32" or "i32".
    ``cache_dtype`` ("i8", "fp8e4nv"): the element type of k_cache_ptr/v_cache_ptr of a quantized cache."""
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in INDEX_POINTERS:
            sig[name] = INDEX_POINTERS[name]
        elif cache_dtype and name in ("k_cache_ptr", "v_cache_ptr"):
            sig[name] = "*" + cache_dtype
        elif name.startswith("part_") or name.endswith("_scale_ptr"):
            sig[name] = "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = "*" + TRITON_DTYPE[dtype]
        elif name == "scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def alignment_attrs(fn, aligned: bool) -> dict:
    """What the launcher tells the compiler about 16-divisible arguments, as ASTSource attrs.

    At launch Triton specialises every pointer and int argument divisible by 16; with that
    hint the compiler emits vector loads and cp.async pipelining. torch allocations are
    aligned, and strides are multiples of head_dim, so aligned=True is the usual case.
    """
    if not aligned:
        return {}
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
            if name.endswith("_ptr") or name.startswith("stride_")}


def planned_compiles():
    """Yield (label, jit_fn, constexprs, dtype, aligned) for every kernel and configuration.

    Every configuration is compiled with the alignment hints a real launch has (when head_dim
    >= 16); the self-test configuration is compiled without them as well.
    """
    from . import block_copy, compressed_decode, extend, kv_store, paged_decode, plan
    from ._checks import next_power_of_two

    for heads, kv_heads, head_dim, block_size, dtype, splits in ATTENTION_CONFIGS:
        shape = f"h{heads}/kv{kv_heads} d{head_dim} bs{block_size} {TRITON_DTYPE[dtype]}"
        aligned = head_dim >= 16
        meta = plan.decode_meta(heads, kv_heads, head_dim, block_size, splits, dtype)
        yield f"paged_decode_kernel {shape} splits{splits}", paged_decode.paged_decode_kernel, meta, dtype, aligned
        if splits > 1:
            meta = dict(NUM_SPLITS=splits, BLOCK_S=next_power_of_two(splits), HEAD_DIM=head_dim,
                        BLOCK_D=meta["BLOCK_D"], TILE_N=meta["TILE_N"])
            yield (f"split_k_combine_kernel {shape} splits{splits}", paged_decode.split_k_combine_kernel, meta, dtype,
                   aligned)
        meta = plan.extend_meta(heads, kv_heads, head_dim, block_size, dtype)
        yield f"extend_attention_kernel {shape}", extend.extend_attention_kernel, meta, dtype, aligned
    for kv_heads, head_dim, block_size, dtype in CACHE_CONFIGS:
        shape = f"kv{kv_heads} d{head_dim} bs{block_size} {TRITON_DTYPE[dtype]}"
        aligned = head_dim >= 16
        meta = kv_store.store_meta(kv_heads, head_dim, block_size)
        yield f"store_kvcache_kernel {shape}", kv_store.store_kvcache_kernel, meta, dtype, aligned
        meta = block_copy.copy_meta(block_size, kv_heads, head_dim)
        yield f"copy_blocks_kernel {shape}", block_copy.copy_blocks_kernel, meta, dtype, aligned
    for heads, kv_heads, head_dim, block_size, dtype, cache, selected in COMPRESSED_CONFIGS:
        shape = f"h{heads}/kv{kv_heads} d{head_dim} bs{block_size} {TRITON_DTYPE[dtype]} cache {cache or 'same'}"
        meta = compressed_decode.decode_meta(heads, kv_heads, head_dim, block_size, cache is not None, selected)
        yield (f"compressed_decode_kernel {shape}{' selected' if selected else ''}",
               compressed_decode.compressed_decode_kernel, meta, (dtype, cache), head_dim >= 16)
        if cache is not None:
            meta = dict(HEAD_DIM=head_dim, BLOCK_D=next_power_of_two(head_dim), BLOCK_SIZE=block_size,
                        QMAX=127.0 if cache == "i8" else 448.0, FP8=cache != "i8")
            yield (f"store_kvcache_quant_kernel {shape}", compressed_decode.store_kvcache_quant_kernel, meta,
                   (dtype, cache), head_dim >= 16)
    heads, kv_heads, head_dim, block_size, dtype, splits = ATTENTION_CONFIGS[0]
    meta = plan.decode_meta(heads, kv_heads, head_dim, block_size, splits, dtype)
    yield (f"paged_decode_kernel h{heads}/kv{kv_heads} d{head_dim} bs{block_size} {TRITON_DTYPE[dtype]} unaligned",
           paged_decode.paged_decode_kernel, meta, dtype, False)


def all_jit_functions() -> dict:
    """Every @triton.jit function defined in the kernel modules, by name."""
    from triton.runtime.jit import JITFunction

    from . import block_copy, compressed_decode, extend, kv_store, paged_decode

    found = {}
    for module in (paged_decode, kv_store, extend, block_copy, compressed_decode):
        for name, obj in vars(module).items():
            if isinstance(obj, JITFunction) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


# Called from kernels only (compiled as part of them, never launched on their own).
HELPERS = {"load_kv_tile", "online_softmax_step", "split_range", "round_to_e4m3"}


def ptxas_usage(ptx: str) -> dict:
    """Registers and spill bytes from Triton's bundled ptxas (-v), or {} if it is not there.

    Example: {"registers": 120, "spill_bytes": 0} for the decode kernel at the benchmark shape.
    """
    import re
    import tempfile

    try:
        import triton.backends.nvidia as nvidia

        ptxas = os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.ptx")
            with open(path, "w") as f:
                f.write(ptx)
            info = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                                  capture_output=True, text=True, timeout=120).stderr
        regs = re.search(r"Used (\d+) registers", info)
        spills = re.search(r"(\d+) bytes spill stores", info)
        return {"registers": int(regs.group(1)), "spill_bytes": int(spills.group(1)) if spills else 0} if regs else {}
    except Exception:  # informational only
        return {}


def run_all(out=sys.stdout) -> bool:
    """Compile everything (native mode only); print a JSON line each; return True if all compiled."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ._mode import KERNEL_MODE

    if KERNEL_MODE != "native":
        raise RuntimeError("compile_check.run_all needs KVLAB_KERNEL_MODE=native (run `python -m kvlab.kernels.compile_check`)")
    target = GPUTarget("cuda", 90, 32)
    ok, compiled = True, set()
    for label, fn, meta, dtype, aligned in planned_compiles():
        t0 = time.perf_counter()
        record = {"kernel": label}
        try:
            dtype, cache = dtype if isinstance(dtype, tuple) else (dtype, None)
            src = ASTSource(fn, signature_for(fn, meta, dtype, cache), meta, alignment_attrs(fn, aligned))
            kernel = triton.compile(src, target=target, options={"num_warps": 4})
            ptx = kernel.asm["ptx"]
            record.update(ok=True, ptx_chars=len(ptx), cubin_bytes=len(kernel.asm["cubin"]),
                          shared_bytes=kernel.metadata.shared, vector_loads=ptx.count("ld.global.v4"),
                          cp_async=ptx.count("cp.async"), **ptxas_usage(ptx))
            compiled.add(fn.__name__)
        except Exception as exc:  # report every failure, not just the first
            ok = False
            record.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[-1500:]}")
        record["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(record), file=out, flush=True)
    missing = set(all_jit_functions()) - compiled - HELPERS
    if missing:
        ok = False
        print(json.dumps({"kernel": "coverage", "ok": False, "error": f"never compiled: {sorted(missing)}"}), file=out)
    return ok


def run_in_subprocess(timeout: float = 300) -> subprocess.CompletedProcess:
    """Run this module in a fresh Python with KVLAB_KERNEL_MODE=native and no TRITON_INTERPRET."""
    env = dict(os.environ, KVLAB_KERNEL_MODE="native")
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "kvlab.kernels.compile_check"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def main() -> int:
    from ._mode import KERNEL_MODE

    if KERNEL_MODE != "native":  # kernels were defined for the interpreter: start over in native mode
        proc = run_in_subprocess()
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        return proc.returncode
    return 0 if run_all() else 1


if __name__ == "__main__":
    sys.exit(main())
