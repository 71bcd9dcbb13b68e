"""Mirror verdicts from the real Postgres table into the incident feed (the daemon's mirror watcher)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from sqlalchemy import delete, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd.core.config import Settings, async_database_url, parse
from lagd.core.model import GroupStatus
from lagd.db.schema import mirror_status
from lagd.evaluate.mirror_flow import FlowVerdict
from lagd.notify import mirror_verdicts
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange

T0 = 1_700_000_000_000


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(async_database_url(database_url))
    yield eng
    await eng.dispose()


def settings() -> Settings:
    return parse(
        {
            "clusters": {"src": {"bootstrap-servers": ["h:1"]}, "dst": {"bootstrap-servers": ["h:2"]}},
            "mirrors": {"dr": {"source": "src", "target": "dst", "rename": "prefix", "prefix": "src."}},
        },
        env={},
    )


def row(topic: str, verdict: str, mirror: str = "dr") -> dict[str, Any]:
    return {
        "mirror": mirror,
        "topic": topic,
        "target_topic": f"src.{topic}",
        "verdict": verdict,
        "completeness": None,
        "delay_seconds": None,
        "source_rate": None,
        "target_rate": None,
        "evaluated_at": T0,
        "details": {},
    }


def drain(feed: VerdictFeed) -> list[GroupChange]:
    out = []
    while not feed.empty():
        out.append(feed.get_nowait())
    return sorted(out, key=lambda c: c.group)


async def test_changed_mirror_verdicts_reach_the_feed_once(engine: AsyncEngine) -> None:
    mirrors = settings().mirrors
    verdicts = {"a": "OK", "b": "LAGGING", "c": "STALLED", "d": "INCOMPLETE", "e": "MISSING"}
    async with engine.begin() as conn:
        await conn.execute(insert(mirror_status), [row(t, v) for t, v in verdicts.items()])
        await conn.execute(insert(mirror_status), [row("x", "STALLED", mirror="unconfigured")])
    feed = VerdictFeed(producers=("groups", "mirrors"))
    last: dict[tuple[str, str], str] = {}

    assert await mirror_verdicts.read_mirror_verdicts(engine, mirrors, last, feed, T0 + 1) == 5
    got = drain(feed)
    assert [(c.cluster, c.group, c.status, c.at, c.topics, c.kind) for c in got] == [
        ("dst", "mirror:dr/a", GroupStatus.OK, T0 + 1, ("src.a",), "mirror"),
        ("dst", "mirror:dr/b", GroupStatus.WARN, T0 + 1, ("src.b",), "mirror"),
        ("dst", "mirror:dr/c", GroupStatus.ERR, T0 + 1, ("src.c",), "mirror"),
        ("dst", "mirror:dr/d", GroupStatus.ERR, T0 + 1, ("src.d",), "mirror"),
        ("dst", "mirror:dr/e", GroupStatus.ERR, T0 + 1, ("src.e",), "mirror"),
    ]
    assert feed.snapshot("dst") is None  # the group evaluator has not done its pass yet
    feed.mark_complete("groups")
    snap = feed.snapshot("dst")
    assert snap is not None and [c.group for c in snap] == [f"mirror:dr/{t}" for t in "abcde"]

    # unchanged rows (even re-evaluated ones): nothing
    async with engine.begin() as conn:
        await conn.execute(update(mirror_status).values(evaluated_at=T0 + 120_000))
    assert await mirror_verdicts.read_mirror_verdicts(engine, mirrors, last, feed, T0 + 2) == 0
    assert feed.empty()

    # a verdict changes and a topic's row disappears: exactly those two changes
    async with engine.begin() as conn:
        await conn.execute(update(mirror_status).where(mirror_status.c.topic == "c").values(verdict="OK"))
        await conn.execute(delete(mirror_status).where(mirror_status.c.topic == "e"))
    assert await mirror_verdicts.read_mirror_verdicts(engine, mirrors, last, feed, T0 + 3) == 2
    assert [(c.group, c.status) for c in drain(feed)] == [
        ("mirror:dr/c", GroupStatus.OK),
        ("mirror:dr/e", GroupStatus.NOTFOUND),
    ]
    snap = feed.snapshot("dst")
    assert snap is not None and "mirror:dr/e" not in {c.group for c in snap}


def flow(status: str) -> FlowVerdict:
    return FlowVerdict("dr", status, "why", T0, T0, 1.0, 1.0, None, ())  # type: ignore[arg-type]


async def test_a_mirror_maker_flows_verdict_changes_reach_the_feed_as_the_mirror(engine: AsyncEngine) -> None:
    """An MM2 flow (lagd.ingest.mirror_flows) is the member mirror:<name>: STALLED is ERR, LAGGING
    WARN, NO_HEARTBEATS nothing to alert on; a flow no longer reported resolves as NOTFOUND."""
    mirrors = settings().mirrors
    feed = VerdictFeed(producers=("groups", "mirrors"))
    last: dict[tuple[str, str], str] = {}
    seen = []
    for at, status in enumerate(["NO_HEARTBEATS", "OK", "OK", "LAGGING", "STALLED", "OK"], start=1):
        offered = await mirror_verdicts.read_mirror_verdicts(engine, mirrors, last, feed, T0 + at, {"dr": flow(status)})
        seen += [(offered, c.cluster, c.group, c.status, c.topics, c.kind) for c in drain(feed)]
    assert seen == [
        (1, "dst", "mirror:dr", GroupStatus.OK, (), "mirror"),
        (1, "dst", "mirror:dr", GroupStatus.OK, (), "mirror"),
        (1, "dst", "mirror:dr", GroupStatus.WARN, (), "mirror"),
        (1, "dst", "mirror:dr", GroupStatus.ERR, (), "mirror"),
        (1, "dst", "mirror:dr", GroupStatus.OK, (), "mirror"),
    ]
    assert await mirror_verdicts.read_mirror_verdicts(engine, mirrors, last, feed, T0 + 9, {}) == 1
    assert [(c.group, c.status) for c in drain(feed)] == [("mirror:dr", GroupStatus.NOTFOUND)]


async def test_a_database_error_is_logged_and_retried() -> None:
    broken = create_async_engine(async_database_url("postgresql://lagd@127.0.0.1:1/lagd"))  # refused
    feed = VerdictFeed(producers=("mirrors",))
    with structlog.testing.capture_logs() as logged:
        task = asyncio.create_task(mirror_verdicts.watch_mirrors(broken, settings().mirrors, feed, every_s=0.01))
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not any(e["event"] == "reading mirror verdicts failed; retrying" for e in logged):
                assert loop.time() < deadline, "no failure was logged"
                await asyncio.sleep(0.01)
            for _ in range(20):  # and it goes on retrying (about 20 rounds of 10 ms)
                await asyncio.sleep(0.01)
            assert not task.done()  # failures do not end the watcher
        finally:
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=10)
            assert done, "the watcher did not stop when cancelled"
            await broken.dispose()
    assert feed.empty() and feed.snapshot("dst") is None
    warned = [e for e in logged if e["event"] == "reading mirror verdicts failed; retrying"]
    assert warned and warned[0]["attempt"] == 1 and warned[0]["log_level"] == "warning"
    assert len(warned) < 5  # the first failure and every tenth, not one line per attempt
