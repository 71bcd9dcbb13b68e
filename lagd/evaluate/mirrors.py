"""Mirror verdicts: is a replicated topic delivering everything, and how far behind is it?

Pure: per-bucket message counts appended on the source and on the target, plus how far the
target was behind at the start of the series, in; a verdict out. Counts are sums over
partitions of log-end deltas. Window rules, not thresholds, as Burrow does for lag.

The series is `history` buckets before the window followed by the window's buckets, all of
`bucket_seconds`, oldest first. The history is only looked back into: a delay can only be
measured as far back as the series reaches.

Levels. S(t) and T(t) are the messages appended since the series start on the source and
on the target, at bucket ends and interpolated linearly within buckets. To compare them the
two must share an origin: `backlog` is how many messages the target lacked at the series
start, so the target holds, in source terms, T(t) - backlog. The anchor:
- "offsets": `backlog` as given. The caller takes it from log-end offsets (source minus
  target at the series start), which is right when the target's offsets count the source's
  messages from the same origin: a mirror that copied each partition from its first offset
  (a topic mirrored since it was created, MirrorMaker 2 or 1, the same partitions). It is
  used only when it is consistent with the counts: the target never ahead of the source
  (backlog >= the largest T(t) - S(t)), and the target's level at the window start reached
  by the source within the series.
- "caught-up": otherwise (no backlog given, or an inconsistent one: the source's log had
  been trimmed before mirroring started, a recreated topic, a longer delay than the
  history), the mirror is assumed caught up at the moment of the series where the target
  was closest to the source: backlog = max(0, largest T(t) - S(t)). The delay is then a lower
  bound: a mirror that was never caught up during the series is more behind than shown,
  and a mirror steadily behind a steady source shows a delay of 0. With the delay short,
  the shift below is too: a delayed mirror of a source whose rate keeps rising can then
  look INCOMPLETE (by about the rise over the unmeasured part of the delay).
Lost messages count as delay too (the target never reaches the source's level): a lossy
mirror's delay grows by its loss share, which is why INCOMPLETE is checked before LAGGING.

Figures (the window is [w0, w1]):
- delay at t = how long before t the source had reached the level the target has at t,
  i.e. t minus the last time S was at or below T(t) - backlog (after an idle stretch of
  the source, its end); 0 when the target is level with the source. If the source
  reached it before the series start, the delay is at least t minus the series start, and
  that is what is shown (details["delay_beyond_history"]).
- expected(t) = S(t - d0) with d0 the delay at w0: what the target would hold, had the
  delay stayed what it was at the window start. expected(w0) is the target's own level.
- completeness = (T(w1) - T(w0)) / (expected(w1) - expected(w0)): the target's appended
  count over the window against the source's over the same window shifted back by the
  delay (1.0 when the shifted source appended nothing). A constant delay, at any source
  rate, gives 1.0; so does a delay that shrinks.
- deficit(t) = 1 - (T(t) - T(w0)) / (expected(t) - expected(w0)).
Verdicts, checked in this order:
1. MISSING: no samples at all of the target topic.
2. STALLED: over the trailing half of the window (at least 2 buckets if it has them) the source appended
   messages and the target appended none.
3. INCOMPLETE: over the trailing half, the deficit stays above allowed_loss at every bucket
   end, the trailing half on its own is short by more than allowed_loss, and the deficit
   does not grow by more than allowed_loss: a fixed share of the messages never arrives
   (a growing delay makes the deficit grow; a one-off shortfall, or an error in the delay
   at the window start, leaves the trailing half on its own complete).
4. LAGGING: the delay grows across the window: never shrinks from one bucket end to the
   next and ends above where it was at the first, by more than one second.
5. OK otherwise.
A mirror whose samples cover less than half the window (it is younger than that, or lagd
started sampling it only lately) is NOT_ENOUGH_DATA instead (see `judge_young_mirror`): the
leading buckets without samples look exactly like messages the target never received.
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
    NOT_ENOUGH_DATA = "NOT_ENOUGH_DATA"  # a young mirror: its history covers too little of the window yet


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
    """Running totals: element i is the sum of counts[0..i] (negative counts count 0)."""
    out: list[int] = []
    total = 0
    for c in counts:
        total += max(0, c)
        out.append(total)
    return out


def delay_at(source_cum: Sequence[int], bucket_seconds: float, i: int, target_count: float) -> float:
    """Seconds before the end of bucket i since the source was last at or below `target_count` (interpolated).

    `source_cum` are the source's running totals at bucket ends (0 at the series start). For
    a source that grows steadily this is when it reached `target_count`; across an idle
    stretch it is its end (the oldest message the target lacks came after it). A count below
    0 was passed before the series start: the answer is then the time since the series
    start, a lower bound.
    """
    end = (i + 1) * bucket_seconds
    if target_count >= source_cum[i]:
        return 0.0
    if target_count < 0:
        return end
    levels = [0, *source_cum[: i + 1]]  # levels[k]: at the end of bucket k-1
    k = max(j for j in range(i + 1) if levels[j] <= target_count)  # levels[k + 1] > target_count
    below = k * bucket_seconds + (target_count - levels[k]) / (levels[k + 1] - levels[k]) * bucket_seconds
    return end - below


def level_at(source_cum: Sequence[int], bucket_seconds: float, t: float) -> float:
    """The source's running total at `t` seconds after the series start, interpolated (0 before it)."""
    if t <= 0 or not source_cum:
        return 0.0
    k = min(int(t // bucket_seconds), len(source_cum))
    if k >= len(source_cum):
        return float(source_cum[-1])
    prev = source_cum[k - 1] if k > 0 else 0
    return prev + (source_cum[k] - prev) * (t - k * bucket_seconds) / bucket_seconds


def _ratio(got: float, expected: float) -> float:
    return got / expected if expected > 0 else 1.0


def judge_mirror(
    source: Sequence[int],
    target: Sequence[int] | None,
    bucket_seconds: float,
    allowed_loss: float = 0.001,
    *,
    history: int = 0,
    backlog: int | None = None,
) -> MirrorJudgement:
    """The verdict for one topic from per-bucket appended counts (oldest first) on source and target.

    The first `history` buckets precede the window; `backlog` is how many messages the target
    lacked at the series start (None when unknown). See the module docstring for the rules.
    """
    m = len(source)
    if not 0 <= history <= m or (m > 0 and history == m):
        raise ValueError(f"history is {history} buckets of a series of {m}: leave at least one bucket for the window")
    n = m - history
    window = n * bucket_seconds
    cum_s = cumulative(source)
    s_at = [0, *cum_s]  # source level at bucket end k-1; s_at[0] is the series start
    appended_s = s_at[m] - s_at[history]
    source_rate = appended_s / window if n and window > 0 else 0.0
    if target is None:
        return MirrorJudgement(MirrorVerdict.MISSING, None, None, source_rate, None, {"buckets": n})
    if len(target) != m:
        raise ValueError(f"source has {m} buckets but target has {len(target)}: give both the same buckets")
    if n == 0:
        return MirrorJudgement(MirrorVerdict.OK, 1.0, 0.0, 0.0, 0.0, {"buckets": 0})
    t_at = [0, *cumulative(target)]
    appended_t = t_at[m] - t_at[history]
    target_rate = appended_t / window if window > 0 else 0.0

    # The anchor: how many messages the target lacked at the series start.
    least = max(0, *(t_at[k] - s_at[k] for k in range(m + 1)))
    if backlog is not None and backlog >= least and t_at[history] - backlog >= 0:
        anchor, behind = "offsets", backlog
    else:
        anchor, behind = "caught-up", least

    def delay(k: int) -> float:  # at the end of series bucket k-1; k = 0 is the series start: 0 or beyond
        return delay_at(cum_s, bucket_seconds, k - 1, t_at[k] - behind) if k else 0.0

    ends = range(history, m + 1)  # the window start, then each window bucket's end
    delays = {k: delay(k) for k in ends}
    d0 = delays[history]
    expected = {k: level_at(cum_s, bucket_seconds, k * bucket_seconds - d0) for k in ends}

    def shortfall(a: int, b: int) -> float:
        return 1.0 - _ratio(t_at[b] - t_at[a], expected[b] - expected[a])

    completeness = _ratio(appended_t, expected[m] - expected[history])
    tail = min(n, max(2, n // 2))
    half = range(m - tail + 1, m + 1)  # the trailing half's bucket ends
    deficits = {k: shortfall(history, k) for k in half}
    details: dict[str, Any] = {
        "buckets": n,
        "bucket_seconds": bucket_seconds,
        "history_buckets": history,
        "anchor": anchor,
        "backlog": behind,
        "source_appended": appended_s,
        "target_appended": appended_t,
        "expected_appended": round(expected[m] - expected[history], 3),
        "delay_at_start": round(d0, 3),
        "delays": [round(delays[k], 3) for k in ends if k > history],
    }
    if any(t_at[k] - behind < 0 for k in ends):
        details["delay_beyond_history"] = True

    def judged(verdict: MirrorVerdict) -> MirrorJudgement:
        return MirrorJudgement(verdict, completeness, delays[m], source_rate, target_rate, details)

    first = half[0]
    if s_at[m] - s_at[first - 1] > 0 and t_at[m] - t_at[first - 1] == 0:
        return judged(MirrorVerdict.STALLED)
    if (
        all(expected[k] > expected[history] and deficits[k] > allowed_loss for k in half)
        and shortfall(first - 1, m) > allowed_loss
        and deficits[m] <= deficits[first] + allowed_loss
    ):
        return judged(MirrorVerdict.INCOMPLETE)
    growing = all(delays[k] >= delays[k - 1] for k in range(history + 2, m + 1))
    if growing and delays[m] > delays[history + 1] + 1.0:
        return judged(MirrorVerdict.LAGGING)
    return judged(MirrorVerdict.OK)


MIN_COVERED_SHARE = 0.5  # a window must be covered by samples this much to be judged


def judge_young_mirror(
    source: Sequence[int],
    target: Sequence[int] | None,
    bucket_seconds: float,
    allowed_loss: float = 0.001,
    *,
    history: int = 0,
    backlog: int | None = None,
    uncovered: int = 0,
) -> MirrorJudgement:
    """`judge_mirror` for a series whose first `uncovered` buckets precede the first samples of
    the source or the target (a mirror younger than the series): those buckets are left out;
    with less than half the window covered the answer is NOT_ENOUGH_DATA, not a verdict."""
    if uncovered <= 0:
        return judge_mirror(source, target, bucket_seconds, allowed_loss, history=history, backlog=backlog)
    m = len(source)
    n = m - history
    covered = min(n, m - uncovered)
    if covered < max(1, n * MIN_COVERED_SHARE):
        details = {"buckets": n, "covered_buckets": max(0, covered), "bucket_seconds": bucket_seconds}
        return MirrorJudgement(MirrorVerdict.NOT_ENOUGH_DATA, None, None, 0.0, None, details)
    judged = judge_mirror(
        source[uncovered:],
        None if target is None else target[uncovered:],
        bucket_seconds,
        allowed_loss,
        history=max(0, history - uncovered),
        backlog=None,  # the levels at the series start are not the levels at the first samples
    )
    judged.details["uncovered_buckets"] = uncovered
    return judged
