"""Records lost to retention, on real Apache Kafka: a topic keeping 12 s of records, a producer
at 20 records/s and a consumer group committing 10 records/s. lagd must say "at risk" before the
log start passes the group's committed offset, then "records lost" with the count the broker's
own tools give: the log start (GetOffsetShell, EARLIEST) minus the committed offset
(kafka-consumer-groups --describe)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from lagd.embedded.kafka import KafkaCluster, start_kafka
from lagd.embedded.services import free_port
from tests.kafka_groups import Traffic, describe_offsets, produce_steadily
from tests.test_apache_kafka import lagd_running, settings_for

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

RETENTION_MS = 12_000


@pytest.fixture(scope="module")
def retention_kafka() -> Iterator[KafkaCluster]:
    """Apache Kafka checking retention every second (5 min by default), from its start."""
    cluster = start_kafka(
        1,
        broker_properties={
            "log.retention.check.interval.ms": "1000",
            "log.initial.task.delay.ms": "0",
            "log.segment.delete.delay.ms": "0",
        },
    )
    yield cluster
    cluster.stop()


def log_start(cluster: KafkaCluster, topic: str) -> int:
    """The broker's log start of partition 0 (GetOffsetShell --time -2: ListOffsets EARLIEST)."""
    out = cluster.tool(
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server",
        cluster.bootstrap,
        "--topic",
        topic,
        "--partitions",
        "0",
        "--time",
        "-2",
    )
    return int(out.strip().splitlines()[-1].rsplit(":", 1)[1])


async def commit_slowly(bootstrap: str, group: str, tp: TopicPartition, stop: asyncio.Event, per_second: int) -> None:
    """Commit `per_second` more records every second from offset 0, as a consumer reading that
    slowly would (assigned, not subscribed: no rebalance to wait for)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        offset = 0
        while not stop.is_set():
            await consumer.commit({tp: OffsetAndMetadata(offset, "")})
            offset += per_second
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        await consumer.stop()


async def test_a_slow_consumer_is_at_risk_then_loses_the_records_the_broker_deleted(
    retention_kafka: KafkaCluster, database_url: str, unique: str, settle: Settle
) -> None:
    b = retention_kafka.bootstrap
    topic, group = f"ret-{unique}", f"ret-{unique}-g"
    admin = AIOKafkaAdminClient(bootstrap_servers=b)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 1, 1, topic_configs={"retention.ms": str(RETENTION_MS), "segment.ms": "1000"})]
        )
    finally:
        await admin.close()
    tp = TopicPartition(topic, 0)
    produce_stop, commit_stop, traffic = asyncio.Event(), asyncio.Event(), Traffic()
    settings = settings_for(retention_kafka, database_url, free_port(), "topic", **{"log-start-refresh": 1.0})
    async with lagd_running(settings) as lagd:
        producing = asyncio.create_task(produce_steadily(b, topic, 1, produce_stop, traffic, per_second=20.0))
        committing = asyncio.create_task(commit_slowly(b, group, tp, commit_stop, 10))
        try:

            async def partition() -> dict[str, Any]:
                return (await lagd.partitions(group)).get((topic, 0), {})

            async def judged(state: str) -> dict[str, Any] | None:
                p = await partition()
                return p if p.get("retention") == state else None

            # Before the log start reaches the consumer: at risk, saying in how long.
            risk = await settle(lambda: judged("at_risk"), timeout=90, interval=0.2, what="at risk")
            assert re.fullmatch(
                r"at risk: falls off the log in (under a minute|about \d+ min)", risk["retention_reason"]
            )
            assert risk["records_lost"] == 0
            # Then it falls off: records lost.
            await settle(lambda: judged("lost"), timeout=90, interval=0.2, what="records lost")
            commit_stop.set()
            produce_stop.set()
            await asyncio.gather(committing, producing)
            assert not traffic.failures
            # Ground truth once the broker has deleted the whole log (production stopped, the
            # active segment expires too): log start minus the group's committed offset.
            committed, end, _ = (await asyncio.to_thread(describe_offsets, retention_kafka, group))[(topic, 0)]
            assert committed is not None and end is not None

            async def log_gone() -> int | None:
                start = await asyncio.to_thread(log_start, retention_kafka, topic)
                return start if start == end else None

            start = await settle(log_gone, timeout=90, interval=1.0, what="the broker deleting the whole log")
            truth = start - committed
            assert truth > 0

            async def counted() -> dict[str, Any] | None:
                p = await partition()
                return p if p.get("records_lost") == truth else None

            lost = await settle(counted, timeout=30, interval=0.2, what=f"lagd counting {truth} records lost")
            assert lost["retention"] == "lost"
            assert lost["retention_reason"].startswith(f"records lost: {truth} records deleted unread since ")
            status, body = await lagd.get(f"/v3/kafka/real/consumer/{group}/status")
            assert status == 200 and body["status"]["status"] == "ERR"
        finally:
            commit_stop.set()
            produce_stop.set()
            await asyncio.gather(committing, producing, return_exceptions=True)
