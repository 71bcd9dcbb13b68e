"""Burrow v3 compatibility end to end: the daemon, fed by the simulator, answers every path.

Real parts only: the Tansu broker, the simulator writing byte-exact commit and group
records into an offsets topic of this test's own, PostgreSQL, and the daemon (in process)
read over HTTP. test_http_burrow.py pins exact bodies for a hand-built state; this test
checks that what the live daemon serves has Burrow's field order at every level and
values that match what the simulator produced and committed, for a group in each state.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.test_restart import _ready, get, settings_for, start_daemon

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

INTERVALS = 10  # settings_for's window size; its evaluator knobs are scaled to seconds-long scenarios
ENVELOPE = ["error", "message", "{payload}", "request"]
GROUP_STATUS = ["cluster", "group", "status", "complete", "partitions", "partition_count", "maxlag", "totallag"]
PARTITION_STATUS = ["topic", "partition", "owner", "client_id", "status", "start", "end", "current_lag", "complete"]
# lagd's own fields after Burrow's, on a partition whose log start is sampled (burrow_json.retention_fields):
# dashboards reading Burrow's fields see them unchanged
RETENTION_FIELDS = ["retention_used", "records_lost", "retention"]
CONSUMER_OFFSET = ["offset", "timestamp", "observedAt", "lag"]
DETAIL_ROW = ["offsets", "owner", "client_id", "current-lag"]


def scenario(u: str) -> Scenario:
    """One group per state, on steady topics so every lag is exactly computable."""
    orders, payments = f"orders-{u}", f"payments-{u}"
    return Scenario(
        topics=(TopicSpec(orders, 3, rate=6.0), TopicSpec(payments, 2, rate=10.0)),
        groups=(
            GroupSpec(f"billing-{u}", (orders,), "healthy"),
            GroupSpec(f"search-{u}", (payments,), "lagging", speed=0.2),
            GroupSpec(f"fraud-{u}", (orders, payments), "stalled", at=2.0),
            GroupSpec(f"archive-{u}", (payments,), "stopped", at=3.0),
            # 60 records back at 6 s: more than its partitions (6/s) regain by 9 s, when the
            # test reads, so the window holds an unrecovered backward step.
            GroupSpec(f"replay-{u}", (orders,), "rewinding", at=6.0, rewind_by=60),
        ),
        start_ms=int(time.time() * 1000),
    )


def envelope(body: dict[str, Any], path: str, message: str, payload: str) -> None:
    assert list(body) == [payload if k == "{payload}" else k for k in ENVELOPE], path
    assert body["error"] is False and body["message"] == message, path
    assert body["request"] == {"url": path, "host": socket.gethostname()}, path


def offset_shape(o: Any) -> None:
    assert o is None or list(o) == CONSUMER_OFFSET, o


async def test_every_burrow_path_from_the_live_daemon(
    kafka: str, database_url: str, unique: str, settle: Settle
) -> None:
    port = free_port()
    offsets_topic = f"__consumer_offsets_{unique}"
    sc = scenario(unique)
    groups = {g.name: g for g in sc.groups}
    # the rules at stop-after from a group's first commit (pause-learn 0: no waiting out a first
    # deploy; tests/test_pauses.py has that): this test's subject is Burrow's paths and bodies
    settings = settings_for(kafka, database_url, port, offsets_topic, evaluator={"pause-learn": 0})
    driver = Driver(kafka, sc, mode="topic", offsets_topic=offsets_topic, offsets_partitions=4)
    await driver.start()
    task, stop = await start_daemon(settings)
    try:
        async with aiohttp.ClientSession() as session:

            async def body(path: str, code: int = 200) -> Any:
                status, answer = await get(session, port, path)
                assert status == code, (path, status, answer)
                return answer

            async def sampled() -> bool:
                for (topic, _), _n in driver.produced.items():
                    status, answer = await get(session, port, f"/v3/kafka/sim/topic/{topic}")
                    parts = sc.topic(topic).partitions
                    if status != 200 or answer["offsets"] != [driver.produced[(topic, p)] for p in range(parts)]:
                        return False
                return True

            await settle(lambda: _ready(session, port), timeout=30, what="ready")
            await driver.run(until=9.0)
            await settle(sampled, timeout=15, what="log-end offsets of the last produce")

            envelope(b := await body("/v3/kafka"), "/v3/kafka", "cluster list returned", "clusters")
            assert b["clusters"] == ["sim"]
            envelope(b := await body("/v3/kafka/sim"), "/v3/kafka/sim", "cluster module detail returned", "module")
            assert b["module"]["servers"] == [kafka]
            envelope(b := await body("/v3/kafka/sim/topic"), "/v3/kafka/sim/topic", "topic list returned", "topics")
            assert {t.name for t in sc.topics} <= set(b["topics"]) and b["topics"] == sorted(b["topics"])
            for t in sc.topics:
                path = f"/v3/kafka/sim/topic/{t.name}/consumers"
                envelope(b := await body(path), path, "consumers of topic returned", "consumers")
                assert b["consumers"] == sorted(g.name for g in sc.groups if t.name in g.topics)
            path = "/v3/kafka/sim/consumer"
            envelope(b := await body(path), path, "consumer list returned", "consumers")
            assert set(groups) <= set(b["consumers"])

            for name, spec in groups.items():
                expected_lag = {
                    (t, p): max(0, driver.produced[(t, p)] - driver.commits[(name, t, p)][-1])
                    for t in spec.topics
                    for p in range(sc.topic(t).partitions)
                }
                # The consumer detail: each partition's window, oldest first, and current-lag.
                path = f"/v3/kafka/sim/consumer/{name}"
                envelope(b := await body(path), path, "consumer detail returned", "topics")
                assert sorted(b["topics"]) == sorted(spec.topics)
                for t, rows in b["topics"].items():
                    assert len(rows) == sc.topic(t).partitions
                    for p, row in enumerate(rows):
                        assert list(row) == DETAIL_ROW
                        for o in row["offsets"]:
                            offset_shape(o)
                        assert len(row["offsets"]) == INTERVALS
                        window = [o["offset"] for o in row["offsets"] if o is not None]
                        assert window == driver.commits[(name, t, p)][-INTERVALS:], (name, t, p)
                        assert row["current-lag"] == expected_lag[(t, p)], (name, t, p)
                        live = spec.behaviour != "stopped"
                        assert (row["owner"], row["client_id"]) == (
                            (driver.host, f"sim-{name}") if live else ("", "")
                        ), (name, row)

                # /lag lists every partition, /status only those that are not OK.
                path = f"/v3/kafka/sim/consumer/{name}/lag"
                envelope(b := await body(path), path, "consumer status returned", "status")
                st = b["status"]
                assert list(st) == GROUP_STATUS
                assert (st["cluster"], st["group"]) == ("sim", name)
                assert st["partition_count"] == len(expected_lag) == len(st["partitions"])
                # complete: a window's share of `intervals` (the stopped group committed only 3 times)
                filled = {k: min(len(driver.commits[(name, *k)]), INTERVALS) / INTERVALS for k in expected_lag}
                assert st["complete"] == sum(f == 1.0 for f in filled.values()) / len(filled)
                for ps in [*st["partitions"], st["maxlag"]]:
                    keys = list(ps)
                    assert keys[: len(PARTITION_STATUS)] == PARTITION_STATUS, keys
                    assert keys[len(PARTITION_STATUS) :] in (RETENTION_FIELDS, [*RETENTION_FIELDS, "retention_reason"])
                    offset_shape(ps["start"])
                    offset_shape(ps["end"])
                    commits = driver.commits[(name, ps["topic"], ps["partition"])]
                    assert ps["end"]["offset"] == commits[-1] and ps["start"]["offset"] == commits[-INTERVALS:][0]
                    assert ps["current_lag"] == expected_lag[(ps["topic"], ps["partition"])]
                    assert ps["complete"] == filled[(ps["topic"], ps["partition"])]
                assert st["totallag"] == sum(expected_lag.values())
                assert st["maxlag"]["current_lag"] == max(expected_lag.values())
                statuses = {p["status"] for p in st["partitions"]}
                _judged_as_its_behaviour(spec, st["status"], statuses)

                path = f"/v3/kafka/sim/consumer/{name}/status"
                envelope(b := await body(path), path, "consumer status returned", "status")
                assert b["status"]["partitions"] == [p for p in st["partitions"] if p["status"] != "OK"]

            path = "/v3/kafka/sim/consumer/never-seen/lag"
            b = await body(path, 404)
            assert b["error"] is False and b["status"]["status"] == "NOTFOUND"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await driver.close()


def _judged_as_its_behaviour(spec: GroupSpec, group_status: str, partition_statuses: set[str]) -> None:
    """The verdict each simulated behaviour earns. Commits ended a moment ago, so a group with
    lag may already read STOP (checked first by the rules) where its own rule fired before."""
    expected = {
        "healthy": ("OK", {"OK"}),
        "lagging": ("WARN", {"WARN"}),
        "stalled": ("ERR", {"STALL"}),
        "stopped": ("ERR", {"STOP"}),
        "rewinding": ("ERR", {"REWIND"}),
    }[spec.behaviour]
    if spec.behaviour == "lagging" and group_status == "ERR":
        expected = ("ERR", {"STOP"})
    assert group_status == expected[0], (spec.name, group_status, partition_statuses)
    assert partition_statuses <= expected[1] | {"STOP"} and partition_statuses & (expected[1] | {"STOP"}), (
        spec.name,
        partition_statuses,
    )


async def test_a_topic_no_group_consumes_is_listed_with_its_offsets(
    kafka: str, database_url: str, unique: str, settle: Settle
) -> None:
    """Burrow lists every topic of the cluster: one nobody consumes answers 200 with its
    log-end offsets and an empty consumer list; a topic `topics-deny` names is not listed."""
    port = free_port()
    offsets_topic = f"__consumer_offsets_{unique}"
    idle, consumed = TopicSpec(f"idle-{unique}", 3, rate=5.0), TopicSpec(f"used-{unique}", 1, rate=5.0)
    denied = TopicSpec(f"__denied-{unique}", 1, rate=5.0)  # topics-deny "^__.*" by default
    sc = Scenario(
        topics=(idle, consumed, denied),
        groups=(GroupSpec(f"reader-{unique}", (consumed.name,), "healthy"),),
        start_ms=int(time.time() * 1000),
    )
    settings = settings_for(kafka, database_url, port, offsets_topic)
    driver = Driver(kafka, sc, mode="topic", offsets_topic=offsets_topic, offsets_partitions=1)
    await driver.start()
    task, stop = await start_daemon(settings)
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=30, what="ready")
            await driver.run(until=2.0)
            expected = [driver.produced[(idle.name, p)] for p in range(idle.partitions)]
            assert sum(expected) > 0

            async def idle_sampled() -> bool:
                status, answer = await get(session, port, f"/v3/kafka/sim/topic/{idle.name}")
                return status == 200 and answer["offsets"] == expected

            await settle(idle_sampled, timeout=15, what="the unconsumed topic's log-end offsets")
            path = f"/v3/kafka/sim/topic/{idle.name}"
            status, b = await get(session, port, path)
            envelope(b, path, "topic offsets returned", "offsets")
            path += "/consumers"
            status, b = await get(session, port, path)
            assert status == 200, b
            envelope(b, path, "consumers of topic returned", "consumers")
            assert b["consumers"] == []
            status, b = await get(session, port, "/v3/kafka/sim/topic")
            assert status == 200 and {idle.name, consumed.name} <= set(b["topics"])
            assert not any(t.startswith("__") for t in b["topics"]), b["topics"]
            status, b = await get(session, port, f"/v3/kafka/sim/topic/{denied.name}")
            assert (status, b["message"]) == (404, "cluster or topic not found")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await driver.close()
