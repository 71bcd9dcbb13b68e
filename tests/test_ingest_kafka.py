"""Ingest against a real broker (Tansu): the simulator writes, lagd's readers must see exactly that.

Both ways in are checked partition by partition against what the simulator committed: the
offsets-topic reader (byte-exact records written into an offsets topic of the test's own)
and admin polling (real aiokafka consumer groups committing). See shared/design/TESTING.md
for the Tansu quirks worked around here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    IngestCounters,
    LogEndSample,
    OffsetDeleted,
    ReaderPosition,
    TopicDeleted,
)
from lagd.evaluate.sight import judge_sight
from lagd.ingest import offsets_topic
from lagd.ingest.admin_poll import (
    PollMemory,
    groups_gone,
    parse_describe,
    poll_admin,
    poll_round,
    refresh_layout,
    round_events,
)
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import close_quietly
from lagd.ingest.log_end import (
    ABSENT_REFRESHES_BEFORE_DELETE,
    Layout,
    broker_news,
    confirm_absent,
    deleted_topics,
    parse_list_offsets,
    plan_requests,
    sample_log_ends,
)
from lagd.ingest.offsets_topic import (
    _caught_up_now,
    _note_fetch,
    _positions_to_ask,
    consumer_positions,
    read_offsets_topic,
)
from lagd.ingest.progress import ReaderProgress
from lagd.runtime.clock import wall_ms
from lagd.sim.driver import Driver
from lagd.sim.encode import encode_assignment, encode_offset_commit, encode_subscription
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec, log_end, standard
from tests.clocks import ManualClock
from tests.topics import create_topic

GPKey = tuple[str, str, int]
Settle = Callable[..., Awaitable[Any]]


@dataclass
class Store:
    """Stands in for the daemon's state: applies each emitted batch whole, keeps positions."""

    events: list[Event] = field(default_factory=list)
    positions: dict[int, int] = field(default_factory=dict)
    batches: int = 0
    block_after: int | None = None
    blocked: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, batch: list[Event]) -> None:
        if self.block_after is not None and self.batches >= self.block_after:
            # Backpressure that never ends: the reader is stuck in emit when it gets killed,
            # so this batch is never applied and must come again after the restart.
            self.blocked.set()
            await asyncio.Event().wait()
        self.batches += 1
        self.events.extend(batch)
        for ev in batch:
            if isinstance(ev, ReaderPosition):
                self.positions[ev.partition] = ev.offset


def fold(events: list[Event]) -> dict[GPKey, int]:
    """The committed offset each group-partition ends up with, applying events by order."""
    state: dict[GPKey, tuple[int, int]] = {}
    for ev in events:
        if isinstance(ev, Commit):
            key = (ev.group, ev.topic, ev.partition)
            if key not in state or state[key][0] < ev.order:
                state[key] = (ev.order, ev.offset)
        elif isinstance(ev, OffsetDeleted):
            state.pop((ev.group, ev.topic, ev.partition), None)
        elif isinstance(ev, GroupDeleted):
            for key in [k for k in state if k[0] == ev.group]:
                del state[key]
        elif isinstance(ev, TopicDeleted):
            for key in [k for k in state if k[1] == ev.topic]:
                del state[key]
    return {k: v[1] for k, v in state.items()}


def cluster(kafka: str, **kw: Any) -> ClusterSettings:
    # The simulator's scenarios start in 2023 (Scenario.start_ms): accept commit times that old.
    defaults: dict[str, Any] = {
        "offset_refresh": 0.2,
        "topic_refresh": 1.0,
        "request_timeout": 10.0,
        "max_commit_age": 100 * 365 * 86_400.0,
    }
    defaults.update(kw)
    return ClusterSettings(name="sim", bootstrap_servers=[kafka], **defaults)


@contextlib.asynccontextmanager
async def running(coro: Awaitable[None]) -> AsyncIterator[asyncio.Task[None]]:
    task: asyncio.Task[None] = asyncio.ensure_future(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def with_extras(u: str) -> Scenario:
    """The standard 3 x 8 / 5 groups scenario, plus a group the default deny list excludes, a
    group that gets deleted, and a topic that gets deleted under a recovering group."""
    base = standard(u)
    orders = base.topics[0].name
    temp = TopicSpec(f"temp-{u}", 2, rate=2.0, deleted_at=4.0)
    return Scenario(
        (*base.topics, temp),
        (
            *base.groups,
            GroupSpec(f"console-consumer-{u}", (orders,)),
            GroupSpec(f"gone-{u}", (orders,), "deleted", at=3.0),
            GroupSpec(f"temp-reader-{u}", (temp.name,), "recovering", at=2.0),
        ),
    )


async def drive(driver: Driver, until: int) -> None:
    for t in range(int(max(driver.t, -1.0)) + 1, until + 1):
        await driver.advance(float(t))


# --- offsets-topic path -----------------------------------------------------------------


async def test_offsets_topic_reader_matches_what_was_committed(kafka: str, unique: str, settle: Settle) -> None:
    scenario = with_extras(unique)
    topic = f"__consumer_offsets_{unique}"
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=topic, offsets_partitions=10)
    await driver.start()
    try:
        await drive(driver, 5)
    finally:
        await driver.close()
    denied = f"console-consumer-{unique}"
    expected = {k: v for k, v in driver.last_commits.items() if k[0] != denied}
    assert {k[1:] for k in expected} == {(t.name, p) for t in scenario.topics[:3] for p in range(8)}

    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    async with running(read_offsets_topic(cluster(kafka, offsets_topic=topic), {}, store, progress, counters, stop)):
        await settle(lambda: progress.caught_up, what="offsets-topic reader caught up")

    assert fold(store.events) == expected
    # Every commit and tombstone arrives once, ordered by its record offset.
    seen = sorted(
        (e.group, e.topic, e.partition, e.order) for e in store.events if isinstance(e, Commit | OffsetDeleted)
    )
    written = sorted((g, t, p, off) for (g, t, p), places in driver.orders.items() if g != denied for _, off in places)
    assert seen == written
    assert [e for e in store.events if getattr(e, "group", None) == denied] == []
    # The denied group's commits and its one group-metadata record, each dropped and counted.
    assert counters.filtered_groups == sum(len(v) for k, v in driver.orders.items() if k[0] == denied) + 1
    assert any(isinstance(e, GroupDeleted) and e.group == f"gone-{unique}" for e in store.events)
    temp = scenario.topics[3].name
    assert sorted((e.group, e.partition) for e in store.events if isinstance(e, OffsetDeleted) and e.topic == temp) == [
        (f"temp-reader-{unique}", 0),
        (f"temp-reader-{unique}", 1),
    ]
    owners = [e for e in store.events if isinstance(e, GroupMembers) and e.group == f"billing-{unique}"]
    assert [(o.topic, o.partition, o.host) for o in owners[0].owners] == [
        (scenario.topics[0].name, p, driver.host) for p in range(8)
    ]
    stop.set()


async def test_reader_killed_and_restarted_loses_nothing_and_repeats_nothing(
    kafka: str, unique: str, settle: Settle
) -> None:
    scenario = with_extras(unique)
    topic = f"__consumer_offsets_{unique}"
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=topic, offsets_partitions=4)
    await driver.start()
    try:
        await drive(driver, 5)
    finally:
        await driver.close()
    settings = cluster(kafka, offsets_topic=topic, groups_deny="")

    first = Store(block_after=3)
    task = asyncio.ensure_future(
        read_offsets_topic(settings, {}, first, ReaderProgress(), IngestCounters(), asyncio.Event(), max_records=5)
    )
    await settle(lambda: first.blocked.is_set(), what="reader blocked in emit")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    total = sum(len(v) for v in driver.orders.values())
    read_first = sum(isinstance(e, Commit | OffsetDeleted) for e in first.events)
    assert 0 < read_first < total  # killed mid-stream

    second, progress = Store(), ReaderProgress()
    async with running(
        read_offsets_topic(settings, dict(first.positions), second, progress, IngestCounters(), asyncio.Event())
    ):
        await settle(lambda: progress.caught_up, what="restarted reader caught up")

    both = first.events + second.events
    seen = [(e.group, e.topic, e.partition, e.order) for e in both if isinstance(e, Commit | OffsetDeleted)]
    assert len(seen) == len(set(seen))  # nothing applied twice
    written = sorted((g, t, p, off) for (g, t, p), places in driver.orders.items() for _, off in places)
    assert sorted(seen) == written  # nothing lost
    assert fold(both) == driver.last_commits


def test_reader_progress_is_as_current_as_its_least_current_partition() -> None:
    """fresh_at is the oldest partition's "read through" time and moving_at the oldest
    partition's last move: one partition that stops holds the view back, however busy the
    rest. A record's time past when it was read (a producer's clock ahead) counts as then;
    nothing moves backwards; a partition let go (a worker's revoked share) stops counting."""
    progress = ReaderProgress()
    progress.read_records({0: 5_000, 1: 90_000}, 10_000)  # partition 1's record claims the future
    assert progress.read_through == {0: 5_000, 1: 10_000}
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (5_000, 10_000)
    progress.read_records({0: 4_000}, 12_000)  # an older record time: read through stays
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (5_000, 10_000)
    progress.read_records({2: -1}, 12_000)  # a record without a time: moved, but read through nothing
    assert progress.read_through == {0: 5_000, 1: 10_000} and progress.moved_at[2] == 12_000
    progress.forget({2})
    progress.reached_end({1: 20_000})
    progress.reached_end({0: 15_000})
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (15_000, 15_000)
    progress.reached_end({0: 30_000})  # partition 1 went quiet: its last answer holds both back
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (20_000, 20_000)
    progress.forget({1})
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (30_000, 30_000)


@dataclass
class _Ends:
    """What `_note_reading` reads of an aiokafka consumer after a fetch. A stand-in: Tansu here
    cannot write transactions (aiokafka's transactional produce answers UnknownError), so a
    partition ending in a transaction marker cannot be made on the real broker."""

    lso: dict[int, int | None]
    hw: dict[int, int | None]
    polled: dict[int, int | None]

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("__consumer_offsets", p) for p in self.lso}

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.lso[tp.partition]

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.hw[tp.partition]

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        return self.polled[tp.partition]


@dataclass
class _Record:
    offset: int
    timestamp: int | None


def test_a_fetch_tells_partitions_at_their_end_from_partitions_behind() -> None:
    """Per partition, whatever the fetch's size. Partition 0 was read to offset 9 and ends in a
    transaction marker at 10 (its last stable offset is 11): at its end only once the consumer's
    own position (asked) passed the marker. Partition 1 (a broker that gives no last stable
    offset) is at its high watermark. Partition 2 has more to read, so it is read through its
    newest record's time, even from a short fetch (a buffer's tail). Partition 3 has had no
    answer yet: it counts as moved now, so a leader that never answers stops the reader's moving
    (how current it is stays unknown)."""
    consumer = _Ends(
        lso={0: 11, 1: None, 2: 50, 3: None},
        hw={0: 11, 1: 7, 2: 50, 3: None},
        polled={0: 900, 1: 950, 2: 990, 3: None},
    )
    fetched = {TopicPartition("__consumer_offsets", 2): [_Record(20, 400), _Record(21, 450)]}
    next_offsets = {0: 10, 1: 7, 2: 22}
    progress = ReaderProgress()
    behind = _note_fetch(consumer, fetched, next_offsets, {}, progress, 1000)
    assert behind == {0, 2}  # partition 0 looks behind: no position past its marker yet
    assert progress.read_through == {1: 950, 2: 450}
    assert progress.moved_at == {0: 1000, 1: 950, 2: 1000, 3: 1000}
    assert _note_fetch(consumer, {}, next_offsets, {0: 11, 1: 7}, progress, 1100) == {2}
    assert progress.read_through == {0: 900, 1: 950, 2: 450}
    consumer.polled[0] = 1050
    _note_fetch(consumer, {}, next_offsets, {0: 11}, progress, 1100)
    assert progress.read_through[0] == 1050
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (450, 950)
    # a record without a time (message format 0: aiokafka gives None) moves the partition, no more
    _note_fetch(
        consumer, {TopicPartition("__consumer_offsets", 2): [_Record(22, None)]}, next_offsets, {}, progress, 1200
    )
    assert progress.read_through[2] == 450 and progress.moved_at[2] == 1200
    # a worker answers only for the partitions it owns
    mine = ReaderProgress()
    _note_fetch(consumer, fetched, next_offsets, {0: 11}, mine, 1100, owned={0})
    assert mine.read_through == {0: 1050}


def test_a_reader_that_just_caught_up_starts_from_what_is_true_then() -> None:
    """Catching up, the reader noted partitions now long read (their notes as old as the
    catch-up). The moment it is caught up every partition has moved, and one whose end is a
    transaction marker stands at its end by the position just asked: no stale note makes lagd
    report itself cut off right after a long catch-up."""
    consumer = _Ends(lso={0: 11, 1: 50}, hw={0: 11, 1: 50}, polled={0: 90_000, 1: 90_500})
    progress = ReaderProgress()
    progress.read_records({0: 1_000, 1: 2_000}, 5_000)  # noted early in a long catch-up
    _caught_up_now(consumer, {0: 10, 1: 40}, {0: 11}, progress, 91_000)
    assert progress.moved_at == {0: 91_000, 1: 91_000}
    assert progress.read_through == {0: 90_000, 1: 2_000}  # 1 still has more to read: as current as its records
    assert (progress.moving_at_ms, progress.fresh_at_ms) == (91_000, 2_000)


def test_positions_are_asked_while_catching_up_or_for_partitions_that_look_behind() -> None:
    known, behind = {0, 1, 2}, {2}
    assert _positions_to_ask(caught_up=False, short=True, due=False, known=known, behind=behind) == known  # end near
    assert _positions_to_ask(caught_up=False, short=False, due=True, known=known, behind=behind) == known
    assert not _positions_to_ask(caught_up=False, short=False, due=False, known=known, behind=behind)
    assert _positions_to_ask(caught_up=True, short=True, due=True, known=known, behind=behind) == behind
    assert not _positions_to_ask(caught_up=True, short=False, due=False, known=known, behind=behind)
    assert not _positions_to_ask(caught_up=True, short=False, due=True, known=known, behind=set())


@dataclass
class GatedStore:
    """Stands in for the daemon's state: takes `open_for` batches, then holds the reader in
    emit (a slow consumer of its events) until `gate` is set."""

    open_for: int
    events: list[Event] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, batch: list[Event]) -> None:
        if self.open_for <= 0:
            self.waiting.set()
            await self.gate.wait()
        self.open_for -= 1
        self.events.extend(batch)


async def test_a_reader_takes_its_turns_after_requests_until_it_falls_behind(kafka: str, unique: str) -> None:
    """Between slices of a fetch the reader lets waiting requests go first (lagd.runtime.turns) unless
    the broker's last answer leaves `behind` records or more to read past the fetch: a full
    fetch alone is no sign (under 20,000 commits/s nearly every fetch comes back full)."""
    topic = f"left-{unique}"
    await create_topic(kafka, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        for i in range(60):  # one record per batch (Tansu quirk)
            await producer.send_and_wait(topic, b"v", key=b"k%d" % i, partition=0)
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False)
    await consumer.start()

    async def requests_first() -> None:
        await asyncio.sleep(0)

    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        turns: list[tuple[int, int, Any]] = []
        read = 0
        while read < 60:
            fetched = await consumer.getmany(timeout_ms=5_000, max_records=5)
            if not fetched.get(tp):
                continue
            read = fetched[tp][-1].offset + 1
            turn = offsets_topic.fetch_turn(consumer, fetched, requests_first, behind=20)
            turns.append((read, offsets_topic.records_left(consumer, fetched), turn))
    finally:
        await close_quietly(consumer.stop)
    assert all(left == 60 - read for read, left, _ in turns)  # the broker answered: 60 records in all
    assert [turn is requests_first for _, left, turn in turns] == [left < 20 for _, left, _ in turns]
    assert turns[0][2] is offsets_topic.plain_turn and turns[-1][2] is requests_first


async def test_a_reader_working_through_a_backlog_is_behind_not_cut_off(
    kafka: str, unique: str, settle: Settle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader with more to read still says how current its view is (the time of the newest
    records it read on each partition, the least current of them) and that it moves: the
    cluster's sight is "behind", its verdicts held as of those records, not "unreachable" (which
    pages on-call for a cluster that is fine). A fetch that comes back short at the tail of what
    the broker answered (byte-limited answers, as under a flood) does not make it current. Only a
    reader that stops moving is cut off; one that reaches the end again sees the cluster."""
    topic = f"__consumer_offsets_{unique}"
    await create_topic(kafka, topic, 2)
    # A backlog of commits made ten minutes ago (and their records' time with them), 50 a partition.
    made = wall_ms() - 600_000
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        for i in range(100):  # one record per batch (Tansu quirk)
            key, value = encode_offset_commit(f"g-{unique}", "t", i, 1, made + i)
            await producer.send_and_wait(topic, value, key=key, partition=i % 2, timestamp_ms=made + i)
    finally:
        await producer.stop()
    # Byte-limited answers (512 B a partition asked; Tansu answers about 20 records), so fetches
    # of up to 7 records come back short at the tail of each answer while the topic holds more.
    sizes: list[int] = []
    real_start = offsets_topic.start_consumer

    async def byte_limited(settings: ClusterSettings, **extra: Any) -> Any:
        consumer = await real_start(settings, max_partition_fetch_bytes=512, fetch_max_bytes=1024, **extra)
        getmany = consumer.getmany

        async def counted(*args: Any, **kw: Any) -> Any:
            fetched = await getmany(*args, **kw)
            sizes.append(sum(len(records) for records in fetched.values()))
            return fetched

        consumer.getmany = counted
        return consumer

    monkeypatch.setattr(offsets_topic, "start_consumer", byte_limited)

    store, progress = GatedStore(open_for=6), ReaderProgress()
    started = wall_ms()
    settings = cluster(kafka, offsets_topic=topic, groups_deny="")
    async with running(
        read_offsets_topic(settings, {}, store, progress, IngestCounters(), asyncio.Event(), max_records=7)
    ):
        await settle(lambda: store.waiting.is_set(), what="reader held in emit after six fetches")
        held = wall_ms()
        read = [size for size in sizes if size]
        assert len(read) == 7 and any(size < 7 for size in read[:6]), sizes  # a short fetch among them
        fresh, moving = progress.fresh_at_ms, progress.moving_at_ms
        assert fresh is not None and moving is not None
        assert made <= fresh < made + 100  # as current as the records it read, ten minutes old
        assert started <= moving <= held  # and it was reading just now

        def sight(now: int) -> tuple[int | None, bool, bool]:
            s = judge_sight(
                "sim",
                now,
                caught_up=True,
                reader_fresh_at=progress.fresh_at_ms,
                reader_moving_at=progress.moving_at_ms,
                newest_commit=now,
                newest_sample=now,
                offset_refresh_ms=10_000,
            )
            return s.blind_since, s.unreachable, s.behind

        assert sight(held) == (fresh, False, True)  # behind: verdicts held as of its records, no page
        assert sight(moving + 41_000) == (fresh, True, False)  # not moving for longer than the limit: cut off

        store.open_for = 1_000
        store.gate.set()
        released = wall_ms()
        await settle(
            lambda: (progress.fresh_at_ms or 0) >= released,
            what="reader read to the end: fresh as of the broker's answer",
        )
        assert progress.caught_up
        now = wall_ms()
        assert sight(now) == (None, False, False)
    commits = [e for e in store.events if isinstance(e, Commit)]
    assert sorted(c.partition for c in commits) == list(range(100))  # every record once


# --- admin-polling path -----------------------------------------------------------------


async def test_admin_polling_matches_what_was_committed(kafka: str, unique: str, settle: Settle) -> None:
    scenario = with_extras(unique)
    # Tansu keeps deleted groups (DeleteGroups is a no-op): leave the deleted group out here.
    scenario = Scenario(scenario.topics, tuple(g for g in scenario.groups if g.behaviour != "deleted"))
    driver = Driver(kafka, scenario, mode="admin")
    await driver.start()
    # A group that commits without ever joining: no members, so no repeated commits.
    loner = f"loner-{unique}"
    orders_topic = scenario.topics[0].name
    manual = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=loner, enable_auto_commit=False)
    await manual.start()
    try:
        await drive(driver, 4)
        manual.assign([TopicPartition(orders_topic, 3)])
        await manual.commit({TopicPartition(orders_topic, 3): 2})
    finally:
        await manual.stop()
        await driver.close()
    denied = f"console-consumer-{unique}"
    expected = {k: v for k, v in driver.last_commits.items() if k[0] != denied}
    expected[(loner, orders_topic, 3)] = 2

    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    mine = cluster(kafka, groups_allow=unique)
    async with running(poll_admin(mine, store, progress, counters, stop)):
        await settle(lambda: progress.caught_up, what="first polling round")
        after_first = len(store.events)
        await settle(lambda: len(store.events) > after_first, what="a second round")
        snapshot = list(store.events)

    assert fold(snapshot) == expected
    assert [e for e in snapshot if getattr(e, "group", None) == denied] == []
    assert counters.filtered_groups >= 1
    commits = [e for e in snapshot if isinstance(e, Commit)]
    assert all(e.order == e.timestamp >= e.observed for e in commits)
    # A group with members repeats its unchanged offset each round; the loner does not.
    healthy = [e for e in commits if e.group == f"billing-{unique}" and e.partition == 0]
    assert len(healthy) >= 2 and len({e.offset for e in healthy}) == 1
    assert healthy == sorted(healthy, key=lambda e: e.order) and len({e.order for e in healthy}) == len(healthy)
    assert [e.offset for e in commits if e.group == loner] == [2]


def test_admin_round_events_deletions_and_repeats() -> None:
    memory = PollMemory()
    first = round_events("c", "g", None, {("t", 0): 5, ("t", 1): 7}, [("t", 0), ("t", 1)], memory, 1000)
    assert [(type(e).__name__, getattr(e, "offset", None)) for e in first] == [("Commit", 5), ("Commit", 7)]
    # No members: unchanged offsets are not repeated; a partition without offset is deleted.
    second = round_events("c", "g", None, {("t", 0): 5, ("t", 1): -1}, [("t", 0), ("t", 1)], memory, 1000)
    assert second == [OffsetDeleted("c", "g", "t", 1, 1001)]
    assert memory.committed["g"] == {("t", 0): 5}


def test_admin_groups_that_disappear_are_deleted_once() -> None:
    memory = PollMemory()
    assert groups_gone("c", ["a", "b"], memory, 1000) == []
    round_events("c", "b", None, {("t", 0): 1}, [("t", 0)], memory, 1000)
    # Left out of one listing (its coordinator restarting, say): nothing is dropped yet.
    assert groups_gone("c", ["a"], memory, 2000) == []
    assert memory.committed["b"] == {("t", 0): 1}
    # Left out again, round after round: now it is gone, once.
    assert groups_gone("c", ["a"], memory, 3000) == [GroupDeleted("c", "b", 3000)]
    assert "b" not in memory.committed
    assert groups_gone("c", ["a"], memory, 4000) == []


def test_admin_group_listed_again_starts_its_absence_over() -> None:
    memory = PollMemory()
    groups_gone("c", ["a", "b"], memory, 1000)
    assert groups_gone("c", ["a"], memory, 2000) == []
    assert groups_gone("c", ["a", "b"], memory, 3000) == []
    assert groups_gone("c", ["a"], memory, 4000) == []  # missing once again, not twice
    assert groups_gone("c", ["a"], memory, 5000) == [GroupDeleted("c", "b", 5000)]


def _topic(name: str, partitions: int, error_code: int = 0) -> dict[str, Any]:
    return {"error_code": error_code, "topic": name, "partitions": [{"partition": p} for p in range(partitions)]}


def test_admin_partitions_missing_from_the_metadata_are_deleted_only_when_confirmed() -> None:
    # Hand-built DescribeTopics (Metadata) answers: the single in-memory Tansu broker leads
    # every partition itself, so no leader election (a topic answered with LEADER_NOT_AVAILABLE)
    # or partial metadata answer can be provoked on it, and those are the cases tested here.
    memory = PollMemory()
    refresh_layout(memory, [_topic("t", 2), _topic("u", 1)])
    round_events("c", "g", None, {("t", 0): 5, ("t", 1): 6, ("u", 0): 1}, [("t", 0), ("t", 1), ("u", 0)], memory, 1)
    # A leader election: "t" comes with an error, "u" is missing altogether. Neither is gone,
    # and a round that could not ask for them keeps what the group had committed there.
    layout = refresh_layout(memory, [_topic("t", 0, error_code=5)])
    assert layout == {} and memory.gone_partitions == set()
    assert round_events("c", "g", None, {}, [], memory, 2) == []
    assert memory.committed["g"] == {("t", 0): 5, ("t", 1): 6, ("u", 0): 1}
    # Back again: the absence of "u" starts over.
    refresh_layout(memory, [_topic("t", 2), _topic("u", 1)])
    refresh_layout(memory, [_topic("t", 2)])
    assert memory.gone_partitions == set()
    # "u" missing from a second successful answer in a row: its partition is gone.
    refresh_layout(memory, [_topic("t", 2)])
    assert memory.gone_partitions == {("u", 0)}
    # UNKNOWN_TOPIC_OR_PARTITION is "no such topic", not "unavailable".
    refresh_layout(memory, [_topic("t", 2, error_code=3)])
    refresh_layout(memory, [_topic("t", 2, error_code=3)])
    assert memory.gone_partitions == {("t", 0), ("t", 1), ("u", 0)}


def test_admin_topics_created_later_are_probed_once_per_group() -> None:
    memory = PollMemory()
    refresh_layout(memory, [_topic("a", 1)])
    groups_gone("c", ["g", "h"], memory, 1)
    refresh_layout(memory, [_topic("a", 1), _topic("b", 2)])
    assert memory.pending_probe == {"g": {"b"}, "h": {"b"}}
    refresh_layout(memory, [_topic("a", 1), _topic("b", 2)])
    assert memory.pending_probe == {"g": {"b"}, "h": {"b"}}  # until each group has been asked


def test_describe_answer_gives_owners_and_subscribed_topics() -> None:
    # Hand-built DescribeGroups answer: Tansu leaves member assignments, client ids and hosts
    # empty and never answers one group of a batch with an error (see TESTING.md).
    class Answer:
        groups = [
            (
                0,
                "g",
                "Stable",
                "consumer",
                "range",
                [
                    ("m-1", "app-1", "/10.1.1.1", encode_subscription(["a", "b"]), encode_assignment({"a": [1, 0]})),
                    ("m-2", "app-2", "/10.1.1.2", b"", b"\x00"),  # an assignment it cannot read: no owners
                ],
            ),
            (15, "broken", "", "", "", []),  # an error for one group leaves it out
        ]

    views = parse_describe([Answer()])
    assert list(views) == ["g"]
    g = views["g"]
    assert [(o.topic, o.partition, o.host, o.client_id, o.member_id) for o in g.owners] == [
        ("a", 0, "/10.1.1.1", "app-1", "m-1"),
        ("a", 1, "/10.1.1.1", "app-1", "m-1"),
    ]
    assert g.subscribed == {"a", "b"} and g.has_members


# --- log-end sampler --------------------------------------------------------------------


async def test_log_end_sampler_exact_offsets_and_topic_deleted(kafka: str, unique: str, settle: Settle) -> None:
    topics = (
        TopicSpec(f"le-a-{unique}", 8, rate=1.0),
        TopicSpec(f"le-b-{unique}", 8, pattern="bursty", burst_every=2.0),
        TopicSpec(f"le-c-{unique}", 8, rate=0.5, deleted_at=4.0),
    )
    denied = TopicSpec(f"__private-{unique}", 1, rate=1.0)  # topics-deny "^__.*" by default
    scenario = Scenario((*topics, denied), (GroupSpec(f"g-{unique}", tuple(t.name for t in topics)),))
    driver = Driver(kafka, scenario, mode="produce")
    await driver.start()
    try:
        await drive(driver, 3)
        # The denied topic is never sampled, even when asked for.
        wanted = [t.name for t in topics] + [f"never-created-{unique}", denied.name]
        store, counters, stop = Store(), IngestCounters(), asyncio.Event()
        async with running(sample_log_ends(cluster(kafka), lambda: wanted, store, counters, stop)):
            await settle(lambda: any(isinstance(e, LogEndSample) for e in store.events), what="a sample round")
            latest = {(e.topic, e.partition): e.offset for e in store.events if isinstance(e, LogEndSample)}
            expected = {(t.name, p): driver.produced.get((t.name, p), 0) for t in topics for p in range(8)}
            assert latest == expected
            assert sum(expected.values()) > 0 and driver.produced[(denied.name, 0)] > 0

            await drive(driver, 4)  # deletes le-c
            await settle(lambda: any(isinstance(e, TopicDeleted) for e in store.events), what="TopicDeleted")
            assert [e for e in store.events if isinstance(e, TopicDeleted)] == [TopicDeleted("sim", topics[2].name)]
            mark = len(store.events)
            await settle(lambda: any(isinstance(e, LogEndSample) for e in store.events[mark:]), what="next round")
            assert {e.topic for e in store.events[mark:] if isinstance(e, LogEndSample)} == {
                topics[0].name,
                topics[1].name,
            }
    finally:
        await driver.close()


async def test_log_end_sampler_samples_a_newly_consumed_topic_at_once(kafka: str, unique: str, settle: Settle) -> None:
    """A commit naming a topic no group consumed before gets its log end within seconds, not
    after a whole offset-refresh (an hour here): its lag can be judged from the start."""
    old, new = TopicSpec(f"le-old-{unique}", 1, rate=1.0), TopicSpec(f"le-new-{unique}", 1, rate=1.0)
    driver = Driver(kafka, Scenario((old, new), (GroupSpec(f"g-{unique}", (old.name, new.name)),)), mode="produce")
    await driver.start()
    try:
        await drive(driver, 2)
        wanted = [old.name]
        store, counters, stop = Store(), IngestCounters(), asyncio.Event()
        sampler = sample_log_ends(cluster(kafka, offset_refresh=3600.0), lambda: wanted, store, counters, stop)
        async with running(sampler):
            await settle(lambda: any(isinstance(e, LogEndSample) for e in store.events), what="the first round")
            wanted.append(new.name)  # a group commits on a new topic
            await settle(
                lambda: any(isinstance(e, LogEndSample) and e.topic == new.name for e in store.events),
                timeout=10,
                what="the new topic sampled",
            )
    finally:
        await driver.close()


async def test_log_end_topic_deleted_only_after_a_second_metadata_answer(
    kafka: str, unique: str, settle: Settle
) -> None:
    """A sampled topic missing from the first metadata answer is not deleted on that answer;
    the sampler asks again next round (not a whole topic-refresh later) and deletes it then."""
    topic = TopicSpec(f"le-keep-{unique}", 2, rate=1.0)
    driver = Driver(kafka, Scenario((topic,), (GroupSpec(f"g-{unique}", (topic.name,)),)), mode="produce")
    await driver.start()
    try:
        await drive(driver, 1)
        gone = TopicDeleted("sim", f"gone-while-down-{unique}")
        store, stop = Store(), asyncio.Event()
        settings = cluster(kafka, topic_refresh=600.0)  # far beyond the test: the confirming refresh
        sampler = sample_log_ends(settings, lambda: [topic.name], store, IngestCounters(), stop, known=[gone.topic])
        async with running(sampler):
            await settle(lambda: gone in store.events, what="TopicDeleted of the topic gone while down")
        first_sample = next(i for i, e in enumerate(store.events) if isinstance(e, LogEndSample))
        assert store.events.index(gone) > first_sample  # not on the first answer
        assert [e for e in store.events if isinstance(e, TopicDeleted)] == [gone]
    finally:
        await driver.close()


class RecordingAdmin:
    """The real admin client, remembering which partitions each OffsetFetch named."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin
        self.asked: list[tuple[str, set[tuple[str, int]]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)

    async def list_consumer_group_offsets(self, group: str, partitions: Any = None) -> Any:
        self.asked.append((group, {(tp.topic, tp.partition) for tp in partitions or ()}))
        return await self.admin.list_consumer_group_offsets(group, partitions=partitions)


async def test_admin_polling_probes_every_topic_only_on_first_sight_and_for_new_topics(kafka: str, unique: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    a, b, c = f"pa-{unique}", f"pb-{unique}", f"pc-{unique}"
    group = f"probe-{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(a, 2, 1), NewTopic(b, 1, 1)])
        # A group that commits without joining: no members, so no assignment to go by.
        manual = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
        await manual.start()
        try:
            manual.assign([TopicPartition(a, 0)])
            await manual.commit({TopicPartition(a, 0): 3})
        finally:
            await manual.stop()

        spy, memory, store, counters = RecordingAdmin(admin), PollMemory(), Store(), IngestCounters()
        settings = cluster(kafka, groups_allow=f"^{group}$")
        only = GroupFilter.for_cluster(settings)
        clock = ManualClock(1_700_000_000_000)

        async def round_asking(refresh: bool) -> set[tuple[str, int]]:
            nonlocal layout
            if refresh:
                layout = refresh_layout(memory, await admin.describe_topics())
            spy.asked.clear()
            await poll_round(spy, settings, store, counters, only, None, memory, layout, clock=clock)
            assert [g for g, _ in spy.asked] == [group]
            return spy.asked[0][1]

        layout: dict[str, set[int]] = {}
        first = await round_asking(refresh=True)
        assert {(a, 0), (a, 1), (b, 0)} <= first  # first sight: every topic
        assert [(e.topic, e.partition, e.offset) for e in store.events if isinstance(e, Commit)] == [(a, 0, 3)]
        # observed at the injected clock's time, which is also the commit's time and order
        assert [(e.observed, e.timestamp, e.order) for e in store.events if isinstance(e, Commit)] == [
            (clock(), clock(), clock())
        ]
        assert await round_asking(refresh=False) == {(a, 0), (a, 1)}  # then only what it committed to
        assert await round_asking(refresh=True) == {(a, 0), (a, 1)}  # a refresh alone changes nothing
        await admin.create_topics([NewTopic(c, 1, 1)])
        assert await round_asking(refresh=True) == {(a, 0), (a, 1), (c, 0)}  # a new topic, once
        assert await round_asking(refresh=False) == {(a, 0), (a, 1)}
    finally:
        await admin.close()


async def test_admin_polling_deletes_offsets_of_a_deleted_topic(kafka: str, unique: str, settle: Settle) -> None:
    """Offsets of a deleted topic become OffsetDeleted (after two metadata answers without it);
    those of the topic that stays are untouched and the group is not deleted."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    doomed, kept, group = f"doomed-{unique}", f"kept-{unique}", f"dg-{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(doomed, 2, 1), NewTopic(kept, 1, 1)])
        manual = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
        await manual.start()
        try:
            parts = [TopicPartition(doomed, 0), TopicPartition(doomed, 1), TopicPartition(kept, 0)]
            manual.assign(parts)
            await manual.commit({tp: 5 for tp in parts})
        finally:
            await manual.stop()
        store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
        async with running(poll_admin(cluster(kafka, groups_allow=f"^{group}$"), store, progress, counters, stop)):
            await settle(
                lambda: fold(store.events) == {(group, t.topic, t.partition): 5 for t in parts}, what="commits"
            )
            await admin.delete_topics([doomed])
            await settle(
                lambda: sum(isinstance(e, OffsetDeleted) for e in store.events) == 2,
                what="offsets of the deleted topic",
            )
        deleted = sorted((e.topic, e.partition) for e in store.events if isinstance(e, OffsetDeleted))
        assert deleted == [(doomed, 0), (doomed, 1)]
        assert fold(store.events) == {(group, kept, 0): 5}
        assert not any(isinstance(e, GroupDeleted) for e in store.events)
    finally:
        await admin.close()


async def test_consumer_positions_reads_public_positions_and_warns_once(kafka: str, unique: str) -> None:
    topic = f"pos-{unique}"
    await create_topic(kafka, topic, 3)
    # auto_offset_reset="none": a partition assigned without a seek keeps an unknown position.
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False, auto_offset_reset="none")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        consumer.seek(TopicPartition(topic, 0), 4)
        consumer.seek(TopicPartition(topic, 1), 0)
        counters, warned = IngestCounters(), set[str]()
        loop = asyncio.get_running_loop()
        # Partition 2 has no position: left out after a bounded wait, not an error. Partition 3
        # is not assigned: aiokafka raises for it, which is counted and warned about once.
        for _ in range(2):
            started = loop.time()
            assert await consumer_positions(consumer, topic, [0, 1, 2, 3], counters, warned) == {0: 4, 1: 0}
            assert loop.time() - started < 2.0
        assert counters.failures == {"offsets_topic_position_IllegalStateError": 2}
        assert warned == {"IllegalStateError"}
    finally:
        await close_quietly(consumer.stop)  # aiokafka can raise CancelledError from its own task here


@pytest.mark.parametrize("mode", ["topic", "admin"])
async def test_reader_survives_an_unreachable_broker(mode: str, settle: Settle) -> None:
    """Nothing listens: the reader counts failures and keeps retrying until stopped, and says the
    cluster has not answered it (the sight then tells an unreachable cluster from a catch-up)."""
    from lagd.embedded.services import free_port

    dead = cluster(f"127.0.0.1:{free_port()}", request_timeout=1.0)
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    if mode == "topic":
        task = asyncio.ensure_future(read_offsets_topic(dead, {}, store, progress, counters, stop))
    else:
        task = asyncio.ensure_future(poll_admin(dead, store, progress, counters, stop))
    await settle(lambda: sum(counters.failures.values()) >= 2, what="two failed attempts")
    stop.set()
    await asyncio.wait_for(task, 5.0)
    assert sum(counters.failures.values()) >= 2
    assert not progress.caught_up and store.events == []
    assert not progress.answered


async def test_offsets_topic_reader_rides_out_a_broker_outage(unique: str, settle: Settle) -> None:
    """The broker goes away and comes back (empty: Tansu keeps memory storage only); the reader
    reports the outage as failures, does not crash, and reads what is written afterwards."""
    from lagd.embedded import services as embedded

    broker = embedded.start_tansu()
    port = broker.port
    topic = f"o-{unique}"
    scenario = Scenario((TopicSpec(topic, 2, rate=1.0),), (GroupSpec(f"g-{unique}", (topic,)),))
    settings = cluster(broker.address, topic_refresh=0.3, request_timeout=1.0)
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    try:
        before = Driver(broker.address, scenario, offsets_partitions=3)
        await before.start()
        await drive(before, 2)
        await before.close()
        async with running(read_offsets_topic(settings, {}, store, progress, counters, stop)):
            await settle(lambda: progress.caught_up, what="caught up before the outage")
            assert progress.answered
            assert fold(store.events) == before.last_commits
            broker.stop(timeout=0.2)  # Tansu lingers on SIGTERM: a short grace, then SIGKILL
            await settle(lambda: sum(counters.failures.values()) >= 1, what="the outage to be counted")
            broker = embedded.start_tansu(port=port)
            mark = len(store.events)
            after = Driver(broker.address, scenario, offsets_partitions=3)
            await after.start()
            await drive(after, 3)
            await after.close()
            await settle(
                lambda: fold(store.events[mark:]) == after.last_commits, timeout=30.0, what="commits after the outage"
            )
    finally:
        broker.stop(timeout=0.2)


async def test_offsets_topic_created_after_the_reader_started_is_discovered(
    kafka: str, unique: str, settle: Settle
) -> None:
    topic = f"__consumer_offsets_late_{unique}"
    scenario = Scenario((TopicSpec(f"late-{unique}", 3, rate=1.0),), (GroupSpec(f"g-{unique}", (f"late-{unique}",)),))
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    settings = cluster(kafka, offsets_topic=topic, topic_refresh=0.2)
    async with running(read_offsets_topic(settings, {}, store, progress, counters, stop)):
        driver = Driver(kafka, scenario, offsets_topic=topic, offsets_partitions=5)
        await driver.start()
        try:
            await drive(driver, 2)
        finally:
            await driver.close()
        await settle(lambda: fold(store.events) == driver.last_commits, what="commits in the late topic")
    assert progress.caught_up
    assert set(store.positions) <= set(range(5)) and store.positions


# --- pure parts of the log-end sampler --------------------------------------------------


def test_plan_requests_groups_by_leader_and_skips_leaderless() -> None:
    layout = Layout({"a": {0: 1, 1: 2, 2: None}, "b": {0: 1}, "c": {0: 3}})
    by_node, leaderless = plan_requests(layout, ["a", "b", "missing"])
    assert by_node == {1: {"a": [0], "b": [0]}, 2: {"a": [1]}}
    assert leaderless == 1


def test_a_broker_failing_round_after_round_is_news_once_in_a_while() -> None:
    """A dead broker fails every round until it is fenced: one warning, then one every 30 s
    while it keeps failing; news again once asked and failing after a time away; and a line
    when it answers again."""
    warn, back, failing = broker_news([2], [1, 3], {}, now=100.0)
    assert (warn, back, failing) == ([2], [], {2: 100.0})
    warn, back, failing = broker_news([2], [1, 3], failing, now=101.0)
    assert (warn, back, failing) == ([], [], {2: 100.0})
    warn, back, failing = broker_news([2], [1, 3], failing, now=130.0)  # still failing 30 s on
    assert (warn, back, failing) == ([2], [], {2: 130.0})
    warn, back, failing = broker_news([], [1, 3], failing, now=131.0)  # fenced: its partitions moved
    assert (warn, back, failing) == ([], [], {})
    warn, back, failing = broker_news([2], [1, 3], failing, now=140.0)  # leading again, failing again
    assert (warn, back, failing) == ([2], [], {2: 140.0})
    warn, back, failing = broker_news([], [1, 2, 3], failing, now=141.0)
    assert (warn, back, failing) == ([], [2], {})
    warn, back, failing = broker_news([1, 3], [2], {3: 140.0}, now=141.0)
    assert (warn, back, failing) == ([1], [], {1: 141.0, 3: 140.0})


def test_absence_decides_deletion_only_on_repeated_evidence() -> None:
    assert ABSENT_REFRESHES_BEFORE_DELETE == 2
    # Absent once: nothing.
    gone, streaks = confirm_absent(["a", "b"], {"a"}, {})
    assert gone == [] and streaks == {"b": 1}
    # A failed refresh is no evidence either way: nothing, streaks unchanged.
    gone, streaks = confirm_absent(["a", "b"], None, streaks)
    assert gone == [] and streaks == {"b": 1}
    # Absent from the next successful refresh too: deleted.
    gone, after = confirm_absent(["a", "b"], {"a"}, streaks)
    assert gone == ["b"] and after == {"b": 2}
    # Present again after one absence: the count starts over.
    gone, streaks = confirm_absent(["a", "b"], {"a", "b"}, streaks)
    assert gone == [] and streaks == {}
    gone, streaks = confirm_absent(["a", "b"], {"a"}, streaks)
    assert gone == [] and streaks == {"b": 1}


def test_deleted_topics_needs_two_metadata_answers_without_the_topic() -> None:
    layout = Layout({"a": {0: 1}}, unavailable={"secret"})
    gone, streaks = deleted_topics({"a", "gone", "secret"}, layout, {})
    assert gone == [] and streaks == {"gone": 1}  # a topic lagd may not describe still exists
    assert deleted_topics({"a", "gone"}, None, streaks) == ([], streaks)  # the refresh failed
    assert deleted_topics({"a", "gone", "secret"}, layout, streaks) == (["gone"], {"gone": 2})


def test_parse_list_offsets_keeps_good_partitions_and_names_errors() -> None:
    # Hand-built ListOffsets answers: the single Tansu broker leads every partition, so it
    # never answers NOT_LEADER_OR_FOLLOWER, and aiokafka negotiates a newer version than v0
    # with it, so a v0 answer (Kafka 0.9) cannot be had either.
    class V1:
        API_VERSION = 1
        topics = [("a", [(0, 0, -1, 42), (1, 6, -1, -1)]), ("b", [(0, 0, -1, 7)])]

    class V0:
        API_VERSION = 0
        topics = [("a", [(0, 0, [9]), (1, 0, [])])]

    offsets, errors = parse_list_offsets(V1())
    assert offsets == {("a", 0): 42, ("b", 0): 7}
    assert errors == {("a", 1): "NotLeaderForPartitionError"}
    assert parse_list_offsets(V0()) == ({("a", 0): 9}, {})


async def test_driver_run_compresses_time_and_records_what_it_produced(kafka: str, unique: str) -> None:
    topic = TopicSpec(f"run-{unique}", 2, rate=2.0)
    scenario = Scenario((topic,), (GroupSpec(f"g-{unique}", (topic.name,)),), tick=0.5)
    driver = Driver(kafka, scenario, mode="produce", speed=1000.0)
    await driver.start()
    try:
        await driver.run(until=3.0)
    finally:
        await driver.close()
    assert driver.t == 3.0
    assert driver.produced == {(topic.name, p): log_end(topic, p, 3.0) for p in range(2)}
