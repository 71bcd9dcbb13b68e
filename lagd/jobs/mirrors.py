"""Mirror job: for each configured mirror, judge every source topic's copy on the target cluster.

Spark does the heavy part: per-partition log-end deltas of both clusters over the trailing
window, summed per topic and bucket. The per-topic series are small (topics x buckets), so
they are collected and judged by the pure rules in lagd.evaluate.mirrors, and the verdicts
are upserted into mirror_status (rows of topics no longer seen on the source are removed).

Buckets: the mirror's `window` is split into `buckets` equal buckets ending now; a delta
belongs to the bucket of its later sample, and samples of one bucket before the window
serve as predecessors. `mm1_group` is not used yet: verdicts come from log-end offsets only.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2  # type: ignore[import-untyped]
from psycopg2.extras import Json  # type: ignore[import-untyped]

from lagd import logs
from lagd.config import ConfigError, MirrorSettings, Settings, load
from lagd.evaluate.mirrors import MirrorJudgement, MirrorVerdict, judge_mirror
from lagd.jobs.spark import JobError, build_session, read_range
from lagd.jobs.trends import pg_dsn

log = logs.get(__name__)

BUCKETS = 10


@dataclass(frozen=True)
class TopicVerdict:
    """One row of mirror_status."""

    mirror: str
    topic: str
    target_topic: str
    judgement: MirrorJudgement


def target_topic(mirror: MirrorSettings, topic: str) -> str:
    """The name a source topic has on the target: the same, or with the MirrorMaker 2 prefix."""
    return mirror.prefix + topic if mirror.rename == "prefix" else topic


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def appended_counts(
    spark: Any,
    database_url: str,
    clusters: Sequence[str],
    start_ms: int,
    end_ms: int,
    bucket_ms: int,
    partitions: int,
) -> dict[tuple[str, str], dict[int, int]]:
    """(cluster, topic) -> {bucket index: messages appended}, index -1 = before the window (presence only)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    names = ", ".join("'" + c.replace("'", "''") + "'" for c in clusters)
    rows = read_range(
        spark,
        database_url,
        "log_end_history",
        ["ts", "cluster", "topic", "partition", "offset"],
        start_ms - bucket_ms,
        end_ms,
        partitions,
        where=f"cluster IN ({names})",
    )
    by_partition = Window.partitionBy("cluster", "topic", "partition").orderBy("ts", "offset")
    deltas = rows.withColumn(
        "appended", F.coalesce(F.greatest(F.col("offset") - F.lag("offset").over(by_partition), F.lit(0)), F.lit(0))
    ).withColumn(
        "bucket",
        F.when(F.col("ts") < start_ms, F.lit(-1)).otherwise(F.floor((F.col("ts") - start_ms) / bucket_ms)),
    )
    sums = deltas.groupBy("cluster", "topic", "bucket").agg(F.sum("appended").alias("appended")).collect()
    out: dict[tuple[str, str], dict[int, int]] = {}
    for r in sums:
        out.setdefault((r["cluster"], r["topic"]), {})[int(r["bucket"])] = int(r["appended"])
    return out


def judge_mirrors(
    mirror: MirrorSettings, counts: Mapping[tuple[str, str], Mapping[int, int]], buckets: int
) -> list[TopicVerdict]:
    """Verdicts for every source topic of one mirror that the topic selection picks."""
    pick = re.compile(mirror.topics)
    bucket_seconds = mirror.window / buckets
    out = []
    for cluster, topic in sorted(counts):
        if cluster != mirror.source or not pick.search(topic):
            continue
        if mirror.rename == "prefix" and mirror.source == mirror.target and topic.startswith(mirror.prefix):
            continue  # a copy on the same cluster, not a source topic
        src = counts[(cluster, topic)]
        target_name = target_topic(mirror, topic)
        tgt = counts.get((mirror.target, target_name))
        source_series = [src.get(i, 0) for i in range(buckets)]
        target_series = None if tgt is None else [tgt.get(i, 0) for i in range(buckets)]
        judgement = judge_mirror(source_series, target_series, bucket_seconds, mirror.allowed_loss)
        out.append(TopicVerdict(mirror.name, topic, target_name, judgement))
    return out


def _store(database_url: str, mirror: str, verdicts: Sequence[TopicVerdict], now_ms: int) -> None:
    conn = psycopg2.connect(pg_dsn(database_url))
    try:
        with conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO mirror_status (mirror, topic, target_topic, verdict, completeness, delay_seconds, "
                "source_rate, target_rate, evaluated_at, details) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (mirror, topic) DO UPDATE SET target_topic = EXCLUDED.target_topic, "
                "verdict = EXCLUDED.verdict, completeness = EXCLUDED.completeness, "
                "delay_seconds = EXCLUDED.delay_seconds, source_rate = EXCLUDED.source_rate, "
                "target_rate = EXCLUDED.target_rate, evaluated_at = EXCLUDED.evaluated_at, details = EXCLUDED.details",
                [
                    (
                        v.mirror,
                        v.topic,
                        v.target_topic,
                        v.judgement.verdict.value,
                        v.judgement.completeness,
                        v.judgement.delay_seconds,
                        v.judgement.source_rate,
                        v.judgement.target_rate,
                        now_ms,
                        Json(v.judgement.details),
                    )
                    for v in verdicts
                ],
            )
            cur.execute(
                "DELETE FROM mirror_status WHERE mirror = %s AND NOT (topic = ANY(%s))",
                (mirror, [v.topic for v in verdicts]),
            )
    finally:
        conn.close()


def run_mirrors(
    spark: Any,
    database_url: str,
    mirrors: Mapping[str, MirrorSettings],
    progress: Callable[[str], None] = _stderr,
    *,
    now_ms: int | None = None,
    buckets: int = BUCKETS,
    partitions: int = 8,
) -> list[TopicVerdict]:
    """Judge every mirror over its trailing window ending now, store and return the verdicts."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    verdicts: list[TopicVerdict] = []
    for name, mirror in sorted(mirrors.items()):
        window_ms = int(mirror.window * 1000)
        bucket_ms = max(1, window_ms // buckets)
        start = now - bucket_ms * buckets
        counts = appended_counts(
            spark, database_url, sorted({mirror.source, mirror.target}), start, now, bucket_ms, partitions
        )
        found = judge_mirrors(mirror, counts, buckets)
        _store(database_url, name, found, now)
        tally: dict[str, int] = {}
        for v in found:
            tally[v.judgement.verdict.value] = tally.get(v.judgement.verdict.value, 0) + 1
        summary = ", ".join(f"{n} {v}" for v, n in sorted(tally.items())) or "no source topics sampled"
        progress(f"mirrors: {name} ({mirror.source} -> {mirror.target}): {len(found)} topic(s): {summary}")
        bad = [v.topic for v in found if v.judgement.verdict is not MirrorVerdict.OK]
        log.info("mirror judged", mirror=name, topics=len(found), not_ok=bad[:20])
        verdicts.extend(found)
    return verdicts


def main(settings: Settings, args: argparse.Namespace) -> int:
    """`lagd jobs mirrors`: 0 when done (whatever the verdicts), 1 when the job cannot run."""
    if not settings.mirrors:
        print("lagd: no mirrors configured: add [mirrors.NAME] with source and target clusters", file=sys.stderr)
        return 0
    try:
        spark = build_session(
            master=settings.jobs.spark_master if args.master is None else args.master,
            app_name="lagd-mirrors",
            shuffle_partitions=max(2, settings.jobs.jdbc_partitions),
            jdbc_jar=settings.jobs.jdbc_jar,
            java_home=settings.jobs.java_home,
        )
    except JobError as exc:
        print(f"lagd: {exc}", file=sys.stderr)
        return 1
    try:
        from lagd.jobs.trends import parse_time

        run_mirrors(
            spark,
            settings.storage.database_url.reveal(),
            settings.mirrors,
            now_ms=parse_time(getattr(args, "end", None)),
            partitions=settings.jobs.jdbc_partitions,
        )
    except (JobError, psycopg2.Error) as exc:
        print(f"lagd: mirrors job failed: {exc}".splitlines()[0], file=sys.stderr)
        print("check storage.database-url and that `lagd db upgrade` has run", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def _entry(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry: the same arguments as `lagd jobs mirrors`."""
    parser = argparse.ArgumentParser(prog="mirrors.py", description="lagd mirrors job (spark-submit entry)")
    parser.add_argument("--config", "-c", default="/etc/lagd/lagd.toml")
    parser.add_argument("--from", dest="start", default=None, help="ignored: the window ends now")
    parser.add_argument("--to", dest="end", default=None, help="judge the window ending then (default now)")
    parser.add_argument("--master", default="", help="Spark master (default: the one spark-submit was given)")
    args = parser.parse_args(argv)
    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"lagd: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log.level, settings.log.format)
    return main(settings, args)


if __name__ == "__main__":
    raise SystemExit(_entry())
