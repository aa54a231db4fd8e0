"""Moved to ``kvlab.reuse.schedule``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .reuse.schedule import SCHEDULE_POLICIES, order_by_shared_prefix, shared_prefix_lengths  # noqa: F401

__all__ = ["SCHEDULE_POLICIES", "order_by_shared_prefix", "shared_prefix_lengths"]
