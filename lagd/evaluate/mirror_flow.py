"""A MirrorMaker 2 flow judged from MM2's own records: is it replicating, and where would groups resume?

Pure: the heartbeats and checkpoints MM2 replicated to the target (decoded by
`lagd.ingest.mirror_records`) and the moments lagd looked, in; a `FlowVerdict` out.

Heartbeats. MM2 emits a heartbeat into each cluster's `heartbeats` topic every
`emit.heartbeats.interval.seconds` (1 s by default) and replicates the source's to
`<alias>.heartbeats` on the target like any other topic, keeping the emission timestamp. lagd
reads that topic as records arrive, so each heartbeat's arrival minus its emission is the
replication latency at that moment (plus the two hosts' clock difference, and lagd's fetch
wait). Between arrivals the age of the newest heartbeat (now minus its emission) grows; beyond
one emission interval (measured between the two newest heartbeats) nothing newer has made it
across. The flow's delay at a look is the larger of the newest heartbeat's latency and its age
less one interval:
- NO_HEARTBEATS: none seen yet (MM2 not running for this flow, or emit.heartbeats.enabled off);
- STALLED: the newest heartbeat is older than `stall_after` (MM2 stopped, its tasks failed, or
  it cannot write);
- INCOMPLETE: a source topic (or partition) the mirror covers has had no copy on the target for
  `topic_missing_after` (MM2's topic filter leaves it out, or MM2 cannot create it there);
- LAGGING: the delay has been above `lag_after` at every look of the trailing half of `window`
  (at least two looks): the flow is behind, not just between two heartbeats; the reason gives
  the delay's trend in seconds per minute;
- OK otherwise.

Partitions. Heartbeats travel in a partition of their own, so a backlog in the data partitions
(a throttled MM2, a slow target) does not delay them. Each mirrored partition is judged too, from
the log-end samples lagd keeps of both clusters: the target's log end, translated to the source's
offsets by MM2's newest offset sync of that partition (the record at `upstream` was copied to
`downstream`, and those after it one for one; without a sync the offsets are taken as the same),
is where the source's log end stood some time ago: that time is the partition's delay, and the
source's log end minus it the records not yet copied. The flow's delay is the largest of its
heartbeat delay and its partitions' delays.

Checkpoints. `<alias>.checkpoints.internal` holds, per consumer group and partition, the group's
committed offset on the source and MM2's translation of it on the target. A group that failed
over now would resume at the translation; the difference is how many records it would read
again (MM2 translates conservatively, so never skip) when the topic's offsets are the same on
both clusters, as for a topic mirrored from its first record. In seconds, the gap is how much
earlier the source's log end passed the resume point (the target offset taken back to the
source's offsets by the partition's newest offset sync) than the group's committed offset, from
the source's log-end samples: the stretch of the source's traffic the group would process again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lagd.evaluate.lagtime import LagTime, lag_seconds
from lagd.ingest.mirror_records import Checkpoint, OffsetSync
from lagd.state.windows import LogEnd

FlowStatus = Literal["OK", "LAGGING", "STALLED", "INCOMPLETE", "NO_HEARTBEATS"]
FLOW_STATUSES: tuple[FlowStatus, ...] = ("OK", "LAGGING", "STALLED", "INCOMPLETE", "NO_HEARTBEATS")
DEFAULT_INTERVAL_MS = 1000  # MM2's emit.heartbeats.interval.seconds, until two heartbeats show it
MIN_INTERVAL_MS = 100


@dataclass(frozen=True, slots=True)
class FailoverGap:
    """Where `group` would resume on the target for one partition, and how far behind that is."""

    group: str
    topic: str  # as named on the target ("<alias>.<topic>")
    partition: int
    upstream_offset: int  # the group's committed offset on the source, as MM2 last checkpointed it
    downstream_offset: int  # where it would resume on the target
    records: int  # upstream - downstream: records read again after a failover (same offsets both sides)
    seconds: float | None = None  # the same stretch in time on the source (None: no source samples)
    estimated: bool = False  # seconds is a lower bound (beyond the oldest sample, or no offset sync)


def failover_seconds(checkpoint: Checkpoint, source: LogEnd, sync: OffsetSync | None, now_ms: int) -> LagTime | None:
    """How long before the group's committed offset the source's log end passed the point the
    group would resume at on the target (see the module's docstring); None without samples."""
    if not source.offsets:
        return None
    resume = checkpoint.downstream_offset
    exact = sync is None or resume >= sync.downstream_offset
    if sync is not None:
        resume += sync.upstream_offset - sync.downstream_offset
    resume = min(resume, checkpoint.upstream_offset)
    at_resume = lag_seconds(resume, source.offsets, source.ts, now_ms, start=source.run_start)
    at_group = lag_seconds(checkpoint.upstream_offset, source.offsets, source.ts, now_ms, start=source.run_start)
    return LagTime(round(max(0.0, at_resume.seconds - at_group.seconds), 3), at_resume.estimated or not exact)


@dataclass(frozen=True, slots=True)
class PartitionDelay:
    """How far the copy of one source partition is behind."""

    topic: str  # as named on the source
    partition: int
    records: int  # the source's log end minus the target's, in source offsets
    seconds: float  # how long ago the source's log end stood where the target's stands now
    estimated: bool  # a lower bound: beyond the oldest source sample lagd keeps
    synced: bool  # translated by an offset sync (else the offsets are taken as the same)
    as_of_ms: int  # when the target's log end was sampled: the moment the figures describe


def partition_delay(
    topic: str, partition: int, target_end: int, target_at_ms: int, source: LogEnd, sync: OffsetSync | None
) -> PartitionDelay | None:
    """One mirrored partition's delay as of the target's log-end sample `target_end`, taken at
    `target_at_ms` (see the module's docstring); None without a source sample."""
    if not source.offsets:
        return None
    source_end = source.offsets[-1]
    if sync is not None and target_end > sync.downstream_offset:
        copied = sync.upstream_offset + (target_end - sync.downstream_offset)
    elif sync is not None:
        copied = sync.upstream_offset
    else:
        copied = target_end
    copied = min(copied, source_end)
    behind = lag_seconds(copied, source.offsets, source.ts, target_at_ms, start=source.run_start)
    return PartitionDelay(
        topic, partition, source_end - copied, round(behind.seconds, 3), behind.estimated, sync is not None,
        target_at_ms,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MissingCopy:
    """A source topic the mirror covers whose copy on the target lacks `partitions` (all of the
    source's: the topic itself is missing), as it has since `since_ms`."""

    topic: str  # as named on the source
    partitions: tuple[int, ...]
    since_ms: int
    topic_missing: bool  # no copy of the topic at all (else only some partitions lack one)


class CopyWatch:
    """Which covered source partitions have no copy on the target, and since when.

    Bounded by the source's partitions the mirror covers: an entry goes once the copy appears or
    the source partition does."""

    def __init__(self, missing_after_s: float) -> None:
        self.missing_after_s = missing_after_s
        self.since: dict[tuple[str, int], int] = {}

    def look(self, now_ms: int, source: dict[str, set[int]], target: dict[str, set[int]]) -> tuple[MissingCopy, ...]:
        """`source`: each covered source topic's partitions; `target`: each copy's partitions, by the
        source's topic name. The copies missing for longer than `missing_after_s`."""
        seen: dict[tuple[str, int], int] = {}
        for topic, partitions in source.items():
            copied = target.get(topic, set())
            for p in partitions:
                if p not in copied:
                    seen[(topic, p)] = self.since.get((topic, p), now_ms)
        self.since = seen
        overdue: dict[str, list[int]] = {}
        first: dict[str, int] = {}
        for (topic, p), since in sorted(seen.items()):
            if now_ms - since >= self.missing_after_s * 1000:
                overdue.setdefault(topic, []).append(p)
                first[topic] = min(first.get(topic, since), since)
        return tuple(
            MissingCopy(topic, tuple(parts), first[topic], topic not in target) for topic, parts in overdue.items()
        )


@dataclass(frozen=True, slots=True)
class FlowVerdict:
    mirror: str
    status: FlowStatus
    reason: str
    observed_ms: int
    newest_heartbeat_ms: int | None
    heartbeat_age_s: float | None  # now minus the newest replicated heartbeat's emission
    delay_s: float | None  # the replication delay (see the module's docstring)
    delay_trend_s_per_min: float | None
    gaps: tuple[FailoverGap, ...]
    partitions: tuple[PartitionDelay, ...] = ()
    missing: tuple[MissingCopy, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowLimits:
    stall_after_s: float = 30.0
    lag_after_s: float = 10.0
    window_s: float = 300.0


class FlowWindow:
    """The delays lagd saw for one flow over the last `window` seconds, and its checkpoints.

    Bounded: looks older than the window go, and so do looks beyond `max_looks`; checkpoints
    keep the newest per (group, topic, partition), at most `max_checkpoints` of them (the rest
    counted in `dropped_checkpoints`)."""

    def __init__(self, limits: FlowLimits, max_looks: int = 1024, max_checkpoints: int = 100_000) -> None:
        self.limits = limits
        self.newest_heartbeat_ms: int | None = None
        self.newest_latency_ms: int | None = None  # None: the newest was read from the backlog
        self.interval_ms = DEFAULT_INTERVAL_MS
        self.looks: deque[tuple[int, float | None]] = deque(maxlen=max_looks)
        self.checkpoints: dict[tuple[str, str, int], Checkpoint] = {}
        self.max_checkpoints = max_checkpoints
        self.dropped_checkpoints = 0

    def heartbeat(self, timestamp_ms: int, arrived_ms: int | None) -> None:
        """A replicated heartbeat, seen arriving at `arrived_ms` (None: read from what was there
        before lagd looked, arrival unknown). An older or repeated one changes nothing."""
        newest = self.newest_heartbeat_ms
        if newest is not None and timestamp_ms <= newest:
            return
        if newest is not None:
            self.interval_ms = max(MIN_INTERVAL_MS, timestamp_ms - newest)
        self.newest_heartbeat_ms = timestamp_ms
        self.newest_latency_ms = None if arrived_ms is None else max(0, arrived_ms - timestamp_ms)

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        """A checkpoint, read in the topic's order: the later one of a key replaces the earlier."""
        key = (checkpoint.group, checkpoint.topic, checkpoint.partition)
        if key not in self.checkpoints and len(self.checkpoints) >= self.max_checkpoints:
            self.dropped_checkpoints += 1
            return
        self.checkpoints[key] = checkpoint

    def age_s(self, now_ms: int) -> float | None:
        newest = self.newest_heartbeat_ms
        return None if newest is None else max(0.0, (now_ms - newest) / 1000)

    def delay_s(self, now_ms: int) -> float | None:
        """The replication delay now: the newest heartbeat's latency, or its age less one
        interval once that is larger (nothing newer arrived when it should have)."""
        age = self.age_s(now_ms)
        if age is None:
            return None
        overdue = max(0.0, age - self.interval_ms / 1000)
        latency = overdue if self.newest_latency_ms is None else self.newest_latency_ms / 1000
        return round(max(latency, overdue), 3)

    def look(self, now_ms: int, partitions: tuple[PartitionDelay, ...] = ()) -> None:
        """Note the delay now (lagd has read the heartbeats topic up to its end), the partitions'
        delays included."""
        self.looks.append((now_ms, _flow_delay(self.delay_s(now_ms), partitions)))
        horizon = now_ms - int(self.limits.window_s * 1000)
        while self.looks and self.looks[0][0] < horizon:
            self.looks.popleft()


def _flow_delay(heartbeats: float | None, partitions: tuple[PartitionDelay, ...]) -> float | None:
    worst = max((p.seconds for p in partitions), default=None)
    if heartbeats is None:
        return worst
    return heartbeats if worst is None else max(heartbeats, worst)


def judge_flow(
    mirror: str,
    window: FlowWindow,
    now_ms: int,
    partitions: tuple[PartitionDelay, ...] = (),
    missing: tuple[MissingCopy, ...] = (),
    gap_seconds: Callable[[Checkpoint], LagTime | None] | None = None,
) -> FlowVerdict:
    """The flow's verdict as of its newest look (see the module's docstring for the rules), with
    `partitions`, the mirrored partitions' delays now, `missing`, the copies overdue
    (`CopyWatch.look`), and `gap_seconds`, a checkpoint's failover gap in time (`failover_seconds`
    with the partition's source samples and offset sync)."""
    limits = window.limits
    gaps = tuple(_gap(c, gap_seconds) for _, c in sorted(window.checkpoints.items()))
    newest = window.newest_heartbeat_ms
    if newest is None:
        return FlowVerdict(
            mirror, "NO_HEARTBEATS", "no heartbeat replicated to the target yet: is MirrorMaker 2 running for this "
            "flow, with emit.heartbeats.enabled (the default)?", now_ms, None, None, None, None, gaps, partitions,
            missing,
        )  # fmt: skip
    age = window.age_s(now_ms) or 0.0
    delay = _flow_delay(window.delay_s(now_ms), partitions) or 0.0
    worst = max(partitions, key=lambda p: p.seconds, default=None)
    where = f" ({worst.topic}[{worst.partition}]: {worst.records} records)" if worst and worst.seconds >= delay else ""
    trend = _trend_per_min(window)
    trend_text = "" if trend is None else f", {trend:+.1f} s per minute"
    if age > limits.stall_after_s:
        status: FlowStatus = "STALLED"
        reason = (
            f"no heartbeat replicated for {age:.0f} s (limit {limits.stall_after_s:.0f} s): MirrorMaker 2 is "
            "stopped or cannot copy; check its tasks and its log"
        )
    elif missing:
        status = "INCOMPLETE"
        reason = _missing_reason(missing, now_ms)
    elif _behind_throughout(window):
        status = "LAGGING"
        reason = (
            f"the target is {delay:.0f} s behind the source{where} (above {limits.lag_after_s:.0f} s "
            f"for the last half of {limits.window_s:.0f} s{trend_text})"
        )
    else:
        status = "OK"
        reason = f"the target is {delay:.1f} s behind the source"
    return FlowVerdict(mirror, status, reason, now_ms, newest, round(age, 3), delay, trend, gaps, partitions, missing)


def _gap(c: Checkpoint, gap_seconds: Callable[[Checkpoint], LagTime | None] | None) -> FailoverGap:
    t = None if gap_seconds is None else gap_seconds(c)
    return FailoverGap(
        c.group, c.topic, c.partition, c.upstream_offset, c.downstream_offset, c.upstream_offset - c.downstream_offset,
        None if t is None else t.seconds, t is not None and t.estimated,
    )  # fmt: skip


def _missing_reason(missing: tuple[MissingCopy, ...], now_ms: int) -> str:
    whole = [m for m in missing if m.topic_missing]
    some = [m for m in missing if not m.topic_missing]
    longest = max((now_ms - m.since_ms) / 1000 for m in missing)
    parts: list[str] = []
    if whole:
        names = ", ".join(m.topic for m in whole[:5]) + (f" and {len(whole) - 5} more" if len(whole) > 5 else "")
        parts.append(f"{len(whole)} topic(s) the mirror covers have no copy on the target: {names}")
    if some:
        names = ", ".join(f"{m.topic}{list(m.partitions)}" for m in some[:5])
        parts.append(f"{len(some)} copied topic(s) lack partitions: {names}")
    return (
        "; ".join(parts) + f" (for up to {longest:.0f} s): check MirrorMaker 2's topics filter and, in its log, "
        "whether it could create the topics on the target"
    )


def _behind_throughout(window: FlowWindow) -> bool:
    if not window.looks:
        return False
    newest_ms = window.looks[-1][0]
    half = newest_ms - int(window.limits.window_s * 500)
    trailing = [age for at, age in window.looks if at >= half]
    return len(trailing) >= 2 and all(age is not None and age > window.limits.lag_after_s for age in trailing)


def _trend_per_min(window: FlowWindow) -> float | None:
    """The least-squares slope of the delay over the window, in seconds per minute."""
    points = [(at / 60_000, age) for at, age in window.looks if age is not None]
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return round(sum((x - mx) * (y - my) for x, y in points) / sxx, 2)
