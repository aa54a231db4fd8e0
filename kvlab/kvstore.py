"""Moved to ``kvlab.compute.kv_tensors``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.kv_tensors import *  # noqa: F401,F403
