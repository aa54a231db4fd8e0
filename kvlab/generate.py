"""Moved to ``kvlab.compute.generate``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.generate import *  # noqa: F401,F403
