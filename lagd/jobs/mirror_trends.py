"""Mirror trends job: per mirror and source topic, records produced against records replicated
per minute and per hour, with completeness, backlog and replication delay (table mirror_trends).

Spark reads both clusters' log_end_history and sums each topic's per-partition log-end deltas per
minute (lagd.jobs.mirrors.appended_counts, as the mirror job does); the per-topic series are
small and turned into rows by the pure lagd.evaluate.mirror_trends. Hour rows sum their minutes
and take the backlog and delay of the hour's last minute. The log-end samples are read from
LOOKBACK_MS before each slice, so delays up to that long are measured (beyond it, a lower
bound flagged delay_beyond_history). A delta belongs to the minute of its later sample: a
stretch without samples puts its records in the minute of the next one.

completeness_cumulative is replicated / produced summed from the start of the bucket's UTC day
up to and including the bucket (buckets without a known target count left out), recomputed in
SQL over the stored rows of every day a slice touches, so it does not depend on how the days
were sliced.

The range is widened to whole hours and computed in slices of at most a day; each slice's
buckets are replaced in one transaction (delete, insert, recompute the day's cumulative
completeness, advance the watermark `mirror-trends`): re-running a range replaces its rows,
never duplicates them. Without --from the job continues from its watermark minus
jobs.trends-overlap; with --from/--to it backfills that range.

On a Spark cluster: `spark-submit --master URL --jars /usr/share/java/postgresql.jar
lagd/jobs/mirror_trends.py --config lagd.toml [--from T --to T]`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2  # type: ignore[import-untyped]
from psycopg2.extras import execute_values  # type: ignore[import-untyped]

from lagd.core.config import MirrorSettings, Settings
from lagd.evaluate.mirror_trends import Side, TrendRow, coarser_rows, trend_rows
from lagd.jobs.mirrors import TopicCounts, appended_counts, source_topics, without_mirrors
from lagd.jobs.spark import run_job, say, submit_entry
from lagd.jobs.trends import HOUR_MS, _ceil, _floor, _iso, check_range, parse_time, pg_dsn, plan_range
from lagd.runtime import logs

log = logs.get(__name__)

JOB = "mirror-trends"
MINUTE_MS = 60_000
DAY_MS = 24 * HOUR_MS
LOOKBACK_MS = HOUR_MS
CHUNK_MS = DAY_MS
STEPS = (60, 3600)
NO_MIRRORS_SAID = "mirror-trends-none-said"  # as lagd.jobs.mirrors: the timer's "none" line said once

COLUMNS = [
    "mirror",
    "topic",
    "step",
    "bucket",
    "target_topic",
    "produced",
    "replicated",
    "completeness",
    "backlog",
    "delay_seconds",
    "delay_beyond_history",
]


@dataclass(frozen=True)
class MirrorTrendsResult:
    """What one run did: the (hour-aligned) range, rows written, slices, and the watermark after it."""

    start_ms: int
    end_ms: int
    rows: int
    slices: int
    watermark: int | None


def _side(counts: TopicCounts, buckets: int) -> Side:
    return Side([counts.appended.get(i, 0) for i in range(buckets)], counts.start_level, counts.first_bucket)


def _row(mirror: str, topic: str, target: str, step: int, bucket: int, r: TrendRow) -> tuple[Any, ...]:
    """A mirror_trends row in COLUMNS order."""
    return (
        mirror,
        topic,
        step,
        bucket,
        target,
        r.produced,
        r.replicated,
        r.completeness,
        r.backlog,
        r.delay_seconds,
        r.delay_beyond_history,
    )


def mirror_rows(
    mirror: MirrorSettings,
    counts: Mapping[tuple[str, str], TopicCounts],
    series_start: int,
    buckets: int,
    lookback: int,
) -> list[tuple[Any, ...]]:
    """mirror_trends rows (COLUMNS order) of one mirror, minute and hour, from minute counts of a
    series of `buckets` minutes from `series_start` (ms), the first `lookback` of them only read."""
    out: list[tuple[Any, ...]] = []
    for topic in source_topics(mirror, counts):
        target_name = mirror.target_topic(topic)
        tgt = counts.get((mirror.target, target_name))
        rows = trend_rows(
            _side(counts[(mirror.source, topic)], buckets),
            None if tgt is None else _side(tgt, buckets),
            MINUTE_MS / 1000,
            lookback,
        )

        out.extend(_row(mirror.name, topic, target_name, 60, series_start + r.bucket * MINUTE_MS, r) for r in rows)
        per_hour = HOUR_MS // MINUTE_MS
        offset = (series_start % HOUR_MS) // MINUTE_MS  # minutes from the hour before the series start
        hour_zero = _floor(series_start, HOUR_MS)
        out.extend(
            _row(mirror.name, topic, target_name, 3600, hour_zero + index * HOUR_MS, r)
            for index, r in coarser_rows(rows, per_hour, offset)
        )
    return out


_CUMULATIVE_SQL = """
UPDATE mirror_trends AS m SET completeness_cumulative = c.cumulative FROM (
  SELECT mirror, topic, step, bucket,
    (sum(replicated) OVER w)::float8 / nullif(sum(CASE WHEN replicated IS NOT NULL THEN produced END) OVER w, 0)
      AS cumulative
  FROM mirror_trends WHERE bucket >= %(lo)s AND bucket < %(hi)s
  WINDOW w AS (PARTITION BY mirror, topic, step, bucket / 86400000 ORDER BY bucket)
) AS c
WHERE m.mirror = c.mirror AND m.topic = c.topic AND m.step = c.step AND m.bucket = c.bucket
"""


def _write_slice(
    database_url: str, rows: Sequence[tuple[Any, ...]], mirrors: Sequence[str], lo: int, hi: int, watermark: int
) -> None:
    """In one transaction: replace the buckets of [lo, hi) of these mirrors with `rows`, recompute
    the cumulative completeness of the days they fall in, and advance the watermark."""
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    conn = psycopg2.connect(pg_dsn(database_url))
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "DELETE FROM mirror_trends WHERE mirror = ANY(%s) AND bucket >= %s AND bucket < %s",
                (list(mirrors), lo, hi),
            )
            execute_values(cur, f"INSERT INTO mirror_trends ({cols}) VALUES %s", rows, page_size=1000)
            cur.execute(_CUMULATIVE_SQL, {"lo": _floor(lo, DAY_MS), "hi": _ceil(hi, DAY_MS)})
            cur.execute(
                "INSERT INTO job_watermarks (job, watermark, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (job) DO UPDATE SET watermark = GREATEST(job_watermarks.watermark, EXCLUDED.watermark), "
                "updated_at = EXCLUDED.updated_at",
                (JOB, watermark, int(time.time() * 1000)),
            )
    finally:
        conn.close()


def _start(database_url: str, start_ms: int | None) -> tuple[int | None, int | None]:
    """(the job's watermark, the oldest log-end sample when there is neither --from nor a watermark)."""
    conn = psycopg2.connect(pg_dsn(database_url))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT watermark FROM job_watermarks WHERE job = %s", (JOB,))
            found = cur.fetchone()
            mark = None if found is None else int(found[0])
            earliest = None
            if start_ms is None and mark is None:
                cur.execute("SELECT min(ts) FROM log_end_history")
                row = cur.fetchone()
                earliest = None if row is None or row[0] is None else int(row[0])
    finally:
        conn.close()
    return mark, earliest


def run_mirror_trends(
    spark: Any,
    database_url: str,
    mirrors: Mapping[str, MirrorSettings],
    start_ms: int | None = None,
    end_ms: int | None = None,
    progress: Callable[[str], None] = say,
    *,
    partitions: int = 8,
    overlap_s: float = 300.0,
    now_ms: int | None = None,
    chunk_ms: int = CHUNK_MS,
) -> MirrorTrendsResult:
    """Compute and store the trends of every mirror over a range (default: from the watermark minus the overlap)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    mark, earliest = _start(database_url, start_ms)
    planned = plan_range(start_ms, end_ms, mark, earliest, overlap_s, now, oldest="the oldest log-end history row")
    if planned is None:
        progress("mirror-trends: no log-end history yet and no watermark; nothing to do")
        return MirrorTrendsResult(0, 0, 0, 0, mark)
    start, end = planned
    chunk = max(HOUR_MS, _floor(chunk_ms, HOUR_MS))
    bounds = list(range(start, end, chunk))
    progress(
        f"mirror-trends: {_iso(start)} .. {_iso(end)} ({(end - start) // HOUR_MS} h, {len(bounds)} slice(s), "
        f"{len(mirrors)} mirror(s))"
    )
    total = 0
    watermark = mark
    lookback = LOOKBACK_MS // MINUTE_MS
    for i, lo in enumerate(bounds, 1):
        began = time.monotonic()
        hi = min(lo + chunk, end)
        horizon = min(hi, now)  # no buckets after now
        series_start = lo - LOOKBACK_MS
        buckets = (_ceil(horizon, MINUTE_MS) - series_start) // MINUTE_MS
        rows: list[tuple[Any, ...]] = []
        for mirror in (mirrors[name] for name in sorted(mirrors)):
            counts = appended_counts(
                spark,
                database_url,
                sorted({mirror.source, mirror.target}),
                series_start,
                horizon,
                MINUTE_MS,
                partitions,
            )
            rows.extend(mirror_rows(mirror, counts, series_start, buckets, lookback))
        wm = horizon
        _write_slice(database_url, rows, sorted(mirrors), lo, hi, wm)
        watermark = wm if watermark is None else max(watermark, wm)
        total += len(rows)
        minutes = sum(1 for r in rows if r[2] == 60)
        topics = len({(r[0], r[1]) for r in rows})
        progress(
            f"mirror-trends: {_iso(lo)} .. {_iso(hi)} done ({i}/{len(bounds)}): {len(rows)} rows "
            f"({minutes} minute and {len(rows) - minutes} hour buckets) of {topics} topic(s), "
            f"{time.monotonic() - began:.1f} s"
        )
    log.info("mirror trends done", start=start, end=end, rows=total)
    return MirrorTrendsResult(start, end, total, len(bounds), watermark)


def main(settings: Settings, args: argparse.Namespace) -> int:
    """`lagd jobs mirror-trends`: 0 when done, 1 with what failed and what to do next."""
    if without_mirrors(settings, NO_MIRRORS_SAID, "no replication trends to compute", "lagd-mirror-trends.timer"):
        return 0

    def check() -> tuple[int | None, int | None]:
        start, end = parse_time(getattr(args, "start", None)), parse_time(getattr(args, "end", None))
        check_range(start, end, int(time.time() * 1000))
        return start, end

    def run(spark: Any, range_: tuple[int | None, int | None]) -> None:
        run_mirror_trends(
            spark,
            settings.storage.database_url.reveal(),
            settings.mirrors,
            *range_,
            partitions=settings.jobs.jdbc_partitions,
            overlap_s=settings.jobs.trends_overlap,
        )

    return run_job(settings, "mirror-trends", args.master, check, run)


if __name__ == "__main__":
    raise SystemExit(
        submit_entry(
            "mirror-trends", main, None, "backfill from then (ISO time or epoch ms)", "up to then (default now)"
        )
    )
