"""Lag in time: how long ago the log end stood where the consumer's commit stands now.

Pure: the committed offset, the kept (log-end offset, sample time) history and `now` in,
seconds out. Interpolates between samples and never extrapolates: beyond the oldest
sample the answer is a lower bound, flagged `estimated`. Never NaN, infinite or negative.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from lagd.state.windows import LogEnd


@dataclass(frozen=True, slots=True)
class LagTime:
    seconds: float
    estimated: bool


CAUGHT_UP = LagTime(0.0, False)
NO_SAMPLES = LagTime(0.0, True)


def run_start(offsets: Sequence[int]) -> int:
    """Index where the newest non-decreasing run of log-end offsets begins.

    A log-end offset that goes down means the log was truncated or recreated: samples
    before that describe a log that no longer exists, so lag-in-time ignores them.
    """
    i = len(offsets) - 1
    while i > 0 and offsets[i - 1] <= offsets[i]:
        i -= 1
    return max(i, 0)


def lag_seconds(
    committed: int,
    offsets: Sequence[int],
    ts: Sequence[int],
    now_ms: int,
    *,
    start: int | None = None,
) -> LagTime:
    """Seconds since the log end was at `committed`, from samples oldest first (ts ascending).

    - no samples: LagTime(0.0, estimated=True) (nothing known; not an alarm on its own);
    - committed >= newest log-end offset: 0 (caught up);
    - otherwise the first time the log end reached `committed`, linearly interpolated
      between the two samples around it, within the newest non-decreasing run of samples;
    - committed below that run's oldest sample: now - that sample's time, estimated (a
      lower bound: the consumer is at least that far behind).
    `start` is the known run start (State keeps it) and only saves the scan.
    """
    n = min(len(offsets), len(ts))
    if n == 0:
        return NO_SAMPLES
    if committed >= offsets[n - 1]:
        return CAUGHT_UP
    lo = run_start(offsets[:n]) if start is None else min(max(start, 0), n - 1)
    reached, estimated = reached_at(committed, offsets, ts, lo, n)
    return LagTime(_seconds(now_ms - reached), estimated)


def reached_at(committed: int, offsets: Sequence[int], ts: Sequence[int], lo: int, hi: int) -> tuple[float, bool]:
    """When the log end first reached `committed` within samples [lo, hi), and whether that is
    only a bound (committed at or below the oldest sample used).

    Requires lo < hi and committed < offsets[hi - 1]; the evaluator calls it directly.
    """
    i = bisect_left(offsets, committed, lo, hi)  # first sample with log end >= committed
    if i <= lo:
        return ts[lo], True
    o0, t0 = offsets[i - 1], ts[i - 1]
    # o0 < committed <= offsets[i], so the divisor is positive
    return t0 + (ts[i] - t0) * (committed - o0) / (offsets[i] - o0), False


def reached_in(le: LogEnd, target: int) -> tuple[float, bool]:
    """When the log end first reached `target` (ms), and whether that is only an upper bound
    (the target lies before every kept sample). Looks in the fine samples from `run_start`, then
    in the coarse tier for offsets older than them. Requires target <= the newest sample."""
    offsets, ts, lo = le.offsets, le.ts, le.run_start
    n = len(offsets)
    if target > offsets[lo] or lo > 0 or not le.coarse_ts:
        return reached_at(target, offsets, ts, lo, n)
    coarse_offsets, coarse_ts = le.coarse_offsets, le.coarse_ts
    j = bisect_left(coarse_offsets, target)
    if j == 0:
        # before every sample: a bound, unless the oldest sample is a record read at or below
        # the target (LogEnd.from_record): that record is the first unconsumed one
        return coarse_ts[0], not 0 <= le.record_from <= target
    o0, t0 = coarse_offsets[j - 1], coarse_ts[j - 1]
    if j < len(coarse_offsets):
        o1, t1 = coarse_offsets[j], coarse_ts[j]
    else:
        o1, t1 = offsets[0], ts[0]  # between the newest coarse sample and the oldest fine one
    if o1 <= o0:
        return t1, False
    return t0 + (t1 - t0) * (target - o0) / (o1 - o0), False


def _seconds(ms: float) -> float:
    return ms / 1000.0 if ms > 0 else 0.0


LOG_END_SAMPLES, RECORD_TIMESTAMP, BOUND = "log_end_samples", "record_timestamp", "bound"


def lag_seconds_from(le: LogEnd | None, committed: int, current_lag: int, estimated: bool) -> str:
    """How a partition's lag in seconds was obtained: "bound" (before every kept sample: at
    least that), "record_timestamp" (from the timestamp of the first unconsumed record, read
    from the topic: LogEnd.from_record) or "log_end_samples" (interpolated between samples;
    also a lag of 0)."""
    if current_lag > 0 and estimated:
        return BOUND
    if current_lag <= 0 or le is None or le.run_start != 0 or not le.coarse_offsets:
        return LOG_END_SAMPLES
    if 0 <= le.record_from <= committed <= le.coarse_offsets[0]:
        return RECORD_TIMESTAMP
    return LOG_END_SAMPLES


def record_clock(le: LogEnd | None) -> str | None:
    """Whose clock stamped the record lag in seconds was read from: "LogAppendTime" (the
    broker's) or "CreateTime" (the producer's: its clock's error is in the figure); None: none."""
    if le is None or le.record_from < 0:
        return None
    return "CreateTime" if le.record_create_time else "LogAppendTime"
