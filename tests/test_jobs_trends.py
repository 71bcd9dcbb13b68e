"""Trends job against the real Postgres and a local SparkSession: known history in, exact rollups out."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import psycopg2  # type: ignore[import-untyped]
import pytest
from pyspark.errors import PySparkException

from lagd.core.config import parse
from lagd.jobs.spark import JobError, explain, find_java, find_jdbc_jar, jdbc_options
from lagd.jobs.trends import main as trends_main
from lagd.jobs.trends import parse_time, plan_range, run_trends
from tests.postgres import query

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z, on an hour boundary
S = 1000  # one second in ms


def _insert(url: str, table: str, rows: list[tuple[Any, ...]]) -> None:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(rows[0]))
            cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    finally:
        conn.close()


@pytest.fixture
def history(database_url: str) -> Iterator[str]:
    """A database with the history partitions in place and a small hand-written history."""
    # The history tables are range-partitioned; a DEFAULT partition holds any test time.
    query(database_url, "CREATE TABLE commit_history_default PARTITION OF commit_history DEFAULT")
    query(database_url, "CREATE TABLE log_end_history_default PARTITION OF log_end_history DEFAULT")
    # commit_history: (ts, cluster, group, topic, partition, offset, lag, observed)
    _insert(
        database_url,
        "commit_history",
        [
            (T0 - 20 * S, "c", "g", "t", 0, 90, 5, T0 - 20 * S),  # before the range: only a predecessor
            (T0 + 10 * S, "c", "g", "t", 0, 100, 20, T0 + 10 * S),
            (T0 + 30 * S, "c", "g", "t", 0, 130, 10, T0 + 30 * S),
            (T0 + 50 * S, "c", "g", "t", 0, 150, None, T0 + 50 * S),
            (T0 + 70 * S, "c", "g", "t", 0, 160, 40, T0 + 70 * S),
            (T0 + 130 * S, "c", "g", "t", 0, 220, 0, T0 + 130 * S),
            (T0 + 90 * S, "c", "g2", "t", 0, 150, 70, T0 + 90 * S),
        ],
    )
    # log_end_history: (ts, cluster, topic, partition, offset)
    _insert(
        database_url,
        "log_end_history",
        [
            (T0 - 30 * S, "c", "t", 0, 95),
            (T0, "c", "t", 0, 120),
            (T0 + 20 * S, "c", "t", 0, 140),
            (T0 + 40 * S, "c", "t", 0, 160),
            (T0 + 60 * S, "c", "t", 0, 200),
            (T0 + 120 * S, "c", "t", 0, 220),
        ],
    )
    # status_history: (ts, cluster, group, status)
    _insert(
        database_url,
        "status_history",
        [(T0 - 600 * S, "c", "g", "OK"), (T0 + 90 * S, "c", "g", "WARN"), (T0 + 150 * S, "c", "g", "OK")],
    )
    yield database_url


# Per commit row of group g (predecessor offsets give `consumed`; lag seconds = commit ts minus the
# first log-end sample whose offset >= the committed offset):
#   T0+10  off 100 lag 20   consumed 100-90=10   first sample >=100: T0 (120)    -> 10 s
#   T0+30  off 130 lag 10   consumed 130-100=30  first sample >=130: T0+20 (140) -> 10 s
#   T0+50  off 150 lag NULL consumed 150-130=20  (lag ignored)
#   T0+70  off 160 lag 40   consumed 160-150=10  first sample >=160: T0+40 (160) -> 30 s
#   T0+130 off 220 lag 0    consumed 220-160=60  lag 0 -> 0 s
# group g2: T0+90 off 150 lag 70, no predecessor -> consumed 0; first sample >=150: T0+40 -> 50 s
# log-end increases: T0: 120-95=25, T0+20: 20, T0+40: 20, T0+60: 40, T0+120: 20
EXPECTED_TRENDS = {
    # (step, bucket, group): (lag_min, lag_mean, lag_max, lag_last, lag_s_max, consume_rate, produce_rate)
    # minute T0: lags 20, 10 (NULL ignored): mean 30/2; last non-NULL is 10; consumed 10+30+20=60;
    # produced 25+20+20=65
    (60, T0, "g"): (10, 15.0, 20, 10, 10.0, 60 / 60, 65 / 60),
    # minute T0+60: lag 40; consumed 10; produced 40
    (60, T0 + 60 * S, "g"): (40, 40.0, 40, 40, 30.0, 10 / 60, 40 / 60),
    # minute T0+120: lag 0; consumed 60; produced 20
    (60, T0 + 120 * S, "g"): (0, 0.0, 0, 0, 0.0, 60 / 60, 20 / 60),
    # hour T0: lags 20, 10, 40, 0 -> mean 70/4; consumed 10+30+20+10+60=130; produced 25+20+20+40+20=125
    (3600, T0, "g"): (0, 17.5, 40, 0, 30.0, 130 / 3600, 125 / 3600),
    (60, T0 + 60 * S, "g2"): (70, 70.0, 70, 70, 50.0, 0.0, 40 / 60),
    (3600, T0, "g2"): (70, 70.0, 70, 70, 50.0, 0.0, 125 / 3600),
}
# Statuses of group g with now = T0+180: OK [T0, T0+90) (in force since T0-600), WARN [T0+90, T0+150),
# OK [T0+150, T0+180).
EXPECTED_STATUS = {
    (60, T0, "OK"): 60.0,
    (60, T0 + 60 * S, "OK"): 30.0,  # T0+60 .. T0+90
    (60, T0 + 60 * S, "WARN"): 30.0,  # T0+90 .. T0+120
    (60, T0 + 120 * S, "WARN"): 30.0,  # T0+120 .. T0+150
    (60, T0 + 120 * S, "OK"): 30.0,  # T0+150 .. T0+180
    (3600, T0, "OK"): 120.0,  # 90 + 30
    (3600, T0, "WARN"): 60.0,
}


def _trends(url: str) -> dict[tuple[int, int, str], tuple[Any, ...]]:
    rows = query(
        url,
        "SELECT step, bucket, group_name, lag_min, lag_mean, lag_max, lag_last, lag_seconds_max, consume_rate, "
        "produce_rate, cluster, topic, partition FROM trends",
    )
    assert {(r[10], r[11], r[12]) for r in rows} <= {("c", "t", 0)}
    return {(r[0], r[1], r[2]): tuple(r[3:10]) for r in rows}


def _status(url: str) -> dict[tuple[int, int, str], float]:
    rows = query(url, "SELECT step, bucket, status, seconds FROM trend_status WHERE cluster = 'c' AND group_name = 'g'")
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def _watermark(url: str) -> int:
    return int(query(url, "SELECT watermark FROM job_watermarks WHERE job = 'trends'")[0][0])


def _quiet(line: str) -> None:
    pass


def _same(got: dict[Any, Any], expected: dict[Any, Any]) -> None:
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


def test_known_history_gives_exact_rollups_and_rerun_changes_nothing(spark: Any, history: str) -> None:
    lines: list[str] = []
    result = run_trends(spark, history, T0, T0 + 3600 * S, progress=lines.append, partitions=2, now_ms=T0 + 180 * S)
    assert (result.start_ms, result.end_ms, result.trend_rows, result.status_rows) == (T0, T0 + 3600 * S, 6, 7)
    _same(_trends(history), EXPECTED_TRENDS)
    _same(_status(history), EXPECTED_STATUS)
    assert _watermark(history) == T0 + 180 * S
    assert any("done (1/1)" in line for line in lines)

    # A range inside the hour is widened to the whole hour: the same buckets, the same values.
    again = run_trends(spark, history, T0 + 1800 * S, T0 + 2400 * S, progress=_quiet, partitions=3, now_ms=T0 + 180 * S)
    assert (again.start_ms, again.end_ms) == (T0, T0 + 3600 * S)
    assert query(history, "SELECT count(*) FROM trends")[0][0] == 6
    assert query(history, "SELECT count(*) FROM trend_status")[0][0] == 7
    _same(_trends(history), EXPECTED_TRENDS)
    _same(_status(history), EXPECTED_STATUS)
    # No staging table is left behind.
    assert query(history, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'lagd_stage_%'")[0][0] == 0


def test_continues_from_the_watermark(spark: Any, history: str) -> None:
    run_trends(spark, history, T0, T0 + 3600 * S, progress=_quiet, partitions=2, now_ms=T0 + 180 * S)
    _insert(history, "commit_history", [(T0 + 3700 * S, "c", "g", "t", 0, 300, 5, T0 + 3700 * S)])
    _insert(history, "log_end_history", [(T0 + 3690 * S, "c", "t", 0, 310)])

    # Watermark T0+180 minus no overlap -> from the hour T0 to now (T0+3800) -> [T0, T0+2h).
    result = run_trends(spark, history, None, None, progress=_quiet, partitions=2, overlap_s=0.0, now_ms=T0 + 3800 * S)
    assert (result.start_ms, result.end_ms, result.watermark) == (T0, T0 + 7200 * S, T0 + 3800 * S)
    assert _watermark(history) == T0 + 3800 * S
    got = _trends(history)
    # T0+3700 off 300 lag 5: consumed 300-220=80; first sample >=300: T0+3690 (310) -> 10 s;
    # produced 310-220=90, in the same minute [T0+3660, T0+3720).
    assert got[(60, T0 + 3660 * S, "g")] == pytest.approx((5, 5.0, 5, 5, 10.0, 80 / 60, 90 / 60))
    assert got[(3600, T0 + 3600 * S, "g")] == pytest.approx((5, 5.0, 5, 5, 10.0, 80 / 3600, 90 / 3600))
    _same({k: v for k, v in got.items() if k[1] < T0 + 3600 * S}, EXPECTED_TRENDS)
    status = _status(history)
    # OK from T0+150 now lasts to T0+3800: hour T0 has OK 90 + (3600-150) = 3540 s, hour T0+1h 200 s.
    assert status[(3600, T0, "OK")] == pytest.approx(3540.0)
    assert status[(3600, T0, "WARN")] == pytest.approx(60.0)
    assert status[(3600, T0 + 3600 * S, "OK")] == pytest.approx(200.0)
    assert status[(60, T0 + 3780 * S, "OK")] == pytest.approx(20.0)


def test_rerun_after_a_late_status_row_replaces_the_buckets(spark: Any, history: str) -> None:
    run_trends(spark, history, T0, T0 + 3600 * S, progress=_quiet, partitions=2, now_ms=T0 + 180 * S)
    assert _status(history)[(60, T0 + 60 * S, "OK")] == pytest.approx(30.0)
    # A status row that arrives late: ERR from T0+60 until the WARN at T0+90.
    _insert(history, "status_history", [(T0 + 60 * S, "c", "g", "ERR")])
    run_trends(spark, history, T0, T0 + 3600 * S, progress=_quiet, partitions=2, now_ms=T0 + 180 * S)
    status = _status(history)
    # Minute T0+60 is now ERR 30 s (T0+60 .. T0+90) and WARN 30 s: the OK row is gone, not left at 30 s.
    minute = {k[2]: v for k, v in status.items() if k[:2] == (60, T0 + 60 * S)}
    assert minute == pytest.approx({"ERR": 30.0, "WARN": 30.0})
    assert sum(minute.values()) == pytest.approx(60.0)
    # The hour: OK [T0, T0+60) and [T0+150, T0+180) = 90 s, ERR 30 s, WARN 60 s: 180 s up to now.
    hour = {k[2]: v for k, v in status.items() if k[:2] == (3600, T0)}
    assert hour == pytest.approx({"OK": 90.0, "ERR": 30.0, "WARN": 60.0})
    # Untouched buckets keep their values.
    assert status[(60, T0, "OK")] == pytest.approx(60.0)
    assert status[(60, T0 + 120 * S, "WARN")] == pytest.approx(30.0)


def test_lag_seconds_without_a_log_end_sample_is_null(spark: Any, history: str) -> None:
    # Partition 1 of t has commits but no log-end sample at all: how long the lag has waited is unknown.
    _insert(
        history,
        "commit_history",
        [
            (T0 + 10 * S, "c", "g3", "t", 1, 50, 7, T0 + 10 * S),
            (T0 + 70 * S, "c", "g3", "t", 1, 60, 0, T0 + 70 * S),
        ],
    )
    run_trends(spark, history, T0, T0 + 3600 * S, progress=_quiet, partitions=2, now_ms=T0 + 180 * S)
    rows = query(
        history,
        "SELECT step, bucket, lag_max, lag_seconds_max, produce_rate FROM trends "
        "WHERE group_name = 'g3' ORDER BY step, bucket",
    )
    assert rows == [
        (60, T0, 7, None, None),  # lag 7, no sample reached offset 50: NULL, not 0.0
        (60, T0 + 60 * S, 0, 0.0, None),  # lag 0 counts 0 s
        (3600, T0, 7, 0.0, None),  # max over the known rows only (the unknown one is left out)
    ]
    # The other partition's figures are as before.
    got = {
        (r[0], r[1], r[2]): r[3]
        for r in query(history, "SELECT step, bucket, group_name, lag_seconds_max FROM trends WHERE partition = 0")
    }
    assert got == pytest.approx({k: v[4] for k, v in EXPECTED_TRENDS.items()})


class _KeepRunning:
    """The tests' SparkSession as `session_for` gives it to a job, whose stop() leaves it running."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)

    def stop(self) -> None:
        pass


def _settings(database_url: str) -> Any:
    raw = {"clusters": {"c": {"bootstrap-servers": ["127.0.0.1:9092"]}}, "storage": {"database-url": database_url}}
    return parse(raw, env={})


def test_empty_range_says_what_to_do_before_spark_starts(capsys: Any) -> None:
    args = argparse.Namespace(start="2027-01-15T09:00Z", end="2027-01-15T08:00Z", master=None)
    assert trends_main(_settings("postgresql://nobody@127.0.0.1:1/none"), args) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "lagd: trends job failed: empty range: --to (2027-01-15T08:00Z) must be after --from "
        "(2027-01-15T09:00Z): give a later --to, or leave --to out to run up to now"
    ]


def test_spark_error_is_two_lines_without_a_trace(spark: Any, database_url: str, capsys: Any, monkeypatch: Any) -> None:
    # A database whose commit history table is missing: the JDBC read fails inside Spark (Py4JJavaError).
    query(database_url, "DROP TABLE commit_history")
    monkeypatch.setattr("lagd.jobs.spark.session_for", lambda *a, **kw: _KeepRunning(spark))
    args = argparse.Namespace(start=str(T0), end=str(T0 + 3600 * S), master=None)
    assert trends_main(_settings(database_url), args) == 1
    err = capsys.readouterr().err.splitlines()
    # The progress line, then what failed and what to do next; no trace.
    assert err == [
        "trends: 2027-01-15T08:00Z .. 2027-01-15T09:00Z (1 h, 1 chunk(s))",
        'lagd: trends job failed: PSQLException: relation "commit_history" does not exist',
        "lagd: the database lacks lagd's tables or columns: run `lagd db upgrade` with this configuration",
    ]


def test_errors_get_their_own_hints(spark: Any, postgres: Any) -> None:
    no_db = postgres.url.split("?")[0].rsplit("/", 1)[0] + "/lagd_no_such_database"
    with pytest.raises(psycopg2.OperationalError) as missing:
        psycopg2.connect(no_db)
    reason, hint = explain(missing.value)
    assert reason.startswith("OperationalError: connection to server ")
    assert reason.endswith('database "lagd_no_such_database" does not exist')
    assert hint == "create the database named in storage.database-url (createdb), then run `lagd db upgrade`"
    with pytest.raises(psycopg2.OperationalError) as refused:
        psycopg2.connect("postgresql://nobody@127.0.0.1:1/none", connect_timeout=5)
    reason, hint = explain(refused.value)
    assert reason.startswith("OperationalError: connection to server at")
    assert hint is not None and "PostgreSQL is running and reachable" in hint
    # The same through Spark's JDBC reader (reported by Spark as an AnalysisException).
    url, props = jdbc_options("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(PySparkException) as jdbc_refused:
        spark.read.jdbc(url, "commit_history", properties=props)
    reason, hint = explain(jdbc_refused.value)
    assert reason == "ConnectException: Connection refused"  # the deepest Java cause
    assert hint is not None and "PostgreSQL is running and reachable" in hint
    assert explain(JobError("cannot read time 'x': use epoch milliseconds")) == (
        "cannot read time 'x': use epoch milliseconds",
        None,
    )
    assert (
        explain(RuntimeError("boom"))[1] == 'Spark failed: run again with log.level = "debug" for the full Java trace'
    )


def test_plan_range_and_times() -> None:
    h = 3_600_000
    # No watermark: from the earliest history row, widened to whole hours.
    assert plan_range(None, None, None, T0 + 5, 300.0, T0 + h + 7) == (T0, T0 + 2 * h)
    # Watermark minus overlap.
    assert plan_range(None, T0 + h, T0 + 200_000, None, 300.0, T0 + 2 * h) == (T0 - h, T0 + h)
    assert plan_range(None, None, None, None, 300.0, T0) is None
    assert parse_time("2027-01-15T08:00Z") == T0
    assert parse_time(str(T0)) == T0
    assert parse_time(None) is None


def test_jdbc_options_from_database_urls() -> None:
    url, props = jdbc_options("postgresql+asyncpg://lagd:s%40cret@db.example:6543/lagd?sslmode=require")
    assert url == "jdbc:postgresql://db.example:6543/lagd"
    assert props == {"driver": "org.postgresql.Driver", "user": "lagd", "password": "s@cret", "sslmode": "require"}
    assert jdbc_options("postgresql://postgres@127.0.0.1/postgres")[0] == "jdbc:postgresql://127.0.0.1:5432/postgres"
    with pytest.raises(JobError, match="Unix socket"):
        jdbc_options("postgresql://postgres@/lagd?host=/tmp/pgsock")
    with pytest.raises(JobError, match="postgresql://"):
        jdbc_options("mysql://x@h/db")


def test_missing_java_or_driver_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(JobError, match="apt-get install libpostgresql-jdbc-java"):
        find_jdbc_jar(str(tmp_path / "postgresql.jar"))
    with pytest.raises(JobError, match=r"jobs\.java-home .*default-jre-headless"):
        find_java(str(tmp_path))


def test_cli_job_without_the_driver_exits_1_naming_it(tmp_path: Any, capsys: Any) -> None:
    raw = {
        "clusters": {"c": {"bootstrap-servers": ["127.0.0.1:9092"]}},
        "jobs": {"jdbc-jar": str(tmp_path / "missing.jar")},
    }
    settings = parse(raw, env={})
    args = argparse.Namespace(start=None, end=None, master=None)
    assert trends_main(settings, args) == 1
    assert "libpostgresql-jdbc-java" in capsys.readouterr().err


def test_job_connections_get_the_daemons_connect_timeout() -> None:
    """psycopg2 in the jobs must not hang on a database that accepts but never answers."""
    from lagd.jobs.trends import pg_dsn

    assert pg_dsn("postgresql+asyncpg://postgres@127.0.0.1:5432/db") == (
        "postgresql://postgres@127.0.0.1:5432/db?connect_timeout=5"
    )
    assert pg_dsn("postgres://u:p@h/db?sslmode=require") == "postgresql://u:p@h/db?sslmode=require&connect_timeout=5"
    assert pg_dsn("postgresql://h/db?connect_timeout=2") == "postgresql://h/db?connect_timeout=2"
