"""In-memory state: per group-partition commit windows and per partition log-end samples.

Pure and synchronous: events in, windows out; no I/O, no clock (times come in the events).
Applying an event twice changes nothing (commit `order` decides). Every change is recorded
for the store, which drains it with `drain_changes()` and writes it behind the hot path.

CONTRACT (filled in by the state/rules work; the store, HTTP and daemon code against it).

Memory: one window is one flat `array('q')` of interleaved (offset, order, timestamp,
observed, lag) quintuples, oldest first, with NO_LAG standing for a null lag; WindowEntry
objects are only built on reads. That keeps a group-partition well under 1 KiB.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from array import array
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    LogEndSample,
    LogStartSample,
    OffsetDeleted,
    OffsetsPartitionReset,
    PartitionOwner,
    ReaderPosition,
    RecordTimestamp,
    TopicDeleted,
    TopicPolicy,
    WindowEntry,
)
from lagd.core.ruleset import BURROW, RuleSet
from lagd.runtime import compiled
from lagd.state.changes import Changes, LogEndRow, PartitionKey, WindowKey, forget_groups
from lagd.state.layout import FIELDS, LAG, LAST, OBSERVED, OFFSET, ORDER, PREV, TS
from lagd.state.pauses import PauseSettings, add_pause, forget_old, is_pause

NO_LAG = -(2**63)  # a null lag inside a flat window (real lags are never negative)
_MIN_Q, _MAX_Q = -(2**63), 2**63 - 1  # what an array('q') holds
_LITTLE_ENDIAN = sys.byteorder == "little"

# The usual commit applied, and changed windows drained, by lagd/state/apply.py compiled by Cython
# (State.apply_many, Drain.step), or None where the Python of State applies them: not built
# (lagd.runtime.compiled), or LAGD_NO_EXTENSIONS=1. Set at the end of this module.
_apply_commits: Callable[..., int] | None = None
_drain_windows: Callable[..., int] | None = None


COARSE_STEP_MS = 60_000  # a sample leaving the fine tier is kept if this far after the coarse tier's newest
COARSE_MAX = 120  # coarse samples kept per partition, thinned so spacing grows with age (a few % of it)


@dataclass(slots=True)
class LogEnd:
    """Kept log-end samples of one topic-partition, oldest first.

    The fine tier holds the last `lag-samples` samples; samples leaving it go to a coarse tier
    (at most one a minute, at most COARSE_MAX, thinned so that their spacing stays a small
    share of their age), so lag in seconds stays exact for consumers hours or days behind in
    bounded memory (about 2 KiB per partition).
    `run_start` is where the newest non-decreasing run of offsets begins (after a log
    truncation the older samples describe a log that is gone, and the coarse tier is dropped);
    lag-in-time bisects from it.
    """

    offsets: array[int] = field(default_factory=lambda: array("q"))
    ts: array[int] = field(default_factory=lambda: array("q"))
    run_start: int = 0
    coarse_offsets: array[int] = field(default_factory=lambda: array("q"))
    coarse_ts: array[int] = field(default_factory=lambda: array("q"))
    # When the coarse tier's oldest sample came from a record (`from_record`): the lowest target
    # whose lag in seconds it answers exactly (the committed offset the record was read for;
    # there is no record between it and the sample's offset). -1: no such sample.
    record_from: int = -1
    record_create_time: bool = False  # that record's timestamp is the producer's (CreateTime)

    def retire(self, offset: int, ts: int) -> None:
        """Keep a sample leaving the fine tier in the coarse tier (thinned by age)."""
        cts = self.coarse_ts
        if cts and ts - cts[-1] < COARSE_STEP_MS:
            return
        self.coarse_offsets.append(offset)
        cts.append(ts)
        self._thin()

    def from_record(self, committed: int, offset: int, record_ts: int, create_time: bool = False) -> bool:
        """Keep "the record at `offset`, the first at or above `committed`, was appended at
        `record_ts`" as the oldest sample: the log end passed `offset` then, before every kept
        sample. Refused (False) unless it is older than every kept sample of the newest run
        (offset below its oldest offset, time not after its oldest time) and that run is the
        whole history (after a truncation the coarse tier is gone and lag in seconds reads
        only the run)."""
        if not self.offsets or self.run_start != 0 or not 0 <= committed <= offset:
            return False
        if self.coarse_ts:
            oldest, oldest_ts = self.coarse_offsets[0], self.coarse_ts[0]
        else:
            oldest, oldest_ts = self.offsets[0], self.ts[0]
        if (offset, record_ts) == (oldest, oldest_ts):
            # kept already (restored from the store, which keeps no mark of where a sample came
            # from): mark it again, from the coarse tier's front
            if not self.coarse_ts:
                if len(self.offsets) < 2:
                    return False
                self.coarse_offsets.append(self.offsets.pop(0))
                self.coarse_ts.append(self.ts.pop(0))
            self.record_from, self.record_create_time = committed, create_time
            return True
        if offset >= oldest or record_ts > oldest_ts:
            return False
        self.coarse_offsets.insert(0, offset)
        self.coarse_ts.insert(0, record_ts)
        self.record_from, self.record_create_time = committed, create_time
        self._thin()
        return True

    def _thin(self) -> None:
        cts = self.coarse_ts
        if len(cts) > COARSE_MAX:
            # drop the inner sample whose neighbours are closest together relative to its age
            newest = cts[-1]
            best, best_score = 1, float("inf")
            for i in range(1, len(cts) - 1):
                score = (cts[i + 1] - cts[i - 1]) / (newest - cts[i] + 1)
                if score < best_score:
                    best, best_score = i, score
            del self.coarse_offsets[best]
            del cts[best]

    def history(self) -> tuple[list[int], list[int]]:
        """Every kept sample (coarse then fine), oldest first: what the store keeps."""
        return (self.coarse_offsets.tolist() + self.offsets.tolist(), self.coarse_ts.tolist() + self.ts.tolist())

    def stored(self) -> tuple[list[int], list[int], list[int] | None]:
        """What the store keeps: every sample (`history`) and, where the oldest is a record's
        (from_record), the mark [committed, offset, ts, create time 0/1], so that a restart need
        not read the record again to know the figure is exact (`mark_restored`)."""
        offsets, ts = self.history()
        if self.record_from < 0 or not self.coarse_offsets:
            return offsets, ts, None
        mark = [self.record_from, self.coarse_offsets[0], self.coarse_ts[0], int(self.record_create_time)]
        return offsets, ts, mark

    def mark_restored(self, mark: Sequence[int] | None) -> bool:
        """Mark the oldest sample as the record `mark` names (LogEnd.stored), only where it is that
        record's (same offset and time): a row written by a lagd that does not keep the mark can
        hold samples with an older row's mark."""
        if mark is None or len(mark) != 4 or not self.offsets or self.run_start != 0:
            return False
        committed, offset, ts, create_time = mark
        oldest = (self.coarse_offsets[0], self.coarse_ts[0]) if self.coarse_ts else (self.offsets[0], self.ts[0])
        return (offset, ts) == oldest and self.from_record(committed, offset, ts, bool(create_time))


@dataclass(slots=True)
class _Group:
    windows: dict[str, dict[int, array[int]]] = field(default_factory=dict)
    last_commit: int = -(2**63)
    seq: int = 0  # global change counter value at the group's last change
    # Offset tombstones: (topic, partition) -> order of the newest, only for deleted partitions
    # (None until the group has one); commits at or below it are replays and are refused.
    deleted: dict[tuple[str, int], int] | None = None
    # When lagd began watching the group and its recent pauses (lagd.state.pauses): (since, end, length, ...).
    pauses: tuple[int, ...] = ()


@dataclass(slots=True)
class _Cluster:
    groups: dict[str, _Group] = field(default_factory=dict)
    log_end: dict[str, dict[int, LogEnd]] = field(default_factory=dict)
    topic_seq: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, set[str]] = field(default_factory=dict)  # topic -> groups with windows
    members: dict[str, GroupMembers] = field(default_factory=dict)
    owners: dict[str, dict[tuple[str, int], PartitionOwner]] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)
    newest_commit: int | None = None  # newest commit timestamp applied (ms)
    newest_sample: int | None = None  # newest log-end sample time applied (ms)
    # Log-start samples (ms, offset), oldest first, at most State.lag_samples per partition,
    # and each topic's cleanup.policy: what lagd.evaluate.retention judges from.
    log_start: dict[str, dict[int, deque[tuple[int, int]]]] = field(default_factory=dict)
    cleanup_policy: dict[str, str] = field(default_factory=dict)


def group_hash(group: str) -> int:
    """`Utils.abs(groupId.hashCode())`, what Kafka's coordinator places a group by: Java's
    String.hashCode over UTF-16 code units. Kafka's Utils.abs maps Integer.MIN_VALUE to 0 and
    is Math.abs otherwise (not the partitioner's `& 0x7fffffff`, which differs for every
    negative hash). The store keeps it beside each group's rows (Postgres cannot compute it),
    so a worker restores its groups by `group_hash % partitions` in SQL."""
    h = 0
    raw = group.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h = 0 if h == 1 << 31 else (1 << 32) - h  # abs of the negative int32
    return h


def offsets_partition(group: str, partitions: int) -> int:
    """The offsets-topic partition of a group, as Kafka's coordinator places it:
    `Utils.abs(groupId.hashCode()) % n` (see group_hash)."""
    return group_hash(group) % partitions


def entries_of(arr: array[int]) -> list[WindowEntry]:
    """Materialise a flat window as WindowEntry copies, oldest first."""
    lags: list[int | None] = arr[LAG::FIELDS].tolist()  # type: ignore[assignment]
    if NO_LAG in lags:
        lags = [None if lag == NO_LAG else lag for lag in lags]
    return list(map(WindowEntry, arr[OFFSET::FIELDS], arr[ORDER::FIELDS], arr[TS::FIELDS], arr[OBSERVED::FIELDS], lags))


def flat_window(entries: Iterable[WindowEntry]) -> array[int]:
    """The flat form of a window (FIELDS ints per entry, oldest first): what Changes carries."""
    out: array[int] = array("q")
    for e in entries:
        out.extend((e.offset, e.order, e.timestamp, e.observed, NO_LAG if e.lag is None else e.lag))
    return out


def window_bytes(arr: array[int]) -> bytes:
    """A flat window as the store keeps it (windows.entries): its ints as big-endian int64, the
    flat layout unchanged. One copy, no object per entry, and readable in SQL (int8send order)."""
    if _LITTLE_ENDIAN:
        arr = arr[:]
        arr.byteswap()
    return arr.tobytes()


def window_from_bytes(data: bytes) -> array[int]:
    """The flat window `window_bytes` stored; ValueError when `data` cannot be one."""
    if len(data) % (8 * FIELDS):
        raise ValueError(f"a stored window of {len(data)} bytes is not whole {FIELDS}-field entries of 8 bytes")
    arr: array[int] = array("q")
    arr.frombytes(data)
    if _LITTLE_ENDIAN:
        arr.byteswap()
    return arr


def entry_at(arr: array[int], i: int) -> WindowEntry:
    """The i-th entry (negative counts from the newest) of a flat window."""
    if i < 0:
        i += len(arr) // FIELDS
    b = i * FIELDS
    lag = arr[b + LAG]
    return WindowEntry(arr[b], arr[b + 1], arr[b + 2], arr[b + 3], None if lag == NO_LAG else lag)


class State:
    def __init__(
        self,
        *,
        intervals: int = 10,
        min_distance_ms: int = 0,
        expire_group_ms: int = 7 * 24 * 3600 * 1000,
        lag_samples: int = 360,
        record_history: bool = True,
        rules: RuleSet = BURROW,
        pauses: PauseSettings | None = None,
    ) -> None:
        if intervals < 1 or lag_samples < 1:
            raise ValueError("intervals and lag_samples must be at least 1: check storage.intervals / lag-samples")
        self.intervals = intervals
        self.min_distance_ms = min_distance_ms
        self.expire_group_ms = expire_group_ms
        self.lag_samples = lag_samples
        # The rules the windows are kept for: their step (see RuleSet.window_step_ms) is the
        # only thing State needs of them.
        self.rules = rules
        self.window_step_ms = rules.window_step_ms
        self.record_history = record_history
        # Group pauses are recorded (lagd.state.pauses) with these settings; None: not recorded.
        self.pause_settings = pauses
        self._pending_pauses: dict[tuple[str, str], tuple[int, ...]] = {}  # restored before the group's windows
        self._clusters: dict[str, _Cluster] = {}
        self._seq = 0
        self._tracked = 0
        # The changed windows' keys, as a dict (its values None) rather than a set: the compiled
        # apply makes each key a tuple the collector does not track, and a dict of such keys is
        # not tracked either, where a set always is: the collector walked a set of 144k keys and
        # the drained windows keyed by them in every full collection at 1M group-partitions.
        self._dirty_windows: dict[WindowKey, None] = {}
        self._dirty_log_end: set[PartitionKey] = set()
        self._record_cursor: dict[str, int] = {}  # where record_candidates goes on, per cluster
        self._changes = Changes()
        self._dispatch: dict[type, Callable[[Any], None]] = {
            Commit: self._commit,
            OffsetDeleted: self._offset_deleted,
            GroupMembers: self._group_members,
            GroupDeleted: self._group_deleted,
            LogEndSample: self._log_end_sample,
            LogStartSample: self._log_start_sample,
            RecordTimestamp: self._record_timestamp,
            TopicPolicy: self._topic_policy,
            TopicDeleted: self._topic_deleted,
            ReaderPosition: self._reader_position,
            OffsetsPartitionReset: self._offsets_partition_reset,
        }

    # --- writes -------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        """Apply one event (idempotent); records what changed for the store."""
        self._dispatch[type(event)](event)

    def apply_many(self, events: Iterable[Event]) -> None:
        """Apply events in order (idempotent). The usual commit (newer than its window's newest,
        of a group without tombstones) is applied by the compiled code where it is built
        (lagd/state/apply.py, compiled), every other event by the Python, in the events' order."""
        dispatch = self._dispatch
        fast = self._compiled_apply()
        if fast is None or type(events) is not list:
            for event in events:
                dispatch[type(event)](event)
            return
        i, n = 0, len(events)
        clusters = self._clusters
        while i < n:
            i = fast(
                self,
                clusters,
                events,
                i,
                Commit,
                self.intervals,
                self.min_distance_ms,
                self.window_step_ms,
                self.record_history,
            )
            if i < n:
                event = events[i]
                dispatch[type(event)](event)
                i += 1

    def _compiled_apply(self) -> Callable[..., int] | None:
        """apply.py's apply_commits, compiled, where it applies commits as `_commit` does under these
        settings: built, and the settings plain int64 integers."""
        if _apply_commits is None:
            return None
        for setting in (self.intervals, self.min_distance_ms, self.window_step_ms):
            if type(setting) is not int or not _MIN_Q <= setting <= _MAX_Q:
                return None
        return _apply_commits

    def expire_groups(self, now_ms: int) -> list[tuple[str, str]]:
        """Forget groups whose newest commit is older than expire-group; returns them."""
        limit = now_ms - self.expire_group_ms
        gone: list[tuple[str, str]] = []
        for cluster, cs in self._clusters.items():
            for group in [g for g, gs in cs.groups.items() if gs.last_commit < limit]:
                self._drop_group(cluster, cs, group)
                gone.append((cluster, group))
        return gone

    def remove_group(self, cluster: str, group: str) -> bool:
        """Operator removal (HTTP DELETE); False when unknown."""
        cs = self._clusters.get(cluster)
        if cs is None or group not in cs.groups:
            return False
        self._drop_group(cluster, cs, group)
        return True

    def remove_group_topic(self, cluster: str, group: str, topic: str) -> bool:
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        if cs is None or gs is None or topic not in gs.windows:
            return False
        self._drop_topic(cluster, cs, group, gs, topic)
        return True

    def undrained(self) -> int:
        """About how many changes the next drain_changes hands over (an upper bound: cheap to ask)."""
        ch = self._changes
        return len(self._dirty_windows) + len(self._dirty_log_end) + ch.size()

    def drain_changes(self) -> Changes:
        """Everything changed since the last drain (and forget it)."""
        drain = self.start_drain()
        drain.step(len(drain))
        return drain.changes

    def start_drain(self) -> Drain:
        """A drain_changes to be finished a slice at a time (`Drain.step`), so that one over
        hundreds of thousands of changed windows never holds the loop."""
        drain = Drain(self, self._changes, self._dirty_windows, list(self._dirty_log_end))
        self._dirty_windows = {}
        self._dirty_log_end = set()
        self._changes = Changes()
        return drain

    def window_groups(self) -> list[tuple[str, str]]:
        """Every (cluster, group) holding windows now: what a copy of every window walks
        (lagd.state.window_log), a group at a time."""
        return [(c, g) for c, cs in self._clusters.items() for g, gs in cs.groups.items() if gs.windows]

    def window_keys(self, cluster: str, group: str) -> list[WindowKey]:
        """The keys of a group's windows now (none once it is gone)."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs is not None else None
        if gs is None:
            return []
        return [(cluster, group, t, p) for t, parts in gs.windows.items() for p in parts]

    def start_copy(self, keys: list[WindowKey]) -> Drain:
        """A Drain of the windows of `keys` as they stand, whether changed or not, recording
        nothing: a copy of every window is written this way a slice at a time; a key with no
        window left is copied as removed."""
        return Drain(self, Changes(), keys)

    def record_status(self, cluster: str, group: str, status: str, ts: int) -> None:
        """Note a group verdict change for the history the trends job rolls up."""
        self._changes.status_history.append((ts, cluster, group, status))

    def discard_changes(self) -> None:
        """Forget recorded changes without building them (benchmarks; a store rebuilt from scratch)."""
        self._dirty_windows = {}
        self._dirty_log_end = set()
        self._changes = Changes()

    # --- event handlers ------------------------------------------------------------
    def _cluster(self, cluster: str) -> _Cluster:
        cs = self._clusters.get(cluster)
        if cs is None:
            cs = self._clusters[cluster] = _Cluster()
        return cs

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _commit(self, ev: Commit) -> None:
        cluster, group, topic, partition, offset, order, timestamp, observed = ev  # locals: read once
        if not (0 <= offset <= _MAX_Q and _MIN_Q <= order <= _MAX_Q):
            # checked before anything changes: the flat window holds int64 only
            raise ValueError(f"commit offset {offset} or order {order} outside int64 (offsets are >= 0)")
        if not (_MIN_Q <= timestamp <= _MAX_Q and _MIN_Q <= observed <= _MAX_Q):
            raise ValueError(f"commit times {timestamp}, {observed} outside int64")
        cs = self._clusters.get(cluster) or self._cluster(cluster)
        tomb = cs.tombstones.get(group)
        if tomb is not None and order < tomb:
            return  # a replayed commit from before the group was deleted
        gs = cs.groups.get(group)
        ptomb = None
        if gs is None:
            gs = cs.groups[group] = _Group()
            if self.pause_settings is not None:
                gs.pauses = (timestamp,)
                self._changes.pauses[(cluster, group)] = gs.pauses
        elif gs.deleted is not None:
            ptomb = gs.deleted.get((topic, partition))
            if ptomb is not None and order <= ptomb:
                return  # a replayed commit from before the partition's offset was deleted
        parts = gs.windows.get(topic)
        if parts is None:
            parts = gs.windows[topic] = {}
            cs.consumers.setdefault(topic, set()).add(group)
        arr = parts.get(partition)
        if arr is None:
            arr = parts[partition] = array("q")
            self._tracked += 1
        n = len(arr) // FIELDS
        cadence = arr[LAST + TS] - arr[PREV + TS] if n > 1 else 0  # the newest two entries are never thinned
        if n == 0 or order > arr[LAST + ORDER]:
            lag = NO_LAG
            topic_ends = cs.log_end.get(topic)
            if topic_ends is not None:
                le = topic_ends.get(partition)
                if le is not None and le.offsets:
                    lag = le.offsets[-1] - offset
                    if lag < 0:
                        lag = 0
            if n and 0 <= timestamp - arr[LAST + TS] < self.min_distance_ms:
                # min-distance: the newest entry takes the new offset, order and lag, keeps its time
                arr[LAST + OFFSET] = offset
                arr[LAST + ORDER] = order
                arr[LAST + LAG] = lag
            else:
                if n >= 3 and self.window_step_ms and arr[PREV + TS] - arr[PREV - FIELDS + TS] < self.window_step_ms:
                    # window-step: the second newest leaves the newest two for the thinned part,
                    # which keeps entries window-step apart; drop it when too close to its elder
                    del arr[PREV:LAST]
                    n -= 1
                if n >= self.intervals:
                    del arr[: (n - self.intervals + 1) * FIELDS]
                arr.extend((offset, order, timestamp, observed, lag))
        elif self.window_step_ms:
            return  # lagd's thinned windows keep no commit older than the newest: replays and late ones go
        else:
            # older than the newest: insert in order with a null lag, unless present or too old
            orders = arr[ORDER::FIELDS]
            if order in orders:
                return
            if n >= self.intervals and order < orders[0]:
                return
            i = 0
            while orders[i] < order:
                i += 1
            b = i * FIELDS
            if self.min_distance_ms > 0:
                # A newer entry that started less than min-distance before this commit absorbed it
                # (or would have, had it come in order): this is a replay, or merged away. Entries
                # keep their first timestamp and only gain orders, so the test holds for good.
                md = self.min_distance_ms
                for t in arr[b + TS :: FIELDS]:
                    if 0 <= timestamp - t < md:
                        return
            arr[b:b] = array("q", (offset, order, timestamp, observed, NO_LAG))
            if n + 1 > self.intervals:
                del arr[: (n + 1 - self.intervals) * FIELDS]
        if ptomb is not None and len(arr) >= self.intervals * FIELDS and arr[ORDER] > ptomb:
            self._forget_offset_tombstone(gs, topic, partition)  # the full window refuses older ones now
        if timestamp > gs.last_commit:
            ps = self.pause_settings
            if (
                ps is not None
                and timestamp - gs.last_commit >= ps.min_ms
                and timestamp - gs.last_commit > ps.cadences * cadence
            ):
                self._note_pause(cluster, group, gs, cadence, timestamp)  # the compiled apply hands these back
            gs.last_commit = timestamp
            if cs.newest_commit is None or timestamp > cs.newest_commit:
                cs.newest_commit = timestamp
        self._seq += 1
        gs.seq = self._seq
        self._dirty_windows[(cluster, group, topic, partition)] = None
        if self.record_history:
            lag_now = arr[LAST + LAG] if arr[LAST + ORDER] == order else NO_LAG
            self._changes.commit_history.add(timestamp, cluster, group, topic, partition, offset, lag_now, observed)

    def _note_pause(self, cluster: str, group: str, gs: _Group, cadence: int, timestamp: int) -> None:
        """The group was silent from its newest commit until `timestamp`: keep that silence as a
        pause when it is one (lagd.state.pauses.is_pause; the cadence is this partition's newest
        commit interval before the silence), and forget pauses older than pause-memory."""
        s = self.pause_settings
        assert s is not None
        gap = timestamp - gs.last_commit
        history = gs.pauses or (gs.last_commit,)
        if is_pause(gap, cadence, s):
            history = add_pause(history, timestamp, gap)
        history = forget_old(history, timestamp, s.memory_ms)
        if history != gs.pauses:
            gs.pauses = history
            self._changes.pauses[(cluster, group)] = history

    def _offset_deleted(self, ev: OffsetDeleted) -> None:
        cs = self._clusters.get(ev.cluster)
        gs = cs.groups.get(ev.group) if cs else None
        if cs is None or gs is None:
            return
        key = (ev.topic, ev.partition)
        deleted = gs.deleted
        prior = deleted.get(key) if deleted is not None else None
        if deleted is not None and prior is not None and ev.order > prior:
            deleted[key] = ev.order  # a newer tombstone of an already deleted partition
        arr = gs.windows.get(ev.topic, {}).get(ev.partition)
        if arr is None or (arr and ev.order <= arr[LAST + ORDER]):
            return  # unknown, or a commit newer than the tombstone exists
        self._drop_partition(ev.cluster, cs, ev.group, gs, ev.topic, ev.partition)
        if deleted is None:
            deleted = gs.deleted = {}
        if prior is None or ev.order > prior:
            deleted[key] = ev.order
        gs.seq = self._next_seq()

    @staticmethod
    def _forget_offset_tombstone(gs: _Group, topic: str, partition: int) -> None:
        deleted = gs.deleted
        if deleted is not None:
            deleted.pop((topic, partition), None)
            if not deleted:
                gs.deleted = None

    def _group_deleted(self, ev: GroupDeleted) -> None:
        cs = self._cluster(ev.cluster)
        prior = cs.tombstones.get(ev.group)
        if prior is None or ev.order > prior:
            cs.tombstones[ev.group] = ev.order
            self._changes.tombstones[(ev.cluster, ev.group)] = ev.order
        gs = cs.groups.get(ev.group)
        if gs is not None:
            # Only windows whose newest commit precedes the tombstone go: replays stay harmless.
            for topic, parts in list(gs.windows.items()):
                for partition, arr in list(parts.items()):
                    if not arr or arr[LAST + ORDER] < ev.order:
                        self._drop_partition(ev.cluster, cs, ev.group, gs, topic, partition)
            gs.seq = self._next_seq()
            if not gs.windows:
                del cs.groups[ev.group]
        members = cs.members.get(ev.group)
        if members is not None and members.order < ev.order:
            del cs.members[ev.group]
            cs.owners.pop(ev.group, None)
            self._changes.members[(ev.cluster, ev.group)] = None

    def _group_members(self, ev: GroupMembers) -> None:
        cs = self._cluster(ev.cluster)
        tomb = cs.tombstones.get(ev.group)
        if tomb is not None and ev.order < tomb:
            return
        prior = cs.members.get(ev.group)
        if prior is not None and ev.order < prior.order:
            return
        self._set_members(cs, ev)
        self._changes.members[(ev.cluster, ev.group)] = ev
        gs = cs.groups.get(ev.group)
        if gs is not None:
            gs.seq = self._next_seq()

    def _set_members(self, cs: _Cluster, members: GroupMembers) -> None:
        cs.members[members.group] = members
        cs.owners[members.group] = {(o.topic, o.partition): o for o in members.owners}

    def _log_end_sample(self, ev: LogEndSample) -> None:
        if not (0 <= ev.offset <= _MAX_Q and _MIN_Q <= ev.ts <= _MAX_Q):
            raise ValueError(f"log-end offset {ev.offset} or time {ev.ts} outside int64 (offsets are >= 0)")
        cs = self._clusters.get(ev.cluster) or self._cluster(ev.cluster)
        parts = cs.log_end.get(ev.topic)
        if parts is None:
            parts = cs.log_end[ev.topic] = {}
        le = parts.get(ev.partition)
        if le is None:
            le = parts[ev.partition] = LogEnd()
        if le.ts and ev.ts <= le.ts[-1]:
            return  # not newer than the newest kept sample: a replay or a late answer
        if le.offsets and ev.offset < le.offsets[-1]:
            le.run_start = len(le.offsets)
            le.coarse_offsets = array("q")  # the log was truncated or recreated: its past is gone
            le.coarse_ts = array("q")
            le.record_from, le.record_create_time = -1, False
        le.offsets.append(ev.offset)
        le.ts.append(ev.ts)
        if cs.newest_sample is None or ev.ts > cs.newest_sample:
            cs.newest_sample = ev.ts
        extra = len(le.offsets) - self.lag_samples
        if extra > 0:
            if le.run_start == 0:
                for i in range(extra):
                    le.retire(le.offsets[i], le.ts[i])
            del le.offsets[:extra]
            del le.ts[:extra]
            le.run_start = max(0, le.run_start - extra)
        cs.topic_seq[ev.topic] = self._next_seq()
        if ev.relayed:
            return  # its sampler stores it
        self._dirty_log_end.add((ev.cluster, ev.topic, ev.partition))
        if self.record_history:
            row: LogEndRow = (ev.ts, ev.cluster, ev.topic, ev.partition, ev.offset)
            self._changes.log_end_history.append(row)

    def _record_timestamp(self, ev: RecordTimestamp) -> None:
        """A record's timestamp: the oldest log-end observation of its partition (LogEnd.from_record).
        Ignored where it is not older than the kept samples (they already answer exactly)."""
        if not (0 <= ev.committed <= ev.offset <= _MAX_Q and _MIN_Q <= ev.record_ts <= _MAX_Q):
            raise ValueError(
                f"record at offset {ev.offset} (committed {ev.committed}) or time {ev.record_ts} outside int64 "
                "or below the committed offset"
            )
        cs = self._clusters.get(ev.cluster)
        parts = cs.log_end.get(ev.topic) if cs else None
        le = parts.get(ev.partition) if parts else None
        if cs is None or parts is None or le is None:
            return
        # A history whose past changed is a new LogEnd: the evaluator keeps a partition's facts
        # while its LogEnd is the same object (by id) and its newest sample the same, which a
        # sample added before the oldest would not change.
        new = dataclasses.replace(le, coarse_offsets=array("q", le.coarse_offsets), coarse_ts=array("q", le.coarse_ts))
        if not new.from_record(ev.committed, ev.offset, ev.record_ts, not ev.log_append_time):
            return
        parts[ev.partition] = new
        cs.topic_seq[ev.topic] = self._next_seq()
        if not ev.relayed:  # another worker samples the topic and writes its row
            self._dirty_log_end.add((ev.cluster, ev.topic, ev.partition))

    def record_candidates(self, cluster: str, limit: int, budget: int = 50_000) -> list[tuple[str, int, int]]:
        """(topic, partition, committed offset) where a group's lag in seconds is only a bound:
        a lag > 0 and a committed offset at or below every kept log-end sample (after a restart,
        or on a topic whose producer went idle). Reading the record at that offset makes it
        exact. The lowest committed offset per partition (one record answers every group at or
        above it up to the record), at most `limit`, partitions in order.
        Bounded work: each call looks at the windows of groups from where the last one stopped
        until it has seen about `budget` of them (a whole sweep of 1M group-partitions takes 20
        calls: about 15 ms each, where one sweep took 0.3 s)."""
        cs = self._clusters.get(cluster)
        if cs is None or limit <= 0 or not cs.groups:
            return []
        names = list(cs.groups)
        n = len(names)
        at = self._record_cursor.get(cluster, 0) % n
        lowest: dict[tuple[str, int], int] = {}
        seen = 0
        for step in range(n):
            if seen >= budget:
                break
            gs = cs.groups[names[(at + step) % n]]
            self._record_cursor[cluster] = at + step + 1
            for topic, parts in gs.windows.items():
                seen += len(parts)
                log_end = cs.log_end.get(topic)
                if not log_end:
                    continue
                for partition, arr in parts.items():
                    le = log_end.get(partition)
                    if le is None or not arr or le.run_start != 0 or not le.offsets:
                        continue
                    committed = arr[len(arr) - FIELDS + OFFSET]
                    if committed >= le.offsets[-1]:
                        continue  # caught up
                    oldest = le.coarse_offsets[0] if le.coarse_offsets else le.offsets[0]
                    if committed > oldest or 0 <= le.record_from <= committed:
                        continue  # the samples (or a record read at or below it) answer it
                    key = (topic, partition)
                    if committed < lowest.get(key, committed + 1):
                        lowest[key] = committed
        return [(t, p, c) for (t, p), c in sorted(lowest.items())[:limit]]

    def _log_start_sample(self, ev: LogStartSample) -> None:
        if not (0 <= ev.offset <= _MAX_Q and _MIN_Q <= ev.ts <= _MAX_Q):
            raise ValueError(f"log-start offset {ev.offset} or time {ev.ts} outside int64 (offsets are >= 0)")
        cs = self._clusters.get(ev.cluster) or self._cluster(ev.cluster)
        parts = cs.log_start.get(ev.topic)
        if parts is None:
            parts = cs.log_start[ev.topic] = {}
        kept = parts.get(ev.partition)
        if kept is None:
            kept = parts[ev.partition] = deque(maxlen=self.lag_samples)
        if kept and ev.ts <= kept[-1][0]:
            return  # not newer than the newest kept sample
        if kept and ev.offset < kept[-1][1]:
            kept.clear()  # the log start went down: the topic was recreated, its past is gone
        kept.append((ev.ts, ev.offset))
        cs.topic_seq[ev.topic] = self._next_seq()

    def _topic_policy(self, ev: TopicPolicy) -> None:
        cs = self._clusters.get(ev.cluster) or self._cluster(ev.cluster)
        if cs.cleanup_policy.get(ev.topic) != ev.cleanup_policy:
            cs.cleanup_policy[ev.topic] = ev.cleanup_policy
            cs.topic_seq[ev.topic] = self._next_seq()

    def _topic_deleted(self, ev: TopicDeleted) -> None:
        cs = self._clusters.get(ev.cluster)
        if cs is None:
            return
        cs.log_start.pop(ev.topic, None)
        cs.cleanup_policy.pop(ev.topic, None)
        for group in sorted(cs.consumers.get(ev.topic, ())):
            gs = cs.groups.get(group)
            if gs is not None and ev.topic in gs.windows:
                self._drop_topic(ev.cluster, cs, group, gs, ev.topic)
        parts = cs.log_end.pop(ev.topic, None)
        if parts is not None:
            for partition in parts:
                self._dirty_log_end.add((ev.cluster, ev.topic, partition))
        cs.topic_seq[ev.topic] = self._next_seq()

    def _offsets_partition_reset(self, ev: OffsetsPartitionReset) -> None:
        """The offsets partition is read again from a new start: each of its groups' orders
        moves down so that the newest is -1 (their sequence kept), below any order a new
        record carries, so the group's new commits count as new, not as replays."""
        cs = self._clusters.get(ev.cluster)
        if cs is None or ev.partitions < 1:
            return
        names = {*cs.groups, *cs.tombstones, *cs.members}
        for group in sorted(g for g in names if offsets_partition(g, ev.partitions) == ev.partition):
            self._rebase_group(ev.cluster, cs, group)

    def _rebase_group(self, cluster: str, cs: _Cluster, group: str) -> None:
        gs = cs.groups.get(group)
        members = cs.members.get(group)
        orders = [cs.tombstones.get(group, -1), members.order if members is not None else -1]
        if gs is not None:
            orders += [arr[LAST + ORDER] for parts in gs.windows.values() for arr in parts.values() if arr]
            orders += list((gs.deleted or {}).values())
        shift = max(orders) + 1
        if shift <= 0:
            return  # nothing at or above 0: new records are newer already
        if gs is not None:
            for topic, parts in gs.windows.items():
                for partition, arr in parts.items():
                    for b in range(ORDER, len(arr), FIELDS):
                        arr[b] -= shift
                    self._dirty_windows[(cluster, group, topic, partition)] = None
            if gs.deleted is not None:
                gs.deleted = {k: o - shift for k, o in gs.deleted.items()}
            gs.seq = self._next_seq()
        if group in cs.tombstones:
            cs.tombstones[group] -= shift
            self._changes.tombstones[(cluster, group)] = cs.tombstones[group]
        if members is not None:
            moved = dataclasses.replace(members, order=members.order - shift)
            self._set_members(cs, moved)
            self._changes.members[(cluster, group)] = moved

    def _reader_position(self, ev: ReaderPosition) -> None:
        self._changes.positions[(ev.cluster, ev.partition)] = ev.offset

    # --- removal helpers -------------------------------------------------------------
    def _drop_partition(self, cluster: str, cs: _Cluster, group: str, gs: _Group, topic: str, partition: int) -> None:
        parts = gs.windows[topic]
        del parts[partition]
        self._tracked -= 1
        self._dirty_windows[(cluster, group, topic, partition)] = None
        if not parts:
            del gs.windows[topic]
            consumers = cs.consumers.get(topic)
            if consumers is not None:
                consumers.discard(group)
                if not consumers:
                    del cs.consumers[topic]

    def _drop_topic(self, cluster: str, cs: _Cluster, group: str, gs: _Group, topic: str) -> None:
        for partition in list(gs.windows[topic]):
            self._drop_partition(cluster, cs, group, gs, topic, partition)
        if gs.deleted is not None:
            for key in [k for k in gs.deleted if k[0] == topic]:
                self._forget_offset_tombstone(gs, *key)
        gs.seq = self._next_seq()

    def _drop_group(self, cluster: str, cs: _Cluster, group: str) -> None:
        gs = cs.groups.pop(group)
        for topic in list(gs.windows):
            self._drop_topic(cluster, cs, group, gs, topic)
        if cs.members.pop(group, None) is not None:
            self._changes.members[(cluster, group)] = None
        if gs.pauses:
            self._changes.pauses[(cluster, group)] = None
        cs.owners.pop(group, None)
        self._next_seq()

    # --- ownership (lagd.scale: a worker lets go of the groups of revoked partitions) -----
    def let_go(self, cluster: str, partitions: Collection[int], count: int) -> list[str]:
        """Forget every group of `cluster` whose offsets partition (of `count`) is in
        `partitions`, recording nothing: another worker owns them now and the store keeps
        them as last written. Returns the groups let go, so their verdicts can be forgotten.

        Changes of these groups not yet drained are dropped too: written later, they would
        overwrite what the new owner writes.
        """
        cs = self._clusters.get(cluster)
        if cs is None or not partitions:
            return []
        wanted = set(partitions)
        names = {*cs.groups, *cs.tombstones, *cs.members}
        gone = sorted(g for g in names if offsets_partition(g, count) in wanted)
        gone_set = set(gone)
        for group in gone:
            gs = cs.groups.pop(group, None)
            if gs is not None:
                for topic, parts in gs.windows.items():
                    self._tracked -= len(parts)
                    consumers = cs.consumers.get(topic)
                    if consumers is not None:
                        consumers.discard(group)
                        if not consumers:
                            del cs.consumers[topic]
            cs.members.pop(group, None)
            cs.owners.pop(group, None)
            cs.tombstones.pop(group, None)
        self._dirty_windows = {k: None for k in self._dirty_windows if k[0] != cluster or k[1] not in gone_set}
        ch = self._changes
        forget_groups(ch, cluster, gone_set, wanted)
        self._next_seq()
        return gone

    # --- restore (from the store at start; records no changes) ------------------------
    def restore_window(self, key: WindowKey, entries: list[WindowEntry]) -> None:
        if not entries:
            return
        kept = sorted(entries, key=lambda e: e.order)[-self.intervals :]
        arr = array("q")
        for e in kept:
            arr.extend((e.offset, e.order, e.timestamp, e.observed, NO_LAG if e.lag is None else e.lag))
        self._restore_array(key, arr, max(e.timestamp for e in kept))

    def restore_flat(self, key: WindowKey, arr: array[int]) -> None:
        """restore_window for a window in the flat form the store keeps (window_from_bytes),
        taken as it is when it is in order, oldest first (what lagd writes): building entries
        and a new array was 7 of the 12 s a restore of 1M group-partitions took. Any other goes
        through restore_window."""
        if not arr:
            return
        orders = arr[1::FIELDS]
        if len(arr) % FIELDS or orders.tolist() != sorted(orders):
            self.restore_window(key, entries_of(arr))
            return
        if len(orders) > self.intervals:
            arr = arr[-self.intervals * FIELDS :]
        self._restore_array(key, arr, max(arr[2::FIELDS]))

    def _restore_array(self, key: WindowKey, arr: array[int], last_commit: int) -> None:
        cluster, group, topic, partition = key
        cs = self._cluster(cluster)
        gs = cs.groups.get(group)
        if gs is None:
            gs = cs.groups[group] = _Group()
        parts = gs.windows.get(topic)
        if parts is None:
            parts = gs.windows[topic] = {}
            cs.consumers.setdefault(topic, set()).add(group)
        if partition not in parts:
            self._tracked += 1
        parts[partition] = arr
        if self.pause_settings is not None and not gs.pauses and arr:
            # its stored pauses when read before its windows (the window log is read last), else
            # watched since its oldest commit kept, until its stored pauses are restored
            gs.pauses = self._pending_pauses.pop((cluster, group), ()) or (arr[TS],)
        gs.last_commit = max(gs.last_commit, last_commit)
        if cs.newest_commit is None or gs.last_commit > cs.newest_commit:
            cs.newest_commit = gs.last_commit
        gs.seq = self._next_seq()

    def restore_removal(self, key: WindowKey) -> None:
        """Forget a restored window the store's log marks as removed later (records no change);
        a group left with no window and no members goes too."""
        cluster, group, topic, partition = key
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs is not None else None
        if cs is None or gs is None or partition not in gs.windows.get(topic, {}):
            return
        self._drop_partition(cluster, cs, group, gs, topic, partition)
        self._dirty_windows.pop(key, None)
        if not gs.windows and group not in cs.members:
            del cs.groups[group]

    def restore_members(self, members: GroupMembers) -> None:
        cs = self._cluster(members.cluster)
        prior = cs.members.get(members.group)
        if prior is None or members.order >= prior.order:
            self._set_members(cs, members)

    def restore_pauses(self, cluster: str, group: str, history: tuple[int, ...]) -> None:
        """A group's history of pauses as stored (lagd.state.pauses), for a group restored."""
        gs = self._cluster(cluster).groups.get(group)
        if gs is not None and history:
            gs.pauses = history
        elif history:
            self._pending_pauses[(cluster, group)] = history  # its windows come later (the window log)

    def group_pauses(self, cluster: str, group: str) -> tuple[int, ...]:
        """When lagd began watching the group and its recent pauses (lagd.state.pauses), or ()."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        return gs.pauses if gs is not None else ()

    def restore_tombstone(self, cluster: str, group: str, order: int) -> None:
        cs = self._cluster(cluster)
        cs.tombstones[group] = max(order, cs.tombstones.get(group, order))

    def restore_log_end(
        self, key: PartitionKey, offsets: list[int], ts: list[int], mark: Sequence[int] | None = None
    ) -> None:
        """A partition's stored samples, oldest first, and its record mark (LogEnd.stored)."""
        cluster, topic, partition = key
        if len(offsets) != len(ts):
            raise ValueError(
                f"log-end samples of {key}: {len(offsets)} offsets but {len(ts)} times; fix the stored row"
            )
        every = sorted(zip(ts, offsets, strict=True))
        pairs = every[-self.lag_samples :]
        le = LogEnd(array("q", [o for _, o in pairs]), array("q", [t for t, _ in pairs]))
        for i in range(1, len(le.offsets)):
            if le.offsets[i] < le.offsets[i - 1]:
                le.run_start = i
        older = every[: -self.lag_samples]
        if le.run_start == 0 and older and older[-1][1] <= le.offsets[0]:
            start = 0
            for i in range(1, len(older)):  # only the newest non-decreasing run of the past counts
                if older[i][1] < older[i - 1][1]:
                    start = i
            for t, o in older[start:]:
                le.retire(o, t)
        le.mark_restored(mark)
        cs = self._cluster(cluster)
        cs.log_end.setdefault(topic, {})[partition] = le
        if le.ts and (cs.newest_sample is None or le.ts[-1] > cs.newest_sample):
            cs.newest_sample = le.ts[-1]
        cs.topic_seq[topic] = self._next_seq()

    # --- reads ----------------------------------------------------------------------
    def clusters(self) -> list[str]:
        return sorted(self._clusters)

    def has_group(self, cluster: str, group: str) -> bool:
        cs = self._clusters.get(cluster)
        return cs is not None and group in cs.groups

    def groups(self, cluster: str) -> list[str]:
        cs = self._clusters.get(cluster)
        return sorted(cs.groups) if cs else []

    def newest_times(self, cluster: str) -> tuple[int | None, int | None]:
        """(newest commit timestamp, newest log-end sample time) applied for the cluster, ms."""
        cs = self._clusters.get(cluster)
        return (cs.newest_commit, cs.newest_sample) if cs else (None, None)

    def group_members(self, cluster: str) -> list[GroupMembers]:
        """Every group's latest membership (owners per partition), as restored or applied."""
        cs = self._clusters.get(cluster)
        return list(cs.members.values()) if cs else []

    def topics(self, cluster: str) -> list[str]:
        """Topics with log-end samples."""
        cs = self._clusters.get(cluster)
        return sorted(cs.log_end) if cs else []

    def topic_offsets(self, cluster: str, topic: str) -> list[int] | None:
        """Newest log-end offset per partition (index = partition), None if unknown topic.

        A partition without a sample in the middle of the range reads 0.
        """
        cs = self._clusters.get(cluster)
        parts = cs.log_end.get(topic) if cs else None
        if not parts:
            return None
        out = [0] * (max(parts) + 1)
        for partition, le in parts.items():
            if le.offsets:
                out[partition] = le.offsets[-1]
        return out

    def consumed_topics(self, cluster: str) -> set[str]:
        """Topics some group of the cluster has windows for (cheap: one set per cluster)."""
        cs = self._clusters.get(cluster)
        return set(cs.consumers) if cs else set()

    def topic_consumers(self, cluster: str, topic: str) -> list[str]:
        cs = self._clusters.get(cluster)
        return sorted(cs.consumers.get(topic, ())) if cs else []

    def group_topics(self, cluster: str, group: str) -> dict[str, list[int]] | None:
        """Topic -> sorted partitions the group has windows for; None if unknown group."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        if gs is None:
            return None
        return {topic: sorted(parts) for topic, parts in sorted(gs.windows.items())}

    def window(self, cluster: str, group: str, topic: str, partition: int) -> list[WindowEntry]:
        """The window oldest first (materialised copies; empty when unknown)."""
        arr = self._window_array(cluster, group, topic, partition)
        return entries_of(arr) if arr is not None else []

    def owner(self, cluster: str, group: str, topic: str, partition: int) -> PartitionOwner | None:
        cs = self._clusters.get(cluster)
        owners = cs.owners.get(group) if cs else None
        return owners.get((topic, partition)) if owners else None

    def last_commit(self, cluster: str, group: str) -> int | None:
        """Newest commit timestamp (ms) of the group, None if unknown."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        return gs.last_commit if gs is not None else None

    def log_end_samples(self, cluster: str, topic: str, partition: int) -> tuple[list[int], list[int]]:
        """Kept (offsets, ts) samples, oldest first."""
        le = self._log_end(cluster, topic, partition)
        return (le.offsets.tolist(), le.ts.tolist()) if le else ([], [])

    def latest_log_end(self, cluster: str, topic: str, partition: int) -> int | None:
        le = self._log_end(cluster, topic, partition)
        return le.offsets[-1] if le and le.offsets else None

    def group_version(self, cluster: str, group: str) -> int:
        """Grows whenever anything that can change the group's verdict changes.

        Every change takes the next value of one global counter, so the maximum over the
        group's own counter and its topics' sample counters only ever grows.
        """
        cs = self._clusters.get(cluster)
        if cs is None:
            return self._seq
        gs = cs.groups.get(group)
        if gs is None:
            return self._seq  # unknown: any change anywhere may create it
        version = gs.seq
        topic_seq = cs.topic_seq
        for topic in gs.windows:
            s = topic_seq.get(topic, 0)
            if s > version:
                version = s
        return version

    def offset_tombstones(self, cluster: str, group: str) -> dict[tuple[str, int], int]:
        """Kept offset tombstone orders by (topic, partition); empty when none (or unknown group)."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        return dict(gs.deleted) if gs is not None and gs.deleted else {}

    def partitions_tracked(self) -> int:
        """Number of group-partitions held."""
        return self._tracked

    # --- fast reads for the evaluator (no copies; callers must not mutate) ---------------
    def group_windows(self, cluster: str, group: str) -> dict[str, dict[int, array[int]]] | None:
        """The group's flat windows by topic and partition, or None if unknown."""
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        return gs.windows if gs is not None else None

    def topic_version(self, cluster: str, topic: str) -> int:
        """A number that grows whenever the topic's samples (log end, log start), policy or
        consumers change; 0 for a topic never seen. What is derived from them is fresh while it holds."""
        cs = self._clusters.get(cluster)
        return cs.topic_seq.get(topic, 0) if cs else 0

    def topic_log_starts(self, cluster: str, topic: str) -> dict[int, deque[tuple[int, int]]]:
        """Log-start samples (ms, offset) by partition, oldest first."""
        cs = self._clusters.get(cluster)
        return (cs.log_start.get(topic) if cs else None) or {}

    def cleanup_policy(self, cluster: str, topic: str) -> str | None:
        """The topic's cleanup.policy as last described; None: not known (yet)."""
        cs = self._clusters.get(cluster)
        return cs.cleanup_policy.get(topic) if cs else None

    def topic_log_ends(self, cluster: str, topic: str) -> dict[int, LogEnd]:
        cs = self._clusters.get(cluster)
        return (cs.log_end.get(topic) if cs else None) or {}

    def group_owners(self, cluster: str, group: str) -> dict[tuple[str, int], PartitionOwner]:
        cs = self._clusters.get(cluster)
        return (cs.owners.get(group) if cs else None) or {}

    def _window_array(self, cluster: str, group: str, topic: str, partition: int) -> array[int] | None:
        cs = self._clusters.get(cluster)
        gs = cs.groups.get(group) if cs else None
        if gs is None:
            return None
        parts = gs.windows.get(topic)
        return parts.get(partition) if parts else None

    def log_end_of(self, cluster: str, topic: str, partition: int) -> LogEnd | None:
        """The partition's kept log-end samples (live: read, never change), None if none."""
        return self._log_end(cluster, topic, partition)

    def _log_end(self, cluster: str, topic: str, partition: int) -> LogEnd | None:
        cs = self._clusters.get(cluster)
        parts = cs.log_end.get(topic) if cs else None
        return parts.get(partition) if parts else None


# What copying a partition's log-end samples (LogEnd.history: 700-800 numbers at the default
# lag-samples) costs, counted in windows copied: about 26 us against 1-2 (a thousand partitions'
# samples taken at once held the loop 26 ms at every flush of bench_http).
LOG_END_WEIGHT = 20


class Drain:
    """A drain of State's changes, its changed windows and log-end samples copied a step at a time.

    History rows, reader positions and keyed changes are taken when the drain starts; each
    window and each partition's log-end samples are copied when their step comes (windows
    first). Apply may run between steps: a window it changes is copied as it then stands (and
    is dirty again for the next drain), so no window written is older than the reader
    positions written with it, and re-reading from them is harmless; log-end samples likewise.
    """

    __slots__ = ("_keys", "_log_end_keys", "_more", "_more_left", "_state", "changes")

    def __init__(
        self,
        state: State,
        changes: Changes,
        keys: Collection[WindowKey],
        log_end_keys: list[PartitionKey] | None = None,
    ) -> None:
        self._state = state
        # The windows' keys are listed a step's worth at a time (`keys` is no longer changed): a
        # list of every changed window's key made at once would be one more container of
        # hundreds of thousands that the collector walks while it lives (State._dirty_windows).
        self._more = iter(keys)
        self._more_left = len(keys)
        self._keys: list[WindowKey] = []
        self._log_end_keys = log_end_keys or []
        self.changes = changes

    def __len__(self) -> int:
        """Work left, in windows to copy (a partition's log-end samples count LOG_END_WEIGHT)."""
        return len(self._keys) + self._more_left + LOG_END_WEIGHT * len(self._log_end_keys)

    @property
    def rows_left(self) -> int:
        """Changed windows and partitions' log-end samples left to copy: rows the store will write."""
        return len(self._keys) + self._more_left + len(self._log_end_keys)

    def step(self, n: int) -> bool:
        """Copy up to `n` windows' worth more (`__len__`): changed windows in the form the store
        writes (window_bytes), then log-end samples (LogEnd.history); True once all are copied."""
        keys = self._keys
        if len(keys) < n and self._more_left:
            taken = list(itertools.islice(self._more, n - len(keys)))
            self._more_left -= len(taken)
            keys.extend(taken)
        windows = self.changes.windows
        window_array = self._state._window_array
        left = min(n, len(keys))
        rest = n - left
        while left > 0:
            if _drain_windows is not None and type(windows) is dict:
                # compiled where built (apply.py), up to a key it leaves to the loop below
                left -= _drain_windows(self._state._clusters, keys, windows, left)
                if left <= 0:
                    break
            key = keys.pop()
            arr = window_array(*key)
            windows[key] = window_bytes(arr) if arr is not None else None
            left -= 1
        if rest > 0 and self._log_end_keys:
            self._copy_log_ends(max(1, rest // LOG_END_WEIGHT))
        return not keys and not self._more_left and not self._log_end_keys

    def _copy_log_ends(self, n: int) -> None:
        pkeys = self._log_end_keys
        log_end, log_end_of = self.changes.log_end, self._state._log_end
        for _ in range(min(n, len(pkeys))):
            pkey = pkeys.pop()
            le = log_end_of(*pkey)
            log_end[pkey] = None if le is None else le.stored()


def _typed_apply_commits(
    state: State,
    clusters: dict[str, _Cluster],
    events: list[Event],
    start: int,
    commit: type,
    intervals: int,
    min_distance_ms: int,
    window_step_ms: int,
    record_history: bool,
) -> int:
    """lagd.state.apply.apply_commits compiled: State hands it its change counter, dirty windows and
    history rows, and takes the counter back (nothing of State is read from the compiled code)."""
    assert _typed is not None
    history = state._changes.commit_history if record_history else None
    pauses = state.pause_settings
    stop: int
    stop, state._seq = _typed.apply_commits(
        clusters, events, start, commit, intervals, min_distance_ms, window_step_ms, pauses,
        state._seq, state._dirty_windows, history,
    )  # fmt: skip
    return stop


def _compiled_typed_apply() -> Any:
    """lagd.state.apply compiled where built (not LAGD_NO_EXTENSIONS=1), else None: run as Python
    it is no faster than State's own loop."""
    from lagd.state import apply

    built = compiled.pick(apply)
    return built if built is not apply else None


_typed = _compiled_typed_apply()
if _typed is not None:
    _apply_commits, _drain_windows = _typed_apply_commits, _typed.drain_windows
