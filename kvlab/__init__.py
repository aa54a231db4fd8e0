"""kvlab: learn how LLM inference servers manage the KV cache, by running it.

Layers (folders), each importing only the ones above it in this list:
    kvlab.memory    block pool, block tables + BlockManager, contiguous arena, KV sizes, events (pure Python)
    kvlab.reuse     radix cache, eviction, block-hash cache, CacheManager (the request cycle), order (pure Python)
    kvlab.kernels   Triton kernels and their torch references (the repository's kernels/ folder)
    kvlab.compute   model, loader, tokenizer, KV tensors, ModelRunner, Scheduler, Engine, generate (torch)
    kvlab.sim       serving at scale, simulated
    kvlab.lessons   the source notes' worked examples
    kvlab.viz, kvlab.check   seeing and grading

``import kvlab`` is light: it loads the memory and reuse layers only. torch and Triton load when
you import ``kvlab.kernels`` or ``kvlab.compute``.

Example:
    >>> import kvlab
    >>> kvlab.translate([3, 7, 1, 5, 9], pos=9, block_size=4).physical_block
    1
"""
from __future__ import annotations

from .memory import (
    GPUS,
    MODELS,
    NO_LOG,
    BlockAllocator,
    BlockManager,
    BlockTable,
    ContiguousArena,
    DoubleFree,
    Event,
    EventLog,
    GPUSpec,
    KVCacheError,
    KVSpec,
    MemorySnapshot,
    NullLog,
    OutOfBlocks,
    OutOfContiguousSpace,
    Translation,
    UnknownBlock,
    blocks_needed,
    format_bytes,
    get_gpu,
    get_model,
    translate,
)
from .reuse import BlockHashCache, CacheManager, RadixCache, serve_request

__version__ = "0.1.0"


def kernel_mode() -> str:
    """'native' (CUDA GPU) or 'interpreter' (Triton's CPU interpreter). Imports torch."""
    from .kernels import KERNEL_MODE

    return KERNEL_MODE


def versions() -> dict[str, str]:
    """Versions of kvlab and the libraries the lessons use ('missing' when absent)."""
    import importlib.metadata as md
    import sys

    out = {"python": sys.version.split()[0], "kvlab": __version__}
    for pkg in ("torch", "triton", "numpy", "jupyterlab", "ipywidgets", "plotly", "graphviz", "tokenizers", "safetensors"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "missing"
    return out


__all__ = [
    "Event", "EventLog", "KVSpec", "GPUSpec", "MODELS", "GPUS", "get_model", "get_gpu", "format_bytes",
    "BlockAllocator", "BlockTable", "BlockManager", "MemorySnapshot", "Translation", "translate", "blocks_needed",
    "KVCacheError", "OutOfBlocks", "DoubleFree", "UnknownBlock", "ContiguousArena", "OutOfContiguousSpace",
    "NullLog", "NO_LOG", "CacheManager", "RadixCache", "BlockHashCache", "serve_request",
    "kernel_mode", "versions",
]
