"""The clear-time prediction (lagd.evaluate.clearing) on synthetic windows at known rates."""

from __future__ import annotations

import random
from array import array

import pytest

from lagd.core.times import about
from lagd.evaluate.clearing import (
    Clearing,
    fit_clearing,
    group_clearing,
    lag_records,
    partition_clearing,
)
from lagd.state.layout import FIELDS
from lagd.state.windows import NO_LAG, LogEnd


def window(
    backlog: int,
    produce: float,
    consume: float,
    *,
    commits: int = 10,
    every_ms: int = 5_000,
    start_ms: int = 1_000_000,
    jitter: float = 0.0,
    seed: int = 0,
) -> tuple[array[int], LogEnd, int]:
    """A consumer working off `backlog` records at `consume` records/s while `produce` records/s
    arrive, committing every `every_ms`, with log-end samples every second; the flat window, the
    samples, and the true time (ms) the lag reaches zero (from the start)."""
    rng = random.Random(seed)
    le = LogEnd()
    end0 = 10_000_000
    for k in range(0, commits * every_ms // 1000 + 2):
        t = start_ms + k * 1000
        le.offsets.append(end0 + round(produce * k))
        le.ts.append(t)
    arr: array[int] = array("q")
    for i in range(commits):
        t = start_ms + i * every_ms
        secs = i * every_ms / 1000.0
        done = consume * secs * (1.0 + rng.uniform(-jitter, jitter))
        offset = end0 - backlog + round(done)
        frozen = end0 + round(produce * (t - start_ms) // 1000) - offset
        arr.extend((offset, i + 1, t, t, frozen))
    truth = start_ms + round(1000.0 * backlog / (consume - produce)) if consume > produce else -1
    return arr, le, truth


@pytest.mark.parametrize(
    ("backlog", "produce", "consume"),
    [(100_000, 100.0, 1_100.0), (50_000, 500.0, 600.0), (1_000_000, 0.0, 20_000.0), (5_000, 10.0, 60.0)],
)
def test_a_backlog_draining_at_a_known_rate_is_predicted_within_20_percent(
    backlog: int, produce: float, consume: float
) -> None:
    arr, le, truth = window(backlog, produce, consume, jitter=0.05)
    c = partition_clearing(arr, le, current_lag=backlog)
    assert c is not None
    start = arr[2]
    assert abs(c.drain_rate - (consume - produce)) <= 0.2 * (consume - produce)
    true_left = truth - start
    assert abs(c.clear_at - truth) <= 0.2 * true_left, (c, truth)
    assert c.clear_at_early <= c.clear_at
    late = c.clear_at_late
    assert late is None or late >= c.clear_at
    assert c.drain_rate_low <= c.drain_rate <= c.drain_rate_high
    assert c.slope_se >= 0


def test_the_interval_covers_the_truth_under_noise_at_most_seeds() -> None:
    covered = 0
    within = 0
    for seed in range(40):
        arr, le, truth = window(60_000, 200.0, 700.0, jitter=0.3, seed=seed)
        c = partition_clearing(arr, le, current_lag=1)
        assert c is not None
        late = c.clear_at_late
        if c.clear_at_early <= truth and (late is None or truth <= late):
            covered += 1
    assert covered >= 32  # a 95 % interval: most seeds (progress off by up to 30 % at each commit)
    for seed in range(40):  # progress off by up to 10 %: every prediction within 20 %
        arr, le, truth = window(60_000, 200.0, 700.0, jitter=0.1, seed=seed)
        c = partition_clearing(arr, le, current_lag=1)
        assert c is not None
        if abs(c.clear_at - truth) <= 0.2 * (truth - arr[2]):
            within += 1
    assert within == 40


def test_no_prediction_when_lag_grows_is_flat_or_is_too_short() -> None:
    growing, le, _ = window(10_000, 500.0, 300.0)
    assert partition_clearing(growing, le, current_lag=10_000) is None
    flat, le, _ = window(10_000, 500.0, 500.0, jitter=0.02)
    assert partition_clearing(flat, le, current_lag=10_000) is None
    short, le, _ = window(10_000, 0.0, 100.0, commits=4)
    assert partition_clearing(short, le, current_lag=10_000) is None
    arr, le, _ = window(10_000, 0.0, 100.0)
    assert partition_clearing(arr, le, current_lag=0) is None  # caught up now
    assert partition_clearing(None) is None


def test_a_noisy_lag_with_no_trend_is_not_significant() -> None:
    rng = random.Random(3)
    xs = [float(i * 5) for i in range(10)]
    ys = [1000.0 + rng.uniform(-300, 300) for _ in xs]
    ys[-1] = ys[0]  # no net fall
    assert fit_clearing(xs, ys) is None


def test_without_log_end_samples_the_frozen_lags_are_used_and_null_lags_skipped() -> None:
    arr, _, truth = window(20_000, 0.0, 400.0)
    for b in (0, FIELDS * 3):
        arr[b + 4] = NO_LAG
    xs, ys = lag_records(arr, None)
    assert len(xs) == len(ys) == 8
    c = partition_clearing(arr, None, current_lag=1)
    assert c is not None
    assert abs(c.clear_at - truth) <= 0.2 * (truth - arr[2])


def test_a_group_clears_with_its_slowest_partition_and_not_while_one_falls_behind() -> None:
    fast = fit_clearing([0.0, 1, 2, 3, 4, 5], [600.0, 500, 400, 300, 200, 100])
    slow = fit_clearing([0.0, 1, 2, 3, 4, 5], [1100.0, 1000, 900, 800, 700, 600])
    assert fast is not None and slow is not None
    assert fast.clear_at == 6_000 and slow.clear_at == 11_000
    assert group_clearing([(fast, True), (slow, True), (None, False)]) is slow  # the third keeps up
    assert group_clearing([(fast, True), (None, True)]) is None  # one behind, not (yet) draining: unknown
    assert group_clearing([(None, False), (None, False)]) is None  # nothing to clear


def test_clears_in_and_words() -> None:
    c = Clearing(10.0, 5.0, 20.0, 1.0, 2_400.0, 1_000, -3.0, 10)
    assert c.clear_at == 241_000
    assert c.clears_in(1_000) == 240.0
    assert c.clears_in(500_000) == 0.0
    assert c.clear_at_late == 481_000
    assert about(c.clears_in(1_000)) == "about 4 min"
    assert about(30) == "under a minute"
    assert about(2 * 3600 + 600) == "about 2 h 10 min"
    assert about(3 * 3600) == "about 3 h"
    view = c.view(1_000)
    assert view["clears_in_seconds"] == 240.0 and view["clear_at"] == 241_000


def test_the_quality_benchmarks_backlogs_are_predicted_within_20_percent_from_early_in_their_drain() -> None:
    from bench import bench_quality as quality

    trace = quality.scenario_backlog_clearing(random.Random("scenario_backlog_clearing/1"), 1)
    assert trace.clears_at is not None and 200 < trace.clears_at < quality.DURATION
    o = quality.clearing_run(trace)
    assert o.first_s is not None and o.first_s <= 0.25 * o.true_clear_s
    assert o.predictions > 10 and o.within == o.predictions
