"""Consumer groups of every kind, made by real clients on a real Apache Kafka (lagd.embedded_kafka).

Each helper drives a real client so that Kafka's own group coordinator writes the records
lagd reads: aiokafka for classic groups, static members and transactional offset commits;
the Java console consumer (kafka-clients) for KIP-848 groups (`group.protocol=consumer`)
and share groups; Kafka's own `kafka-consumer-groups` for deletions and resets. None of
these records is written by lagd's encoder.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from lagd.embedded_kafka import KafkaCluster, java


async def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1, **client: Any) -> None:
    """`client`: more aiokafka keywords (SASL and TLS), as for `produce` and `commit_classic`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int, **client: Any) -> None:
    """`per_partition` records into each of the topic's partitions."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **client)
    await producer.start()
    try:
        sends = [
            await producer.send(topic, f"r{i}".encode(), partition=p)
            for p in range(partitions)
            for i in range(per_partition)
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


async def commit_classic(
    bootstrap: str,
    group: str,
    offsets: dict[TopicPartition, int],
    *,
    instance_id: str | None = None,
    metadata: str = "",
    **client: Any,
) -> None:
    """A classic group member (aiokafka, protocol `consumer`) that joins and commits `offsets`.

    It subscribes (so Kafka writes the group's metadata record with this member), waits for its
    assignment, and commits; `instance_id` makes it a static member.
    """
    topics = sorted({tp.topic for tp in offsets})
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        client_id=f"lagd-test-{group}",
        **client,
    )
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        await consumer.commit({tp: OffsetAndMetadata(o, metadata) for tp, o in offsets.items()})
    finally:
        await consumer.stop()


async def commit_in_transaction(
    bootstrap: str, group: str, offsets: dict[TopicPartition, int], transactional_id: str, *, abort: bool
) -> None:
    """`sendOffsetsToTransaction`: commit `offsets` for `group` inside a transaction, then commit or abort it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction(dict(offsets.items()), group)
        if abort:
            await producer.abort_transaction()
        else:
            await producer.commit_transaction()
    finally:
        await producer.stop()


@dataclass
class JavaConsumer:
    """The Java console consumer: `kafka-console-consumer` (or `kafka-console-share-consumer`)."""

    proc: subprocess.Popen[str]

    def wait(self, timeout: float = 120.0) -> str:
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise AssertionError(f"console consumer exited {self.proc.returncode}:\n{err[-3000:]}")
        return out


def console_consumer(
    cluster: KafkaCluster,
    topic: str,
    group: str,
    max_messages: int,
    *,
    protocol: str = "consumer",
    share: bool = False,
    properties: Iterable[str] = (),
) -> JavaConsumer:
    """The Java consumer of `cluster`'s own version reading `max_messages` records as `group`.

    `protocol="consumer"` makes a KIP-848 group, `"classic"` a classic one; `share=True` runs
    the share consumer (KIP-932) instead. It commits what it read when it exits.
    """
    main = (
        "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
        if share
        else "org.apache.kafka.tools.consumer.ConsoleConsumer"
    )
    args = [
        java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={cluster.workdir / 'log4j2.yaml'}",
        f"-Dlog4j.configuration=file:{cluster.workdir / 'log4j.properties'}",
        f"-Dkafka.logs.file={cluster.workdir / 'tools.log'}",
        "-cp", str(cluster_classpath(cluster)), main,
        "--bootstrap-server", cluster.bootstrap, "--topic", topic, "--group", group,
        "--max-messages", str(max_messages), "--timeout-ms", "60000",
        "--consumer-property", f"client.id=java-{group}",
    ]  # fmt: skip
    if not share:
        args += ["--from-beginning", "--consumer-property", f"group.protocol={protocol}"]
    for prop in properties:
        args += ["--consumer-property", prop]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return JavaConsumer(proc)


def cluster_classpath(cluster: KafkaCluster) -> str:
    from lagd.embedded_kafka import classpath

    return classpath(cluster.version)


def describe_offsets(
    cluster: KafkaCluster, group: str, command_config: Path | None = None
) -> dict[tuple[str, int], tuple[int | None, int | None, int | None]]:
    """`kafka-consumer-groups --describe --group G --offsets`: (topic, partition) -> (committed, log end, lag).

    Kafka's own tool is the ground truth lagd is compared with; "-" reads as None. With
    `command_config` (SASL and TLS client properties) it asks through the SASL_SSL listener.
    """
    out = cluster.consumer_groups("--describe", "--group", group, "--offsets", command_config=command_config)
    rows: dict[tuple[str, int], tuple[int | None, int | None, int | None]] = {}
    header: list[str] | None = None
    for line in out.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
            continue
        if header is None or len(cells) < len(header):
            continue
        row = dict(zip(header, cells, strict=False))

        def num(v: str) -> int | None:
            return None if v == "-" else int(v)

        rows[(row["TOPIC"], int(row["PARTITION"]))] = (
            num(row["CURRENT-OFFSET"]),
            num(row["LOG-END-OFFSET"]),
            num(row["LAG"]),
        )
    return rows


def allow(
    cluster: KafkaCluster, user: str, operations: Iterable[str], *resources: str, command_config: Path | None = None
) -> None:
    """`kafka-acls --add --allow-principal User:USER --operation OP ... RESOURCES`: `resources` as
    the tool takes them ("--topic", "t", "--group", "g"), each given every operation."""
    ops = [arg for op in operations for arg in ("--operation", op)]
    cluster.acls("--add", "--allow-principal", f"User:{user}", *ops, *resources, command_config=command_config)
