"""Verdicts shared through Postgres (lagd.notify.shared_verdicts), against the real Postgres:
workers publish their groups' changes, one follower (the notifier's feed) sees them all."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import NotifySettings
from lagd.core.model import GroupStatus, PartitionStatus
from lagd.db.schema import group_verdicts
from lagd.db.schema import outbox as outbox_table
from lagd.embedded.services import free_low_port
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.notify.notifier import VerdictSource, run_notifier
from lagd.notify.shared_verdicts import (
    SharedFeed,
    VerdictPublisher,
    decode_change,
    encode_body,
    flush_verdicts,
    remove_gone,
)
from lagd.state.store import create_engine
from tests.netcut import Cuttable

Settle = Callable[..., Any]
HOUR_MS = 3600 * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


def change(group: str, status: GroupStatus, at: int, *, cluster: str = "prod", host: str = "10.0.0.1") -> GroupChange:
    """A group's change as the verdict watch makes it: its non-OK partitions, topics and hosts."""
    bad: tuple[tuple[str, int, PartitionStatus, str], ...] = ()
    if status == GroupStatus.WARN:
        bad = (("orders", 0, PartitionStatus.WARN, host), ("orders", 3, PartitionStatus.WARN, ""))
    elif status == GroupStatus.ERR:
        bad = (("payments", 1, PartitionStatus.STOP, host),)
    return GroupChange(
        cluster,
        group,
        status,
        at,
        partitions=bad,
        topics=tuple(sorted({t for t, _, _, _ in bad})),
        hosts=tuple(sorted({h for _, _, _, h in bad if h})),
    )


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(database_url)
    yield eng
    await eng.dispose()


@contextlib.asynccontextmanager
async def worker(engine: AsyncEngine, name: str) -> AsyncIterator[tuple[VerdictFeed, VerdictPublisher]]:
    """A worker's side: the feed its verdict watch fills, and the publisher draining it."""
    local = VerdictFeed()
    publisher = VerdictPublisher(engine, local, name)
    stop = asyncio.Event()
    task = asyncio.create_task(publisher.run(stop))
    try:
        yield local, publisher
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def following(engine: AsyncEngine, feed: SharedFeed, poll_s: float = 0.05) -> AsyncIterator[SharedFeed]:
    stop = asyncio.Event()
    task = asyncio.create_task(feed.follow(engine, stop, poll_s=poll_s))
    try:
        yield feed
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


class Seen:
    """Everything a follower delivered, drained as the test looks."""

    def __init__(self, feed: SharedFeed) -> None:
        self.feed = feed
        self.changes: list[GroupChange] = []

    def pull(self) -> list[GroupChange]:
        while not self.feed.empty():
            self.changes.append(self.feed.get_nowait())
        return self.changes

    def clear(self) -> None:
        self.pull()
        self.changes.clear()

    def has(self, group: str, status: GroupStatus | None = None) -> bool:
        return any(c.group == group and (status is None or c.status == status) for c in self.pull())


async def stored(engine: AsyncEngine) -> dict[str, tuple[str, str, int]]:
    """group -> (status, worker, version) as the table holds them."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    group_verdicts.c.group_name,
                    group_verdicts.c.status,
                    group_verdicts.c.worker,
                    group_verdicts.c.version,
                )
            )
        ).all()
    return {g: (s, w, v) for g, s, w, v in rows}


def test_a_change_survives_the_row_format() -> None:
    for ch in (
        change("g", GroupStatus.WARN, 1),
        change("g", GroupStatus.OK, 2),
        GroupChange("prod", "cluster:prod", GroupStatus.ERR, 3, kind="cluster"),
        GroupChange("prod", "mirror:m/orders", GroupStatus.WARN, 4, topics=("orders",), kind="mirror"),
        GroupChange(
            "prod",
            "broker:prod/2",
            GroupStatus.ERR,
            5,
            kind="broker",
            reason="broker 2 of prod not taking writes",
            led=(("orders", 0), ("orders", 3)),  # what it led: groups bad on them join its incident
        ),
        # a group's retention words and its predicted clear time (lagd.evaluate.clearing) cross workers too
        GroupChange("prod", "g", GroupStatus.ERR, 6, reason="orders/0 records lost: 5", clear_at=1_700_000_000_000),
    ):
        body = encode_body(ch)
        back = decode_change(ch.cluster, ch.group, str(ch.status), ch.at, body)
        assert back == ch
        # plain strs, as the watch makes them (PartitionInfo), each a known status
        assert all(type(p[2]) is str and p[2] in set(PartitionStatus) for p in back.partitions)
    with pytest.raises(ValueError):
        decode_change("prod", "g", "OK", 1, {"kind": "planet"})


def test_both_feeds_are_verdict_sources() -> None:
    sources: list[VerdictSource] = [VerdictFeed(), SharedFeed()]  # mypy checks the protocol
    assert all(s.empty() and s.qsize() == 0 for s in sources)


async def test_two_workers_reach_one_follower(engine: AsyncEngine, settle: Settle) -> None:
    t = now_ms()
    from_a = [change("a1", GroupStatus.WARN, t), change("a2", GroupStatus.OK, t + 1)]
    from_b = [change("b1", GroupStatus.ERR, t + 2, host="10.0.0.9"), change("b2", GroupStatus.OK, t + 3)]
    feed = SharedFeed(clusters=["prod"])
    seen = Seen(feed)
    assert feed.snapshot("prod") is None  # nothing read yet: no picture, not an empty one
    async with (
        worker(engine, "host-a:8000") as (local_a, _),
        worker(engine, "host-b:8000") as (local_b, _),
        following(engine, feed),
    ):
        for ch in from_a:
            local_a.put_nowait(ch)
        for ch in from_b:
            local_b.put_nowait(ch)
        await settle(lambda: len(feed.snapshot("prod") or []) == 4, what="both workers' groups followed")
        assert feed.snapshot("prod") == sorted(from_a + from_b, key=lambda c: c.at)  # equal, partitions and all
        assert sorted(seen.pull(), key=lambda c: c.at) == from_a + from_b
        rows = await stored(engine)
        assert {g: w for g, (_, w, _) in rows.items()} == {
            "a1": "host-a:8000",
            "a2": "host-a:8000",
            "b1": "host-b:8000",
            "b2": "host-b:8000",
        }

        # a group deleted on a's side: stored NOTFOUND, delivered, gone from the snapshot
        local_a.put_nowait(GroupChange("prod", "a2", GroupStatus.NOTFOUND, t + 10))
        await settle(lambda: seen.has("a2", GroupStatus.NOTFOUND), what="the NOTFOUND followed")
        assert [c.group for c in feed.snapshot("prod") or []] == ["a1", "b1", "b2"]
        assert (await stored(engine))["a2"][0] == "NOTFOUND"
        assert feed.snapshot("staging") == []


async def test_an_unchanged_status_republished_bumps_nothing(engine: AsyncEngine, settle: Settle) -> None:
    t = now_ms()
    feed = SharedFeed()
    seen = Seen(feed)
    async with worker(engine, "w1") as (local, _), following(engine, feed):
        local.put_nowait(change("g1", GroupStatus.WARN, t))
        local.put_nowait(change("g2", GroupStatus.ERR, t))
        await settle(lambda: seen.has("g1") and seen.has("g2"), what="the first worker's changes")
    before = await stored(engine)
    seen.clear()

    # w3 took the groups over and judged them as w1 did (later, so with a later time)
    takeover = VerdictFeed()
    publisher = VerdictPublisher(engine, takeover, "w3")
    takeover.put_nowait(change("g1", GroupStatus.WARN, t + 5_000))
    takeover.put_nowait(change("g2", GroupStatus.ERR, t + 5_000))
    async with following(engine, feed):
        await publisher.flush()
        assert (publisher.written, publisher.unchanged) == (0, 2)
        assert await stored(engine) == before  # same versions, same worker, same time
        # a later change of w3 reaches the follower, and nothing before it did
        takeover.put_nowait(change("sentinel", GroupStatus.OK, t + 6_000))
        await publisher.flush()
        await settle(lambda: seen.has("sentinel"), what="the sentinel followed")
        assert [c.group for c in seen.pull()] == ["sentinel"]

        # a status that did change is published, by w3 now
        takeover.put_nowait(change("g2", GroupStatus.OK, t + 7_000))
        await publisher.flush()
        await settle(lambda: seen.has("g2", GroupStatus.OK), what="the real change followed")
    after = await stored(engine)
    assert after["g2"][:2] == ("OK", "w3") and after["g2"][2] > before["g2"][2]
    assert after["g1"] == before["g1"]


async def incident_payloads(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(outbox_table.c.payload).where(~outbox_table.c.retain).order_by(outbox_table.c.id)
        )
        return [r[0] for r in result]


async def retained_topics(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(outbox_table.c.topic).where(outbox_table.c.retain).order_by(outbox_table.c.id)
        )
        return [r[0] for r in result]


async def test_one_incident_for_groups_of_two_workers_and_none_again_after_a_failover(
    engine: AsyncEngine, settle: Settle
) -> None:
    settings = replace(NotifySettings(), correlation_window=60.0, hold_time=600.0, update_interval=0.2)
    feed = SharedFeed(clusters=["prod"])
    stop = asyncio.Event()
    t = now_ms()
    async with following(engine, feed):
        notifier = asyncio.create_task(run_notifier(engine, settings, feed, stop, lease_retry=0.1))
        try:
            async with worker(engine, "host-a:8000") as (local_a, _), worker(engine, "host-b:8000") as (local_b, _):
                local_a.put_nowait(change("orders-app", GroupStatus.WARN, t))
                local_b.put_nowait(change("billing-app", GroupStatus.ERR, t + 1_000, host="10.0.0.9"))

                async def both_in_one() -> bool:
                    return any(
                        set(p["groups"]) == {"orders-app", "billing-app"} for p in await incident_payloads(engine)
                    )

                await settle(both_in_one, what="one incident holding both workers' groups")
            events = await incident_payloads(engine)
            assert len({p["id"] for p in events}) == 1
            assert [p["event"] for p in events].count("opened") == 1
            topics = await retained_topics(engine)

            # both workers died; a third took their groups over and judged them the same
            async with worker(engine, "host-c:8000") as (local_c, publisher_c):
                local_c.put_nowait(change("orders-app", GroupStatus.WARN, t + 30_000))
                local_c.put_nowait(change("billing-app", GroupStatus.ERR, t + 30_000, host="10.0.0.9"))
                local_c.put_nowait(change("sentinel-app", GroupStatus.OK, t + 31_000))

                async def sentinel_recorded() -> bool:
                    return any(tp.endswith("/groups/sentinel-app/status") for tp in await retained_topics(engine))

                await settle(sentinel_recorded, what="the notifier recording the third worker's sentinel")
                assert publisher_c.unchanged == 2
            assert await incident_payloads(engine) == events  # nobody re-alerted
            after = await retained_topics(engine)
            assert after[: len(topics)] == topics and [tp.rsplit("/", 2)[-2] for tp in after[len(topics) :]] == [
                "sentinel-app"
            ]
        finally:
            stop.set()
            await asyncio.wait_for(notifier, 15)


async def test_a_lower_version_committed_late_is_still_delivered(
    engine: AsyncEngine, database_url: str, settle: Settle
) -> None:
    feed = SharedFeed(lookback_s=2.0, full_every_s=3600.0)  # no full read to save it: the lookback must
    naive = SharedFeed(lookback_s=0.0, full_every_s=3600.0)  # reads only above the highest version seen
    seen, naive_seen = Seen(feed), Seen(naive)
    t = now_ms()
    loop = asyncio.get_running_loop()
    async with worker(engine, "w1") as (local, _), following(engine, feed), following(engine, naive):
        local.put_nowait(change("warm-up", GroupStatus.OK, t))
        await settle(lambda: seen.has("warm-up") and naive_seen.has("warm-up"), what="the warm-up row")
        warm = (await stored(engine))["warm-up"][2]
        # past the first lookback_s after start, when a poll still reads every row
        await settle(lambda: feed.floor(loop.time()) >= warm, what="the lookback in effect")

        conn = await asyncpg.connect(database_url)
        try:
            tx = conn.transaction()
            await tx.start()
            body = '{"kind": "group", "partitions": [], "topics": [], "hosts": []}'
            late = await conn.fetchval(
                "INSERT INTO group_verdicts (cluster, group_name, status, at, body, worker, version) "
                "VALUES ('prod', 'late', 'WARN', $1, $2::jsonb, 'w2', nextval('group_verdicts_version')) "
                "RETURNING version",
                t + 1,
                body,
            )
            local.put_nowait(change("early", GroupStatus.ERR, t + 2))
            await settle(lambda: seen.has("early") and naive_seen.has("early"), what="the higher version read first")
            assert (await stored(engine))["early"][2] > late
            reads = naive.reads
            await tx.commit()
        finally:
            await conn.close()
        await settle(lambda: seen.has("late", GroupStatus.WARN), what="the late commit delivered")
        assert feed.floor(loop.time()) >= warm  # found by a read from a floor, not by reading everything
        # the naive follower, polling since, never saw it: that is what the lookback is for
        await settle(lambda: naive.reads >= reads + 3, what="the naive follower polling after the commit")
        assert not naive_seen.has("late")
    # the full read (every 60 s by default) is the safety net for writers slower than the lookback
    assert await naive.poll(engine, full=True) == 1
    assert naive_seen.has("late", GroupStatus.WARN)


def proxied_url(database_url: str, port: int) -> str:
    url = urlsplit(database_url)
    userinfo = url.netloc.rpartition("@")[0]
    return urlunsplit(url._replace(netloc=(f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{port}"))


async def test_postgres_away_keeps_the_newest_changes_and_publishes_them_once_back(
    engine: AsyncEngine, database_url: str, settle: Settle
) -> None:
    url = urlsplit(database_url)
    proxy = Cuttable(url.hostname or "127.0.0.1", url.port or 5432)
    via = create_engine(proxied_url(database_url, await proxy.start()))  # the worker's view of Postgres
    feed = SharedFeed()
    seen = Seen(feed)
    t = now_ms()
    try:
        async with worker(via, "w1") as (local, publisher), following(engine, feed):
            local.put_nowait(change("g1", GroupStatus.OK, t))
            await settle(lambda: seen.has("g1", GroupStatus.OK), what="published while Postgres is there")
            proxy.cut()
            local.put_nowait(change("g1", GroupStatus.WARN, t + 1))
            local.put_nowait(change("g2", GroupStatus.WARN, t + 1))
            await settle(lambda: publisher.failed_writes >= 1, what="the publisher failing")
            local.put_nowait(change("g1", GroupStatus.ERR, t + 2))  # replaces the WARN not written
            await settle(lambda: publisher.failed_writes >= 2, what="a retry failing too")
            assert publisher.held == 2 and publisher.last_error
            assert not seen.has("g2")
            proxy.restore()
            await settle(
                lambda: seen.has("g1", GroupStatus.ERR) and seen.has("g2", GroupStatus.WARN),
                what="the held changes published once Postgres is back",
            )
            assert publisher.held == 0 and publisher.last_error is None
            assert publisher.written == 3  # g1 OK, then g1 ERR and g2 WARN: the replaced WARN never written
            assert not seen.has("g1", GroupStatus.WARN)
    finally:
        await via.dispose()
        await proxy.close()
    assert {g: s for g, (s, _, _) in (await stored(engine)).items()} == {"g1": "ERR", "g2": "WARN"}


async def test_flush_before_letting_groups_go(engine: AsyncEngine, database_url: str) -> None:
    closed = create_engine(proxied_url(database_url, free_low_port()), connect_args={"timeout": 1.0})
    local = VerdictFeed()
    publisher = VerdictPublisher(closed, local, "w1")
    t = now_ms()
    local.put_nowait(change("g1", GroupStatus.WARN, t))
    local.put_nowait(change("g2", GroupStatus.OK, t))
    try:
        assert await flush_verdicts(publisher, timeout_s=5.0) is False  # nobody listens there
        assert publisher.held == 2
    finally:
        await closed.dispose()
    publisher.engine = engine  # Postgres reachable again
    local.put_nowait(change("g1", GroupStatus.ERR, t + 1))
    assert await flush_verdicts(publisher) is True
    assert publisher.held == 0
    assert {g: s for g, (s, _, _) in (await stored(engine)).items()} == {"g1": "ERR", "g2": "OK"}


async def test_old_notfound_rows_are_removed_and_forgotten(engine: AsyncEngine, settle: Settle) -> None:
    t = now_ms()
    publisher = VerdictPublisher(engine, VerdictFeed(), "w1")
    for ch in (
        GroupChange("prod", "deleted-long-ago", GroupStatus.NOTFOUND, t - 7 * HOUR_MS),
        GroupChange("prod", "deleted-just-now", GroupStatus.NOTFOUND, t - HOUR_MS),
        change("alive", GroupStatus.WARN, t - 7 * HOUR_MS),
        change("removed-by-hand", GroupStatus.ERR, t),
    ):
        publisher.local.put_nowait(ch)
    await publisher.flush()
    feed = SharedFeed(full_every_s=0.0)  # every poll a full read
    seen = Seen(feed)
    await feed.poll(engine)
    assert feed.groups_tracked == 4
    assert [c.group for c in feed.snapshot("prod") or []] == ["alive", "removed-by-hand"]
    seen.clear()

    async with following(engine, feed):  # its first round removes NOTFOUND rows older than 6 h
        await settle(lambda: feed.groups_tracked == 3, what="the old NOTFOUND row removed and forgotten")
    assert set(await stored(engine)) == {"deleted-just-now", "alive", "removed-by-hand"}
    assert seen.pull() == []  # a NOTFOUND row leaving changes nothing

    async with engine.begin() as conn:
        await conn.execute(group_verdicts.delete().where(group_verdicts.c.group_name == "removed-by-hand"))
    await feed.poll(engine)
    assert [(c.group, c.status) for c in seen.pull()] == [("removed-by-hand", GroupStatus.NOTFOUND)]
    assert [c.group for c in feed.snapshot("prod") or []] == ["alive"]
    seen.clear()
    assert await remove_gone(engine, t) == 1  # what the hourly round does, with a shorter keep
    await feed.poll(engine)
    assert feed.groups_tracked == 1 and seen.pull() == []


async def test_a_group_postgres_refuses_holds_up_no_other(engine: AsyncEngine) -> None:
    local = VerdictFeed()
    publisher = VerdictPublisher(engine, local, "w1")
    t = now_ms()
    for group in ("before", "nul\x00inside", "after"):  # Kafka allows the NUL, Postgres' text does not
        local.put_nowait(change(group, GroupStatus.WARN, t))
    await publisher.flush()
    assert (publisher.refused, publisher.written, publisher.unchanged, publisher.held) == (1, 2, 0, 0)
    assert set(await stored(engine)) == {"before", "after"}
