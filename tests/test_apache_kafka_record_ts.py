"""Lag in seconds from the first unconsumed record, on real Apache Kafka: a group committed long
ago on a topic whose producer went idle before lagd started, so lagd's log-end samples do not
reach back to the committed offset and, from them alone, lag in seconds is only "at least".
lagd reads the record at the committed offset; its lag in seconds must then be now minus that
record's timestamp (as the broker stamped it: LogAppendTime, read back from the topic), and be
marked as obtained from the record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from tests.kafka_groups import commit_classic, produce, topic_records
from tests.test_apache_kafka import Lagd, lagd_running, settings_for

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

COMMITTED = 5
# How long the producer has been idle when lagd starts: what the bound from lagd's own samples
# misses. Elapsed time is what this test is about (not a wait for something to happen).
IDLE_S = 6.0


async def partition(lagd: Lagd, group: str, topic: str) -> dict[str, Any] | None:
    status, body = await lagd.get(f"/lagd/v1/consumer/real/{group}")
    if status != 200:
        return None
    return next((p for p in body["partitions"] if (p["topic"], p["partition"]) == (topic, 0)), None)


@pytest.mark.parametrize("fetches", [50, 0], ids=["read", "off"])
async def test_lag_in_seconds_of_an_idle_topic_is_read_from_the_first_unconsumed_record(
    apache_kafka: KafkaCluster, database_url: str, unique: str, settle: Settle, fetches: int
) -> None:
    b = apache_kafka.bootstrap
    topic, group = f"recordts-{unique}", f"recordts-{unique}-g"
    admin = AIOKafkaAdminClient(bootstrap_servers=b)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        await admin.close()
    await produce(b, topic, 20, 1)
    await commit_classic(b, group, {TopicPartition(topic, 0): COMMITTED})
    record_ts = next(ts for _, offset, _, _, ts in await topic_records(b, topic) if offset == COMMITTED)
    idle_until = record_ts / 1000 + IDLE_S
    await asyncio.sleep(max(0.0, idle_until - time.time()))

    settings = settings_for(apache_kafka, database_url, free_port(), **{"record-timestamp-fetches": fetches})
    async with lagd_running(settings) as lagd:

        async def obtained() -> dict[str, Any] | None:
            p = await partition(lagd, group, topic)
            want = "record_timestamp" if fetches else "bound"
            return p if p is not None and p["current_lag"] == 20 - COMMITTED and p["lag_seconds_from"] == want else None

        p = await settle(obtained, timeout=60, what=f"lag in seconds of {topic}/0 obtained as expected")
        before = time.time() * 1000
        p = await partition(lagd, group, topic)
        after = time.time() * 1000
        assert p is not None
        if fetches:
            assert (p["lag_seconds_from"], p["lag_seconds_estimated"]) == ("record_timestamp", False), p
            assert (before - record_ts) / 1000 - 2 <= p["lag_seconds"] <= (after - record_ts) / 1000 + 2, (p, record_ts)
            assert p["record_timestamp_type"] == "LogAppendTime"
            assert "at least" not in p["reason"]
            status, page = await lagd.get(f"/group/real/{group}")
            assert status == 200 and "from the record's timestamp (the broker's clock)" in page, page
        else:
            # from lagd's own samples alone: a bound, at least the time since its first sample,
            # short of the record's age by about the idle time before lagd started
            assert (p["lag_seconds_from"], p["lag_seconds_estimated"]) == ("bound", True), p
            assert p["lag_seconds"] <= (after - record_ts) / 1000 - IDLE_S + 1, (p, record_ts)


async def test_a_commit_on_a_transaction_marker_reads_the_next_record(
    apache_kafka: KafkaCluster, database_url: str, unique: str, settle: Settle
) -> None:
    """Committed at a transaction's commit marker (an offset holding no record): the first
    unconsumed record is the next transaction's first, and lag in seconds is read from it."""
    b = apache_kafka.bootstrap
    topic, group = f"recordts-tx-{unique}", f"recordts-tx-{unique}-g"
    admin = AIOKafkaAdminClient(bootstrap_servers=b)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=b, transactional_id=f"recordts-{unique}")
    await producer.start()
    try:
        for _ in range(2):
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, f"r{i}".encode(), partition=0)
    finally:
        await producer.stop()
    data = {offset: ts for _, offset, _, _, ts in await topic_records(b, topic)}
    marker = max(o for o in data if o < min(data) + 10) + 1  # after the first transaction's records
    assert marker not in data
    first_unconsumed = min(o for o in data if o > marker)
    record_ts = data[first_unconsumed]
    await commit_classic(b, group, {TopicPartition(topic, 0): marker})
    await asyncio.sleep(max(0.0, record_ts / 1000 + IDLE_S - time.time()))  # idle time (see IDLE_S)

    async with lagd_running(settings_for(apache_kafka, database_url, free_port())) as lagd:

        async def obtained() -> dict[str, Any] | None:
            p = await partition(lagd, group, topic)
            return p if p is not None and p["lag_seconds_from"] == "record_timestamp" else None

        await settle(obtained, timeout=60, what=f"lag in seconds of {topic}/0 read from record {first_unconsumed}")
        before = time.time() * 1000
        p = await partition(lagd, group, topic)
        after = time.time() * 1000
        assert p is not None and p["current_lag"] > 0 and not p["lag_seconds_estimated"], p
        assert (before - record_ts) / 1000 - 2 <= p["lag_seconds"] <= (after - record_ts) / 1000 + 2, (p, record_ts)


async def test_after_a_restart_the_figure_is_the_records_from_the_first_answer(
    apache_kafka: KafkaCluster, database_url: str, unique: str, settle: Settle
) -> None:
    """The record's sample is stored with the other samples, and the mark that it is a record's
    (log_end.record, issue 53): after a restart on the same database the figure is exact from the
    first answer. The restarted lagd reads no records (record-timestamp-fetches = 0), so the mark
    can only come from the store; every answer must be the record's figure, now minus its
    timestamp."""
    b = apache_kafka.bootstrap
    topic, group = f"recordts-rs-{unique}", f"recordts-rs-{unique}-g"
    admin = AIOKafkaAdminClient(bootstrap_servers=b)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        await admin.close()
    await produce(b, topic, 20, 1)
    await commit_classic(b, group, {TopicPartition(topic, 0): COMMITTED})
    record_ts = next(ts for _, offset, _, _, ts in await topic_records(b, topic) if offset == COMMITTED)
    await asyncio.sleep(max(0.0, record_ts / 1000 + IDLE_S - time.time()))  # idle time (see IDLE_S)
    port = free_port()

    async with lagd_running(settings_for(apache_kafka, database_url, port)) as lagd:

        async def from_record() -> dict[str, Any] | None:
            p = await partition(lagd, group, topic)
            return p if p is not None and p["lag_seconds_from"] == "record_timestamp" else None

        await settle(from_record, timeout=60, what=f"lag in seconds of {topic}/0 from the record")

    seen: list[tuple[str, float, float, float]] = []  # from, seconds, and when asked (between)
    reading_none = settings_for(apache_kafka, database_url, port, **{"record-timestamp-fetches": 0})
    async with lagd_running(reading_none, ready=False) as lagd:

        async def answered() -> bool:
            before = time.time() * 1000
            p = await partition(lagd, group, topic)
            after = time.time() * 1000
            if p is not None and p["current_lag"] == 20 - COMMITTED:
                seen.append((p["lag_seconds_from"], p["lag_seconds"], before, after))
            return len(seen) >= 10

        await settle(answered, timeout=60, interval=0.05, what=f"ten answers about {topic}/0 after the restart")
    assert [s[0] for s in seen] == ["record_timestamp"] * len(seen), seen
    for _, seconds, before, after in seen:
        assert (before - record_ts) / 1000 - 2 <= seconds <= (after - record_ts) / 1000 + 2, (seen, record_ts)
