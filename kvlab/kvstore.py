"""Moved to ``kvlab.compute.kv_tensors`` (and ``block_tables_tensor`` to ``kvlab.compute.model_runner``);
this module re-exports them for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.kv_tensors import *  # noqa: F401,F403
from .compute.kv_tensors import __all__ as _kv_tensors
from .compute.model_runner import block_tables_tensor

__all__ = [*_kv_tensors, "block_tables_tensor"]
