"""The retention judgement (lagd.evaluate.retention) of a group's partitions, read from State.

Pure but for reading the state: for each partition of the group with a commit and a log-start
sample, the committed offset and its window's commits, the log-start and log-end samples and
the topic's cleanup.policy go to `retention.judge`. The Evaluator folds what this returns into
the group's status (records lost: ERR; at risk: WARN) beside the window rules' verdict.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple, overload

from lagd.core.model import GroupStatus
from lagd.evaluate.retention import (
    DEFAULT_HORIZON_MS,
    Retention,
    RetentionState,
    Sample,
    is_compacted,
    judge,
    pace,
    retention_used,
    safe_from,
)
from lagd.state.layout import FIELDS, OFFSET, TS
from lagd.state.windows import LogEnd, State

# The group status each retention state implies (the others leave the window verdict alone).
STATUS_OF = {RetentionState.LOST: GroupStatus.ERR, RetentionState.AT_RISK: GroupStatus.WARN}


class RetentionNote(NamedTuple):
    """One partition's retention judgement, as the verdicts carry it (a named tuple: one is
    made per partition judged for a verdict, and a frozen dataclass costs several times more)."""

    topic: str
    partition: int
    state: RetentionState
    reason: str
    retention_used: float | None
    lost: int
    lost_since: int | None
    falls_off_in_ms: int | None

    @property
    def status(self) -> GroupStatus:
        return STATUS_OF.get(self.state, GroupStatus.OK)


class WindowCommits(Sequence[Sample]):
    """A window's commits as (time ms, offset) samples, read from its array when asked: the
    judgement of a partition far from its log start reads the first and the newest only."""

    __slots__ = ("_arr", "_n")

    def __init__(self, arr: array[int]) -> None:
        self._arr = arr
        self._n = len(arr) // FIELDS

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Sample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Sample]: ...
    def __getitem__(self, i: int | slice) -> Sample | Sequence[Sample]:
        if isinstance(i, slice):
            return list(self)[i]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        b = i * FIELDS
        return (self._arr[b + TS], self._arr[b + OFFSET])

    def __iter__(self) -> Iterator[Sample]:
        return zip(self._arr[TS::FIELDS], self._arr[OFFSET::FIELDS], strict=True)


def note_of(topic: str, partition: int, r: Retention) -> RetentionNote:
    return RetentionNote(topic, partition, r.state, r.reason, r.retention_used, r.lost, r.lost_since, r.falls_off_in_ms)


def group_retention(
    state: State,
    cluster: str,
    windows: Mapping[str, Mapping[int, array[int]]],
    now_ms: int,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    held: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
    out_of_reach: OutOfReach | None = None,
    judge_always: AbstractSet[tuple[str, int]] = frozenset(),
    notable_only: bool = False,
) -> tuple[RetentionNote, ...]:
    """The notes of every partition of the group with a commit and a log-start sample, sorted;
    `held`: the (topic, partition)s at risk when the group was last judged (retention.judge).
    With `out_of_reach`, a partition whose committed offset is out of its log start's reach
    (and not in `held` or `judge_always`: partitions latched lost, whose notes `latch` reads)
    is OK without judging: its note carries its retention used alone. `notable_only`: leave
    those notes out, and compacted topics' (the watch keeps lost and at-risk partitions only)."""
    out: list[RetentionNote] = []
    for topic in sorted(windows):
        starts_of = state.topic_log_starts(cluster, topic)
        if not starts_of:
            continue
        compacted = is_compacted(state.cleanup_policy(cluster, topic))
        if compacted and notable_only:
            continue
        ends_of = state.topic_log_ends(cluster, topic)
        reach = (
            out_of_reach.of(state, cluster, topic, now_ms, horizon_ms)
            if out_of_reach is not None and not compacted
            else None
        )
        parts = windows[topic]
        if reach is None:
            partitions = sorted(parts)
        elif not notable_only:
            partitions = sorted(parts)
            out.extend(_unjudged(topic, parts, starts_of, ends_of, reach, held, judge_always))
        else:  # those near their log start (one comparison each), and those always judged
            partitions = sorted(p for p, arr in parts.items() if arr and arr[_NEWEST_OFFSET] < reach.get(p, _NEVER))
            if held or judge_always:
                also = {p for t, p in itertools.chain(held, judge_always) if t == topic and p in parts}
                partitions = sorted(also.union(partitions))
        for partition in partitions:
            arr = parts[partition]
            starts = starts_of.get(partition)
            if not starts or not arr:
                continue
            committed = arr[_NEWEST_OFFSET]
            if (
                reach is not None
                and not notable_only
                and _skips(topic, partition, committed, reach, held, judge_always)
            ):
                continue  # its note is among _unjudged's
            r = judge(
                committed,
                WindowCommits(arr),
                list(starts),
                run_ends(ends_of.get(partition)),
                now_ms,
                compacted=compacted,
                horizon_ms=horizon_ms,
                held=(topic, partition) in held,
            )
            out.append(note_of(topic, partition, r))
    if out_of_reach is not None and not notable_only:
        out.sort(key=lambda n: (n.topic, n.partition))
    return tuple(out)


def _skips(
    topic: str,
    partition: int,
    committed: int,
    reach: Mapping[int, int],
    held: AbstractSet[tuple[str, int]],
    judge_always: AbstractSet[tuple[str, int]],
) -> bool:
    return (
        committed >= reach.get(partition, _NEVER)
        and (topic, partition) not in held
        and (
            topic,
            partition,
        )
        not in judge_always
    )


def _unjudged(
    topic: str,
    parts: Mapping[int, array[int]],
    starts_of: Mapping[int, Sequence[Sample]],
    ends_of: Mapping[int, LogEnd],
    reach: Mapping[int, int],
    held: AbstractSet[tuple[str, int]],
    judge_always: AbstractSet[tuple[str, int]],
) -> list[RetentionNote]:
    """The OK notes of the partitions out of their log start's reach: retention used alone."""
    out: list[RetentionNote] = []
    ok = RetentionState.OK
    for partition, arr in parts.items():
        starts = starts_of.get(partition)
        if not starts or not arr:
            continue
        committed = arr[_NEWEST_OFFSET]
        if committed < reach.get(partition, _NEVER):
            continue
        if (held or judge_always) and not _skips(topic, partition, committed, reach, held, judge_always):
            continue
        start = starts[-1][1]
        le = ends_of.get(partition)
        end = None
        if le is not None and le.offsets:
            end = le.offsets[-1]
            if end < start:
                end = start
        out.append(RetentionNote(topic, partition, ok, "", retention_used(committed, start, end), 0, None, None))
    return out


_NEVER = 1 << 63  # above every offset
_NEWEST_OFFSET = OFFSET - FIELDS  # a window array's newest committed offset, from its end


def run_ends(le: LogEnd | None) -> list[Sample]:
    """The first and the newest log-end sample of the partition's current run (its production pace)."""
    if le is None or not le.offsets:
        return []
    first = le.run_start
    return [(le.ts[first], le.offsets[first]), (le.ts[-1], le.offsets[-1])]


class OutOfReach:
    """Per topic, each partition's lowest committed offset out of its log start's reach
    (retention.safe_from), so the watch judges only the partitions near their log start. Kept
    while the topic's samples stand (State.topic_version) and for `valid_ms` at most (the
    reach grows with the time since the newest log-start sample). One entry per topic judged
    lately: entries unused for `valid_ms` go when the cache has doubled since it was last pruned."""

    def __init__(self, valid_ms: int = 30_000) -> None:
        self.valid_ms = valid_ms
        self._by_topic: dict[tuple[str, str], tuple[int, int, int, dict[int, int]]] = {}
        self._prune_at = 1024

    def of(self, state: State, cluster: str, topic: str, now_ms: int, horizon_ms: int) -> Mapping[int, int]:
        key = (cluster, topic)
        version = state.topic_version(cluster, topic)
        got = self._by_topic.get(key)
        if got is not None and got[0] == version and got[1] == horizon_ms and now_ms <= got[2]:
            return got[3]
        until = now_ms + self.valid_ms
        ends_of = state.topic_log_ends(cluster, topic)
        reach = {
            p: safe_from(starts, pace(run_ends(ends_of.get(p))), until, horizon_ms)
            for p, starts in state.topic_log_starts(cluster, topic).items()
            if starts
        }
        if len(self._by_topic) >= self._prune_at:
            self._by_topic = {k: v for k, v in self._by_topic.items() if v[2] >= now_ms}
            self._prune_at = max(1024, 2 * len(self._by_topic))
        self._by_topic[key] = (version, horizon_ms, until, reach)
        return reach


LOST_HOLD_MS = 15 * 60 * 1000  # records lost stays said this long after it was last seen


def latch(
    notes: tuple[RetentionNote, ...],
    latched: dict[tuple[str, int], tuple[RetentionNote, int]],
    now_ms: int,
    hold_ms: int = LOST_HOLD_MS,
) -> tuple[tuple[RetentionNote, ...], dict[tuple[str, int], tuple[RetentionNote, int]]]:
    """Records lost stay lost (pure): a consumer that fell off usually jumps to the log start
    (auto.offset.reset) or overtakes it between two segment deletions, and its committed offset
    is above the log start again, but the records are gone all the same. A partition seen lost
    within `hold_ms` keeps its last lost note; returns the notes and the new latch (the
    partitions seen lost within `hold_ms`, with their note and when each was last seen lost)."""
    out: list[RetentionNote] = []
    kept: dict[tuple[str, int], tuple[RetentionNote, int]] = {}
    for n in notes:
        key = (n.topic, n.partition)
        if n.state is RetentionState.LOST:
            kept[key] = (n, now_ms)
            out.append(n)
            continue
        before = latched.get(key)
        if before is not None and 0 <= now_ms - before[1] < hold_ms and n.state is not RetentionState.COMPACTED:
            kept[key] = before
            out.append(before[0])
        else:
            out.append(n)
    return tuple(out), kept


def worst_of(notes: tuple[RetentionNote, ...]) -> GroupStatus:
    """The worst status the notes imply (OK without any lost or at risk)."""
    worst = GroupStatus.OK
    for n in notes:
        if n.state is RetentionState.LOST:
            return GroupStatus.ERR
        if n.state is RetentionState.AT_RISK:
            worst = GroupStatus.WARN
    return worst


def retention_reason(notes: tuple[RetentionNote, ...]) -> str:
    """The partitions lost or at risk in words, worst first: "t/3 records lost: ...; t/1 at risk: ..."."""
    bad = [n for n in notes if n.state in STATUS_OF]
    bad.sort(key=lambda n: (n.state is not RetentionState.LOST, n.topic, n.partition))
    return "; ".join(f"{n.topic}/{n.partition} {n.reason}" for n in bad)
