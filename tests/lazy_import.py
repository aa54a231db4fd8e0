"""Modules imported on first use, so collecting the suite does not pay for them (transformers
takes about a second to import; collection runs in every pytest-xdist worker).

``lazy_transformers()`` stands for the ``transformers`` module: the first attribute read imports
it offline (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``: no network, ever), quiets its
logging and progress bars. A missing one (or a module in ``requires``) fails the test: the
set-up installs them, so missing means a broken set-up, never a silent skip.

Example:
    >>> transformers = lazy_transformers()
    >>> transformers.LlamaConfig().rms_norm_eps     # doctest: +SKIP
    1e-06
"""
from __future__ import annotations

import importlib
import os

REASONS = {
    "transformers": "transformers is a test dependency (pyproject [test])",
    "accelerate": "transformers' GGUF path needs accelerate (pyproject [test])",
}


class LazyModule:
    """Imports ``name`` (after ``requires``) at the first attribute read; a missing one fails."""

    def __init__(self, name: str, requires: tuple[str, ...] = (), setup=None):
        self.__dict__.update(_name=name, _requires=requires, _setup=setup, _module=None)

    def __getattr__(self, attr: str):
        module = self.__dict__["_module"]
        if module is None:
            for dep in self._requires:
                _import(dep)
            module = _import(self._name)
            if self._setup is not None:
                self._setup(module)
            self.__dict__["_module"] = module
        return getattr(module, attr)


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"{REASONS.get(name, name + ' is a test dependency')}, installed by scripts/setup.sh: {e}") from e


def _quiet(transformers) -> None:
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def lazy_transformers(requires: tuple[str, ...] = ()) -> LazyModule:
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    return LazyModule("transformers", requires, _quiet)
