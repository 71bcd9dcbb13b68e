"""How late the event loop wakes: the one figure that says whether anything blocks it.

A task sleeps a short interval again and again; how much later than asked it wakes is the
loop's lag at that moment (every handler, read and write waits that long). /metrics shows the
worst lag of the last minute and counts stalls over 50 ms, so an operator sees a stall that
fell between two scrapes, and the benchmarks read the same figure from outside.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

INTERVAL_S = 0.1
STALL_S = 0.05  # issue 13: nothing may keep the loop longer than this
WINDOW_S = 60  # the worst lag is kept per second for this long


@dataclass
class LoopLag:
    """Per-second worst lags of the last WINDOW_S seconds and a count of stalls (pure; fed by `watch_loop`)."""

    stall_s: float = STALL_S
    window_s: int = WINDOW_S
    stalls_total: int = 0
    last_s: float = 0.0
    _worst: deque[tuple[int, float]] = field(default_factory=deque)  # (whole second, worst lag in it)

    def note(self, at_s: float, lag_s: float) -> None:
        """One wake-up at monotonic time `at_s`, `lag_s` seconds late."""
        lag_s = max(0.0, lag_s)
        self.last_s = lag_s
        if lag_s > self.stall_s:
            self.stalls_total += 1
        second = int(at_s)
        if self._worst and self._worst[-1][0] == second:
            if lag_s > self._worst[-1][1]:
                self._worst[-1] = (second, lag_s)
        else:
            self._worst.append((second, lag_s))
        while self._worst and self._worst[0][0] <= second - self.window_s:
            self._worst.popleft()

    def worst(self, now_s: float) -> float:
        """The worst lag noted in the last `window_s` seconds before `now_s`."""
        cutoff = int(now_s) - self.window_s
        return max((lag for second, lag in self._worst if second > cutoff), default=0.0)


async def watch_loop(lag: LoopLag, interval_s: float = INTERVAL_S) -> None:
    """Sleep `interval_s` forever, noting how late each wake-up comes."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        woke = loop.time()
        lag.note(woke, woke - asked)
