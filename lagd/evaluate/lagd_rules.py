"""lagd's own partition rules: judged on time, with evidence, without flapping.

Burrow's rules (rules.py) freeze each commit's lag against whatever log-end sample is
newest and call a consumer falling behind only when that lag never once decreased across
ten commits. Sampling noise and batching break that test, so Burrow misses slow
falling-behind consumers and flaps on steady ones. These rules instead:

- measure each commit's lag in seconds against the log end *at the commit's own time*,
  interpolated from the kept log-end samples (and so corrected when a newer sample lands);
- call a partition falling behind (WARN) when that lag in seconds trends upwards over the
  window with a robust slope (Theil-Sen) that is also significant (Mann-Kendall), never on a
  strict "every step increased";
- keep a WARN until the consumer has caught up or is significantly catching up;
- judge STOP and STALL on elapsed time, so a window with too little history (a new group, a
  freshly started lagd) raises nothing, while a group that commits once and never again
  still goes STOP once enough time has passed.

Pure: a flat window, the partition's log-end samples, `now` and the previous status in, a
Judgement out.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from itertools import combinations

from lagd.core.model import PartitionStatus
from lagd.evaluate.lagtime import reached_in
from lagd.evaluate.rules import J_CAUGHT_UP, J_EMPTY, J_REWIND, Judgement
from lagd.state.layout import FIELDS, LAST, OFFSET, PREV, TS
from lagd.state.windows import LogEnd

WARN = PartitionStatus.WARN

J_KEEPING_UP = Judgement(PartitionStatus.OK, "keeping-up", "lag in seconds is not growing")
J_CATCHING_UP = Judgement(PartitionStatus.OK, "catching-up", "lag in seconds is shrinking")
J_TOO_LITTLE_HISTORY = Judgement(PartitionStatus.OK, "too-little-history", "not enough history yet to judge a trend")
J_WITHIN_SECONDS = Judgement(PartitionStatus.OK, "within-allowed-seconds", "lag in seconds within the allowed lag")

RULE_STOP = "stop"
RULE_STALL = "stall"
RULE_FALLING_BEHIND = "falling-behind"
RULE_STILL_BEHIND = "still-behind"


@dataclass(frozen=True, slots=True)
class LagdParams:
    """The knobs of the lagd rules (evaluator settings, in ms where they are times)."""

    allowed_lag: int = 0
    allowed_lag_seconds: float = 5.0
    min_history_ms: int = 60_000
    stop_after_ms: int = 60_000
    stall_after_ms: int = 30_000  # the same offset committed this long while records wait is STALL
    stop_cadences: int = 3  # silence of this many commit intervals (at least stop_after) is STOP
    min_points: int = 5  # commits with a known lag needed to judge a trend
    min_slope: float = 0.035  # seconds of lag gained per second: the consumer is below 96.5% of production
    min_rise_s: float = 3.0  # the trend must add at least this many seconds of lag across the window
    z_enter: float = 2.5  # Mann-Kendall significance to start a WARN
    z_leave: float = 2.0  # ... and of a downward trend to end one
    tie_s: float = 0.25  # lag-in-seconds differences below this are noise (ties)
    noise_factor: float = 3.0  # the rise must exceed the scatter around the trend this many times
    drain_margin: float = 1.2  # consuming this much faster than production is working a backlog off
    # What stop_after_ms rests on, for the STOP reason: the group's longest recent pause (ms,
    # > 0; stop_after_ms is then its pause limit), or lagd.state.pauses' NO_HISTORY, EARNED, FIXED.
    pause_ms: float = -1.0


def lag_seconds_at(offset: int, at_ms: int, le: LogEnd) -> tuple[float, bool]:
    """How long the first record not yet consumed (offset `offset`) had waited at `at_ms`.

    From the partition's kept log-end samples. Returns (seconds, exact):
    - the log end had not passed `offset` at the newest sample and `at_ms` is not after it:
      (0.0, True), the consumer was caught up;
    - `at_ms` after the newest sample and the offset not yet passed: (0.0, False), unknown yet
      (a later sample settles it);
    - the offset passed before the oldest kept sample (coarse tier included): a lower bound,
      (at - oldest ts, False);
    - otherwise the passing time is interpolated between the two samples around it.
    """
    offsets = le.offsets
    n = len(offsets)
    if n <= le.run_start:
        return 0.0, False
    target = offset + 1  # the log end passes `offset` when it reaches offset + 1
    if target > offsets[n - 1]:
        return 0.0, at_ms <= le.ts[n - 1]
    passed, bound = reached_in(le, target)
    return max(0.0, (at_ms - passed) / 1000.0), not bound


@dataclass(frozen=True, slots=True)
class Trend:
    """Lag in seconds over a window: Theil-Sen slope (s/s), Mann-Kendall z, fitted rise (s),
    the residuals' robust spread (s) and the newest known lag (s)."""

    points: int
    slope: float
    z: float
    rise: float
    noise: float
    last: float


def lag_points(arr: array[int], le: LogEnd) -> tuple[list[float], list[float]]:
    """(commit times in s, lag in seconds at each) for the window's commits whose lag the
    samples settle: `lag_seconds_at` for every entry."""
    xs, ys, _ = lag_points_used(arr, le)
    return xs, ys


def lag_points_used(arr: array[int], le: LogEnd) -> tuple[list[float], list[float], int | None]:
    """`lag_points`, and the time of the oldest log-end sample they read when appending newer
    samples cannot change them (every commit's offset passed by the newest sample), else None.
    While that sample is still the newest run's or after its start, the points stand: a new
    sample only adds to the end. An offset at or below the run's oldest sample reads that one
    (a bound) or the coarse tier before it, which change only when it leaves.
    `lag_seconds_at` for every entry, inlined (this runs per partition)."""
    xs: list[float] = []
    ys: list[float] = []
    offsets, ts, lo = le.offsets, le.ts, le.run_start
    n = len(offsets)
    if n <= lo:
        return xs, ys, None
    newest, newest_ts, oldest = offsets[n - 1], ts[n - 1], offsets[lo]
    no_coarse = lo > 0 or not le.coarse_ts  # where reached_in answers a target <= oldest with a bound
    used: int | None = newest_ts
    for b in range(0, len(arr), FIELDS):
        at = arr[b + TS]
        target = arr[b + OFFSET] + 1
        if target > newest:
            used = None  # the next sample settles it
            if at <= newest_ts:  # caught up at commit time
                xs.append(at / 1000.0)
                ys.append(0.0)
            continue
        if target <= oldest:
            if used is not None and ts[lo] < used:
                used = ts[lo]  # read from the oldest sample or the coarse tier, which change when it leaves
            if no_coarse:
                continue  # before every kept sample: only a bound, no point (commits older than lagd's samples)
            passed, bound = reached_in(le, target)
            if bound:
                continue
        else:
            i = bisect_left(offsets, target, lo, n)
            o0, t0 = offsets[i - 1], ts[i - 1]
            passed = t0 + (ts[i] - t0) * (target - o0) / (offsets[i] - o0)
            if used is not None and t0 < used:
                used = t0
        xs.append(at / 1000.0)
        ys.append((at - passed) / 1000.0 if at > passed else 0.0)
    return xs, ys, used


def lag_trend(arr: array[int], le: LogEnd, tie_s: float = 0.25) -> Trend | None:
    """The trend of the window's per-commit lag in seconds; None with fewer than 3 known points."""
    xs, ys = lag_points(arr, le)
    fit = fit_trend(xs, ys, tie_s)
    return Trend(*fit) if fit is not None else None


# A Trend's fields as a plain tuple: what the evaluator keeps between evaluations (a tuple of
# numbers is left alone by the garbage collector; a million Trend objects are rescanned).
TrendFit = tuple[int, float, float, float, float, float]
_MK_SD = [math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0) for n in range(64)]  # Mann-Kendall S's spread


def fit_trend(xs: list[float], ys: list[float], tie_s: float) -> TrendFit | None:
    """Theil-Sen slope and Mann-Kendall z of points (xs ascending in time, mostly): the fields of
    `Trend`, or None with fewer than 3 points or no two at different times."""
    n = len(xs)
    if n < 3 or not spans_time(xs):
        return None
    return slope_fit(xs, ys, mann_kendall_z(ys, tie_s))


def spans_time(xs: list[float]) -> bool:
    """Are two of the points at different times, the earlier first (a slope to take)?"""
    previous = xs[0]
    for x in xs:
        if x > previous:  # some pair is in order exactly when some neighbours are
            return True
        previous = x
    return False


def mann_kendall_z(ys: list[float], tie_s: float) -> float:
    """The Mann-Kendall z of the points (at least 3), in their order: whether the lag goes up
    or down over the window, and how surely. Lags within `tie_s` of each other count as ties.
    A fifth to a third of a whole fit's cost (5 to 10 points, timeit), so a trend that cannot
    matter stops here (lagd_fast)."""
    n = len(ys)
    s = 0
    for yi, yj in combinations(ys, 2):  # every pair in order (a third cheaper than nested index loops)
        dy = yj - yi
        if dy > tie_s:
            s += 1
        elif dy < -tie_s:
            s -= 1
    sd = _MK_SD[n] if n < len(_MK_SD) else math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    return (s - 1) / sd if s > 0 else (s + 1) / sd if s < 0 else 0.0


def slope_fit(xs: list[float], ys: list[float], z: float) -> TrendFit:
    """The rest of `fit_trend` once `spans_time(xs)` and z are known: the Theil-Sen slope (the
    median of the slopes between every two points at different times) and the noise around it."""
    n = len(xs)
    slopes = [(yj - yi) / (xj - xi) for (xi, yi), (xj, yj) in combinations(zip(xs, ys, strict=True), 2) if xj > xi]
    slope = _median(slopes)
    fitted = [y - slope * x for x, y in zip(xs, ys, strict=True)]
    middle = _median(fitted)
    noise = 1.4826 * _median([abs(f - middle) for f in fitted])
    return n, slope, z, slope * (xs[-1] - xs[0]), noise, ys[-1]


def _median(values: list[float]) -> float:
    values.sort()
    m = len(values)
    return values[m // 2] if m % 2 else (values[m // 2 - 1] + values[m // 2]) / 2


def _draining(arr: array[int], le: LogEnd, margin: float) -> bool:
    """Is the consumer working a backlog off: its recent consumption rate (over the newest
    three entries, at least one window-step) above the production rate across the window
    by `margin`? A burst being drained or a catch-up after a pause looks like a growing lag
    in seconds for a while; this tells it apart from a consumer that cannot keep up."""
    n = len(arr) // FIELDS
    offsets, ts, lo = le.offsets, le.ts, le.run_start
    if n < 3 or len(offsets) - lo < 2:
        return False
    b = (n - 3) * FIELDS
    span_recent = arr[LAST + TS] - arr[b + TS]
    span_all = ts[-1] - ts[lo]
    if span_recent <= 0 or span_all <= 0:
        return False
    consumed = (arr[LAST + OFFSET] - arr[b + OFFSET]) / span_recent
    produced = (offsets[-1] - offsets[lo]) / span_all
    return consumed > produced * margin


def judge_lagd(
    arr: array[int],
    le: LogEnd,
    current_lag: int,
    now_ms: int,
    prior: PartitionStatus | None,
    p: LagdParams,
) -> Judgement:
    """Status of one group-partition under lagd's rules, checked in this order:

    caught up (lag within allowed-lag) -> REWIND (Burrow's rule) -> STOP (no commit for
    max(stop-after, 3 commit intervals) while the oldest unconsumed record waited as long)
    -> STALL (the same offset committed for stop-after while records wait) -> lag in seconds
    within allowed-lag-seconds -> too little history -> WARN falling-behind (or still behind
    after a WARN) -> OK.
    `le` holds the partition's log-end samples; `prior` is the partition's previous status
    (hysteresis). The evaluator judges through `lagd_fast.LagdJudge`, which keeps what this
    derives from a window and its samples between evaluations; this is the reference it must match.
    """
    n = len(arr) // FIELDS
    if n == 0:
        return J_EMPTY
    was_behind = prior is WARN
    if current_lag <= p.allowed_lag and not was_behind:
        return J_CAUGHT_UP
    committed = arr[LAST + OFFSET]
    last_ts = arr[LAST + TS]
    waited, _ = lag_seconds_at(committed, now_ms, le)
    waited_ms = waited * 1000.0
    # the lag in seconds shown beside the reason is only a bound: the reason says "at least"
    at_least = current_lag > 0 and reached_in(le, committed)[1]
    if n > 1 and rewound(arr):
        return J_REWIND
    # STOP: silent for several commit intervals while records wait at least as long.
    limit = stop_limit(arr, n, p)
    silence = now_ms - last_ts
    if silence > limit and waited_ms > limit:
        why = (STOPPED, silence, limit, p.pause_ms, float(p.stop_after_ms), waited)
        return Judgement(PartitionStatus.STOP, RULE_STOP, words(why, at_least))
    # STALL: still committing, the same offset for stall-after, while records wait. The time
    # stuck runs from the first to the newest commit of that offset, not to now: commits of one
    # offset a few ms apart, then silence, are a consumer that stopped (STOP), not one stalled.
    same_from = first_same(arr, n, committed)
    stuck = same_from < n - 1
    stuck_ms = last_ts - arr[same_from * FIELDS + TS] if stuck else 0
    if stuck and stuck_ms >= p.stall_after_ms and waited_ms >= p.stall_after_ms:
        return Judgement(
            PartitionStatus.STALL, RULE_STALL, words((STALLED, committed, stuck_ms, 0.0, 0.0, waited), at_least)
        )
    if not was_behind and waited < p.allowed_lag_seconds:
        return J_WITHIN_SECONDS
    trend = None
    if last_ts - arr[TS] >= p.min_history_ms:
        trend = lag_trend(arr, le, p.tie_s)
        if trend is not None and trend.points < p.min_points:
            trend = None
    if was_behind:
        # A consumer that fell behind stays WARN until it has caught up (its lag at a commit
        # is within half the allowance) or is clearly catching up.
        if trend is not None:
            if trend.last < p.allowed_lag_seconds / 2 and trend.z < p.z_leave:
                return J_CAUGHT_UP
            if trend.z <= -p.z_leave and trend.slope < 0:
                return J_CATCHING_UP
            return Judgement(
                WARN,
                RULE_STILL_BEHIND,
                explain(STILL_BEHIND, trend.slope, trend.z, trend.rise, trend.points, waited, at_least),
            )
        return Judgement(WARN, RULE_STILL_BEHIND, words((STILL_BEHIND_UNFITTED, 0.0, 0.0, 0.0, 0.0, waited), at_least))
    if trend is None:
        return J_TOO_LITTLE_HISTORY
    if (
        trend.slope >= p.min_slope
        and trend.z >= p.z_enter
        and trend.rise >= p.min_rise_s
        and trend.rise >= p.noise_factor * trend.noise
        and trend.last >= p.allowed_lag_seconds
        and not stuck  # a consumer that stopped moving is judged by STALL, not as falling behind
        and not _draining(arr, le, p.drain_margin)
    ):
        return Judgement(
            WARN,
            RULE_FALLING_BEHIND,
            explain(FALLING_BEHIND, trend.slope, trend.z, trend.rise, trend.points, waited, at_least),
        )
    if trend.slope < 0 and trend.z <= -p.z_leave:
        return J_CATCHING_UP
    return J_KEEPING_UP


NEVER = 2**63 - 1  # no time-driven change: only new commits or samples can change the answer


def recheck_at(
    arr: array[int], le: LogEnd, current_lag: int, at_ms: int, status: PartitionStatus, p: LagdParams
) -> int:
    """The earliest time (ms) at which `judge_lagd` could answer otherwise for the same window
    and samples: when STOP, STALL or the allowed lag in seconds could be reached as time
    passes. Never later than the real change, sometimes earlier (then the next check simply
    finds nothing new). Lets the verdict scan skip a group until then."""
    n = len(arr) // FIELDS
    if n == 0 or current_lag <= p.allowed_lag or status in (PartitionStatus.STOP, PartitionStatus.REWIND):
        return NEVER
    committed = arr[LAST + OFFSET]
    last_ts = arr[LAST + TS]
    waited, _ = lag_seconds_at(committed, at_ms, le)
    passed = at_ms - int(waited * 1000)  # when the oldest unconsumed record arrived
    due = max(last_ts, passed) + stop_limit(arr, n, p) + 1
    if status is not PartitionStatus.STALL and n > 1 and arr[PREV + OFFSET] == committed:
        same_from = first_same(arr, n, committed)
        due = min(due, max(arr[same_from * FIELDS + TS], passed) + p.stall_after_ms)
    if waited < p.allowed_lag_seconds:
        due = min(due, passed + int(p.allowed_lag_seconds * 1000) + 1)
    return due


def rewound(arr: array[int]) -> bool:
    """Burrow's REWIND: the window's first backward step is never recovered (no later offset
    reaches the one before the step)."""
    offsets = arr[OFFSET::FIELDS].tolist()
    if sorted(offsets) == offsets:  # no backward step: the usual case, found in C
        return False
    prev = arr[OFFSET]
    for b in range(FIELDS, len(arr), FIELDS):
        cur = arr[b + OFFSET]
        if cur < prev:
            return max(arr[b::FIELDS]) < prev
        prev = cur
    return False


def stop_limit(arr: array[int], n: int, p: LagdParams) -> int:
    """How long a partition may be silent before STOP: stop-after (the group's limit from its
    pauses, lagd.state.pauses.stop_floor, where the evaluator learns them), or 3 commit
    intervals (the newest gap) when longer. One definition for the rule and for when to re-check it."""
    cadence = arr[LAST + TS] - arr[PREV + TS] if n > 1 else 0
    return max(p.stop_after_ms, p.stop_cadences * cadence)


def first_same(arr: array[int], n: int, committed: int) -> int:
    """Index of the oldest entry of the newest run of entries committing `committed`."""
    first = n - 1
    while first > 0 and arr[(first - 1) * FIELDS + OFFSET] == committed:
        first -= 1
    return first


def explain(what: str, slope: float, z: float, rise: float, points: int, waited: float, at_least: bool = False) -> str:
    """The reason of a trend verdict: rate, share of production consumed, rise, how far behind
    (`at_least`: that is a lower bound, the record passed before the oldest kept log-end sample)."""
    share = max(0.0, 1.0 - slope) * 100
    return (
        f"{what}: lag grows {slope:.3f} s per s (consuming about {share:.0f}% of production), "
        f"+{rise:.0f} s over the window, now {_secs(waited, at_least)} behind (z={z:.1f}, {points} commits)"
    )


def _stop_basis(limit: float, pause_ms: float, floor_ms: float) -> str:
    """Which STOP limit applied and why (`pause_ms`: LagdParams.pause_ms)."""
    if limit > floor_ms:
        return f"limit {limit / 1000:.0f} s: 3 commit intervals"
    if pause_ms > 0:
        return f"limit {limit / 1000:.0f} s: this group's pauses have lasted up to {pause_ms / 1000:.0f} s"
    if pause_ms == 0:
        return f"no pause history: default limit {limit / 1000:.0f} s"
    if pause_ms == -2:
        return f"limit {limit / 1000:.0f} s: no pause seen while watched"
    return f"limit {limit / 1000:.0f} s"


def _secs(waited: float, at_least: bool) -> str:
    return f"at least {waited:.0f} s" if at_least else f"{waited:.0f} s"


# A reason not put in words yet: (what, then five numbers `words` reads by `what`). Formatting
# costs about 1.5 us a partition, and most verdicts (the verdict watch's, the metrics') never
# show their partitions' reasons, so the fast path keeps the numbers and `words` formats them
# when read. A tuple of a string and numbers, which the garbage collector leaves alone.
Why = tuple[str, float, float, float, float, float]
FALLING_BEHIND = "falling behind"
STILL_BEHIND = "still behind"
STILL_BEHIND_UNFITTED = "still behind, no trend"  # (_, _, _, _, _, waited)
STOPPED = "stopped"  # (_, silence ms, limit ms, what the floor rests on (LagdParams.pause_ms), floor ms, waited)
STALLED = "stalled"  # (_, committed offset, stuck ms, _, _, waited)


def words(why: str | Why, at_least: bool = False) -> str:
    """A partition's reason in words; `at_least`: the time records wait is only a lower bound
    (the partition's lag in seconds is estimated: its offset passed before the oldest kept
    log-end sample), and the words say so."""
    if isinstance(why, str):
        return why
    what, a, b, c, d, waited = why
    wait = _secs(waited, at_least)
    if what == STOPPED:
        return f"silent {a / 1000:.0f} s ({_stop_basis(b, c, d)}) while records wait {wait}"
    if what == STALLED:
        return f"offset {int(a)} committed again and again for {b / 1000:.0f} s while records wait {wait}"
    if what == STILL_BEHIND_UNFITTED:
        return f"{STILL_BEHIND}: records wait {wait}"
    return explain(what, a, b, c, int(d), waited, at_least)
