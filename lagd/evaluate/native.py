"""Which compiled parts lagd runs: the trend fit, the lag moments, the judgement of a
partition from its facts, kept or derived, and the evaluator's pass over a topic's partitions
under lagd's rules and Burrow's (`_trend.c`), where the build compiled them.

`LAGD_NO_EXTENSIONS=1` in the environment runs the Python instead (to compare them, or to rule
the compiled code out when a verdict looks wrong); both answer the same. A build of another
source than the `_trend.c` beside it (left behind after the source changed) is not used.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("_trend.c")
NO_EXTENSIONS = "LAGD_NO_EXTENSIONS"  # set (to anything but empty): run the Python


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


def compiled() -> ModuleType | None:
    """The compiled rules code (`lagd.evaluate._trend`: its stub, _trend.pyi, gives its functions),
    or None where the Python runs (see `status`). Asked once, where lagd_fast binds its functions."""
    if status() != "compiled":
        return None
    from lagd.evaluate import _trend

    return _trend


def describe() -> str:
    """Which code judges here, compiled or Python, in words for the start-up log."""
    return {
        "compiled": "compiled (lagd/evaluate/_trend.c)",
        "turned off": "Python (LAGD_NO_EXTENSIONS is set)",
        "not built": "Python (the compiled code is not built: install gcc and python3-dev, then reinstall lagd)",
        "stale": "Python (the compiled code was built from an older _trend.c: reinstall lagd to rebuild it)",
    }[status()]
