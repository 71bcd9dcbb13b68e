"""Mirror verdicts from per-bucket appended counts: each rule, with hand-computed figures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagd.evaluate.mirrors import MirrorVerdict, cumulative, delay_at, judge_mirror

B = 60.0  # bucket seconds


def test_healthy_mirror_is_ok_with_full_completeness() -> None:
    j = judge_mirror([100] * 10, [100] * 10, B)
    assert j.verdict is MirrorVerdict.OK
    assert (j.completeness, j.delay_seconds) == (1.0, 0.0)
    assert j.source_rate == pytest.approx(1000 / 600)  # 10 x 100 messages over 600 s
    assert j.target_rate == pytest.approx(1000 / 600)


def test_jitter_between_buckets_is_ok() -> None:
    # The target's counts wobble around the source's; the delay goes up and down, never grows throughout.
    j = judge_mirror([100] * 10, [90, 110, 95, 105, 100, 100, 97, 103, 100, 100], B)
    assert j.verdict is MirrorVerdict.OK
    assert j.completeness == 1.0


def test_missing_target_topic() -> None:
    j = judge_mirror([100] * 10, None, B)
    assert j.verdict is MirrorVerdict.MISSING
    assert (j.completeness, j.delay_seconds, j.target_rate) == (None, None, None)


def test_stalled_target_flat_while_source_grows() -> None:
    j = judge_mirror([100] * 10, [100] * 5 + [0] * 5, B)
    assert j.verdict is MirrorVerdict.STALLED
    assert j.completeness == 0.5  # 500 of 1000
    # The target's 500 were reached by the source at the end of bucket 4 (300 s); now is 600 s.
    assert j.delay_seconds == pytest.approx(300.0)


def test_losing_one_percent_is_incomplete() -> None:
    j = judge_mirror([1000] * 10, [990] * 10, B, allowed_loss=0.001)
    assert j.verdict is MirrorVerdict.INCOMPLETE
    assert j.completeness == pytest.approx(0.99)  # 9900 / 10000
    # Source 10000 at 600 s, 9000 at 540 s: 9900 is reached at 540 + 900/1000 * 60 = 594 s -> 6 s ago.
    assert j.delay_seconds == pytest.approx(6.0)


def test_loss_within_the_allowance_is_ok() -> None:
    j = judge_mirror([10000] * 10, [9995] * 10, B, allowed_loss=0.001)  # 0.05 % lost
    assert j.verdict is MirrorVerdict.OK


def test_slowing_mirror_is_lagging() -> None:
    # Full speed for 5 buckets, then half: the deficit keeps growing, so it is not a fixed loss.
    j = judge_mirror([100] * 10, [100] * 5 + [50] * 5, B)
    assert j.verdict is MirrorVerdict.LAGGING
    assert j.completeness == 0.75  # 750 of 1000
    # Delays: 0 for 5 buckets, then target 550 at 360 s reached by the source at 330 s -> 30 s,
    # then 60, 90, 120, 150 s.
    assert j.details["delays"] == [0.0] * 5 + [30.0, 60.0, 90.0, 120.0, 150.0]
    assert j.delay_seconds == pytest.approx(150.0)


def test_idle_source_is_ok() -> None:
    j = judge_mirror([0] * 10, [0] * 10, B)
    assert (j.verdict, j.completeness, j.delay_seconds, j.source_rate) == (MirrorVerdict.OK, 1.0, 0.0, 0.0)


def test_bucket_counts_must_match() -> None:
    with pytest.raises(ValueError, match="same buckets"):
        judge_mirror([1, 2, 3], [1, 2], B)


def test_delay_interpolates_within_a_bucket() -> None:
    cum = cumulative([100, 100])  # [100, 200]
    # Target 150 at the end of bucket 1 (120 s): the source reached 150 at 60 + 50/100 * 60 = 90 s.
    assert delay_at(cum, B, 1, 150) == pytest.approx(30.0)
    assert delay_at(cum, B, 1, 200) == 0.0
    assert delay_at(cum, B, 1, 0) == pytest.approx(120.0)


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=20, max_size=20),
)
def test_figures_are_always_sane(source: list[int], target: list[int]) -> None:
    j = judge_mirror(source, target[: len(source)], B)
    assert j.delay_seconds is not None and 0.0 <= j.delay_seconds <= len(source) * B
    assert j.completeness is not None and j.completeness >= 0.0
    assert j.verdict in set(MirrorVerdict) - {MirrorVerdict.MISSING}
