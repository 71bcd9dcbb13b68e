"""Which compiled parts lagd runs: the trend fit and lag moments (`_trend.c`) where the build
compiled them.

`LAGD_NO_EXTENSIONS=1` in the environment runs the Python instead (to compare them, or to rule
the compiled code out when a verdict looks wrong); both answer the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeAlias

# `_trend.fit` (its stub, _trend.pyi, gives the arguments): a trend and the oldest sample time it
# read, or None where only the Python answers exactly.
CompiledFit: TypeAlias = Callable[..., "tuple[tuple[int, float, float, float, float, float] | None, int] | None"]


# `_trend.moments`: a partition's moments and, when asked, the re-check due within allowed-lag-seconds.
CompiledMoments: TypeAlias = Callable[..., "tuple[float, float, bool, int, int | None] | None"]


def compiled_fit() -> CompiledFit | None:
    """The compiled trend fit, or None where it is not built or turned off."""
    if os.environ.get("LAGD_NO_EXTENSIONS"):
        return None
    try:
        from lagd.evaluate._trend import fit
    except ImportError:
        return None
    return fit


def compiled_moments() -> CompiledMoments | None:
    """The compiled lag moments, or None where they are not built or turned off."""
    if os.environ.get("LAGD_NO_EXTENSIONS"):
        return None
    try:
        from lagd.evaluate._trend import moments
    except ImportError:
        return None
    return moments


def describe() -> str:
    """Which code judges here, compiled or Python, in words for the start-up log."""
    if compiled_fit() is not None:
        return "compiled (lagd/evaluate/_trend.c)"
    if os.environ.get("LAGD_NO_EXTENSIONS"):
        return "Python (LAGD_NO_EXTENSIONS is set)"
    return "Python (the compiled code is not built: install gcc and python3-dev, then reinstall lagd)"
