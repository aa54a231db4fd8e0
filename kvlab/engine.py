"""Moved to ``kvlab.compute.engine``; this module re-exports it for one release (kvlab 0.2). Import from there.
(What ``Engine.submit`` returns is now ``kvlab.compute.sequence.RequestState``; ``Request`` holds
a request's inputs only, and ``Seq`` became ``kvlab.compute.sequence.Sequence``.)"""
from __future__ import annotations

from .compute.engine import *  # noqa: F401,F403
from .compute.engine import __all__  # noqa: F401
