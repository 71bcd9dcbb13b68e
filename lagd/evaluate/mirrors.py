"""Mirror verdicts: is a replicated topic delivering everything, and how far behind is it?

Pure: per-bucket message counts appended on the source and on the target over the trailing
window in, a verdict out. Counts are sums over partitions of log-end deltas, so the two
clusters' offsets never have to agree. Window rules, not thresholds, as Burrow does for lag.

Definitions (n buckets of `bucket_seconds`, cum_s/cum_t = counts appended since the window start,
measured at each bucket end):
- completeness = cum_t / cum_s at the window end (1.0 when the source appended nothing).
- delay at a bucket end = how long before it the source had reached the count the target
  has now, interpolated linearly within source buckets; 0 when the target is level with
  the source. It is relative to the window start: a constant delay that the mirror already
  had at the window start cancels out; what shows is the delay gained since.
- deficit at a bucket end = 1 - cum_t / cum_s.
Verdicts, checked in this order:
1. MISSING: no samples at all of the target topic.
2. STALLED: over the trailing half of the window (at least 2 buckets) the source appended
   messages and the target appended none.
3. INCOMPLETE: over the trailing half, the deficit stays above allowed_loss at every bucket
   end and does not grow by more than allowed_loss: a fixed share of the messages never
   arrives, however long we wait (a delay would make the deficit shrink or keep growing).
4. LAGGING: the delay grows across the window: never shrinks from one bucket to the next and
   ends above where it started, by more than one second.
5. OK otherwise.
A mirror whose throughput is a fixed fraction below a steady source is, from counts alone,
indistinguishable from a lossy one and is reported INCOMPLETE until the source slows down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class MirrorVerdict(StrEnum):
    OK = "OK"
    LAGGING = "LAGGING"
    STALLED = "STALLED"
    INCOMPLETE = "INCOMPLETE"
    MISSING = "MISSING"


@dataclass(frozen=True, slots=True)
class MirrorJudgement:
    """The verdict on one mirrored topic, with the figures behind it."""

    verdict: MirrorVerdict
    completeness: float | None
    delay_seconds: float | None
    source_rate: float
    target_rate: float | None
    details: dict[str, Any] = field(default_factory=dict)


def cumulative(counts: Sequence[int]) -> list[int]:
    """Running totals: element i is the sum of counts[0..i]."""
    out: list[int] = []
    total = 0
    for c in counts:
        total += max(0, c)
        out.append(total)
    return out


def delay_at(source_cum: Sequence[int], bucket_seconds: float, i: int, target_count: int) -> float:
    """Seconds before the end of bucket i since the source had reached `target_count` (interpolated)."""
    if target_count >= source_cum[i]:
        return 0.0
    prev = 0
    for j in range(i + 1):
        cur = source_cum[j]
        if cur >= target_count and cur > prev:
            reached = j * bucket_seconds + (target_count - prev) / (cur - prev) * bucket_seconds
            return (i + 1) * bucket_seconds - reached
        prev = cur
    return 0.0  # not reached: cannot happen since target_count < source_cum[i]


def judge_mirror(
    source: Sequence[int],
    target: Sequence[int] | None,
    bucket_seconds: float,
    allowed_loss: float = 0.001,
) -> MirrorJudgement:
    """The verdict for one topic from per-bucket appended counts (oldest first) on source and target."""
    n = len(source)
    window = n * bucket_seconds
    cum_s = cumulative(source)
    source_rate = cum_s[-1] / window if n and window > 0 else 0.0
    if target is None:
        return MirrorJudgement(MirrorVerdict.MISSING, None, None, source_rate, None, {"buckets": n})
    if len(target) != n:
        raise ValueError(f"source has {n} buckets but target has {len(target)}: give both the same buckets")
    if n == 0:
        return MirrorJudgement(MirrorVerdict.OK, 1.0, 0.0, 0.0, 0.0, {"buckets": 0})
    cum_t = cumulative(target)
    target_rate = cum_t[-1] / window if window > 0 else 0.0
    completeness = cum_t[-1] / cum_s[-1] if cum_s[-1] > 0 else 1.0
    delays = [delay_at(cum_s, bucket_seconds, i, cum_t[i]) for i in range(n)]
    deficits = [1.0 - cum_t[i] / cum_s[i] if cum_s[i] > 0 else 0.0 for i in range(n)]
    tail = max(2, n // 2)
    half = range(max(0, n - tail), n)
    details: dict[str, Any] = {
        "buckets": n,
        "bucket_seconds": bucket_seconds,
        "source_appended": cum_s[-1],
        "target_appended": cum_t[-1],
        "delays": [round(d, 3) for d in delays],
    }

    def judged(verdict: MirrorVerdict) -> MirrorJudgement:
        return MirrorJudgement(verdict, completeness, delays[-1], source_rate, target_rate, details)

    if sum(source[i] for i in half) > 0 and sum(target[i] for i in half) == 0:
        return judged(MirrorVerdict.STALLED)
    first = half[0]
    if all(cum_s[i] > 0 and deficits[i] > allowed_loss for i in half) and (
        deficits[-1] <= deficits[first] + allowed_loss
    ):
        return judged(MirrorVerdict.INCOMPLETE)
    growing = all(delays[i] >= delays[i - 1] for i in range(1, n))
    if growing and delays[-1] > delays[0] + 1.0:
        return judged(MirrorVerdict.LAGGING)
    return judged(MirrorVerdict.OK)
