"""Which compiled parts lagd runs: the trend fit, the lag moments and the judgement of a
partition from its facts, kept or derived (`_trend.c`), where the build compiled them.

`LAGD_NO_EXTENSIONS=1` in the environment runs the Python instead (to compare them, or to rule
the compiled code out when a verdict looks wrong); both answer the same. A build of another
source than the `_trend.c` beside it (left behind after the source changed) is not used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

SOURCE = Path(__file__).with_name("_trend.c")
NO_EXTENSIONS = "LAGD_NO_EXTENSIONS"  # set (to anything but empty): run the Python

# `_trend.fit` (its stub, _trend.pyi, gives the arguments): a trend and the oldest sample time it
# read, or None where only the Python answers exactly.
CompiledFit: TypeAlias = Callable[..., "tuple[tuple[int, float, float, float, float, float] | None, int] | None"]
# `_trend.moments`: a partition's moments and, when asked, the re-check due within allowed-lag-seconds.
CompiledMoments: TypeAlias = Callable[..., "tuple[float, float, bool, int, int | None] | None"]
# `_trend.standing`: a partition's answer (lagd_fast.Answer) from its kept facts while they stand.
CompiledStanding: TypeAlias = Callable[..., "tuple[Any, ...] | None"]
# `_trend.fresh`: a partition's answer from its moments on, and its facts packed to keep.
CompiledFresh: TypeAlias = Callable[..., "tuple[tuple[Any, ...], bytes] | None"]


def status() -> str:
    """ "compiled", or why the Python runs: "turned off", "not built" or "stale"."""
    if os.environ.get(NO_EXTENSIONS):
        return "turned off"
    try:
        from lagd.evaluate import _trend
    except ImportError:
        return "not built"
    built_from = getattr(_trend, "SOURCE_SHA1", None)  # None: built before builds carried it
    try:
        if built_from is None or (SOURCE.exists() and hashlib.sha1(SOURCE.read_bytes()).hexdigest() != built_from):
            return "stale"
    except OSError:
        return "stale"  # the source beside it cannot be read: the build cannot be told current
    return "compiled"


def compiled_fit() -> CompiledFit | None:
    """The compiled trend fit, or None where the Python runs (see `status`)."""
    if status() != "compiled":
        return None
    from lagd.evaluate._trend import fit

    return fit


def compiled_moments() -> CompiledMoments | None:
    """The compiled lag moments, or None where the Python runs (see `status`)."""
    if status() != "compiled":
        return None
    from lagd.evaluate._trend import moments

    return moments


def compiled_standing(facts_format: str, params_format: str) -> CompiledStanding | None:
    """The compiled judgement from kept facts, or None where the Python runs (see `status`) or
    where it reads the facts or settings in another layout than `facts_format` and
    `params_format` (lagd_fast's, the one definition)."""
    if status() != "compiled":
        return None
    from lagd.evaluate import _trend

    if (facts_format, params_format) != (_trend.FACTS_FORMAT, _trend.PARAMS_FORMAT):
        return None
    return _trend.standing


def compiled_fresh(facts_format: str, params_format: str) -> CompiledFresh | None:
    """The compiled judgement from a partition's moments on, or None, as `compiled_standing`."""
    if compiled_standing(facts_format, params_format) is None:
        return None
    from lagd.evaluate._trend import fresh

    return fresh


def describe() -> str:
    """Which code judges here, compiled or Python, in words for the start-up log."""
    return {
        "compiled": "compiled (lagd/evaluate/_trend.c)",
        "turned off": "Python (LAGD_NO_EXTENSIONS is set)",
        "not built": "Python (the compiled code is not built: install gcc and python3-dev, then reinstall lagd)",
        "stale": "Python (the compiled code was built from an older _trend.c: reinstall lagd to rebuild it)",
    }[status()]
