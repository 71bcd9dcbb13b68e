"""When will it clear? A catching-up partition's drain rate and the time its lag reaches zero.

Pure: a flat commit window (and, where known, the partition's kept log-end samples) in, a
`Clearing` or None out. Computed beside the rules from the same window, never inside them.

- Each commit's lag in records: the log end at the commit's own time (interpolated between
  the kept log-end samples around it) minus the committed offset; where the samples do not
  cover the commit, the lag frozen when it was applied.
- The drain rate is the negative of the lag's robust slope (Theil-Sen, records/s): the rate
  at which consumption outpaces production. Its interval is Sen's distribution-free
  confidence interval (the pairwise slopes at the ranks the Mann-Kendall variance gives),
  from which `slope_se` is the equivalent standard error.
- The fit starts at the window's highest lag: the commits before it (before a consumer that
  paused came back) tell nothing of its drain.
- No answer (None) unless the downward trend is significant (Mann-Kendall z at or below
  `-z_min`), with at least `min_points` known lags: a growing or flat lag never clears; and
  none for a partition within MIN_LAG_SECONDS of the log end (no backlog).
- The lag at the newest commit is the fit's (median intercept), and the clear time is when
  the fitted line reaches zero; the interval's ends are where the lines at the interval's
  slowest and fastest drain rates reach zero (the slow end None when that rate is not a drain).

A group clears when its slowest partition does (`group_clearing`); a partition behind (more
than MIN_LAG_SECONDS, or not OK) without a prediction keeps the group from clearing at a known
time: a prediction from its faster partitions alone would be too early.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from lagd.core.model import PartitionStatus
from lagd.evaluate.snapshot import GroupSnapshot
from lagd.state.layout import FIELDS, LAG, OFFSET, TS
from lagd.state.windows import NO_LAG, LogEnd, State

# Mann-Kendall significance of a downward trend needed to predict: lagd's z_enter (the evidence a
# WARN needs). Fitting from the window's peak picks the points most likely to fall: at 2.0, 3.2 %
# of steady partitions with noisy lag got a prediction, at 2.5 0.7 % (20,000 draws of 10 commits).
Z_MIN = 2.5
# A partition no further behind than this (lagd's default allowed-lag-seconds) has no backlog to clear.
MIN_LAG_SECONDS = 5.0
Z_CI = 1.96  # the interval: 95 %
MIN_POINTS = 5


@dataclass(frozen=True, slots=True)
class Clearing:
    """A partition's (or group's) predicted clear time; times in ms, rates in records/s."""

    drain_rate: float  # records/s the lag falls by (consumption minus production)
    drain_rate_low: float  # the interval's slow end (<= 0: the trend allows no drain at all)
    drain_rate_high: float  # ... and fast end
    slope_se: float  # the slope's standard error (records/s), from the interval
    lag: float  # the fitted lag (records) at `at`
    at: int  # the newest commit the fit is anchored on
    z: float  # Mann-Kendall z of the lag (negative: falling)
    points: int  # commits with a known lag in the fit

    @property
    def clear_at(self) -> int:
        """When the lag is expected to reach zero."""
        return self.at + round(1000.0 * self.lag / self.drain_rate)

    @property
    def clear_at_early(self) -> int:
        """The interval's early end (at the fastest drain rate)."""
        return self.at + round(1000.0 * self.lag / self.drain_rate_high)

    @property
    def clear_at_late(self) -> int | None:
        """The interval's late end (at the slowest drain rate); None when that rate does not drain."""
        if self.drain_rate_low <= 0:
            return None
        return self.at + round(1000.0 * self.lag / self.drain_rate_low)

    def clears_in(self, now_ms: int) -> float:
        """Seconds from `now_ms` to the expected clear time (0 when already due)."""
        return max(0.0, (self.clear_at - now_ms) / 1000.0)

    def view(self, now_ms: int) -> dict[str, float | int | None]:
        """As the API shows it."""
        late = self.clear_at_late
        return {
            "clear_at": self.clear_at,
            "clears_in_seconds": round(self.clears_in(now_ms), 1),
            "clear_at_early": self.clear_at_early,
            "clear_at_late": late,
            "drain_rate": round(self.drain_rate, 3),
            "drain_rate_se": round(self.slope_se, 3),
            "z": round(self.z, 2),
            "points": self.points,
        }


def lag_records(arr: array[int], le: LogEnd | None = None) -> tuple[list[float], list[float]]:
    """(commit times in s, lag in records at each), oldest first, for the commits whose lag is
    known: from the log end interpolated at the commit's time where the kept samples cover it,
    else the lag frozen when the commit was applied (skipped when that is null)."""
    xs: list[float] = []
    ys: list[float] = []
    offsets = le.offsets if le is not None else None
    ts = le.ts if le is not None else None
    lo = le.run_start if le is not None else 0
    n = len(ts) if ts is not None else 0
    for b in range(0, len(arr), FIELDS):
        at = arr[b + TS]
        lag: float | None = None
        if offsets is not None and ts is not None and n - lo >= 2 and ts[lo] <= at <= ts[n - 1]:
            i = bisect_left(ts, at, lo, n)
            if ts[i] == at or i == lo:
                end = float(offsets[i])
            else:
                t0, o0 = ts[i - 1], offsets[i - 1]
                end = o0 + (offsets[i] - o0) * (at - t0) / (ts[i] - t0)
            lag = max(0.0, end - arr[b + OFFSET])
        elif arr[b + LAG] != NO_LAG:
            lag = float(arr[b + LAG])
        if lag is not None:
            xs.append(at / 1000.0)
            ys.append(lag)
    return xs, ys


def _median(values: list[float]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2.0


def fit_clearing(
    xs: list[float], ys: list[float], *, z_min: float = Z_MIN, min_points: int = MIN_POINTS, tie: float = 0.0
) -> Clearing | None:
    """The clear time of points (commit times in s ascending, lag in records); None when too few
    points, the lag is already zero, or its downward trend is not significant."""
    n = len(xs)
    if n < max(3, min_points) or ys[-1] <= 0:
        return None
    s = 0
    slopes: list[float] = []
    for i in range(n - 1):
        xi, yi = xs[i], ys[i]
        for j in range(i + 1, n):
            dy = ys[j] - yi
            if dy > tie:
                s += 1
            elif dy < -tie:
                s -= 1
            dx = xs[j] - xi
            if dx > 0:
                slopes.append(dy / dx)
    var = n * (n - 1) * (2 * n + 5) / 18.0
    sd = math.sqrt(var)
    z = (s + 1) / sd if s < 0 else (s - 1) / sd if s > 0 else 0.0
    if z > -z_min or len(slopes) < 2:
        return None
    slopes.sort()
    m = len(slopes)
    slope = _median(slopes)
    if slope >= 0:
        return None
    # Sen's interval: the slopes at ranks (m -+ Z_CI * sd) / 2 (1-based), clamped to the ends
    c = Z_CI * sd
    lo_rank = max(0, min(m - 1, math.floor((m - c) / 2.0) - 1))
    hi_rank = max(0, min(m - 1, math.ceil((m + c) / 2.0)))
    s_low, s_high = slopes[lo_rank], slopes[hi_rank]  # s_low is the steepest fall
    se = (s_high - s_low) / (2.0 * Z_CI)
    intercept = _median([y - slope * x for x, y in zip(xs, ys, strict=True)])
    lag = max(0.0, intercept + slope * xs[-1])
    return Clearing(
        drain_rate=-slope,
        drain_rate_low=-s_high,
        drain_rate_high=-s_low,
        slope_se=se,
        lag=lag,
        at=round(xs[-1] * 1000.0),
        z=z,
        points=n,
    )


def partition_clearing(
    arr: array[int] | None,
    le: LogEnd | None = None,
    current_lag: int | None = None,
    *,
    z_min: float = Z_MIN,
    min_points: int = MIN_POINTS,
) -> Clearing | None:
    """A partition's clear time from its flat window (oldest first) and log-end samples; None
    when it is caught up (`current_lag` 0), the window too short or the fall not significant."""
    if arr is None or not arr or current_lag == 0 or not _falls(arr):
        return None
    xs, ys = lag_records(arr, le)
    if ys:  # the drain starts at the backlog's peak: commits before it (a pause, a deploy) do not count
        peak = max(range(len(ys)), key=ys.__getitem__)
        xs, ys = xs[peak:], ys[peak:]
    return fit_clearing(xs, ys, z_min=z_min, min_points=min_points)


def _falls(arr: array[int]) -> bool:
    """Cheap first look: is the newest known frozen lag below the window's highest (else no fit
    is tried)? Keeps the pages that ask every group (`/metrics`) from fitting steady partitions."""
    lags = [lag for lag in arr[LAG::FIELDS] if lag != NO_LAG]
    return len(lags) >= 2 and lags[-1] < max(lags)


PartitionKey = tuple[str, int]


def state_clearings(
    state: State, cluster: str, group: str, partitions: Iterable[tuple[str, int, bool, int, float]]
) -> tuple[Clearing | None, dict[PartitionKey, Clearing]]:
    """The group's clear time and each catching-up partition's, read from the state's windows
    and log-end samples (in memory) for `partitions` given as (topic, partition, OK?, current
    lag, lag in seconds). Only partitions more than MIN_LAG_SECONDS behind are fitted: the many
    that keep up cost a comparison each (at 15 us a fit, /metrics asks every group)."""
    windows = state.group_windows(cluster, group) or {}
    found: dict[PartitionKey, Clearing] = {}
    each: list[tuple[Clearing | None, bool]] = []
    log_ends: dict[str, dict[int, LogEnd]] = {}
    for topic, partition, ok, lag, lag_s in partitions:
        c: Clearing | None = None
        arr = windows.get(topic, {}).get(partition) if lag > 0 and lag_s > MIN_LAG_SECONDS else None
        if arr is not None and _falls(arr):
            les = log_ends.get(topic)
            if les is None:
                les = log_ends[topic] = state.topic_log_ends(cluster, topic)
            c = partition_clearing(arr, les.get(partition), lag)
            if c is not None:
                found[(topic, partition)] = c
        each.append((c, lag > 0 and (lag_s > MIN_LAG_SECONDS or not ok)))
    return group_clearing(each), found


def snapshot_clearing(state: State, snap: GroupSnapshot) -> Clearing | None:
    """A group's clear time from the verdict watch's snapshot of it (None when it was kept
    without its partitions)."""
    topics = snap.topics
    parts = (
        (topics[t], p, status is PartitionStatus.OK, lag, lag_s)
        for t, p, lag, _, status, lag_s in snap.partition_values()
    )
    return state_clearings(state, snap.cluster, snap.group, parts)[0]


def group_clearing(partitions: Iterable[tuple[Clearing | None, bool]]) -> Clearing | None:
    """A group's clear time: its slowest partition's. `partitions` gives, for each, its Clearing
    and whether it is behind (a backlog, or not OK with a lag). None when a partition behind has
    no prediction (falling behind, stopped, or not yet significantly draining: the group does not
    clear at a known time), or none is catching up. A partition not behind is keeping up."""
    slowest: Clearing | None = None
    for c, behind in partitions:
        if c is None:
            if behind:
                return None
        elif slowest is None or c.clear_at > slowest.clear_at:
            slowest = c
    return slowest
