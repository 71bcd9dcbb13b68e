"""Durable delivery against the real Postgres and Mosquitto: outbox, publisher, leadership."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiomqtt
import asyncpg
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd.core.config import NotifySettings, async_database_url
from lagd.core.model import GroupStatus, PartitionStatus
from lagd.db.schema import incident_members
from lagd.db.schema import outbox as outbox_table
from lagd.embedded import services as embedded
from lagd.notify import outbox
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules, StateRows
from lagd.notify.leader import Lease, leadership
from lagd.notify.mqtt import PublisherStatus, client_options, publish_outbox
from lagd.notify.notifier import run_notifier
from lagd.notify.outbox import Fence
from tests.clocks import ManualClock
from tests.netcut import Cuttable

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
            retained = [outbox.status_row(prefix, ch)]
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
        queue = VerdictFeed()
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
    queue = VerdictFeed()  # never marked complete: no snapshot, changes only
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


# --- leadership of delivery, catching up after takeovers, database outages -------------------


def now_ms() -> int:
    return int(time.time() * 1000)


async def incident_payloads(eng: AsyncEngine) -> list[dict[str, Any]]:
    """The recorded incident events (not the retained statuses), in outbox order."""
    async with eng.connect() as conn:
        result = await conn.execute(
            select(outbox_table.c.payload).where(~outbox_table.c.retain).order_by(outbox_table.c.id)
        )
        return [r[0] for r in result]


def test_the_default_client_id_is_made_unique_per_host_and_process() -> None:
    # two instances on the default id would make the broker drop one whenever the other connects
    assert client_options(NotifySettings())["identifier"] == f"lagd-{socket.gethostname()}-{os.getpid()}"
    assert client_options(replace(NotifySettings(), client_id="edge-7"))["identifier"] == "edge-7"


async def test_two_instances_on_one_outbox_deliver_each_event_exactly_once(
    engine: AsyncEngine, database_url: str, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    host, port = mqtt_broker
    prefix = f"lagd/t{unique}"
    settings = replace(
        settings_for(host, port, prefix, correlation_window=30.0, hold_time=0.5, update_interval=0.2),
        client_id=NotifySettings().client_id,  # both on the default, as two daemons from one config
    )
    second = create_async_engine(async_database_url(database_url))
    sub = await Subscriber(host, port, prefix).start()
    feeds: list[VerdictFeed] = []
    stops: list[asyncio.Event] = []
    statuses: list[PublisherStatus] = []
    tasks: list[list[asyncio.Task[None]]] = []
    for eng in (engine, second):  # each instance has its own connections, as separate processes
        feed, stop, status = VerdictFeed(), asyncio.Event(), PublisherStatus()
        feeds.append(feed)
        stops.append(stop)
        statuses.append(status)
        tasks.append(
            [
                asyncio.create_task(run_notifier(eng, settings, feed, stop, lease_retry=0.1)),
                asyncio.create_task(publish_outbox(eng, settings, stop, status, publish_timeout=1.0, lease_retry=0.1)),
            ]
        )

    def both(ch: GroupChange) -> None:  # both instances watch the same Kafka: same verdicts
        for feed in feeds:
            feed.put_nowait(ch)

    try:
        for i in range(20):
            both(GroupChange("prod", f"g{i}", GroupStatus.WARN, now_ms(), topics=("orders",)))
        for feed in feeds:
            feed.mark_complete()  # as the daemon does after its first pass over the groups
        await settle(lambda: len(sub.messages) >= 21, what="the incident and 20 statuses delivered")
        await settle(lambda: not any(f.qsize() for f in feeds), what="both notifiers consumed the changes")
        assert sum(s.leader for s in statuses) == 1
        assert sum(s.published_total > 0 for s in statuses) == 1
        assert sum(s.connected for s in statuses) == 1  # the standby stays off the broker

        # the first instance goes away; the other takes over recording and delivery
        stops[0].set()
        await asyncio.gather(*tasks[0])
        for i in range(20):  # the standby may drop these until it holds the lease: it catches up then
            feeds[1].put_nowait(GroupChange("prod", f"g{i}", GroupStatus.OK, now_ms()))

        def resolved() -> bool:
            return any(p["event"] == "resolved" for t, p, _ in sub.messages if "/incidents/" in t)

        await settle(resolved, what="the resolve, from the new leader")
        await settle(lambda: statuses[1].published_total > 0, what="the second publisher took over")
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*(t for pair in tasks for t in pair))
        await sub.close()
        await second.dispose()
    every = [p["event_id"] for _, p, _ in sub.messages]
    assert len(every) == len(set(every)), "a message was delivered twice"
    ids = sub.incident_event_ids()
    incident = ids[0].rsplit(":", 1)[0]
    assert ids == [f"{incident}:{n}" for n in range(1, len(ids) + 1)]
    assert sum(s.published_total for s in statuses) == len(sub.messages) == await outbox_rows(engine)
    assert await outbox_rows(engine, pending_only=True) == 0


async def test_the_verdict_feed_keeps_the_newest_status_per_group_and_drops_none() -> None:
    feed = VerdictFeed()
    for n in range(200_000):  # far more than the old 100 000-change queue held
        feed.put_nowait(GroupChange("prod", f"g{n % 10}", GroupStatus.WARN if n % 3 else GroupStatus.OK, T0 + n))
    feed.put_nowait(GroupChange("staging", "s", GroupStatus.ERR, T0))
    assert feed.qsize() == 11  # bounded by the number of groups
    assert feed.snapshot("prod") is None  # no complete pass reported yet
    feed.mark_complete()
    got = [feed.get_nowait() for _ in range(11)]
    assert feed.empty()
    newest = {f"g{i}": T0 + 199_990 + i for i in range(10)}
    assert {c.group: c.at for c in got if c.cluster == "prod"} == newest
    snap = feed.snapshot("prod")
    assert snap is not None and [(c.group, c.at) for c in snap] == sorted(newest.items(), key=lambda kv: kv[1])
    feed.put_nowait(GroupChange("prod", "g3", GroupStatus.NOTFOUND, T0 + 300_000))  # the group went away
    assert "g3" not in {c.group for c in feed.snapshot("prod") or []}

    async def later() -> None:
        await asyncio.sleep(0)
        feed.put_nowait(GroupChange("prod", "late", GroupStatus.ERR, T0))

    feed.get_nowait()
    waker = asyncio.create_task(later())
    assert (await asyncio.wait_for(feed.get(), 5)).group == "late"
    await waker


async def test_a_takeover_catches_up_on_verdict_changes_nobody_recorded(engine: AsyncEngine, settle: Settle) -> None:
    settings = replace(NotifySettings(), correlation_window=30.0, hold_time=0.5, update_interval=0.2)

    async def last_groups(want: dict[str, str]) -> bool:
        got = await incident_payloads(engine)
        return bool(got) and got[-1]["groups"] == want

    # a leader records an incident of g1 and g2, then stops
    first, stop1 = VerdictFeed(), asyncio.Event()
    task1 = asyncio.create_task(run_notifier(engine, settings, first, stop1, lease_retry=0.1))
    try:
        first.put_nowait(GroupChange("prod", "g1", GroupStatus.WARN, now_ms()))
        first.put_nowait(GroupChange("prod", "g2", GroupStatus.WARN, now_ms()))
        await settle(lambda: last_groups({"g1": "WARN", "g2": "WARN"}), what="the first leader's incident")
    finally:
        stop1.set()
        await task1

    # the next leader dies without recording anything while the verdicts move on; a standby
    # sees the changes but leaves them to the leader
    holder = Lease(engine, "prod")
    assert await holder.refresh()
    standby, stop2 = VerdictFeed(), asyncio.Event()
    task2 = asyncio.create_task(run_notifier(engine, settings, standby, stop2, lease_retry=0.1))
    try:
        standby.put_nowait(GroupChange("prod", "g1", GroupStatus.OK, now_ms()))
        standby.put_nowait(GroupChange("prod", "g3", GroupStatus.ERR, now_ms(), topics=("orders",)))
        standby.mark_complete()  # a full pass: g2 is gone
        await settle(standby.empty, what="the standby consumed the changes")
        assert await last_groups({"g1": "WARN", "g2": "WARN"})
        await holder.release()
        # it takes over by itself, with no further change, and brings the incident up to date
        # (g2 leaving changes no severity, so it rides along with the next event)
        await settle(lambda: last_groups({"g1": "OK", "g2": "WARN", "g3": "ERR"}), what="the takeover catching up")
        # so the incident can resolve: it no longer waits for changes that were lost
        standby.put_nowait(GroupChange("prod", "g3", GroupStatus.OK, now_ms()))
        await settle(lambda: last_groups({"g1": "OK", "g2": "NOTFOUND", "g3": "OK"}), what="the resolve")
    finally:
        stop2.set()
        await task2
        await holder.release()
    got = await incident_payloads(engine)
    assert got[-1]["event"] == "resolved" and got[-2]["severity"] == "ERR"
    assert [p["event_id"] for p in got] == [f"{got[0]['id']}:{n}" for n in range(1, len(got) + 1)]
    retained = await outbox.pending(engine, 100)
    assert [json.loads(r.payload)["status"] for r in retained if r.topic.endswith("/g2/status")][-1] == "NOTFOUND"


async def test_a_database_outage_neither_drops_nor_reuses_event_ids(
    engine: AsyncEngine, database_url: str, settle: Settle
) -> None:
    settings = replace(NotifySettings(), correlation_window=60.0, hold_time=60.0, update_interval=0.2)
    url = urlsplit(database_url)
    proxy = Cuttable(url.hostname or "127.0.0.1", url.port or 5432)
    port = await proxy.start()
    userinfo = url.netloc.rpartition("@")[0]
    proxied = urlunsplit(url._replace(netloc=(f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{port}"))
    via = create_async_engine(async_database_url(proxied))  # the notifier's view of the database
    feed, stop = VerdictFeed(), asyncio.Event()
    clock = ManualClock(now_ms())  # time moves when the test says, not while it waits
    task = asyncio.create_task(run_notifier(via, settings, feed, stop, lease_retry=0.1, clock=clock))

    async def groups_seen() -> list[set[str]]:
        return [set(p["groups"]) for p in await incident_payloads(engine)]

    try:
        feed.put_nowait(GroupChange("prod", "g1", GroupStatus.WARN, clock()))
        opened = await settle(lambda: incident_payloads(engine), what="the incident opened")
        clock.advance(300)  # past the update interval (0.2 s): g2's update goes out at once
        assert clock() > opened[0]["at"] + 200

        # g2's update is being recorded when the database goes away (the outbox lock holds
        # the insert until the cut), so the notifier keeps it in memory as unrecorded
        lock = await asyncpg.connect(database_url)
        try:
            tx = lock.transaction()
            await tx.start()
            await lock.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
            feed.put_nowait(GroupChange("prod", "g2", GroupStatus.WARN, clock()))

            async def blocked() -> bool:
                return bool(await lock.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"))

            await settle(blocked, what="the notifier recording g2")
            proxy.cut()  # the lease goes with its session, and the record fails
            await tx.rollback()
        finally:
            await lock.close()
        proxy.restore()  # back: the notifier regains the lease and records what it held

        async def has(groups: set[str]) -> bool:
            return groups in await groups_seen()

        await settle(lambda: has({"g1", "g2"}), what="the held update recorded after the outage")
        clock.advance(300)
        feed.put_nowait(GroupChange("prod", "g3", GroupStatus.WARN, clock()))
        # it used to reload the older stored state and reissue sequence number 2 for this
        # update, which the outbox then dropped as a duplicate
        await settle(lambda: has({"g1", "g2", "g3"}), timeout=10, what="the next update recorded too")
    finally:
        stop.set()
        await task
        await via.dispose()
        await proxy.close()
    got = await incident_payloads(engine)
    assert [set(p["groups"]) for p in got] == [{"g1"}, {"g1", "g2"}, {"g1", "g2", "g3"}]
    assert [p["event_id"] for p in got] == [f"{got[0]['id']}:{n}" for n in (1, 2, 3)]
    state = await outbox.load_engine_state(engine, "prod")
    assert state is not None and state["open"][0]["seq"] == 3


async def test_a_writer_continuing_a_stale_state_cannot_record_over_a_newer_one(engine: AsyncEngine) -> None:
    a = IncidentEngine(RULES)
    opened = a.apply(GroupChange("prod", "g1", GroupStatus.WARN, T0))
    # the state as the notifier stores it (a header and member rows) and as data (below) alike
    await outbox.record(engine, "prod", opened, a.save_rows("prod", {outbox.SAVED_BY: "t1"}), fence=Fence(False))
    stored = await outbox.load_engine_state(engine, "prod")
    fence = Fence.of(stored)
    assert fence == Fence(True, "t1")
    assert stored is not None
    b = IncidentEngine.load(RULES, {"prod": stored})  # two writers continue from the same state
    ea = a.apply(GroupChange("prod", "g2", GroupStatus.ERR, T0 + 60_000))
    eb = b.apply(GroupChange("prod", "g3", GroupStatus.ERR, T0 + 60_000))
    assert [e.event_id for e in ea] == [e.event_id for e in eb]  # same id, different events
    await outbox.record(engine, "prod", ea, a.save_rows("prod", {outbox.SAVED_BY: "t2"}), fence=fence)
    with pytest.raises(outbox.StateConflict):
        await outbox.record(engine, "prod", eb, {**b.dump_cluster("prod"), outbox.SAVED_BY: "t3"}, fence=fence)
    with pytest.raises(outbox.StateConflict):  # "no state yet" is stale too once one exists
        await outbox.record(engine, "prod", eb, {**b.dump_cluster("prod"), outbox.SAVED_BY: "t4"}, fence=Fence(False))
    assert await outbox.load_engine_state(engine, "prod") == {
        **a.dump_cluster("prod"),
        "members": "rows",
        outbox.SAVED_BY: "t2",
    }
    assert [set(p["groups"]) for p in await incident_payloads(engine)] == [{"g1"}, {"g1", "g2"}]


async def test_the_stored_state_reads_back_through_member_rows_written_as_they_change(engine: AsyncEngine) -> None:
    """The notifier stores each incident member as a row, written when it changes; what
    load_engine_state reads back is the engine's state through full saves, saves of a few
    changed members, an incident forgotten (its rows deleted), a failed save (the next writes
    every member again) and a state stored before member rows (members inline)."""
    rules = Rules(correlation_window=60_000, hold_time=60_000, update_interval=1_000)
    a = IncidentEngine(rules)
    token = iter(range(1_000))

    async def save(at: int) -> StateRows:
        stored = await outbox.load_engine_state(engine, "prod")
        rows = a.save_rows("prod", {outbox.SAVED_BY: f"t{next(token)}"})
        await outbox.record(engine, "prod", [], rows, fence=Fence.of(stored), clock=lambda: at)
        assert await outbox.load_engine_state(engine, "prod") == {
            **a.dump_cluster("prod"),
            "members": "rows",
            outbox.SAVED_BY: json.loads(rows.header)[outbox.SAVED_BY],
        }
        return rows

    async def member_rows() -> set[tuple[str, str]]:
        async with engine.connect() as conn:
            result = await conn.execute(select(incident_members.c.incident_id, incident_members.c.member))
            return {(r.incident_id, r.member) for r in result}

    at = T0
    for g in range(30):
        a.apply(GroupChange("prod", f"g{g}", GroupStatus.WARN, at, (("orders", g, PartitionStatus.WARN, ""),)))
    first = await save(at)
    assert first.full and len(first.members) == 30
    a.apply(GroupChange("prod", "g3", GroupStatus.ERR, at + 1_000))
    a.apply(GroupChange("prod", "g7", GroupStatus.OK, at + 1_000))
    some = await save(at + 1_000)
    assert not some.full and sorted(m for _, m, _ in some.members) == ["g3", "g7"]
    # taken over (a restart): the state as stored is loaded, and the next save writes what changed
    loaded = await outbox.load_engine_state(engine, "prod")
    assert loaded is not None
    a = IncidentEngine.load(rules, {"prod": loaded})
    a.apply(GroupChange("prod", "g4", GroupStatus.ERR, at + 1_500))
    assert sorted(m for _, m, _ in (await save(at + 1_500)).members) == ["g4"]
    (incident,) = a.open_incidents("prod")
    for g in range(30):  # all recover; the incident resolves after the hold time, then is forgotten
        a.apply(GroupChange("prod", f"g{g}", GroupStatus.OK, at + 2_000))
    await save(at + 2_000)
    assert a.tick(at + 70_000)[0].event == "resolved"
    await save(at + 70_000)
    assert len(await member_rows()) == 30  # a resolved incident can still reopen: kept
    a.tick(at + 200_000)
    gone = await save(at + 200_000)
    assert gone.gone == [incident] and await member_rows() == set()
    a.apply(GroupChange("prod", "g1", GroupStatus.WARN, at + 300_000))
    a.save_rows("prod", {outbox.SAVED_BY: "lost"})  # never stored
    a.save_failed("prod")
    a.apply(GroupChange("prod", "g2", GroupStatus.WARN, at + 301_000))
    again = await save(at + 301_000)
    assert again.full and {m for _, m, _ in again.members} == {"g1", "g2"}
    # a state stored with its members inline (before member rows) replaces the rows, and reads back
    await outbox.record(engine, "prod", [], {**a.dump_cluster("prod"), outbox.SAVED_BY: "inline"})
    assert await member_rows() == set()
    assert await outbox.load_engine_state(engine, "prod") == {**a.dump_cluster("prod"), outbox.SAVED_BY: "inline"}


async def test_recording_resolving_and_delivery_read_the_injected_clock(
    engine: AsyncEngine, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    """The notifier and the publisher take "now" from the one injected clock (lagd.runtime.clock), not
    the wall clock: outbox rows are created and delivered at its time, and an hour's hold time
    passes (the incident resolves) the moment the test moves it, without waiting for it."""
    host, port = mqtt_broker
    prefix = f"lagd/t{unique}"
    settings = settings_for(host, port, prefix, correlation_window=60.0, hold_time=3600.0, update_interval=30.0)
    clock = ManualClock(T0)  # years before the wall clock: nothing below can come from it
    feed, stop, status = VerdictFeed(), asyncio.Event(), PublisherStatus()
    tasks = [
        asyncio.create_task(run_notifier(engine, settings, feed, stop, lease_retry=0.1, clock=clock)),
        asyncio.create_task(
            publish_outbox(engine, settings, stop, status, publish_timeout=1.0, lease_retry=0.1, clock=clock)
        ),
    ]

    async def rows() -> list[tuple[str, int, int | None]]:
        """(event or status, created_at, delivered_at) of every outbox row, in order."""
        t = outbox_table
        async with engine.connect() as conn:
            result = await conn.execute(select(t.c.payload, t.c.created_at, t.c.delivered_at).order_by(t.c.id))
            return [(p.get("event") or p["status"], created, delivered) for p, created, delivered in result]

    async def delivered(n: int) -> bool:
        got = await rows()
        return len(got) == n and all(d is not None for _, _, d in got)

    try:
        feed.put_nowait(GroupChange("prod", "g1", GroupStatus.WARN, clock(), topics=("orders",)))
        await settle(lambda: delivered(2), what="the incident opened and g1's status, delivered")
        clock.advance(1_000)
        feed.put_nowait(GroupChange("prod", "g1", GroupStatus.OK, clock()))
        await settle(lambda: delivered(3), what="g1's OK status delivered")
        assert not [e for e, _, _ in await rows() if e == "resolved"]  # held: the hour has not passed
        clock.advance(3_600_000)  # the hold time, passed without waiting for it
        await settle(lambda: delivered(4), what="the resolve, at the next tick, delivered")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    later = T0 + 3_601_000
    assert await rows() == [
        ("opened", T0, T0),
        ("WARN", T0, T0),
        ("OK", T0 + 1_000, T0 + 1_000),
        ("resolved", later, later),
    ]
    resolved = (await incident_payloads(engine))[-1]
    assert (resolved["event"], resolved["at"], resolved["resolved_at"]) == ("resolved", later, T0 + 1_000)


async def test_a_takeover_reconciles_every_group_in_slices(
    engine: AsyncEngine, settle: Settle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking a cluster over replays every group's verdict into the incident engine: for
    thousands of groups that is work in slices, other tasks running between them."""
    from lagd.notify import notifier

    monkeypatch.setattr(notifier, "SLICE_S", 0.0)  # a slice per group
    events: list[str] = []
    message = outbox.status_row

    def noted(prefix: str, change: GroupChange) -> Any:
        events.append(change.group)
        return message(prefix, change)

    monkeypatch.setattr(outbox, "status_row", noted)
    cluster = f"big-{os.getpid()}-{time.monotonic_ns()}"
    feed, stop = VerdictFeed(), asyncio.Event()
    for i in range(40):
        feed.put_nowait(GroupChange(cluster, f"g{i:02d}", GroupStatus.OK, now_ms()))
    feed.mark_complete()
    ticking = True

    async def ticker() -> None:
        while ticking:
            events.append("-")
            await asyncio.sleep(0)

    other = asyncio.create_task(ticker())
    task = asyncio.create_task(run_notifier(engine, replace(NotifySettings(), update_interval=0.2), feed, stop))
    try:
        await settle(lambda: sum(e != "-" for e in events) >= 40, what="the reconcile over every group")
    finally:
        stop.set()
        await task
        ticking = False
        await other
    groups = [e for e in events if e != "-"]
    assert sorted(set(groups)) == [f"g{i:02d}" for i in range(40)]
    runs = "".join("g" if e != "-" else "-" for e in events).split("-")
    assert max(len(r) for r in runs) == 1  # never two groups without a turn for the loop between


async def record_counting(engine: AsyncEngine, *args: Any) -> dict[str, list[int]]:
    """`outbox.record(engine, *args)`, and the rows of each INSERT statement it ran, by table."""
    inserts: dict[str, list[int]] = {}

    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if statement.startswith("INSERT INTO "):
            inserts.setdefault(statement.split()[2], []).append(len(params) if executemany else 1)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        await outbox.record(engine, *args)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)
    return inserts


async def test_a_record_of_many_rows_stores_them_all_in_order_a_statement_at_a_time(engine: AsyncEngine) -> None:
    """A takeover's reconcile records a status row per group (10,000 at 1M group-partitions):
    the rows go ROWS_PER_STATEMENT per statement, so the loop runs between them, and are
    stored in the order given, with every incident member, in one transaction."""
    n = outbox.ROWS_PER_STATEMENT * 2 + 7
    incidents = IncidentEngine(RULES)
    events: list[IncidentEvent] = []
    retained = []
    for g in range(n):
        change = GroupChange("prod", f"g{g:05d}", GroupStatus.ERR, T0)
        events += incidents.apply(change)
        retained.append(outbox.status_row("lagd", change))
    inserts = await record_counting(
        engine, "prod", events, incidents.save_rows("prod", {outbox.SAVED_BY: "t1"}), retained
    )
    statements = inserts["outbox"]
    async with engine.connect() as conn:
        topics = (await conn.execute(select(outbox_table.c.topic).order_by(outbox_table.c.id))).scalars().all()
        members = (await conn.execute(select(func.count()).select_from(incident_members))).scalar_one()
    assert topics[len(events) :] == [r.topic for r in retained]  # status rows after the events, in order
    assert members == n  # one incident holding every group
    assert max(statements) == outbox.ROWS_PER_STATEMENT and sum(statements) == len(events) + n


async def test_rows_of_large_json_go_a_bounded_amount_of_text_per_statement(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status rows and incident members of groups of many partitions are KBs each: a statement
    carries at most TEXT_PER_STATEMENT characters of their JSON (at least one row), so the loop
    runs while Postgres takes each; every row is stored, in order."""
    incidents = IncidentEngine(RULES)
    events: list[IncidentEvent] = []
    retained = []
    for g in range(9):
        parts = tuple(("orders", p, PartitionStatus.STOP, "broker-1") for p in range(20 if g != 4 else 200))
        change = GroupChange("prod", f"g{g}", GroupStatus.ERR, T0, partitions=parts)
        events += incidents.apply(change)
        retained.append(outbox.status_row("lagd", change))
    sizes = [len(r.payload) for r in retained]
    assert sizes[4] > 4 * sizes[0]
    monkeypatch.setattr(outbox, "TEXT_PER_STATEMENT", 2 * sizes[0] + 10)  # two usual rows a statement
    inserts = await record_counting(engine, "prod", [], incidents.save_rows("prod", {outbox.SAVED_BY: "t1"}), retained)
    statements = inserts["outbox"]
    async with engine.connect() as conn:
        payloads = (await conn.execute(select(outbox_table.c.payload).order_by(outbox_table.c.id))).scalars().all()
        members = (await conn.execute(select(func.count()).select_from(incident_members))).scalar_one()
    assert [p["group"] for p in payloads] == [f"g{g}" for g in range(9)]
    assert [len(p["partitions"]) for p in payloads] == [20] * 4 + [200] + [20] * 4
    assert len(inserts["incident_members"]) > 1 and sum(inserts["incident_members"]) == 9
    assert members == 9
    # g0 g1 | g2 g3 | g4 (alone: larger than a statement's text) | g5 g6 | g7 g8
    assert statements == [2, 2, 1, 2, 2]
