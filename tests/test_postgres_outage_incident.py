"""End to end: a group goes ERR and back while Postgres is away for 45 s; its incident still
reaches every sink (MQTT, a webhook, a real Alertmanager) once Postgres is back, exactly once,
late and saying so; writes resume within 3 s of Postgres' return, and the "postgres writes
resumed" line's outage_s is the outage, not the retry wait (issue 50: 16.9 s after a 45 s
outage, the retry wait having doubled to 30 s).

Real parts only: `lagd run` as its own process (JSON log to a file, default
storage.flush-interval so the retry wait doubles as in the issue), the Tansu broker, the
simulator writing byte-exact commits into an offsets topic of this test's own, a private
embedded PostgreSQL that the test stops and starts again (the server goes away, not a path to
it), Mosquitto, and Alertmanager (Debian prometheus-alertmanager). LABELLED STAND-INS
(tests/test_notify_sinks.Receiver): the webhook receiver, the receiver of Alertmanager's own
notifications, and a recording tap in front of Alertmanager that forwards each of lagd's posts
to it and keeps Alertmanager's answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import psycopg2
import pytest
from aiohttp import web

from lagd.embedded.services import Postgres, free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.test_notify_daemon_sinks import Mqtt
from tests.test_notify_sinks import Receiver, start_alertmanager
from tests.test_notify_without_mqtt import AM_CONFIG, check_config, log_lines, start_lagd
from tests.test_persister_outage import private_postgres
from tests.test_restart import SCALED_EVALUATOR, _ready, get

__all__ = ["private_postgres"]
Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

OUTAGE_S = 45.0  # how long Postgres is away (issue 50's run)
HELD_S = 4.0  # how long the group stays ERR: longer than the hold time
RESUME_WITHIN_S = 3.0


def lagd_toml(
    kafka: str, offsets_topic: str, database_url: str, port: int, prefix: str, mqtt: str, urls: dict[str, str]
) -> str:
    # stop-after 8 s: the healthy group's commit round late on a loaded machine must not read as
    # a stopped consumer; storage.flush-interval is left at its default (the retry wait's start)
    evaluator = "\n".join(f"{k} = {v}" for k, v in {**SCALED_EVALUATOR, "stop-after": 8.0}.items())
    return f"""
[clusters.sim]
bootstrap-servers = ["{kafka}"]
offsets-topic = "{offsets_topic}"
offset-refresh = 0.5
topic-refresh = 2.0

[storage]
database-url = "{database_url}"
intervals = 10

[evaluator]
cache-ttl = 0.2
{evaluator}

[http]
listen = "127.0.0.1:{port}"

[notify]
mqtt-url = "{mqtt}"
topic-prefix = "{prefix}"
severity = "ERR"
hold-time = 1.0
update-interval = 0.5
publish-interval = 0.1
status-page-url = "http://127.0.0.1:{port}/"

[sinks.hook]
kind = "webhook"
url = "{urls["hook"]}"
retry-initial = 0.1
retry-max = 0.5

[sinks.am]
kind = "alertmanager"
url = "{urls["am"]}"
alert-ttl = 120.0
retry-initial = 0.1
retry-max = 0.5
"""


@dataclass
class Tap:
    """LABELLED STAND-IN: forwards each POST to the real Alertmanager at `upstream` and records
    (lagd's event id header, the alerts posted, Alertmanager's answer status)."""

    upstream: str
    port: int = field(default_factory=free_port)
    got: list[tuple[str, list[dict[str, Any]], int]] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.upstream + request.path, data=body, headers={"Content-Type": "application/json"}
            ) as answer,
        ):
            text = await answer.text()
            self.got.append((request.headers.get("X-Lagd-Event-Id", ""), json.loads(body), answer.status))
            return web.Response(status=answer.status, text=text, content_type="application/json")

    async def open(self) -> Tap:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def event_ids(self) -> list[str]:
        """The incident events lagd delivered (the re-posts of an open alert carry no event id)."""
        return [i for i, _, status in self.got if i and status == 200]


async def status_of(session: aiohttp.ClientSession, port: int, group: str) -> str | None:
    code, body = await get(session, port, f"/v3/kafka/sim/consumer/{group}/status")
    return str(body["status"]["status"]) if code == 200 else None


async def store_healthy(session: aiohttp.ClientSession, port: int) -> bool:
    _, text = await get(session, port, "/metrics")
    return bool(re.search(r"^lagd_store_healthy 1(\.0)?$", text, re.M))


def wall(iso: str) -> float:
    """A log line's timestamp (structlog's ISO, UTC) as time.time() seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def test_an_incident_inside_a_45s_postgres_outage_reaches_every_sink_once_postgres_is_back(
    private_postgres: Postgres,
    kafka: str,
    mqtt_broker: tuple[str, int],
    unique: str,
    tmp_path: Path,
    settle: Settle,
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
    hook, am_out = await Receiver().open(), await Receiver().open()
    am = start_alertmanager(AM_CONFIG.format(url=am_out.url))
    tap = await Tap(am.url).open()
    prefix = f"lagd-{unique}"
    mqtt = await Mqtt(*mqtt_broker, prefix).start()
    port = free_port()
    config = tmp_path / "lagd.toml"
    mqtt_url = f"mqtt://{mqtt_broker[0]}:{mqtt_broker[1]}"
    config.write_text(
        lagd_toml(kafka, offsets_topic, pg.url, port, prefix, mqtt_url, {"hook": hook.url, "am": tap.url})
    )
    out = tmp_path / "lagd.log"
    env = {**os.environ, "LAGD_LOG_FORMAT": "json", "LAGD_LOG_LEVEL": "info"}
    assert check_config(config, env) == ""
    proc = start_lagd(config, env, out)
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=60, what="ready")
            await settle(lambda: status_of(session, port, flaky), timeout=30, what="the group judged")
            await settle(lambda: store_healthy(session, port), timeout=30, what="writes going")
            # the notifier leads the cluster (it recorded the groups' statuses) when Postgres goes
            await settle(
                lambda: asyncio.to_thread(statuses_recorded, pg.url, prefix),
                timeout=30,
                what="the notifier leading",
            )

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
            ok_at = time.monotonic()
            # the rest of the outage: nothing can be recorded, so nothing reaches a sink
            await settle(
                lambda: time.monotonic() - down_at >= OUTAGE_S, timeout=OUTAGE_S, interval=0.5, what="45 s of outage"
            )
            assert time.monotonic() - ok_at > 1.0 + 5.0  # hold-time passed well inside the outage
            assert hook.ids() == [] and mqtt.ids == [] and tap.event_ids() == []
            assert not await store_healthy(session, port)

            await asyncio.to_thread(pg.start_server)
            back_at, back_wall = time.monotonic(), time.time()
            await settle(lambda: store_healthy(session, port), timeout=60, what="writes resumed")
            await settle(lambda: len(set(hook.ids())) >= 2, timeout=60, what="the incident at the webhook")
            await settle(lambda: len(set(mqtt.ids)) >= 2, timeout=60, what="the incident over MQTT")
            await settle(lambda: len(set(tap.event_ids())) >= 2, timeout=60, what="the incident at Alertmanager")
            await settle(
                lambda: any(n["status"] == "resolved" for _, n, _ in am_out.got),
                timeout=30,
                what="Alertmanager's own resolved notification",
            )
    finally:
        feeding.set()
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 30)
        finally:
            if proc.poll() is None:
                proc.kill()
            am.proc.stop()
            await asyncio.gather(feeder, return_exceptions=True)
            await driver.close()
            for r in (hook, am_out):
                await r.close()
            await tap.close()
            await mqtt.close()
    assert proc.returncode == 0, out.read_text()[-3000:]
    outage = back_at - down_at

    # writes resumed within 3 s of Postgres' return, by the daemon's own log line, and the
    # outage it logs is the outage (give or take the first failed write and the 1 s probe), not
    # the retry wait
    lines = log_lines(out)
    [resumed] = [ln for ln in lines if ln["event"] == "postgres writes resumed"]
    assert wall(resumed["timestamp"]) - back_wall < RESUME_WITHIN_S, (resumed, back_wall)
    assert outage - 3.0 <= resumed["outage_s"] <= outage + 1.5, (resumed, outage)

    # exactly one opened and one resolved event, recorded late, at every sink
    bodies = {i: b for i, b, _ in hook.got}
    ids = list(dict.fromkeys(hook.ids()))
    assert [bodies[i]["event"] for i in ids] == ["opened", "resolved"], hook.got
    assert sorted(hook.ids()) == sorted(ids)  # each once
    assert mqtt.ids == ids  # the same events, in order, each once
    assert tap.event_ids() == ids
    opened, resolved = (bodies[i] for i in ids)
    assert opened["id"] == resolved["id"]
    assert opened["groups"] == {flaky: "ERR"} and resolved["groups"] == {flaky: "OK"}
    assert opened["summary"].startswith("recorded late") and resolved["summary"].startswith("recorded late")
    assert opened["at"] <= resolved["at"] and resolved["resolved_at"] > opened["opened_at"]
    assert resolved["at"] < back_wall * 1000  # resolved inside the outage, recorded after it

    # Alertmanager: the one alert, fired and resolved, and it told its receiver so
    posted = [a for _, alerts, _ in tap.got for a in alerts]
    assert {a["labels"]["incident_id"] for a in posted} == {opened["id"]}
    notified = [(n["status"], a["labels"]["incident_id"]) for _, n, _ in am_out.got for a in n["alerts"]]
    assert notified[-1] == ("resolved", opened["id"]), notified
    assert {i for _, i in notified} == {opened["id"]}


def statuses_recorded(url: str, prefix: str) -> bool:
    """Both groups' retained statuses are in the outbox (the notifier leads the cluster)."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(DISTINCT topic) FROM outbox WHERE retain AND topic LIKE %s", (f"{prefix}/sim/groups/%",)
            )
            return int(cur.fetchone()[0]) == 2
    finally:
        conn.close()


async def not_(awaitable: Awaitable[bool]) -> bool:
    return not await awaitable
