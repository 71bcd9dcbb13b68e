"""The offsets-topic reader of a worker (lagd.scale): Kafka's group protocol decides what it reads.

Workers join one consumer group (`scale.group-id`) on the offsets topic; every group's
commits live in one offsets partition, so sharing the partitions shares the groups. On each
rebalance aiokafka calls back, and the reader hands over through a `Handover`:

- revoked: records of those partitions are no longer passed on (a fetch being handed on
  finishes first, under the same lock, and what it holds of them is dropped), then the
  handover applies what is queued, flushes it to Postgres and lets the groups go. aiokafka's
  rebalance is eager: the new owner is assigned the partitions only after every member has
  revoked, so it restores what was just written.
- assigned: the handover restores the partitions' groups from Postgres and returns where
  their stored positions stand; the reader seeks there (to the start where none is stored).

No offsets are committed to Kafka: positions live in Postgres beside the state they cover,
exactly as for a lone reader (lagd.ingest.offsets_topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import Event, GroupMembers, IngestCounters, OffsetsPartitionReset
from lagd.ingest.codec import CommitKeys
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client
from lagd.ingest.kafka_options import client_options
from lagd.ingest.offsets_topic import (
    FETCH_MAX_RECORDS,
    POSITIONS_EVERY_S,
    Emit,
    _apply_batch,
    _caught_up_now,
    _emitter,
    _Reading,
    fetch_turn,
    partition_counts,
    reread_outside,
)
from lagd.ingest.progress import ReaderProgress
from lagd.ingest.records import ConsumerGroupOwners
from lagd.ingest.validate import EdgeLimits
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.turns import Turn, plain_turn
from lagd.scale import barrier
from lagd.state.windows import offsets_partition

log = logs.get(__name__)


class AssignmentFailed(RuntimeError):
    """Taking partitions over failed; the session ends and the worker joins the group again."""


class Handover(Protocol):
    """What a worker does when the group protocol gives it partitions or takes them away."""

    async def assigned(
        self, cluster: str, partitions: set[int], count: int
    ) -> tuple[dict[int, int], list[GroupMembers]]:
        """Restore the partitions' groups; their stored positions and their groups' members."""
        ...

    async def revoked(self, cluster: str, partitions: set[int], count: int) -> None:
        """Apply what is queued of the partitions, flush it, let their groups go."""
        ...


@dataclass
class Assignment:
    """The offsets partitions this worker owns now, of how many; read by the log-end sampler."""

    count: int = 0  # partitions of the offsets topic
    owned: set[int] = field(default_factory=set)

    def owns(self, name: str) -> bool:
        """Is `name` (a group, or a topic whose sampling is shared out the same way) this worker's?"""
        return self.count > 0 and offsets_partition(name, self.count) in self.owned


@dataclass
class _Shared:
    """What the reading loop and the rebalance callbacks of one session share."""

    cluster: ClusterSettings
    handover: Handover
    progress: ReaderProgress
    kip848: ConsumerGroupOwners
    assignment: Assignment
    keys: CommitKeys  # the offset keys read (codec.CommitKeys), kept across sessions
    next_offsets: dict[int, int] = field(default_factory=dict)
    # the consumer's own positions as last asked (offsets_topic._session), of owned partitions
    asked: dict[int, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held while a fetch is handed on
    applied: Callable[[], Awaitable[None]] | None = None  # waits until what was handed on is applied
    put: Emit | None = None  # hands events on (the daemon's queue)
    consumer: Any = None
    counters: IngestCounters | None = None
    failed: AssignmentFailed | None = None  # set by a rebalance callback that failed: the session ends


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, shared: _Shared) -> None:
        self.shared = shared

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        sh = self.shared
        parts = {tp.partition for tp in revoked if tp.topic == sh.cluster.offsets_topic}
        # Held throughout: no fetch is handed on while the partitions are let go, so the
        # handover's wait for the queue to drain ends.
        async with sh.lock:
            parts &= sh.assignment.owned
            sh.assignment.owned -= parts
            for p in parts:
                sh.next_offsets.pop(p, None)
                sh.asked.pop(p, None)
            sh.progress.forget(parts)
            if parts:
                await sh.handover.revoked(sh.cluster.name, parts, sh.assignment.count)
                log.info("offsets partitions revoked", cluster=sh.cluster.name, partitions=sorted(parts))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Take the partitions over (see _take_over). aiokafka only logs a listener's exception
        and goes on, which would leave the partitions held but never read: their groups judged by
        nobody until the next rebalance. So a failure (Postgres away during the restore, a
        broker timeout) ends the session instead: the worker leaves the group, backs off and
        joins again, and the partitions are taken over again, by it or another worker."""
        try:
            await self._take_over(assigned)
        except Exception as exc:
            self.shared.failed = AssignmentFailed(
                f"taking over offsets partitions failed ({exc.__class__.__name__}: {exc}); the worker leaves "
                "the group and joins again. If this repeats, check that Postgres answers (storage.database-url): "
                "the groups are restored from it"
            )
            self.shared.failed.__cause__ = exc

    async def _take_over(self, assigned: Iterable[TopicPartition]) -> None:
        sh = self.shared
        topic = sh.cluster.offsets_topic
        parts = {tp.partition for tp in assigned if tp.topic == topic} - sh.assignment.owned
        if parts:
            # Catching up from here: the groups restored next are as of their last flush, so
            # neither readiness nor verdicts may take them as current until the reader has
            # brought them up to date (lagd.ingest.progress).
            sh.progress.reopen()
        positions, members = (
            await sh.handover.assigned(sh.cluster.name, parts, sh.assignment.count) if parts else ({}, [])
        )
        sh.kip848.seed(members)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        begin = {tp.partition: o for tp, o in (await sh.consumer.beginning_offsets(tps)).items()} if tps else {}
        end = {tp.partition: o for tp, o in (await sh.consumer.end_offsets(tps)).items()} if tps else {}
        fresh = []
        outside = reread_outside(sh.cluster.name, topic, positions, begin, end, sh.counters)
        for tp in tps:
            pos = positions.get(tp.partition)
            if pos is not None and tp.partition not in outside:
                sh.consumer.seek(tp, pos)
                sh.next_offsets[tp.partition] = pos
            else:
                fresh.append(tp)
        if fresh:
            await sh.consumer.seek_to_beginning(*fresh)
        if outside and sh.put is not None:
            # Recreated or truncated since the position was stored: read from the start, with the
            # restored groups' orders moved below anything new (as a lone reader does).
            await sh.put([OffsetsPartitionReset(sh.cluster.name, p, sh.assignment.count) for p in sorted(outside)])
        for p in parts:
            sh.progress.position[p] = sh.next_offsets.get(p, begin.get(p, 0))
        sh.progress.measure(begin, end)
        sh.assignment.owned |= parts
        log.info(
            "offsets partitions assigned",
            cluster=sh.cluster.name,
            partitions=sorted(parts),
            owned=len(sh.assignment.owned),
            of=sh.assignment.count,
            restored_positions=len(positions),
        )


async def read_offsets_as_worker(
    cluster: ClusterSettings,
    group_id: str,
    session_timeout_s: float,
    handover: Handover,
    assignment: Assignment,
    emit: Emit | asyncio.Queue[list[Event]],
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    fetch_timeout_ms: int = 500,
    max_records: int = FETCH_MAX_RECORDS,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
) -> None:
    """Read this worker's share of the offsets topic until `stop`; survive broker outages with
    backoff (a session that fails hands every partition back first, then joins again). `turn`
    is awaited before each slice of a fetch is decoded (lagd.runtime.turns)."""
    put = _emitter(emit)
    applied = emit.join if isinstance(emit, asyncio.Queue) else None  # apply marks each batch done
    groups = GroupFilter.for_cluster(cluster)
    kip848 = ConsumerGroupOwners(resumed=True)
    kip848.seed([])
    limits = EdgeLimits.for_cluster(cluster)
    keys = CommitKeys()  # kept across sessions: the keys do not change
    warned: set[str] = set()
    await reconnecting(
        lambda: _session(
            _Shared(cluster, handover, progress, kip848, assignment, keys, applied=applied, put=put, counters=counters),
            group_id,
            session_timeout_s,
            put,
            counters,
            stop,
            groups,
            limits,
            warned,
            fetch_timeout_ms,
            max_records,
            clock,
            turn,
        ),
        stop,
        counters,
        cluster=cluster,
        what="offsets-topic worker",
        counter="offsets_topic",
        hint="check that the brokers are reachable, that lagd may read "
        + cluster.offsets_topic
        + " and join the consumer group scale.group-id",
        progress=progress,
    )


async def _session(
    sh: _Shared,
    group_id: str,
    session_timeout_s: float,
    put: Emit,
    counters: IngestCounters,
    stop: asyncio.Event,
    groups: GroupFilter,
    limits: EdgeLimits,
    warned: set[str],
    fetch_timeout_ms: int,
    max_records: int,
    clock: Clock,
    turn: Turn,
) -> None:
    cluster = sh.cluster
    topic = cluster.offsets_topic
    metadata = await start_client(cluster)
    consumer: Any = None
    try:
        meta = await metadata.fetch_all_metadata()
        limits.partition_counts = partition_counts(meta)
        found = meta.partitions_for_topic(topic) or set()
        if not found:
            raise LookupError(f"offsets topic {topic} not found")
        sh.assignment.count = max(found) + 1
        session_ms = int(session_timeout_s * 1000)
        consumer = AIOKafkaConsumer(
            **client_options(cluster),
            group_id=group_id,
            enable_auto_commit=False,  # positions live in Postgres with the state they cover
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            exclude_internal_topics=False,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(1000, session_ms // 3),
            rebalance_timeout_ms=max(session_ms, 30_000),
            metadata_max_age_ms=int(cluster.topic_refresh * 1000),
        )
        sh.consumer = consumer
        await consumer.start()
        await barrier.arrive(os.environ.get(barrier.ENV), stop)  # the workers of one `lagd run` join together
        consumer.subscribe([topic], listener=_Listener(sh))
        loop = asyncio.get_running_loop()
        refresh_at = loop.time() + cluster.topic_refresh
        positions_at = 0.0
        reading = _Reading(consumer, topic, sh.next_offsets, sh.asked, sh.progress, counters, warned)
        while not stop.is_set():
            if loop.time() >= refresh_at:
                refresh_at = loop.time() + cluster.topic_refresh
                limits.partition_counts = partition_counts(await metadata.fetch_all_metadata())
            fetched = await consumer.getmany(timeout_ms=fetch_timeout_ms, max_records=max_records)
            if sh.failed is not None:
                raise sh.failed
            async with sh.lock:
                mine = {tp: recs for tp, recs in fetched.items() if tp.partition in sh.assignment.owned}
                short = sum(len(r) for r in fetched.values()) < max_records
                catching_up = not sh.progress.caught_up
                if mine:
                    await _apply_batch(
                        cluster.name,
                        mine,
                        put,
                        sh.next_offsets,
                        sh.progress,
                        groups,
                        counters,
                        sh.kip848,
                        limits,
                        clock=clock,
                        turn=fetch_turn(consumer, mine, turn),
                        keys=sh.keys,
                    )
                owned = sh.assignment.owned
                if owned and await reading.note(mine, short, loop.time() >= positions_at, owned, clock(), owned):
                    positions_at = loop.time() + POSITIONS_EVERY_S  # see offsets_topic._session
                if catching_up and sh.progress.caught_up and sh.applied is not None:
                    # read to the end, but maybe not applied yet: caught up once it is
                    sh.progress.reopen(measured=True)
                    await sh.applied()
                    sh.progress.mark_caught_up()
                if catching_up and sh.progress.caught_up:
                    _caught_up_now(consumer, sh.next_offsets, sh.asked, sh.progress, clock(), sh.assignment.owned)
            if not sh.assignment.owned:
                sh.progress.mark_fresh(clock())  # nothing assigned: nothing missed
    finally:
        if consumer is not None:
            # Leaving the group revokes what we own first (the handover flushes it), so the
            # other workers take it over at once instead of after the session timeout.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_leave(sh), max(1.0, session_timeout_s / 2))
            await close_quietly(consumer.stop)
        await close_quietly(metadata.close)


async def _leave(sh: _Shared) -> None:
    """Hand every owned partition over before the consumer leaves the group."""
    if sh.assignment.owned:
        await _Listener(sh).on_partitions_revoked(
            [TopicPartition(sh.cluster.offsets_topic, p) for p in sh.assignment.owned]
        )
