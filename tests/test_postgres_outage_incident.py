"""End to end: a group goes ERR and back while Postgres is away; its incident still reaches
every sink, once Postgres is back, late and saying so; writes resume within 3 s (issue 50).

Real parts only: the Tansu broker, the simulator writing byte-exact commits into an offsets
topic of this test's own, a private embedded PostgreSQL that the test stops and starts again
(as tests/test_persister_outage.py does: the server goes away, not a path to it; with a TCP
Postgres the cut could be a tests/netcut.py path instead), Mosquitto, the daemon in process.
The webhook receiver is a LABELLED STAND-IN (tests/test_notify_sinks.Receiver).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import psycopg2
import pytest

from lagd.core.config import Settings, parse
from lagd.embedded.services import Postgres, free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.test_notify_daemon_sinks import Mqtt
from tests.test_notify_sinks import Receiver
from tests.test_persister_outage import private_postgres
from tests.test_restart import SCALED_EVALUATOR, _ready, get, start_daemon

__all__ = ["private_postgres"]
Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

HELD_S = 4.0  # how long the group stays ERR: longer than the hold time


def settings(
    kafka: str, database_url: str, port: int, offsets_topic: str, mqtt: tuple[str, int], **kw: str
) -> Settings:
    return parse(
        {
            "clusters": {
                "sim": {
                    "bootstrap-servers": [kafka],
                    "offsets-topic": offsets_topic,
                    "offset-refresh": 0.5,
                    "topic-refresh": 2.0,
                }
            },
            "storage": {"database-url": database_url, "intervals": 10, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2, **SCALED_EVALUATOR},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": {
                "enabled": True,
                "mqtt-url": f"mqtt://{mqtt[0]}:{mqtt[1]}",
                "topic-prefix": kw["prefix"],
                "severity": "ERR",
                "hold-time": 1.0,
                "update-interval": 0.5,
                "publish-interval": 0.1,
                "status-page-url": f"http://127.0.0.1:{port}/",
            },
            "sinks": {"hook": {"kind": "webhook", "url": kw["hook"], "retry-initial": 0.1, "retry-max": 0.5}},
        },
        env={},
    )


async def status_of(session: aiohttp.ClientSession, port: int, group: str) -> str | None:
    code, body = await get(session, port, f"/v3/kafka/sim/consumer/{group}/status")
    return str(body["status"]["status"]) if code == 200 else None


async def store_healthy(session: aiohttp.ClientSession, port: int) -> bool:
    _, text = await get(session, port, "/metrics")
    return bool(re.search(r"^lagd_store_healthy 1(\.0)?$", text, re.M))


async def test_an_incident_inside_a_postgres_outage_reaches_every_sink_once_postgres_is_back(
    private_postgres: Postgres, kafka: str, mqtt_broker: tuple[str, int], unique: str, settle: Settle
) -> None:
    pg = private_postgres
    topic, offsets_topic = f"events-{unique}", f"__consumer_offsets_{unique}"
    healthy, flaky = f"ok-{unique}", f"flaky-{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=10.0),),
        groups=(GroupSpec(healthy, (topic,), "healthy"), GroupSpec(flaky, (topic,), "healthy")),
        start_ms=int(time.time() * 1000),
    )
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    feeding = asyncio.Event()
    feeder = asyncio.create_task(driver.run(until=3600.0, stop=feeding))
    hook = await Receiver().open()
    prefix = f"lagd-{unique}"
    mqtt = await Mqtt(*mqtt_broker, prefix).start()
    port = free_port()
    conf = settings(kafka, pg.url, port, offsets_topic, mqtt_broker, prefix=prefix, hook=hook.url)
    task, stop = await start_daemon(conf)
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=60, what="ready")
            await settle(lambda: status_of(session, port, flaky), timeout=30, what="the group judged")
            await settle(lambda: store_healthy(session, port), timeout=30, what="writes going")
            # the notifier leads the cluster (it recorded the groups' statuses) when Postgres goes
            await settle(lambda: statuses_recorded(pg.url, prefix) == 2, timeout=30, what="the notifier leading")

            await asyncio.to_thread(pg.stop_server)
            down_at = time.monotonic()
            await settle(lambda: not_(store_healthy(session, port)), timeout=30, what="the outage noticed")
            # the group stops committing (ERR), stays so past the hold time, and resumes (OK)
            driver.scenario = dataclasses.replace(
                scenario, groups=(scenario.groups[0], GroupSpec(flaky, (topic,), "stopped", at=driver.t))
            )

            async def err() -> bool:
                return await status_of(session, port, flaky) == "ERR"

            await settle(err, timeout=30, what="the group ERR during the outage")
            err_at = time.monotonic()

            async def err_held() -> bool:
                return await err() and time.monotonic() - err_at >= HELD_S

            await settle(err_held, timeout=30, what=f"the group ERR for {HELD_S} s")
            driver.scenario = scenario  # commits again

            async def ok() -> bool:
                return await status_of(session, port, flaky) == "OK"

            await settle(ok, timeout=30, what="the group OK again during the outage")
            assert hook.ids() == [] and mqtt.ids == []  # nothing could be recorded meanwhile
            assert not await store_healthy(session, port)

            await asyncio.to_thread(pg.start_server)
            back_at = time.monotonic()
            await settle(lambda: store_healthy(session, port), timeout=30, what="writes resumed")
            resumed_after = time.monotonic() - back_at
            await settle(lambda: len(set(hook.ids())) >= 2, timeout=60, what="the incident at the webhook")
            await settle(lambda: len(set(mqtt.ids)) >= 2, timeout=60, what="the incident over MQTT")
    finally:
        feeding.set()
        stop.set()
        await asyncio.wait_for(task, 10)
        await asyncio.gather(feeder, return_exceptions=True)
        await driver.close()
        await hook.close()
        await mqtt.close()
    outage_s = back_at - down_at
    assert resumed_after < 3.0, (resumed_after, outage_s)
    bodies = {i: b for i, b, _ in hook.got}
    assert [bodies[i]["event"] for i in dict.fromkeys(hook.ids())] == ["opened", "resolved"], hook.got
    assert list(dict.fromkeys(mqtt.ids)) == list(dict.fromkeys(hook.ids()))  # the same events, in order
    opened, resolved = (bodies[i] for i in dict.fromkeys(hook.ids()))
    assert opened["groups"] == {flaky: "ERR"} and resolved["groups"] == {flaky: "OK"}
    assert opened["summary"].startswith("recorded late") and resolved["resolved_at"] > opened["opened_at"]


def statuses_recorded(url: str, prefix: str) -> int:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(DISTINCT topic) FROM outbox WHERE retain AND topic LIKE %s", (f"{prefix}/sim/groups/%",)
            )
            return int(cur.fetchone()[0])
    finally:
        conn.close()


async def not_(awaitable: Awaitable[bool]) -> bool:
    return not await awaitable
