"""Moved to ``kvlab.compute.generate``; this module re-exports it for one release (kvlab 0.2). Import from there.
(``paged_forward`` is gone: a forward pass over the paged pool is ``kvlab.compute.model_runner.ModelRunner``.)"""
from __future__ import annotations

from .compute.generate import *  # noqa: F401,F403
from .compute.generate import __all__  # noqa: F401
