"""Log-start sampling (lagd.ingest.log_end) and what State keeps of it, against real Apache Kafka
for the broker side: DeleteRecords moves a partition's log start to a known offset."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import Event, IngestCounters, LogEndSample, LogStartSample, TopicDeleted, TopicPolicy
from lagd.embedded.kafka import KafkaCluster
from lagd.ingest.log_end import parse_policies, sample_log_ends, valid_log_starts
from lagd.state.windows import State


def test_invalid_log_starts_are_counted_and_skipped() -> None:
    counters = IngestCounters()
    kept = valid_log_starts(
        {("t", 0): 5, ("t", 1): -1, ("t", 2): 90, ("t", 3): 7}, {("t", 0): 10, ("t", 2): 80}, counters
    )
    assert kept == {("t", 0): 5, ("t", 3): 7}  # no log end this round for t/3: nothing to check against
    assert counters.failures == {"log_start_negative": 1, "log_start_above_log_end": 1}


def test_policies_of_a_describe_configs_answer() -> None:
    class Answer:
        resources = [
            (0, None, 2, "a", [("cleanup.policy", "compact,delete", False, False, False)]),
            (3, "unknown topic", 2, "b", []),
            (0, None, 2, "c", [("cleanup.policy", "delete", False, True, False)]),
        ]

    counters = IngestCounters()
    assert parse_policies("k", Answer(), counters) == [
        TopicPolicy("k", "a", "compact,delete"),
        TopicPolicy("k", "c", "delete"),
    ]
    assert counters.failures == {"log_start_describe_UnknownTopicOrPartitionError": 1}  # b, refused


def test_state_keeps_a_bounded_log_start_history_and_forgets_a_deleted_topic() -> None:
    state = State(lag_samples=3)
    for i in range(5):
        state.apply(LogStartSample("k", "t", 0, 10 * i, 1000 * (i + 1)))
    state.apply(LogStartSample("k", "t", 0, 999, 5000))  # not newer: ignored
    assert list(state.topic_log_starts("k", "t")[0]) == [(3000, 20), (4000, 30), (5000, 40)]
    state.apply(LogStartSample("k", "t", 0, 3, 6000))  # went down: recreated, the past is gone
    assert list(state.topic_log_starts("k", "t")[0]) == [(6000, 3)]
    state.apply(TopicPolicy("k", "t", "compact"))
    assert state.cleanup_policy("k", "t") == "compact"
    state.apply(TopicDeleted("k", "t"))
    assert state.topic_log_starts("k", "t") == {} and state.cleanup_policy("k", "t") is None


async def _wait(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_sampler_reads_log_starts_and_cleanup_policy_from_apache_kafka(
    apache_kafka: KafkaCluster, unique: str
) -> None:
    bootstrap = apache_kafka.bootstrap
    deleted, compacted = f"ls-del-{unique}", f"ls-cmp-{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await admin.create_topics(
            [NewTopic(deleted, 2, 1), NewTopic(compacted, 1, 1, topic_configs={"cleanup.policy": "compact"})]
        )
        for i in range(30):
            await producer.send_and_wait(deleted, b"v", key=b"k%d" % i, partition=i % 2)
            await producer.send_and_wait(compacted, b"v", key=b"k%d" % i, partition=0)
        await admin.delete_records(
            {TopicPartition(deleted, 0): RecordsToDelete(7), TopicPartition(deleted, 1): RecordsToDelete(12)}
        )
        # Ground truth from a consumer's beginning_offsets (ListOffsets EARLIEST by aiokafka's own code).
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            parts = [TopicPartition(deleted, 0), TopicPartition(deleted, 1), TopicPartition(compacted, 0)]
            truth = {(tp.topic, tp.partition): o for tp, o in (await consumer.beginning_offsets(parts)).items()}
        finally:
            await consumer.stop()
        assert truth == {(deleted, 0): 7, (deleted, 1): 12, (compacted, 0): 0}

        events: list[Event] = []

        async def put(batch: list[Event]) -> None:
            events.extend(batch)

        stop, counters = asyncio.Event(), IngestCounters()
        settings = ClusterSettings(name="k", bootstrap_servers=[bootstrap], offset_refresh=0.5, log_start_refresh=1.0)
        task = asyncio.create_task(sample_log_ends(settings, lambda: [deleted, compacted], put, counters, stop))
        try:
            await _wait(
                lambda: (
                    {(e.topic, e.partition) for e in events if isinstance(e, LogStartSample)} >= set(truth)
                    and any(isinstance(e, TopicPolicy) for e in events)
                ),
                "log starts and policies",
            )
        finally:
            stop.set()
            await task
        starts = {(e.topic, e.partition): e.offset for e in events if isinstance(e, LogStartSample)}
        assert starts == truth
        ends = {(e.topic, e.partition): e.offset for e in events if isinstance(e, LogEndSample)}
        assert ends == {(deleted, 0): 15, (deleted, 1): 15, (compacted, 0): 30}
        policies = {e.topic: e.cleanup_policy for e in events if isinstance(e, TopicPolicy)}
        assert policies == {deleted: "delete", compacted: "compact"}
        assert not any(k.startswith("log_start") for k in counters.failures)
    finally:
        await producer.stop()
        await admin.close()
