"""Moved to ``kvlab.memory.contiguous``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .memory.contiguous import *  # noqa: F401,F403
from .memory.contiguous import __all__  # noqa: F401
