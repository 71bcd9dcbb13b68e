"""lagd's own rules (evaluator.rules = "lagd"): exact per-commit lag, trend, hysteresis, evidence.

Pure: State and Evaluator driven by hand-made commits and log-end samples, time in the events.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import statistics
from array import array
from collections.abc import Callable
from typing import Any

from lagd.core.config import EvaluatorSettings, Settings
from lagd.core.model import Commit, GroupStatus, LogEndSample, PartitionStatus
from lagd.evaluate import Evaluator
from lagd.evaluate.build import build_core
from lagd.evaluate.lagd_rules import fit_trend, lag_seconds_at, lag_trend, rewound
from lagd.evaluate.sight import ClusterSight, judge_sight
from lagd.state.layout import FIELDS, OFFSET
from lagd.state.windows import COARSE_MAX, LogEnd, State

C, G, T = "c", "g", "t"
T0 = 1_700_000_000_000


def core(**evaluator: object) -> tuple[State, Evaluator]:
    ev = dataclasses.replace(EvaluatorSettings(), cache_ttl=0.0, **evaluator)  # type: ignore[arg-type]
    return build_core(Settings(evaluator=ev))


def drive(
    state: State,
    seconds: int,
    produce: Callable[[int], int],
    position: Callable[[int], int | None],
    *,
    sample_every: int = 10,
    commit_every: int = 5,
    start: int = 0,
    judge: Callable[[int], None] | None = None,
) -> None:
    """Second by second: log-end samples every `sample_every` s, commits every `commit_every` s."""
    for t in range(start, start + seconds):
        ms = T0 + t * 1000
        if t % sample_every == 0:
            state.apply(LogEndSample(C, T, 0, produce(t), ms))
        pos = position(t)
        if pos is not None and t % commit_every == 0:
            state.apply(Commit(C, G, T, 0, pos, t + 1, ms, ms))
        if judge is not None:
            judge(t)


def statuses(
    state: State,
    evaluator: Evaluator,
    seconds: int,
    produce: Callable[[int], int],
    position: Callable[[int], int | None],
    **kw: int,
) -> list[GroupStatus]:
    out: list[GroupStatus] = []
    drive(
        state, seconds, produce, position, judge=lambda t: out.append(evaluator.group(C, G, T0 + t * 1000).status), **kw
    )
    return out


def changes(seq: list[GroupStatus]) -> list[tuple[int, GroupStatus]]:
    return [(i, s) for i, s in enumerate(seq) if i == 0 or seq[i - 1] != s]


RATE = 400


def produce(t: int) -> int:
    return 1_000_000 + RATE * t


def healthy(t: int) -> int:
    return produce(t) - RATE // 2  # half a second of records behind


def test_lag_seconds_at_interpolates_the_log_end_at_the_commits_own_time() -> None:
    le = LogEnd(array("q", [1000, 2000, 3000]), array("q", [0, 10_000, 20_000]))
    # offset 1499: the record at 1499 arrived when the log end passed 1500, at 5 s
    assert lag_seconds_at(1499, 8_000, le) == (3.0, True)
    # caught up at commit time: the log end had not passed it by the newest sample
    assert lag_seconds_at(3000, 19_000, le) == (0.0, True)
    # a commit after the newest sample, beyond it: unknown until the next sample
    assert lag_seconds_at(3000, 25_000, le) == (0.0, False)
    # passed before the oldest sample: a lower bound only
    assert lag_seconds_at(500, 30_000, le) == (30.0, False)


def test_lag_in_seconds_stays_exact_for_a_consumer_hours_behind() -> None:
    """Past the fine samples (here 30 x 10 s = 5 minutes) the coarse tier answers: a consumer
    stopped 3 hours ago is 3 hours behind, exactly, not 'at least 5 minutes'."""
    state = State(lag_samples=30)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    hours = 3
    for t in range(0, hours * 3600 + 1, 10):
        state.apply(LogEndSample(C, T, 0, produce(t), T0 + t * 1000))
    state.apply(Commit(C, G, T, 0, produce(0) + 10 * RATE, 1, T0 + 10_000, T0 + 10_000))
    now = T0 + hours * 3600 * 1000
    part = evaluator.group(C, G, now).partitions[0]
    assert not part.lag_seconds_estimated
    assert abs(part.lag_seconds - (hours * 3600 - 10)) < 0.05 * hours * 3600
    offsets, _ = state.log_end_samples(C, T, 0)
    assert len(offsets) == 30  # the fine tier keeps its size; the coarse one is bounded
    le = state.topic_log_ends(C, T)[0]
    assert 0 < len(le.coarse_ts) <= COARSE_MAX
    # and it survives the store: what drain_changes hands over restores the same answer
    history = state.drain_changes().log_end[(C, T, 0)]
    assert history is not None
    again = State(lag_samples=30)
    again.restore_log_end((C, T, 0), *history)
    again.restore_window((C, G, T, 0), state.window(C, G, T, 0))
    assert Evaluator(again, cache_ttl_ms=0).group(C, G, now).partitions[0].lag_seconds == part.lag_seconds


def test_a_steady_consumer_is_ok_whatever_the_sampling_and_commit_cadence() -> None:
    for sample_every, commit_every in ((10, 1), (10, 5), (1, 5), (30, 60)):
        state, evaluator = core()
        seq = statuses(state, evaluator, 1800, produce, healthy, sample_every=sample_every, commit_every=commit_every)
        assert set(seq) == {GroupStatus.OK}, (sample_every, commit_every, changes(seq))


def test_a_slowly_falling_behind_consumer_is_warn_from_soon_after_onset_to_the_end_without_flapping() -> None:
    onset = 600

    def position(t: int) -> int:
        return healthy(t) if t < onset else healthy(onset) + int(0.92 * RATE * (t - onset))

    state, evaluator = core()
    seq = statuses(state, evaluator, 1800, produce, position)
    assert changes(seq)[0] == (0, GroupStatus.OK)
    assert len(changes(seq)) == 2, changes(seq)  # one change per problem episode
    at, status = changes(seq)[1]
    assert status is GroupStatus.WARN and onset < at < onset + 180
    verdict = evaluator.group(C, G, T0 + 1799 * 1000)
    part = verdict.partitions[0]
    assert part.rule in ("falling-behind", "still-behind")
    assert "s per s" in part.reason  # explains itself: the rate of lag growth


def test_warn_holds_while_the_consumer_stays_behind_and_clears_once_it_has_caught_up() -> None:
    def position(t: int) -> int:
        if t < 300:
            return healthy(t)
        if t < 700:
            return healthy(300) + int(0.85 * RATE * (t - 300))  # falls behind
        if t < 1000:
            return healthy(300) + int(0.85 * RATE * 400) + RATE * (t - 700)  # keeps pace, still behind
        return min(healthy(t), healthy(300) + int(0.85 * RATE * 400) + RATE * 300 + 3 * RATE * (t - 1000))

    state, evaluator = core()
    seq = statuses(state, evaluator, 1600, produce, position)
    ch = changes(seq)
    assert [s for _, s in ch] == [GroupStatus.OK, GroupStatus.WARN, GroupStatus.OK], ch
    assert all(s is GroupStatus.WARN for s in seq[ch[1][0] : 1000])  # staying behind stays WARN
    assert ch[2][0] > 1000  # recovery needs the catch-up


def test_a_new_group_or_fresh_lagd_raises_nothing_on_a_short_window() -> None:
    # one commit far behind the log end, then commits draining the backlog: no STOP/STALL/WARN
    def position(t: int) -> int:
        return min(healthy(t), produce(0) - 100 * RATE + 3 * RATE * t)

    state, evaluator = core()
    seq = statuses(state, evaluator, 300, produce, position, sample_every=1)
    assert set(seq) == {GroupStatus.OK}, changes(seq)


def test_a_group_that_commits_once_and_never_again_goes_stop_once_enough_time_passed() -> None:
    state, evaluator = core()
    seq = statuses(state, evaluator, 200, produce, lambda t: healthy(t) if t == 0 else None)
    assert seq[30] is GroupStatus.OK
    assert seq[-1] is GroupStatus.ERR
    assert evaluator.group(C, G, T0 + 199_000).partitions[0].status is PartitionStatus.STOP


def test_one_offset_committed_twice_in_a_moment_then_silence_is_stop_never_stall() -> None:
    """A consumer that commits offset 0 twice 49 ms apart (say on close) and stops: silence is not
    a stalled consumer committing again and again. Found on Apache Kafka by trying the quick start."""
    state, evaluator = core()
    state.apply(LogEndSample(C, T, 0, 300, T0))
    state.apply(Commit(C, G, T, 0, 0, 1, T0, T0))
    state.apply(Commit(C, G, T, 0, 0, 2, T0 + 49, T0 + 49))
    seen = set()
    for t in range(1, 400):
        ms = T0 + t * 1000
        if t % 10 == 0:
            state.apply(LogEndSample(C, T, 0, 300 + t, ms))
        seen.add(evaluator.group(C, G, ms).partitions[0].status)
    assert PartitionStatus.STALL not in seen, seen
    assert evaluator.group(C, G, T0 + 399_000).partitions[0].status is PartitionStatus.STOP


def test_stalled_consumer_goes_straight_to_err() -> None:
    onset = 300
    state, evaluator = core()
    seq = statuses(state, evaluator, 600, produce, lambda t: healthy(min(t, onset)))
    ch = changes(seq)
    assert [s for _, s in ch] == [GroupStatus.OK, GroupStatus.ERR], ch
    assert ch[1][0] - onset < 90
    assert evaluator.group(C, G, T0 + 599_000).partitions[0].status is PartitionStatus.STALL


def test_a_burst_drained_in_seconds_is_not_falling_behind() -> None:
    def burst(t: int) -> int:
        return produce(t) + (30_000 if t >= 400 else 0)

    def position(t: int) -> int:
        if t < 400:
            return healthy(t)
        return min(burst(t) - RATE // 2, healthy(400) + 3000 * (t - 400))

    state, evaluator = core()
    assert set(statuses(state, evaluator, 900, burst, position, commit_every=1)) == {GroupStatus.OK}


def test_burrow_rules_stay_available_and_differ() -> None:
    # Burrow's STOP fires on a one-commit window as soon as time passes; lagd's waits for evidence.
    burrow_state, burrow = core(rules="burrow")
    lagd_state, lagd = core()
    for state in (burrow_state, lagd_state):
        state.apply(LogEndSample(C, T, 0, 5000, T0))
        state.apply(Commit(C, G, T, 0, 1000, 1, T0, T0))
    assert burrow.group(C, G, T0 + 1000).status is GroupStatus.ERR
    assert lagd.group(C, G, T0 + 1000).status is GroupStatus.OK


def test_blind_cluster_holds_time_driven_verdicts() -> None:
    state, evaluator = core()
    drive(state, 300, produce, healthy)
    # lagd lost the offsets reader at 299 s: no commits since, while the log end kept growing
    state.apply(LogEndSample(C, T, 0, produce(3600), T0 + 3_600_000))
    evaluator.seen_through = lambda cluster, now: T0 + 299_000 if cluster == C else None
    assert evaluator.group(C, G, T0 + 3_600_000).status is GroupStatus.OK
    evaluator.seen_through = lambda cluster, now: None
    assert evaluator.group(C, G, T0 + 3_600_000).status is GroupStatus.ERR  # judged now: STOP


def test_a_stop_after_shorter_than_blindness_raises_no_stop_before_lagd_knows_it_is_blind() -> None:
    """stop-after 4 s, blindness known after 3 offset-refreshes + 10 s: a partition committing
    every second until the brokers were cut off is not STOP 5 s later, judged as of what the
    reader had read (issue 50: it went STOP, then ERR, before the cluster was unreachable)."""
    state, evaluator = core(stop_after=4.0, pause_default=4.0)  # judged at stop-after with no pause seen yet
    drive(state, 300, produce, healthy, sample_every=1, commit_every=1)
    cut = T0 + 299_000
    state.apply(LogEndSample(C, T, 0, produce(305), T0 + 305_000))
    sight = judge_sight(
        C,
        T0 + 305_000,
        caught_up=True,
        reader_fresh_at=cut,
        newest_commit=cut,
        newest_sample=T0 + 305_000,
        offset_refresh_ms=500,
    )
    assert not sight.unreachable and sight.blind_since is None
    evaluator.seen_through = lambda cluster, now: sight.judged_as_of
    assert evaluator.group(C, G, T0 + 305_000).status is GroupStatus.OK
    evaluator.seen_through = lambda cluster, now: None
    assert evaluator.group(C, G, T0 + 305_000).status is GroupStatus.ERR  # judged now: STOP


def test_sight_tells_unreachable_from_catching_up() -> None:
    now = T0 + 600_000

    def seen_as(**inputs: Any) -> ClusterSight:
        """The sight of a caught-up reader at `now`, fresh data unless `inputs` say otherwise."""
        given = {"newest_commit": now, "newest_sample": now, "offset_refresh_ms": 10_000, **inputs}
        return judge_sight(C, now, caught_up=True, **given)

    def catching_up(**inputs: Any) -> ClusterSight:
        """The sight of a reader not caught up at `now`, with nothing restored or read unless
        `inputs` say otherwise."""
        given = {"reader_fresh_at": None, "newest_commit": None, "newest_sample": None, "offset_refresh_ms": 10_000}
        return judge_sight(C, now, caught_up=False, **{**given, **inputs})

    seen = seen_as(reader_fresh_at=now - 1000)
    assert seen.blind_since is None and not seen.unreachable
    # seen, yet judged as of what the reader has read (issue 50): not one second of silence
    # lagd has not read counts towards STOP, however short stop-after is
    assert (seen.seen_through, seen.judged_as_of) == (now - 1000, now - 1000)
    cut = seen_as(reader_fresh_at=now - 11_000)  # cut off 11 s ago: not blind yet (limit 40 s)
    assert (cut.blind_since, cut.unreachable, cut.judged_as_of) == (None, False, now - 11_000)
    catching = catching_up(newest_commit=now - 50_000, newest_sample=now)
    assert (catching.blind_since, catching.unreachable) == (now, False)  # the newest sample is the newest data
    # started 40 s ago or more and no answer from the brokers yet: unreachable, not catching up
    for ago, unreachable in ((40_000, False), (40_001, True)):
        silent_start = catching_up(reader_started_at=now - ago, reader_answered=False)
        assert (silent_start.blind_since, silent_start.unreachable) == (now - ago, unreachable)
    answered = catching_up(reader_started_at=now - 600_000, reader_answered=True, newest_commit=now - 50_000)
    assert (answered.blind_since, answered.unreachable) == (now - 50_000, False)  # a long catch-up
    reader = seen_as(reader_fresh_at=now - 45_000)
    assert (reader.blind_since, reader.unreachable) == (now - 45_000, True)
    assert reader.judged_as_of == now - 45_000
    sampler = seen_as(reader_fresh_at=now, newest_sample=now - 60_000)
    assert sampler.unreachable and sampler.blind_since == now - 50_000
    behind = seen_as(reader_fresh_at=now - 45_000, reader_moving_at=now - 40_000)
    assert (behind.blind_since, behind.unreachable, behind.behind) == (now - 45_000, False, True)
    assert behind.reason == "offsets reader is 45 s behind the offsets topic: it reads slower than commits arrive"
    stopped = seen_as(reader_fresh_at=now - 45_000, reader_moving_at=now - 40_001)
    assert (stopped.unreachable, stopped.behind) == (True, False)
    # every partition current but one that never moved (its leader silent): cut off all the same
    silent = seen_as(reader_fresh_at=now - 1_000, reader_moving_at=now - 50_000)
    assert (silent.blind_since, silent.unreachable, silent.behind) == (now - 50_000, True, False)
    # behind, and the log-end sampler silent too: the sampler's silence is the cluster's, paged
    blind_sampler = seen_as(reader_fresh_at=now - 45_000, newest_sample=now - 600_000, reader_moving_at=now - 1_000)
    assert (blind_sampler.blind_since, blind_sampler.unreachable, blind_sampler.behind) == (now - 590_000, True, False)
    assert blind_sampler.reason == "no log-end sample for 600 s"
    assert "log-end" in sampler.reason


def test_trend_is_robust_to_one_outlier() -> None:
    state, _ = core()
    rng = random.Random(7)
    drive(state, 600, produce, lambda t: healthy(t) - rng.randrange(RATE), commit_every=1, sample_every=1)
    arr = state.group_windows(C, G)[T][0]  # type: ignore[index]
    trend = lag_trend(arr, state.topic_log_ends(C, T)[0])
    assert trend is not None and abs(trend.slope) < 0.02 and trend.points >= 5


def test_the_trend_fit_is_theil_sen_and_mann_kendall_by_their_definitions() -> None:
    """`fit_trend` against the textbook statistics, written out plainly: the median of the slopes
    between every two points at different times, the Mann-Kendall S over every pair with ties
    within tie_s, z with the continuity correction; equal times and ties included, and windows
    of up to 20 commits (intervals is a setting)."""
    rng = random.Random(11)
    tie_s = 0.25
    for _ in range(400):
        n = rng.randrange(3, 21)
        xs = sorted(rng.choice([rng.uniform(0, 600), 60.0 * rng.randrange(10)]) for _ in range(n))
        ys = [rng.choice([rng.uniform(0, 30), float(rng.randrange(3))]) for _ in range(n)]
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i, j in pairs if xs[j] > xs[i]]
        fit = fit_trend(xs, ys, tie_s)
        if not slopes:
            assert fit is None
            continue
        s = sum((ys[j] - ys[i] > tie_s) - (ys[j] - ys[i] < -tie_s) for i, j in pairs)
        sd = math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
        z = (s - math.copysign(1, s)) / sd if s else 0.0
        slope = statistics.median(slopes)
        fitted = [y - slope * x for x, y in zip(xs, ys, strict=True)]
        middle = statistics.median(fitted)
        noise = 1.4826 * statistics.median([abs(f - middle) for f in fitted])
        assert fit == (n, slope, z, slope * (xs[-1] - xs[0]), noise, ys[-1])


def test_a_window_rewound_only_when_its_first_step_back_is_never_recovered() -> None:
    """Burrow's REWIND on committed offsets, oldest first: steady, equal, a step back made up
    later (not a rewind), a step back never made up, a first step back that is and a second that
    is not (only the first counts), and random windows against the definition itself."""

    def window(offsets: list[int]) -> array[int]:
        arr = array("q", bytes(8 * FIELDS * len(offsets)))
        for i, offset in enumerate(offsets):
            arr[i * FIELDS + OFFSET] = offset
        return arr

    def by_definition(offsets: list[int]) -> bool:
        for i in range(1, len(offsets)):
            if offsets[i] < offsets[i - 1]:
                return max(offsets[i:]) < offsets[i - 1]
        return False

    assert not rewound(window([100, 200, 300]))
    assert not rewound(window([100, 100, 100]))
    assert not rewound(window([100, 300, 200, 300]))
    assert rewound(window([100, 300, 200, 250]))
    assert rewound(window([300, 200]))
    assert not rewound(window([300, 200, 300, 100]))
    rnd = random.Random(7)
    for _ in range(2000):
        offsets = [rnd.randrange(5) for _ in range(rnd.randrange(1, 11))]
        assert rewound(window(offsets)) == by_definition(offsets), offsets


def test_a_reason_says_at_least_where_the_lag_in_seconds_is_only_a_bound() -> None:
    """A consumer that stopped before the oldest log-end sample lagd keeps (the quick-start
    trial: lagd started long after it stopped) reads STOP, its lag in seconds only a lower
    bound (the status page shows "≥"): the reason says "records wait at least N s", and says
    "at least" only then."""
    for samples_from, bound in ((0, False), (200, True)):
        state, evaluator = core()
        for t in range(0, 600, 5):
            ms = T0 + t * 1000
            if t >= samples_from and t % 10 == 0:
                state.apply(LogEndSample(C, T, 0, RATE * t, ms))
            if t < 100:
                state.apply(Commit(C, G, T, 0, RATE * t - RATE // 2 if t else 0, t + 1, ms, ms))
        part = evaluator.group(C, G, T0 + 600_000).partitions[0]
        assert (part.status, part.lag_seconds_estimated) == (PartitionStatus.STOP, bound), part
        said = re.search(r"while records wait (at least )?(\d+) s$", part.reason)
        assert said is not None and bool(said[1]) is bound, part.reason
        assert abs(int(said[2]) - part.lag_seconds) <= 1, (part.reason, part.lag_seconds)
