"""The first cell of every lesson: :func:`self_test` checks the machine the lesson runs on.

It prints the versions of kvlab and the libraries the lessons use, the kernel mode (native
CUDA or the Triton CPU interpreter), one known-answer kernel call, and a warning with the fix
for each missing optional package. It raises RuntimeError, with the fix, when the kernels
cannot be imported or give a wrong answer.

Named ``environment`` rather than ``self_test`` so that the module and the function
``kvlab.check.self_test`` are never confused.

Mirrors no vLLM or SGLang file (a lesson's setup check).
"""
from __future__ import annotations

import os

__all__ = ["SelfTestResult", "self_test"]


def _lab_packages() -> list[str]:
    """Warnings (with the fix) for missing lesson-only packages; empty when all is well."""
    import importlib.util
    import shutil

    out = []
    for mod in ("ipywidgets", "plotly", "graphviz"):
        if importlib.util.find_spec(mod) is None:
            out.append(f"WARNING: {mod} is not installed: pictures fall back to text. Fix: pip install -e '.[lab]'")
    if importlib.util.find_spec("graphviz") is not None and shutil.which("dot") is None:
        out.append("WARNING: graphviz's `dot` program is missing: radix trees show as text. Fix: apt-get install graphviz")
    return out


class SelfTestResult(dict):
    """What :func:`self_test` found (a dict); shows nothing in a notebook (the report was printed)."""

    def _ipython_display_(self) -> None:
        return None


def _show_page_style() -> None:
    """In a Jupyter kernel, the lesson page's style (:func:`kvlab.viz.palette.page_css`: printed
    text wraps at words at every size); nothing in a plain Python shell or without IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if getattr(get_ipython(), "kernel", None) is None:
        return
    from IPython.display import display

    from ..viz.palette import page_css

    display({"text/html": page_css(), "text/plain": ""}, raw=True)


def self_test(verbose: bool = True) -> SelfTestResult:
    """The first cell of every lesson: versions, kernel mode, one known-answer kernel call.

    Prints (when verbose) and returns ``{"versions": ..., "mode": ..., "kernel": report,
    "static": bool, "warnings": [...]}``. Raises RuntimeError with the fix when the
    kernels cannot be imported or give a wrong answer.
    """
    import kvlab

    versions = kvlab.versions()
    lines = ["kvlab self-test", "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    try:
        import kvlab.kernels as K
    except Exception as exc:
        raise RuntimeError(
            f"kvlab self-test: cannot import kvlab.kernels ({type(exc).__name__}: {exc}).\n"
            "Fix: run scripts/setup.sh (or pip install -e '.[lab,test]' with torch>=2.4 and triton 3.6-3.9), "
            "then restart the Python kernel."
        ) from exc
    report = K.self_test()  # raises RuntimeError with its own fix
    # The kernel report starts with its own versions line (torch | triton | numpy | python); the
    # "versions:" line above already names each of them: print every version once (issue 16 bug 8).
    lines += [ln for ln in report.splitlines() if not (ln.startswith("torch ") and " | triton " in ln)]
    if K.KERNEL_MODE == "interpreter":
        lines.append("note: the Triton interpreter runs the kernels on the CPU: correct but slow; every kernel "
                     "timing in the lessons is CPU-interpreter time")
    # read after the kernel call: the browser test's site recorder forks a cell where it first reads
    # KVLAB_STATIC (tests/site_recorder.py), and the kernel call is most of this cell's time
    static = os.environ.get("KVLAB_STATIC", "").strip().lower() in ("1", "true", "yes", "frames")
    lines.append("pictures: " + (f"static images (KVLAB_STATIC={os.environ['KVLAB_STATIC'].strip()})" if static else "interactive widgets"))
    warns = _lab_packages()
    lines += warns
    lines.append("self-test OK")
    if verbose:
        print("\n".join(lines))
        _show_page_style()
    return SelfTestResult(versions=versions, mode=K.KERNEL_MODE, kernel=report, static=static, warnings=warns)
