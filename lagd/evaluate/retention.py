"""Retention: has the consumer lost records to retention, or is it about to? (pure, no I/O)

A consumer whose committed offset is below the partition's log-start offset has skipped
records: retention deleted them before they were read. `judge` answers, for one partition,
from the committed offset and its recent commits, the sampled log-start and log-end offsets
over time and the time now:

- LOST: committed < log start. How many records (log start - committed) and since when (the
  first log-start sample of the newest run of samples above the committed offset of its time;
  `since_exact` False when that run reaches back to the oldest sample kept: "since before").
- AT_RISK: at the current rates the log start reaches the committed offset within `horizon_ms`.
  The log start advances at the pace observed across its samples (retention deletes whole
  segments, so the pace is measured from the oldest to the newest sample, not between two,
  from the last sample before its first step: see `moving`);
  the committed offset advances at the consumption pace of the commits. The production pace
  (log-end samples) is reported beside them; it is what the log start tends to once the log is
  full, but only the observed log-start pace is used to predict.
- OK, or UNKNOWN when there is no log-start sample or no committed offset.
- COMPACTED: the topic's cleanup.policy contains `compact`; offsets there have gaps, lag in
  records is not comparable to what the log holds, and no lost / at-risk judgement is made.

`retention_used` is lag / (log end - log start): the share of what the log retains that the
consumer still has to read (1.0 or more: the consumer is at or past the log start).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from lagd.core.times import about

DEFAULT_HORIZON_MS = 4 * 3600 * 1000  # warn when the consumer falls off the log within 4 hours

CLEAR_FACTOR = 2  # an at-risk partition is OK again once it falls off beyond twice the horizon
Sample = tuple[int, int]  # (time ms, offset)


class RetentionState(StrEnum):
    OK = "ok"
    AT_RISK = "at_risk"
    LOST = "lost"
    COMPACTED = "compacted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Retention:
    state: RetentionState
    reason: str
    retention_used: float | None = None  # lag / (log end - log start); None: unknown or compacted
    lost: int = 0  # records deleted unread (state LOST)
    lost_since: int | None = None  # ms: when the log start passed the committed offset (state LOST)
    since_exact: bool = True  # False: lost_since is the oldest sample kept, it began before ("since before")
    falls_off_in_ms: int | None = None  # state AT_RISK (and OK with a prediction within twice the horizon)
    advance_per_s: float | None = None  # log-start pace, records/s
    consume_per_s: float | None = None  # commit pace, records/s
    produce_per_s: float | None = None  # log-end pace, records/s


def is_compacted(cleanup_policy: str | None) -> bool:
    """cleanup.policy is a list ("compact", "delete", "compact,delete"): any compaction counts."""
    return cleanup_policy is not None and "compact" in (p.strip() for p in cleanup_policy.lower().split(","))


def pace(samples: Sequence[Sample]) -> float | None:
    """Records per ms from the oldest to the newest sample; None with fewer than two samples or
    no time between them. Never negative (a log recreated or a rewind reads as 0)."""
    if len(samples) < 2:
        return None
    (t0, o0), (t1, o1) = samples[0], samples[-1]
    if t1 <= t0:
        return None
    return max(0.0, (o1 - o0) / (t1 - t0))


def moving(starts: Sequence[Sample]) -> Sequence[Sample]:
    """The log-start samples from the last one still at the oldest value: before its first
    step a log start stands still because retention has not reached it yet (a young topic),
    which says nothing of the pace once it has. Slightly fast for a log that moves in big
    segment steps (up to one step early), which warns early, never late."""
    i = 0
    while i + 1 < len(starts) and starts[i + 1][1] == starts[0][1]:
        i += 1
    return starts[i:]


def advance_pace(starts: Sequence[Sample], produce: float | None) -> float | None:
    """Records per ms the log start advances. Retention deletes whole segments, so the log start
    moves in steps: from its first step to its last once it has stepped twice (before the first
    step it stood still because retention had not reached it yet, which is no pace; a pace to
    the newest sample would read low by the part of a segment since the last step);
    after a single step, the production pace, which a log start follows once the log is full
    (one step over a few samples would read as many times that); not moving: 0."""
    if len(starts) < 2:
        return None
    steps = [i for i in range(1, len(starts)) if starts[i][1] != starts[i - 1][1]]
    if not steps:
        return 0.0
    if len(steps) == 1:
        return produce if produce is not None else pace(moving(starts))
    (t0, o0), (t1, o1) = starts[steps[0]], starts[steps[-1]]
    return max(0.0, (o1 - o0) / (t1 - t0)) if t1 > t0 else None


def retention_used(committed: int, start: int, end: int | None) -> float | None:
    """lag / (log end - log start): the share of what the log holds the consumer still has to
    read; None without a log end, or with an empty log the consumer is behind."""
    if end is None:
        return None
    span = end - start
    lag = max(0, end - committed)
    return lag / span if span > 0 else (0.0 if lag == 0 else None)


def safe_from(
    starts: Sequence[Sample], produce: float | None, until_ms: int, horizon_ms: int = DEFAULT_HORIZON_MS
) -> int:
    """The lowest committed offset `judge` calls OK without fitting the consumer's pace, at any
    time up to `until_ms`, from these log-start samples (not empty) and production pace: the
    log start could not reach it within twice the horizon even if the consumer stood still.
    One definition with `judge`'s own shortcut, so a caller may skip judging partitions at or
    above it (their note is OK, with no fall-off time)."""
    return _out_of_reach(starts[-1], advance_pace(starts, produce), until_ms, horizon_ms)


def _out_of_reach(newest_start: Sample, advance: float | None, until_ms: int, horizon_ms: int) -> int:
    """The lowest offset a log start at `newest_start` advancing `advance` records per ms does
    not reach within twice the horizon of `until_ms` (a consumer never reads slower than
    standing still: consume_bound >= 0). Not advancing: the log start itself."""
    at, start = newest_start
    if not advance:
        return start
    elapsed = max(0, until_ms - at)
    return start + math.floor(advance * (CLEAR_FACTOR * horizon_ms + elapsed)) + 1


def consume_bound(commits: Sequence[Sample]) -> float | None:
    """The commit pace, records per ms, plus twice its standard error over the window's
    intervals: the fastest the consumer plausibly reads. A consumer keeping up differs from the
    log start's pace by noise alone; predicting with the optimistic pace keeps that noise from
    reading as "falls off in a few hours" (bench_retention, keeping-up)."""
    mean = pace(commits)
    if mean is None or len(commits) < 4:
        return mean
    rates = [(o1 - o0) / (t1 - t0) for (t0, o0), (t1, o1) in itertools.pairwise(commits) if t1 > t0]
    if len(rates) < 3:
        return mean
    avg = sum(rates) / len(rates)
    var = sum((r - avg) ** 2 for r in rates) / (len(rates) - 1)
    return mean + 2 * math.sqrt(var / len(rates))


def _committed_at(commits: Sequence[Sample], ts: int, committed: int) -> int:
    """The committed offset at time `ts`: the newest commit at or before it; before the oldest
    commit kept, the lower of that and the current one (committed offsets only move forward,
    so the one of that time was at most either)."""
    at = min(commits[0][1], committed) if commits else committed
    for t, o in commits:
        if t > ts:
            break
        at = o
    return at


def _lost_since(starts: Sequence[Sample], commits: Sequence[Sample], committed: int) -> tuple[int, bool]:
    """The first sample of the newest run of log-start samples above the committed offset of their time."""
    i = len(starts) - 1
    while i > 0:
        t, o = starts[i - 1]
        if o <= _committed_at(commits, t, committed):
            return starts[i][0], True
        i -= 1
    return starts[0][0], False


def judge(
    committed: int | None,
    commits: Sequence[Sample],
    starts: Sequence[Sample],
    ends: Sequence[Sample],
    now_ms: int,
    *,
    compacted: bool = False,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    held: bool = False,
) -> Retention:
    """Judge one partition (see the module). `commits`, `starts`, `ends`: (ms, offset) samples,
    oldest first; `committed` the newest committed offset (None: none). `held`: the partition
    was at risk when last judged; it stays so until its prediction passes CLEAR_FACTOR times
    the horizon (the paces are noisy: one warning per slide, not one per wobble)."""
    if compacted:
        return Retention(
            RetentionState.COMPACTED,
            "compacted topic (cleanup.policy compact): offsets have gaps, lag in records is not comparable "
            "to what the log retains; no records-lost judgement",
        )
    if committed is None or not starts:
        return Retention(RetentionState.UNKNOWN, "no log-start offset sampled yet" if committed is not None else "")
    start = starts[-1][1]
    end = max(ends[-1][1], start) if ends else None
    used = retention_used(committed, start, end)
    consume, produce = pace(commits), pace(ends)
    advance = advance_pace(starts, produce)
    base = Retention(
        RetentionState.OK,
        "",
        used,
        advance_per_s=None if advance is None else advance * 1000,
        consume_per_s=None if consume is None else consume * 1000,
        produce_per_s=None if produce is None else produce * 1000,
    )
    if committed < start:
        since, exact = _lost_since(starts, commits, committed)
        n = start - committed
        return replace(
            base,
            state=RetentionState.LOST,
            reason=lost_words(n, since, exact),
            lost=n,
            lost_since=since,
            since_exact=exact,
        )
    # Far from the log start (nearly every partition): OK without fitting the consumer's pace.
    if committed >= _out_of_reach(starts[-1], advance, now_ms, horizon_ms):
        return base
    gap = committed - start
    elapsed = max(0, now_ms - starts[-1][0])
    closing = (advance or 0.0) - (consume_bound(commits) or 0.0)
    if closing <= 0:
        return base
    # Project from the newest log-start sample: the log start keeps advancing, the consumer too.
    left = gap / closing - elapsed
    falls = max(0, round(left))
    if falls <= horizon_ms or (held and falls <= CLEAR_FACTOR * horizon_ms):
        return replace(
            base,
            state=RetentionState.AT_RISK,
            reason=f"at risk: falls off the log in {about(falls / 1000)}",
            falls_off_in_ms=falls,
        )
    return replace(base, falls_off_in_ms=falls)


def utc_words(ms: int) -> str:
    """2026-12-03T10:21:33Z."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lost_words(n: int, since: int, exact: bool = True) -> str:
    """ "records lost: N records deleted unread since T" ("since before T": T is the oldest
    log-start sample kept, and the log start was already past the consumer then)."""
    return f"records lost: {n} records deleted unread since {'' if exact else 'before '}{utc_words(since)}"
