"""Replication trends: records produced against records replicated per time bucket, as a Kafka audit counts them.

Pure: per-bucket appended counts of a source topic and its copy (sums over partitions of
log-end deltas, as the mirror rules take them), with each side's log-end total at the series
start, in; one row per bucket out. The series starts `lookback` buckets before the first
bucket written, so that the delay can be measured that far back.

Per bucket:
- produced: records appended to the source topic in the bucket; replicated: to the target.
- completeness: replicated / produced (None when nothing was produced).
- backlog: the source's log-end total minus the target's at the bucket end (records produced
  and not yet replicated; 0 when the target's sample is ahead), assuming, as the mirror rules'
  "offsets" anchor does, that the target's offsets count the source's records from the same
  origin (a topic mirrored from its first record).
- delay_seconds: the mirror rules' delay (lagd.evaluate.mirrors.delay_at) at the bucket end:
  how long before it the source had reached the level the target has then. When the source
  was already past it before the series start, the delay is the time since the series start,
  a lower bound (`delay_beyond_history`).
Buckets before a side's first sample (and the bucket of it, whose deltas are partial) are
not counted: no row before the source's, and replicated, backlog and delay None before the
target's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from lagd.evaluate.mirrors import cumulative


@dataclass(frozen=True, slots=True)
class Side:
    """One topic on one cluster over the series: appended records per bucket, and where it stood."""

    appended: Sequence[int]  # per bucket of the series, oldest first
    start_level: int  # log-end total over partitions at the series start
    first: int = -1  # the bucket of its first sample in the series (-1: sampled before the series)


@dataclass(frozen=True, slots=True)
class TrendRow:
    """One bucket of a mirrored topic's trend."""

    bucket: int  # index in the series
    produced: int
    replicated: int | None
    completeness: float | None
    backlog: int | None
    delay_seconds: float | None
    delay_beyond_history: bool


def delay_from_levels(levels: Sequence[int], bucket_seconds: float, i: int, target_count: float) -> float:
    """lagd.evaluate.mirrors.delay_at with the source's levels given as [0, *running totals]: the
    same answer in O(log n), by bisection (the levels never fall)."""
    end = (i + 1) * bucket_seconds
    if target_count >= levels[i + 1]:
        return 0.0
    if target_count < 0:
        return end
    k = bisect_right(levels, target_count, 0, i + 2) - 1  # levels[k] <= target_count < levels[k + 1]
    below = k * bucket_seconds + (target_count - levels[k]) / (levels[k + 1] - levels[k]) * bucket_seconds
    return end - below


def trend_rows(source: Side, target: Side | None, bucket_seconds: float, lookback: int) -> list[TrendRow]:
    """Rows for the buckets of the series from `lookback` on (see the module docstring)."""
    n = len(source.appended)
    if target is not None and len(target.appended) != n:
        raise ValueError(f"source has {n} buckets but target has {len(target.appended)}: give both the same buckets")
    levels = [0, *cumulative(source.appended)]
    target_cum = None if target is None else cumulative(target.appended)
    rows = []
    for i in range(max(lookback, source.first + 1), n):
        produced = max(0, source.appended[i])
        if target is None or target_cum is None or i <= target.first:
            rows.append(TrendRow(i, produced, None, None, None, None, False))
            continue
        replicated = max(0, target.appended[i])
        # the target's level at the bucket end, counted from the source's level at the series start
        target_count = target.start_level + target_cum[i] - source.start_level
        rows.append(
            TrendRow(
                i,
                produced,
                replicated,
                replicated / produced if produced > 0 else None,
                max(0, levels[i + 1] - target_count),
                delay_from_levels(levels, bucket_seconds, i, target_count),
                target_count < 0,
            )
        )
    return rows


def coarser_rows(rows: Sequence[TrendRow], factor: int, offset: int = 0) -> list[tuple[int, TrendRow]]:
    """Rows of `factor` buckets each (an hour of minutes): (coarse index, row) with the counts
    summed over the covered buckets, and the backlog and delay of the last one. Bucket i falls
    in coarse bucket (i + offset) // factor."""
    groups: dict[int, list[TrendRow]] = {}
    for r in rows:
        groups.setdefault((r.bucket + offset) // factor, []).append(r)
    out = []
    for index, members in sorted(groups.items()):
        last = members[-1]
        produced = sum(r.produced for r in members)
        known = all(r.replicated is not None for r in members)
        replicated = sum(r.replicated or 0 for r in members) if known else None
        completeness = None if replicated is None or produced == 0 else replicated / produced
        out.append(
            (
                index,
                TrendRow(
                    last.bucket,
                    produced,
                    replicated,
                    completeness,
                    last.backlog,
                    last.delay_seconds,
                    last.delay_beyond_history,
                ),
            )
        )
    return out
