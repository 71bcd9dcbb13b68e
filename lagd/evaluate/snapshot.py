"""Every group's last verdict, kept small, for the pages that list every group.

`/metrics`, `/lagd/v1/groups` and the status page show every group at once. Judging every
group for each of them costs a full evaluation per request (about a second of CPU per 100k
group-partitions, several seconds at a million), and a Prometheus scraping every 15 s would
spend a good part of a core on it. The verdict watch judges every group whose windows or
samples changed anyway, within a pass of the change; it keeps here what those pages read of
each verdict, and they read it from here.

A snapshot is the verdict as of its `evaluated_at`, which the pages show: a group's status
changes are in it within a pass, its lag within a pass of a new commit or log-end sample.
Per partition it keeps five integers and a float (about 50 bytes, a tenth of a cached
verdict's), and nothing when `/metrics` is set to per-group series only.

The watch has the evaluator judge each group straight into a snapshot (`Evaluator.snapshot`:
the compiled pass appends each partition's row as it judges it, `Rows`), not into a verdict
read into one: building a PartitionVerdict per partition and reading it back was a third of
the watch's pass (bench_watch, 2,000 groups x 100 partitions: a median 76 us of CPU a group
before, 50 us after). `snapshot_of` makes one of a verdict a page judged itself.

`Snapshots` keeps each snapshot as a plain tuple of strs, numbers and bytes, which the cyclic
garbage collector stops tracking at its first look: kept as objects (a snapshot and its two
arrays), the snapshots of 10,000 groups were 30,000 of the 107,000 objects a full collection
walked at a million group-partitions (bench_http: 58-85 ms in all, every 5 minutes).
"""

from __future__ import annotations

import dataclasses
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.evaluate import native
from lagd.evaluate.retention_view import STATUS_OF, RetentionNote
from lagd.evaluate.verdict_types import GroupVerdict, PartitionVerdict
from lagd.state.layout import FIELDS, OFFSET

_STATUSES = list(PartitionStatus)
_CODE = {status: i for i, status in enumerate(_STATUSES)}
_STATUS_ORDER = tuple(_STATUSES)  # what the compiled loop finds each status in, by identity
_END_AT = FIELDS + OFFSET  # the newest commit's offset in a verdict's entries
# snapshot_of's loop over the partitions, compiled (_trend.c: snapshot_rows), or None where the
# Python runs (lagd.evaluate.native): the watch snapshots every group it judges, and in Python this
# loop was a third of its pass (bench_http, 1,000 groups of 100 partitions: 64 us a group).
_compiled = native.compiled()
_snapshot_rows = _compiled.snapshot_rows if _compiled is not None else None
ROW = 5  # a partition's row: topic index, partition, current lag, newest offset (-1: window not full), status
_PACK_ROW = struct.Struct(f"={ROW}q").pack
_PACK_SECONDS = struct.Struct("=d").pack


def group_reason(status: GroupStatus, not_ok: Iterable[str], counted: bool = True) -> str:
    """Why a group has its status, in the words on-call uses: how many partitions are at each
    status that is not OK ("2 partitions STOP, 1 partition WARN"), worst first, from one status
    per partition not OK (`GroupSnapshot.partition_statuses`); with `counted` False, from the
    statuses alone ("partitions at STOP, WARN"), for a snapshot kept without its partitions. The
    status page shows it for each group and the log says it with each status change."""
    if not counted:
        order = ("STOP", "STALL", "REWIND", "WARN")
        seen = sorted(set(not_ok), key=lambda s: (order.index(s) if s in order else len(order), s))
        return f"partitions at {', '.join(seen)}" if seen else group_reason(status, ())
    counts: dict[str, int] = {}
    for s in not_ok:
        counts[s] = counts.get(s, 0) + 1
    if not counts:
        return {GroupStatus.NOTFOUND: "group gone (deleted or expired)"}.get(status, "every partition OK")
    order = ("STOP", "STALL", "REWIND", "WARN")
    ranked = sorted(counts.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
    return ", ".join(f"{n} partition{'s' if n > 1 else ''} {s}" for s, n in ranked)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition as `/metrics` shows it."""

    topic: str
    partition: int
    current_lag: int
    offset: int | None  # the newest committed offset, with a full window only (Burrow's rule)
    status: PartitionStatus
    lag_seconds: float


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What the list pages show of a group's verdict (see the module doc)."""

    cluster: str
    group: str
    status: GroupStatus
    complete: float
    partition_count: int
    totallag: int
    lag_seconds: float
    lag_seconds_bound: bool  # a lagging partition's lag in seconds is only a lower bound
    evaluated_at: int
    not_ok: tuple[str, ...]  # the statuses of its partitions that are not OK, sorted
    topics: tuple[str, ...]
    rows: bytes | None  # ROW native int64s per partition (None: kept without partitions)
    seconds: bytes | None  # each partition's lag in seconds, a native double each
    # The partitions with records lost or at risk (lagd.evaluate.retention_view); `status`
    # already holds the worst they imply.
    retention: tuple[RetentionNote, ...] = ()

    def partitions(self) -> Iterator[PartitionRow]:
        """Its partitions, in the verdict's order (empty when kept without them)."""
        topics = self.topics
        for t, partition, current_lag, offset, status, lag_s in self.partition_values():
            yield PartitionRow(topics[t], partition, current_lag, offset if offset >= 0 else None, status, lag_s)

    def partition_statuses(self) -> tuple[list[str], bool]:
        """The status of each partition not OK, and whether that is one per partition (True) or,
        for a snapshot kept without its partitions, only which statuses occur (False)."""
        per_partition = [s.value for _, _, s in self.not_ok_partitions()]
        if per_partition or not self.not_ok:
            return per_partition, True
        return list(self.not_ok), False

    def not_ok_partitions(self) -> list[tuple[str, int, PartitionStatus]]:
        """The (topic, partition, status) of its partitions that are not OK, in its order (none
        when kept without partitions). Read from the rows' status column alone: the verdict
        watch asks it of every group not OK at every pass, where building each partition's
        values took a sixth of its pass at a million group-partitions (py-spy)."""
        if not self.not_ok or self.rows is None:
            return []
        rows = memoryview(self.rows).cast("q")
        topics, statuses, ok = self.topics, _STATUSES, _CODE[PartitionStatus.OK]
        return [
            (topics[rows[b]], rows[b + 1], statuses[code])
            for b, code in zip(range(0, len(rows), ROW), rows[ROW - 1 :: ROW], strict=True)
            if code != ok
        ]

    def partition_values(self) -> Iterator[tuple[int, int, int, int, PartitionStatus, float]]:
        """Its partitions as plain tuples, for `/metrics`' hundreds of thousands of lines: the
        index of the topic in `topics`, partition, current lag, newest offset (-1: the window
        is not full), status, lag in seconds (`partitions` builds a PartitionRow of each)."""
        if self.rows is None or self.seconds is None:
            return
        rows, seconds = memoryview(self.rows).cast("q"), memoryview(self.seconds).cast("d")
        statuses = _STATUSES
        b = 0
        for lag_s in seconds:
            yield rows[b], rows[b + 1], rows[b + 2], rows[b + 3], statuses[rows[b + 4]], lag_s
            b += ROW


def not_ok_of(mask: int) -> tuple[str, ...]:
    """The statuses that are not OK among those whose bit `mask` sets (bit k: the k-th
    PartitionStatus), sorted by value."""
    return tuple(sorted(s.value for k, s in enumerate(_STATUS_ORDER) if mask >> k & 1 and s is not PartitionStatus.OK))


@dataclass(slots=True)
class Rows:
    """A group's partitions as snapshot rows while the evaluator judges them (Evaluator.snapshot):
    the compiled pass appends each partition's row itself, the Python adds those it judges
    (`add`), and no PartitionVerdict outlives its partition."""

    rows: bytearray = field(default_factory=bytearray)  # ROW native int64s per partition
    seconds: bytearray = field(default_factory=bytearray)  # each partition's lag in seconds, a native double
    topics: list[str] = field(default_factory=list)  # in the order of their rows
    mask: int = 0  # of the partitions `add` took: bit k where one has the k-th status
    bound: bool = False  # of those: a lagging partition's lag in seconds is only a bound

    def count(self) -> int:
        return len(self.rows) // (8 * ROW)

    def add(self, p: PartitionVerdict, topic_index: int) -> None:
        """The row of a partition the Python judged (what `_read` reads of it)."""
        end = p.entries[_END_AT] if p.entries is not None and p.complete == 1.0 else -1
        code = _CODE[p.status]
        self.rows += _PACK_ROW(topic_index, p.partition, p.current_lag, end, code)
        self.seconds += _PACK_SECONDS(p.lag_seconds)
        self.mask |= 1 << code
        if p.current_lag > 0 and p.lag_seconds_estimated:
            self.bound = True

    def add_all(self, judged: list[PartitionVerdict], topic_index: int) -> None:
        """The rows of the partitions the Python judged, whose verdicts are then dropped."""
        for p in judged:
            self.add(p, topic_index)
        judged.clear()


def snapshot_of(verdict: GroupVerdict, partitions: bool = True) -> GroupSnapshot:
    """The snapshot of a verdict; `partitions=False` keeps the group's figures only."""
    read = _read_compiled(verdict.partitions, partitions) if _snapshot_rows is not None else None
    if read is None:
        read = _read(verdict.partitions, partitions)
    rows, seconds, topics, bound, not_ok = read
    return GroupSnapshot(
        verdict.cluster,
        verdict.group,
        verdict.status,
        verdict.complete,
        verdict.partition_count,
        verdict.totallag,
        verdict.lag_seconds,
        bound,
        verdict.evaluated_at,
        not_ok,
        topics,
        rows,
        seconds,
        tuple(n for n in verdict.retention if n.state in STATUS_OF),
    )


# What a snapshot reads of a verdict's partitions: its rows and lags in seconds (None without
# partitions), its topics, whether a lag in seconds is a bound, and the statuses not OK (sorted).
_Read: TypeAlias = "tuple[bytes | None, bytes | None, tuple[str, ...], bool, tuple[str, ...]]"


def _read(parts: list[PartitionVerdict], partitions: bool) -> _Read:
    """The partitions read in Python (what the compiled loop answers the same as)."""
    bound = False
    topics: dict[str, int] = {}
    rows: array[int] | None = array("q") if partitions else None
    seconds: array[float] | None = array("d") if partitions else None
    for p in parts:
        if p.current_lag > 0 and p.lag_seconds_estimated:
            bound = True
        if rows is not None and seconds is not None:
            t = topics.setdefault(p.topic, len(topics))
            end = p.entries[_END_AT] if p.entries is not None and p.complete == 1.0 else -1
            rows.extend((t, p.partition, p.current_lag, end, _CODE[p.status]))
            seconds.append(p.lag_seconds)
    not_ok = tuple(sorted({p.status.value for p in parts if p.status is not PartitionStatus.OK}))
    if rows is None or seconds is None:
        return None, None, tuple(topics), bound, not_ok
    return rows.tobytes(), seconds.tobytes(), tuple(topics), bound, not_ok


def _read_compiled(parts: list[PartitionVerdict], partitions: bool) -> _Read | None:
    """The partitions read by the compiled loop, or None where it leaves them to the Python."""
    assert _snapshot_rows is not None
    got = _snapshot_rows(parts, PartitionVerdict, _STATUS_ORDER, array, _END_AT, partitions)
    if got is None:
        return None
    raw_rows, raw_seconds, topics, bound, mask = got
    rows, seconds = (raw_rows, raw_seconds) if partitions else (None, None)
    return rows, seconds, topics, bound, not_ok_of(mask)


# A snapshot as Snapshots keeps it: GroupSnapshot's fields in order, the status as its value.
_Kept: TypeAlias = "tuple[str, str, str, float, int, int, float, bool, int, tuple[str, ...], tuple[str, ...], bytes | None, bytes | None, tuple[RetentionNote, ...]]"
_GROUP_STATUS = {status.value: status for status in GroupStatus}


def _keep(snap: GroupSnapshot) -> _Kept:
    return (
        snap.cluster,
        snap.group,
        snap.status.value,
        snap.complete,
        snap.partition_count,
        snap.totallag,
        snap.lag_seconds,
        snap.lag_seconds_bound,
        snap.evaluated_at,
        snap.not_ok,
        snap.topics,
        snap.rows,
        snap.seconds,
        snap.retention,
    )


def _restore(kept: _Kept) -> GroupSnapshot:
    cluster, group, status, complete, count, totallag, lag_s, bound, at, not_ok, topics, rows, seconds, notes = kept
    return GroupSnapshot(
        cluster,
        group,
        _GROUP_STATUS[status],
        complete,
        count,
        totallag,
        lag_s,
        bound,
        at,
        not_ok,
        topics,
        rows,
        seconds,
        notes,
    )


class Snapshots:
    """The latest snapshot of every group the verdict watch judges, by (cluster, group).
    Bounded by the groups the state holds: the watch drops a group it no longer sees. Kept as
    plain tuples the collector does not track (see the module doc); `get` builds the snapshot."""

    def __init__(self, partitions: bool = True) -> None:
        self.partitions = partitions
        self._by_group: dict[tuple[str, str], _Kept] = {}

    def put(self, verdict: GroupVerdict) -> GroupSnapshot:
        """Keep the verdict's snapshot (a NOTFOUND verdict drops the group's)."""
        if verdict.status is GroupStatus.NOTFOUND:
            self._by_group.pop((verdict.cluster, verdict.group), None)
            return snapshot_of(verdict, False)
        return self.keep(snapshot_of(verdict, self.partitions))

    def keep(self, snap: GroupSnapshot) -> GroupSnapshot:
        """Keep a snapshot the evaluator made (Evaluator.snapshot), without its partitions where
        they are not kept; a NOTFOUND one drops the group's."""
        key = (snap.cluster, snap.group)
        if snap.status is GroupStatus.NOTFOUND:
            self._by_group.pop(key, None)
            return snap
        if not self.partitions and snap.rows is not None:
            snap = dataclasses.replace(snap, topics=(), rows=None, seconds=None)
        self._by_group[key] = _keep(snap)
        return snap

    def get(self, cluster: str, group: str) -> GroupSnapshot | None:
        kept = self._by_group.get((cluster, group))
        return None if kept is None else _restore(kept)

    def drop(self, cluster: str, group: str) -> None:
        self._by_group.pop((cluster, group), None)

    def __len__(self) -> int:
        return len(self._by_group)
