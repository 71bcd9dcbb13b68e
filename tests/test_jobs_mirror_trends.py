"""Mirror trends job against the real Postgres and a local SparkSession: records produced against
records replicated per minute and hour, for a mirror that stops copying for ten minutes and then
catches up at twice the source's rate."""

from __future__ import annotations

import argparse
import random
from typing import Any

import psycopg2  # type: ignore[import-untyped]
import pytest

from lagd.core.config import MirrorSettings
from lagd.evaluate.mirror_trends import Side, delay_from_levels, trend_rows
from lagd.evaluate.mirrors import cumulative, delay_at
from lagd.jobs.mirror_trends import main as mirror_trends_main
from lagd.jobs.mirror_trends import run_mirror_trends
from tests.test_jobs_mirrors import _insert, _settings
from tests.test_jobs_trends import _KeepRunning

T0 = 1_800_000_000_000  # an hour start (08:00 UTC); the backfilled range is [T0, T0 + 1 h)
S = 1000
MIN = 60 * S
FIRST = -3700  # seconds from T0 of the first sample (before the job's hour of lookback); one every 10 s
LAST = 3590
RATE = 10  # records per second per partition on the source
STOP, RESUME = 1200, 1800  # the target copies nothing from T0+20 min to T0+30 min, then twice the rate
MIRROR = MirrorSettings(
    name="dr", source="src", target="dst", topics="^(orders|unmirrored)$", rename="prefix", prefix="src."
)


def _source(t: int) -> int:
    """Records appended to one source partition from FIRST to t seconds after T0."""
    return RATE * (t - FIRST)


def _target(t: int) -> int:
    """Records the target partition holds at t: all of the source's up to STOP, none more until
    RESUME, then twice the source's rate until level with it again (at T0+40 min)."""
    if t <= STOP:
        return _source(t)
    if t <= RESUME:
        return _source(STOP)
    return min(_source(t), _source(STOP) + 2 * RATE * (t - RESUME))


def _true_delay(t: int) -> float:
    """Independently of the job: seconds since the source held what the target holds at t."""
    held = _target(t)
    return t - (held / RATE + FIRST)


def history(t0: int = T0) -> list[tuple[Any, ...]]:
    """log_end_history rows of both clusters, the hour to backfill starting at `t0`."""
    rows = []
    for partition in (0, 1):
        base = 100_000 + 1000 * partition  # both clusters count from one origin
        for t in range(FIRST, LAST + 1, 10):
            ts = t0 + t * S
            rows.append((ts, "src", "orders", partition, base + _source(t)))
            rows.append((ts, "src", "unmirrored", partition, base + _source(t)))
            rows.append((ts, "dst", "src.orders", partition, base + _target(t)))
    return rows


def _stored(url: str, topic: str = "orders", since: int = 0) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT step, bucket, target_topic, produced, replicated, completeness, completeness_cumulative, "
                "backlog, delay_seconds, delay_beyond_history FROM mirror_trends "
                "WHERE mirror = 'dr' AND topic = %s AND bucket >= %s ORDER BY step, bucket",
                (topic, since),
            )
            return list(cur.fetchall())
    finally:
        conn.close()


# Per minute k of the hour, 2 partitions: the source appends 2 x 600. A delta belongs to the minute
# of its later sample (samples at 60k .. 60k+50): the target's minute 20 gets the 10 s up to the
# stop, minutes 21-29 nothing, minute 30 the 50 s from the resume at twice the rate, 31-39 twice
# the rate, minute 40 the 10 s until level (400) and 50 s at the source's rate (1000): 2 x 700.
REPLICATED = [1200] * 20 + [200] + [0] * 9 + [2000] + [2400] * 9 + [1400] + [1200] * 19


def assert_stop_and_catch_up(database_url: str, t0: int = T0) -> list[tuple[Any, ...]]:
    """The stored rows of the hour from `t0` of `history(t0)`, checked; returned."""
    rows = _stored(database_url)
    minutes = [r for r in rows if r[0] == 60]
    hours = [r for r in rows if r[0] == 3600]
    assert [r[1] for r in minutes] == [t0 + k * MIN for k in range(60)]
    assert {r[2] for r in rows} == {"src.orders"}
    # the test's own account of the target, summed the same way
    assert [2 * (_target(60 * k + 50) - _target(60 * k - 10)) for k in range(60)] == REPLICATED
    assert [r[3] for r in minutes] == [1200] * 60
    assert [r[4] for r in minutes] == REPLICATED
    assert [r[5] for r in minutes] == [pytest.approx(n / 1200) for n in REPLICATED]
    # cumulative from the day's start (08:00, the first row of the day): the audit's running completeness
    assert [r[6] for r in minutes] == [pytest.approx(sum(REPLICATED[: k + 1]) / (1200 * (k + 1))) for k in range(60)]
    # backlog at each minute's last sample; zero before the stop and from minute 40 on
    backlog = [r[7] for r in minutes]
    assert backlog == [2 * (_source(60 * k + 50) - _target(60 * k + 50)) for k in range(60)]
    assert backlog[19] == 0 and backlog[29] == 11800 and backlog[39] == 200 and backlog[40:] == [0] * 20
    # delay at each minute's end: within the bucket resolution (60 s) of the true one, and here within the
    # 10 s between the minute's last sample and its end
    for k, r in enumerate(minutes):
        assert abs(r[8] - _true_delay(60 * (k + 1))) <= 10.0 + 1e-9, (k, r[8], _true_delay(60 * (k + 1)))
        assert r[9] is False
    assert [r[8] for r in minutes][20:31] == pytest.approx([50.0 + 60 * i for i in range(10)] + [550.0])
    assert max(r[8] for r in minutes) == pytest.approx(590.0)  # true: 600 s at T0+30 min
    # one hour row: every record of the hour was replicated within it
    assert hours == [(3600, t0, "src.orders", 72000, 72000, 1.0, 1.0, 0, 0.0, False)]
    # a source topic without a copy: produced counted, replicated unknown
    unmirrored = _stored(database_url, "unmirrored")
    assert len(unmirrored) == 61
    assert {(r[3], r[4], r[5], r[7], r[8]) for r in unmirrored if r[0] == 60} == {(1200, None, None, None, None)}
    return rows


def test_stop_and_catch_up_gives_exact_counts_and_delays(spark: Any, database_url: str) -> None:
    _insert(database_url, history())
    lines: list[str] = []
    got = run_mirror_trends(
        spark, database_url, {"dr": MIRROR}, T0, T0 + 3600 * S, lines.append, now_ms=T0 + 7200 * S, partitions=2
    )
    assert (got.start_ms, got.end_ms, got.slices, got.watermark) == (T0, T0 + 3600 * S, 1, T0 + 3600 * S)
    rows = assert_stop_and_catch_up(database_url)
    assert len(lines) == 2
    assert lines[0] == "mirror-trends: 2027-01-15T08:00Z .. 2027-01-15T09:00Z (1 h, 1 slice(s), 1 mirror(s))"
    assert lines[1].startswith(
        "mirror-trends: 2027-01-15T08:00Z .. 2027-01-15T09:00Z done (1/1): 122 rows "
        "(120 minute and 2 hour buckets) of 2 topic(s), "
    )

    # re-running the range replaces its rows: the same rows, no duplicates
    run_mirror_trends(
        spark, database_url, {"dr": MIRROR}, T0, T0 + 3600 * S, lines.append, now_ms=T0 + 7200 * S, partitions=2
    )
    assert _stored(database_url) == rows
    assert len(_stored(database_url, "unmirrored")) == 61


def test_incremental_runs_from_the_watermark_match_the_backfill(spark: Any, database_url: str) -> None:
    _insert(database_url, history())
    backfill_lines: list[str] = []
    run_mirror_trends(
        spark,
        database_url,
        {"dr": MIRROR},
        T0,
        T0 + 3600 * S,
        backfill_lines.append,
        now_ms=T0 + 7200 * S,
        partitions=2,
    )
    backfilled = _stored(database_url, since=T0)
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("DELETE FROM mirror_trends")
            cur.execute("DELETE FROM job_watermarks")
    finally:
        conn.close()
    # periodic runs: first at T0+30 min (no watermark: from the oldest sample), then at T0+60 min
    lines: list[str] = []
    first = run_mirror_trends(
        spark, database_url, {"dr": MIRROR}, None, None, lines.append, now_ms=T0 + 1800 * S, partitions=2
    )
    assert (first.start_ms, first.watermark) == (T0 - 7200 * S, T0 + 1800 * S)
    half = _stored(database_url, since=T0)
    assert [r[1] for r in half if r[0] == 60] == [T0 + k * MIN for k in range(30)]  # nothing after now
    second = run_mirror_trends(
        spark, database_url, {"dr": MIRROR}, None, None, lines.append, now_ms=T0 + 3600 * S, partitions=2
    )
    # from the watermark less the 300 s overlap, widened to the hour
    assert (second.start_ms, second.end_ms, second.watermark) == (T0, T0 + 3600 * S, T0 + 3600 * S)
    # the same rows; the cumulative completeness also counts the day's rows before T0 (07:xx, all copied)
    again = _stored(database_url, since=T0)
    assert [r[:6] + r[7:] for r in again] == [r[:6] + r[7:] for r in backfilled]
    day = _stored(database_url)
    minutes = [r for r in day if r[0] == 60]
    assert minutes[0][1] < T0
    for k, r in enumerate(minutes):
        done = minutes[: k + 1]
        assert r[6] == pytest.approx(sum(m[4] for m in done) / sum(m[3] for m in done))
    assert minutes[-1][6] == pytest.approx(1.0)


def test_delay_from_levels_is_the_mirror_rules_delay() -> None:
    rng = random.Random(54)
    for _ in range(300):
        counts = [rng.choice([0, 0, rng.randrange(1, 50)]) for _ in range(rng.randrange(1, 30))]
        cum = cumulative(counts)
        levels = [0, *cum]
        i = rng.randrange(len(counts))
        target = rng.uniform(-5, cum[-1] + 5)
        assert delay_from_levels(levels, 60.0, i, target) == pytest.approx(delay_at(cum, 60.0, i, target))


def test_buckets_before_the_first_samples_are_not_counted() -> None:
    # source first sampled in bucket 1, the target in bucket 3: rows from bucket 2, replicated known from 4
    rows = trend_rows(Side([0, 0, 5, 5, 5, 5], 100, 1), Side([0, 0, 0, 0, 5, 5], 90, 3), 60.0, 0)
    assert [(r.bucket, r.produced, r.replicated) for r in rows] == [(2, 5, None), (3, 5, None), (4, 5, 5), (5, 5, 5)]
    # levels at the bucket ends: source 115 and 120, target 95 and 100 (their offsets count from one origin)
    assert [(r.backlog, r.delay_beyond_history) for r in rows[2:]] == [(20, True), (20, False)]


def test_without_mirrors_it_says_so(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagd.core.config import parse

    monkeypatch.delenv("STATE_DIRECTORY", raising=False)  # by hand, outside a unit: said every time
    settings = parse({"clusters": {"a": {"bootstrap-servers": ["k:9092"]}}}, env={})
    assert mirror_trends_main(settings, argparse.Namespace(master="", start=None, end=None)) == 0
    assert "no mirrors configured" in capsys.readouterr().err


def test_spark_error_is_two_lines(spark: Any, empty_database_url: str, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr("lagd.jobs.spark.session_for", lambda *a, **kw: _KeepRunning(spark))
    args = argparse.Namespace(start=str(T0), end=str(T0 + 3600 * S), master=None)
    assert mirror_trends_main(_settings(empty_database_url), args) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("lagd: mirror-trends job failed: ")
    assert "lagd db upgrade" in err[1]
