"""Moved to ``kvlab.lessons (translation, fragmentation)``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .lessons.fragmentation import FragmentationExample, fragmentation_example  # noqa: F401
from .lessons.translation import NOTES_TABLE, notes_translation  # noqa: F401

__all__ = ["NOTES_TABLE", "notes_translation", "FragmentationExample", "fragmentation_example"]
