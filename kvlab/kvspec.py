"""Moved to ``kvlab.memory.kvspec``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .memory.kvspec import *  # noqa: F401,F403
from .memory.kvspec import DTYPE_BYTES, GB, __all__  # noqa: F401
