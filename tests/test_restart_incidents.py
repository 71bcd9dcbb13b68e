"""End to end: a restart (SIGTERM or kill -9) neither resolves an open incident nor clears a
retained status; the incident goes on and resolves when its groups recover (issue 50).

Real parts only: the Tansu broker, the simulator writing byte-exact commits into an offsets
topic of this test's own, PostgreSQL, Mosquitto, and lagd as a real `lagd run` process that
the test stops with SIGTERM or SIGKILL and starts again. A subscriber records every incident
event and retained group status as MQTT delivers them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiomqtt
import pytest

from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow
# the lagging group is WARN, or ERR (STOP) where a loaded host delays the simulator's commits
# past stop-after; either way bad, in the incident
BAD = {"WARN", "ERR"}


@dataclasses.dataclass(frozen=True)
class Message:
    topic: str
    body: dict[str, Any] | None  # None: an empty retained message (the topic's status cleared)


class Subscriber:
    """Every incident event and group status under a prefix, as MQTT delivers them (QoS 1)."""

    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.got: list[Message] = []
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client(self.host, self.port) as client:
                await client.subscribe(f"{self.prefix}/+/incidents/#", qos=1)
                await client.subscribe(f"{self.prefix}/+/groups/+/status", qos=1)
                self.ready.set()
                async for msg in client.messages:
                    assert isinstance(msg.payload, bytes)
                    self.got.append(Message(str(msg.topic), json.loads(msg.payload) if msg.payload else None))

    async def start(self) -> Subscriber:
        self.task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def close(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        return [m.body for m in self.got[since:] if "/incidents/" in m.topic and m.body is not None]

    def statuses(self, group: str, since: int = 0) -> list[dict[str, Any] | None]:
        return [m.body for m in self.got[since:] if m.topic.endswith(f"/groups/{group}/status")]


def write_config(
    path: Path, kafka: str, database_url: str, offsets_topic: str, port: int, prefix: str, mqtt: int
) -> None:
    path.write_text(
        f"""
[clusters.sim]
bootstrap-servers = ["{kafka}"]
offsets-topic = "{offsets_topic}"
offsets-source = "topic"
offset-refresh = 0.5
topic-refresh = 2.0

[storage]
database-url = "{database_url}"
intervals = 10
flush-interval = 0.2

[evaluator]
cache-ttl = 0.2
window-step = 0.0
min-history = 3.0
stop-after = 4.0
allowed-lag-seconds = 2.0

[http]
listen = "127.0.0.1:{port}"

[notify]
mqtt-url = "mqtt://127.0.0.1:{mqtt}"
topic-prefix = "{prefix}"
client-id = "{prefix}"
severity = "WARN"
hold-time = 1.0
update-interval = 0.5
publish-interval = 0.1

[log]
format = "json"
""",
        encoding="utf-8",
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_lagd(config: Path, log: Path, migrate: bool) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "lagd", "run", "--config", str(config)]
    if not migrate:
        argv.append("--no-migrate")
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT)


async def status_of(session: aiohttp.ClientSession, port: int, group: str) -> str | None:
    try:
        async with session.get(f"http://127.0.0.1:{port}/v3/kafka/sim/consumer/{group}/status") as answer:
            if answer.status != 200:
                return None
            body = await answer.json()
    except aiohttp.ClientError:
        return None
    return str(body["status"]["status"])


async def ready(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{port}/burrow/admin/ready") as answer:
            return answer.status == 200
    except aiohttp.ClientError:
        return False


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_restart_keeps_open_incidents_open_until_their_groups_recover(
    how: signal.Signals,
    kafka: str,
    database_url: str,
    mqtt_broker: tuple[str, int],
    unique: str,
    settle: Settle,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    topic, offsets_topic = f"events-{unique}", f"__consumer_offsets_{unique}"
    healthy, slow, stopped = f"ok-{unique}", f"slow-{unique}", f"stopped-{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=10.0),),
        groups=(
            GroupSpec(healthy, (topic,), "healthy"),
            GroupSpec(slow, (topic,), "lagging", speed=0.5),  # WARN: falls behind
            GroupSpec(stopped, (topic,), "stopped", at=2.0),  # ERR: STOP
        ),
        start_ms=int(time.time() * 1000),
    )
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    feeding = asyncio.Event()
    feeder = asyncio.create_task(driver.run(until=3600.0, stop=feeding))
    prefix = f"lagd-{unique}"
    sub = await Subscriber(*mqtt_broker, prefix).start()
    port = free_port()
    config, log = tmp_path / "lagd.toml", tmp_path / "lagd.log"
    write_config(config, kafka, database_url, offsets_topic, port, prefix, mqtt_broker[1])
    try:
        processes.append(start_lagd(config, log, migrate=True))
        async with aiohttp.ClientSession() as session:
            await settle(lambda: ready(session, port), timeout=60, what="lagd ready")

            def open_with_both() -> str | None:
                """The id of the open incident once its last event names both groups bad."""
                events = sub.events()
                if not events or events[-1]["event"] == "resolved":
                    return None
                last = events[-1]
                return str(last["id"]) if {last["groups"].get(slow), last["groups"].get(stopped)} <= BAD else None

            try:
                incident = await settle(open_with_both, timeout=90, what="one incident with both groups bad")
            except AssertionError as exc:  # what MQTT delivered and what lagd said, to tell why
                said = log.read_text(errors="replace").splitlines()[-30:]
                raise AssertionError(f"{exc}; events: {sub.events()[-3:]}; lagd: {said}") from None
            await settle(lambda: sub.statuses(stopped) and sub.statuses(slow), timeout=20, what="retained statuses")

            processes[-1].send_signal(how)
            assert processes[-1].wait(20) == (0 if how == signal.SIGTERM else -signal.SIGKILL)
            cut = len(sub.got)
            processes.append(start_lagd(config, log, migrate=False))
            await settle(lambda: ready(session, port), timeout=60, what="lagd ready after the restart")
            assert await status_of(session, port, slow) in BAD
            assert await status_of(session, port, stopped) == "ERR"
            # the restarted notifier catches up with the current verdicts: each group's retained
            # status is published again (before the fix: cleared, the group taken for gone)
            await settle(
                lambda: sub.statuses(slow, cut) and sub.statuses(stopped, cut),
                timeout=60,
                what="the groups' statuses published after the restart",
            )
            assert all(s and s["status"] in BAD for s in sub.statuses(slow, cut)), sub.statuses(slow, cut)
            assert [s and s["status"] for s in sub.statuses(stopped, cut)] == ["ERR"] * len(sub.statuses(stopped, cut))
            recovery = len(sub.got)

            # the groups recover: the lagging one catches up, the stopped one commits again
            groups = (
                GroupSpec(healthy, (topic,), "healthy"),
                GroupSpec(slow, (topic,), "recovering", speed=0.5, at=driver.t),
                GroupSpec(stopped, (topic,), "healthy"),
            )
            driver.scenario = dataclasses.replace(scenario, groups=groups)

            def resolved() -> list[dict[str, Any]]:
                return [e for e in sub.events(cut) if e["event"] == "resolved"]

            await settle(resolved, timeout=120, what="the incident resolved once its groups recovered")
            assert await status_of(session, port, slow) == "OK"
            assert await status_of(session, port, stopped) == "OK"
    finally:
        feeding.set()
        await asyncio.gather(feeder, return_exceptions=True)
        await driver.close()
        await sub.close()
    after = sub.events(cut)
    # nothing was resolved before the groups recovered, and what resolved is the same incident
    # with its groups OK: never NOTFOUND
    assert [
        e for e in sub.events(cut)[: len(sub.events(cut)) - len(sub.events(recovery))] if e["event"] == "resolved"
    ] == []
    assert {e["id"] for e in resolved()} == {incident}, after
    assert all("NOTFOUND" not in e["groups"].values() for e in after), after
    assert resolved()[0]["groups"] == {slow: "OK", stopped: "OK"}, resolved()
    # no retained status was cleared after the restart
    assert None not in sub.statuses(slow, cut) + sub.statuses(stopped, cut) + sub.statuses(healthy, cut)
