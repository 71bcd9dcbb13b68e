"""Burrow's window rules, exactly as spec/evaluation.md states them.

The numbered cases are ported from linkedin/Burrow core/internal/evaluator/caching_test.go
(the "correctness proof" table; timeNow there is in seconds, here in ms). Where lagd's
spec follows the current upstream rules (STOP first, REWIND recovery) the expectation says
why it differs from the older table.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagd.core.model import GroupStatus, PartitionStatus, WindowEntry
from lagd.evaluate import group_status, judge, partition_status
from lagd.evaluate.rules import apply_minimum_complete, judge_flat, judge_window, partition_complete
from lagd.state.windows import NO_LAG

OK, WARN, STOP, STALL, REWIND = (
    PartitionStatus.OK,
    PartitionStatus.WARN,
    PartitionStatus.STOP,
    PartitionStatus.STALL,
    PartitionStatus.REWIND,
)


def w(*rows: tuple[int, int, int, int | None]) -> list[WindowEntry]:
    """Window from (offset, order, timestamp ms, lag) rows, oldest first."""
    return [WindowEntry(offset=o, order=r, timestamp=t, observed=t, lag=lag) for o, r, t, lag in rows]


STEADY = w(
    (1000, 1, 100000, 0), (2000, 2, 200000, 50), (3000, 3, 300000, 100), (4000, 4, 400000, 150), (5000, 5, 500000, 200)
)
ALWAYS_LAGGING = w(
    (1000, 1, 100000, 50),
    (2000, 2, 200000, 100),
    (3000, 3, 300000, 150),
    (4000, 4, 400000, 200),
    (5000, 5, 500000, 250),
)
BURROW_9 = w(
    *[
        (792748079 + i, i + 1, t, 0)
        for i, t in enumerate(
            [
                1512224618356,
                1512224619362,
                1512224620366,
                1512224621367,
                1512224622370,
                1512224623373,
                1512224624378,
                1512224625379,
                1512224626383,
                1512224627383,
                1512224628383,
                1512224629388,
                1512224630391,
                1512224631394,
                1512224632397,
            ]
        )
    ]
)

BURROW_CASES = [
    # 0: zero lag in the window -> OK (not stopped: 100 s since last commit < 400 s span)
    (STEADY, [5200], 200, 600_000, OK),
    # 1: 400 s since the last commit equals the 400 s span: not strictly greater -> OK
    (STEADY, [5200], 200, 900_000, OK),
    # 2: 500 s > 400 s and no broker sample <= 5000 -> STOP despite the zero lag
    (STEADY, [5200], 200, 1_000_000, STOP),
    # 3: STOP when lag is always non-zero as well
    (ALWAYS_LAGGING, [5250], 250, 1_000_000, STOP),
    # 4: same offset throughout but a zero lag in the window -> OK
    (
        w(
            (1000, 1, 100000, 0),
            (1000, 2, 200000, 50),
            (1000, 3, 300000, 100),
            (1000, 4, 400000, 150),
            (1000, 5, 500000, 200),
        ),
        [1200],
        200,
        600_000,
        OK,
    ),
    # 5: same offset, lag never zero -> STALL
    (
        w(
            (1000, 1, 100000, 100),
            (1000, 2, 200000, 150),
            (1000, 3, 300000, 200),
            (1000, 4, 400000, 250),
            (1000, 5, 500000, 300),
        ),
        [1300],
        300,
        600_000,
        STALL,
    ),
    # 6: STALL even when the lag stays the same
    (w(*[(1000, i, i * 100000, 100) for i in range(1, 6)]), [1100], 100, 600_000, STALL),
    # 7: Burrow's old table says REWIND; current rules see 4000 >= 3000 after the step back:
    #    recovered, and the lag decreased (1250 -> 300) -> OK
    (
        w(
            (1000, 1, 100000, 100),
            (2000, 2, 200000, 150),
            (3000, 3, 300000, 200),
            (2000, 4, 400000, 1250),
            (4000, 5, 500000, 300),
        ),
        [4300],
        300,
        600_000,
        OK,
    ),
    # 8: current lag 0 -> OK although the timestamps say stopped
    (ALWAYS_LAGGING, [5250], 0, 1_000_000, OK),
    # 9: 17.6 s since the last commit > 14.0 s span, every broker sample above 792748093 -> STOP
    (BURROW_9, [792749024, 792749000, 792748800, 792748600, 792748500], 931, 1512224650_000, STOP),
    # 10: a broker sample equals the last commit (caught up recently) -> not STOP; zero lags -> OK
    (BURROW_9, [792748094, 792748093, 792748093, 792748093], 1, 1512224650_000, OK),
    # 11: case 0 with null lags in between: nulls change nothing -> OK
    (
        w(
            (1000, 10, 100000, 0),
            (1500, 15, 150000, None),
            (2000, 20, 200000, 50),
            (2500, 25, 250000, None),
            (3000, 30, 300000, 100),
            (3500, 35, 350000, None),
            (4000, 40, 400000, 150),
            (4500, 45, 450000, None),
            (5000, 50, 500000, 200),
            (5500, 55, 550000, None),
        ),
        [5700],
        200,
        600_000,
        OK,
    ),
]


@pytest.mark.parametrize(("window", "broker", "current_lag", "now", "expected"), BURROW_CASES)
def test_burrow_rule_table(
    window: list[WindowEntry], broker: list[int], current_lag: int, now: int, expected: PartitionStatus
) -> None:
    assert partition_status(window, broker, current_lag, now) == expected


def test_empty_window_is_ok() -> None:
    assert partition_status([], [], 500, 1_000_000) == OK
    assert judge_window([], [], 500, 1).rule == "empty"


def test_nothing_fires_while_current_lag_within_allowance() -> None:
    assert partition_status(ALWAYS_LAGGING, [5250], 250, 1_000_000, allowed_lag=250) == OK
    assert partition_status(ALWAYS_LAGGING, [5250], 251, 1_000_000, allowed_lag=250) == STOP


def test_stop_needs_strictly_longer_silence_than_window_span() -> None:
    # span 400 s; silence 400 s -> not STOP (then WARN: lag never decreases, never zero)
    assert partition_status(ALWAYS_LAGGING, [5250], 250, 900_000) == WARN
    assert partition_status(ALWAYS_LAGGING, [5250], 250, 900_001) == STOP


def test_stop_without_broker_samples_and_with_a_recent_catch_up() -> None:
    assert partition_status(ALWAYS_LAGGING, [], 250, 900_001) == STOP
    # a kept sample equal to the newest committed offset: the consumer was caught up
    assert partition_status(ALWAYS_LAGGING, [5250, 5000], 250, 900_001) == WARN
    assert partition_status(ALWAYS_LAGGING, [5250, 5001], 250, 900_001) == STOP


def test_stop_is_checked_before_rewind() -> None:
    rewound = w((3000, 1, 100000, 10), (1000, 2, 200000, 20))
    assert partition_status(rewound, [], 20, 300_001) == STOP
    assert partition_status(rewound, [], 20, 300_000) == REWIND


def test_single_entry_window() -> None:
    one = w((100, 7, 1000, 50))
    # silence 0 ms is not > span 0 ms; one entry counts as "every offset equal"
    assert partition_status(one, [150], 50, 1000) == STALL
    assert partition_status(one, [150], 50, 1001) == STOP
    assert partition_status(one, [100, 150], 50, 1001) == STALL
    assert partition_status(w((100, 7, 1000, 0)), [150], 50, 1000) == OK


def test_rewind_never_recovered() -> None:
    win = w(
        (1000, 1, 100000, 100),
        (2000, 2, 200000, 150),
        (3000, 3, 300000, 200),
        (2000, 4, 400000, 1250),
        (2999, 5, 500000, 300),
    )
    j = judge_window(win, [4300], 300, 600_000)
    assert (j.status, j.rule, j.reason) == (REWIND, "rewind", "committed offset went back and never returned")


def test_rewind_recovered_exactly_to_the_previous_offset() -> None:
    win = w((100, 1, 1000, 5), (50, 2, 2000, 60), (100, 3, 3000, 10))
    assert partition_status(win, [], 10, 3000) == OK  # recovered, lag decreased


def test_rewind_fires_even_with_zero_lag_in_the_window() -> None:
    win = w((1000, 1, 1000, 0), (2000, 2, 2000, 10), (500, 3, 3000, 1500))
    assert partition_status(win, [2000], 1500, 3000) == REWIND


def test_only_the_first_backward_step_counts() -> None:
    # 10 -> 5 is recovered by 20; the later 20 -> 15 step is not looked at
    win = w((10, 1, 1000, 90), (5, 2, 2000, 95), (20, 3, 3000, 90), (15, 4, 4000, 95))
    assert partition_status(win, [], 95, 4000) == OK  # lags decreased somewhere


def test_warn_when_lag_never_decreases_equal_is_not_a_decrease() -> None:
    win = w((100, 1, 1000, 50), (200, 2, 2000, 50), (300, 3, 3000, 50))
    assert partition_status(win, [], 50, 3000) == WARN
    win_dec = w((100, 1, 1000, 50), (200, 2, 2000, 49), (300, 3, 3000, 60))
    assert partition_status(win_dec, [], 60, 3000) == OK


def test_null_lags_are_skipped_by_warn_and_lag_checks() -> None:
    # non-null lags 50, 60 never decrease; the null between does not break the chain
    win = w((100, 1, 1000, 50), (150, 2, 1500, None), (200, 3, 2000, 60))
    assert partition_status(win, [], 60, 2000) == WARN
    # only null lags: no lag within the allowance, the (empty) lag chain never decreases
    assert partition_status(w((100, 1, 1000, None), (200, 2, 2000, None)), [], 60, 2000) == WARN
    assert partition_status(w((100, 1, 1000, None), (100, 2, 2000, None)), [], 60, 2000) == STALL


def test_allowed_lag_applies_to_window_lags() -> None:
    win = w((100, 1, 1000, 30), (200, 2, 2000, 40), (300, 3, 3000, 50))
    assert partition_status(win, [], 50, 3000, allowed_lag=29) == WARN
    assert partition_status(win, [], 50, 3000, allowed_lag=30) == OK


def test_judge_column_form_matches_entries() -> None:
    j = judge([1000, 1000], 1000, 2000, [5, 6], [], 6, 2000)
    assert (j.status, j.rule) == (STALL, "stall")


@dataclass
class P:
    status: PartitionStatus
    current_lag: int
    complete: float


def test_group_status_worst_wins_and_err_mapping() -> None:
    for bad in (STOP, STALL, REWIND):
        s = group_status([P(OK, 0, 1.0), P(WARN, 5, 1.0), P(bad, 3, 0.5)])
        assert (s.status, s.totallag, s.maxlag, s.partition_count, s.complete) == (GroupStatus.ERR, 8, 1, 3, 2 / 3)
    assert group_status([P(OK, 0, 1.0), P(WARN, 1, 1.0)]).status == GroupStatus.WARN
    assert group_status([P(OK, 0, 1.0)]).status == GroupStatus.OK


def test_group_maxlag_first_highest_and_empty_group() -> None:
    s = group_status([P(OK, 7, 1.0), P(OK, 9, 1.0), P(OK, 9, 1.0)])
    assert (s.maxlag, s.totallag) == (1, 25)
    assert group_status([P(OK, 0, 1.0), P(OK, 0, 1.0)]).maxlag == 0
    empty = group_status([])
    assert (empty.status, empty.complete, empty.maxlag, empty.totallag, empty.partition_count) == (
        GroupStatus.OK,
        0.0,
        None,
        0,
        0,
    )


def test_minimum_complete() -> None:
    assert group_status([P(STOP, 5, 0.5)], minimum_complete=0.6).status == GroupStatus.OK
    assert group_status([P(STOP, 5, 0.6)], minimum_complete=0.6).status == GroupStatus.ERR
    assert apply_minimum_complete(STOP, 0.5, 0.6) == OK
    assert apply_minimum_complete(STOP, 0.6, 0.6) == STOP
    assert partition_complete(3, 10) == 0.3
    assert partition_complete(10, 10) == 1.0


# Hand-computed: entries 1 s apart from t=0, judged 1 s after the newest, no broker samples,
# allowed lag 0. Only a single entry is silent (1 s) longer than its window spans (0 s).
HAND_CASES = [
    ([100], [5], 5, STOP, "stop"),
    ([100, 100], [5, 6], 6, STALL, "stall"),
    ([100, 100], [5, 5], 0, OK, "caught-up"),
    ([100, 100, 100], [None, 0, None], 5, OK, "recent-low-lag"),  # a zero lag wins over STALL
    ([100, 200, 300], [0, 10, 20], 20, OK, "recent-low-lag"),
    ([100, 200, 300], [50, 50, 50], 50, WARN, "lag-not-decreasing"),
    ([100, 200, 300], [60, None, 50], 50, OK, "progressing"),  # the null is skipped: 60 -> 50 decreases
    ([100, 200, 300], [50, None, 60], 60, WARN, "lag-not-decreasing"),  # 50 -> 60 across the null
    ([100, 200, 300], [None, None, None], 20, WARN, "lag-not-decreasing"),
    ([300, 200, 250], [10, 20, 30], 30, REWIND, "rewind"),  # 200 < 300, never back to 300
    ([300, 200, 300], [10, 20, 30], 30, WARN, "lag-not-decreasing"),  # back to 300: recovered
    ([300, 200, 300], [30, 20, 10], 10, OK, "progressing"),
]


@pytest.mark.parametrize(("offsets", "lags", "current_lag", "status", "rule"), HAND_CASES)
def test_every_form_gives_the_hand_computed_status(
    offsets: list[int], lags: list[int | None], current_lag: int, status: PartitionStatus, rule: str
) -> None:
    n = len(offsets)
    now = 1000 * n
    win = [WindowEntry(o, i, 1000 * i, 1000 * i, lags[i]) for i, o in enumerate(offsets)]
    flat = array("q")
    for e in win:
        flat.extend((e.offset, e.order, e.timestamp, e.observed, NO_LAG if e.lag is None else e.lag))
    column = judge(offsets, 0, 1000 * (n - 1), lags, [], current_lag, now)
    assert (column.status, column.rule) == (status, rule)
    assert partition_status(win, [], current_lag, now) == status
    assert judge_window(win, [], current_lag, now).rule == rule
    assert judge_flat(flat, [], current_lag, now).rule == rule


@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 30)), st.integers(0, 5000)), max_size=10
    ),
    st.lists(st.integers(0, 40), max_size=4),
    st.integers(0, 40),
    st.integers(0, 3),
    st.integers(0, 60_000),
    st.integers(0, 3),
)
def test_flat_judge_matches_entry_judge(
    rows: list[tuple[int, int | None, int]], broker: list[int], current_lag: int, allowed: int, now: int, recent: int
) -> None:
    """The evaluator's flat-window path decides exactly as the rules over entries do."""
    ts = sorted(t for _, _, t in rows)
    win = [WindowEntry(o, i, t, t, lag) for i, ((o, lag, _), t) in enumerate(zip(rows, ts, strict=True))]
    flat = array("q")
    for e in win:
        flat.extend((e.offset, e.order, e.timestamp, e.observed, NO_LAG if e.lag is None else e.lag))
    kept = broker[-recent:] if recent else broker
    assert judge_flat(flat, broker, current_lag, now, allowed, recent) == judge_window(
        win, kept, current_lag, now, allowed
    )
