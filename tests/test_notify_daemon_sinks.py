"""The running daemon's incident reaches a real Alertmanager, a webhook receiver and MQTT, each
event id at least once and nothing else, across a receiver outage and a lagd restart.

Real parts: a private Tansu broker behind a cuttable path (tests/netcut.py, a stand-in for the
network), PostgreSQL, Mosquitto, Alertmanager (Debian prometheus-alertmanager) and the daemon
in process. The webhook receiver is a LABELLED STAND-IN: a local aiohttp server
(tests/test_notify_sinks.Receiver) that answers 503 during its outage and 202 otherwise.

The incident: cutting lagd's path to the broker makes lagd blind, which opens one "cluster
unreachable" incident (ERR); restoring the path resolves it after notify.hold-time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import aiomqtt
import psycopg2
import pytest

from lagd.core.config import Settings, parse
from lagd.embedded import services as embedded
from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.netcut import Cuttable
from tests.test_notify_sinks import Alertmanager, Receiver, alertmanager, am_alerts
from tests.test_restart import SCALED_EVALUATOR, _ready, get, start_daemon

__all__ = ["alertmanager"]  # the session fixture, shared with tests/test_notify_sinks.py

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow


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
            "sinks": {
                "hook": {"kind": "webhook", "url": kw["hook"], "retry-initial": 0.1, "retry-max": 0.5},
                "am": {"kind": "alertmanager", "url": kw["am"], "alert-ttl": 120.0},
            },
        },
        env={},
    )


class Mqtt:
    """Incident messages under a prefix, as a subscriber sees them (QoS 1)."""

    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.ids: list[str] = []
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client(self.host, self.port) as client:
                await client.subscribe(f"{self.prefix}/+/incidents/#", qos=1)
                self.ready.set()
                async for msg in client.messages:
                    assert isinstance(msg.payload, bytes)
                    self.ids.append(json.loads(msg.payload)["event_id"])

    async def start(self) -> Mqtt:
        self.task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def close(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def recorded(database_url: str) -> list[tuple[str, str]]:
    """(event id, event) of every incident event in the outbox, in order."""
    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT event_id, payload->>'event' FROM outbox WHERE NOT retain ORDER BY id")
        return [(str(a), str(b)) for a, b in cur.fetchall()]


async def sink_failures(session: aiohttp.ClientSession, port: int, sink: str) -> float:
    _, text = await get(session, port, "/metrics")
    for line in text.splitlines():
        if line.startswith(f'lagd_sink_failures_total{{sink="{sink}"'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_daemon_incident_reaches_alertmanager_a_webhook_and_mqtt_across_an_outage_and_a_restart(
    database_url: str, mqtt_broker: tuple[str, int], alertmanager: Alertmanager, unique: str, settle: Settle
) -> None:
    front = free_port()
    broker = embedded.start_tansu(advertised_port=front)
    path = Cuttable("127.0.0.1", int(broker.address.rsplit(":", 1)[1]))
    await path.start(front)
    topic, offsets_topic = f"events-{unique}", f"__consumer_offsets_{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=10.0),),
        groups=(GroupSpec(f"ok-{unique}", (topic,), "healthy"),),
        start_ms=int(time.time() * 1000),
    )
    driver = Driver(broker.address, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    stop_driver = asyncio.Event()
    ticker = asyncio.create_task(driver.run(until=10_000.0, stop=stop_driver))
    hook = await Receiver().open()
    prefix = f"lagd-{unique}"
    mqtt = await Mqtt(*mqtt_broker, prefix).start()
    port = free_port()
    conf = settings(
        f"127.0.0.1:{front}",
        database_url,
        port,
        offsets_topic,
        mqtt_broker,
        prefix=prefix,
        hook=hook.url,
        am=alertmanager.url,
    )
    task, stop = await start_daemon(conf)
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=30, what="ready")
            hook.failing = True  # the webhook receiver's outage starts
            path.cut()  # lagd goes blind: a "cluster unreachable" incident opens
            await settle(lambda: any(e == "opened" for _, e in recorded(database_url)), timeout=60, what="opened")
            incident = recorded(database_url)[0][0].rsplit(":", 1)[0]
            await settle(lambda: am_alerts(alertmanager, incident), timeout=20, what="the alert in Alertmanager")
            await settle(lambda: mqtt.ids, timeout=20, what="the incident over MQTT")
            await settle(lambda: sink_failures(session, port, "hook"), timeout=20, what="the webhook failing")
            assert hook.ids() == []
            # lagd restarts while the webhook receiver is still down
            stop.set()
            assert await asyncio.wait_for(task, 10) == 0
            hook.failing = False
            path.restore()
            task, stop = await start_daemon(conf)
            await settle(lambda: _ready(session, port), timeout=60, what="ready after the restart")

            async def resolved() -> bool:
                return any(e == "resolved" for _, e in recorded(database_url))

            await settle(resolved, timeout=60, what="the incident resolved")
            want = [i for i, _ in recorded(database_url)]
            await settle(lambda: set(hook.ids()) >= set(want), timeout=20, what="every event at the webhook")
            await settle(lambda: set(mqtt.ids) >= set(want), timeout=20, what="every event over MQTT")

            async def alert_gone() -> bool:
                return not await am_alerts(alertmanager, incident)

            await settle(alert_gone, timeout=20, what="the alert resolved in Alertmanager")  # alert-ttl is 120 s
    finally:
        stop_driver.set()
        stop.set()
        await asyncio.wait_for(task, 10)
        await asyncio.wait_for(ticker, 10)
        await driver.close()
        await path.close()
        await hook.close()
        await mqtt.close()
        broker.stop()
    events = recorded(database_url)
    assert events[0][1] == "opened" and events[-1][1] == "resolved"
    want = [i for i, _ in events]
    for got in (hook.ids(), mqtt.ids):
        assert set(got) == set(want)  # every event, nothing else
        assert list(dict.fromkeys(got)) == want  # in order; a repeat only ever carries an id already seen
    assert all(b["id"] == incident for _, b, _ in hook.got)
