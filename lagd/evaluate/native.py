"""Which compiled parts lagd runs: the trend fit, the lag moments, the judgement of a
partition from its facts, kept or derived, and the evaluator's pass over a topic's partitions
under lagd's rules and Burrow's (`_trend.c`), where the build compiled them.

`LAGD_NO_EXTENSIONS=1` in the environment runs the Python instead (to compare them, or to rule
the compiled code out when a verdict looks wrong); both answer the same. A build of another
source than the `_trend.c` beside it (left behind after the source changed) is not used.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from lagd.runtime import compiled as _compiled

MODULE = "lagd.evaluate._trend"
SOURCE = Path(__file__).with_name("_trend.c")
NO_EXTENSIONS = _compiled.NO_EXTENSIONS


def status() -> str:
    """ "compiled", or why the Python runs: "turned off", "not built" or "stale" (lagd.runtime.compiled)."""
    return _compiled.status(MODULE, SOURCE)


def compiled() -> ModuleType | None:
    """The compiled rules code (`lagd.evaluate._trend`: its stub, _trend.pyi, gives its functions),
    or None where the Python runs (see `status`). Asked once, where lagd_fast binds its functions."""
    return _compiled.load(MODULE, SOURCE)


def describe() -> str:
    """Which code judges here, compiled or Python, in words for the start-up log."""
    return {
        "compiled": "compiled (lagd/evaluate/_trend.c)",
        "turned off": "Python (LAGD_NO_EXTENSIONS is set)",
        "not built": "Python (the compiled code is not built: install gcc and python3-dev, then reinstall lagd)",
        "stale": "Python (the compiled code was built from an older _trend.c: reinstall lagd to rebuild it)",
    }[status()]
