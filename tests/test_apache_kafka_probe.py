"""The end-to-end probe on a three-broker Apache Kafka: a broker killed is named within two probe
intervals, and becomes the incident member `broker:<cluster>/<id>`; back, it reads OK and the
incident resolves.

Real parts: three KRaft broker/controller JVMs (tests.test_apache_kafka_failover's `kafka_trio`),
PostgreSQL and the daemon itself (in this process, incidents on, MQTT off: they are read back from
its API). Each round kills another broker (SIGKILL) and starts it again; PROBE_TEST_ROUNDS (default
1) sets how many rounds run on the module's one cluster: each round is a new run of lagd on the
canary topic earlier rounds wrote to, which must read none of it back nor count it lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg2
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lagd.core.config import Settings, parse
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from tests.test_apache_kafka import Lagd, lagd_running
from tests.test_apache_kafka_failover import BROKERS, kafka_trio  # noqa: F401 (the module's cluster fixture)
from tests.test_notify_without_mqtt import recorded

pytestmark = pytest.mark.slow

INTERVAL_S = 2.0
TIMEOUT_S = 1.5
TOPIC = "__lagd_probe_test"
ROUNDS = int(os.environ.get("PROBE_TEST_ROUNDS", "1"))
_STATUS = re.compile(r'^lagd_probe_broker_status\{cluster="real",broker="(\d+)",status="(\w+)"\} 1$', re.M)


def probe_settings(cluster: KafkaCluster, database_url: str, port: int) -> Settings:
    return parse(
        {
            "clusters": {
                "real": {
                    "bootstrap-servers": cluster.bootstrap.split(","),
                    "offsets-source": "topic",
                    "offset-refresh": 1.0,
                    "probe": True,
                    "probe-topic": TOPIC,
                    "probe-interval": INTERVAL_S,
                    "probe-timeout": TIMEOUT_S,
                }
            },
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": {"mqtt-enabled": False, "severity": "ERR", "hold-time": 2.0, "update-interval": 0.5},
        },
        env={},
    )


async def statuses(lagd: Lagd) -> dict[int, str]:
    """broker -> its probe status, as /metrics shows it."""
    _, text = await lagd.get("/metrics")
    return {int(b): s for b, s in _STATUS.findall(text)}


async def incidents_with(lagd: Lagd, member: str) -> list[dict[str, Any]]:
    _, body = await lagd.get("/lagd/v1/incidents?cluster=real")
    return [i for i in body["incidents"] if member in i["body"].get("groups", {})]


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str, poll: float = 0.1) -> float:
    """Seconds until `check` answers truthy (polled every `poll` s), else fail naming `what`."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not {what} within {timeout:.0f} s")
        await asyncio.sleep(poll)


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_a_killed_broker_is_named_by_the_probe_and_is_one_incident_member_until_back(
    kafka_trio: KafkaCluster,  # noqa: F811
    database_url: str,
    round_: int,
) -> None:
    victim = kafka_trio.nodes[round_ % BROKERS]
    member = f"broker:real/{victim.node_id}"
    others = [n.node_id for n in kafka_trio.nodes if n is not victim]
    # a topic whose partition 0 only the victim holds (it leads it) and partition 1 another broker
    led_topic = f"lagd_cause_{round_}_{os.getpid()}"
    await create_assigned_topic(kafka_trio.bootstrap, led_topic, {0: [victim.node_id], 1: [others[0]]})
    async with lagd_running(probe_settings(kafka_trio, database_url, free_port())) as lagd:

        async def all_ok() -> bool:
            return await statuses(lagd) == {n.node_id: "OK" for n in kafka_trio.nodes}

        await until(all_ok, 90, "every broker OK by the probe")
        # rounds after the first start on a topic earlier runs wrote to: none of that is read or lost
        _, text = await lagd.get("/metrics")
        assert sorted(re.findall(r'^lagd_probe_lost\{cluster="real",broker="(\d+)"\} 0$', text, re.M)) == [
            str(n.node_id) for n in kafka_trio.nodes
        ], text[text.find("lagd_probe_") :]
        seen_others: set[str] = set()
        await asyncio.to_thread(kafka_trio.kill_node, victim, signal.SIGKILL)
        killed = time.monotonic()

        async def named() -> bool:
            now = await statuses(lagd)
            seen_others.update(now.get(b, "absent") for b in others)
            return now.get(victim.node_id) == "NOT_TAKING_WRITES"

        await until(named, 30, f"broker {victim.node_id} NOT_TAKING_WRITES")
        took = time.monotonic() - killed
        print(f"round {round_}: broker {victim.node_id} named NOT_TAKING_WRITES {took:.2f} s after the kill")
        assert took <= 2 * INTERVAL_S, f"named after {took:.2f} s, more than two probe intervals"

        async def opened() -> bool:
            found = await incidents_with(lagd, member)
            return any(i["state"] == "open" and i["body"]["groups"][member] == "ERR" for i in found)

        await until(opened, 30, f"an open incident with member {member}")
        (incident,) = [i for i in await incidents_with(lagd, member) if i["state"] == "open"]
        # one incident per cause: the broker's member carries, stored, the partitions it led
        # before the kill (the log-end sampler's metadata), which groups bad on them join by
        led = await until_led(database_url, member)
        assert [led_topic, 0] in led and [led_topic, 1] not in led, led
        if len(incident["body"]["groups"]) == 1:  # alone in it: the reason is the probe's
            assert incident["reason"].startswith(f"broker {victim.node_id} of real not taking writes")
        assert seen_others <= {"OK", "SLOW"}, f"the other brokers while {victim.node_id} was down: {seen_others}"

        await asyncio.to_thread(kafka_trio.start_node, victim)
        back = time.monotonic()

        async def ok_again() -> bool:
            return (await statuses(lagd)).get(victim.node_id) == "OK"

        await until(ok_again, 120, f"broker {victim.node_id} OK again", poll=0.5)
        print(f"round {round_}: broker {victim.node_id} OK {time.monotonic() - back:.1f} s after its restart")

        async def resolved() -> bool:
            found = await incidents_with(lagd, member)
            return bool(found) and all(i["state"] == "resolved" for i in found)

        await until(resolved, 60, f"the incident of {member} resolved", poll=0.5)
        (done,) = await incidents_with(lagd, member)
        assert done["id"] == incident["id"]


async def test_a_restart_while_a_broker_is_down_keeps_its_incident_open_until_it_is_back(
    kafka_trio: KafkaCluster,  # noqa: F811
    database_url: str,
) -> None:
    """lagd restarted while a broker is down: the broker's incident stays open through the restart and
    resolves once the broker is back: opened and resolved, one incident, nothing between. (The new
    run's notifier replays the current verdicts only once every canary broker has one, else it would
    take the down broker for gone: tests/test_probe.py holds that; here the notifier's lease came
    after the probe's first verdicts in every run tried, with that wait removed too.)"""
    victim = kafka_trio.nodes[-1]
    member = f"broker:real/{victim.node_id}"
    hold = {"hold-time": 0.5}  # a member taken for gone would resolve its incident within a second
    settings = probe_settings(kafka_trio, database_url, free_port())
    async with lagd_running(replace_notify(settings, hold)) as lagd:
        await until(lambda: _all_ok(lagd, kafka_trio), 90, "every broker OK by the probe")
        await asyncio.to_thread(kafka_trio.kill_node, victim, signal.SIGKILL)
        await until(lambda: _open(lagd, member), 30, f"an open incident with member {member}")
    token = await _saved_by(database_url)
    resolved_early: list[dict[str, Any]] = []
    try:
        async with lagd_running(replace_notify(probe_settings(kafka_trio, database_url, free_port()), hold)) as lagd:

            async def named_again() -> bool:
                resolved_early.extend(i for i in await incidents_with(lagd, member) if i["state"] != "open")
                return (await statuses(lagd)).get(victim.node_id) == "NOT_TAKING_WRITES"

            await until(named_again, 30, f"broker {victim.node_id} named again after the restart")
            # this run's notifier has replayed the current verdicts into the stored incidents (its
            # first record carries its own token)
            await until(lambda: _saved_by_other(database_url, token), 30, "the new run's first incident record")
            resolved_early.extend(i for i in await incidents_with(lagd, member) if i["state"] != "open")
            assert not resolved_early, f"resolved while the broker was down: {resolved_early}"
            await asyncio.to_thread(kafka_trio.start_node, victim)

            async def resolved() -> bool:
                found = await incidents_with(lagd, member)
                return bool(found) and all(i["state"] == "resolved" for i in found)

            await until(resolved, 90, f"the incident of {member} resolved", poll=0.5)
    finally:
        await asyncio.to_thread(kafka_trio.start_node, victim)  # a no-op when it runs
    events = [e for e in recorded(database_url) if member in e["groups"]]
    assert [e["event"] for e in events] == ["opened", "resolved"], events
    assert len({e["id"] for e in events}) == 1


async def create_assigned_topic(bootstrap: str, name: str, replicas: dict[int, list[int]]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, -1, -1, replica_assignments=replicas)])
    finally:
        await admin.close()


async def until_led(database_url: str, member: str, timeout: float = 30) -> list[list[Any]]:
    """The partitions the stored incident member `member` led when it went bad, once stored."""

    def read() -> list[list[Any]] | None:
        with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
            cur.execute("SELECT body FROM incident_members WHERE cluster = 'real' AND member = %s", (member,))
            rows = [r[0] for r in cur.fetchall()]
        return next((r["led"] for r in rows if r.get("led")), None)

    found: list[list[Any]] = []

    async def stored() -> bool:
        found[:] = await asyncio.to_thread(read) or []
        return bool(found)

    await until(stored, timeout, f"{member} stored with the partitions it led")
    return found


def replace_notify(settings: Settings, notify: dict[str, Any]) -> Settings:
    return dataclasses.replace(
        settings, notify=dataclasses.replace(settings.notify, **{k.replace("-", "_"): v for k, v in notify.items()})
    )


async def _all_ok(lagd: Lagd, cluster: KafkaCluster) -> bool:
    return await statuses(lagd) == {n.node_id: "OK" for n in cluster.nodes}


async def _open(lagd: Lagd, member: str) -> bool:
    return any(i["state"] == "open" for i in await incidents_with(lagd, member))


def _saved_by_sync(database_url: str) -> str | None:
    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT state->>'saved_by' FROM incident_engine_state WHERE cluster = 'real'")
        row = cur.fetchone()
        return None if row is None else row[0]


async def _saved_by(database_url: str) -> str | None:
    """The token of the notifier that last recorded the cluster's incident state."""
    return await asyncio.to_thread(_saved_by_sync, database_url)


async def _saved_by_other(database_url: str, token: str | None) -> bool:
    return await _saved_by(database_url) not in (None, token)
