"""The IRI parser that importing plotly builds, deferred until something validates an IRI.

``import plotly.io`` imports ``nbformat`` (its notebook renderer checks the version), which imports
``jsonschema``, whose format checkers import ``rfc3987_syntax`` when it is installed (JupyterLab's
``jupyter-events`` asks for ``jsonschema[format-nongpl]``, which brings it). ``rfc3987_syntax``
builds Earley parsers for RFC 3987 at import: measured 1.2 s of CPU, three quarters of what the
first cell of every lesson cost (``import kvlab.viz`` 1.6 s -> 0.4 s). Nothing a lesson does
validates an IRI. :func:`defer_iri_parser` puts a stand-in in ``sys.modules`` whose functions import
the real module at their first call and hand over to it, so a program that does validate IRIs
gets the same answers, later.

Example (a fresh interpreter; tests/test_iri_parser.py runs it):
    >>> import sys, kvlab.viz, jsonschema                                     # doctest: +SKIP
    >>> "lark" in sys.modules                         # the parsers are not built   # doctest: +SKIP
    False
    >>> checker = jsonschema.Draft202012Validator.FORMAT_CHECKER             # doctest: +SKIP
    >>> checker.conforms("https://example.org/a%20b", "iri"), checker.conforms("no scheme", "iri")  # doctest: +SKIP
    (True, False)
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__all__ = ["defer_iri_parser"]

MODULE = "rfc3987_syntax"


def defer_iri_parser() -> bool:
    """Put the stand-in in place unless the module is imported already or not installed; whether
    it did. Call it before plotly is imported (``kvlab.viz`` does, first thing).

    Example:
        >>> defer_iri_parser() in (True, False)
        True
    """
    if MODULE in sys.modules or importlib.util.find_spec(MODULE) is None:
        return False
    stand_in = types.ModuleType(MODULE, "kvlab's stand-in: imports rfc3987_syntax at its first use")
    stand_in.is_valid_syntax = lambda term, value: _real().is_valid_syntax(term, value)
    stand_in.__getattr__ = _other_name   # any other name: the real module's (PEP 562)
    stand_in.kvlab_stand_in = True
    sys.modules[MODULE] = stand_in
    return True


def _other_name(name: str):
    if name.startswith("__"):   # the import system asks for __path__, __spec__...: not a reason to import
        raise AttributeError(name)
    return getattr(_real(), name)


def _real() -> types.ModuleType:
    """The real module (imported now if the stand-in is still in ``sys.modules``)."""
    if getattr(sys.modules.get(MODULE), "kvlab_stand_in", False):
        del sys.modules[MODULE]
    return importlib.import_module(MODULE)
