"""lagd's benchmarks: `python -m bench` runs them all and writes bench/RESULTS.md."""

from __future__ import annotations

import operator

_OPS = {"<=": operator.le, ">=": operator.ge}


def target(name: str, measured: float, op: str, limit: float, unit: str = "") -> bool:
    """Print one `target:` line, the runner's record of whether an issue's number was met.

    The runner copies these lines into RESULTS.md's summary, so a missed target reads as
    MISSED there instead of hiding behind "the benchmark ran".
    """
    met = bool(_OPS[op](measured, limit))
    unit = f" {unit}" if unit else ""
    print(f"target: {name}: {'met' if met else 'MISSED'} ({measured:,.2f}{unit}; target {op} {limit:,g}{unit})")
    return met
