"""Mirror verdicts from per-bucket appended counts: each rule, with hand-computed figures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagd.core.config import MirrorSettings
from lagd.evaluate.mirrors import MirrorVerdict, cumulative, delay_at, judge_mirror, judge_young_mirror, level_at
from lagd.jobs.mirrors import TopicCounts, judge_mirrors

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


def test_delay_after_an_idle_stretch_counts_from_its_end() -> None:
    cum = cumulative([100, 0, 100])  # [100, 100, 200]: idle during bucket 1
    # Target 100 at 180 s: the source was at 100 until 120 s, so the target lacks only what came
    # after 120 s -> 60 s (not 120 s, the time it first reached 100).
    assert delay_at(cum, B, 2, 100) == pytest.approx(60.0)
    # A count below the series start was passed before it: the time since the start, a lower bound.
    assert delay_at(cum, B, 2, -1) == pytest.approx(180.0)


def test_level_interpolates_and_clamps() -> None:
    cum = [100, 200]
    assert level_at(cum, B, 90.0) == pytest.approx(150.0)  # halfway through bucket 1
    assert level_at(cum, B, -5.0) == 0.0  # before the series start: its level
    assert level_at(cum, B, 500.0) == 200.0  # after the end: the last level


# With history: the first `history` buckets precede the window and `backlog` (messages the target
# lacked at the series start, from log-end offsets) anchors the two counts to a common origin.


def test_constant_delay_across_a_rate_step_is_ok() -> None:
    # The source steps from 100 to 200 per bucket at the window start; the target copies every
    # bucket one bucket (60 s) later, so at the series start it lacked the source's last 100.
    source = [100] * 5 + [200] * 10
    target = [100] * 6 + [200] * 9
    j = judge_mirror(source, target, B, history=5, backlog=100)
    # Window start (300 s): source 500, target 500 - 100 = 400, reached by the source at 240 s -> 60 s.
    # Window end (900 s): source 2500, target 2400 - 100 = 2300, reached at 840 s -> 60 s.
    assert j.verdict is MirrorVerdict.OK
    assert j.details["delays"] == [60.0] * 10
    assert j.delay_seconds == pytest.approx(60.0)
    # Shifted back 60 s the source appended S(840) - S(240) = 2300 - 400 = 1900; the target
    # appended 2400 - 500 = 1900.
    assert j.completeness == pytest.approx(1.0)
    assert j.details["expected_appended"] == pytest.approx(1900.0)
    assert j.details["anchor"] == "offsets"


def test_rising_source_with_the_target_one_bucket_behind_is_complete() -> None:
    # Source 90 in the history bucket, then 100, 110, .. 190; the target appends each bucket's
    # count one bucket later (80 before the series, 90, .. 180). Unshifted, the window would
    # give 1350 / 1450 = 0.931.
    source = [90] + [100 + 10 * i for i in range(10)]
    target = [80] + [90 + 10 * i for i in range(10)]
    j = judge_mirror(source, target, B, history=1, backlog=80)
    # Target at the window end 1430 - 80 = 1350 = the source's level at 600 s; now is 660 s.
    assert j.verdict is MirrorVerdict.OK
    assert j.delay_seconds == pytest.approx(60.0)
    # Shifted 60 s: S(600) - S(0) = 1350, the target appended 1430 - 80 = 1350.
    assert j.completeness == pytest.approx(1.0)


def test_mirror_steadily_five_minutes_behind_shows_the_delay() -> None:
    # 100 per bucket on both; the target lacked 5 buckets' worth (500) at the series start.
    j = judge_mirror([100] * 20, [100] * 20, B, history=10, backlog=500)
    # Window end (1200 s): target 2000 - 500 = 1500, reached by the source at 900 s -> 300 s.
    assert (j.verdict, j.completeness) == (MirrorVerdict.OK, 1.0)
    assert j.delay_seconds == pytest.approx(300.0)
    assert j.details["delays"] == [300.0] * 10


def test_losing_one_percent_with_history_is_incomplete() -> None:
    j = judge_mirror([1000] * 20, [990] * 20, B, history=10, backlog=0)
    assert j.verdict is MirrorVerdict.INCOMPLETE
    # Window start (600 s): target 9900, reached by the source at 594 s -> 6 s. Shifted 6 s the
    # source appended S(1194) - S(594) = 19900 - 9900 = 10000; the target 9900.
    assert j.completeness == pytest.approx(0.99)
    # Window end: target 19800, reached at 1188 s -> 12 s.
    assert j.delay_seconds == pytest.approx(12.0)


def test_stalled_with_history() -> None:
    # One bucket behind (backlog 100), then the target stops after bucket 14.
    j = judge_mirror([100] * 20, [100] * 15 + [0] * 5, B, history=10, backlog=100)
    assert j.verdict is MirrorVerdict.STALLED
    # Target 1500 - 100 = 1400, reached by the source at 840 s; now is 1200 s.
    assert j.delay_seconds == pytest.approx(360.0)
    # Shifted 60 s the source appended S(1140) - S(540) = 1900 - 900 = 1000; the target 500.
    assert j.completeness == pytest.approx(0.5)


def test_growing_delay_with_history_is_lagging() -> None:
    # One bucket behind, then at half speed for the last 5 buckets: the delay grows 30 s a bucket.
    j = judge_mirror([100] * 15, [100] * 10 + [50] * 5, B, history=5, backlog=100)
    assert j.verdict is MirrorVerdict.LAGGING
    # Bucket end 11 (660 s): target 1050 - 100 = 950, reached at 570 s -> 90 s; then 120 .. 210 s.
    assert j.details["delays"] == [60.0] * 5 + [90.0, 120.0, 150.0, 180.0, 210.0]
    # Shifted 60 s the source appended 1000; the target 750.
    assert j.completeness == pytest.approx(0.75)


def test_missing_with_history() -> None:
    j = judge_mirror([100] * 20, None, B, history=10, backlog=0)
    assert j.verdict is MirrorVerdict.MISSING
    assert j.source_rate == pytest.approx(1000 / 600)  # the window's 10 buckets only


def test_one_off_shortfall_is_a_delay_not_a_loss() -> None:
    # 50 messages of bucket 1 never arrive, everything after does: the target stays 50 behind, a
    # constant 30 s delay. The window's deficit shrinks (50/600 .. 50/1000) but the trailing half on
    # its own is complete, so it is not INCOMPLETE.
    j = judge_mirror([100] * 11, [100, 50] + [100] * 9, B, history=1, backlog=0)
    assert j.verdict is MirrorVerdict.OK
    assert j.details["delays"] == [30.0] * 10
    assert j.completeness == pytest.approx(0.95)  # 950 of the 1000 expected with the start's 0 s delay


@pytest.mark.parametrize("backlog", [None, -50, 5000])
def test_unusable_backlog_falls_back_to_caught_up(backlog: int | None) -> None:
    # None: unknown. -50: the target would be ahead of the source. 5000: the target's level at the
    # window start (1000 - 5000) was passed before the series start. Then the mirror is taken as
    # caught up where it came closest to the source (here everywhere: backlog 0) -> a lower bound, 0 s.
    j = judge_mirror([100] * 20, [100] * 20, B, history=10, backlog=backlog)
    assert (j.details["anchor"], j.details["backlog"], j.delay_seconds) == ("caught-up", 0, 0.0)


def test_caught_up_anchor_is_where_the_target_came_closest() -> None:
    # The target is 100 behind at the series start and catches up in bucket 2: at the end of
    # bucket 1 it is 100 ahead of the series-start origin, so backlog >= 100; it is taken as 100.
    j = judge_mirror([100] * 12, [0, 300] + [100] * 10, B, history=2)
    assert (j.details["anchor"], j.details["backlog"]) == ("caught-up", 100)
    assert j.delay_seconds == 0.0


def test_history_must_leave_a_window() -> None:
    with pytest.raises(ValueError, match="leave at least one bucket"):
        judge_mirror([1, 2], [1, 2], B, history=2)


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=20, max_size=20),
    st.integers(min_value=0, max_value=19),
    st.one_of(st.none(), st.integers(min_value=-10_000, max_value=100_000)),
)
def test_figures_are_always_sane(source: list[int], target: list[int], history: int, backlog: int | None) -> None:
    history = min(history, len(source) - 1)
    j = judge_mirror(source, target[: len(source)], B, history=history, backlog=backlog)
    assert j.delay_seconds is not None and 0.0 <= j.delay_seconds <= len(source) * B
    assert j.completeness is not None and j.completeness >= 0.0
    assert j.verdict in set(MirrorVerdict) - {MirrorVerdict.MISSING}
    assert j.details["backlog"] >= 0


# --- young mirrors: buckets before the first samples are not messages lost ----------------


def test_a_young_healthy_mirror_is_not_enough_data_not_incomplete() -> None:
    # A mirror younger than the series (10 history + 10 window buckets of 60 s): the source is
    # sampled from bucket 15, its copy from bucket 16, whose first sample has no predecessor:
    # the target looks 100 messages short for good, though every message was copied.
    source = [0] * 15 + [100] * 5
    target = [0] * 16 + [100] * 4
    assert judge_mirror(source, target, B, history=10).verdict is MirrorVerdict.INCOMPLETE  # what it used to read
    j = judge_young_mirror(source, target, B, history=10, uncovered=17)
    assert j.verdict is MirrorVerdict.NOT_ENOUGH_DATA
    assert (j.completeness, j.delay_seconds) == (None, None)


def test_a_mirror_covering_most_of_the_window_is_judged_on_what_it_covers() -> None:
    healthy = judge_young_mirror([0] * 13 + [100] * 7, [0] * 13 + [100] * 7, B, history=10, uncovered=13)
    assert healthy.verdict is MirrorVerdict.OK and healthy.details["uncovered_buckets"] == 13
    lossy = judge_young_mirror([0] * 13 + [100] * 7, [0] * 13 + [90] * 7, B, history=10, uncovered=13)
    assert lossy.verdict is MirrorVerdict.INCOMPLETE


def test_judge_mirrors_leaves_out_buckets_before_either_sides_first_sample() -> None:
    mirror = MirrorSettings(name="m", source="a", target="b", window=600.0)
    counts = {
        ("a", "t"): TopicCounts({i: 100 for i in range(-1, 20)}, 0, -1),  # sampled long before
        ("b", "t"): TopicCounts({17: 0, 18: 100, 19: 99}, 0, 17),  # the copy exists since bucket 17
    }
    [verdict] = judge_mirrors(mirror, counts, buckets=10, history=10)
    assert verdict.judgement.verdict is MirrorVerdict.NOT_ENOUGH_DATA
