"""The offsets topic recreated or truncated: stored positions beyond its end are re-read from the start.

Real broker (Tansu): an offsets topic of the test's own, real-format commit records, and
the offsets-topic reader resumed from positions the topic no longer has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from structlog.testing import capture_logs

from lagd.core.model import Commit, GroupMembers, IngestCounters, OffsetsPartitionReset, ReaderPosition
from lagd.core.ruleset import lagd_rules
from lagd.ingest.offsets_group import Assignment, read_offsets_as_worker
from lagd.ingest.offsets_topic import outside_range, read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.sim.encode import encode_offset_commit
from lagd.state.windows import State, offsets_partition
from tests.test_ingest_kafka import Store, cluster, running
from tests.topics import create_topic

Settle = Callable[..., Awaitable[Any]]


def test_positions_outside_the_log_are_found() -> None:
    begin, end = {0: 0, 1: 5, 2: 0}, {0: 10, 1: 9, 2: 0}
    assert outside_range({0: 10, 1: 4, 2: 3, 3: 99}, begin, end) == {1: 4, 2: 3}
    assert outside_range({0: 0, 1: 5}, begin, end) == {}


async def recreated_offsets_topic(kafka: str, unique: str) -> str:
    """An offsets topic of 2 partitions, 3 commits (offsets 100-102) in partition 0, 1 empty."""
    topic = f"__consumer_offsets_{unique}"
    await create_topic(kafka, topic, 2)
    now = time.time_ns() // 1_000_000
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        for i in range(3):  # one record per batch (Tansu's ListOffsets quirk, see TESTING.md)
            key, value = encode_offset_commit(f"g-{unique}", f"orders-{unique}", 0, 100 + i, now)
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()
    return topic


async def test_a_recreated_offsets_topic_is_read_again_from_its_start(kafka: str, unique: str, settle: Settle) -> None:
    topic = await recreated_offsets_topic(kafka, unique)
    store, counters, stop = Store(), IngestCounters(), asyncio.Event()
    # Positions stored before the topic was recreated: far beyond its new end on partition 0;
    # partition 1 is empty, and its stored position 0 is still inside it.
    reader = read_offsets_topic(
        cluster(kafka, offsets_topic=topic), {0: 5_000, 1: 0}, store, ReaderProgress(), counters, stop
    )
    with capture_logs() as logs:
        async with running(reader):
            await settle(lambda: store.positions.get(0) == 3, what="partition 0 read from its start")
    offsets = [e.offset for e in store.events if isinstance(e, Commit)]
    assert offsets == [100, 101, 102]
    assert counters.offsets_topic_rereads == 1
    warned = [e for e in logs if e["log_level"] == "warning" and e.get("stored_position") == 5_000]
    assert len(warned) == 1 and warned[0]["partition"] == 0 and warned[0]["log_end"] == 3
    assert ReaderPosition("sim", 0, 3) in store.events
    # the state is told, before the re-read records, to move that partition's groups' orders down
    resets = [i for i, e in enumerate(store.events) if isinstance(e, OffsetsPartitionReset)]
    assert [store.events[i] for i in resets] == [OffsetsPartitionReset("sim", 0, 2)]
    assert resets[0] < min(i for i, e in enumerate(store.events) if isinstance(e, Commit))


def test_a_reset_partitions_groups_take_their_new_commits_as_new() -> None:
    """Windows kept from the old offsets topic carry orders (record offsets) far above the new
    topic's: without the reset every new commit would read as a replay and be dropped."""
    state = State(rules=lagd_rules(15_000))
    mine = next(f"g{i}" for i in range(100) if offsets_partition(f"g{i}", 2) == 0)
    other = next(f"g{i}" for i in range(100) if offsets_partition(f"g{i}", 2) == 1)
    for group in (mine, other):
        for k in range(3):
            state.apply(Commit("sim", group, "t", 0, 100 + k, 5_000 + k, 1_000 * k, 1_000 * k))
    state.apply(OffsetsPartitionReset("sim", 0, 2))
    state.apply(Commit("sim", mine, "t", 0, 200, 0, 60_000, 60_000))  # order 0: the new topic's first record
    state.apply(Commit("sim", other, "t", 0, 200, 0, 60_000, 60_000))  # not reset: a replay, dropped
    assert [e.offset for e in state.window("sim", mine, "t", 0)][-1] == 200
    assert [e.offset for e in state.window("sim", other, "t", 0)][-1] == 102
    orders = [e.order for e in state.window("sim", mine, "t", 0)]
    assert orders[-1] == 0 and all(o < 0 for o in orders[:-1]) and orders == sorted(orders)


def test_offsets_partition_is_kafkas() -> None:
    # Java: "abc".hashCode() == 96354; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert offsets_partition("abc", 50) == 96354 % 50
    assert offsets_partition("polygenelubricants", 50) == 0


@dataclass
class Restored:
    """The daemon's side of a worker's rebalance (lagd.scale.handover), as far as the reader
    needs it: the positions stored for the assigned partitions. Stands in for Postgres and the
    state, which the worker tests (tests/test_workers.py) run for real."""

    positions: dict[int, int]
    given: list[set[int]] = field(default_factory=list)

    async def assigned(
        self, cluster: str, partitions: set[int], count: int
    ) -> tuple[dict[int, int], list[GroupMembers]]:
        self.given.append(partitions)
        return {p: o for p, o in self.positions.items() if p in partitions}, []

    async def revoked(self, cluster: str, partitions: set[int], count: int) -> None:
        pass


def worker(
    kafka: str, topic: str, unique: str, handover: Restored, store: Store, counters: IngestCounters
) -> Coroutine[Any, Any, None]:
    """A worker's reader of `topic` (session timeout 6 s, Tansu's minimum), handing events to `store`."""
    return read_offsets_as_worker(
        cluster(kafka, offsets_topic=topic),
        f"lagd-{unique}",
        6.0,
        handover,
        Assignment(),
        store,
        ReaderProgress(),
        counters,
        asyncio.Event(),
    )


async def test_a_worker_reads_a_recreated_offsets_partition_again_from_its_start(
    kafka: str, unique: str, settle: Settle
) -> None:
    """As a lone reader does (above): a worker given a partition whose stored position lies
    beyond its end counts it, says so, resets its groups' orders, and reads it from the start."""
    topic = await recreated_offsets_topic(kafka, unique)
    restored = Restored({0: 5_000, 1: 0})
    store, counters = Store(), IngestCounters()
    reader = worker(kafka, topic, unique, restored, store, counters)
    with capture_logs() as logs:
        async with running(reader):
            await settle(lambda: store.positions.get(0) == 3, timeout=60, what="partition 0 read from its start")
    assert restored.given == [{0, 1}]
    assert [e.offset for e in store.events if isinstance(e, Commit)] == [100, 101, 102]
    assert counters.offsets_topic_rereads == 1
    warned = [e for e in logs if e["log_level"] == "warning" and e.get("stored_position") == 5_000]
    assert len(warned) == 1 and warned[0]["partition"] == 0 and warned[0]["log_end"] == 3
    resets = [i for i, e in enumerate(store.events) if isinstance(e, OffsetsPartitionReset)]
    assert [store.events[i] for i in resets] == [OffsetsPartitionReset("sim", 0, 2)]
    assert resets[0] < min(i for i, e in enumerate(store.events) if isinstance(e, Commit))


async def test_a_worker_whose_takeover_fails_joins_again_rather_than_hold_partitions_unread(
    kafka: str, unique: str, settle: Settle
) -> None:
    """Restoring the groups fails once (Postgres away at that moment): the worker must not keep
    the partitions without reading them (aiokafka only logs a listener's error); it leaves the
    group, joins again, takes them over and reads them."""
    topic = await recreated_offsets_topic(kafka, unique)

    @dataclass
    class FailsOnce(Restored):
        async def assigned(
            self, cluster: str, partitions: set[int], count: int
        ) -> tuple[dict[int, int], list[GroupMembers]]:
            if not self.given:
                self.given.append(partitions)
                raise ConnectionRefusedError("Postgres is not answering")
            return await super().assigned(cluster, partitions, count)

    restored = FailsOnce({})
    store, counters = Store(), IngestCounters()
    reader = worker(kafka, topic, unique, restored, store, counters)
    with capture_logs() as logs:
        async with running(reader):
            await settle(lambda: store.positions.get(0) == 3, timeout=60, what="partition 0 read after the retry")
    assert restored.given == [{0, 1}, {0, 1}]
    assert [e.offset for e in store.events if isinstance(e, Commit)] == [100, 101, 102]
    assert counters.failures.get("offsets_topic_AssignmentFailed") == 1
    failed = [e for e in logs if "reconnecting" in e["event"]]
    assert failed and "Postgres is not answering" in failed[0]["error"]
