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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import psycopg2
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lagd.core.config import Settings, parse
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from tests.kafka_groups import Traffic, consume_and_commit, consume_behind, produce_steadily
from tests.test_apache_kafka import Lagd, lagd_running
from tests.test_apache_kafka_failover import BROKERS, kafka_trio  # noqa: F401 (the module's cluster fixture)
from tests.test_notify_without_mqtt import recorded

pytestmark = pytest.mark.slow

INTERVAL_S = 2.0
TIMEOUT_S = 1.5
TOPIC = "__lagd_probe_test"
ROUNDS = int(os.environ.get("PROBE_TEST_ROUNDS", "1"))
# The groups' judgement, scaled for a test as tests.test_apache_kafka_failover's is, and for the
# same reason with a 40 s stop-after: every group's commits (and their reading by lagd) pause for
# the 6-9 s the cluster takes to fence the killed broker, plus up to 13 s of lagd's own; STALL
# (half of stop-after) and STOP must lie above that, or the control group, not the victim's
# fault, would go ERR with the kill rather than when its consumer stops. pause-learn 0: a new
# group is judged at stop-after, not the 120 s default for groups never seen pausing. window-step
# 5 s: the windows (10 commits) reach back past the 20 s a stall must last.
GROUP_EVALUATOR = {"stop-after": 40.0, "pause-learn": 0.0, "window-step": 5.0, "allowed-lag-seconds": 5.0}
BEHIND_S = 2.0  # how far the victim's group trails its log end (within allowed-lag-seconds: OK)
_STATUS = re.compile(r'^lagd_probe_broker_status\{cluster="real",broker="(\d+)",status="(\w+)"\} 1$', re.M)


def probe_settings(cluster: KafkaCluster, database_url: str, port: int, groups: str = "^$") -> Settings:
    """`groups`: the groups lagd judges (groups-allow), a test's own only: an earlier test's group
    on this cluster, judged by a later lagd, could join a broker's incident."""
    return parse(
        {
            "clusters": {
                "real": {
                    "bootstrap-servers": cluster.bootstrap.split(","),
                    "groups-allow": groups,
                    "offsets-source": "topic",
                    "offset-refresh": 1.0,
                    "probe": True,
                    "probe-topic": TOPIC,
                    "probe-interval": INTERVAL_S,
                    "probe-timeout": TIMEOUT_S,
                }
            },
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2, **GROUP_EVALUATOR},
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
    """Also: a real group lagging on a partition only the victim held joins the broker's incident
    (never one of its own), and a group stopped in the same minutes on a topic of the other brokers
    opens an incident of its own; back, the broker, the groups and both incidents are OK again."""
    victim = kafka_trio.nodes[round_ % BROKERS]
    member = f"broker:real/{victim.node_id}"
    others = [n.node_id for n in kafka_trio.nodes if n is not victim]
    # a topic whose partition 0 only the victim holds (it leads it) and partition 1 another broker
    led_topic = f"lagd_cause_{round_}_{os.getpid()}"
    await create_assigned_topic(kafka_trio.bootstrap, led_topic, {0: [victim.node_id], 1: [others[0]]})
    own_topic = f"lagd_own_{round_}_{os.getpid()}"  # led by the other brokers only
    await create_assigned_topic(kafka_trio.bootstrap, own_topic, {0: [others[0]], 1: [others[1]]})
    prefix = f"lagd-kill-{round_}-{os.getpid()}-"
    led_group, own_group = f"{prefix}led", f"{prefix}own"
    clients = Clients(kafka_trio.bootstrap)
    clients.start(produce_steadily, led_topic, 2)
    clients.start(produce_steadily, own_topic, 2)
    clients.start(consume_behind, led_topic, led_group, behind_s=BEHIND_S)
    own_stop = clients.start(consume_and_commit, own_topic, own_group)
    settings = probe_settings(kafka_trio, database_url, free_port(), groups=f"^{re.escape(prefix)}")
    try:
        async with lagd_running(settings) as lagd:
            await until(lambda: _all_ok(lagd, kafka_trio), 90, "every broker OK by the probe")
            # rounds after the first start on a topic earlier runs wrote to: none of that is read or lost
            _, text = await lagd.get("/metrics")
            assert sorted(re.findall(r'^lagd_probe_lost\{cluster="real",broker="(\d+)"\} 0$', text, re.M)) == [
                str(n.node_id) for n in kafka_trio.nodes
            ], text[text.find("lagd_probe_") :]
            await until(lambda: _groups_ok(lagd, [led_group, own_group]), 90, "both groups judged OK")
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
            # unrelated trouble in the same minutes: the other group's consumer stops now
            await clients.stop(own_stop)
            # one incident per cause: the broker's member carries, stored, the partitions it led
            # before the kill (the log-end sampler's metadata), which groups bad on them join by
            led = await until_led(database_url, member)
            assert [led_topic, 0] in led and [led_topic, 1] not in led, led
            assert not {own_topic} & {t for t, _ in led}, led
            if len(incident["body"]["groups"]) == 1:  # alone in it: the reason is the probe's
                assert incident["reason"].startswith(f"broker {victim.node_id} of real not taking writes")

            async def led_group_joined() -> bool:
                found = await incidents_with(lagd, led_group)
                return any(i["body"]["groups"][led_group] == "ERR" for i in found)

            await until(led_group_joined, 90, f"{led_group} ERR in an incident")
            print(f"round {round_}: {led_group} ERR in an incident {time.monotonic() - killed:.1f} s after the kill")
            (joined,) = await incidents_with(lagd, led_group)
            assert joined["id"] == incident["id"] and joined["state"] == "open", (joined, incident)
            stalled = await _bad_partitions(lagd, led_group)
            assert (led_topic, 0) in stalled, stalled

            async def own_group_opened() -> bool:
                return any(i["body"]["groups"][own_group] == "ERR" for i in await incidents_with(lagd, own_group))

            await until(own_group_opened, 90, f"{own_group} ERR in an incident")
            print(f"round {round_}: {own_group} ERR in an incident {time.monotonic() - killed:.1f} s after the kill")
            (own,) = await incidents_with(lagd, own_group)
            assert own["id"] != incident["id"] and member not in own["body"]["groups"], (own, incident)
            assert seen_others <= {"OK", "SLOW"}, f"the other brokers while {victim.node_id} was down: {seen_others}"

            await asyncio.to_thread(kafka_trio.start_node, victim)
            back = time.monotonic()

            async def ok_again() -> bool:
                return (await statuses(lagd)).get(victim.node_id) == "OK"

            await until(ok_again, 120, f"broker {victim.node_id} OK again", poll=0.5)
            print(f"round {round_}: broker {victim.node_id} OK {time.monotonic() - back:.1f} s after its restart")
            clients.start(consume_and_commit, own_topic, own_group)  # the other group's consumer back
            await until(lambda: _groups_ok(lagd, [led_group, own_group]), 90, "both groups OK again", poll=0.5)
            print(f"round {round_}: both groups OK {time.monotonic() - back:.1f} s after the restart")

            async def resolved() -> bool:
                found = await incidents_with(lagd, member) + await incidents_with(lagd, own_group)
                return len(found) == 2 and all(i["state"] == "resolved" for i in found)

            await until(resolved, 60, f"the incidents of {member} and {own_group} resolved", poll=0.5)
            (done,) = await incidents_with(lagd, member)
            assert done["id"] == incident["id"] and led_group in done["body"]["groups"], done
            # the groups left caught up: no later test's lagd finds them with records waiting
            await clients.stop_producers()
            await until(lambda: _caught_up(lagd, [led_group, own_group]), 60, "both groups caught up", poll=0.5)
    finally:
        await clients.stop_all()
    events = recorded(database_url)
    assert {e["id"] for e in events if led_group in e["groups"]} == {incident["id"]}, events
    broker_events = [e for e in events if member in e["groups"]]
    assert {e["id"] for e in broker_events} == {incident["id"]}, broker_events
    assert (broker_events[0]["event"], broker_events[-1]["event"]) == ("opened", "resolved"), broker_events
    cause = f"broker {victim.node_id} of real not taking writes"  # resolved, the group counted, not the broker
    assert broker_events[-1]["summary"].startswith(f"resolved: {cause}: 1 consumer group healthy again"), broker_events
    own_events = [e for e in events if own_group in e["groups"]]
    assert {e["id"] for e in own_events} == {own["id"]}, own_events
    assert (own_events[0]["event"], own_events[-1]["event"]) == ("opened", "resolved"), own_events
    assert not [e for e in own_events if member in e["groups"] or led_group in e["groups"]], own_events


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


class Clients:
    """The round's real clients, each a task with its own stop, on one Traffic."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.traffic = Traffic()
        self.tasks: dict[asyncio.Event, asyncio.Task[None]] = {}
        self.producers: list[asyncio.Event] = []

    def start(self, client: Callable[..., Coroutine[Any, Any, None]], *args: Any, **kw: Any) -> asyncio.Event:
        """`client(bootstrap, *args, stop, traffic, **kw)` running; its stop returned."""
        stop = asyncio.Event()
        self.tasks[stop] = asyncio.create_task(client(self.bootstrap, *args, stop, self.traffic, **kw))
        if client is produce_steadily:
            self.producers.append(stop)
        return stop

    async def stop(self, stop: asyncio.Event) -> None:
        stop.set()
        await asyncio.wait_for(self.tasks.pop(stop), 60)

    async def stop_producers(self) -> None:
        for stop in self.producers:
            if stop in self.tasks:
                await self.stop(stop)

    async def stop_all(self) -> None:
        """Every client stopped, the producers first (a failure raised once all are)."""
        await self.stop_producers()
        for stop in self.tasks:
            stop.set()
        tasks, self.tasks = list(self.tasks.values()), {}
        for failed in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(failed, BaseException):
                raise failed


async def _group_status(lagd: Lagd, group: str) -> dict[str, Any]:
    code, body = await lagd.get(f"/v3/kafka/real/consumer/{group}/status")
    return body["status"] if code == 200 else {}


async def _groups_ok(lagd: Lagd, groups: list[str]) -> bool:
    """Each of `groups` judged OK on both its partitions."""
    for group in groups:
        status = await _group_status(lagd, group)
        if status.get("status") != "OK" or status.get("partition_count") != 2:
            return False
    return True


async def _bad_partitions(lagd: Lagd, group: str) -> dict[tuple[str, int], str]:
    status = await _group_status(lagd, group)
    return {(p["topic"], p["partition"]): p["status"] for p in status.get("partitions", [])}


async def _caught_up(lagd: Lagd, groups: list[str]) -> bool:
    for group in groups:
        parts = await lagd.partitions(group)
        if len(parts) != 2 or any(p["current_lag"] != 0 for p in parts.values()):
            return False
    return True
