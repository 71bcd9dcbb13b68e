"""A Postgres outage loses no incident: the notifier goes on judging the clusters it led and
records what it held, late and saying so, once Postgres is back; the availability topics say
"degraded" meanwhile (issue 50).

Real parts: a private embedded PostgreSQL that the test stops and starts again (as
tests/test_persister_outage.py does: the server goes away, not a path to it), the notifier
loop itself (run_notifier) and the verdict feed it reads, Mosquitto.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import psycopg2
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.core.config import NotifySettings, async_database_url
from lagd.core.model import GroupStatus
from lagd.embedded.services import Postgres
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from lagd.notify.mqtt import AvailabilityStatus, announce_availability
from lagd.notify.notifier import LATE, _Unrecorded, run_notifier
from tests.clocks import ManualClock
from tests.test_notify_mqtt_payloads import Raw, validator
from tests.test_persister_outage import private_postgres

__all__ = ["private_postgres"]
Settle = Callable[..., Awaitable[Any]]


def events(url: str) -> list[tuple[str, str, str]]:
    """(event, event id, summary) of every incident event in the outbox, in order."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT payload->>'event', event_id, payload->>'summary' FROM outbox WHERE NOT retain ORDER BY id"
            )
            return [(str(a), str(b), str(c)) for a, b, c in cur.fetchall()]
    finally:
        conn.close()


def leads(url: str) -> bool:
    """Has the notifier taken prod over: its catch-up recorded (the group's retained status)?"""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM outbox WHERE retain")
            return bool(cur.fetchone()[0])
    finally:
        conn.close()


async def test_an_incident_opened_and_resolved_while_postgres_is_away_is_recorded_late(
    private_postgres: Postgres, settle: Settle
) -> None:
    pg = private_postgres
    engine = create_async_engine(async_database_url(pg.url))
    settings = NotifySettings(severity="ERR", hold_time=1.0, update_interval=0.5, correlation_window=60.0)
    feed, stop = VerdictFeed(), asyncio.Event()
    clock = ManualClock(int(time.time() * 1000))
    feed.put_nowait(GroupChange("prod", "g", GroupStatus.OK, clock()))
    feed.mark_complete()
    task = asyncio.create_task(run_notifier(engine, settings, feed, stop, lease_retry=0.1, clock=clock))
    try:
        await settle(lambda: feed.empty() and leads(pg.url), what="the notifier leading prod")
        await asyncio.to_thread(pg.stop_server)
        # the group goes ERR, holds it past the hold time, and is OK again, all inside the outage:
        # the feed keeps only its newest status, so each change must be taken as it comes
        clock.at += 1_000
        feed.put_nowait(GroupChange("prod", "g", GroupStatus.ERR, clock()))
        await settle(feed.empty, what="the ERR taken")
        clock.at += 5_000
        feed.put_nowait(GroupChange("prod", "g", GroupStatus.OK, clock()))
        await settle(feed.empty, what="the OK taken")
        clock.at += 2_000  # past the hold time: a tick resolves the incident (during the outage or after)
        await asyncio.to_thread(pg.start_server)
        got = await settle(lambda: len(events(pg.url)) >= 2 and events(pg.url), timeout=30, what="the events recorded")
    finally:
        stop.set()
        await task
        await engine.dispose()
    assert [e for e, _, _ in got] == ["opened", "resolved"], got
    assert got[0][2].startswith(f"{LATE}: "), got
    incident = got[0][1].rsplit(":", 1)[0]
    assert [i for _, i, _ in got] == [f"{incident}:1", f"{incident}:2"]


def test_held_updates_of_an_incident_replace_each_other_so_an_outage_holds_bounded_memory() -> None:
    """While Postgres is away, each `updated` replaces the one held before it for its incident
    (it carries the whole incident), except where a record that seemed to fail may have stored it."""
    incidents = IncidentEngine(Rules(severity="WARN", correlation_window=60_000, hold_time=60_000, update_interval=0))
    pend = _Unrecorded()
    made: list[IncidentEvent] = []
    for i in range(200):
        made += incidents.apply(GroupChange("prod", f"g{i}", GroupStatus.WARN if i % 2 else GroupStatus.ERR, 1000 + i))
    pend.hold(made[:1], kept=0)
    for ev in made[1:]:
        pend.hold([ev], kept=0)
    assert [e.event for e in pend.events] == ["opened", "updated"]
    assert pend.events[-1].event_id == made[-1].event_id and len(made) == 200
    assert all(e.summary.startswith(LATE) for e in pend.events)

    kept = _Unrecorded(events=list(made[:2]))  # a record of these seemed to fail: they stay as they are
    kept.hold(made[2:3], kept=2)
    assert [e.event_id for e in kept.events] == [e.event_id for e in made[:3]]


async def test_availability_says_degraded_while_postgres_is_away_not_offline(
    private_postgres: Postgres, mqtt_broker: tuple[str, int], settle: Settle
) -> None:
    """lagd still serves verdicts while Postgres is away: its availability topics say
    "degraded" then (retained), "online" once Postgres is back; never "offline" (issue 50)."""
    pg = private_postgres
    engine = create_async_engine(async_database_url(pg.url))
    prefix = f"a-{uuid.uuid4().hex[:8]}"
    settings = replace(NotifySettings(), mqtt_url=f"mqtt://{mqtt_broker[0]}:{mqtt_broker[1]}", topic_prefix=prefix)
    stop, status = asyncio.Event(), AvailabilityStatus()
    async with Raw(*mqtt_broker, f"{prefix}/+/status") as seen:

        def said(cluster: str) -> list[str]:
            return [b.decode() for t, b, _ in seen.messages if t == f"{prefix}/{cluster}/status"]

        task = asyncio.create_task(announce_availability(engine, settings, ["prod"], stop, status, lease_retry=0.1))
        try:
            await settle(lambda: said("prod")[-1:] == ["online"], what="online")
            await asyncio.to_thread(pg.stop_server)
            await settle(lambda: said("prod")[-1:] == ["degraded"], what="degraded while Postgres is away")
            await asyncio.to_thread(pg.start_server)
            await settle(lambda: said("prod")[-1:] == ["online"], timeout=30, what="online again")
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await engine.dispose()
    assert said("prod") == ["online", "degraded", "online", "offline"]
    schema = validator("availability")
    for word in said("prod"):
        schema.validate(word)
