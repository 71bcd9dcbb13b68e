"""A clock for tests: a lagd.runtime.clock.Clock that moves only when the test moves it."""

from __future__ import annotations


class ManualClock:
    """Epoch milliseconds that stand still until `advance`; with `step`, every read also moves
    it on by that much (a part that polls the clock sees time fly without anyone sleeping)."""

    def __init__(self, at: int, step: int = 0) -> None:
        self.at = at
        self.step = step

    def __call__(self) -> int:
        now = self.at
        self.at += self.step
        return now

    def advance(self, ms: int) -> int:
        """Move the clock on by `ms`; returns the new time."""
        self.at += ms
        return self.at
