"""Kafka Streams applications on Apache Kafka: lagd reads what their groups commit, as Kafka's tools do.

The application is real (tests/java/Passthrough.java, compiled with javac against the
broker's own jars): a topology that copies one topic to another. It runs first with the
classic protocol (a classic consumer group, which `kafka-consumer-groups --describe` shows)
and then with the streams group protocol (KIP-1071, `group.protocol=streams`, on by default
in Kafka 4.4: feature streams.version 1), whose group only `kafka-streams-groups --describe`
shows and whose coordinator writes records of its own (types 17-23). Both commit ordinary
offsets, which lagd judges as any group's; every record the coordinator wrote decodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lagd.embedded.kafka import KafkaCluster
from lagd.ingest.codec import DecodeError, GroupMetadata, GroupRecord, decode
from tests.kafka_groups import (
    create_topic,
    describe_offsets,
    describe_streams_offsets,
    ensure_offsets_topic,
    offsets_topic_records,
    produce,
    streams_app,
)
from tests.test_apache_kafka import Lagd, agreed
from tests.test_apache_kafka import lagd_on_kafka as _lagd_fixture

lagd_on_kafka = _lagd_fixture  # lagd reading the offsets topic, and lagd polling the admin API


@pytest.fixture(autouse=True)
async def _offsets_topic(apache_kafka: KafkaCluster) -> None:
    """lagd reads `__consumer_offsets`, which a fresh broker has not created yet."""
    await ensure_offsets_topic(apache_kafka.bootstrap)


Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

PARTITIONS = 3
PER_PARTITION = 20
MORE = 7  # records produced per partition once the application is stopped: its lag


async def _topics(cluster: KafkaCluster, unique: str) -> tuple[str, str]:
    source, sink = f"streams-in-{unique}", f"streams-out-{unique}"
    await create_topic(cluster.bootstrap, source, PARTITIONS)
    await create_topic(cluster.bootstrap, sink, PARTITIONS)
    await produce(cluster.bootstrap, source, PER_PARTITION, PARTITIONS)
    return source, sink


async def _exercise(lagd: Lagd, cluster: KafkaCluster, app_id: str, protocol: str, unique: str) -> None:
    """Run the application: it reads every record; paused, it falls MORE behind; resumed, it catches up.

    At each of these three still points lagd and Kafka's own tool must show the same
    committed offset and lag on every partition, and the expected ones."""
    source, sink = await _topics(cluster, unique)
    app = streams_app(cluster, app_id, source, sink, protocol)
    try:
        await asyncio.to_thread(app.expect, "RUNNING")
        await _agreed_at(lagd, cluster, app_id, protocol, source, committed=PER_PARTITION, lag=0)
        await asyncio.to_thread(app.command, "pause", "PAUSED")  # the members stay; processing stops
        await produce(cluster.bootstrap, source, MORE, PARTITIONS)
        await _agreed_at(lagd, cluster, app_id, protocol, source, committed=PER_PARTITION, lag=MORE)
        await asyncio.to_thread(app.command, "resume", "RESUMED")
        await _agreed_at(lagd, cluster, app_id, protocol, source, committed=PER_PARTITION + MORE, lag=0)
    finally:
        await asyncio.to_thread(app.stop)


async def _agreed_at(
    lagd: Lagd,
    cluster: KafkaCluster,
    group: str,
    protocol: str,
    source: str,
    *,
    committed: int,
    lag: int,
    timeout: float = 60.0,
) -> None:
    """Until Kafka's tool shows `committed` and `lag` on every partition of `source` and lagd
    shows the same: kafka-consumer-groups for a classic group, kafka-streams-groups for a
    streams group (the consumer tool refuses those)."""
    describe = describe_streams_offsets if protocol == "streams" else describe_offsets
    expected = {(source, p): (committed, lag) for p in range(PARTITIONS)}
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        tool = {k: (c, g) for k, (c, _, g) in (await asyncio.to_thread(describe, cluster, group)).items()}
        ours = {
            k: (p["end"]["offset"], p["current_lag"]) for k, p in (await lagd.partitions(group)).items() if p["end"]
        }
        if tool == expected and ours == tool:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"{group} after {timeout:.0f} s: expected {sorted(expected.items())}, "
                f"{'kafka-streams-groups' if protocol == 'streams' else 'kafka-consumer-groups'} {sorted(tool.items())}, "
                f"lagd {sorted(ours.items())}"
            )
        await asyncio.sleep(0.2)


async def _kinds(cluster: KafkaCluster, group: str) -> dict[str, int]:
    """How many records of each kind Kafka's coordinator wrote for `group`; each one must decode."""
    kinds: dict[str, int] = {}
    for _, _, key, value in await offsets_topic_records(cluster.bootstrap):
        try:
            record = decode(key, value)
        except DecodeError as exc:
            raise AssertionError(f"Kafka {cluster.version} wrote a record lagd cannot decode: {exc}") from None
        if getattr(record, "group", None) != group:
            continue
        kind = record.kind if isinstance(record, GroupRecord) else type(record).__name__
        if isinstance(record, GroupMetadata):  # Streams' classic groups use the consumer protocol; "" once empty
            kind = f"GroupMetadata({record.protocol_type})"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


async def test_streams_app_on_the_classic_protocol(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str
) -> None:
    """A classic-protocol Streams app: its group's offsets and lags in lagd equal kafka-consumer-groups'."""
    app_id = f"streams-classic-{unique}"
    await _exercise(lagd_on_kafka, apache_kafka, app_id, "classic", unique)
    # stopped, its group is Empty; the consumer tool still describes it, and lagd agrees
    await produce(apache_kafka.bootstrap, f"streams-in-{unique}", MORE, PARTITIONS)
    await agreed(lagd_on_kafka, apache_kafka, app_id)

    kinds = await _kinds(apache_kafka, app_id)
    assert kinds.get("GroupMetadata(consumer)", 0) >= 1 and kinds.get("OffsetCommit", 0) >= PARTITIONS, kinds
    assert set(kinds) <= {"GroupMetadata(consumer)", "GroupMetadata()", "OffsetCommit"}, kinds


async def test_streams_app_on_the_streams_group_protocol(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str
) -> None:
    """A KIP-1071 streams group: lagd's offsets and lags equal kafka-streams-groups'; its records are named."""
    app_id = f"streams-kip1071-{unique}"
    await _exercise(lagd_on_kafka, apache_kafka, app_id, "streams", unique)

    kinds = await _kinds(apache_kafka, app_id)
    assert kinds.get("OffsetCommit", 0) >= PARTITIONS, kinds
    for kind in (
        "streams_group_metadata",
        "streams_group_topology",
        "streams_group_member_metadata",
        "streams_group_target_assignment_metadata",
        "streams_group_target_assignment_member",
        "streams_group_current_member_assignment",
    ):
        assert kinds.get(kind, 0) >= 1, (kind, kinds)
    assert "SkippedRecord" not in kinds, kinds

    # lagd counts them by kind (when it reads the topic), none as unknown
    _, clusters = await lagd_on_kafka.get("/lagd/v1/clusters")
    _, text = await lagd_on_kafka.get("/metrics")
    assert 'lagd_ingest_records_total{cluster="real",type="unknown"}' not in text
    if clusters["clusters"][0]["offsets_source"] == "topic":
        assert 'lagd_ingest_records_total{cluster="real",type="streams_group_topology"}' in text
