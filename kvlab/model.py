"""Moved to ``kvlab.compute.model``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.model import *  # noqa: F401,F403
