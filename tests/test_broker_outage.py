"""A broker outage: lagd holds its verdicts, says it is blind, and raises one incident for the cluster.

Real parts: a private Tansu broker, PostgreSQL, Mosquitto and the daemon (in process). The
outage is a cut of the TCP path to the broker (tests/netcut.py, a labelled stand-in for the
network, not for the broker). The broker advertises one address, the path's, so the
simulator's writes stall during the cut too, and it goes on a tick at a time after it: its
commits then carry times as old as the stall, a consumer as far behind in time as the outage
was long. Any STOP during the outage would be false; after it, only a stop-after longer than
the outage rules one out.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import psycopg2
import pytest

from lagd.embedded import services as embedded
from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.netcut import Cuttable
from tests.test_restart import _ready, get, settings_for, start_daemon

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

# lagd knows it is blind after 3 offset-refreshes + 10 s (11.5 s here): an outage of 20 s is
# noticed (one "cluster unreachable" incident). No verdict turns bad during the outage, whether
# stop-after is longer than that (30 s) or shorter (4 s: before issue 50 the lagging group went
# STOP, then ERR, in the seconds lagd could not yet tell it was blind; verdicts are now judged
# as of what lagd has read). After the outage, a stop-after shorter than it sees every group
# STOP, rightly: the simulator's commits stalled with the cut (see above), so the consumers did
# not commit for 20 s while records waited. What follows the outage is asserted with 30 s only.
OUTAGES = [(30.0, 20.0), (4.0, 20.0)]


async def _degraded(session: aiohttp.ClientSession, port: int) -> bool:
    _, text = await get(session, port, "/metrics")
    return bool(re.search(r'^lagd_cluster_degraded\{cluster="sim"\} 1$', text, re.M))


async def _bad_partitions(session: aiohttp.ClientSession, port: int, groups: list[str]) -> set[tuple[str, str]]:
    bad: set[tuple[str, str]] = set()
    for g in groups:
        _, body = await get(session, port, f"/v3/kafka/sim/consumer/{g}/lag")
        for p in body["status"]["partitions"]:
            if p["status"] in ("STOP", "STALL", "REWIND"):
                bad.add((g, p["status"]))
    return bad


def _statuses(database_url: str, groups: list[str]) -> set[str]:
    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT DISTINCT status FROM status_history WHERE group_name = ANY(%s)", (groups,))
        return {row[0] for row in cur.fetchall()}


def _history_has(database_url: str, groups: list[str], status: str) -> bool:
    return status in _statuses(database_url, groups)


@pytest.mark.parametrize(("stop_after", "outage_s"), OUTAGES, ids=["stop-after-30s", "stop-after-4s"])
async def test_a_broker_outage_raises_no_stop_and_one_cluster_incident(
    stop_after: float, outage_s: float, database_url: str, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    front = free_port()
    broker = embedded.start_tansu(advertised_port=front)
    proxy = Cuttable("127.0.0.1", int(broker.address.rsplit(":", 1)[1]))
    await proxy.start(front)
    topic = f"events-{unique}"
    healthy, lagging = f"ok-{unique}", f"slow-{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=10.0),),
        groups=(GroupSpec(healthy, (topic,), "healthy"), GroupSpec(lagging, (topic,), "lagging", speed=0.5)),
        start_ms=int(time.time() * 1000),
    )
    offsets_topic = f"__consumer_offsets_{unique}"
    # The simulator bootstraps from the broker itself, but the broker advertises the path: see above.
    driver = Driver(broker.address, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    port = free_port()
    settings = settings_for(
        f"127.0.0.1:{front}",
        database_url,
        port,
        offsets_topic,
        evaluator={"stop-after": stop_after},  # silence lagd would see during the cut, were it not blind
        notify={
            "enabled": True,
            "mqtt-url": f"mqtt://{mqtt_broker[0]}:{mqtt_broker[1]}",
            "topic-prefix": f"lagd-{unique}",
            "severity": "ERR",  # the lagging group's WARN opens nothing: only ERR does
            "hold-time": 1.0,
            "update-interval": 0.5,
        },
    )
    task, stop = await start_daemon(settings)
    groups = [healthy, lagging]
    seen_bad: set[tuple[str, str]] = set()
    stop_driver = asyncio.Event()
    ticker = asyncio.create_task(driver.run(until=10_000.0, stop=stop_driver))
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=30, what="ready")

            async def judged() -> bool:
                _, body = await get(session, port, f"/v3/kafka/sim/consumer/{lagging}/lag")
                return bool(body.get("status", {}).get("status") == "WARN")

            await settle(judged, timeout=40, what="the lagging group judged WARN")
            proxy.cut()
            cut_at = time.monotonic()
            while time.monotonic() - cut_at < outage_s:
                seen_bad |= await _bad_partitions(session, port, groups)
                await asyncio.sleep(0.5)  # polling cadence of the observer, not synchronisation
            assert not seen_bad, f"verdicts turned bad during the outage: {seen_bad}"
            assert await _degraded(session, port), "lagd did not say it is blind"
            status, text = await get(session, port, "/burrow/admin/ready")
            assert (status, text.split(":")[0]) == (503, "DEGRADED")
            proxy.restore()
            if stop_after < outage_s:
                return  # see OUTAGES
            await settle(lambda: _ready(session, port), timeout=60, what="ready again after the outage")
            for _ in range(10):  # the missed commits are read again and judged now
                seen_bad |= await _bad_partitions(session, port, groups)
                await asyncio.sleep(0.5)
            assert not seen_bad, f"verdicts turned bad after the outage: {seen_bad}"
            # Every group status lagd ever recorded (the history is written behind, so read it once
            # the incident has resolved below): never ERR, for either group.

            async def cluster_incident_resolved() -> Any:
                _, body = await get(session, port, "/lagd/v1/incidents?cluster=sim")
                rows = body.get("incidents", [])
                return rows if rows and all(r["state"] == "resolved" for r in rows) else None

            # the reader's reconnect waits up to 30 s (lagd.runtime.backoff) after the path is back
            rows = await settle(cluster_incident_resolved, timeout=90, what="the cluster incident resolved")
            await settle(lambda: _history_has(database_url, groups, "WARN"), timeout=10, what="history written")
            assert _statuses(database_url, groups) <= {"OK", "WARN"}, _statuses(database_url, groups)
            assert len(rows) == 1, rows
            assert list(rows[0]["body"]["groups"]) == ["cluster:sim"], rows[0]
            assert "unreachable" in rows[0]["reason"], rows[0]
    finally:
        stop_driver.set()
        stop.set()
        await asyncio.wait_for(task, 10)
        await asyncio.gather(ticker, return_exceptions=True)
        await driver.close()
        await proxy.close()
        broker.stop()
