"""The cyclic garbage collector on the event loop's schedule, in small pauses.

CPython starts a young collection when allocations minus deallocations of tracked objects pass
a threshold. In a daemon whose heap is steady that difference stays small while objects of
middle age (cached verdicts, a partition's kept facts, changes waiting for Postgres) are
created and freed all the time: the young generation then grows to 100k+ objects between
collections, and each one holds the loop 30-110 ms (measured in bench_http at 20,000
commits/s). `pace` collects on a clock instead: the young generation every YOUNG_EVERY_S, the
middle one every MIDDLE_EVERY_S, everything every FULL_EVERY_S, so each pause covers only what
a fraction of a second allocated. The automatic collector stays on as a backstop for young and
middle collections (its thresholds are set by `tune`) for stretches where the loop does not
turn; full collections are `pace`'s alone (OLD_THRESHOLD).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

from lagd.runtime.turns import Turn, plain_turn

# Young-generation threshold of the automatic collector. Ingest allocates a few short-lived
# objects per record (decoded fields, events, batches), freed by reference counting; the
# default (700) runs a collection every few hundred records, a fifth of catch-up's CPU. Higher
# thresholds save more CPU but each young collection then traverses more (a pause of up to
# 200 ms at 50,000 under 20,000 commits/s in bench_http, against < 50 ms at 10,000).
YOUNG_THRESHOLD = 10_000

# Full collections run on `pace`'s clock alone (FULL_EVERY_S). The automatic collector starts
# one once ten middle collections have passed since the last (`pace` runs four a second) and
# their survivors reach a quarter of the heap the collector sees, which after `gc.freeze` holds
# at once: a full pass every ~11 s, each holding the loop 14-50 ms in bench_http. This
# threshold (middle collections between two automatic full ones) puts that off past `pace`'s own.
OLD_THRESHOLD = 1_000_000

YOUNG_EVERY_S = 0.05  # what 50 ms allocates: a pause of about a millisecond
# The young collections' survivors of the last quarter second. At 1M group-partitions under
# 20,000 commits/s (bench_http --phases large) a middle collection every second held the loop
# up to 15-62 ms (7 runs, 124-229 ms in all per 15 s), every quarter second up to 16-22 ms (3 runs,
# 284-319 ms in all): about 100 ms more collecting per 15 s, under 1% of the loop, for pauses a
# third as long at worst. /lag p99 and the longest stall of those runs did not tell them apart.
MIDDLE_EVERY_S = 0.25
FULL_EVERY_S = 300.0  # the whole heap but what `gc.freeze` set aside (lagd's state, once caught up)


def tune() -> None:
    """The process's automatic-collector thresholds for a daemon that ingests records and runs
    `pace`: young collections rarer (YOUNG_THRESHOLD), full ones left to `pace` (OLD_THRESHOLD)."""
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, OLD_THRESHOLD)


def due_generation(now: float, middle_at: float, full_at: float) -> int:
    """The generation to collect at `now`: 2 once `full_at` came, else 1 once `middle_at` came, else 0."""
    if now >= full_at:
        return 2
    return 1 if now >= middle_at else 0


async def pace(
    young_every_s: float = YOUNG_EVERY_S,
    middle_every_s: float = MIDDLE_EVERY_S,
    full_every_s: float = FULL_EVERY_S,
    clock: Callable[[], float] = time.monotonic,
    turn: Turn = plain_turn,
) -> None:
    """Collect on the loop's clock until cancelled (see the module doc). `turn` is taken before
    each collection (lagd.runtime.turns): requests waiting then go first."""
    start = clock()
    middle_at, full_at = start + middle_every_s, start + full_every_s
    while True:
        await asyncio.sleep(young_every_s)
        await turn()
        now = clock()
        generation = due_generation(now, middle_at, full_at)
        gc.collect(generation)
        if generation >= 1:
            middle_at = now + middle_every_s
        if generation == 2:
            full_at = now + full_every_s
