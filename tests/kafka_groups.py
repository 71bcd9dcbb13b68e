"""Consumer groups of every kind, made by real clients on a real Apache Kafka (lagd.embedded.kafka).

Each helper drives a real client so that Kafka's own group coordinator writes the records
lagd reads: aiokafka for classic groups, static members and transactional offset commits;
the Java console consumer (kafka-clients) for KIP-848 groups (`group.protocol=consumer`)
and share groups; Kafka's own `kafka-consumer-groups` for deletions and resets. None of
these records is written by lagd's encoder.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from lagd.embedded.kafka import KafkaCluster, classpath
from lagd.embedded.services import ServiceError


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


_OFFSETS_TOPIC_MADE: set[str] = set()


async def ensure_offsets_topic(bootstrap: str) -> None:
    """Make Kafka create `__consumer_offsets` (on a group's first use) before lagd is asked to read it."""
    if bootstrap in _OFFSETS_TOPIC_MADE:
        return
    topic = "lagd-offsets-topic-maker"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    await commit_classic(bootstrap, "lagd-offsets-topic-maker", {TopicPartition(topic, 0): 0})
    _OFFSETS_TOPIC_MADE.add(bootstrap)


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
    args = cluster.java_command(
        main,
        "--bootstrap-server", cluster.bootstrap, "--topic", topic, "--group", group,
        "--max-messages", str(max_messages), "--timeout-ms", "60000",
        "--consumer-property", f"client.id=java-{group}",
    )  # fmt: skip
    if not share:
        args += ["--from-beginning", "--consumer-property", f"group.protocol={protocol}"]
    for prop in properties:
        args += ["--consumer-property", prop]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return JavaConsumer(proc)


JAVA_SOURCES = Path(__file__).parent / "java"  # the tests' own Java programs
_COMPILE = threading.Lock()


def _javac() -> str:
    import shutil

    exe = shutil.which("javac")
    if exe is None:
        raise ServiceError("the Kafka Streams tests compile their application: apt-get install default-jdk-headless")
    return exe


def java_classes(cluster: KafkaCluster) -> Path:
    """tests/java/*.java compiled with javac against `cluster`'s own jars, once per cluster."""
    out = cluster.workdir / "test-classes"
    programs = sorted(JAVA_SOURCES.glob("*.java"))
    with _COMPILE:
        if not all((out / f"{p.stem}.class").exists() for p in programs):
            sources = [str(p) for p in programs]
            done = subprocess.run(
                [_javac(), "-d", str(out), "-cp", classpath(cluster.version), *sources],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise ServiceError(f"javac {' '.join(sources)} failed:\n{done.stderr[-3000:]}")
    return out


@dataclass
class StreamsApp:
    """A running Kafka Streams application (tests/java/Passthrough.java): source topic to sink topic."""

    proc: subprocess.Popen[str]
    app_id: str
    errors: Path
    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, word: str, timeout: float = 120.0) -> None:
        """Until the application prints `word` (RUNNING, PAUSED, RESUMED); fails with its errors after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.lines.get(timeout=max(0.0, deadline - time.monotonic())) == word:
                    return
            except queue.Empty:
                self.stop()
                raise AssertionError(
                    f"streams app {self.app_id} did not print {word} within {timeout:.0f} s:\n"
                    f"{self.errors.read_text(errors='replace')[-2000:]}"
                ) from None

    def command(self, line: str, answer: str) -> None:
        """Send a command ("pause", "resume") and wait for its answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        self.expect(answer, 30.0)

    def stop(self) -> None:
        """SIGTERM: the application closes, committing what it processed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


def streams_app(cluster: KafkaCluster, app_id: str, source: str, sink: str, protocol: str) -> StreamsApp:
    """Start the passthrough application `app_id` on `cluster` with `group.protocol=protocol`:
    "classic" (a classic consumer group of protocol type "consumer") or "streams" (KIP-1071)."""
    classes = java_classes(cluster)
    args = cluster.java_command(
        "Passthrough", cluster.bootstrap, app_id, source, sink, protocol, log="streams.log", classes=str(classes)
    )
    err = cluster.workdir / f"streams-{app_id}.err"
    with err.open("w") as errors:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True)
    return StreamsApp(proc, app_id, err)


def describe_offsets(
    cluster: KafkaCluster, group: str, command_config: Path | None = None
) -> dict[tuple[str, int], tuple[int | None, int | None, int | None]]:
    """`kafka-consumer-groups --describe --group G --offsets`: (topic, partition) -> (committed, log end, lag).

    Kafka's own tool is the ground truth lagd is compared with; "-" reads as None. With
    `command_config` (SASL and TLS client properties) it asks through the SASL_SSL listener.
    """
    out = cluster.consumer_groups("--describe", "--group", group, "--offsets", command_config=command_config)
    return {
        (r["TOPIC"], int(r["PARTITION"])): (_num(r["CURRENT-OFFSET"]), _num(r["LOG-END-OFFSET"]), _num(r["LAG"]))
        for r in _table(out)
    }


def _table(out: str) -> list[dict[str, str]]:
    """The rows of a Kafka group tool's table (a header line starting with GROUP), as dicts."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in out.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
        elif header is not None and len(cells) >= len(header):
            rows.append(dict(zip(header, cells, strict=False)))
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
    return [(p, o, k, v) for p, o, k, v, _ in await topic_records(bootstrap, "__consumer_offsets")]


async def topic_records(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes | None, int]]:
    """Every record of `topic` up to its end now, read_committed: (partition, offset, key, value,
    timestamp ms); none for a topic that does not exist."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        found = consumer._client.cluster.partitions_for_topic(topic) or set()
        parts = [TopicPartition(topic, p) for p in sorted(found)]
        if not parts:
            return []
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        out: list[tuple[int, int, bytes, bytes | None, int]] = []
        pending = set(parts)
        while pending:
            got = await consumer.getmany(*pending, timeout_ms=500)
            for tp, records in got.items():
                out += [(tp.partition, r.offset, r.key, r.value, r.timestamp) for r in records]
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        return sorted(out)
    finally:
        await consumer.stop()


# --- steady traffic, for brokers failing under it -------------------------------------------


@dataclass(frozen=True)
class Committed:
    """One commit a client made and Kafka acknowledged, at `at_ms` (wall clock, ms)."""

    group: str
    topic: str
    partition: int
    offset: int
    at_ms: int


@dataclass
class Traffic:
    """What the steady clients did: every commit Kafka acknowledged, records produced, and every
    commit or send Kafka refused (`failures`), so a test can tell its clients' troubles from lagd's."""

    commits: list[Committed] = field(default_factory=list)
    produced: int = 0
    failures: list[str] = field(default_factory=list)

    def last_commit_ms(self, group: str) -> int | None:
        return max((c.at_ms for c in self.commits if c.group == group), default=None)

    def latest(self, group: str) -> dict[tuple[str, int], int]:
        """The offset `group` committed last for each of its partitions."""
        out: dict[tuple[str, int], int] = {}
        for c in self.commits:
            if c.group == group:
                out[(c.topic, c.partition)] = c.offset
        return out

    def first_beyond_ms(self, group: str, topic: str, partition: int, offset: int) -> int | None:
        """When the first commit of `group` past `offset` on that partition was acknowledged
        (None: none was): how long a reader showing `offset` has missed a commit."""
        return min(
            (
                c.at_ms
                for c in self.commits
                if c.group == group and c.partition == partition and c.topic == topic and c.offset > offset
            ),
            default=None,
        )

    def longest_silence_ms(self, group: str) -> int:
        """The longest time between two acknowledged commits of `group` (a coordinator's failover)."""
        times = sorted({c.at_ms for c in self.commits if c.group == group})
        return max((b - a for a, b in itertools.pairwise(times)), default=0)


async def produce_steadily(
    bootstrap: str, topic: str, partitions: int, stop: asyncio.Event, traffic: Traffic, per_second: float = 10.0
) -> None:
    """Until `stop`: a record into each partition every 1/`per_second` s, acks=all, one partition
    not waiting for another (a partition without a leader holds only its own records back)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=30000)
    await producer.start()

    async def into(partition: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                await producer.send_and_wait(topic, f"r{n}".encode(), partition=partition)
                traffic.produced += 1
            except KafkaError as exc:
                traffic.failures.append(f"producer, partition {partition}: {exc!r}")
            n += 1
            with contextlib.suppress(TimeoutError):  # the pace, cut short by stop
                await asyncio.wait_for(stop.wait(), 1 / per_second)

    try:
        await asyncio.gather(*(into(p) for p in range(partitions)))
    finally:
        await producer.stop()


async def consume_and_commit(
    bootstrap: str, topic: str, group: str, stop: asyncio.Event, traffic: Traffic, every: float = 0.5
) -> None:
    """A classic group member (aiokafka) that reads everything and commits its positions every
    `every` s until `stop`, noting each commit Kafka acknowledged in `traffic` (aiokafka finds a
    moved coordinator and retries itself; a commit it gives up on is noted as a failure)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        client_id=f"steady-{group}",
    )
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        commit_at = loop.time()
        while not stop.is_set():
            await consumer.getmany(timeout_ms=100)
            if loop.time() < commit_at or not consumer.assignment():
                continue
            commit_at = loop.time() + every
            try:
                offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
            except KafkaError as exc:
                traffic.failures.append(f"{group}: commit {exc!r}")
                continue
            at = int(time.time() * 1000)
            traffic.commits += [Committed(group, tp.topic, tp.partition, o, at) for tp, o in offsets.items()]
    finally:
        await consumer.stop()


async def consume_behind(
    bootstrap: str,
    topic: str,
    group: str,
    stop: asyncio.Event,
    traffic: Traffic,
    behind_s: float,
    every: float = 0.5,
) -> None:
    """A classic group member (aiokafka) that takes each record `behind_s` after it was written (a
    delay queue) and commits its positions every `every` s until `stop`.

    A record still too young is left on the broker: the member seeks back to it and pauses the
    partition until it is due. So records always wait unfetched, about `behind_s` of them: a
    partition whose leader dies keeps them out of reach, and its committed offset stops there
    (a member that reads everything at once has nothing left waiting when the leader dies)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        client_id=f"behind-{group}",
    )
    await consumer.start()
    loop = asyncio.get_running_loop()
    due: dict[TopicPartition, int] = {}  # a paused partition -> when its next record is due (ms)
    try:
        commit_at = loop.time()
        while not stop.is_set():
            now = int(time.time() * 1000)
            for tp, at in list(due.items()):
                if at <= now:
                    del due[tp]
                    if tp in consumer.assignment():  # a rebalance may have taken it (and its pause)
                        consumer.resume(tp)
            got = await consumer.getmany(timeout_ms=100)
            now = int(time.time() * 1000)
            for tp, records in got.items():
                young = next((r for r in records if r.timestamp > now - behind_s * 1000), None)
                if young is not None:
                    consumer.seek(tp, young.offset)
                    consumer.pause(tp)
                    due[tp] = young.timestamp + int(behind_s * 1000)
            if loop.time() < commit_at or not consumer.assignment():
                continue
            commit_at = loop.time() + every
            try:
                offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
            except KafkaError as exc:
                traffic.failures.append(f"{group}: commit {exc!r}")
                continue
            at = int(time.time() * 1000)
            traffic.commits += [Committed(group, tp.topic, tp.partition, o, at) for tp, o in offsets.items()]
    finally:
        await consumer.stop()


def _num(v: str) -> int | None:
    return None if v == "-" else int(v)


def share_from_earliest(cluster: KafkaCluster, group: str) -> None:
    """Make share group `group` start at the log start (its default is the log end, KIP-932)."""
    cluster.tool(
        "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap, "--alter",
        "--entity-type", "groups", "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest",
    )  # fmt: skip


def describe_share_offsets(cluster: KafkaCluster, group: str) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    """`kafka-share-groups --describe --group G --offsets`: (topic, partition) -> (start offset, lag); "-" is None."""
    out = cluster.tool(
        "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        "--bootstrap-server", cluster.bootstrap, "--describe", "--group", group, "--offsets",
    )  # fmt: skip
    return {(r["TOPIC"], int(r["PARTITION"])): (_num(r["START-OFFSET"]), _num(r["LAG"])) for r in _table(out)}


def describe_streams_offsets(
    cluster: KafkaCluster, group: str
) -> dict[tuple[str, int], tuple[int | None, int | None, int | None]]:
    """`kafka-streams-groups --describe --group G --offsets --verbose`: (topic, partition) ->
    (committed, log end, lag), as describe_offsets reads the consumer tool; "-" is None."""
    out = cluster.tool(
        "org.apache.kafka.tools.streams.StreamsGroupCommand",
        "--bootstrap-server", cluster.bootstrap, "--describe", "--group", group, "--offsets", "--verbose",
    )  # fmt: skip
    return {
        (r["TOPIC"], int(r["PARTITION"])): (_num(r["CURRENT-OFFSET"]), _num(r["LOG-END-OFFSET"]), _num(r["OFFSET-LAG"]))
        for r in _table(out)
    }


# --- the cluster's layout, as its metadata tells it -----------------------------------------


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader's node id (-1 while it has none)."""
    admin = await _admin(bootstrap)
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return {p["partition"]: p["leader"] for p in described["partitions"]}


async def group_coordinators(bootstrap: str, groups: Iterable[str]) -> dict[str, int]:
    """Group -> the node id of its coordinator (FindCoordinator): the leader of the offsets
    partition that holds the group's records."""
    admin = await _admin(bootstrap)
    try:
        return {g: await admin.find_coordinator(g) for g in groups}
    finally:
        await admin.close()


async def under_replicated(bootstrap: str, brokers: int) -> str:
    """ "" when `brokers` brokers are registered and every partition of every topic has a leader
    and all its replicas in sync; else what is not yet, for a failure message."""
    admin = await _admin(bootstrap)
    try:
        cluster: dict[str, Any] = await admin.describe_cluster()
        topics = await admin.describe_topics()
    finally:
        await admin.close()
    if len(cluster["brokers"]) != brokers:
        return f"brokers {sorted(b['node_id'] for b in cluster['brokers'])}"
    lacking = [
        f"{t['topic']}-{p['partition']} leader {p['leader']} isr {sorted(p['isr'])} of {sorted(p['replicas'])}"
        for t in topics
        for p in t["partitions"]
        if p["leader"] < 0 or set(p["isr"]) != set(p["replicas"])
    ]
    return "; ".join(lacking)


def allow(
    cluster: KafkaCluster, user: str, operations: Iterable[str], *resources: str, command_config: Path | None = None
) -> None:
    """`kafka-acls --add --allow-principal User:USER --operation OP ... RESOURCES`: `resources` as
    the tool takes them ("--topic", "t", "--group", "g"), each given every operation."""
    ops = [arg for op in operations for arg in ("--operation", op)]
    cluster.acls("--add", "--allow-principal", f"User:{user}", *ops, *resources, command_config=command_config)
