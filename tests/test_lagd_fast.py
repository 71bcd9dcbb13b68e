"""lagd's rules judged fast (LagdJudge: facts kept per partition between evaluations) answer
exactly as the reference (judge_lagd, recheck_at and reached_in at every evaluation).

Pure: one State, two Evaluators on it (fast and reference), driven by random histories of
commits, log-end samples (growing, stalling, truncated, thinned into the coarse tier) and
evaluation times; every group verdict and every re-check time must be equal.
"""

from __future__ import annotations

import dataclasses
import random
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagd.core.model import Commit, LogEndSample, PartitionStatus
from lagd.core.ruleset import LAGD, lagd_rules
from lagd.evaluate import Evaluator, lagd_fast, verdicts
from lagd.evaluate.lagd_rules import J_CATCHING_UP, LagdParams, TrendFit, lag_points_used, lag_seconds_at, words
from lagd.evaluate.rules import J_CAUGHT_UP
from lagd.evaluate.verdict_types import GroupVerdict
from lagd.state.layout import FIELDS, LAST, OFFSET, TS
from lagd.state.windows import LogEnd, State

C, G, T = "c", "g", "t"
T0 = 1_700_000_000_000

# (kind, partition, amount, seconds later): a log-end sample `amount` records on (a negative
# amount truncates the log), a commit whose distance behind the log end moves by `amount`,
# or an evaluation.
Op = tuple[str, int, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("sample"), st.integers(0, 2), st.integers(-300, 600), st.integers(1, 15)),
        st.tuples(st.just("commit"), st.integers(0, 2), st.integers(-200, 400), st.integers(0, 15)),
        st.tuples(st.just("eval"), st.just(0), st.just(0), st.integers(0, 40)),
    ),
    max_size=120,
)
# A second of traffic, repeated: (seconds, records produced per second, partitions sampled and
# partitions committing (bit masks), how far the committing ones fall further behind (records;
# "hold" commits the same offset again), evaluations at its end).
Tick = tuple[int, int, int, int, int | str, int]
RATES = [0, 50, 400]
BEHIND: list[int | str] = [0, 40, 40, 150, 150, 600, -300, "hold"]
ticks = st.lists(
    st.tuples(
        st.integers(1, 8),
        st.sampled_from(RATES),
        st.integers(0, 7),
        st.integers(0, 7),
        st.sampled_from(BEHIND),
        st.integers(0, 2),
    ),
    max_size=80,
)


def random_ticks(rng: random.Random) -> list[Tick]:
    """A history given tick by tick as `ticks` draws them, from a seeded generator (for a test
    that counts what many histories reach together)."""
    return [
        (
            rng.randint(1, 8),
            rng.choice(RATES),
            rng.randint(0, 7),
            rng.randint(0, 7),
            rng.choice(BEHIND),
            rng.randint(0, 2),
        )
        for _ in range(rng.randint(10, 80))
    ]


def traffic(steps: list[Tick]) -> list[Op]:
    """The operations of a history given tick by tick (see `ticks`)."""
    history: list[Op] = []
    for seconds, rate, sampled, committing, behind, evals in steps:
        for partition in range(3):
            if sampled >> partition & 1:
                history.append(("sample", partition, rate * seconds, 0))
            if committing >> partition & 1:
                history.append(("commit", partition, rate * seconds if behind == "hold" else int(behind), 0))
        history += [("eval", 0, 0, 0)] * evals
        history.append(("eval", 0, 0, seconds))
    return history


def pair(state: State, **kw: object) -> tuple[Evaluator, Evaluator]:
    def one(fast: bool) -> Evaluator:
        return Evaluator(state, rules=LAGD, cache_ttl_ms=0, fast=fast, **kw)  # type: ignore[arg-type]

    return one(True), one(False)


def _in_words(verdict: GroupVerdict) -> GroupVerdict:
    """The verdict with every partition's reason in words, as the reference path gives it."""
    partitions = [dataclasses.replace(p, why=p.reason) for p in verdict.partitions]
    maxlag = partitions[verdict.partitions.index(verdict.maxlag)] if verdict.maxlag is not None else None
    return dataclasses.replace(verdict, partitions=partitions, maxlag=maxlag)


def play(state: State, history: list[Op], now: int = T0) -> Iterator[int]:
    """Apply the history's samples and commits to `state` from `now` on, yielding the time of
    each evaluation it asks for."""
    head = [10_000, 10_000, 10_000]
    behind = [0, 0, 0]
    order = 0
    for kind, partition, amount, later in history:
        now += later * 1000
        if kind == "sample":
            head[partition] = max(0, head[partition] + amount)
            state.apply(LogEndSample(C, T, partition, head[partition], now))
        elif kind == "commit":
            behind[partition] = max(0, behind[partition] + amount)
            order += 1
            offset = max(0, head[partition] - behind[partition])
            state.apply(Commit(C, G, T, partition, offset, order, now, now))
        else:
            yield now


def run(state: State, fast: Evaluator, slow: Evaluator, history: list[Op], now: int = T0) -> list[PartitionStatus]:
    """Apply the history from `now` on; at each evaluation both evaluators must agree. Returns
    the statuses seen."""
    seen: list[PartitionStatus] = []
    for at in play(state, history, now):
        got, want = fast.group(C, G, at), slow.group(C, G, at)
        # The fast path keeps reasons as numbers until read (lagd_rules.Why): compare words.
        assert [p.reason for p in got.partitions] == [p.reason for p in want.partitions]
        assert _in_words(got) == want
        assert fast._due.get((C, G)) == slow._due.get((C, G))
        seen += [p.status for p in got.partitions]
    return seen


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(ops, ticks.map(traffic)),
    st.sampled_from([0, 15_000]),
    st.sampled_from([4, 40]),
    st.sampled_from([0.0, 1.0, 5.0]),
    st.sampled_from([0, 20]),
    # stop-after (stall-after is half of it) far above allowed-lag-seconds (the defaults' case, in
    # which a partition a few records behind is judged without its trend's facts), stall-after just
    # above and at 5 s, and both below 5 s and 1 s
    st.sampled_from([40_000, 10_002, 10_000, 4_000, 1_500]),
)
def test_fast_path_gives_the_reference_verdicts(
    history: list[Op],
    window_step_ms: int,
    lag_samples: int,
    allowed_lag_seconds: float,
    allowed_lag: int,
    stop_after_ms: int,
) -> None:
    state = State(intervals=6, lag_samples=lag_samples, rules=lagd_rules(window_step_ms))
    fast, slow = pair(
        state,
        allowed_lag=allowed_lag,
        allowed_lag_seconds=allowed_lag_seconds,
        min_history_ms=20_000,
        stop_after_ms=stop_after_ms,
    )
    run(state, fast, slow, history)


def test_fast_path_agrees_through_falling_behind_holding_and_recovering() -> None:
    """A consumer that falls behind (WARN), stays behind (held WARN), stops (STOP) and catches
    up, sampled every 2 s and committing every 5 s, judged every second and again every 2 s:
    every branch of the rules reached through kept facts, new samples and new commits."""
    state = State(intervals=10, lag_samples=200, rules=lagd_rules(15_000))
    fast, slow = pair(state)
    history: list[Op] = []
    for t in range(1800):
        if t % 2 == 0:
            history.append(("sample", 0, 800, 0))
        if t % 5 == 0 and not 900 <= t < 1100:  # silent for 200 s: STOP
            history.append(("commit", 0, 100 if t < 700 else -150 if t >= 1100 else 0, 0))
        if t % 2 == 0:
            history.append(("eval", 0, 0, 0))
        history.append(("eval", 0, 0, 1))
    seen = run(state, fast, slow, history)
    assert {PartitionStatus.OK, PartitionStatus.WARN, PartitionStatus.STOP} <= set(seen)


@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=12),
    st.lists(st.integers(0, 400), min_size=1, max_size=12),
    st.lists(st.integers(0, 400), max_size=6),
)
def test_lag_points_stand_while_the_samples_they_read_are_kept(
    steps: list[int], positions: list[int], more: list[int]
) -> None:
    """Each point is `lag_seconds_at` of its commit; when `lag_points_used` names the oldest
    sample it read, appending samples (without truncation) leaves the points unchanged as long
    as that sample is still kept."""
    state = State(intervals=10, lag_samples=8)
    offset, ts = 1000, T0
    for step in steps:
        offset += step
        ts += 10_000
        state.apply(LogEndSample(C, T, 0, offset, ts))
    for i, back in enumerate(positions):
        state.apply(Commit(C, G, T, 0, max(0, offset - back), i + 1, T0 + 5_000 * (i + 1), T0))
    arr = state.group_windows(C, G)[T][0]  # type: ignore[index]
    le: LogEnd = state.topic_log_ends(C, T)[0]
    xs, ys, used = lag_points_used(arr, le)
    expected = []
    for b in range(0, len(arr), FIELDS):
        y, exact = lag_seconds_at(arr[b + OFFSET], arr[b + TS], le)
        if exact:
            expected.append((arr[b + TS] / 1000.0, y))
    assert list(zip(xs, ys, strict=True)) == expected
    if used is None:
        return
    for step in more:
        offset += step
        ts += 10_000
        state.apply(LogEndSample(C, T, 0, offset, ts))
        if le.ts[le.run_start] > used:
            break
        assert lag_points_used(arr, le)[:2] == (xs, ys)


def test_a_commit_passed_before_the_fine_samples_gets_its_point_from_the_coarse_tier() -> None:
    """A commit whose offset the log end passed before the oldest fine sample is placed by the
    coarse tier: its lag in seconds is exact, a point of the trend. One the log end passed
    before every kept sample (as after a fresh start) is only a bound: no point."""
    state = State(intervals=10, lag_samples=8)
    for t in range(0, 1800, 10):  # 30 minutes, 100 records a second: 8 fine samples, the rest coarse
        state.apply(LogEndSample(C, T, 0, 1000 + 100 * t, T0 + 1000 * t))
    le: LogEnd = state.topic_log_ends(C, T)[0]
    assert le.coarse_ts and le.offsets[le.run_start] > 1000 + 100 * 600
    for order, (offset, at) in enumerate([(500, 1700), (1000 + 100 * 600, 1710), (1000 + 100 * 1780, 1790)], 1):
        state.apply(Commit(C, G, T, 0, offset, order, T0 + 1000 * at, T0 + 1000 * at))
    arr = state.group_windows(C, G)[T][0]  # type: ignore[index]
    xs, ys, used = lag_points_used(arr, le)
    # read from the coarse tier, which changes only when the oldest fine sample leaves
    assert used == le.ts[0]
    assert xs == [1710.0 + T0 / 1000, 1790.0 + T0 / 1000]
    assert ys == [
        lag_seconds_at(offset, at, le)[0]
        for offset, at in ((1000 + 100 * 600, T0 + 1_710_000), (1000 + 100 * 1780, T0 + 1_790_000))
    ]
    assert 1000 < ys[0] < 1200 and ys[1] < 20
    state.apply(LogEndSample(C, T, 0, 1000 + 100 * 1800, T0 + 1_800_000))
    assert le.ts[le.run_start] > used  # the sample read left: the points no longer stand


def count_fresh(monkeypatch: pytest.MonkeyPatch, record: Callable[[tuple[Any, ...]], object]) -> None:
    """Where it is built, the compiled judgement from a partition's moments on (`_trend.fresh`)
    derives the facts and fits the trend where needed in place of `_facts` and `_fit`: pass the
    arguments of each of its calls that answered to `record` too. The derivations are counted as
    LagdJudge makes them, so the evaluator's compiled pass over a topic's partitions, which makes
    them inside the C, is turned off (test_trend_c compares the facts it keeps, to the byte)."""
    monkeypatch.setattr(verdicts, "compiled_pass", None)
    real = lagd_fast._compiled_fresh
    if real is None:
        return

    def counted(*args: Any) -> tuple[lagd_fast.Answer, bytes] | None:
        got = real(*args)
        if got is not None:
            record(args)
        return got

    monkeypatch.setattr(lagd_fast, "_compiled_fresh", counted)


def test_kept_facts_are_reused_while_they_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts kept per partition (packed, found by partition among partitions with and
    without kept facts) spare the trend fit while the window and samples stand: an evaluation
    where only time moved fits nothing; a new commit on one partition refits that one alone.
    Every answer still matches the reference."""
    state = State(intervals=10, lag_samples=200)
    fast, slow = pair(state)
    history: list[Op] = []
    for t in range(0, 240, 2):
        for partition in range(3):
            history.append(("sample", partition, 800, 0))
        if t % 10 == 0:
            # partitions 0 and 2 fall further behind each commit; 1 keeps up (no trend needed)
            history += [("commit", 0, 300, 0), ("commit", 1, 0, 0), ("commit", 2, 300, 0)]
        history.append(("eval", 0, 0, 2))
    seen = run(state, fast, slow, history)
    assert PartitionStatus.WARN in seen
    fitted: list[int] = []
    real_fit = lagd_fast._fit

    def counted(arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool) -> tuple[TrendFit | None, int]:
        fitted.append(arr[OFFSET])
        return real_fit(arr, le, used, p, was_behind)

    monkeypatch.setattr(lagd_fast, "_fit", counted)
    count_fresh(monkeypatch, lambda args: fitted.append(args[0][OFFSET]))
    now = T0 + 240_000
    run(state, fast, slow, [("eval", 0, 0, 1)], now)
    first = len(fitted)
    run(state, fast, slow, [("eval", 0, 0, 1), ("eval", 0, 0, 1)], now + 1000)
    assert len(fitted) == first  # only time moved: every lagging partition's facts stood
    committed = (state.group_windows(C, G) or {})[T][2][LAST + OFFSET]
    state.apply(Commit(C, G, T, 2, committed + 100, 10_000, now + 3000, now + 3000))
    run(state, fast, slow, [("eval", 0, 0, 0)], now + 3000)
    assert len(fitted) == first + 1  # the partition with the new commit, alone


def test_facts_read_before_every_sample_stand_until_the_oldest_sample_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a fresh start every commit predates lagd's samples: their waits are bounds read
    from the oldest sample. A partition silent since then is STOP, judged from its facts alone;
    new samples only add to the end, so its facts stand (no judgement derives them again) until
    the oldest sample is retired into the coarse tier. Every answer matches the reference."""
    state = State(intervals=10, lag_samples=120)
    fast, slow = pair(state)
    derived: list[int] = []
    real_facts = lagd_fast._facts

    def counted(arr: array[int], le: LogEnd, moments: lagd_fast.Moments, p: LagdParams) -> lagd_fast.Facts:
        derived.append(arr[LAST + OFFSET])
        return real_facts(arr, le, moments, p)

    monkeypatch.setattr(lagd_fast, "_facts", counted)
    count_fresh(monkeypatch, lambda args: derived.append(args[0][LAST + OFFSET]))
    for partition in range(3):
        state.apply(Commit(C, G, T, partition, 10_000, partition + 1, T0, T0))  # before any sample

    def sampled(second: int) -> list[PartitionStatus]:
        """Every partition's log end 100 records on at `second`, then both judgements."""
        for partition in range(3):
            state.apply(LogEndSample(C, T, partition, 10_100 + 100 * second, T0 + 1000 * second))
        return run(state, fast, slow, [("eval", 0, 0, 0)], T0 + 1000 * second + 500)

    assert sampled(0) == [PartitionStatus.OK] * 3  # waiting 0.5 s (at least: a bound)
    assert len(derived) == 0
    for second in range(1, 100):
        sampled(second)
    assert sampled(100) == [PartitionStatus.STOP] * 3  # silent, its records waiting 100 s or more
    first = len(derived)
    for second in range(101, 120):  # samples 102 to 120 of 120: the oldest stays
        assert sampled(second) == [PartitionStatus.STOP] * 3
    assert len(derived) == first
    sampled(120)  # the 121st: the oldest is retired into the coarse tier
    assert len(derived) == first + 3
    sampled(121)
    assert len(derived) == first + 6  # read from the coarse tier, which the next retirement changes


def test_a_trend_kept_without_its_slope_is_fitted_whole_once_the_slope_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition held WARN whose newest lag is under half allowed-lag-seconds, its trend not
    rising, has caught up: decided by the trend's z alone, its slope is not fitted. Judged again
    (only time moved), it is no longer held WARN, and its lag falling surely (z <= -z_leave)
    makes it catching up only if the slope is below 0: the kept trend is fitted whole then.
    Judged a third time, it reads the whole trend kept. Every answer matches the reference."""
    state = State(intervals=10, lag_samples=400)
    fast, slow = pair(state)
    rate = 100  # records a second, sampled every second for 200 s
    for second in range(200):
        state.apply(LogEndSample(C, T, 0, 10_000 + rate * second, T0 + 1000 * second))
    for k in range(10):  # a commit every 10 s from 100 s on, its lag falling from 46 s to 1 s
        at = 100 + 10 * k
        offset = 10_000 + rate * (at - max(1, 46 - 5 * k))
        state.apply(Commit(C, G, T, 0, offset, k + 1, T0 + 1000 * at, T0 + 1000 * at))
    for evaluator in (fast, slow):
        evaluator.take_over(C, G, [(T, 0, PartitionStatus.WARN)], T0)
    fitted: list[bool] = []
    real_fit = lagd_fast._fit

    def counted(arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool) -> tuple[TrendFit | None, int]:
        fitted.append(was_behind)
        return real_fit(arr, le, used, p, was_behind)

    monkeypatch.setattr(lagd_fast, "_fit", counted)
    count_fresh(monkeypatch, lambda args: fitted.append(args[4]))
    rules = []
    for at in (T0 + 199_500, T0 + 200_500, T0 + 201_500):
        got, want = fast.group(C, G, at), slow.group(C, G, at)
        assert _in_words(got) == want
        rules.append(got.partitions[0].rule)
    assert rules == [J_CAUGHT_UP.rule, J_CATCHING_UP.rule, J_CATCHING_UP.rule]
    # the second judgement fitted the slope the first left out, and kept it in place of the
    # trend without it: the third fits nothing
    assert fitted == [True, False]


def test_facts_that_do_not_pack_are_not_kept_and_the_partition_is_judged_afresh() -> None:
    """Commit times millennia apart (valid int64) make the STOP limit, 3 commit intervals, pass
    int64, which the packed facts cannot hold: the partition is judged as the reference judges
    it, and again next time, its facts not kept."""
    big = 2**62
    times = [-big + k * 1000 for k in range(8)] + [0, big]
    arr = array("q")
    for k, ts in enumerate(times):
        arr.extend((1000 * k, k + 1, ts, ts, 0))
    le = LogEnd(array("q", [100_000 * k for k in range(1, 20)]), array("q", [big + 1000 * k for k in range(1, 20)]))
    params = LagdParams()
    judge = lagd_fast.LagdJudge(params)
    at = big + 60_000
    want = lagd_fast.judge_reference(arr, le, le.offsets[-1] - arr[-5], at, None, params)
    for _ in range(2):
        judge.begin(judge.kept())
        judge.topic("t")
        got = judge.judge(0, arr, le, le.offsets[-1] - arr[-5], at, None)
        # (the times of rechecks differ by float rounding at such magnitudes, both past int64)
        assert (got[0], got[1], words(got[2], got[5])) == want[:3]
    assert judge.kept() == {}
