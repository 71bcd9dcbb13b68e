"""lagd run with MQTT off: one incident that grows, shrinks and resolves reaches a webhook, a
real Alertmanager and Slack as one alert (one thread of messages) of stable identity, and
every step of it is a JSON line in lagd's log.

Real parts: `lagd run` as its own process (JSON log to a file), the shared Tansu broker,
PostgreSQL, and Alertmanager (Debian prometheus-alertmanager, started here with a webhook
receiver, so the test sees what Alertmanager itself sends on, resolves included). LABELLED
STAND-INS: the webhook receiver, the Slack incoming webhook and the receiver of
Alertmanager's own notifications are local aiohttp servers of the test
(tests/test_notify_sinks.Receiver); Slack cannot run here.

The incident, driven through the offsets topic by the simulator: group A falls behind (WARN:
the incident opens), group B, named with Slack's control sequences, stalls (ERR joins: it
grows), B catches up (back to WARN: it shrinks), A catches up (it resolves after hold-time).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psycopg2
import pytest

from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.test_notify_sinks import Receiver, start_alertmanager
from tests.test_restart import SCALED_EVALUATOR, _ready

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SLACK_CONTROL = "<!channel>&<@U1>"


def lagd_toml(cluster: str, kafka: str, offsets_topic: str, database_url: str, port: int, urls: dict[str, str]) -> str:
    # stop-after 10 s (STALL after 5 s): a commit round of the simulator late on a loaded machine
    # must not read as a stopped consumer
    evaluator = "\n".join(f"{k} = {v}" for k, v in {**SCALED_EVALUATOR, "stop-after": 10.0}.items())
    return f"""
[clusters.{cluster}]
bootstrap-servers = ["{kafka}"]
offsets-topic = "{offsets_topic}"
offset-refresh = 0.5
topic-refresh = 2.0

[storage]
database-url = "{database_url}"
flush-interval = 0.2

[evaluator]
cache-ttl = 0.2
{evaluator}

[http]
listen = "127.0.0.1:{port}"

[notify]
mqtt-enabled = false
severity = "WARN"
hold-time = 1.0
update-interval = 0.5
publish-interval = 0.1
status-page-url = "http://127.0.0.1:{port}/"

[sinks.hook]
kind = "webhook"
url = "{urls["hook"]}"
retry-initial = 0.1
retry-max = 0.5

[sinks.slack]
kind = "slack"
url = "{urls["slack"]}"
retry-initial = 0.1
retry-max = 0.5

[sinks.am]
kind = "alertmanager"
url = "{urls["am"]}"
alert-ttl = 120.0
"""


# Alertmanager sends on at once and every second after a change, resolves included.
AM_CONFIG = """
route:
  receiver: test
  group_by: [incident_id]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: "{url}"
        send_resolved: true
"""


def recorded(database_url: str) -> list[dict[str, Any]]:
    """Every incident event in the outbox, in order."""
    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT payload FROM outbox WHERE NOT retain ORDER BY id")
        return [dict(row[0]) for row in cur.fetchall()]


def log_lines(path: Path) -> list[dict[str, Any]]:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines]


def when(rfc3339: str) -> datetime:
    """A time as Alertmanager writes it (Go's RFC 3339: "Z", up to nine fractional digits)."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def check_config(config: Path, env: dict[str, str]) -> str:
    """`lagd check-config`'s complaint ("" when the file is good)."""
    r = subprocess.run(
        [sys.executable, "-m", "lagd", "check-config", str(config)], env=env, capture_output=True, text=True
    )
    return "" if r.returncode == 0 else r.stderr or r.stdout


def start_lagd(config: Path, env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    """`lagd run` as a process of its own, its log (JSON lines) to `out`."""
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "lagd", "run", "--config", str(config)], env=env, stdout=sink, stderr=sink, cwd=ROOT
        )


async def active_alerts(session: aiohttp.ClientSession, am_url: str, cluster: str) -> list[dict[str, Any]]:
    params = {"filter": f'cluster="{cluster}"'}
    async with session.get(f"{am_url}/api/v2/alerts", params=params) as resp:
        assert resp.status == 200, await resp.text()
        found: list[dict[str, Any]] = await resp.json()
        return found


async def test_an_incident_that_grows_shrinks_and_resolves_is_one_alert_at_every_sink_without_mqtt(
    kafka: str, database_url: str, unique: str, tmp_path: Path, settle: Settle
) -> None:
    cluster = f"c{unique}"
    topic, offsets_topic = f"events-{unique}", f"__consumer_offsets_{unique}"
    slow, hostile = f"slow-{unique}", f"{SLACK_CONTROL}-{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=10.0),),
        groups=(GroupSpec(slow, (topic,), "lagging", speed=0.5), GroupSpec(hostile, (topic,), "healthy")),
        start_ms=int(time.time() * 1000),
    )
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    stop_driver = asyncio.Event()
    ticker = asyncio.create_task(driver.run(until=10_000.0, stop=stop_driver))
    hook, slack, am_out = await Receiver().open(), await Receiver(failing=True).open(), await Receiver().open()
    am = start_alertmanager(AM_CONFIG.format(url=am_out.url))
    port = free_port()
    config = tmp_path / "lagd.toml"
    config.write_text(
        lagd_toml(
            cluster, kafka, offsets_topic, database_url, port, {"hook": hook.url, "slack": slack.url, "am": am.url}
        )
    )
    out = tmp_path / "lagd.log"
    env = {**os.environ, "LAGD_LOG_FORMAT": "json", "LAGD_LOG_LEVEL": "info"}
    assert check_config(config, env) == ""
    proc = start_lagd(config, env, out)
    seen_alerts: list[int] = []  # how many alerts Alertmanager shows for the cluster while the incident is open

    async def watch_alertmanager(session: aiohttp.ClientSession) -> None:
        """Look at Alertmanager until the resolve is recorded; a look taken while it was being
        recorded does not count (the alert may rightly be gone by then)."""
        while not await resolved():
            n = len(await active_alerts(session, am.url, cluster))
            if not await resolved():
                seen_alerts.append(n)
            await asyncio.sleep(0.2)  # the observer's cadence, not synchronisation

    def behave(**groups: GroupSpec) -> None:
        """Change what the groups do from the simulator's next tick on."""
        specs = {g.name: g for g in driver.scenario.groups} | {g.name: g for g in groups.values()}
        driver.scenario = dataclasses.replace(driver.scenario, groups=tuple(specs.values()))

    async def events() -> list[dict[str, Any]]:
        # off the loop: the simulator's commits must not wait behind the test's looks
        return await asyncio.to_thread(recorded, database_url)

    async def resolved() -> bool:
        return any(e["event"] == "resolved" for e in await events())

    seen = 0  # events the stages so far have looked at: each stage looks past them

    async def stage(what: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60) -> None:
        """Wait for an event after the previous stage's that `predicate` accepts."""
        nonlocal seen

        async def found() -> int | None:
            later = (await events())[seen:]
            return next((seen + i + 1 for i, e in enumerate(later) if predicate(e)), None)

        seen = await settle(found, timeout=timeout, interval=0.2, what=what)

    def failed_delivery_logged() -> bool:
        return any("sink delivery failed" in ln for ln in out.read_text().splitlines())

    watcher: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=60, what="lagd ready")
            # A falls behind: the incident opens (WARN); Slack answers 503 at first
            await stage("the incident opened", lambda e: e["event"] == "opened", timeout=90)
            await settle(lambda: active_alerts(session, am.url, cluster), timeout=60, what="the alert in Alertmanager")
            watcher = asyncio.create_task(watch_alertmanager(session))
            await settle(lambda: asyncio.to_thread(failed_delivery_logged), timeout=60, what="a failed delivery")
            slack.failing = False
            # B stalls: ERR joins, the incident grows
            behave(b=GroupSpec(hostile, (topic,), "stalled", at=driver.t + 1))
            await stage("grown to ERR", lambda e: e["severity"] == "ERR" and hostile in e["groups"])
            # B catches up: the incident shrinks back to WARN
            behave(b=GroupSpec(hostile, (topic,), "healthy"))
            await stage("shrunk to WARN", lambda e: e["event"] == "updated" and e["severity"] == "WARN")
            # A catches up: the incident resolves after hold-time
            behave(a=GroupSpec(slow, (topic,), "healthy"))
            await stage("the incident resolved", lambda e: e["event"] == "resolved")
            want = [e["event_id"] for e in await events()]
            for receiver in (hook, slack):
                await settle(lambda r=receiver: len(r.got) >= len(want), timeout=60, what="every event delivered")

            async def alert_gone() -> bool:
                return not await active_alerts(session, am.url, cluster)

            await settle(alert_gone, timeout=60, what="the alert resolved in Alertmanager")
            await settle(
                lambda: any(n["status"] == "resolved" for _, n, _ in am_out.got),
                timeout=30,
                what="Alertmanager's resolve",
            )
            await watcher
    finally:
        if watcher is not None and not watcher.done():
            watcher.cancel()
        stop_driver.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            am.proc.stop()
            await asyncio.wait_for(ticker, 10)
            await driver.close()
            for r in (hook, slack, am_out):
                await r.close()
    assert proc.returncode == 0, out.read_text()[-3000:]

    # one incident: opened, updated while it grew and shrank, resolved
    evs = recorded(database_url)
    incident = evs[0]["id"]
    assert {e["id"] for e in evs} == {incident}
    assert evs[0]["event"] == "opened" and evs[-1]["event"] == "resolved"
    assert [e["event"] for e in evs].count("resolved") == 1
    severities = [e["severity"] for e in evs[:-1]]
    assert severities[0] == "WARN" and "ERR" in severities and severities[-1] == "WARN", severities
    want = [e["event_id"] for e in evs]

    # webhook: every event once, in order, all of one incident
    assert hook.ids() == want
    assert {b["id"] for _, b, _ in hook.got} == {incident}

    # Slack: every event once, in order, each naming the incident; the hostile group escaped
    assert slack.ids() == want
    texts = [b["text"] for _, b, _ in slack.got]
    assert all(f"incident `{incident}`" in t for t in texts)
    assert sum(t.startswith(":white_check_mark: *Resolved*") for t in texts) == 1 and texts[-1].startswith(":white")
    assert any("&lt;!channel&gt;&amp;&lt;@U1&gt;" in t for t in texts)
    assert not any("<!" in t or "<@" in t for t in texts)
    assert all(f"<http://127.0.0.1:{port}/#incident-{incident}|Status page>" in t for t in texts)

    # Alertmanager: never more than one alert for the cluster, and the one it showed and sent on
    # had the same labels from first to last; resolved only by lagd's resolve
    assert seen_alerts and set(seen_alerts) == {1}, seen_alerts  # one alert, never resolved early
    sent_on = [a for _, n, _ in am_out.got for a in n["alerts"]]
    assert {json.dumps(a["labels"], sort_keys=True) for a in sent_on} == {
        json.dumps({"alertname": "LagdIncident", "cluster": cluster, "incident_id": incident}, sort_keys=True)
    }
    resolved_at = datetime.fromtimestamp(evs[-1]["at"] / 1000, UTC)
    assert all(when(a["endsAt"]) >= resolved_at for a in sent_on if a["status"] == "resolved"), sent_on
    assert sent_on[-1]["status"] == "resolved"
    assert all(a["generatorURL"] == f"http://127.0.0.1:{port}/#incident-{incident}" for a in sent_on)

    # the log: every incident event, every status change of A and B, the failed delivery
    lines = log_lines(out)
    incident_lines = [ln for ln in lines if ln["event"].startswith("incident ") and ln.get("incident_id") == incident]
    assert [ln["event_id"] for ln in incident_lines] == want
    assert [ln["event"] for ln in incident_lines] == [f"incident {e['event']}" for e in evs]
    for ln in incident_lines:
        assert ln["level"] == "info" and ln["cluster"] == cluster and ln["status"] in ("WARN", "ERR") and ln["reason"]
    changes = [(ln["group"], ln["status"]) for ln in lines if ln["event"] == "group status changed"]
    of_slow, of_hostile = [s for g, s in changes if g == slow], [s for g, s in changes if g == hostile]
    assert of_slow[0] == "WARN" and of_slow[-1] == "OK", changes
    assert "ERR" in of_hostile and of_hostile[-1] == "OK", changes
    assert all(ln["cluster"] == cluster and ln["reason"] for ln in lines if ln["event"] == "group status changed")
    failed = [ln for ln in lines if ln["event"].startswith("sink delivery failed")]
    assert failed and failed[0]["level"] == "warning" and failed[0]["sink"] == "slack"
    assert failed[0]["incident_id"] == incident and failed[0]["event_id"] == want[0] and failed[0]["cluster"] == cluster
    leases = [ln for ln in lines if ln["event"] == "notify leadership acquired" and "sink" in ln]
    assert {ln["sink"] for ln in leases} == {"hook", "slack", "am"} and not any("cluster" in ln for ln in leases)
    assert not any(ln.get("sink") == "mqtt" for ln in lines)  # MQTT off: not even tried
