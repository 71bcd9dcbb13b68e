"""Real MirrorMaker 2 (dedicated mode) between two Apache Kafka clusters the tests started.

`org.apache.kafka.connect.mirror.MirrorMaker` from Maven Central's `connect-mirror`
(`lagd.embedded.kafka.mirror_maker_libs`), with short intervals so a test sees heartbeats,
offset syncs and checkpoints within seconds. It runs as its own JVM; `stop()` kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from lagd.embedded.kafka import MIRROR_MAKER_VERSION, KafkaCluster, java, mirror_maker_libs
from lagd.ingest.mirror_records import Checkpoint, decode_checkpoint, decode_heartbeat, decode_offset_sync
from tests.kafka_groups import commit_classic, create_topic, describe_offsets, produce, topic_records

# MM2 carries log4j 2 without the YAML reader the brokers' config needs, so it gets a properties file.
_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.mirror.name = org.apache.kafka.connect.mirror
logger.mirror.level = info
logger.syncs.name = org.apache.kafka.connect.mirror.OffsetSyncStore
logger.syncs.level = debug
logger.checkpoints.name = org.apache.kafka.connect.mirror.CheckpointStore
logger.checkpoints.level = debug
"""


@dataclass
class MirrorMaker:
    """A running MirrorMaker 2 process; `log` is its log file."""

    proc: subprocess.Popen[bytes]
    workdir: Path
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


def mm2_properties(
    source: KafkaCluster, target: KafkaCluster, topics: str, source_alias: str = "src", target_alias: str = "dst"
) -> str:
    """An mm2.properties mirroring `topics` (a regex) and every group from `source` to `target`, one way,
    with one-second heartbeats and checkpoints and an offset sync for every record (`offset.lag.max = 0`)."""
    s, t = source_alias, target_alias
    lines = [
        f"clusters = {s}, {t}",
        f"{s}.bootstrap.servers = {source.bootstrap}",
        f"{t}.bootstrap.servers = {target.bootstrap}",
        f"{s}->{t}.enabled = true",
        f"{s}->{t}.topics = {topics}",
        f"{s}->{t}.groups = .*",
        f"{t}->{s}.enabled = false",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "emit.heartbeats.interval.seconds = 1",
        "emit.checkpoints.interval.seconds = 1",
        "sync.group.offsets.enabled = true",
        "sync.group.offsets.interval.seconds = 1",
        "refresh.topics.interval.seconds = 2",
        "refresh.groups.interval.seconds = 2",
        "offset.lag.max = 0",
        "dedicated.mode.enable.internal.rest = false",
    ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def mirror_maker(
    source: KafkaCluster, target: KafkaCluster, topics: str, source_alias: str = "src", target_alias: str = "dst"
) -> Iterator[MirrorMaker]:
    """Run MirrorMaker 2 from `source` to `target` for the `with` block."""
    workdir = Path(tempfile.mkdtemp(prefix="lagd-mm2-"))
    log = workdir / "mm2.log"
    (workdir / "log4j2.properties").write_text(_LOG4J2.format(log=log))
    config = workdir / "mm2.properties"
    config.write_text(mm2_properties(source, target, topics, source_alias, target_alias))
    command = [
        java(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}", f"-Djava.io.tmpdir={workdir}",
        "-cp", f"{mirror_maker_libs()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(config),
    ]  # fmt: skip
    out = (workdir / "stdout.log").open("wb")
    proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    mm = MirrorMaker(proc, workdir, log)
    try:
        yield mm
    finally:
        mm.stop()
        out.close()


# --- a mirrored run, captured: the records MM2 wrote and what Kafka's own tools say ------------


async def mirrored_run(
    source: KafkaCluster,
    target: KafkaCluster,
    topic: str,
    group: str,
    while_mirroring: Callable[[dict[int, int], dict[int, int]], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Mirror `topic` (two partitions, steady traffic) from `source` ("src") to `target` ("dst") with
    real MirrorMaker 2, commit `group` on the source once MM2 copies, and wait until MM2 has
    checkpointed that commit and synced it to the target group; then `while_mirroring` (given the
    group's committed offsets per partition on the source and on the target, as
    `kafka-consumer-groups` prints them) runs before MM2 stops. Returns every record of MM2's
    topics (hex, with partition, offset and record timestamp) and the ground truth the records
    must agree with: what `kafka-consumer-groups` prints for the group on both clusters."""
    await create_topic(source.bootstrap, topic, PARTITIONS)
    await produce(source.bootstrap, topic, 50, PARTITIONS)
    started_ms = int(time.time() * 1000)
    with mirror_maker(source, target, topic) as mm:
        stop = asyncio.Event()
        traffic = asyncio.create_task(_steady(source.bootstrap, topic, stop))
        try:
            mirrored = f"src.{topic}"
            await _until(lambda: copied(target.bootstrap, mirrored, 100), mm, f"MM2 to copy {topic} to {mirrored}")
            first_syncs: dict[int, int] = {}
            await _until(
                lambda: _first_offset_syncs(source.bootstrap, topic, first_syncs), mm, f"MM2's offset syncs of {topic}"
            )
            ends = await _end_offsets(source.bootstrap, topic)
            # MM2 translates only offsets at or after the first offset sync it wrote for a partition (its
            # OffsetSyncStore answers -1 below that, and never checkpoints the group), and under load that
            # first sync can be well past offset 0: its producer keeps only the newest pending sync per
            # partition while ten are in flight. Commit where a checkpoint must follow.
            committed = {p: max(end - 7, first_syncs[p]) for p, end in ends.items()}
            await commit_classic(source.bootstrap, group, {TopicPartition(topic, p): o for p, o in committed.items()})
            await _until(
                lambda: _checkpointed(target.bootstrap, group, committed), mm, f"MM2 to checkpoint {group} {committed}"
            )
            synced: dict[int, int] = {}

            async def target_group_synced() -> bool:
                rows = await asyncio.to_thread(describe_offsets, target, group)
                synced.clear()
                synced.update({p: c for (t, p), (c, _, _) in rows.items() if t == mirrored and c is not None})
                return len(synced) == PARTITIONS

            await _until(target_group_synced, mm, f"MM2 to sync {group}'s offsets to the target")
            source_rows = await asyncio.to_thread(describe_offsets, source, group)
            if while_mirroring is not None:
                on_source = {p: c for (t, p), (c, _, _) in source_rows.items() if t == topic and c is not None}
                await while_mirroring(on_source, dict(synced))
        finally:
            stop.set()
            await traffic
    records: dict[str, list[dict[str, Any]]] = {}
    for cluster, name in (
        ("src", "heartbeats"),
        ("dst", "heartbeats"),
        ("dst", "src.heartbeats"),
        ("src", "mm2-offset-syncs.dst.internal"),
        ("dst", "src.checkpoints.internal"),
    ):
        bootstrap = source.bootstrap if cluster == "src" else target.bootstrap
        records[f"{cluster}:{name}"] = [
            {"partition": p, "offset": o, "timestamp": ts, "key": k.hex(), "value": None if v is None else v.hex()}
            for p, o, k, v, ts in await topic_records(bootstrap, name)
        ]
    return {
        "source": f"MirrorMaker 2 {MIRROR_MAKER_VERSION} (Maven Central org.apache.kafka:connect-mirror) "
        f"between two Apache Kafka {source.version} clusters aliased src and dst, one KRaft node each",
        "made_by": "python -m tests.capture_mirror_records (tests.mirror_maker.mirrored_run)",
        "topic": topic,
        "group": group,
        "started_ms": started_ms,
        "ended_ms": int(time.time() * 1000),
        "source_committed": {str(p): c for (t, p), (c, _, _) in source_rows.items() if t == topic},
        "target_committed": {str(p): c for p, c in synced.items()},
        "records": records,
    }


PARTITIONS = 2


async def _steady(bootstrap: str, topic: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await produce(bootstrap, topic, 5, PARTITIONS)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.3)


async def _until(check: Callable[[], Awaitable[bool]], mm: MirrorMaker, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if mm.proc.poll() is not None:
            raise AssertionError(f"MirrorMaker 2 exited ({mm.proc.returncode}) waiting for {what}:\n{mm.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{mm.log_tail()}")
        await asyncio.sleep(1.0)


async def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = [TopicPartition(topic, p) for p in sorted(consumer._client.cluster.partitions_for_topic(topic) or ())]
        return {tp.partition: o for tp, o in (await consumer.end_offsets(parts)).items()} if parts else {}
    finally:
        await consumer.stop()


async def copied(bootstrap: str, topic: str, at_least: int) -> bool:
    ends = await _end_offsets(bootstrap, topic)
    return len(ends) == PARTITIONS and all(o >= at_least for o in ends.values())


async def _first_offset_syncs(bootstrap: str, topic: str, first: dict[int, int]) -> bool:
    """Fill `first` with the upstream offset of MM2's first offset sync per partition of `topic`;
    true once every partition has one."""
    first.clear()
    for _, _, key, value, _ in await topic_records(bootstrap, "mm2-offset-syncs.dst.internal"):
        sync = decode_offset_sync(key, value)
        if sync.topic == topic and sync.partition not in first:
            first[sync.partition] = sync.upstream_offset
    return len(first) == PARTITIONS


async def _checkpointed(bootstrap: str, group: str, committed: dict[int, int]) -> bool:
    seen: dict[int, int] = {}
    for _, _, key, value, _ in await topic_records(bootstrap, "src.checkpoints.internal"):
        checkpoint = decode_checkpoint(key, value)
        if checkpoint.group == group:
            seen[checkpoint.partition] = checkpoint.upstream_offset
    return seen == committed


def check_capture(body: dict[str, Any]) -> list[str]:
    """What in a mirrored run's records disagrees with Kafka's own account of it (none: all agree).

    Heartbeats name the flow they were emitted for and carry the record's own timestamp; offset
    syncs of a freshly copied topic map each offset to itself; the group's newest checkpoint per
    partition holds its committed offset on the source (`kafka-consumer-groups` on src) and the
    offset MM2 synced to the target group (`kafka-consumer-groups` on dst)."""
    problems: list[str] = []
    records = body["records"]
    for name, flow in (
        ("src:heartbeats", ("dst", "src")),
        ("dst:heartbeats", ("src", "dst")),
        ("dst:src.heartbeats", ("dst", "src")),
    ):
        rows = records[name]
        if len(rows) < 3:
            problems.append(f"{name}: {len(rows)} heartbeats, expected several")
        last = 0
        for r in rows:
            hb = decode_heartbeat(_raw(r["key"]), _raw(r["value"]))
            if (hb.source, hb.target) != flow:
                problems.append(f"{name}@{r['offset']}: flow {hb.source}->{hb.target}, expected {flow[0]}->{flow[1]}")
            if hb.timestamp_ms != r["timestamp"]:
                problems.append(f"{name}@{r['offset']}: timestamp {hb.timestamp_ms} != record's {r['timestamp']}")
            if not body["started_ms"] - 60_000 <= hb.timestamp_ms <= body["ended_ms"]:
                problems.append(f"{name}@{r['offset']}: timestamp {hb.timestamp_ms} outside the run")
            if hb.timestamp_ms < last:
                problems.append(f"{name}@{r['offset']}: timestamp went back from {last} to {hb.timestamp_ms}")
            last = hb.timestamp_ms
    synced_partitions: set[int] = set()
    for r in records["src:mm2-offset-syncs.dst.internal"]:
        sync = decode_offset_sync(_raw(r["key"]), _raw(r["value"]))
        if sync.topic == body["topic"]:
            synced_partitions.add(sync.partition)
            if sync.upstream_offset != sync.downstream_offset:
                problems.append(f"offset sync {sync}: a fresh copy maps each offset to itself")
        elif sync.topic != "heartbeats":
            problems.append(f"offset sync for unexpected topic {sync.topic!r}")
    if synced_partitions != set(range(PARTITIONS)):
        problems.append(f"offset syncs for partitions {sorted(synced_partitions)}, expected all {PARTITIONS}")
    newest: dict[int, Checkpoint] = {}
    for r in records["dst:src.checkpoints.internal"]:
        checkpoint = decode_checkpoint(_raw(r["key"]), _raw(r["value"]))
        if checkpoint.group != body["group"] or checkpoint.topic != f"src.{body['topic']}":
            problems.append(f"checkpoint for unexpected group or topic: {checkpoint}")
            continue
        newest[checkpoint.partition] = checkpoint
    for p in range(PARTITIONS):
        checkpoint_or_none = newest.get(p)
        if checkpoint_or_none is None:
            problems.append(f"no checkpoint for partition {p}")
            continue
        upstream, downstream = checkpoint_or_none.upstream_offset, checkpoint_or_none.downstream_offset
        if upstream != body["source_committed"][str(p)]:
            problems.append(
                f"partition {p}: checkpoint upstream {upstream} != source group's {body['source_committed']}"
            )
        if downstream != body["target_committed"][str(p)]:
            problems.append(
                f"partition {p}: checkpoint downstream {downstream} != target group's {body['target_committed']}"
            )
        if downstream > upstream:
            problems.append(f"partition {p}: downstream {downstream} past upstream {upstream} on an identity copy")
    return problems


def _raw(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)
