"""MirrorMaker 2's own topics on a mirror's target cluster, read every offset-refresh.

For a mirror whose source has a MirrorMaker 2 alias (`mirrors.<name>.mm2-alias`, by default the
prefix without its dot), lagd reads two topics MM2 keeps on the target, without joining a group:
- `<alias>.heartbeats`: from each partition's newest record on, so a start costs one record;
- `<alias>.checkpoints.internal`: from the beginning (it is compacted: one record per group and
  partition), then what is new.
Each round reads both up to the end offsets it found at its start, folds the records into the
flow's `FlowWindow` and stores the verdict (`lagd.evaluate.mirror_flow`) in `MirrorFlows`, which
/lagd/v1/mirrors/<name>/flow and /metrics show. A record that does not decode is counted
(`mirror_records_<reason>`) and skipped. Missing topics are not an error: the flow reads
NO_HEARTBEATS until MM2 creates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition

from lagd import logs
from lagd.clock import Clock, wall_ms
from lagd.config import ClusterSettings, MirrorSettings
from lagd.evaluate.mirror_flow import FlowLimits, FlowVerdict, FlowWindow, judge_flow
from lagd.ingest.codec import DecodeError
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_consumer
from lagd.ingest.mirror_records import decode_checkpoint, decode_heartbeat
from lagd.model import IngestCounters

log = logs.get(__name__)


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
    reader = FlowReader(await start_consumer(target), f"{alias}.heartbeats", f"{alias}.checkpoints.internal")
    try:
        while not stop.is_set():
            await reader.read_round(window, counters)
            flows.verdicts[mirror.name] = judge_flow(mirror.name, window, clock())
            flows.dropped_checkpoints[mirror.name] = window.dropped_checkpoints
            window.look(clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), target.offset_refresh)
    finally:
        await close_quietly(reader.consumer.stop)


class FlowReader:
    """One consumer (no group) over a flow's heartbeats and checkpoints topics, and where it stands."""

    def __init__(self, consumer: Any, heartbeats: str, checkpoints: str) -> None:
        self.consumer = consumer
        self.heartbeats = heartbeats
        self.checkpoints = checkpoints
        self.assigned: set[TopicPartition] = set()

    async def read_round(self, window: FlowWindow, counters: IngestCounters) -> None:
        """Read both topics up to the end offsets found now, into `window`."""
        await self._assign()
        if not self.assigned:
            return
        ends: dict[TopicPartition, int] = await self.consumer.end_offsets(list(self.assigned))
        pending = {tp for tp, end in ends.items() if await self.consumer.position(tp) < end}
        while pending:
            batches = await self.consumer.getmany(*pending, timeout_ms=1000, max_records=5000)
            for tp, records in batches.items():
                for r in records:
                    self._fold(tp.topic, r.key, r.value, window, counters)
            for tp in list(pending):
                if await self.consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)

    async def _assign(self) -> None:
        """Take on partitions of the two topics that appeared (MM2 creates them when it starts)."""
        await self.consumer._client.force_metadata_update()
        cluster = self.consumer._client.cluster
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
        checkpoints = [tp for tp in new if tp.topic == self.checkpoints]
        heartbeats = [tp for tp in new if tp.topic == self.heartbeats]
        if checkpoints:
            await self.consumer.seek_to_beginning(*checkpoints)
        if heartbeats:
            ends = await self.consumer.end_offsets(heartbeats)
            for tp in heartbeats:
                self.consumer.seek(tp, max(0, ends[tp] - 1))  # only the newest heartbeat matters

    def _fold(self, topic: str, key: bytes | None, value: bytes | None, window: FlowWindow, counters: Any) -> None:
        try:
            if topic == self.heartbeats:
                window.heartbeat(decode_heartbeat(key, value).timestamp_ms)
            elif value is not None:  # a compacted-away checkpoint's tombstone says nothing
                window.checkpoint(decode_checkpoint(key, value))
        except DecodeError as exc:
            counters.count_failure(f"mirror_records_{exc.reason}")
