"""Moved to ``kvlab.compute.model`` (the module), ``kvlab.compute.loader`` (loading, saving, the
bundled model) and ``kvlab.compute.config`` (LlamaConfig, CheckpointError); this module re-exports
their public names for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .compute.config import *  # noqa: F401,F403
from .compute.config import __all__ as _config
from .compute.loader import *  # noqa: F401,F403
from .compute.loader import __all__ as _loader
from .compute.model import *  # noqa: F401,F403
from .compute.model import __all__ as _model

# names added since the move live only in kvlab.compute
_NEW = {"HF_LLAMA_DEFAULTS", "MODEL_NAMES", "SMOLLM2_HINT", "smollm2_path", "build_model", "decode_attention"}
__all__ = sorted((set(_config) | set(_model) | set(_loader)) - _NEW)
