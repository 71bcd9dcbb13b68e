"""Lag in seconds from the kept log-end history: exact values and properties."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from lagd.evaluate import LagTime, lag_seconds
from lagd.evaluate.lagtime import run_start

OFFSETS = [100, 200, 400, 400, 1000]
TS = [10_000, 20_000, 30_000, 40_000, 50_000]
NOW = 60_000


def test_caught_up_is_zero() -> None:
    assert lag_seconds(1000, OFFSETS, TS, NOW) == LagTime(0.0, False)
    assert lag_seconds(1500, OFFSETS, TS, NOW) == LagTime(0.0, False)


def test_no_samples() -> None:
    assert lag_seconds(5, [], [], NOW) == LagTime(0.0, True)


def test_interpolates_between_samples() -> None:
    # 300 lies halfway between 200 (t=20 s) and 400 (t=30 s): reached at 25 s, 35 s ago
    assert lag_seconds(300, OFFSETS, TS, NOW) == LagTime(35.0, False)
    # 700 between 400 (t=40 s, the last time it was 400) and 1000 (t=50 s): 45 s -> 15 s ago
    assert lag_seconds(700, OFFSETS, TS, NOW) == LagTime(15.0, False)
    # exactly on a sample: the first time the log end reached it
    assert lag_seconds(400, OFFSETS, TS, NOW) == LagTime(30.0, False)
    assert lag_seconds(200, OFFSETS, TS, NOW) == LagTime(40.0, False)


def test_older_than_history_is_a_flagged_lower_bound() -> None:
    assert lag_seconds(50, OFFSETS, TS, NOW) == LagTime(50.0, True)
    assert lag_seconds(100, OFFSETS, TS, NOW) == LagTime(50.0, True)
    assert lag_seconds(5, [10], [1_000], 4_000) == LagTime(3.0, True)


def test_never_negative_when_samples_are_newer_than_now() -> None:
    assert lag_seconds(50, OFFSETS, TS, 5_000) == LagTime(0.0, True)
    assert lag_seconds(300, OFFSETS, TS, 20_000) == LagTime(0.0, False)


def test_truncated_log_uses_newest_run_only() -> None:
    offsets = [500, 900, 100, 200, 300]
    ts = [1_000, 2_000, 3_000, 4_000, 5_000]
    assert run_start(offsets) == 2
    assert lag_seconds(150, offsets, ts, 6_000) == LagTime(2.5, False)
    assert lag_seconds(50, offsets, ts, 6_000) == LagTime(3.0, True)
    assert lag_seconds(150, offsets, ts, 6_000, start=2) == lag_seconds(150, offsets, ts, 6_000)


def test_equal_offsets_do_not_divide_by_zero() -> None:
    assert lag_seconds(10, [10, 10, 10, 11], [1_000, 2_000, 3_000, 4_000], 5_000) == LagTime(4.0, True)
    assert lag_seconds(11, [10, 10, 11, 11], [1_000, 2_000, 3_000, 4_000], 5_000) == LagTime(0.0, False)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    n = draw(st.integers(1, 30))
    steps = draw(st.lists(st.integers(-50, 500), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n))
    offsets, ts = [], []
    o, t = draw(st.integers(0, 10**12)), draw(st.integers(0, 2 * 10**12))
    for step, gap in zip(steps, gaps, strict=True):
        o, t = max(0, o + step), t + gap
        offsets.append(o)
        ts.append(t)
    now = t + draw(st.integers(-20_000, 10**9))
    return offsets, ts, now


@given(histories(), st.integers(-100, 10**12 + 20_000), st.integers(-100, 10**12 + 20_000))
def test_further_behind_never_reads_less_behind(h: tuple[list[int], list[int], int], a: int, b: int) -> None:
    offsets, ts, now = h
    behind, ahead = min(a, b), max(a, b)
    slow = lag_seconds(behind, offsets, ts, now)
    fast = lag_seconds(ahead, offsets, ts, now)
    assert slow.seconds >= fast.seconds
    for r in (slow, fast):
        assert math.isfinite(r.seconds) and r.seconds >= 0.0
    hinted = lag_seconds(behind, offsets, ts, now, start=run_start(offsets))
    assert hinted == slow


@given(histories())
def test_state_style_hint_matches_scan(h: tuple[list[int], list[int], int]) -> None:
    offsets, ts, now = h
    for committed in (offsets[0] - 1, offsets[-1] - 1, (offsets[0] + offsets[-1]) // 2):
        assert lag_seconds(committed, offsets, ts, now, start=run_start(offsets)) == lag_seconds(
            committed, offsets, ts, now
        )
