"""The verdict types: what the Evaluator answers for a group and each of its partitions.

A module of its own so the Evaluator (verdicts.py), which builds them, and the snapshots
(snapshot.py), which read them, both import them, never each other.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from lagd.core.model import GroupStatus, PartitionStatus, WindowEntry
from lagd.evaluate.lagd_rules import Why, words
from lagd.evaluate.retention_view import RetentionNote
from lagd.state.layout import FIELDS, LAG, OBSERVED, OFFSET, ORDER, TS
from lagd.state.windows import NO_LAG


@dataclass(slots=True)
class PartitionVerdict:
    topic: str
    partition: int
    status: PartitionStatus
    # The window's oldest and newest entries, flat (offset, order, timestamp, observed, lag as in
    # the flat window layout, then the same of the newest); None: no commits. An array of int64,
    # which the garbage collector never tracks, where two WindowEntry objects per partition made
    # every cached verdict three objects for its young passes (see `start`); a tuple of ints
    # before 2026-11-27 cost an int object per number (about 280 B more) and twice the time.
    entries: array[int] | None
    current_lag: int
    complete: float
    owner: str
    client_id: str
    lag_seconds: float
    lag_seconds_estimated: bool
    # Why the partition has its status: in words, or the numbers to put in words when read
    # (see lagd_rules.Why): most verdicts never show their reasons.
    why: str | Why
    since: int | None
    rule: str = ""

    @property
    def reason(self) -> str:
        """Why the partition has its status, in words ("at least" where its lag in seconds is a bound)."""
        return words(self.why, self.current_lag > 0 and self.lag_seconds_estimated)

    @property
    def start(self) -> WindowEntry | None:
        """The oldest commit in the window."""
        return _entry(self.entries, 0)

    @property
    def end(self) -> WindowEntry | None:
        """The newest commit in the window."""
        return _entry(self.entries, FIELDS)


def _entry(entries: array[int] | None, at: int) -> WindowEntry | None:
    if entries is None:
        return None
    lag = entries[at + LAG]
    return WindowEntry(
        entries[at + OFFSET],
        entries[at + ORDER],
        entries[at + TS],
        entries[at + OBSERVED],
        None if lag == NO_LAG else lag,
    )


@dataclass(slots=True)
class GroupVerdict:
    cluster: str
    group: str
    status: GroupStatus
    complete: float
    partitions: list[PartitionVerdict]  # every partition of its topics, sorted by (topic, partition)
    partition_count: int
    maxlag: PartitionVerdict | None
    totallag: int
    lag_seconds: float  # the highest over the partitions
    evaluated_at: int
    # Each partition's retention judgement (lagd.evaluate.retention_view), where a log start is
    # sampled; `status` already holds the worst they imply (records lost: ERR, at risk: WARN).
    retention: tuple[RetentionNote, ...] = ()

    @property
    def not_ok(self) -> tuple[str, ...]:
        """The statuses of its partitions that are not OK, sorted."""
        return tuple(sorted({p.status.value for p in self.partitions if p.status is not PartitionStatus.OK}))
