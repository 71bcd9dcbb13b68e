"""When a log-end sample is dated: the middle of its round, between the requests going out and the
last answer coming back, not the answer's time. A round held up (a busy broker, the event loop
held by other work) dated the offsets late, and a mirror's source so read made its copy look that
much less behind (1.5 s in 1 of 10 real MirrorMaker 2 runs).

The client here stands in for aiokafka's only to hold an answer back while the test moves the
clock: the answers and their parsing are the real ones, sampled from Kafka itself in
tests/test_ingest_kafka.py and tests/test_apache_kafka*.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters
from lagd.ingest.log_end import Layout, sample_once
from tests.clocks import ManualClock

T0 = 1_700_000_000_000


class HeldAnswers:
    """Broker `node` answers that partition `node - 1` of orders ends at offset 100, `took[node]` ms of
    the clock after the round began (a ListOffsets v1 answer's shape: partition, error, time, offset)."""

    def __init__(self, clock: ManualClock, took: dict[int, int]) -> None:
        self.clock = clock
        self.took = took

    async def send(self, node: int, request: Any) -> Any:
        await asyncio.sleep(0)  # the answer comes on a later turn of the loop
        self.clock.advance(self.took[node])
        return SimpleNamespace(API_VERSION=1, topics=[("orders", [(node - 1, 0, -1, 100)])])


async def test_a_sample_is_dated_the_middle_of_its_round() -> None:
    clock = ManualClock(T0)
    layout = Layout(leaders={"orders": {0: 1, 1: 2}})
    client = HeldAnswers(clock, {1: 400, 2: 1_600})  # the round ends 2,000 ms after it began
    samples, stale = await sample_once(
        client, ClusterSettings(name="c"), layout, ["orders"], IngestCounters(), clock=clock
    )
    assert not stale
    assert [(s.partition, s.offset, s.ts) for s in samples] == [(0, 100, T0 + 1_000), (1, 100, T0 + 1_000)]
