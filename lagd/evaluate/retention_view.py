"""The retention judgement (lagd.evaluate.retention) of a group's partitions, read from State.

Pure but for reading the state: for each partition of the group with a commit and a log-start
sample, the committed offset and its window's commits, the log-start and log-end samples and
the topic's cleanup.policy go to `retention.judge`. The Evaluator folds what this returns into
the group's status (records lost: ERR; at risk: WARN) beside the window rules' verdict.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass

from lagd.core.model import GroupStatus
from lagd.evaluate.retention import DEFAULT_HORIZON_MS, Retention, RetentionState, is_compacted, judge
from lagd.state.windows import FIELDS, OFFSET, TS, State

# The group status each retention state implies (the others leave the window verdict alone).
STATUS_OF = {RetentionState.LOST: GroupStatus.ERR, RetentionState.AT_RISK: GroupStatus.WARN}


@dataclass(frozen=True, slots=True)
class RetentionNote:
    """One partition's retention judgement, as the verdicts carry it."""

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


def note_of(topic: str, partition: int, r: Retention) -> RetentionNote:
    return RetentionNote(topic, partition, r.state, r.reason, r.retention_used, r.lost, r.lost_since, r.falls_off_in_ms)


def group_retention(
    state: State,
    cluster: str,
    windows: Mapping[str, Mapping[int, array[int]]],
    now_ms: int,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    held: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
) -> tuple[RetentionNote, ...]:
    """The notes of every partition of the group with a commit and a log-start sample, sorted;
    `held`: the (topic, partition)s at risk when the group was last judged (retention.judge)."""
    out: list[RetentionNote] = []
    for topic in sorted(windows):
        starts_of = state.topic_log_starts(cluster, topic)
        if not starts_of:
            continue
        compacted = is_compacted(state.cleanup_policy(cluster, topic))
        ends_of = state.topic_log_ends(cluster, topic)
        for partition, arr in sorted(windows[topic].items()):
            starts = starts_of.get(partition)
            if not starts or not arr:
                continue
            commits = list(zip(arr[TS::FIELDS], arr[OFFSET::FIELDS], strict=True))
            le = ends_of.get(partition)
            ends: list[tuple[int, int]] = []
            if le is not None and le.offsets:
                first = le.run_start
                ends = [(le.ts[first], le.offsets[first]), (le.ts[-1], le.offsets[-1])]
            r = judge(
                arr[len(arr) - FIELDS + OFFSET],
                commits,
                list(starts),
                ends,
                now_ms,
                compacted=compacted,
                horizon_ms=horizon_ms,
                held=(topic, partition) in held,
            )
            out.append(note_of(topic, partition, r))
    return tuple(out)


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
