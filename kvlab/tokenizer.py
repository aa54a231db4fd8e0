"""Moved to ``kvlab.compute.tokenizer``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.tokenizer import *  # noqa: F401,F403
from .compute.tokenizer import __all__ as _all

# names added since the move live only in kvlab.compute.tokenizer
__all__ = [n for n in _all if n != "bytes_to_unicode"]
