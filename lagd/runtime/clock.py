"""lagd's one clock: "now" as epoch milliseconds, injected into every part that reads it.

The daemon picks the clock once (`wall_ms`, the system's wall clock) and passes it to every
part it starts (readers, sampler, admin poll, persister, notifier, outbox, sinks, mirror
verdicts, HTTP, verdict watch), so they all agree on what "now" is, and a test drives time by
passing its own clock instead of sleeping. Each part takes it as a keyword `clock: Clock`
that defaults to `wall_ms`.

Durations (how long to wait, backoff, timeouts, lease retries) are not read from it: they
stay on the event loop's or `time.monotonic`'s clock, which a wall-clock step cannot move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeAlias

Clock: TypeAlias = Callable[[], int]
"""Returns the current time in epoch milliseconds."""


def wall_ms() -> int:
    """The system's wall clock, in epoch milliseconds."""
    return time.time_ns() // 1_000_000
