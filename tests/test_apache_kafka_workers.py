"""lagd's workers on Apache Kafka's own group protocol: SIGKILL one under real traffic.

Issue 49, "Workers on the real group protocol". Real parts only: Apache Kafka (the session's
one-node KRaft cluster, whose `__consumer_offsets` has 4 partitions and whose group
coordinator assigns them to the workers), aiokafka clients producing and committing steadily
(so every record lagd reads was written by Kafka's coordinator), PostgreSQL, Mosquitto, and
the real `lagd run` with `[scale] workers = 2`: one supervisor process starting two worker
processes (lagd.scale.processes), read over HTTP as a dashboard would.

The groups are named so that each of the 4 offsets partitions holds two healthy groups, and
one group that stops committing (an open incident) sits in partition 0: whichever assignor
splits the partitions, the worker that owns the stopped group owns healthy groups too. That
worker gets SIGKILL. Its groups must be judged again (each by exactly one live worker: the
survivor, or the worker the supervisor starts again a second later, whichever the rebalance
gives them to) within `scale.session-timeout` plus 5 s; no verdict may change (every healthy
group stays OK throughout, the stopped one ERR), and no incident event may be written again
(the outbox holds each event once, and none after the kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_low_port, port_open
from lagd.state.windows import offsets_partition
from tests.kafka_groups import (
    Traffic,
    commit_classic,
    consume_and_commit,
    create_topic,
    ensure_offsets_topic,
    produce,
    produce_steadily,
    topic_records,
)
from tests.postgres import query
from tests.test_apache_kafka_record_ts import COMMITTED, IDLE_S

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

SESSION_TIMEOUT_S = (
    6.0  # the brokers' minimum (group.min.session.timeout.ms): a killed worker's partitions move after this
)
TAKEOVER_BOUND_S = SESSION_TIMEOUT_S + 5.0  # issue 49: judged again within the session timeout plus 5 s
OFFSETS_PARTITIONS = 4  # the apache_kafka fixture's offsets topic (start_kafka's default)
HEALTHY_PER_PARTITION = 2
PARTITIONS = 2  # of the data topic
# lagd's rules with their time knobs in seconds, as in tests/test_workers.py, but stop-after 8 s
# rather than 4: the clients here are real aiokafka consumers on a shared 2-core machine, and
# a client of ours pausing longer than stop-after would be a true STOP (a test of our clients,
# not of lagd's takeover). The stopped group still turns ERR within seconds.
RECORDS = 20  # in the idle topic of the record-timestamp test (COMMITTED of them consumed)
EVALUATOR = {"window-step": 0.0, "min-history": 3.0, "stop-after": 8.0, "allowed-lag-seconds": 2.0}


def group_names(unique: str) -> tuple[list[str], str]:
    """Healthy groups, `HEALTHY_PER_PARTITION` in each offsets partition, and the stopped group, in partition 0."""
    healthy: list[str] = []
    for p in range(OFFSETS_PARTITIONS):
        found = (
            f"g{i}-{unique}" for i in range(10_000) if offsets_partition(f"g{i}-{unique}", OFFSETS_PARTITIONS) == p
        )
        healthy += [next(found) for _ in range(HEALTHY_PER_PARTITION)]
    stopped = next(
        f"stopped{i}-{unique}"
        for i in range(10_000)
        if offsets_partition(f"stopped{i}-{unique}", OFFSETS_PARTITIONS) == 0
    )
    return healthy, stopped


def config_text(cluster: KafkaCluster, database_url: str, port: int, unique: str, mqtt: int) -> str:
    evaluator = "\n".join(f"{k} = {v}" for k, v in EVALUATOR.items())
    return f"""
[clusters.real]
bootstrap-servers = {json.dumps(cluster.bootstrap.split(","))}
offsets-source = "topic"
offset-refresh = 0.5
topic-refresh = 2.0
# this test's groups only: the cluster is shared with other tests, whose groups change status
# on their own clock (stopped ones going STOP) and would open incidents during the takeover
groups-allow = "^.*-{unique}$"

[storage]
database-url = "{database_url}"
flush-interval = 0.2

[http]
listen = "127.0.0.1:{port}"

[evaluator]
cache-ttl = 0.2
{evaluator}

[notify]
mqtt-url = "mqtt://127.0.0.1:{mqtt}"
topic-prefix = "lagd-{unique}"
client-id = "lagd-{unique}"
correlation-window = 1.0

[scale]
workers = 2
group-id = "lagd-{unique}"
session-timeout = {SESSION_TIMEOUT_S}

[log]
format = "json"
"""


def worker_pids(supervisor: int) -> dict[int, int]:
    """HTTP port -> pid of each live worker the supervisor started (its children, from /proc)."""
    out: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != supervisor or fields[0] == "Z":
                continue
            env = (stat.parent / "environ").read_bytes().split(b"\0")
            listen = next(e for e in env if e.startswith(b"LAGD_HTTP_LISTEN="))
            out[int(listen.rpartition(b":")[2])] = int(stat.parent.name)
    return out


def gone(pid: int) -> bool:
    """`pid` has exited (it may stay a zombie until the supervisor reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def start_lagd(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`lagd run` (the supervisor, which starts the workers) in a process group of its own."""
    argv = [sys.executable, "-m", "lagd", "run", "--config", str(config)]
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any, dict[str, str]]:
    async with session.get(url) as answer:
        body = await answer.json() if "json" in answer.headers.get("Content-Type", "") else await answer.text()
        return answer.status, body, dict(answer.headers)


async def judged(session: aiohttp.ClientSession, port: int, groups: set[str]) -> set[str]:
    """Which of `groups` the worker on `port` judges itself (its own /metrics; none while it does not answer)."""
    try:
        _, text, _ = await get(session, f"http://127.0.0.1:{port}/metrics")
    except (aiohttp.ClientError, TimeoutError):
        return set()
    return groups & set(re.findall(r'^burrow_kafka_consumer_status\{[^}]*consumer_group="([^"]+)"', text, re.M))


async def newest_commit_ms(session: aiohttp.ClientSession, port: int, group: str) -> int:
    """The broker's time of the newest commit of `group` that lagd (asked on `port`) shows; 0: none, or no answer."""
    try:
        status, body, _ = await get(session, f"http://127.0.0.1:{port}/v3/kafka/real/consumer/{group}/lag")
    except (aiohttp.ClientError, TimeoutError):
        return 0
    if status != 200:
        return 0
    return max((p["end"]["timestamp"] for p in body["status"]["partitions"] if p["end"]), default=0)


async def watch_statuses(
    session: aiohttp.ClientSession, port: int, expected: dict[str, str], stop: asyncio.Event, seen: list[str]
) -> Counter[int]:
    """Every group's status asked of the worker on `port` four times a second until `stop`: the
    HTTP statuses answered, and in `seen` every answer other than 200 with the expected status
    (a 503 of a group in transit is allowed, with Retry-After; never 404 or another status)."""
    answered: Counter[int] = Counter()
    started = time.monotonic()
    while not stop.is_set():
        for group, want in sorted(expected.items()):
            try:
                code, body, headers = await get(
                    session, f"http://127.0.0.1:{port}/v3/kafka/real/consumer/{group}/status"
                )
            except (aiohttp.ClientError, TimeoutError) as exc:
                seen.append(f"{time.monotonic() - started:.1f}s {group}: {exc!r}")
                continue
            answered[code] += 1
            if code == 503 and headers.get("Retry-After", "").isdigit():
                continue
            got = body["status"]["status"] if code == 200 else f"HTTP {code} {body}"
            if got != want:
                seen.append(f"{time.monotonic() - started:.1f}s {group}: {got} (expected {want})")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    return answered


def outbox(database_url: str, unique: str, kind: str) -> list[tuple[int, str, Any]]:
    """The outbox rows of this test's lagd whose MQTT topic is `<prefix>/real/<kind>/...`
    (lagd.notify.outbox: `incidents` for incident events, `groups` for retained group statuses)."""
    return query(
        database_url,
        "SELECT id, event_id, payload FROM outbox WHERE topic LIKE %s ORDER BY id",
        f"lagd-{unique}/real/{kind}/%",
    )


def incident_events(database_url: str, unique: str) -> list[tuple[int, str, Any]]:
    return outbox(database_url, unique, "incidents")


async def test_sigkilled_worker_groups_judged_again_without_a_change(
    apache_kafka: KafkaCluster,
    database_url: str,
    unique: str,
    settle: Settle,
    supervisor: list[subprocess.Popen[bytes]],
    mqtt_broker: tuple[str, int],
    tmp_path: Path,
) -> None:
    bootstrap = apache_kafka.bootstrap
    await ensure_offsets_topic(bootstrap)
    topic = f"orders-{unique}"
    await create_topic(bootstrap, topic, PARTITIONS)
    healthy, stopped = group_names(unique)
    groups = {*healthy, stopped}

    port = free_low_port()
    while port_open("127.0.0.1", port + 1):
        port = free_low_port()
    ports = [port, port + 1]
    config = tmp_path / "lagd.toml"
    config.write_text(config_text(apache_kafka, database_url, port, unique, mqtt_broker[1]))
    sup = start_lagd(config, tmp_path / "lagd.log")
    supervisor.append(sup)

    traffic = Traffic()
    stop_traffic, stop_the_stopped = asyncio.Event(), asyncio.Event()
    clients = [asyncio.create_task(produce_steadily(bootstrap, topic, PARTITIONS, stop_traffic, traffic, 5.0))]
    clients += [asyncio.create_task(consume_and_commit(bootstrap, topic, g, stop_traffic, traffic)) for g in healthy]
    clients.append(asyncio.create_task(consume_and_commit(bootstrap, topic, stopped, stop_the_stopped, traffic)))
    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def both_ready() -> bool:
                assert sup.poll() is None, f"lagd exited with {sup.returncode}: see {tmp_path / 'lagd.log'}"
                for p in ports:
                    try:
                        code, _, _ = await get(session, f"http://127.0.0.1:{p}/burrow/admin/ready")
                    except (aiohttp.ClientError, TimeoutError):
                        return False
                    if code != 200:
                        return False
                return True

            await settle(both_ready, timeout=120, interval=0.25, what="both workers ready")

            async def shared() -> bool:
                owned = [await judged(session, p, groups) for p in ports]
                return all(owned) and set().union(*owned) == groups and sum(map(len, owned)) == len(groups)

            await settle(shared, timeout=120, interval=0.25, what="each worker judging its own share of the groups")
            # the stopped group commits, is seen by lagd, then stops while its topic grows: STOP, ERR, an incident
            await settle(
                lambda: newest_commit_ms(session, port, stopped),
                timeout=60,
                interval=0.25,
                what="a commit of the stopped group",
            )
            stop_the_stopped.set()

            def verdicts() -> dict[str, str]:
                return dict(query(database_url, "SELECT group_name, status FROM group_verdicts WHERE cluster = 'real'"))

            expected = {g: "OK" for g in healthy} | {stopped: "ERR"}

            def as_expected() -> bool:
                now = verdicts()
                return all(now.get(g) == s for g, s in expected.items())

            await settle(as_expected, timeout=90, interval=0.25, what=f"verdicts {expected} (now {verdicts()})")

            def incident_open() -> bool:
                return any(
                    stopped in json.dumps(p) and '"open' in json.dumps(p)
                    for _, _, p in incident_events(database_url, unique)
                )

            await settle(incident_open, timeout=60, interval=0.25, what="the stopped group's incident opened")
            before = incident_events(database_url, unique)
            statuses_before = outbox(database_url, unique, "groups")

            pids = worker_pids(sup.pid)
            owned = {p: await judged(session, p, groups) for p in ports}
            victim_port = next(p for p in ports if stopped in owned[p])
            survivor_port = next(p for p in ports if p != victim_port)
            victim_groups = owned[victim_port]
            assert set(healthy) & victim_groups, owned  # the test kills a worker with healthy groups too
            watching = asyncio.Event()
            odd: list[str] = []
            watcher = asyncio.create_task(watch_statuses(session, survivor_port, expected, watching, odd))

            killed_wall_ms = int(time.time() * 1000)
            killed = time.monotonic()
            os.kill(pids[victim_port], signal.SIGKILL)
            await settle(lambda: gone(pids[victim_port]), timeout=10, what="the killed worker gone")

            async def judged_again() -> bool:
                now = [await judged(session, p, groups) for p in ports]
                return set().union(*now) == groups and sum(map(len, now)) == len(groups)

            # waited for beyond the bound, so a late takeover is measured and named, not a bare timeout
            await settle(judged_again, timeout=TAKEOVER_BOUND_S * 4, interval=0.1, what="every group judged again")
            takeover_s = time.monotonic() - killed
            after = {p: await judged(session, p, groups) for p in ports}
            new_pids = worker_pids(sup.pid)
            print(
                f"takeover: {len(victim_groups)} groups of the killed worker (port {victim_port}) judged again "
                f"{takeover_s:.1f} s after SIGKILL (session timeout {SESSION_TIMEOUT_S:g} s); now the survivor (port "
                f"{survivor_port}) judges {len(after[survivor_port])}, the restarted worker "
                f"(pid {new_pids.get(victim_port)}) {len(after[victim_port])}"
            )

            # The groups read on after the takeover: every healthy group shows a commit that its client
            # made a stop-after past the takeover, so a verdict the takeover upset had time to show.
            read_on_from_ms = int(time.time() * 1000) + int(EVALUATOR["stop-after"] * 1000)

            async def read_on() -> bool:
                return all([await newest_commit_ms(session, survivor_port, g) > read_on_from_ms for g in healthy])

            await settle(read_on, timeout=90, interval=0.25, what="lagd showing commits made after the takeover")
            watching.set()
            answered = await watcher
            until_ms = int(time.time() * 1000)
            stop_traffic.set()
            await asyncio.gather(*clients)

        sup.send_signal(signal.SIGTERM)
        assert sup.wait(60) == 0, f"lagd's supervisor exited non-zero: see {tmp_path / 'lagd.log'}"
    finally:
        stop_traffic.set()
        stop_the_stopped.set()
        await asyncio.gather(*clients, return_exceptions=True)

    assert traffic.failures == [], traffic.failures  # our clients' own troubles would void the test
    assert takeover_s <= TAKEOVER_BOUND_S, (
        f"judged again {takeover_s:.1f} s after the kill (bound {TAKEOVER_BOUND_S:g} s)"
    )
    # Every answer the survivor gave through the takeover was the status from before it (or 503 in transit).
    assert odd == [], odd
    assert answered[404] == 0 and answered[200] > 0, answered
    # No verdict changed from the kill on: no status history row that differs from the verdict before.
    changed = query(
        database_url,
        "SELECT group_name, status, ts FROM status_history WHERE cluster = 'real' AND ts >= %s AND ts <= %s",
        killed_wall_ms,
        until_ms,
    )
    assert [r for r in changed if r[0] in groups and expected[r[0]] != r[1]] == [], changed
    # No incident event written after the kill, and none twice.
    events = incident_events(database_url, unique)
    assert events[: len(before)] == before
    assert events[len(before) :] == [], events[len(before) :]
    # (an incident opens once; an update repeats nothing: each says something the one before did not)
    said = Counter((p["id"], p["event"], p["severity"], json.dumps(p["groups"], sort_keys=True)) for _, _, p in events)
    assert [k for k, n in said.items() if n > 1] == [], events
    assert any(p["event"] == "opened" and stopped in p["groups"] for _, _, p in events), events
    # The group statuses published on MQTT (retained) from the kill on say what they said before.
    published = outbox(database_url, unique, "groups")[len(statuses_before) :]
    assert [p for _, _, p in published if p.get("group") in groups and p["status"] != expected[p["group"]]] == []
    print(f"group status messages published after the kill: {len(published)} (each the status from before)")


async def lagd_partition(session: aiohttp.ClientSession, port: int, group: str, topic: str) -> dict[str, Any] | None:
    """Partition 0 of `topic` in `group`, as /lagd/v1 on `port` shows it (forwarded to the owner); None: not yet."""
    try:
        status, body, _ = await get(session, f"http://127.0.0.1:{port}/lagd/v1/consumer/real/{group}")
    except (aiohttp.ClientError, TimeoutError):
        return None
    if status != 200:
        return None
    return next((p for p in body["partitions"] if (p["topic"], p["partition"]) == (topic, 0)), None)


async def test_workers_read_lag_in_seconds_from_the_first_unconsumed_record(
    apache_kafka: KafkaCluster,
    database_url: str,
    unique: str,
    settle: Settle,
    supervisor: list[subprocess.Popen[bytes]],
    mqtt_broker: tuple[str, int],
    tmp_path: Path,
) -> None:
    """Issue 53 in workers mode: groups committed long ago on a topic whose producer went idle
    before lagd started, one group in each offsets partition, so whichever way the partitions are
    shared out, one worker judges groups of the topic it samples and the other groups of a topic
    another worker samples (its samples relayed from Postgres). Every group's lag in seconds must
    be read from the first unconsumed record (now minus its LogAppendTime timestamp), not a bound,
    and the topic's stored samples begin with that record (its sampler wrote them)."""
    b = apache_kafka.bootstrap
    await ensure_offsets_topic(b)
    topic = f"recordts-w-{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=b)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        await admin.close()
    await produce(b, topic, RECORDS, 1)
    groups = {
        p: next(
            f"rts{i}-{unique}" for i in range(10_000) if offsets_partition(f"rts{i}-{unique}", OFFSETS_PARTITIONS) == p
        )
        for p in range(OFFSETS_PARTITIONS)
    }
    for g in groups.values():
        await commit_classic(b, g, {TopicPartition(topic, 0): COMMITTED})
    record_ts = next(ts for _, offset, _, _, ts in await topic_records(b, topic) if offset == COMMITTED)
    await asyncio.sleep(max(0.0, record_ts / 1000 + IDLE_S - time.time()))  # idle time (see IDLE_S)

    port = free_low_port()
    while port_open("127.0.0.1", port + 1):
        port = free_low_port()
    ports = [port, port + 1]
    config = tmp_path / "lagd.toml"
    config.write_text(config_text(apache_kafka, database_url, port, unique, mqtt_broker[1]))
    sup = start_lagd(config, tmp_path / "lagd.log")
    supervisor.append(sup)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

        async def shared() -> dict[int, set[str]] | None:
            assert sup.poll() is None, f"lagd exited with {sup.returncode}: see {tmp_path / 'lagd.log'}"
            owned = {p: await judged(session, p, set(groups.values())) for p in ports}
            everyone = set().union(*owned.values())
            return owned if all(owned.values()) and everyone == set(groups.values()) else None

        owned = await settle(shared, timeout=120, interval=0.25, what="each worker judging some of the groups")
        # the worker that owns the topic's offsets partition samples it; the other's groups get its samples relayed
        sampler = next(p for p in ports if groups[offsets_partition(topic, OFFSETS_PARTITIONS)] in owned[p])
        relayed = set().union(*(owned[p] for p in ports if p != sampler))
        assert relayed, owned

        last: list[Any] = []  # what the groups showed when last asked (named if the wait times out)

        async def from_records() -> list[dict[str, Any]] | None:
            found = [await lagd_partition(session, port, g, topic) for g in sorted(groups.values())]
            last[:] = [
                (g, p and {k: p[k] for k in ("current_lag", "lag_seconds_from")})
                for g, p in zip(sorted(groups.values()), found, strict=True)
            ]
            ok = all(
                p is not None
                and p["current_lag"] == RECORDS - COMMITTED
                and p["lag_seconds_from"] == "record_timestamp"
                for p in found
            )
            return [p for p in found if p is not None] if ok else None

        try:
            await settle(from_records, timeout=60, interval=0.25, what=f"lag in seconds on {topic}/0 from the record")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {last} (owners {owned}, sampler port {sampler})") from None
        before = time.time() * 1000
        found = await from_records()
        after = time.time() * 1000
        assert found is not None
        # (owners are asked again: a rebalance meanwhile would void the relayed/sampled split)
        assert {p: await judged(session, p, set(groups.values())) for p in ports} == owned
        for p in found:
            assert not p["lag_seconds_estimated"] and p["record_timestamp_type"] == "LogAppendTime", p
            assert (before - record_ts) / 1000 - 2 <= p["lag_seconds"] <= (after - record_ts) / 1000 + 2, (p, record_ts)

        def stored() -> list[Any] | None:
            rows = query(database_url, "SELECT offsets, ts FROM log_end WHERE cluster = 'real' AND topic = %s", topic)
            return rows if rows and rows[0][0][:1] == [COMMITTED] else None

        rows = await settle(
            stored, timeout=30, interval=0.25, what=f"{topic}'s stored samples beginning with the record"
        )
        assert rows[0][1][0] == record_ts and rows[0][0][-1] == RECORDS, rows
        print(
            f"record-ts in workers: sampler port {sampler} judges {sorted(owned[sampler])}, relayed {sorted(relayed)}"
        )

    sup.send_signal(signal.SIGTERM)
    assert sup.wait(60) == 0, f"lagd's supervisor exited non-zero: see {tmp_path / 'lagd.log'}"
