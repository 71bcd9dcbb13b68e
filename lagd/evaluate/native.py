"""Which compiled parts lagd runs: the trend fit (`_trend.c`) where the build compiled it.

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


def compiled_fit() -> CompiledFit | None:
    """The compiled trend fit, or None where it is not built or turned off."""
    if os.environ.get("LAGD_NO_EXTENSIONS"):
        return None
    try:
        from lagd.evaluate._trend import fit
    except ImportError:
        return None
    return fit


def describe() -> str:
    """How lagd fits trends here, in words for the start-up log and the benchmarks."""
    if compiled_fit() is not None:
        return "compiled (lagd/evaluate/_trend.c)"
    if os.environ.get("LAGD_NO_EXTENSIONS"):
        return "Python (LAGD_NO_EXTENSIONS is set)"
    return "Python (the compiled fit is not built: install gcc and python3-dev, then reinstall lagd)"
