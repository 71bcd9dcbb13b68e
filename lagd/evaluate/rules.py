"""Burrow's window rules (spec/evaluation.md): a partition's status from its commit window.

Pure: a window, the kept broker samples, the current lag and `now` in, a status out. The
rules are checked in the spec's order and the first that fires wins; `judge` also says
which rule fired so lagd's own API can explain a verdict.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.state.layout import FIELDS, LAG, LAST, OFFSET, TS
from lagd.state.windows import NO_LAG


class EntryLike(Protocol):
    """What the rules read from a window entry (WindowEntry fits)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def lag(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Judgement:
    """A partition status with the rule that decided it and a short human reason."""

    status: PartitionStatus
    rule: str
    reason: str


SEVERITY = {  # a partition status's weight in the group status
    PartitionStatus.OK: GroupStatus.OK,
    PartitionStatus.WARN: GroupStatus.WARN,
    PartitionStatus.STOP: GroupStatus.ERR,
    PartitionStatus.STALL: GroupStatus.ERR,
    PartitionStatus.REWIND: GroupStatus.ERR,
}
_RANK = {GroupStatus.OK: 0, GroupStatus.WARN: 1, GroupStatus.ERR: 2}


J_EMPTY = Judgement(PartitionStatus.OK, "empty", "no commits in the window")
J_CAUGHT_UP = Judgement(PartitionStatus.OK, "caught-up", "current lag within the allowed lag")
J_INCOMPLETE = Judgement(PartitionStatus.OK, "incomplete", "window less complete than minimum-complete")
J_STOP = Judgement(PartitionStatus.STOP, "stop", "no commit for longer than the window spans, not caught up lately")
J_REWIND = Judgement(PartitionStatus.REWIND, "rewind", "committed offset went back and never returned")
J_RECENT_LOW_LAG = Judgement(PartitionStatus.OK, "recent-low-lag", "a lag in the window was within the allowed lag")
J_STALL = Judgement(PartitionStatus.STALL, "stall", "committing the same offset without progress")
J_WARN = Judgement(PartitionStatus.WARN, "lag-not-decreasing", "lag never decreased across the window")
J_PROGRESSING = Judgement(PartitionStatus.OK, "progressing", "lag decreased within the window")


def judge(
    offsets: Sequence[int],
    first_ts: int,
    last_ts: int,
    lags: Sequence[int | None],
    broker_offsets: Sequence[int],
    current_lag: int,
    now_ms: int,
    allowed_lag: int = 0,
) -> Judgement:
    """The rules over a window given column-wise (oldest first); see `partition_status`.

    Column form lets the evaluator feed flat windows without building entry objects; the
    answers are shared constants, so judging allocates next to nothing.
    """
    n = len(offsets)
    if n == 0:
        return J_EMPTY
    if current_lag <= allowed_lag:
        return J_CAUGHT_UP
    # 1. STOP: silent for longer than the window spans, and not caught up in the recent samples.
    if now_ms - last_ts > last_ts - first_ts and not (broker_offsets and min(broker_offsets) <= offsets[-1]):
        return J_STOP
    # 2. REWIND: the first backward step, never recovered.
    ordered = list(offsets)
    if n > 1 and sorted(ordered) != ordered:
        for i in range(1, n):
            if ordered[i] < ordered[i - 1]:
                if max(ordered[i:]) < ordered[i - 1]:
                    return J_REWIND
                break
    # 3. Only when no lag in the window was within the allowance.
    known = [lag for lag in lags if lag is not None]
    if known and min(known) <= allowed_lag:
        return J_RECENT_LOW_LAG
    if ordered.count(ordered[0]) == n:
        return J_STALL
    if sorted(known) == known:
        return J_WARN
    return J_PROGRESSING


def judge_flat(
    arr: array[int],
    broker_offsets: Sequence[int],
    current_lag: int,
    now_ms: int,
    allowed_lag: int = 0,
    recent: int = 0,
) -> Judgement:
    """`judge` over a flat window (interleaved offset, order, timestamp, observed, lag; null lag = NO_LAG).

    With `recent` > 0 only the last `recent` broker samples count for STOP; they are only
    looked at when the timestamps already say stopped.
    """
    if not arr:
        return J_EMPTY
    if current_lag <= allowed_lag:
        return J_CAUGHT_UP
    last_ts = arr[LAST + TS]
    if now_ms - last_ts > last_ts - arr[TS]:
        kept = broker_offsets[-recent:] if recent > 0 else broker_offsets
        if not (kept and min(kept) <= arr[LAST + OFFSET]):
            return J_STOP
    ordered = arr[OFFSET::FIELDS].tolist()
    if sorted(ordered) == ordered:
        same = ordered[0] == ordered[-1]  # non-decreasing: all equal iff the ends are
    else:
        same = False
        for i in range(1, len(ordered)):
            if ordered[i] < ordered[i - 1]:
                if max(ordered[i:]) < ordered[i - 1]:
                    return J_REWIND
                break
    lags = arr[LAG::FIELDS].tolist()
    known = sorted(lags)
    if known[0] == NO_LAG:  # nulls sort first (real lags are never negative): skip them
        lags = [lag for lag in lags if lag != NO_LAG]
        known = known[len(known) - len(lags) :]
    if known and known[0] <= allowed_lag:
        return J_RECENT_LOW_LAG
    if same:
        return J_STALL
    if known == lags:
        return J_WARN
    return J_PROGRESSING


def judge_window(
    window: Sequence[EntryLike],
    broker_offsets: Sequence[int],
    current_lag: int,
    now_ms: int,
    allowed_lag: int = 0,
) -> Judgement:
    """`judge` for a window of entry objects, oldest first."""
    if not window:
        return judge((), 0, 0, (), broker_offsets, current_lag, now_ms, allowed_lag)
    return judge(
        [e.offset for e in window],
        window[0].timestamp,
        window[-1].timestamp,
        [e.lag for e in window],
        broker_offsets,
        current_lag,
        now_ms,
        allowed_lag,
    )


def partition_status(
    window: Sequence[EntryLike],
    broker_offsets: Sequence[int],
    current_lag: int,
    now_ms: int,
    allowed_lag: int = 0,
) -> PartitionStatus:
    """Status of one group-partition, checked in exactly the spec's order.

    `window` holds the filled entries oldest first; `broker_offsets` are the kept log-end
    samples the STOP rule may look at (the last `intervals`); all times are ms.
    """
    return judge_window(window, broker_offsets, current_lag, now_ms, allowed_lag).status


def partition_complete(filled: int, intervals: int) -> float:
    """Share of the window that holds commits."""
    return min(1.0, filled / intervals) if intervals > 0 else 0.0


class PartitionLike(Protocol):
    """What the group rule reads from a partition result (PartitionVerdict fits)."""

    @property
    def status(self) -> PartitionStatus: ...
    @property
    def current_lag(self) -> int: ...
    @property
    def complete(self) -> float: ...


@dataclass(frozen=True, slots=True)
class GroupSummary:
    status: GroupStatus
    complete: float
    totallag: int
    maxlag: int | None  # index into the partitions given, None when there are none
    partition_count: int


def apply_minimum_complete(status: PartitionStatus, complete: float, minimum_complete: float) -> PartitionStatus:
    """Partitions whose window is less complete than `minimum-complete` stay OK."""
    return PartitionStatus.OK if complete < minimum_complete else status


def group_status(partitions: Sequence[PartitionLike], minimum_complete: float = 0.0) -> GroupSummary:
    """Worst partition wins (STOP, STALL, REWIND are ERR); lag totals over every partition.

    Partitions less complete than `minimum_complete` count as OK.
    `maxlag` is the first partition with the highest current lag (the caller's order
    decides ties); `complete` is the share of partitions whose window is full (0.0 without
    partitions, as Burrow answers for a group that left all its topics).
    """
    worst = GroupStatus.OK
    total = 0
    best: int | None = None
    best_lag = -1
    full = 0
    for i, p in enumerate(partitions):
        g = SEVERITY[p.status] if p.complete >= minimum_complete else GroupStatus.OK
        if _RANK[g] > _RANK[worst]:
            worst = g
        lag = p.current_lag
        total += lag
        if lag > best_lag:
            best, best_lag = i, lag
        if p.complete >= 1.0:
            full += 1
    count = len(partitions)
    return GroupSummary(worst, full / count if count else 0.0, total, best, count)
