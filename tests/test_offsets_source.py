"""offsets-source = "auto" (the default) against the real broker (Tansu): it streams the offsets
topic where that can be read and polls committed offsets where it cannot, and says which.

Tansu never writes `__consumer_offsets` itself: a topic name that does not exist stands in for a
cluster whose offsets topic lagd cannot read (real aiokafka groups committing, judged by admin
polling); a topic the simulator writes real-format commit records into is streamed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from lagd.core.config import parse
from lagd.core.model import Commit, GroupMembers, IngestCounters
from lagd.ingest.progress import ReaderProgress
from lagd.ingest.source import choose_source, read_offsets, unreadable_reason
from lagd.sim.driver import Driver
from lagd.sim.scenario import Scenario, standard
from tests.http_state import build_context, serve
from tests.test_ingest_kafka import Store, cluster, drive, fold, running

Settle = Callable[..., Awaitable[Any]]


def test_auto_is_the_default() -> None:
    settings = parse({"clusters": {"c": {"bootstrap-servers": ["k:9092"]}}}, env={})
    assert settings.clusters["c"].offsets_source == "auto"


async def test_auto_falls_back_to_admin_polling_where_the_offsets_topic_is_missing(
    kafka: str, unique: str, settle: Settle
) -> None:
    scenario = standard(unique, partitions=2)
    orders = scenario.topics[0].name
    scenario = Scenario(scenario.topics[:1], tuple(g for g in scenario.groups if set(g.topics) <= {orders}))
    driver = Driver(kafka, scenario, mode="admin")
    await driver.start()
    try:
        await drive(driver, 3)
    finally:
        await driver.close()
    expected = driver.last_commits
    assert expected

    settings = cluster(
        kafka, offsets_source="auto", offsets_topic=f"__consumer_offsets_missing_{unique}", groups_allow=unique
    )
    assert await unreadable_reason(settings) == f"topic {settings.offsets_topic} does not exist"
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    async with running(read_offsets(settings, {}, store, progress, counters, stop)):
        await settle(lambda: progress.caught_up, what="first admin polling round")
        snapshot = list(store.events)
    assert progress.source == "admin"
    assert counters.records_by_type.get("polled_offset", 0) >= len(expected)  # the dashboard's "Records ingested"
    assert fold(snapshot) == expected
    # Judged from real groups: their members came from DescribeGroups.
    assert {e.group for e in snapshot if isinstance(e, GroupMembers)} == {g for g, _, _ in expected}


async def test_auto_keeps_polling_when_the_missing_topic_appears_after_groups_were_polled(
    kafka: str, unique: str, settle: Settle
) -> None:
    """Polling looks for the missing offsets topic before each round. When it appears after
    polling has read groups (here Tansu, which keeps groups outside any topic: the stand-in
    topic is created once they are read), lagd keeps polling, and says why: polled commits
    carry the times they were seen as their order, which the topic's offsets cannot follow."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from structlog.testing import capture_logs

    scenario = standard(unique, partitions=1)
    scenario = Scenario(scenario.topics[:1], scenario.groups[:1])
    driver = Driver(kafka, scenario, mode="admin")
    await driver.start()
    try:
        await drive(driver, 2)
    finally:
        await driver.close()
    missing = f"__consumer_offsets_later_{unique}"
    settings = cluster(kafka, offsets_source="auto", offsets_topic=missing, groups_allow=unique)
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    with capture_logs() as logged:
        async with running(read_offsets(settings, {}, store, progress, counters, stop)):
            await settle(lambda: progress.caught_up and store.events, what="groups polled")
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(missing, 1, 1)])
            finally:
                await admin.close()

            def told() -> list[dict[str, Any]]:
                return [e for e in logged if e["event"].startswith("offsets source: the offsets topic has appeared")]

            await settle(told, timeout=30, what="the appeared topic noticed")
            polled = counters.records_by_type.get("polled_offset", 0)
            await settle(lambda: counters.records_by_type.get("polled_offset", 0) > polled, what="polling on")
    assert progress.source == "admin"
    (said,) = told()
    assert said["offsets_source"] == "admin" and "polling had read groups already" in said["reason"], said


async def test_auto_streams_an_offsets_topic_it_can_read(kafka: str, unique: str, settle: Settle) -> None:
    scenario = standard(unique, partitions=2)
    topic = f"__consumer_offsets_{unique}"
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=topic, offsets_partitions=3)
    await driver.start()
    try:
        await drive(driver, 3)
    finally:
        await driver.close()

    settings = cluster(kafka, offsets_source="auto", offsets_topic=topic, groups_deny="")
    assert await unreadable_reason(settings) is None
    store, progress, counters, stop = Store(), ReaderProgress(), IngestCounters(), asyncio.Event()
    async with running(read_offsets(settings, {}, store, progress, counters, stop)):
        await settle(lambda: progress.caught_up, what="offsets-topic reader caught up")
        snapshot = list(store.events)
    assert progress.source == "topic"
    assert fold(snapshot) == driver.last_commits
    # Streamed, not polled: each commit's order is its record's offset in the offsets topic.
    commits = [e for e in snapshot if isinstance(e, Commit)]
    written = sorted(off for places in driver.orders.values() for _, off in places)
    assert sorted(e.order for e in commits) == written


async def test_choosing_waits_for_an_unreachable_broker_and_stops_on_request() -> None:
    from lagd.embedded.services import free_port

    settings = cluster(f"127.0.0.1:{free_port()}", offsets_source="auto", request_timeout=1.0)
    stop, counters = asyncio.Event(), IngestCounters()
    task = asyncio.ensure_future(choose_source(settings, stop, counters))
    while not counters.failures:
        await asyncio.wait([task], timeout=0.05)
        assert not task.done(), "a broker that refuses connections decides nothing"
    stop.set()
    assert await asyncio.wait_for(task, 5.0) is None
    assert all(k.startswith("offsets_source_probe_") for k in counters.failures)


async def test_clusters_and_metrics_say_which_source_was_chosen() -> None:
    ctx = build_context()
    chosen, undecided = ReaderProgress(), ReaderProgress()
    chosen.source = "admin"
    ctx.health.progress = {
        name: (chosen if i == 0 else undecided) for i, name in enumerate(sorted(ctx.settings.clusters))
    }
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        async with s.get("/lagd/v1/clusters") as resp:
            body = await resp.json()
        async with s.get("/metrics") as resp:
            metrics = await resp.text()
    sources = [c["offsets_source"] for c in body["clusters"]]
    assert sources[0] == "admin" and all(src is None for src in sources[1:])
    first = sorted(ctx.settings.clusters)[0]
    assert f'lagd_offsets_source{{cluster="{first}",source="admin"}} 1' in metrics
