"""Moved to ``kvlab.compute.engine``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.engine import *  # noqa: F401,F403
