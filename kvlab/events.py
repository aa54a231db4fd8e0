"""Moved to ``kvlab.memory.events``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .memory.events import NO_LOG, Event, EventLog, NullLog  # noqa: F401

__all__ = ["Event", "EventLog", "NullLog", "NO_LOG"]
