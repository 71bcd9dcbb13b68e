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
) -> tuple[RetentionNote, ...]:
    """The notes of every partition of the group with a commit and a log-start sample, sorted."""
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
            )
            out.append(note_of(topic, partition, r))
    return tuple(out)


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
