"""The event-loop lag figure: worst of the last minute, stalls counted, memory bounded."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from lagd.runtime.loop_lag import LoopLag, watch_loop


def test_worst_is_of_the_last_minute_and_stalls_are_counted() -> None:
    lag = LoopLag()
    lag.note(1000.2, 0.001)
    lag.note(1000.7, 0.2)  # a stall
    lag.note(1001.1, -0.001)  # early wake-ups count as no lag
    assert lag.worst(1001.5) == 0.2
    assert lag.stalls_total == 1 and lag.last_s == 0.0
    assert lag.worst(1059.9) == 0.2  # still within the minute
    assert lag.worst(1060.0) == 0.0  # its second has left the window
    lag.note(1030.0, 0.06)
    assert lag.stalls_total == 2 and lag.worst(1031) == 0.2


def test_memory_is_one_entry_per_second() -> None:
    lag = LoopLag()
    for i in range(100_000):
        lag.note(i / 100, 0.001 * (i % 7))
    assert len(lag._worst) <= lag.window_s
    assert lag.worst(999.99) == 0.006


@dataclass
class Watched(LoopLag):
    woke: asyncio.Event = field(default_factory=asyncio.Event)

    def note(self, at_s: float, lag_s: float) -> None:
        super().note(at_s, lag_s)
        self.woke.set()


def block_the_loop(seconds: float) -> None:
    """A long synchronous step, as a slow handler would be."""
    time.sleep(seconds)


async def test_a_blocked_loop_shows_as_a_stall() -> None:
    lag = Watched()
    task = asyncio.create_task(watch_loop(lag, interval_s=0.01))
    try:
        await lag.woke.wait()
        before = lag.stalls_total
        block_the_loop(0.12)
        lag.woke.clear()
        await lag.woke.wait()  # the first wake-up after the block
        assert lag.stalls_total == before + 1 and lag.last_s >= 0.1
        assert lag.worst(asyncio.get_running_loop().time()) >= 0.1
    finally:
        task.cancel()
