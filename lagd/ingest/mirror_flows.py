"""MirrorMaker 2's own topics on a mirror's target cluster, read every offset-refresh.

For a mirror whose source has a MirrorMaker 2 alias (`mirrors.<name>.mm2-alias`, by default the
prefix without its dot), lagd reads two topics MM2 keeps on the target, without joining a group:
- `<alias>.heartbeats`: from each partition's newest record on, so a start costs one record;
  then every heartbeat as it arrives (a fetch waits at most FETCH_WAIT_MS), its arrival noted,
  which makes arrival minus emission the replication latency;
- `<alias>.checkpoints.internal`: from the beginning (it is compacted: one record per group and
  partition), then what is new.
Records already there when a partition was taken on carry no arrival time. Every offset-refresh
the flow's `FlowWindow` is judged (`lagd.evaluate.mirror_flow`) into `MirrorFlows`, which
/lagd/v1/mirrors/<name>/flow, /metrics and the status page show. A record that does not decode is counted
(`mirror_records_<reason>`) and skipped. Missing topics are not an error: the flow reads
NO_HEARTBEATS until MM2 creates them.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings, MirrorSettings
from lagd.core.model import IngestCounters
from lagd.evaluate.mirror_flow import FlowLimits, FlowVerdict, FlowWindow, judge_flow
from lagd.ingest.codec import DecodeError
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_consumer
from lagd.ingest.mirror_records import decode_checkpoint, decode_heartbeat
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

FETCH_WAIT_MS = 100  # how long a fetch may wait for a heartbeat: the latency's resolution


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
) -> None:
    """Read `mirror`'s MM2 topics on `target` into `flows` every offset-refresh until `stop`,
    reconnecting after failures as every reader does. The window survives reconnections."""
    window = FlowWindow(flow_limits(mirror))
    await reconnecting(
        functools.partial(_session, target, mirror, window, flows, counters, stop, clock),
        stop,
        counters,
        cluster=target,
        what=f"mirror {mirror.name}'s MirrorMaker 2 reader",
        counter="mirror_flow",
        hint="check that the target cluster is reachable and lagd may read <alias>.heartbeats and "
        "<alias>.checkpoints.internal on it",
    )


async def _session(
    target: ClusterSettings,
    mirror: MirrorSettings,
    window: FlowWindow,
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
        while not stop.is_set():
            until = loop.time() + target.offset_refresh
            await reader.assign()
            while not stop.is_set() and loop.time() < until:
                await reader.read(window, counters, timeout_ms=int(min(1.0, until - loop.time()) * 1000))
            flows.verdicts[mirror.name] = judge_flow(mirror.name, window, clock())
            flows.dropped_checkpoints[mirror.name] = window.dropped_checkpoints
            window.look(clock())
    finally:
        await close_quietly(consumer.stop)


class FlowReader:
    """One consumer (no group) over a flow's heartbeats and checkpoints topics, and where it stands."""

    def __init__(self, consumer: Any, heartbeats: str, checkpoints: str, clock: Clock) -> None:
        self.consumer = consumer
        self.heartbeats = heartbeats
        self.checkpoints = checkpoints
        self.clock = clock
        self.assigned: set[TopicPartition] = set()
        self.live_from: dict[TopicPartition, int] = {}  # below: there before lagd looked, arrival unknown

    async def read(self, window: FlowWindow, counters: IngestCounters, timeout_ms: int) -> None:
        """Fold what arrives within `timeout_ms` (at most) into `window`."""
        if not self.assigned:
            await asyncio.sleep(timeout_ms / 1000)
            return
        batches = await self.consumer.getmany(timeout_ms=max(1, timeout_ms), max_records=5000)
        arrived = self.clock()
        for tp, records in batches.items():
            live_from = self.live_from.get(tp, 0)
            for r in records:
                self._fold(tp.topic, r.key, r.value, arrived if r.offset >= live_from else None, window, counters)

    async def assign(self) -> None:
        """Take on partitions of the two topics that appeared (MM2 creates them when it starts)."""
        # every topic's metadata, asked apart from the consumer's own: asking for the two by name
        # could make a broker with auto.create.topics.enable create them, and the consumer only
        # keeps the metadata of the topics it is assigned
        cluster = await self.consumer._client.fetch_all_metadata()
        found = {
            TopicPartition(topic, p)
            for topic in (self.heartbeats, self.checkpoints)
            for p in cluster.partitions_for_topic(topic) or ()
        }
        new = found - self.assigned
        if not new:
            return
        # assign() forgets the positions of what was assigned before: put them back
        kept = {tp: await self.consumer.position(tp) for tp in self.assigned}
        self.assigned |= new
        self.consumer.assign(sorted(self.assigned))
        for tp, position in kept.items():
            self.consumer.seek(tp, position)
        ends = await self.consumer.end_offsets(sorted(new))
        self.live_from.update(ends)
        for tp in sorted(new):
            if tp.topic == self.heartbeats:
                self.consumer.seek(tp, max(0, ends[tp] - 1))  # only the newest heartbeat matters
        checkpoints = sorted(tp for tp in new if tp.topic == self.checkpoints)
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
