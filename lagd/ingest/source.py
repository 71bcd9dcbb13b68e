"""Where a cluster's committed offsets come from: the offsets topic, admin polling, or "auto".

`offsets-source = "auto"` (the default) streams `offsets-topic` where lagd can read it and
polls committed offsets through the admin API where it cannot: the topic is not there (a
managed service hides it, or no group has committed yet), or lagd is not authorized to
describe or read it. The choice is made at start, logged, and kept in the reader's progress
(`/lagd/v1/clusters` "offsets_source", `lagd_offsets_source` in /metrics). While the brokers
cannot be reached the probe is retried with backoff, like any reader.

A topic that is not there yet is looked for again before each polling round (one metadata
request): Apache Kafka creates `__consumer_offsets` when the first group uses it, so on a new
cluster it appears with the first consumer, and lagd then streams it from its beginning,
losing nothing. It switches only while polling has read nothing at all, which is so on
Apache Kafka (no offsets topic, no groups): polled commits carry the times they were seen as
their order, which the topic's offsets cannot follow. A broker that keeps groups elsewhere
(Tansu, a managed service) has had its groups polled by then, and stays polled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Literal

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import Event, GroupMembers, IngestCounters
from lagd.ingest.admin_poll import Emit, poll_admin
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client, start_consumer
from lagd.ingest.offsets_topic import read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.turns import Turn, plain_turn

log = logs.get(__name__)

Source = Literal["topic", "admin"]
MISSING = "does not exist"  # the end of unreadable_reason's answer for a topic not there
PROBE_FETCH_MS = 1_000  # one fetch long enough for the broker to answer an unauthorized read


async def unreadable_reason(cluster: ClusterSettings) -> str | None:
    """Why lagd cannot stream the cluster's offsets topic, or None when it can.

    Metadata of the topic by name says whether it exists and may be described (asked for
    every topic, a broker leaves out those lagd may not describe, as if they did not exist);
    one fetch from its first partition says whether it may be read. Connection failures
    raise (the caller retries): they say nothing about the topic.
    """
    topic = cluster.offsets_topic
    client = await start_client(cluster)
    try:
        answer = await client.send(client.get_random_node(), MetadataRequest([topic], allow_auto_topic_creation=False))
    finally:
        await close_quietly(client.close)
    metadata = ClusterMetadata()
    metadata.update_metadata(answer)
    if topic in metadata.unauthorized_topics:
        return f"not authorized to describe topic {topic}"
    partitions = metadata.partitions_for_topic(topic)
    if not partitions:
        return f"topic {topic} {MISSING}"
    consumer = await start_consumer(cluster, isolation_level="read_committed", exclude_internal_topics=False)
    try:
        tp = TopicPartition(topic, min(partitions))
        consumer.assign([tp])
        try:
            await consumer.seek_to_beginning(tp)
            await consumer.getmany(tp, timeout_ms=PROBE_FETCH_MS, max_records=1)
        except TopicAuthorizationFailedError:
            return f"not authorized to read topic {topic}"
        except UnknownTopicOrPartitionError:
            return f"topic {topic} {MISSING}"
    finally:
        await close_quietly(consumer.stop)
    return None


async def topic_exists(admin: AIOKafkaAdminClient, topic: str) -> bool:
    """Whether the cluster has `topic` (with partitions), asked through a running admin client
    without letting the broker create it."""
    client = admin._client  # aiokafka's admin client has no metadata call that leaves auto-creation off
    answer = await client.send(client.get_random_node(), MetadataRequest([topic], allow_auto_topic_creation=False))
    metadata = ClusterMetadata()
    metadata.update_metadata(answer)
    return bool(metadata.partitions_for_topic(topic))


async def choose_source(
    cluster: ClusterSettings, stop: asyncio.Event, counters: IngestCounters, progress: ReaderProgress | None = None
) -> Source | None:
    """ "topic" where the offsets topic can be read, else "admin"; None when stopped first."""
    chosen = await _choose(cluster, stop, counters, progress)
    return chosen[0] if chosen else None


async def _choose(
    cluster: ClusterSettings, stop: asyncio.Event, counters: IngestCounters, progress: ReaderProgress | None
) -> tuple[Source, str] | None:
    """choose_source's answer with the reason the topic cannot be read ("" when it can)."""
    chosen: list[tuple[Source, str]] = []

    async def probe() -> None:
        reason = await unreadable_reason(cluster)
        if reason is None:
            log.info(
                "offsets source: streaming the offsets topic",
                cluster=cluster.name,
                offsets_source="topic",
                topic=cluster.offsets_topic,
            )
            chosen.append(("topic", ""))
        else:
            log.info(
                "offsets source: admin polling, the offsets topic cannot be read",
                cluster=cluster.name,
                offsets_source="admin",
                reason=reason,
                hint=f"lagd polls committed offsets every offset-refresh ({cluster.offset_refresh:g} s). To stream "
                f"every commit instead, allow lagd Describe and Read on {cluster.offsets_topic} and restart it, "
                'or set offsets-source = "admin" to skip this check',
            )
            chosen.append(("admin", reason))
        stop_probe.set()

    stop_probe = asyncio.Event()
    probing = asyncio.ensure_future(
        reconnecting(
            probe,
            stop_probe,
            counters,
            cluster=cluster,
            what="choosing the offsets source",
            counter="offsets_source_probe",
            hint="check that the brokers are reachable; lagd picks the offsets topic or admin polling once they answer",
            progress=progress,
        )
    )
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([probing, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not probing.done():
            probing.cancel()
            await asyncio.gather(probing, return_exceptions=True)
    if probing.done() and not probing.cancelled():
        probing.result()
    return chosen[0] if chosen else None


async def poll_until_the_topic_appears(
    cluster: ClusterSettings,
    emit: Emit | asyncio.Queue[list[Event]],
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    known_topics: Callable[[str], Iterable[str]] | None = None,
    clock: Clock = wall_ms,
) -> bool:
    """Poll the admin API (the offsets topic is not there) until `stop`, or until the topic is
    there, can be read, and polling has read nothing yet: then True, to stream it instead."""
    put: Emit = emit.put if isinstance(emit, asyncio.Queue) else emit
    polled = False
    looking = True
    switch = asyncio.Event()

    async def watched(events: list[Event]) -> None:
        nonlocal polled
        polled = polled or bool(events)
        await put(events)

    async def appeared(admin: AIOKafkaAdminClient) -> bool:
        nonlocal looking
        if not looking or not await topic_exists(admin, cluster.offsets_topic):
            return False
        looking = False
        reason = None if polled else await unreadable_reason(cluster)
        if polled or reason is not None:
            log.info(
                "offsets source: the offsets topic has appeared; lagd keeps polling",
                cluster=cluster.name,
                topic=cluster.offsets_topic,
                reason=reason or "polling had read groups already: their order cannot pass to the topic's",
                offsets_source="admin",
            )
            return False
        log.info(
            "offsets source: streaming the offsets topic, which has appeared",
            cluster=cluster.name,
            offsets_source="topic",
            topic=cluster.offsets_topic,
        )
        switch.set()
        return True

    polling = asyncio.Event()  # set by `stop` or a switch: what stops polling
    relay = asyncio.ensure_future(_first(stop, switch, polling))
    try:
        await poll_admin(
            cluster, watched, progress, counters, polling, known_topics=known_topics, clock=clock, before_round=appeared
        )
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
    return switch.is_set() and not stop.is_set()


async def _first(a: asyncio.Event, b: asyncio.Event, then: asyncio.Event) -> None:
    """Set `then` once `a` or `b` is set."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        then.set()
    finally:
        for w in waits:
            w.cancel()


async def read_offsets(
    cluster: ClusterSettings,
    positions: dict[int, int],
    emit: Emit | asyncio.Queue[list[Event]],
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    members: Iterable[GroupMembers] | None = None,
    known_topics: Callable[[str], Iterable[str]] | None = None,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
) -> None:
    """Run the cluster's offsets reader (choosing it first when offsets-source is "auto");
    the topic reader awaits `turn` between slices of its work (lagd.runtime.turns)."""
    source: Source
    if cluster.offsets_source == "auto":
        chosen = await _choose(cluster, stop, counters, progress)
        if chosen is None:
            return
        source, reason = chosen
        if reason.endswith(MISSING):
            progress.source = "admin"
            if not await poll_until_the_topic_appears(
                cluster, emit, progress, counters, stop, known_topics=known_topics, clock=clock
            ):
                return
            source = "topic"
    else:
        source = cluster.offsets_source
    progress.source = source
    if source == "topic":
        await read_offsets_topic(
            cluster, positions, emit, progress, counters, stop, members=members, clock=clock, turn=turn
        )
    else:
        await poll_admin(cluster, emit, progress, counters, stop, known_topics=known_topics, clock=clock)
