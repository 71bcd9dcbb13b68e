"""Where a cluster's committed offsets come from: the offsets topic, admin polling, or "auto".

`offsets-source = "auto"` (the default) streams `offsets-topic` where lagd can read it and
polls committed offsets through the admin API where it cannot: the topic is not there (a
managed service hides it, or no group has committed yet), or lagd is not authorized to
describe or read it. The choice is made once per start, logged, and kept in the reader's
progress (`/lagd/v1/clusters` "offsets_source", `lagd_offsets_source` in /metrics).
While the brokers cannot be reached the probe is retried with backoff, like any reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Literal

from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from lagd import logs
from lagd.clock import Clock, wall_ms
from lagd.config import ClusterSettings
from lagd.ingest.admin_poll import poll_admin
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client, start_consumer
from lagd.ingest.offsets_topic import Emit, read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.model import Event, GroupMembers, IngestCounters
from lagd.turns import Turn, plain_turn

log = logs.get(__name__)

Source = Literal["topic", "admin"]
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
        return f"topic {topic} does not exist"
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
            return f"topic {topic} does not exist"
    finally:
        await close_quietly(consumer.stop)
    return None


async def choose_source(
    cluster: ClusterSettings, stop: asyncio.Event, counters: IngestCounters, progress: ReaderProgress | None = None
) -> Source | None:
    """ "topic" where the offsets topic can be read, else "admin"; None when stopped first."""
    chosen: list[Source] = []

    async def probe() -> None:
        reason = await unreadable_reason(cluster)
        if reason is None:
            log.info(
                "offsets source: streaming the offsets topic",
                cluster=cluster.name,
                offsets_source="topic",
                topic=cluster.offsets_topic,
            )
            chosen.append("topic")
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
            chosen.append("admin")
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
    the topic reader awaits `turn` between slices of its work (lagd.turns)."""
    source: Source | None
    if cluster.offsets_source == "auto":
        source = await choose_source(cluster, stop, counters, progress)
        if source is None:
            return
    else:
        source = cluster.offsets_source
    progress.source = source
    if source == "topic":
        await read_offsets_topic(
            cluster, positions, emit, progress, counters, stop, members=members, clock=clock, turn=turn
        )
    else:
        await poll_admin(cluster, emit, progress, counters, stop, known_topics=known_topics, clock=clock)
