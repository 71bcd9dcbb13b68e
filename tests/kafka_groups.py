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

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from lagd.embedded_kafka import KafkaCluster, java


async def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    """`per_partition` records into each of the topic's partitions."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
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
    cluster: KafkaCluster, group: str
) -> dict[tuple[str, int], tuple[int | None, int | None, int | None]]:
    """`kafka-consumer-groups --describe --group G --offsets`: (topic, partition) -> (committed, log end, lag).

    Kafka's own tool is the ground truth lagd is compared with; "-" reads as None.
    """
    out = cluster.consumer_groups("--describe", "--group", group, "--offsets")
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


async def every_kind_of_group(cluster: KafkaCluster, prefix: str) -> dict[str, str]:
    """Groups of every kind Kafka `cluster` runs, made by real clients on topic `prefix`; kind -> group.

    classic (aiokafka, with offsets then deleted and reset backwards by kafka-consumer-groups),
    static (a static member; the group then deleted), txn (one transactional offset commit
    committed, one aborted), kip848 (the Java consumer, group.protocol=consumer, on topic
    `prefix`-own; Kafka 4 and later) and share (the Java share consumer; Kafka 4.1 and later).
    """
    b = cluster.bootstrap
    modern = not cluster.version.startswith(("2.", "3."))
    kinds = ["classic", "static", "txn", *(["kip848", "share"] if modern else [])]
    groups = {kind: f"{prefix}-{kind}" for kind in kinds}
    await create_topic(b, prefix, 3)
    await produce(b, prefix, 20, 3)
    await commit_classic(
        b, groups["classic"], {TopicPartition(prefix, p): o for p, o in ((0, 5), (1, 7), (2, 9))}, metadata="m"
    )
    await commit_classic(b, groups["static"], {TopicPartition(prefix, 0): 3}, instance_id=f"{prefix}-static-1")
    await commit_in_transaction(b, groups["txn"], {TopicPartition(prefix, 0): 11}, f"{prefix}-tx", abort=False)
    await commit_in_transaction(b, groups["txn"], {TopicPartition(prefix, 0): 15}, f"{prefix}-tx", abort=True)
    if modern:
        # a topic of its own: no other group's commit names its topic id before the group's own
        await create_topic(b, f"{prefix}-own", 3)
        await produce(b, f"{prefix}-own", 20, 3)
        await asyncio.to_thread(
            console_consumer(cluster, f"{prefix}-own", groups["kip848"], 30, protocol="consumer").wait
        )
        await asyncio.to_thread(console_consumer(cluster, prefix, groups["share"], 10, share=True).wait)
    cluster.consumer_groups("--delete-offsets", "--group", groups["classic"], "--topic", f"{prefix}:2")
    cluster.consumer_groups(
        "--reset-offsets", "--group", groups["classic"], "--topic", f"{prefix}:0", "--to-offset", "1", "--execute"
    )
    await delete_group(cluster, groups["static"])
    return groups


async def delete_group(cluster: KafkaCluster, group: str, timeout: float = 60.0) -> None:
    """`kafka-consumer-groups --delete`, again until Kafka says it deleted the group.

    Kafka refuses to delete a group with members (a static member stays one until its session
    times out) and says so on stdout with exit status 0, so the answer is read, not the status.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        out = await asyncio.to_thread(cluster.consumer_groups, "--delete", "--group", group)
        if "was successful" in out:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"Kafka did not delete group {group} within {timeout:.0f} s: {out.strip()}")
        await asyncio.sleep(1.0)


async def offsets_topic_records(bootstrap: str) -> list[tuple[int, int, bytes, bytes | None]]:
    """Every record of `__consumer_offsets` as a read_committed consumer sees it: (partition, offset, key, value)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        found = consumer._client.cluster.partitions_for_topic("__consumer_offsets") or set()
        parts = [TopicPartition("__consumer_offsets", p) for p in sorted(found)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        out: list[tuple[int, int, bytes, bytes | None]] = []
        pending = set(parts)
        while pending:
            got = await consumer.getmany(*pending, timeout_ms=500)
            for tp, records in got.items():
                out += [(tp.partition, r.offset, r.key, r.value) for r in records]
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        return sorted(out)
    finally:
        await consumer.stop()
