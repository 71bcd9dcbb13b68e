"""A rolling deploy is not an outage, on Apache Kafka itself (issue 53, item 1).

Two groups read one topic a producer keeps writing to, each committing every 0.5 s. "deploy"
is restarted after 20 s: its consumer leaves the group and a new one joins PAUSE_S later (a
rolling deploy of a JVM service with state), then works the backlog off. "stopped" stops after
20 s for good. lagd runs at its default evaluator settings (a group with no pause history yet:
the 120 s default limit). During the pause "deploy" must never be STOP (nor its group ERR);
"stopped" must go STOP within about two minutes of its last commit. Then lagd restarts on the
same database, and the pause it saw is stored (group_pauses, which lagd restores at start:
tests/test_store.py checks the restore itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from lagd.core.config import parse
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from tests.kafka_groups import create_topic, ensure_offsets_topic
from tests.postgres import query
from tests.test_apache_kafka import Lagd, lagd_running

pytestmark = pytest.mark.slow

PARTITIONS = 2
PRODUCE = 20  # records/s into each partition
RUN_S = 20  # seconds each group consumes before its deploy or stop
PAUSE_S = 90  # the deploy's length
STOP_WITHIN_S = 150  # "about two minutes": the 120 s default limit, a few evaluations and samples


def now_ms() -> int:
    return int(time.time() * 1000)


async def produce(bootstrap: str, topic: str, stop: asyncio.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        while not stop.is_set():
            for p in range(PARTITIONS):
                for _ in range(PRODUCE // 10):
                    await producer.send(topic, b"r", partition=p)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, group: str, until: asyncio.Event, commits: list[int]) -> None:
    """One consumer of `group`, committing what it read every 0.5 s until `until` is set."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    consumer.subscribe([topic])
    try:
        while not until.is_set():
            await consumer.getmany(timeout_ms=100)
            if consumer.assignment():
                await consumer.commit()
                commits.append(now_ms())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), 0.5)
    finally:
        await consumer.stop()


async def deploy(bootstrap: str, topic: str, group: str, done: asyncio.Event, commits: list[int]) -> None:
    """RUN_S of consuming, the consumer gone for PAUSE_S, a new one until `done`."""
    first = asyncio.Event()
    task = asyncio.create_task(consume(bootstrap, topic, group, first, commits))
    await asyncio.sleep(RUN_S)
    first.set()
    await task
    await asyncio.sleep(PAUSE_S)
    await consume(bootstrap, topic, group, done, commits)


async def statuses(lagd: Lagd, group: str) -> tuple[str, set[str]]:
    """The group's status and its partitions' (Burrow's API); ("", set()) while unknown."""
    code, body = await lagd.get(f"/v3/kafka/real/consumer/{group}/lag")
    if code != 200:
        return "", set()
    return body["status"]["status"], {p["status"] for p in body["status"]["partitions"]}


async def test_a_deploy_pause_does_not_page_and_a_stopped_group_does(
    apache_kafka: KafkaCluster, database_url: str, unique: str
) -> None:
    b = apache_kafka.bootstrap
    topic, deployed, stopped = f"pause-{unique}", f"deploy-{unique}", f"stopped-{unique}"
    await ensure_offsets_topic(b)
    await create_topic(b, topic, PARTITIONS)

    def settings() -> object:
        return parse(
            {
                "clusters": {"real": {"bootstrap-servers": b.split(","), "offset-refresh": 1.0, "topic-refresh": 2.0}},
                "storage": {"database-url": database_url, "flush-interval": 0.2},
                "evaluator": {"cache-ttl": 0.2},
                "http": {"listen": f"127.0.0.1:{free_port()}"},
                "notify": {"enabled": False},
            },
            env={},
        )

    stop_all, stop_stopped = asyncio.Event(), asyncio.Event()
    deploy_commits: list[int] = []
    stopped_commits: list[int] = []
    async with lagd_running(settings()) as lagd:  # type: ignore[arg-type]
        producing = asyncio.create_task(produce(b, topic, stop_all))
        deploying = asyncio.create_task(deploy(b, topic, deployed, stop_all, deploy_commits))
        stopping = asyncio.create_task(consume(b, topic, stopped, stop_stopped, stopped_commits))
        try:
            await asyncio.sleep(RUN_S)
            stop_stopped.set()
            await stopping
            last_stopped = stopped_commits[-1]
            stop_seen: int | None = None
            bad: list[tuple[float, str, set[str]]] = []
            resumed_at: int | None = None
            deadline = time.monotonic() + RUN_S + PAUSE_S + 120
            while time.monotonic() < deadline:
                status, parts = await statuses(lagd, deployed)
                if status == "ERR" or "STOP" in parts:
                    bad.append(((now_ms() - deploy_commits[0]) / 1000, status, parts))
                if stop_seen is None:
                    _, stopped_parts = await statuses(lagd, stopped)
                    if "STOP" in stopped_parts:
                        stop_seen = now_ms()
                if resumed_at is None and len(deploy_commits) > 1:
                    gaps = [b - a for a, b in itertools.pairwise(deploy_commits)]
                    if max(gaps) >= PAUSE_S * 1000:
                        resumed_at = now_ms()
                if stop_seen is not None and resumed_at is not None and now_ms() - resumed_at > 15_000:
                    break
                await asyncio.sleep(1.0)
        finally:
            stop_all.set()
            stop_stopped.set()
            await asyncio.gather(producing, deploying, return_exceptions=True)
        gaps = [b - a for a, b in itertools.pairwise(deploy_commits)]
        pause = max(gaps)
        print(
            f"pause on Kafka: deploy silent {pause / 1000:.1f} s, statuses meanwhile never STOP: {not bad}; "
            f"stopped group STOP {((stop_seen or 0) - last_stopped) / 1000:.1f} s after its last commit"
        )
        assert pause >= PAUSE_S * 1000, gaps
        assert not bad, f"the deploy paged: {bad[:5]}"
        assert stop_seen is not None, f"the stopped group was not STOP {STOP_WITHIN_S} s after its last commit"
        assert stop_seen - last_stopped <= STOP_WITHIN_S * 1000, (stop_seen - last_stopped) / 1000

    # lagd stopped (its state flushed); the pause it saw is stored and read back at the next start
    async with lagd_running(settings()):  # type: ignore[arg-type]
        rows = query(database_url, "SELECT history FROM group_pauses WHERE group_name = %s", deployed)
    assert len(rows) == 1, rows
    history = rows[0][0]
    lengths = history[2::2]
    # the broker's commit times, not this client's: within 2 s of what it saw
    assert any(PAUSE_S * 1000 - 2_000 <= n <= pause + 2_000 for n in lengths), (history, pause)
