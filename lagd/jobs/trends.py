"""Trends job: 1-minute and 1-hour rollups of lag, rates and time per verdict, from the history tables.

Definitions (per cluster, group, topic, partition and bucket; a row belongs to the bucket its
`ts` falls in; buckets are aligned to the epoch):
- lag_min / lag_mean / lag_max: over the commit rows' `lag` column; rows with a NULL lag are ignored.
- lag_last: the lag of the newest commit row (by ts, then offset) whose lag is not NULL.
- lag_seconds_max: for each commit row with lag > 0, the seconds from the first log-end sample
  whose offset reached the committed offset to the commit's ts (0 if that sample is newer
  than the commit; unknown, NULL, if no sample reached it); rows with lag 0 count 0, rows
  with a NULL lag are ignored; NULL when no row of the bucket is known. Log-end samples are
  read from one hour before the range, so beyond that it is a lower bound.
- consume_rate: sum of committed-offset increases (offset minus the previous commit's offset
  of the same group-partition, negative steps count 0) of the bucket's rows / bucket seconds.
- produce_rate: the same over log-end samples of the partition; NULL when the bucket has none.
- trend_status seconds: each status row holds from its ts until the group's next status row
  (or the end of the range, never past now); the status in force at the range start is the
  newest row before it.
The previous commit or sample is looked for up to one hour before the range.

The range is widened to whole hours so every bucket written is computed from all of its rows.
Each chunk is staged, then in one transaction its buckets (per step, [chunk start, chunk
end)) are deleted from trends and trend_status and the staged rows inserted: re-running a
range replaces it, never duplicates, and drops rows the new result no longer has (a status
row that arrived late moves a bucket's seconds to the new status). Without --from, the job
continues from its watermark minus jobs.trends-overlap; with --from/--to it backfills that
range.

Failures end with two lines on stderr, what failed and what to do next, and exit status 1;
the Python/Java trace is logged at debug level only.

On a Spark cluster: `spark-submit --master URL --jars /usr/share/java/postgresql.jar
lagd/jobs/trends.py --config lagd.toml [--from T --to T]` (lagd installed where the
executors' Python runs; the executors must reach Postgres).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg2  # type: ignore[import-untyped]

from lagd.core.config import Settings, sync_database_url
from lagd.core.times import epoch_ms
from lagd.jobs.spark import (
    JobError,
    read_range,
    run_job,
    say,
    submit_entry,
    write_table,
)
from lagd.runtime import logs

log = logs.get(__name__)

JOB = "trends"
STEPS = (60, 3600)
HOUR_MS = 3_600_000
LOOKBACK_MS = HOUR_MS
CHUNK_MS = 24 * HOUR_MS

_TREND_COLUMNS = [
    "step",
    "bucket",
    "cluster",
    "group_name",
    "topic",
    "partition",
    "lag_min",
    "lag_mean",
    "lag_max",
    "lag_last",
    "lag_seconds_max",
    "consume_rate",
    "produce_rate",
]
_STATUS_COLUMNS = ["step", "bucket", "cluster", "group_name", "status", "seconds"]


@dataclass(frozen=True)
class TrendsResult:
    """What one run did: the (hour-aligned) range, rows upserted, and the watermark after it."""

    start_ms: int
    end_ms: int
    trend_rows: int
    status_rows: int
    chunks: int
    watermark: int | None


def pg_dsn(database_url: str) -> str:
    """A libpq URL for psycopg2 from any of lagd's database URL spellings, with the daemon's
    connect timeout, so a database that accepts connections but never answers fails the job."""
    return sync_database_url(database_url).replace("postgresql+psycopg2://", "postgresql://", 1)


def _floor(ms: int, step_ms: int) -> int:
    return ms // step_ms * step_ms


def _ceil(ms: int, step_ms: int) -> int:
    return -(-ms // step_ms) * step_ms


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")


def parse_time(text: str | None) -> int | None:
    """Epoch milliseconds from epoch ms digits or an ISO 8601 time (lagd.core.times); None when not given."""
    if text is None or text == "":
        return None
    try:
        return epoch_ms(text)
    except ValueError:
        raise JobError(
            f"cannot read time {text!r}: use epoch milliseconds or ISO 8601 like 2026-11-22T08:00Z"
        ) from None


def _watermark(cur: Any) -> int | None:
    cur.execute("SELECT watermark FROM job_watermarks WHERE job = %s", (JOB,))
    row = cur.fetchone()
    return None if row is None else int(row[0])


def plan_range(
    start_ms: int | None,
    end_ms: int | None,
    watermark: int | None,
    earliest: int | None,
    overlap_s: float,
    now_ms: int,
    oldest: str = "the oldest commit history row",
) -> tuple[int, int] | None:
    """The hour-aligned [start, end) to compute, or None when there is nothing to do (`oldest`
    names where `earliest` comes from, for the error message)."""
    end = now_ms if end_ms is None else end_ms
    if start_ms is not None:
        check_range(start_ms, end_ms, now_ms)
        return _floor(start_ms, HOUR_MS), _ceil(end, HOUR_MS)
    if watermark is not None:
        start_ms, origin = watermark - int(overlap_s * 1000), "the last watermark minus jobs.trends-overlap"
    elif earliest is not None:
        start_ms, origin = earliest, oldest
    else:
        return None
    if end <= start_ms:
        what = f"--to ({_iso(end)})" if end_ms is not None else f"now ({_iso(end)})"
        raise JobError(
            f"nothing to compute: {what} is not after where the job continues from ({_iso(start_ms)}, {origin}): "
            "give --from as well to recompute an earlier range"
        )
    return _floor(start_ms, HOUR_MS), _ceil(end, HOUR_MS)


def check_range(start_ms: int | None, end_ms: int | None, now_ms: int) -> None:
    """A JobError unless the range ends after it starts (--to, or now when --to is left out, after --from)."""
    if start_ms is None:
        return
    if end_ms is not None and end_ms <= start_ms:
        raise JobError(
            f"empty range: --to ({_iso(end_ms)}) must be after --from ({_iso(start_ms)}): "
            "give a later --to, or leave --to out to run up to now"
        )
    if end_ms is None and now_ms <= start_ms:
        raise JobError(
            f"empty range: --from ({_iso(start_ms)}) is not before now ({_iso(now_ms)}): give an earlier --from"
        )


def _rollups(spark: Any, database_url: str, start: int, end: int, horizon: int, partitions: int) -> tuple[Any, Any]:
    """The trends and trend_status DataFrames for buckets in [start, end)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    steps = F.explode(F.array(*[F.lit(s) for s in STEPS])).alias("step")

    def bucket_of(col: Any) -> Any:
        step_ms = F.col("step").cast("long") * 1000
        return F.floor(col / step_ms) * step_ms

    commits = read_range(
        spark,
        database_url,
        "commit_history",
        ["ts", "cluster", "group_name", "topic", "partition", "offset", "lag"],
        start - LOOKBACK_MS,
        end,
        partitions,
    )
    log_ends = read_range(
        spark,
        database_url,
        "log_end_history",
        ["ts", "cluster", "topic", "partition", "offset"],
        start - LOOKBACK_MS,
        end,
        partitions,
    )
    key = ["cluster", "topic", "partition"]
    by_commit = Window.partitionBy("cluster", "group_name", "topic", "partition").orderBy("ts", "offset")
    commits = commits.withColumn(
        "consumed", F.coalesce(F.greatest(F.col("offset") - F.lag("offset").over(by_commit), F.lit(0)), F.lit(0))
    )
    by_le = Window.partitionBy(*key).orderBy("ts", "offset")
    log_ends = log_ends.withColumn(
        "produced", F.coalesce(F.greatest(F.col("offset") - F.lag("offset").over(by_le), F.lit(0)), F.lit(0))
    )

    # First time the log end reached each committed offset: in one pass per partition, rows by
    # offset descending (at equal offsets the sample first), a running min of sample times.
    marks = commits.select(
        *key,
        "offset",
        F.lit(0).alias("kind"),
        F.lit(None).cast("long").alias("le_ts"),
        "ts",
        "group_name",
        "lag",
        "consumed",
    ).unionByName(
        log_ends.select(
            *key,
            "offset",
            F.lit(1).alias("kind"),
            F.col("ts").alias("le_ts"),
            F.lit(None).cast("long").alias("ts"),
            F.lit(None).cast("string").alias("group_name"),
            F.lit(None).cast("long").alias("lag"),
            F.lit(None).cast("long").alias("consumed"),
        )
    )
    reached = (
        Window.partitionBy(*key)
        .orderBy(F.col("offset").desc(), F.col("kind").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    commits = (
        marks.withColumn("reach_ts", F.min("le_ts").over(reached))
        .where(F.col("kind") == 0)
        .withColumn(
            "lag_seconds",
            F.when(F.col("lag").isNull(), F.lit(None))
            .when(F.col("lag") <= 0, F.lit(0.0))
            .when(F.col("reach_ts").isNull(), F.lit(None))  # no log-end sample reached it: unknown
            .otherwise(F.greatest(F.col("ts") - F.col("reach_ts"), F.lit(0)) / 1000.0),
        )
        .where(F.col("ts") >= start)
    )

    trends = (
        commits.select("*", steps)
        .withColumn("bucket", bucket_of(F.col("ts")))
        .groupBy("step", "bucket", "cluster", "group_name", "topic", "partition")
        .agg(
            F.min("lag").alias("lag_min"),
            F.avg("lag").alias("lag_mean"),
            F.max("lag").alias("lag_max"),
            F.max(F.when(F.col("lag").isNotNull(), F.struct("ts", "offset", "lag"))).getField("lag").alias("lag_last"),
            F.max("lag_seconds").alias("lag_seconds_max"),
            F.sum("consumed").alias("consumed"),
        )
    )
    produced = (
        log_ends.where(F.col("ts") >= start)
        .select("*", steps)
        .withColumn("bucket", bucket_of(F.col("ts")))
        .groupBy("step", "bucket", *key)
        .agg(F.sum("produced").alias("produced"))
    )
    trends = (
        trends.join(produced, ["step", "bucket", *key], "left")
        .withColumn("consume_rate", F.col("consumed") / F.col("step"))
        .withColumn("produce_rate", F.col("produced") / F.col("step"))
        .select(*_TREND_COLUMNS)
    )

    status_rows = (
        f"(SELECT ts, cluster, group_name, status FROM status_history WHERE ts >= {start} AND ts < {horizon} "
        "UNION ALL SELECT ts, cluster, group_name, status FROM (SELECT DISTINCT ON (cluster, group_name) "
        f"ts, cluster, group_name, status FROM status_history WHERE ts < {start} "
        'ORDER BY cluster, group_name, ts DESC) AS "before") AS "s"'
    )
    from lagd.jobs.spark import jdbc_options

    url, props = jdbc_options(database_url)
    statuses = spark.read.jdbc(url, status_rows, properties=props)
    by_group = Window.partitionBy("cluster", "group_name").orderBy("ts")
    spans = (
        statuses.withColumn("s", F.greatest(F.col("ts"), F.lit(start)))
        .withColumn("e", F.least(F.coalesce(F.lead("ts").over(by_group), F.lit(horizon)), F.lit(horizon)))
        .where(F.col("e") > F.col("s"))
        .select("cluster", "group_name", "status", "s", "e", steps)
    )
    step_ms = F.col("step").cast("long") * 1000
    trend_status = (
        spans.withColumn("bucket", F.explode(F.sequence(bucket_of(F.col("s")), bucket_of(F.col("e") - 1), step_ms)))
        .withColumn(
            "seconds",
            (F.least(F.col("e"), F.col("bucket") + step_ms) - F.greatest(F.col("s"), F.col("bucket"))) / 1000.0,
        )
        .groupBy("step", "bucket", "cluster", "group_name", "status")
        .agg(F.sum("seconds").alias("seconds"))
        .select(*_STATUS_COLUMNS)
    )
    return trends, trend_status


def _upsert_sql(table: str, staging: str, columns: Sequence[str], key: Sequence[str]) -> str:
    cols = ", ".join(f'"{c}"' for c in columns)
    keys = ", ".join(f'"{c}"' for c in key)
    updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in columns if c not in key)
    return f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {staging} ON CONFLICT ({keys}) DO UPDATE SET {updates}"


def _write_chunk(
    spark: Any, database_url: str, trends: Any, trend_status: Any, lo: int, hi: int, watermark: int
) -> tuple[int, int]:
    """Stage both DataFrames over JDBC, then in one transaction replace the buckets of [lo, hi)
    with them (delete, then insert) and advance the watermark."""
    tag = uuid.uuid4().hex[:10]
    stage_t, stage_s = f"lagd_stage_trends_{tag}", f"lagd_stage_trend_status_{tag}"
    conn = psycopg2.connect(pg_dsn(database_url))
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"CREATE UNLOGGED TABLE {stage_t} (LIKE trends)")
            cur.execute(f"CREATE UNLOGGED TABLE {stage_s} (LIKE trend_status)")
        write_table(trends, database_url, stage_t)
        write_table(trend_status, database_url, stage_s)
        with conn, conn.cursor() as cur:
            for table in ("trends", "trend_status"):
                for step in STEPS:  # every bucket of [lo, hi) was recomputed, at both steps
                    cur.execute(f"DELETE FROM {table} WHERE step = %s AND bucket >= %s AND bucket < %s", (step, lo, hi))
            cur.execute(_upsert_sql("trends", stage_t, _TREND_COLUMNS, _TREND_COLUMNS[:6]))
            n_trends = cur.rowcount
            cur.execute(_upsert_sql("trend_status", stage_s, _STATUS_COLUMNS, _STATUS_COLUMNS[:5]))
            n_status = cur.rowcount
            cur.execute(
                "INSERT INTO job_watermarks (job, watermark, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (job) DO UPDATE SET watermark = GREATEST(job_watermarks.watermark, EXCLUDED.watermark), "
                "updated_at = EXCLUDED.updated_at",
                (JOB, watermark, int(time.time() * 1000)),
            )
        return n_trends, n_status
    finally:
        with conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {stage_t}, {stage_s}")
        conn.close()


def run_trends(
    spark: Any,
    database_url: str,
    start_ms: int | None = None,
    end_ms: int | None = None,
    progress: Callable[[str], None] = say,
    *,
    partitions: int = 8,
    overlap_s: float = 300.0,
    now_ms: int | None = None,
    chunk_ms: int = CHUNK_MS,
) -> TrendsResult:
    """Compute and upsert the rollups for a range (default: from the watermark minus the overlap to now)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    conn = psycopg2.connect(pg_dsn(database_url))
    try:
        with conn, conn.cursor() as cur:
            mark = _watermark(cur)
            earliest = None
            if start_ms is None and mark is None:
                cur.execute("SELECT min(ts) FROM commit_history")
                row = cur.fetchone()
                earliest = None if row is None or row[0] is None else int(row[0])
    finally:
        conn.close()
    planned = plan_range(start_ms, end_ms, mark, earliest, overlap_s, now)
    if planned is None:
        progress("trends: no history yet and no watermark; nothing to do")
        return TrendsResult(0, 0, 0, 0, 0, mark)
    start, end = planned
    chunk = max(HOUR_MS, _floor(chunk_ms, HOUR_MS))
    bounds = list(range(start, end, chunk))
    progress(f"trends: {_iso(start)} .. {_iso(end)} ({(end - start) // HOUR_MS} h, {len(bounds)} chunk(s))")
    total_t = total_s = 0
    watermark = mark
    for i, lo in enumerate(bounds, 1):
        hi = min(lo + chunk, end)
        horizon = min(hi, now)
        trends, trend_status = _rollups(spark, database_url, lo, hi, horizon, partitions)
        wm = min(hi, now)
        n_t, n_s = _write_chunk(spark, database_url, trends, trend_status, lo, hi, wm)
        watermark = wm if watermark is None else max(watermark, wm)
        total_t += n_t
        total_s += n_s
        minutes = (hi - lo) // 60_000
        progress(
            f"trends: {_iso(lo)} .. {_iso(hi)} done ({i}/{len(bounds)}): {minutes} minute and "
            f"{minutes // 60} hour buckets, {n_t} trend rows, {n_s} status rows"
        )
    log.info("trends done", start=start, end=end, trend_rows=total_t, status_rows=total_s)
    return TrendsResult(start, end, total_t, total_s, len(bounds), watermark)


def main(settings: Settings, args: argparse.Namespace) -> int:
    """`lagd jobs trends`: 0 when done, 1 with what failed and what to do next when the job cannot run."""

    def check() -> tuple[int | None, int | None]:
        start, end = parse_time(args.start), parse_time(args.end)
        check_range(start, end, int(time.time() * 1000))
        return start, end

    def run(spark: Any, range_: tuple[int | None, int | None]) -> None:
        run_trends(
            spark,
            settings.storage.database_url.reveal(),
            *range_,
            partitions=settings.jobs.jdbc_partitions,
            overlap_s=settings.jobs.trends_overlap,
        )

    return run_job(settings, "trends", args.master, check, run)


if __name__ == "__main__":
    raise SystemExit(
        submit_entry("trends", main, None, "backfill from then (ISO time or epoch ms)", "up to then (default now)")
    )
