"""MirrorMaker 2's own topics on a mirror's target cluster, read every offset-refresh.

For a mirror whose source has a MirrorMaker 2 alias (`mirrors.<name>.mm2-alias`, by default the
prefix without its dot), lagd reads two topics MM2 keeps on the target, without joining a group:
- `<alias>.heartbeats`: from each partition's newest record on, so a start costs one record;
  then every heartbeat as it arrives (a fetch waits at most FETCH_WAIT_MS), its arrival noted,
  which makes arrival minus emission the replication latency;
- `<alias>.checkpoints.internal`: from the beginning (it is compacted: one record per group and
  partition), then what is new.
Records already there when a partition was taken on carry no arrival time. A topic lagd's principal
may not describe is left out of the metadata a broker gives, as if it did not exist: so a topic
not there is asked for by name (the offset-syncs topic only when `mm2-target-alias` names it);
one seen but whose fetch is refused (Describe without Read) is left out of the assignment until
the next offset-refresh tries it again. Either is one warning naming the topic and the ACL to
add, and the flow's NO_HEARTBEATS reason says it of the heartbeats topic. On the source it reads
MM2's offset syncs (`mm2-offset-syncs.<target alias>.internal`: `mm2-target-alias`, else the one
such topic the source has), keeping the newest per partition. Every offset-refresh the flow's
`FlowWindow` is judged (`lagd.evaluate.mirror_flow`), with each mirrored partition's delay from
the log-end samples lagd keeps of both clusters, into `MirrorFlows`, which
/lagd/v1/mirrors/<name>/flow, /metrics and the status page show. A record that does not decode is counted
(`mirror_records_<reason>`) and skipped. Missing topics are not an error: the flow reads
NO_HEARTBEATS until MM2 creates them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings, MirrorSettings
from lagd.core.model import IngestCounters
from lagd.evaluate.lagtime import LagTime
from lagd.evaluate.mirror_flow import (
    CopyWatch,
    FlowLimits,
    FlowVerdict,
    FlowWindow,
    MissingCopy,
    PartitionDelay,
    failover_seconds,
    judge_flow,
    partition_delay,
)
from lagd.ingest.codec import DecodeError
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_consumer
from lagd.ingest.mirror_records import Checkpoint, OffsetSync, decode_checkpoint, decode_heartbeat, decode_offset_sync
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.state.windows import LogEnd

log = logs.get(__name__)

FETCH_WAIT_MS = 100  # how long a fetch may wait for a heartbeat: the latency's resolution
MAX_SYNCS = 100_000  # partitions whose newest offset sync is kept; more are counted, not kept
_SYNCS_TOPIC = re.compile(r"mm2-offset-syncs\.(.+)\.internal")
# Topics MM2 never copies as data: its default topics.exclude (internal topics, replicas) and the
# heartbeats topics it replicates on its own (judged from their records, not as copies).
_NOT_COPIED = re.compile(r"__.*|mm2.*\.internal|.*[-.]internal|.*\.replica|(.+\.)?heartbeats")


class LogEnds(Protocol):
    """The log-end samples lagd keeps (lagd.state.windows.State)."""

    def topics(self, cluster: str) -> list[str]: ...

    def topic_log_ends(self, cluster: str, topic: str) -> dict[int, LogEnd]: ...


@dataclass
class MirrorFlows:
    """Every MM2 flow's newest verdict: mirror name -> FlowVerdict (read by HTTP and /metrics)."""

    verdicts: dict[str, FlowVerdict] = field(default_factory=dict)
    dropped_checkpoints: dict[str, int] = field(default_factory=dict)


def mm2_alias(mirror: MirrorSettings) -> str:
    """The MM2 alias of the mirror's source, or "" when lagd reads no MM2 topics for it."""
    if mirror.mm2_alias:
        return mirror.mm2_alias
    if mirror.rename == "prefix" and mirror.prefix.endswith("."):
        return mirror.prefix[:-1]
    return ""


def flow_limits(mirror: MirrorSettings) -> FlowLimits:
    return FlowLimits(
        stall_after_s=mirror.heartbeat_stall_after, lag_after_s=mirror.heartbeat_lag_after, window_s=mirror.window
    )


async def watch_mirror_flow(
    target: ClusterSettings,
    mirror: MirrorSettings,
    flows: MirrorFlows,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    clock: Clock = wall_ms,
    source: ClusterSettings | None = None,
    log_ends: LogEnds | None = None,
) -> None:
    """Read `mirror`'s MM2 topics on `target` into `flows` every offset-refresh until `stop`,
    reconnecting after failures as every reader does. The window survives reconnections. With
    `source` and `log_ends` (the daemon's State), each mirrored partition is judged too."""
    window = FlowWindow(flow_limits(mirror))
    partitions = PartitionJudge(mirror, target.name, source, log_ends)
    alias = mm2_alias(mirror)
    await reconnecting(
        functools.partial(_session, target, mirror, window, partitions, flows, counters, stop, clock),
        stop,
        counters,
        cluster=target,
        what=f"mirror {mirror.name}'s MirrorMaker 2 reader",
        counter="mirror_flow",
        hint=f"check that cluster {target.name} is reachable and that lagd's principal has Read on topics "
        f"{alias}.heartbeats and {alias}.checkpoints.internal there (and on MM2's offset-syncs topic on the source)",
    )


async def _session(
    target: ClusterSettings,
    mirror: MirrorSettings,
    window: FlowWindow,
    partitions: PartitionJudge,
    flows: MirrorFlows,
    counters: IngestCounters,
    stop: asyncio.Event,
    clock: Clock,
) -> None:
    alias = mm2_alias(mirror)
    consumer = await start_consumer(target, fetch_max_wait_ms=FETCH_WAIT_MS)
    reader = FlowReader(consumer, f"{alias}.heartbeats", f"{alias}.checkpoints.internal", clock)
    loop = asyncio.get_running_loop()
    try:
        await partitions.start()
        while not stop.is_set():
            until = loop.time() + target.offset_refresh
            await reader.assign()
            while not stop.is_set() and loop.time() < until:
                await reader.read(window, counters, timeout_ms=int(min(1.0, until - loop.time()) * 1000))
            await partitions.read_syncs(counters)
            told = [(target.name, t) for t in reader.denials.newly()]
            if partitions.source is not None:
                told += [(partitions.source.name, t) for t in partitions.denials.newly()]
            for cluster, topic in told:
                counters.count_failure("mirror_flow_not_authorized")
                log.warning(
                    "lagd may not read a MirrorMaker 2 topic; the flow is judged without it",
                    mirror=mirror.name,
                    cluster=cluster,
                    topic=topic,
                    hint=f"allow lagd's principal Read on topic {topic} on cluster {cluster}",
                )
            delays = partitions.delays()
            now = clock()
            verdict = judge_flow(mirror.name, window, now, delays, partitions.missing(now), partitions.gap_seconds(now))
            flows.verdicts[mirror.name] = unreadable_heartbeats(verdict, reader.heartbeats, reader.denials.told)
            flows.dropped_checkpoints[mirror.name] = window.dropped_checkpoints
            window.look(now, delays)
    finally:
        await close_quietly(consumer.stop)
        await partitions.close()


def unreadable_heartbeats(verdict: FlowVerdict, heartbeats: str, denied: frozenset[str]) -> FlowVerdict:
    """The verdict, whose NO_HEARTBEATS reason says that lagd may not read the heartbeats topic
    when it may not: the usual reason (is MM2 running?) would send the user the wrong way."""
    if verdict.status != "NO_HEARTBEATS" or heartbeats not in denied:
        return verdict
    reason = f"lagd may not read {heartbeats} (not authorized): allow its principal Read on the topic"
    return dataclasses.replace(verdict, reason=reason)


async def not_describable(client: Any, topics: list[str]) -> frozenset[str]:
    """Those of `topics` the cluster says lagd may not describe, asked for by name (every topic's
    metadata leaves them out, as if they did not exist) without letting the broker create them."""
    if not topics:
        return frozenset()
    answer = await client.send(client.get_random_node(), MetadataRequest(topics, allow_auto_topic_creation=False))
    metadata = ClusterMetadata()
    metadata.update_metadata(answer)
    return frozenset(metadata.unauthorized_topics) & frozenset(topics)


@dataclass
class Denials:
    """A reader's MM2 topics lagd may not read: hidden (no Describe: absent from every-topic
    metadata) or refused (a fetch refused since the last offset-refresh tried them again)."""

    hidden: frozenset[str] = frozenset()
    refused: set[str] = field(default_factory=set)
    told: frozenset[str] = frozenset()  # hidden or refused, as newly() last told

    def newly(self) -> list[str]:
        """The topics lagd may not read that it has not told of since it last could."""
        denied = self.hidden | self.refused
        newly, self.told = sorted(denied - self.told), frozenset(denied)
        return newly

    def retry(self) -> set[str]:
        """The refused topics, forgotten so that they are assigned and fetched again."""
        retried, self.refused = self.refused, set()
        return retried

    async def refuse(self, consumer: Any, assigned: set[TopicPartition], exc: TopicAuthorizationFailedError) -> None:
        """Note the topic a fetch was refused (aiokafka names it) and take it out of the assignment."""
        topic = str(exc.args[0]) if exc.args else ""
        self.refused.add(topic)
        await drop_assignment(consumer, assigned, topic)


async def drop_assignment(consumer: Any, assigned: set[TopicPartition], topic: str) -> None:
    """Take `topic`'s partitions out of `assigned` (updated in place) and the consumer's
    assignment, keeping where it stands on the others (assign() forgets every position)."""
    kept = {tp: await consumer.position(tp) for tp in assigned if tp.topic != topic}
    assigned.intersection_update(kept)
    consumer.assign(sorted(assigned))
    for tp, position in kept.items():
        consumer.seek(tp, position)


async def extend_assignment(
    consumer: Any, assigned: set[TopicPartition], found: set[TopicPartition]
) -> list[TopicPartition]:
    """Add the partitions of `found` not yet in `assigned` (updated in place) to the consumer's
    assignment, keeping where it stands on the others (assign() forgets every position); the
    new ones, sorted, are left for the caller to seek."""
    new = sorted(found - assigned)
    if new:
        kept = {tp: await consumer.position(tp) for tp in assigned}
        assigned.update(new)
        consumer.assign(sorted(assigned))
        for tp, position in kept.items():
            consumer.seek(tp, position)
    return new


class FlowReader:
    """One consumer (no group) over a flow's heartbeats and checkpoints topics, and where it stands."""

    def __init__(self, consumer: Any, heartbeats: str, checkpoints: str, clock: Clock) -> None:
        self.consumer = consumer
        self.heartbeats = heartbeats
        self.checkpoints = checkpoints
        self.clock = clock
        self.assigned: set[TopicPartition] = set()
        self.live_from: dict[TopicPartition, int] = {}  # below: there before lagd looked, arrival unknown
        self.denials = Denials()

    async def read(self, window: FlowWindow, counters: IngestCounters, timeout_ms: int) -> None:
        """Fold what arrives within `timeout_ms` (at most) into `window`."""
        if not self.assigned:
            await asyncio.sleep(timeout_ms / 1000)
            return
        try:
            batches = await self.consumer.getmany(timeout_ms=max(1, timeout_ms), max_records=5000)
        except TopicAuthorizationFailedError as exc:  # Describe without Read: read the other topic
            await self.denials.refuse(self.consumer, self.assigned, exc)
            return
        arrived = self.clock()
        for tp, records in batches.items():
            live_from = self.live_from.get(tp, 0)
            for r in records:
                self._fold(tp.topic, r.key, r.value, arrived if r.offset >= live_from else None, window, counters)

    async def assign(self) -> None:
        """Take on partitions of the two topics that appeared (MM2 creates them when it starts),
        and those refused before (an ACL may have been added since)."""
        # every topic's metadata, asked apart from the consumer's own: asking for the two by name
        # could make a broker with auto.create.topics.enable create them, and the consumer only
        # keeps the metadata of the topics it is assigned
        cluster = await self.consumer._client.fetch_all_metadata()
        found = {
            TopicPartition(topic, p)
            for topic in (self.heartbeats, self.checkpoints)
            for p in cluster.partitions_for_topic(topic) or ()
        }
        absent = [t for t in (self.heartbeats, self.checkpoints) if not cluster.partitions_for_topic(t)]
        self.denials.hidden = await not_describable(self.consumer._client, absent)
        retried = self.denials.retry()
        new = await extend_assignment(self.consumer, self.assigned, found)
        if not new:
            return
        ends = await self.consumer.end_offsets(new)
        if any(tp.topic not in retried for tp in new):
            log.info("reading MirrorMaker 2 topics", partitions=[f"{tp.topic}[{tp.partition}]" for tp in new])
        self.live_from.update(ends)
        for tp in new:
            if tp.topic == self.heartbeats:
                self.consumer.seek(tp, max(0, ends[tp] - 1))  # only the newest heartbeat matters
        checkpoints = [tp for tp in new if tp.topic == self.checkpoints]
        if checkpoints:
            await self.consumer.seek_to_beginning(*checkpoints)  # compacted: its start may be past 0

    def _fold(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        arrived: int | None,
        window: FlowWindow,
        counters: IngestCounters,
    ) -> None:
        try:
            if topic == self.heartbeats:
                window.heartbeat(decode_heartbeat(key, value).timestamp_ms, arrived)
            elif value is not None:  # a compacted-away checkpoint's tombstone says nothing
                window.checkpoint(decode_checkpoint(key, value))
        except DecodeError as exc:
            counters.count_failure(f"mirror_records_{exc.reason}")


class PartitionJudge:
    """Each mirrored partition's delay: MM2's newest offset sync per partition, read on the source,
    and the log-end samples lagd keeps of both clusters."""

    def __init__(
        self, mirror: MirrorSettings, target: str, source: ClusterSettings | None, log_ends: LogEnds | None
    ) -> None:
        self.mirror = mirror
        self.target = target
        self.source = source
        self.log_ends = log_ends
        self.prefix = f"{mm2_alias(mirror)}."
        self.consumer: Any = None
        self.syncs_topic = ""
        self.assigned: set[TopicPartition] = set()
        self.syncs: dict[tuple[str, int], OffsetSync] = {}
        self.dropped = 0
        self.copies = CopyWatch(mirror.topic_missing_after)
        self.denials = Denials()

    async def start(self) -> None:
        if self.source is not None and self.log_ends is not None:
            self.consumer = await start_consumer(self.source)

    async def close(self) -> None:
        if self.consumer is not None:
            await close_quietly(self.consumer.stop)
            self.consumer = None

    async def read_syncs(self, counters: IngestCounters) -> None:
        """Read the source's offset syncs topic up to its end now (found first, if need be)."""
        if self.consumer is None:
            return
        if not self.syncs_topic:
            self.syncs_topic = await self._find_syncs_topic(counters)
            if not self.syncs_topic:
                return
        cluster = await self.consumer._client.fetch_all_metadata()
        found = {TopicPartition(self.syncs_topic, p) for p in cluster.partitions_for_topic(self.syncs_topic) or ()}
        absent = [] if found else [self.syncs_topic]
        self.denials.hidden = await not_describable(self.consumer._client, absent)
        self.denials.retry()
        new = await extend_assignment(self.consumer, self.assigned, found)
        if new:
            await self.consumer.seek_to_beginning(*new)
        if not self.assigned:
            return
        ends: dict[TopicPartition, int] = await self.consumer.end_offsets(sorted(self.assigned))
        pending = {tp for tp, end in ends.items() if await self.consumer.position(tp) < end}
        while pending:
            try:
                batches = await self.consumer.getmany(*pending, timeout_ms=1000, max_records=5000)
            except TopicAuthorizationFailedError as exc:  # Describe without Read
                await self.denials.refuse(self.consumer, self.assigned, exc)
                return
            for records in batches.values():
                for r in records:
                    self._fold(r.key, r.value, counters)
            for tp in list(pending):
                if await self.consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)

    async def _find_syncs_topic(self, counters: IngestCounters) -> str:
        if self.mirror.mm2_target_alias:
            return f"mm2-offset-syncs.{self.mirror.mm2_target_alias}.internal"
        cluster = await self.consumer._client.fetch_all_metadata()
        names = sorted(t for t in cluster.topics() if _SYNCS_TOPIC.fullmatch(t))
        if len(names) > 1:
            counters.count_failure("mirror_offset_syncs_ambiguous")
            log.warning(
                "several MirrorMaker 2 offset-syncs topics on the source; partitions judged without them",
                mirror=self.mirror.name,
                topics=names,
                hint=f"set mirrors.{self.mirror.name}.mm2-target-alias to the target's alias in mm2.properties",
            )
            return ""
        return names[0] if names else ""

    def _fold(self, key: bytes | None, value: bytes | None, counters: IngestCounters) -> None:
        try:
            sync = decode_offset_sync(key, value)
        except DecodeError as exc:
            counters.count_failure(f"mirror_records_{exc.reason}")
            return
        k = (sync.topic, sync.partition)
        if k not in self.syncs and len(self.syncs) >= MAX_SYNCS:
            self.dropped += 1
            return
        self.syncs[k] = sync

    def gap_seconds(self, now_ms: int) -> Callable[[Checkpoint], LagTime | None] | None:
        """A checkpoint's failover gap in time, from the source's samples of its partition and
        MM2's newest offset sync of it; None when lagd samples no source."""
        if self.source is None or self.log_ends is None:
            return None
        source, log_ends, prefix = self.source.name, self.log_ends, self.prefix
        topics: dict[str, dict[int, LogEnd]] = {}  # this pass's: many groups checkpoint one topic

        def seconds(c: Checkpoint) -> LagTime | None:
            if not c.topic.startswith(prefix):
                return None
            topic = c.topic[len(prefix) :]
            if topic not in topics:
                topics[topic] = log_ends.topic_log_ends(source, topic)
            samples = topics[topic].get(c.partition)
            if samples is None:
                return None
            return failover_seconds(c, samples, self.syncs.get((topic, c.partition)), now_ms)

        return seconds

    def missing(self, now_ms: int) -> tuple[MissingCopy, ...]:
        """The covered source topics and partitions whose copy the target has lacked for the
        mirror's topic-missing-after, from the log-end samples lagd keeps of both clusters."""
        if self.source is None or self.log_ends is None:
            return ()
        exclude = f"{self.mirror.mm2_target_alias}." if self.mirror.mm2_target_alias else None
        source: dict[str, set[int]] = {}
        target: dict[str, set[int]] = {}
        for topic in self.log_ends.topics(self.source.name):
            if not self.mirror.covers(self.source.name, topic) or _NOT_COPIED.fullmatch(topic):
                continue
            if exclude and topic.startswith(exclude):
                continue  # came from the target: MM2 does not copy a topic back to where it began
            source[topic] = set(self.log_ends.topic_log_ends(self.source.name, topic))
            copy = self.log_ends.topic_log_ends(self.target, self.mirror.target_topic(topic))
            if copy:
                target[topic] = set(copy)
        return self.copies.look(now_ms, source, target)

    def delays(self) -> tuple[PartitionDelay, ...]:
        """Every mirrored partition's delay as the newest samples of both clusters show it."""
        if self.source is None or self.log_ends is None:
            return ()
        out: list[PartitionDelay] = []
        for target_topic in self.log_ends.topics(self.target):
            if not target_topic.startswith(self.prefix):
                continue
            topic = target_topic[len(self.prefix) :]
            if not self.mirror.covers(self.source.name, topic):
                continue
            source = self.log_ends.topic_log_ends(self.source.name, topic)
            for partition, le in sorted(self.log_ends.topic_log_ends(self.target, target_topic).items()):
                if not le.offsets or partition not in source:
                    continue
                sync = self.syncs.get((topic, partition))
                delay = partition_delay(topic, partition, le.offsets[-1], le.ts[-1], source[partition], sync)
                if delay is not None:
                    out.append(delay)
        return tuple(out)
