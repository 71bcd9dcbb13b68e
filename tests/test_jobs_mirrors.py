"""Mirror job against the real Postgres and a local SparkSession: one verdict per mirrored topic."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import psycopg2  # type: ignore[import-untyped]
import pytest

from lagd.core.config import MirrorSettings, parse
from lagd.jobs.mirrors import main as mirrors_main
from lagd.jobs.mirrors import run_mirrors
from tests.test_jobs_trends import _KeepRunning

T0 = 1_800_000_000_000  # window start; the window is [T0, T0+600 s), ten 60 s buckets
S = 1000
NOW = T0 + 600 * S
# The job also reads ten history buckets [T0-600 s, T0) and one bucket before them as predecessors.
FIRST = -660  # seconds from T0 of the first sample; one sample every 30 s up to T0+570
STEP = 500  # messages appended per partition per 30 s on the source
BASE = 100_000  # partition p starts at BASE + 1000 p on both clusters (offsets count from one origin)


def _level(t: int, delay: int = 0, kept: int = 100, step_at: int | None = None) -> int:
    """Messages appended to one source partition from FIRST to t - delay (kept percent of them).

    500 per 30 s; with `step_at`, 1000 per 30 s from then on.
    """
    t -= delay
    n = STEP * (t - FIRST) // 30
    if step_at is not None and t > step_at:
        n += STEP * (t - step_at) // 30
    return n * kept // 100


def _samples(
    cluster: str, topic: str, offset_s: int = 0, stop: int | None = None, **shape: Any
) -> list[tuple[Any, ...]]:
    """log_end_history rows for 2 partitions, one every 30 s from T0+FIRST (+offset_s): the source's
    level at the sample time (shaped by `_level`), frozen after `stop` seconds from T0."""
    rows = []
    for partition in (0, 1):
        for t in range(FIRST, 600, 30):
            level = _level(t if stop is None else min(t, stop), **shape)
            rows.append((T0 + (t + offset_s) * S, cluster, topic, partition, BASE + 1000 * partition + level))
    return rows


def _insert(url: str, rows: list[tuple[Any, ...]]) -> None:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS log_end_history_default PARTITION OF log_end_history DEFAULT")
            cur.executemany("INSERT INTO log_end_history VALUES (%s, %s, %s, %s, %s)", rows)
    finally:
        conn.close()


def test_each_mirrored_topic_gets_its_verdict(spark: Any, database_url: str) -> None:
    mirror = MirrorSettings(
        name="dr",
        source="src",
        target="dst",
        topics="^(healthy|delayed|stalls|lossy|unmirrored)$",
        rename="prefix",
        prefix="src.",
    )
    rows = []
    for topic in ("healthy", "stalls", "lossy", "unmirrored", "skipped"):
        rows += _samples("src", topic)
    # The delayed source doubles its rate at T0-120 s, just before the window.
    rows += _samples("src", "delayed", step_at=-120)
    # Healthy: the same offsets, sampled 5 s later.
    rows += _samples("dst", "src.healthy", offset_s=5)
    # Delayed: 5 s later, each sample holds what the source had 300 s before it.
    rows += _samples("dst", "src.delayed", offset_s=5, delay=300, step_at=-120)
    # Stalls: delivers up to the sample at T0+275 (the source's T0+270), then nothing.
    rows += _samples("dst", "src.stalls", offset_s=5, stop=270)
    # Lossy: 1 % of every step never arrives (495 of 500).
    rows += _samples("dst", "src.lossy", offset_s=5, kept=99)
    _insert(database_url, rows)

    lines: list[str] = []
    got = run_mirrors(spark, database_url, {"dr": mirror}, lines.append, now_ms=NOW, partitions=2)
    verdicts = {v.topic: v.judgement for v in got}
    assert {t: j.verdict.value for t, j in verdicts.items()} == {
        "delayed": "OK",
        "healthy": "OK",
        "stalls": "STALLED",
        "lossy": "INCOMPLETE",
        "unmirrored": "MISSING",
    }
    # Per topic and bucket the source appends 2 partitions x 2 samples x 500 = 2000: 20000 in the window.
    # A bucket's level is its last sample's (at +30 s, +35 s on the target).
    healthy = verdicts["healthy"]
    assert (healthy.completeness, healthy.delay_seconds) == (1.0, 0.0)
    assert healthy.source_rate == pytest.approx(20000 / 600)
    # Delayed: backlog at the series start = source's minus target's total at T0-630 s = 2 x 500 x
    # (300 / 30) = 10000 (the step is later). Each target bucket level is the source's 5 buckets
    # earlier, so the delay is 300 s throughout, and the target appended what the source appended
    # 300 s earlier: completeness 1.0, though unshifted it got 2000, 2000, 2000, 3000, 4000 x 6 of the
    # source's 4000 x 10 (33000 / 40000 = 0.825: INCOMPLETE before the shift).
    delayed = verdicts["delayed"]
    assert delayed.details["anchor"] == "offsets"
    assert delayed.details["backlog"] == 10000
    assert delayed.details["delays"] == [300.0] * 10
    assert delayed.delay_seconds == pytest.approx(300.0)
    assert delayed.completeness == pytest.approx(1.0)
    assert delayed.details["target_appended"] == 2000 * 3 + 3000 + 4000 * 6
    # Stalls: target levels at T0-25 s (the source's T0-30) and frozen from T0+275 (the source's
    # T0+270): it appended 2 x 500 x 10 = 10000 of the 20000 expected.
    assert verdicts["stalls"].completeness == pytest.approx(0.5)
    # The target's 10000 in the window were reached by the source at T0+300 s (end of bucket 4): 300 s ago.
    assert verdicts["stalls"].delay_seconds == pytest.approx(300.0)
    # Lossy: 19800 of 20000 (the 6.3 s delay at the window start shifts a steady source by nothing).
    assert verdicts["lossy"].completeness == pytest.approx(0.99)
    assert lines == ["mirrors: dr (src -> dst): 5 topic(s): 1 INCOMPLETE, 1 MISSING, 2 OK, 1 STALLED"]

    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT topic, target_topic, verdict, evaluated_at FROM mirror_status ORDER BY topic")
            stored = cur.fetchall()
    finally:
        conn.close()
    assert stored == [
        ("delayed", "src.delayed", "OK", NOW),
        ("healthy", "src.healthy", "OK", NOW),
        ("lossy", "src.lossy", "INCOMPLETE", NOW),
        ("stalls", "src.stalls", "STALLED", NOW),
        ("unmirrored", "src.unmirrored", "MISSING", NOW),
    ]


def test_target_topic_names() -> None:
    assert MirrorSettings(rename="identity").target_topic("orders") == "orders"
    assert MirrorSettings(rename="prefix", prefix="east.").target_topic("orders") == "east.orders"


def test_a_mirror_covers_its_source_topics_by_one_rule() -> None:
    """`topics` is searched, as lagd's other name regexes (the log-end sampler, the mirrors and
    mirror-trends jobs and the MM2 flow all ask MirrorSettings.covers); a copy the mirror made on
    its own cluster is not a source topic."""
    m = MirrorSettings(source="dc1", target="dc2", topics="^orders", rename="prefix", prefix="dc1.")
    assert m.covers("dc1", "orders") and m.covers("dc1", "orders-eu")
    assert not m.covers("dc1", "billing") and not m.covers("dc2", "orders")
    whole = dataclasses.replace(m, topics="^orders$")
    assert whole.covers("dc1", "orders") and not whole.covers("dc1", "orders-eu")
    same = MirrorSettings(source="dc1", target="dc1", topics=".*", rename="prefix", prefix="backup.")
    assert same.covers("dc1", "orders") and not same.covers("dc1", "backup.orders")


def _settings(database_url: str) -> Any:
    raw = {
        "clusters": {
            "src": {"bootstrap-servers": ["127.0.0.1:9092"]},
            "dst": {"bootstrap-servers": ["127.0.0.1:9093"]},
        },
        "storage": {"database-url": database_url},
        "mirrors": {"dr": {"source": "src", "target": "dst", "rename": "prefix", "prefix": "src."}},
    }
    return parse(raw, env={})


def test_bad_time_says_what_to_do_before_spark_starts(capsys: Any) -> None:
    args = argparse.Namespace(end="yesterday", master=None)
    assert mirrors_main(_settings("postgresql://nobody@127.0.0.1:1/none"), args) == 1
    assert capsys.readouterr().err.splitlines() == [
        "lagd: mirrors job failed: cannot read time 'yesterday': use epoch milliseconds or ISO 8601 like "
        "2026-11-22T08:00Z"
    ]


def test_spark_error_is_two_lines_without_a_trace(
    spark: Any, empty_database_url: str, capsys: Any, monkeypatch: Any
) -> None:
    # A database without lagd's tables: the JDBC read of log_end_history fails inside Spark.
    monkeypatch.setattr("lagd.jobs.spark.session_for", lambda *a, **kw: _KeepRunning(spark))
    args = argparse.Namespace(end=str(NOW), master=None)
    assert mirrors_main(_settings(empty_database_url), args) == 1
    assert capsys.readouterr().err.splitlines() == [
        'lagd: mirrors job failed: PSQLException: relation "log_end_history" does not exist',
        "lagd: the database lacks lagd's tables or columns: run `lagd db upgrade` with this configuration",
    ]


def test_from_judges_the_given_range_instead_of_the_window(
    spark: Any, database_url: str, capsys: Any, monkeypatch: Any
) -> None:
    # Stalls delivers up to T0+270 s, then nothing. Over the mirror's trailing 600 s it got half of
    # what the source appended; over [T0+300 s, NOW) (--from) it got none of it.
    _insert(database_url, _samples("src", "stalls") + _samples("dst", "src.stalls", offset_s=5, stop=270))
    monkeypatch.setattr("lagd.jobs.spark.session_for", lambda *a, **kw: _KeepRunning(spark))
    settings = _settings(database_url)

    assert mirrors_main(settings, argparse.Namespace(start=None, end=str(NOW), master=None)) == 0
    whole = _stored(database_url)
    assert (whole["verdict"], whole["completeness"], whole["details"]["bucket_seconds"]) == ("STALLED", 0.5, 60.0)

    assert mirrors_main(settings, argparse.Namespace(start=str(T0 + 300 * S), end=str(NOW), master=None)) == 0
    late = _stored(database_url)
    assert (late["verdict"], late["completeness"], late["details"]["bucket_seconds"]) == ("STALLED", 0.0, 30.0)
    assert late["evaluated_at"] == NOW
    assert "mirrors: dr (src -> dst): 1 topic(s): 1 STALLED" in capsys.readouterr().err


def test_from_not_before_to_is_refused_before_spark_starts(capsys: Any) -> None:
    args = argparse.Namespace(start=str(NOW), end=str(T0), master=None)
    assert mirrors_main(_settings("postgresql://nobody@127.0.0.1:1/none"), args) == 1
    assert capsys.readouterr().err.splitlines() == [
        "lagd: mirrors job failed: empty range: --to (2027-01-15T08:00Z) must be after --from (2027-01-15T08:10Z): "
        "give a later --to, or leave --to out to run up to now"
    ]


def _stored(url: str) -> dict[str, Any]:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT verdict, completeness, details, evaluated_at FROM mirror_status WHERE topic = 'stalls'")
            verdict, completeness, details, evaluated_at = cur.fetchone()
    finally:
        conn.close()
    return {"verdict": verdict, "completeness": completeness, "details": details, "evaluated_at": evaluated_at}


def test_without_mirrors_the_timer_s_job_says_so_once_then_exits_quietly(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """lagd-mirrors.timer starts the job every two minutes: with no [mirrors.*] it exits 0, says
    why (and how to stop the timer) at its first run only, and again should mirrors come and go."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path))  # systemd's StateDirectory=lagd
    settings = parse({"clusters": {"a": {"bootstrap-servers": ["k:9092"]}}}, env={})
    args = argparse.Namespace(master="", start=None, end=None)
    said = []
    for _ in range(3):
        assert mirrors_main(settings, args) == 0
        said.append(capsys.readouterr().err)
    assert "no mirrors configured" in said[0] and "systemctl disable --now lagd-mirrors.timer" in said[0]
    assert said[1:] == ["", ""]
    from lagd.jobs.mirrors import NO_MIRRORS_SAID, forget_said

    forget_said(NO_MIRRORS_SAID)  # what a run with mirrors does first
    assert mirrors_main(settings, args) == 0 and "no mirrors configured" in capsys.readouterr().err
    monkeypatch.delenv("STATE_DIRECTORY")  # by hand, outside a unit: said every time
    assert mirrors_main(settings, args) == 0 and "no mirrors configured" in capsys.readouterr().err
