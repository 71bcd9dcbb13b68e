"""Durable delivery against the real Postgres and Mosquitto: outbox, publisher, leadership."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import aiomqtt
import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd import embedded
from lagd.config import NotifySettings, async_database_url
from lagd.db.schema import outbox as outbox_table
from lagd.model import GroupStatus, PartitionStatus
from lagd.notify import outbox
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from lagd.notify.leader import Lease, leadership
from lagd.notify.mqtt import PublisherStatus, publish_outbox
from lagd.notify.notifier import run_notifier

T0 = 1_700_000_000_000
RULES = Rules(severity="WARN", correlation_window=60_000, hold_time=10_000, update_interval=1_000)

Settle = Callable[..., Any]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(async_database_url(database_url))
    yield eng
    await eng.dispose()


def settings_for(host: str, port: int, prefix: str, **kw: Any) -> NotifySettings:
    return replace(
        NotifySettings(),
        mqtt_url=f"mqtt://{host}:{port}",
        topic_prefix=prefix,
        client_id=f"pub-{prefix.replace('/', '-')}",
        publish_interval=0.05,
        **kw,
    )


class Subscriber:
    """Collects every message under a prefix (QoS 1) until its broker goes away."""

    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.messages: list[tuple[str, dict[str, Any], bool]] = []
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client(self.host, self.port) as client:
                await client.subscribe(f"{self.prefix}/#", qos=1)
                self.ready.set()
                async for msg in client.messages:
                    assert isinstance(msg.payload, bytes)
                    self.messages.append((str(msg.topic), json.loads(msg.payload), bool(msg.retain)))

    async def start(self) -> Subscriber:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def incident_event_ids(self) -> list[str]:
        return [p["event_id"] for t, p, _ in self.messages if "/incidents/" in t]


def first_seen(ids: list[str]) -> list[str]:
    """Drop duplicates the way a subscriber does: by event id, keeping the first."""
    return list(dict.fromkeys(ids))


def outage_scenario(cluster: str, groups: int) -> tuple[list[GroupChange], list[GroupChange]]:
    """A broker outage: `groups` groups fail together, then recover."""
    fail = [
        GroupChange(
            cluster,
            f"g{i}",
            GroupStatus.ERR if i == groups - 1 else GroupStatus.WARN,
            T0 + i * 2000,
            partitions=(("orders", i, PartitionStatus.STOP, "broker-1"),),
            topics=("orders",),
            hosts=("broker-1",),
        )
        for i in range(groups)
    ]
    recover = [GroupChange(cluster, f"g{i}", GroupStatus.OK, T0 + 100_000 + i * 500) for i in range(groups)]
    return fail, recover


async def feed(
    eng: AsyncEngine, incidents: IncidentEngine, changes: list[GroupChange], prefix: str, until: int
) -> list[IncidentEvent]:
    """Run changes through the engine (ticking every second of fake time) and record each step."""
    all_events: list[IncidentEvent] = []
    pending = list(changes)
    now = pending[0].at
    while now <= until:
        while pending and pending[0].at <= now:
            ch = pending.pop(0)
            events = incidents.apply(ch)
            retained = [outbox.group_status_message(prefix, ch)]
            await outbox.record(eng, ch.cluster, events, incidents.dump_cluster(ch.cluster), retained, prefix)
            all_events += events
        ticked = incidents.tick(now)
        if ticked:
            await outbox.record(eng, ticked[0].cluster, ticked, incidents.dump_cluster(ticked[0].cluster), [], prefix)
            all_events += ticked
        now += 1000
    return all_events


async def start_publisher(
    eng: AsyncEngine, settings: NotifySettings
) -> tuple[asyncio.Task[None], asyncio.Event, PublisherStatus]:
    stop, status = asyncio.Event(), PublisherStatus()
    task = asyncio.create_task(publish_outbox(eng, settings, stop, status, publish_timeout=1.0))
    return task, stop, status


async def outbox_rows(eng: AsyncEngine, pending_only: bool = False) -> int:
    async with eng.connect() as conn:
        query = select(func.count()).select_from(outbox_table)
        if pending_only:
            query = query.where(outbox_table.c.delivered_at.is_(None))
        return int(await conn.scalar(query) or 0)


async def test_open_update_resolve_arrive_in_order_with_retained_statuses(
    engine: AsyncEngine, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    host, port = mqtt_broker
    prefix = f"lagd/t{unique}"
    sub = await Subscriber(host, port, prefix).start()
    fail, recover = outage_scenario("prod", 5)
    events = await feed(engine, IncidentEngine(RULES), fail + recover, prefix, until=T0 + 130_000)
    assert [e.event for e in events] == ["opened", "updated", "updated", "updated", "updated", "resolved"]
    # recording the same events again is a no-op
    rows = await outbox_rows(engine)
    await outbox.record(engine, "prod", events, {"version": 1, "open": [], "recent": {}}, [], prefix)
    assert await outbox_rows(engine) == rows == len(events) + len(fail) + len(recover)

    task, stop, status = await start_publisher(engine, settings_for(host, port, prefix))
    try:
        await settle(lambda: len(sub.messages) == rows, what="every outbox row delivered")
        await settle(lambda: status.published_total == rows, what="publisher counted every row")
    finally:
        stop.set()
        await task
        await sub.close()
    assert await outbox_rows(engine, pending_only=True) == 0
    assert sub.incident_event_ids() == [e.event_id for e in events]
    incident_msgs = [(t, p) for t, p, _ in sub.messages if "/incidents/" in t]
    assert {t for t, _ in incident_msgs} == {f"{prefix}/prod/incidents/{events[0].incident_id}"}
    assert [p["event"] for _, p in incident_msgs] == [e.event for e in events]
    assert incident_msgs[-1][1]["groups"] == {f"g{i}": "OK" for i in range(5)}
    assert incident_msgs[0][1]["severity"] == "WARN" and incident_msgs[-2][1]["severity"] == "ERR"

    # a late dashboard gets the current verdict of every group from retained messages
    late = await Subscriber(host, port, prefix).start()
    try:
        await settle(lambda: len(late.messages) == 5, what="retained statuses")
    finally:
        await late.close()
    assert sorted((t, p["status"], r) for t, p, r in late.messages) == [
        (f"{prefix}/prod/groups/g{i}/status", "OK", True) for i in range(5)
    ]

    listed = await outbox.list_incidents(engine, "resolved", 10)
    assert [(i["id"], i["state"], i["resolved_at"]) for i in listed] == [
        (events[0].incident_id, "resolved", events[-1].resolved_at)
    ]
    assert await outbox.list_incidents(engine, "open", 10) == []
    assert await outbox.purge_delivered(engine, older_than=2**62) == rows
    assert await outbox_rows(engine) == 0


async def test_mqtt_outage_holds_events_and_delivers_them_in_order_without_gap(
    engine: AsyncEngine, private_mosquitto: embedded.Process, database_url: str, unique: str, settle: Settle
) -> None:
    broker = private_mosquitto
    host, port = broker.host, broker.port
    prefix = f"lagd/t{unique}"
    incidents = IncidentEngine(RULES)
    fail, recover = outage_scenario("prod", 6)
    sub = await Subscriber(host, port, prefix).start()
    task, stop, status = await start_publisher(engine, settings_for(host, port, prefix))
    restarted: embedded.Process | None = None
    sub2: Subscriber | None = None
    try:
        before = await feed(engine, incidents, fail[:3], prefix, until=fail[2].at)
        await settle(lambda: sub.incident_event_ids() == [e.event_id for e in before], what="events before the outage")

        broker.stop()
        during = await feed(engine, incidents, fail[3:] + recover, prefix, until=T0 + 130_000)
        assert [e.event for e in during][-1] == "resolved"
        await settle(lambda: status.failures >= 1 and not status.connected, what="publisher noticing the outage")
        assert await outbox_rows(engine, pending_only=True) >= len(during)

        # Hold the publisher off the outbox until the new subscriber listens, so that
        # nothing goes out to a broker with nobody subscribed (the lock blocks its SELECT).
        lock = await asyncpg.connect(database_url)
        try:
            tx = lock.transaction()
            await tx.start()
            await lock.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
            restarted = embedded.start_mosquitto(port)
            sub2 = await Subscriber(host, port, prefix).start()
            await tx.rollback()
        finally:
            await lock.close()

        expected = [e.event_id for e in before + during]
        await settle(
            lambda: first_seen(sub.incident_event_ids() + sub2.incident_event_ids()) == expected,
            what="every event after the broker returned",
        )
        await settle(lambda: status.connected)

        async def drained() -> bool:
            return await outbox_rows(engine, pending_only=True) == 0

        await settle(drained, what="every row marked delivered")
        # in order: what the new subscriber got is exactly the tail, in record order
        after = first_seen(sub2.incident_event_ids())
        assert after == expected[len(expected) - len(after) :]
        assert len(after) >= len(during)
    finally:
        stop.set()
        await task
        await sub.close()
        if sub2 is not None:
            await sub2.close()
        if restarted is not None:
            restarted.stop()


async def test_publisher_restart_mid_stream_loses_nothing_and_duplicates_keep_their_event_id(
    engine: AsyncEngine, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    host, port = mqtt_broker
    prefix = f"lagd/t{unique}"
    incidents = IncidentEngine(RULES)
    # many clusters, so many incident events: each `opened` is its own outbox row
    events: list[IncidentEvent] = []
    for c in range(600):
        events += incidents.apply(GroupChange(f"c{c}", "g", GroupStatus.WARN, T0))
    await outbox.record(engine, "c0", events, incidents.dump_cluster("c0"), [], prefix)
    assert await outbox_rows(engine, pending_only=True) == 600
    sub = await Subscriber(host, port, prefix).start()
    settings = settings_for(host, port, prefix)
    task, stop, status = await start_publisher(engine, settings)
    try:
        await settle(lambda: status.published_total >= 20, what="some rows published", interval=0.001)
        task.cancel()  # a crash mid-stream
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert status.published_total < 600
        task, stop, status = await start_publisher(engine, settings)
        await settle(lambda: first_seen(sub.incident_event_ids()) == [e.event_id for e in events], what="all events")
        await settle(lambda: status.pending == 0 and status.published_total > 0, what="outbox drained")
    finally:
        stop.set()
        await task
        await sub.close()
    by_id: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for t, p, _ in sub.messages:
        by_id.setdefault(p["event_id"], []).append((t, p))
    # any duplicate is the very same message: same topic, same body, same event id
    assert all(all(x == v[0] for x in v) for v in by_id.values())
    assert await outbox_rows(engine, pending_only=True) == 0


async def test_only_one_contender_leads_a_cluster_and_a_standby_takes_over(engine: AsyncEngine) -> None:
    a, b = Lease(engine, "prod"), Lease(engine, "prod")
    try:
        assert await a.refresh() is True
        assert await b.refresh() is False
        assert await a.refresh() is True  # still held
        async with leadership(engine, "staging") as other:
            assert other.is_leader is True  # another cluster has its own lock
        await a.release()
        assert await b.refresh() is True
        assert await a.refresh() is False
    finally:
        await a.release()
        await b.release()


async def test_notifier_restart_mid_incident_continues_the_same_incident(engine: AsyncEngine, settle: Settle) -> None:
    settings = replace(NotifySettings(), correlation_window=30.0, hold_time=0.5, update_interval=0.2)
    cluster = "prod"

    async def rows() -> list[dict[str, Any]]:
        async with engine.connect() as conn:
            result = await conn.execute(
                select(outbox_table.c.payload).where(~outbox_table.c.retain).order_by(outbox_table.c.id)
            )
            return [r[0] for r in result]

    def now_change(group: str, status: GroupStatus) -> GroupChange:
        return GroupChange(cluster, group, status, int(time.time() * 1000))

    async def run_once(changes: list[GroupChange], until: Callable[[list[dict[str, Any]]], bool]) -> None:
        queue: asyncio.Queue[GroupChange] = asyncio.Queue()
        stop = asyncio.Event()
        task = asyncio.create_task(run_notifier(engine, settings, queue, stop))
        for ch in changes:
            await queue.put(ch)

        async def done() -> bool:
            return until(await rows())

        try:
            await settle(done, what="notifier output")
        finally:
            stop.set()
            await task

    await run_once([now_change("g1", GroupStatus.WARN), now_change("g2", GroupStatus.ERR)], lambda r: len(r) >= 2)
    # a second run (the daemon restarted) restores the state and finishes the same incident
    await run_once(
        [now_change("g1", GroupStatus.OK), now_change("g2", GroupStatus.OK)], lambda r: r[-1]["event"] == "resolved"
    )
    got = await rows()
    assert len({p["id"] for p in got}) == 1
    assert [p["event_id"] for p in got] == [f"{got[0]['id']}:{n}" for n in range(1, len(got) + 1)]
    assert [p["event"] for p in got] == ["opened", "updated", "resolved"]
    assert got[-1]["groups"] == {"g1": "OK", "g2": "OK"}


async def test_a_standby_notifier_records_nothing_while_another_leads(engine: AsyncEngine, settle: Settle) -> None:
    settings = replace(NotifySettings(), hold_time=0.5, update_interval=0.2)
    holder = Lease(engine, "prod")
    assert await holder.refresh()
    queue: asyncio.Queue[GroupChange] = asyncio.Queue()
    stop = asyncio.Event()
    task = asyncio.create_task(run_notifier(engine, settings, queue, stop, lease_retry=0.1))
    try:
        await queue.put(GroupChange("prod", "while-standby", GroupStatus.ERR, int(time.time() * 1000)))
        await settle(queue.empty, what="change consumed")
        await holder.release()  # the leader goes away: the standby takes over

        async def taken_over() -> bool:
            if queue.empty():
                await queue.put(GroupChange("prod", "after", GroupStatus.ERR, int(time.time() * 1000)))
            return await outbox_rows(engine) > 0

        await settle(taken_over, what="the standby, now leader, records")
    finally:
        stop.set()
        await task
        await holder.release()
    async with engine.connect() as conn:
        payloads = [r[0] for r in await conn.execute(select(outbox_table.c.payload).order_by(outbox_table.c.id))]
    assert {p["group"] for p in payloads if "group" in p} == {"after"}
    assert [set(p["groups"]) for p in payloads if "groups" in p] == [{"after"}]
