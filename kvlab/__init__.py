"""kvlab: learn how LLM inference servers manage the KV cache, by running it.

Layers (each imports only the ones above it in this list):
    kvlab.events, kvlab.paged, kvlab.contiguous, kvlab.kvspec   memory (pure Python)
    kvlab.radix, kvlab.prefix_cache                              reuse (pure Python)
    kvlab.kernels, kvlab.model, kvlab.engine                     compute (torch, Triton)
    kvlab.sim                                                    scale (simulated)
    kvlab.viz, kvlab.check                                       seeing and grading

``import kvlab`` is light: it loads the memory layer only. torch and Triton load when
you import ``kvlab.kernels`` or the model.

Example:
    >>> import kvlab
    >>> kvlab.translate([3, 7, 1, 5, 9], pos=9, block_size=4).physical_block
    1
"""
from __future__ import annotations

import os as _os

# kernels/ lives at the top of the repository and is installed as kvlab.kernels. In a
# source checkout (PYTHONPATH=., or an editable install) make `kvlab.kernels` resolve
# to that folder too. (Never import it as a top-level `kernels`: a PyPI package has that name.)
_here = _os.path.dirname(_os.path.abspath(__file__))
_repo = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "kernels")) and _os.path.isfile(_os.path.join(_repo, "kernels", "__init__.py")):
    __path__.append(_repo)  # type: ignore[name-defined]  # only `kvlab.kernels` is looked up there

from .events import Event, EventLog  # noqa: E402
from .kvspec import GPUS, MODELS, GPUSpec, KVSpec, format_bytes, get_gpu, get_model  # noqa: E402
from .paged import (  # noqa: E402
    BlockAllocator,
    BlockManager,
    BlockTable,
    DoubleFree,
    KVCacheError,
    MemorySnapshot,
    OutOfBlocks,
    Translation,
    UnknownBlock,
    blocks_needed,
    translate,
)
from .contiguous import ContiguousArena, OutOfContiguousSpace  # noqa: E402

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
    "kernel_mode", "versions",
]
