"""lagd's rules, judged without redoing what has not changed.

`judge_lagd` derives everything from a partition's window and log-end samples at every
evaluation: each commit's lag in seconds (a bisect and an interpolation per commit), their
Theil-Sen/Mann-Kendall trend (45 pairs for 10 commits), the rewind, the STOP limit, the stuck
run. Between most evaluations of a group only `now` moves (a TTL expired, a STOP deadline
came, a reader asked), and a new log-end sample only adds to the end of the history, which
leaves the lag of every commit the log end had already passed unchanged, and so does it for
commits older than every kept sample (read as bounds from the oldest, as after a fresh start)
until that sample leaves. `LagdJudge` keeps those facts per partition while the window and the
samples they read stand, and computes per evaluation only what depends on `now`. It answers
exactly as `judge_lagd` and `recheck_at` (tests/test_lagd_fast.py compares whole group verdicts
over random histories).

The kept facts are packed, 130 bytes a partition back to back in one bytes object per group
and topic: as a tuple of 18 numbers a lagging partition's facts took about 580 B, more than
half again its window's 750, and a Trend object per partition once made the garbage
collector's full passes take hundreds of ms at a million partitions. Bytes are not tracked.
"""

from __future__ import annotations

import math
import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TypeAlias

from lagd.core.model import PartitionStatus
from lagd.evaluate.lagd_rules import (
    FALLING_BEHIND,
    J_CATCHING_UP,
    J_KEEPING_UP,
    J_TOO_LITTLE_HISTORY,
    J_WITHIN_SECONDS,
    NEVER,
    RULE_FALLING_BEHIND,
    RULE_STALL,
    RULE_STILL_BEHIND,
    RULE_STOP,
    STALLED,
    STILL_BEHIND,
    STILL_BEHIND_UNFITTED,
    STOPPED,
    LagdParams,
    TrendFit,
    Why,
    _draining,
    first_same,
    judge_lagd,
    lag_points_used,
    mann_kendall_z,
    recheck_at,
    rewound,
    slope_fit,
    spans_time,
    stop_limit,
)
from lagd.evaluate.lagtime import reached_in
from lagd.evaluate.native import compiled
from lagd.evaluate.rules import J_CAUGHT_UP, J_REWIND, Judgement
from lagd.state.layout import FIELDS, LAG, LAST, OFFSET, ORDER, TS
from lagd.state.windows import LogEnd

_trend = compiled()  # or None: not built, stale, or LAGD_NO_EXTENSIONS set (native.status)
_compiled_fit: Callable[..., tuple[TrendFit | None, int] | None] | None = None if _trend is None else _trend.fit
_compiled_moments: Callable[..., tuple[float, float, bool, int, int | None] | None] | None = (
    None if _trend is None else _trend.moments
)
WARN = PartitionStatus.WARN
STOP = PartitionStatus.STOP
STALL = PartitionStatus.STALL

# A partition's answer: status, rule, reason (in words, or its numbers: lagd_rules.words), when a
# time-driven rule could next change it (ms), and when the log end reached the committed offset
# (ms) with whether that is only a bound (lag in seconds as the API shows it; meaningful when the
# current lag is above 0).
Answer = tuple[PartitionStatus, str, str | Why, int, float, bool]

# A partition's facts, one flat tuple of numbers (see `_facts`), packed as `_PACKED` when kept:
# window stamp: first order, newest order, length; samples stamp: the LogEnd's id, its newest
# sample time (NO_MS: no samples), the time of the oldest sample the lags read (NO_MS: a new
# sample may change them); when the log end passed the newest commit (NOT_YET: not yet: records
# wait 0 s); when it reached the committed offset (NOT_YET: it has not) and whether that is a
# bound; the rewind; the STOP limit; when the stuck run began (NO_MS: not stuck); the trend's
# fields inline (points UNFITTED: not fitted yet; NO_TREND: too few points). Numbers only, no
# None, so they pack. No reason is kept: the answer carries its numbers (lagd_rules.Why), put in
# words only when read.
Facts = tuple[
    int,
    int,
    int,
    int,
    int,
    int,
    float,
    float,
    bool,
    bool,
    int,
    int,
    int,
    float,
    float,
    float,
    float,
    float,
]
_PACKED = struct.Struct("<6q2d2?3q5d")  # Facts, field by field (130 bytes)
# The settings as the compiled code reads them (`_c_params`): the window's layout (fields, where
# the offset, order, time and lag sit), then the rules' integer and float settings.
_C_PARAMS = struct.Struct("<12q9d")


def _judgements(
    trend: ModuleType | None,
) -> tuple[
    Callable[..., Answer | None] | None, Callable[..., tuple[Answer, bytes] | None] | None, Callable[..., int] | None
]:
    """The compiled judgements from kept facts (`standing`) and from a partition's moments on
    (`fresh`), and the evaluator's pass over a topic's partitions that runs them
    (`judge_topic`, verdicts.Evaluator), or None for all three where there is no compiled code or
    it reads the facts or the settings in another layout than the two above (their one definition)."""
    if trend is None or (_PACKED.format, _C_PARAMS.format) != (trend.FACTS_FORMAT, trend.PARAMS_FORMAT):
        return None, None, None
    return trend.standing, trend.fresh, trend.judge_topic


_compiled_standing, _compiled_fresh, compiled_pass = _judgements(_trend)
NO_MS = -(2**63)  # a Facts' time in ms that is not (no samples, not stuck, may change)
NOT_YET = -math.inf  # a Facts' moment (ms) that has not come
UNFITTED, NO_TREND = -1, 0  # a Facts' trend points when it has no trend (yet)
_NO_FIT = (NO_TREND, 0.0, 0.0, 0.0, 0.0, 0.0)
# A topic's kept facts: its partitions (ascending, native int64s), then their facts packed back to
# back, in one bytes (`_split`). Not a tuple of an array and bytes: a dict of bytes is nothing the
# cyclic garbage collector tracks, where a dict of those tuples was three objects per group in
# each of its full passes (30,000 at a million group-partitions).
TopicFacts: TypeAlias = bytes
GroupFacts: TypeAlias = "dict[str, TopicFacts]"


def _split(kept: TopicFacts | None) -> tuple[Sequence[int], bytes]:
    """A topic's kept facts as (its partitions, their packed facts)."""
    if not kept:
        return (), b""
    n = len(kept) // (8 + _PACKED.size)
    ids = array("q")
    ids.frombytes(memoryview(kept)[: 8 * n])
    return ids, kept[8 * n :]


def _answer(j: Judgement, recheck: int, reached: float, estimated: bool) -> Answer:
    return j.status, j.rule, j.reason, recheck, reached, estimated


def judge_reference(
    arr: array[int], le: LogEnd, current_lag: int, at_ms: int, prior: PartitionStatus | None, p: LagdParams
) -> Answer:
    """`judge_lagd` and `recheck_at` as they are, and `reached_in` for the lag in seconds:
    the slow path, for `Evaluator(fast=False)` and the tests."""
    j = judge_lagd(arr, le, current_lag, at_ms, prior, p)
    reached, estimated = reached_in(le, arr[LAST + OFFSET]) if current_lag else (0.0, False)
    return _answer(j, recheck_at(arr, le, current_lag, at_ms, j.status, p), reached, estimated)


class LagdJudge:
    """lagd's rules for the partitions of one evaluator's groups, keeping each group's facts
    by topic and partition (`old`: its previous evaluation's, `new`: this one's) while they
    stand. Call `begin` per group, then `topic` before judging each topic's partitions.

    Facts are kept only for partitions judged past the quick checks (behind and waiting longer
    than allowed-lag-seconds, or held WARN): those caught up or waiting less are judged from a
    bisect and a few comparisons, and keeping their facts would cost memory for little.
    """

    __slots__ = (
        "_allowed_ms",
        "_at",
        "_cparams",
        "_new",
        "_new_ids",
        "_old",
        "_old_ids",
        "_run_from",
        "_run_to",
        "_within_first",
        "new",
        "old",
        "p",
    )

    def __init__(self, p: LagdParams) -> None:
        self._params(p)
        self.old: GroupFacts = {}
        self.new: dict[str, tuple[array[int], bytearray]] = {}
        self._old_ids: Sequence[int] = ()
        self._old = b""
        self._at = 0  # where in `_old_ids` the next partition is looked for
        self._new_ids = array("q")
        self._new = bytearray()
        # The run of old records kept as they are, not yet copied to `_new` (copied at once).
        self._run_from = self._run_to = 0

    def use(self, p: LagdParams) -> None:
        """Judge by `p` from now on (a group's own STOP limit: verdicts.Evaluator). Call between
        groups; facts kept under other settings must not be passed to `begin` (their STOP limit differs)."""
        if p is not self.p:
            self._params(p)

    def _params(self, p: LagdParams) -> None:
        self.p = p
        # A consumer a few records behind (the common case of a healthy estate) is judged by
        # `_within_seconds` without the facts a trend needs, when the settings guarantee that
        # neither STOP nor STALL can hold while records wait less than allowed-lag-seconds, and
        # that the re-check due then is the moment they would have waited that long.
        # (`_recheck` rounds allowed-lag-seconds down to whole ms, which then stays within both.)
        self._allowed_ms = int(p.allowed_lag_seconds * 1000)
        allowed = p.allowed_lag_seconds * 1000.0
        self._within_first = 0.0 <= allowed <= p.stop_after_ms and allowed < p.stall_after_ms
        # The settings packed for the compiled judgement from kept facts (None: the Python judges).
        # (the compiled judgements, `_compiled_standing` and `_compiled_fresh`, run only with them;
        # once set to None from outside, to have the Python judge, they stay off for other settings)
        on = _compiled_standing is not None and getattr(self, "_cparams", True) is not None
        self._cparams = _c_params(p, self._allowed_ms) if on else None

    def begin(self, old: GroupFacts | None) -> None:
        """Start a group's evaluation with the facts its previous one kept."""
        self.old = old or {}
        self.new = {}

    def topic(self, topic: str) -> None:
        """Judge the partitions of `topic` next, in ascending order."""
        self._copy_run()
        self._old_ids, self._old = _split(self.old.get(topic))
        self._at = self._run_from = self._run_to = 0
        self._new_ids = array("q")
        self._new = bytearray()
        self.new[topic] = (self._new_ids, self._new)

    def kept(self) -> GroupFacts:
        """The facts this evaluation kept, by topic (topics with none left out)."""
        self._copy_run()
        return {topic: ids.tobytes() + packed for topic, (ids, packed) in self.new.items() if ids}

    def _copy_run(self) -> None:
        if self._run_to > self._run_from:
            self._new += self._old[self._run_from * _PACKED.size : self._run_to * _PACKED.size]
        self._run_from = self._run_to

    def _keep(self, key: int, f: Facts) -> None:
        """Keep partition `key`'s new facts. Facts that do not pack (a STOP limit past int64:
        three commit intervals, of commit times that far apart) are not kept: that partition is
        judged afresh."""
        try:
            packed = _PACKED.pack(*f)
        except struct.error:
            return
        self._keep_packed(key, packed)

    def _keep_packed(self, key: int, packed: bytes) -> None:
        """Keep partition `key`'s new facts, packed."""
        ids = self._new_ids
        if ids and ids[-1] == key:  # kept already in this judgement (found standing, or fresh): replace
            ids.pop()
            if self._run_to > self._run_from:  # the last of the run of old facts not yet copied
                self._run_to -= 1
            else:
                del self._new[-_PACKED.size :]
        self._copy_run()
        ids.append(key)
        self._new += packed

    def _find(self, key: int) -> int:
        """Where partition `key`'s previous facts are among the kept ones (-1: none kept); the
        next partition is looked for from there on (partitions come in ascending order)."""
        ids = self._old_ids
        i = self._at
        if i == len(ids) or ids[i] != key:
            i = bisect_left(ids, key, i)
            if i == len(ids) or ids[i] != key:
                self._at = i
                return -1
        self._at = i + 1
        return i

    def _kept_facts(self, key: int, i: int, arr: array[int], le: LogEnd) -> Facts | None:
        """The previous evaluation's facts of partition `key` (the `i`-th kept; -1: none) if they
        still stand (and keep them again), else None."""
        if i < 0:
            return None
        f: Facts = _PACKED.unpack_from(self._old, i * _PACKED.size)
        # Do they still describe this window and these samples? The window must be the same
        # (its first and newest orders and its length: entries never change in place); the
        # samples the same, or only grown at the end while still holding the oldest sample
        # the lags read (its time at or after the start of the newest run of samples).
        if f[:4] != (arr[ORDER], arr[LAST + ORDER], len(arr), id(le)):
            return None
        ts = le.ts
        newest = ts[-1] if ts else NO_MS
        if newest != f[4]:
            used = f[5]
            if used == NO_MS or newest == NO_MS or ts[le.run_start] > used:
                return None
        self._reuse(key, i)
        return f

    def _reuse(self, key: int, i: int) -> None:
        """Keep partition `key`'s previous facts (the `i`-th) again: they stand."""
        self._new_ids.append(key)
        if i != self._run_to:
            self._copy_run()
            self._run_from = i
        self._run_to = i + 1

    def judge(
        self, key: int, arr: array[int], le: LogEnd, current_lag: int, at_ms: int, prior: PartitionStatus | None
    ) -> Answer:
        """`judge_reference` for a non-empty window, from kept facts where they stand. Where the
        compiled code is built and can answer exactly, it judges: from kept facts
        (`_trend.standing`), or from the moments on (`_trend.fresh`, which gives the facts to keep)."""
        p = self.p
        was_behind = prior is WARN
        reason: str | Why
        if current_lag <= p.allowed_lag and not was_behind:
            if current_lag:
                return _answer(J_CAUGHT_UP, NEVER, *reached_in(le, arr[LAST + OFFSET]))
            return _answer(J_CAUGHT_UP, NEVER, 0.0, False)
        i = self._find(key)
        if i >= 0 and self._cparams is not None and _compiled_standing is not None:  # compiled, from kept facts
            said = _compiled_standing(self._old, i, arr, le, current_lag, at_ms, was_behind, self._cparams, _C_SAID)
            if said is not None:
                self._reuse(key, i)
                return said
        f = self._kept_facts(key, i, arr, le)
        if f is None:
            quick = not was_behind and self._within_first
            got = None
            if _compiled_moments is not None:  # called here, not through a helper: this runs per partition
                got = _compiled_moments(
                    arr,
                    FIELDS,
                    OFFSET,
                    le.offsets,
                    le.ts,
                    le.run_start,
                    bool(le.coarse_ts),
                    current_lag,
                    at_ms,
                    quick,
                    p.allowed_lag_seconds,
                    self._allowed_ms,
                )
            if got is not None:  # `_moments` and `_within_seconds`, compiled
                passed, reached, estimated, used, due = got
                if due is not None:
                    shown = reached if reached != NOT_YET else 0.0
                    return _WITHIN_SECONDS[0], _WITHIN_SECONDS[1], _WITHIN_SECONDS[2], due, shown, estimated
                if self._cparams is not None and _compiled_fresh is not None:  # the rest compiled too
                    fresh = _compiled_fresh(
                        arr,
                        le,
                        current_lag,
                        at_ms,
                        was_behind,
                        passed,
                        reached,
                        estimated,
                        used,
                        self._cparams,
                        _C_SAID,
                    )
                    if fresh is not None:
                        said, packed = fresh
                        self._keep_packed(key, packed)
                        return said
                moments: Moments = (passed, reached, estimated, used)
            else:
                moments = _moments(arr, le, current_lag)
                if quick:
                    within = self._within_seconds(arr, moments, at_ms)
                    if within is not None:
                        return within
            f = _facts(arr, le, moments, p)
            self._keep(key, f)  # a STOP or REWIND is judged from these alone, again and again
        passed, reached, estimated, rewind, limit, stuck_since, points = f[6:13]
        waited = max(0.0, (at_ms - passed) / 1000.0) if passed != NOT_YET else 0.0
        shown = reached if reached != NOT_YET else 0.0
        if rewind:
            return _answer(J_REWIND, NEVER, shown, estimated)
        # STOP: silent for several commit intervals while records wait at least as long.
        waited_ms = waited * 1000.0
        last_ts = arr[LAST + TS]
        silence = at_ms - last_ts
        if silence > limit and waited_ms > limit:
            why_stop: Why = (STOPPED, silence, limit, p.pause_ms, float(p.stop_after_ms), waited)
            return STOP, RULE_STOP, why_stop, NEVER, shown, estimated
        # With the lag within allowed-lag (a WARN being held) nothing is time-driven.
        timed = current_lag > p.allowed_lag
        # STALL: still committing, the same offset for stall-after, while records wait.
        if stuck_since != NO_MS:
            stuck_ms = last_ts - stuck_since  # committing the offset again, not silence (lagd_rules)
            if stuck_ms >= p.stall_after_ms and waited_ms >= p.stall_after_ms:
                why: Why = (STALLED, arr[LAST + OFFSET], stuck_ms, 0.0, 0.0, waited)
                due = _recheck(STALL, at_ms, waited, last_ts, limit, stuck_since, p) if timed else NEVER
                return STALL, RULE_STALL, why, due, shown, estimated
        if not was_behind and waited < p.allowed_lag_seconds:
            status, rule, reason, _ = _WITHIN_SECONDS
        else:
            fit = None
            if last_ts - arr[TS] >= p.min_history_ms:
                slope_left_out = f[13] != f[13]  # NaN: `_fit` kept the trend without its slope
                if points == UNFITTED or (slope_left_out and _needs_slope(points, f[14], f[17], was_behind, p)):
                    # fit it now (or the slope it left out, now needed), and keep the facts for next time
                    f = _with_trend(f, *_fit(arr, le, f[5], p, was_behind))
                    self._keep(key, f)
                points = f[12]
                if points != NO_TREND and points >= p.min_points:
                    fit = f[12:]
            status, rule, reason, what = _judge_trend(arr, le, fit, was_behind, stuck_since != NO_MS, waited, p)
            if what is None:
                pass
            elif fit is None:
                reason = (STILL_BEHIND_UNFITTED, 0.0, 0.0, 0.0, 0.0, waited)
            else:
                points, slope, z, rise, _, _ = fit
                reason = (what, slope, z, rise, points, waited)
        due = _recheck(status, at_ms, waited, last_ts, limit, stuck_since, p) if timed else NEVER
        return status, rule, reason, due, shown, estimated

    def _within_seconds(self, arr: array[int], moments: Moments, at_ms: int) -> Answer | None:
        """The answer of a partition that is behind (its current lag above allowed-lag, not held
        WARN) while its oldest unconsumed record has waited less than allowed-lag-seconds and its
        window did not rewind, else None. Under `_within_first` settings that is what `judge`
        answers from the full facts: STOP and STALL need records to wait at least stop-after and
        stall-after, both longer, so the rest of the facts is not derived."""
        passed, reached, estimated, _ = moments
        waited = max(0.0, (at_ms - passed) / 1000.0) if passed != NOT_YET else 0.0
        if waited >= self.p.allowed_lag_seconds or (len(arr) > FIELDS and rewound(arr)):
            return None
        shown = reached if reached != NOT_YET else 0.0
        due = at_ms - int(waited * 1000) + self._allowed_ms + 1  # `_recheck`'s least term here
        return _WITHIN_SECONDS[0], _WITHIN_SECONDS[1], _WITHIN_SECONDS[2], due, shown, estimated


def _with_trend(f: Facts, trend: TrendFit | None, used: int) -> Facts:
    """The facts with the trend fitted and the time of the oldest sample it read."""
    first, last, length, le_id, newest, _, passed, reached, estimated, rewind, limit, stuck_since = f[:12]
    return (first, last, length, le_id, newest, used, passed, reached, estimated, rewind, limit, stuck_since) + (
        trend or _NO_FIT
    )


# When the log end passed the newest commit, when it reached the committed offset and whether that
# is a bound, as Facts hold them (NOT_YET: not yet; no current lag: not looked up), and the time of
# the oldest sample those read (NO_MS: a new sample may change them).
Moments = tuple[float, float, bool, int]


def _moments(arr: array[int], le: LogEnd, current_lag: int) -> Moments:
    """When the log end passed the newest commit and reached the committed offset (with whether
    that is a bound): what a partition behind needs first."""
    committed = arr[LAST + OFFSET]
    offsets, lo = le.offsets, le.run_start
    k = len(offsets)
    if current_lag and committed > offsets[lo]:
        # both within the newest run of samples: lagtime.reached_at, inlined, for the committed
        # offset and the one after it (usually between the same two samples)
        ts = le.ts
        i = bisect_left(offsets, committed, lo, k)
        o0, t0 = offsets[i - 1], ts[i - 1]
        reached = t0 + (ts[i] - t0) * (committed - o0) / (offsets[i] - o0)
        used = t0
        if offsets[i] == committed:
            i = bisect_left(offsets, committed + 1, i, k)
        if i == k:
            return NOT_YET, reached, False, NO_MS
        o0, t0 = offsets[i - 1], ts[i - 1]
        return t0 + (ts[i] - t0) * (committed + 1 - o0) / (offsets[i] - o0), reached, False, used
    passed = NOT_YET  # lag_seconds_at(committed, ...) reads 0 s while it has not come
    used = NO_MS
    if k > lo and committed + 1 <= offsets[k - 1]:
        passed, _ = reached_in(le, committed + 1)
        used = read_from(le, committed + 1)
    if current_lag:
        reached, estimated = reached_in(le, committed)
        return passed, reached, estimated, min(used, read_from(le, committed))
    return passed, NOT_YET, False, used


def read_from(le: LogEnd, target: int) -> int:
    """The time of the oldest sample `reached_in(le, target)` reads. At or below the oldest
    sample of the newest run it reads that sample, or the coarse tier before it, which only
    changes when that sample leaves the fine tier (retired) or the run restarts (truncation):
    either way the run's first sample is then a newer one."""
    offsets, lo = le.offsets, le.run_start
    if target > offsets[lo]:
        return le.ts[bisect_left(offsets, target, lo, len(offsets)) - 1]
    return le.ts[lo]


def _facts(arr: array[int], le: LogEnd, moments: Moments, p: LagdParams) -> Facts:
    """What the window and samples say, the trend left to fit (UNFITTED) until it is needed."""
    n = len(arr) // FIELDS
    committed = arr[LAST + OFFSET]
    ts = le.ts
    passed, reached, estimated, used = moments
    same = first_same(arr, n, committed)
    stuck_since = arr[same * FIELDS + TS] if same < n - 1 else NO_MS
    return (
        arr[ORDER],
        arr[LAST + ORDER],
        len(arr),
        id(le),
        ts[-1] if ts else NO_MS,
        used,  # `_fit` lowers it to the oldest sample every commit's lag reads
        passed,
        reached,
        estimated,
        n > 1 and rewound(arr),
        stop_limit(arr, n, p),
        stuck_since,
        UNFITTED,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    )


def _fit(arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool) -> tuple[TrendFit | None, int]:
    """The window's trend, and the time of the oldest log-end sample that it and the facts'
    moments (read from `used` on) read, when appending samples cannot change them (else NO_MS).

    The trend's slope, rise and noise are left out (NaN) when its z and newest lag alone decide
    `_judge_trend` (`_needs_slope`): most partitions of a healthy estate keep up, and the slope
    is most of a fit's cost. A later judgement that needs them fits again.

    Fitted by the compiled `_trend.fit` where it is built (the same operations, so the same
    answer: tests/test_trend_c.py), else, or where it cannot answer exactly, by `fit_python`."""
    fitted = fit_compiled(arr, le, used, p, was_behind)
    return fitted if fitted is not None else fit_python(arr, le, used, p, was_behind)


def fit_compiled(
    arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool
) -> tuple[TrendFit | None, int] | None:
    """`_fit` by the compiled `_trend.fit` (native.py): None where it is not built, or where
    only the Python answers exactly."""
    if _compiled_fit is None:
        return None
    return _compiled_fit(
        arr,
        FIELDS,
        OFFSET,
        TS,
        le.offsets,
        le.ts,
        le.run_start,
        bool(le.coarse_ts),
        used,
        p.tie_s,
        p.min_points,
        p.z_enter,
        p.z_leave,
        p.allowed_lag_seconds,
        was_behind,
    )


def fit_python(arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool) -> tuple[TrendFit | None, int]:
    """`_fit` in Python: the definition the compiled fit follows."""
    xs, ys, points_used = lag_points_used(arr, le)
    used = NO_MS if points_used is None else min(used, points_used)
    n = len(xs)
    if n < 3 or not spans_time(xs):
        trend = None  # fit_trend's None
    else:
        z = mann_kendall_z(ys, p.tie_s)
        last = ys[-1]
        decided = not _needs_slope(n, z, last, was_behind, p)
        trend = (n, _NAN, z, _NAN, _NAN, last) if decided else slope_fit(xs, ys, z)
    return trend, used


_NAN = math.nan  # a trend's slope, rise and noise not fitted (`_fit`)


def _needs_slope(n: int, z: float, last: float, was_behind: bool, p: LagdParams) -> bool:
    """Does `_judge_trend` read a trend's slope, rise or noise, given its points, z and newest
    lag? Not for too few points (no trend), nor for a partition held WARN that has caught up,
    nor for one not behind before whose z rules out both falling behind and catching up."""
    if n < p.min_points:
        return False
    if was_behind:
        return not (last < p.allowed_lag_seconds / 2 and z < p.z_leave)
    return (z >= p.z_enter and last >= p.allowed_lag_seconds) or z <= -p.z_leave


# Fixed judgements as `_judge_trend` answers them: (status, rule, reason, None).
Said = tuple[PartitionStatus, str, str, str | None]
_WITHIN_SECONDS: Said = (J_WITHIN_SECONDS.status, J_WITHIN_SECONDS.rule, J_WITHIN_SECONDS.reason, None)
_CAUGHT_UP: Said = (J_CAUGHT_UP.status, J_CAUGHT_UP.rule, J_CAUGHT_UP.reason, None)
_CATCHING_UP: Said = (J_CATCHING_UP.status, J_CATCHING_UP.rule, J_CATCHING_UP.reason, None)
_KEEPING_UP: Said = (J_KEEPING_UP.status, J_KEEPING_UP.rule, J_KEEPING_UP.reason, None)
_TOO_LITTLE_HISTORY: Said = (J_TOO_LITTLE_HISTORY.status, J_TOO_LITTLE_HISTORY.rule, J_TOO_LITTLE_HISTORY.reason, None)
# What the compiled judgement from kept facts answers with, in the order _trend.c reads it: the
# fixed judgements (status, rule, reason), then the parts of the others.
_C_SAID = (
    _WITHIN_SECONDS[:3],
    _CAUGHT_UP[:3],
    _CATCHING_UP[:3],
    _KEEPING_UP[:3],
    _TOO_LITTLE_HISTORY[:3],
    (J_REWIND.status, J_REWIND.rule, J_REWIND.reason),
    WARN,
    STOP,
    STALL,
    RULE_STOP,
    RULE_STALL,
    RULE_FALLING_BEHIND,
    RULE_STILL_BEHIND,
    STOPPED,
    STALLED,
    FALLING_BEHIND,
    STILL_BEHIND,
    STILL_BEHIND_UNFITTED,
)


def _exact_double(x: object) -> bool:
    """Is `x` a number a double holds exactly (so the compiled code compares as the Python)?"""
    try:
        return isinstance(x, (int, float)) and float(x) == x
    except OverflowError:  # an int past a double's range
        return False


def _c_params(p: LagdParams, allowed_ms: int) -> bytes | None:
    """The settings as `_trend.standing` reads them, or None where it cannot read them as the
    Python does (an integer setting past int64 or not an integer, a float setting a double
    does not hold exactly): the Python judges then."""
    floats = (
        p.allowed_lag_seconds,
        p.z_enter,
        p.z_leave,
        p.min_slope,
        p.min_rise_s,
        p.noise_factor,
        p.drain_margin,
        p.tie_s,
        p.pause_ms,
    )
    ints = (
        p.allowed_lag,
        p.min_history_ms,
        p.stall_after_ms,
        p.min_points,
        allowed_ms,
        p.stop_after_ms,
        p.stop_cadences,
    )
    if not all(type(x) is int for x in ints) or not all(_exact_double(x) for x in floats):
        return None
    try:
        return _C_PARAMS.pack(FIELDS, OFFSET, ORDER, TS, LAG, *ints, *floats)
    except (struct.error, OverflowError):
        return None


def _judge_trend(
    arr: array[int],
    le: LogEnd,
    trend: TrendFit | None,
    was_behind: bool,
    stuck: bool,
    waited: float,
    p: LagdParams,
) -> Said:
    """`judge_lagd` from the trend on (the partition neither rewound, stopped, stalled nor
    within the allowed lag in seconds): a fixed judgement, or (WARN, rule, "", what) where
    `what` begins the reason the caller completes. No Judgement is built: this runs per partition."""
    if was_behind:
        # A consumer that fell behind stays WARN until it has caught up (its lag at a commit
        # is within half the allowance) or is clearly catching up.
        if trend is not None:
            _, slope, z, _, _, last = trend
            if last < p.allowed_lag_seconds / 2 and z < p.z_leave:
                return _CAUGHT_UP
            if z <= -p.z_leave and slope < 0:
                return _CATCHING_UP
        return WARN, RULE_STILL_BEHIND, "", STILL_BEHIND
    if trend is None:
        return _TOO_LITTLE_HISTORY
    _, slope, z, rise, noise, last = trend
    if (
        slope >= p.min_slope
        and z >= p.z_enter
        and rise >= p.min_rise_s
        and rise >= p.noise_factor * noise
        and last >= p.allowed_lag_seconds
        and not stuck
        and not _draining(arr, le, p.drain_margin)
    ):
        return WARN, RULE_FALLING_BEHIND, "", FALLING_BEHIND
    if slope < 0 and z <= -p.z_leave:
        return _CATCHING_UP
    return _KEEPING_UP


def _recheck(
    status: PartitionStatus,
    at_ms: int,
    waited: float,
    last_ts: int,
    limit: int,
    stuck_since: int,
    p: LagdParams,
) -> int:
    """`recheck_at` for a partition whose current lag is above allowed-lag and whose status is
    neither STOP nor REWIND, from its facts."""
    passed = at_ms - int(waited * 1000)  # when the oldest unconsumed record arrived
    due = max(last_ts, passed) + limit + 1
    if status is not STALL and stuck_since != NO_MS:
        due = min(due, max(stuck_since, passed) + p.stall_after_ms)
    if waited < p.allowed_lag_seconds:
        due = min(due, passed + int(p.allowed_lag_seconds * 1000) + 1)
    return due
