"""Long synchronous work in slices: the event loop gets a turn every few milliseconds.

A pass over every group of a large estate (a /metrics scrape, a page listing every group, the
notifier's reconcile) would hold the loop for as long as it takes; calling `Slices.turn` after
each step hands the loop back once `slice_s` of work has run since the last turn. With a
`Turns`' turn (lagd.runtime.turns), requests waiting for their first turn go before the next slice.
"""

from __future__ import annotations

import time

from lagd.runtime.turns import Turn, plain_turn

# The longest a slice of background work (the verdict watch's pass, the notifier's reconcile, a
# /metrics scrape) keeps the event loop. A request waits for up to three turns of the loop (its
# bytes read, its Request built, its handler run: lagd.runtime.turns), and a slice may run in each, so
# this bounds what background work adds to an answer. In bench_http (20,000 commits/s, /lag
# with the response cache off) 5 ms slices of the watch and 10 ms ones of /metrics made most
# of the answers slower than 20 ms.
SLICE_S = 0.002


class Slices:
    """Turns for the loop, one per `slice_s` of work (see the module doc)."""

    __slots__ = ("_turn", "_until", "slice_s")

    def __init__(self, slice_s: float, turn: Turn = plain_turn) -> None:
        self.slice_s = slice_s
        self._turn = turn
        self._until = time.perf_counter() + slice_s

    async def turn(self) -> None:
        """Hand the loop back if this slice's time is up; otherwise return at once."""
        if time.perf_counter() >= self._until:
            await self._turn()
            self._until = time.perf_counter() + self.slice_s
