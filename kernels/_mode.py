"""Decide, once, whether the kernels run natively on a CUDA GPU or in the Triton interpreter.

This module is executed by ``kvlab.kernels.__init__`` before any kernel module is
imported, because Triton reads ``TRITON_INTERPRET`` at the moment ``@triton.jit``
decorates a function: set it later and every launch fails with ``0 active drivers``.

The rule:

1. ``KVLAB_KERNEL_MODE=native`` or ``KVLAB_KERNEL_MODE=interpreter`` in the environment wins
   (useful to force the interpreter on a GPU machine, or to compile kernels for a GPU
   on a machine without one). Nothing in ``torch.cuda`` is called in that case.
2. Otherwise the mode is ``native`` iff ``torch.cuda.is_available()``. That single call is the
   whole decision; the CPU path makes no other ``torch.cuda`` call.

In interpreter mode ``TRITON_INTERPRET=1`` is set and kernels take CPU tensors
(``DEVICE == "cpu"``); in native mode ``TRITON_INTERPRET=0`` is set and kernels take CUDA
tensors (``DEVICE == "cuda"``).

What this module does not handle: switching mode after the kernels are imported
(restart the Python process instead), ROCm or other Triton backends.

Example (on a laptop without an NVIDIA GPU)::

    from kvlab.kernels import KERNEL_MODE, DEVICE
    KERNEL_MODE, DEVICE    # -> ('interpreter', 'cpu')
"""

from __future__ import annotations

import os
import platform

_MODES = ("native", "interpreter")


def _decide() -> tuple[str, str]:
    """Return (mode, reason). Only place in kvlab that calls torch.cuda.is_available()."""
    forced = os.environ.get("KVLAB_KERNEL_MODE", "").strip().lower()
    if forced:
        if forced not in _MODES:
            raise ValueError(
                f"KVLAB_KERNEL_MODE={forced!r} is not one of {_MODES}; unset it to choose automatically"
            )
        return forced, f"forced by KVLAB_KERNEL_MODE={forced}"
    import torch

    if torch.cuda.is_available():
        return "native", "torch.cuda.is_available() is True"
    return "interpreter", "torch.cuda.is_available() is False"


KERNEL_MODE, _REASON = _decide()
DEVICE = "cuda" if KERNEL_MODE == "native" else "cpu"
# Must happen before any @triton.jit in kvlab.kernels runs.
os.environ["TRITON_INTERPRET"] = "1" if KERNEL_MODE == "interpreter" else "0"


def _device_name() -> str:
    if KERNEL_MODE == "native":
        try:
            import torch

            return torch.cuda.get_device_name(0)
        except Exception as exc:  # e.g. native mode forced for compile-only checks
            return f"unavailable ({type(exc).__name__})"
    return f"CPU ({platform.processor() or platform.machine()}), Triton interpreter"


def known_problems(mode: str | None = None) -> list[str]:
    """Version combinations known to break the kernels in ``mode`` (default: this process's
    KERNEL_MODE; "interpreter" asks about a subprocess forced into the interpreter, even on a GPU
    machine). Empty when none.

    Example: triton 3.6 + numpy 2.4 in the interpreter -> one warning (loop bounds loaded with
    tl.load fail with "only 0-dimensional arrays can be converted to Python scalars").
    """
    import numpy
    import triton

    def major_minor(version: str) -> tuple[int, int]:
        parts = (version.split("+")[0].split(".") + ["0", "0"])[:2]
        return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)

    problems = []
    if (mode or KERNEL_MODE) == "interpreter" and major_minor(triton.__version__) < (3, 7) \
            and major_minor(numpy.__version__) >= (2, 4):
        problems.append(
            f"warning: triton {triton.__version__} with numpy {numpy.__version__} fails in the interpreter; "
            "install numpy<2.4 or triton>=3.7"
        )
    return problems


def kernel_mode_report() -> str:
    """One line per fact: library versions, the kernel mode, why, and the device.

    Example (a laptop)::

        torch 2.13.0+cpu | triton 3.7.1 | numpy 2.4.6 | python 3.11.9
        kernel mode: interpreter (torch.cuda.is_available() is False)
        device: cpu -- CPU (x86_64), Triton interpreter
    """
    import numpy
    import torch
    import triton

    return (
        f"torch {torch.__version__} | triton {triton.__version__} | numpy {numpy.__version__}"
        f" | python {platform.python_version()}\n"
        f"kernel mode: {KERNEL_MODE} ({_REASON})\n"
        f"device: {DEVICE} -- {_device_name()}"
    ) + "".join("\n" + line for line in known_problems())
