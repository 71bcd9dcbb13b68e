"""Mirror job: for each configured mirror, judge every source topic's copy on the target cluster.

Spark does the heavy part: per-partition log-end deltas of both clusters over the trailing
window, summed per topic and bucket. The per-topic series are small (topics x buckets), so
they are collected and judged by the pure rules in lagd.evaluate.mirrors, and the verdicts
are upserted into mirror_status (rows of topics no longer seen on the source are removed).

Buckets: the mirror's `window` is split into `buckets` equal buckets ending now, and
`history` more buckets before it are read so that a replication delay up to that long can
be measured (the rules look back into them, they are not judged). A delta belongs to the
bucket of its later sample; samples of one bucket before the series serve as predecessors.

Anchor: the backlog the rules start from is the source's log-end total minus the target's
at the series start (per topic, summed over partitions: each partition's first sampled
offset plus its deltas up to the series start). That assumes the target's offsets count
the source's messages from the same origin (each partition copied from its first offset,
as MirrorMaker 2 or 1 do for a topic mirrored since it was created). Where that is plainly
not so (the target ahead, or further behind than the history reaches, as after the source's
log was trimmed before mirroring started) the rules assume the mirror was caught up where it
came closest to the source, and the delay is a lower bound (details "anchor": "caught-up").
Verdicts come from log-end offsets only, so they hold for any replicator (MirrorMaker 1 or 2,
Replicator, uReplicator); a MirrorMaker 1 consumer group is judged as every group of the
source cluster is, by the daemon.

`--from T` (with `--to`, default now) judges every mirror over [T, --to) instead of its
trailing `window`: what a mirror looked like during a past range.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2  # type: ignore[import-untyped]
from psycopg2.extras import Json  # type: ignore[import-untyped]

from lagd.core.config import MirrorSettings, Settings
from lagd.evaluate.mirrors import MirrorJudgement, MirrorVerdict, judge_young_mirror
from lagd.jobs.spark import read_range, run_job, say, submit_entry
from lagd.jobs.trends import check_range, parse_time, pg_dsn
from lagd.runtime import logs

log = logs.get(__name__)

BUCKETS = 10
HISTORY = 10  # buckets read before the window: delays up to one window are measured


@dataclass(frozen=True)
class TopicCounts:
    """One topic on one cluster: messages appended per bucket, and its log-end total before any."""

    appended: dict[int, int]  # bucket index -> messages; -1 = the bucket before the series
    base: int  # sum over partitions of each partition's first sampled offset
    first_bucket: int = -1  # the bucket of the topic's first sample read (-1: before the series)

    @property
    def start_level(self) -> int:
        """The topic's log-end total (over partitions) at the series start."""
        return self.base + self.appended.get(-1, 0)


@dataclass(frozen=True)
class TopicVerdict:
    """One row of mirror_status."""

    mirror: str
    topic: str
    target_topic: str
    judgement: MirrorJudgement


def appended_counts(
    spark: Any,
    database_url: str,
    clusters: Sequence[str],
    start_ms: int,
    end_ms: int,
    bucket_ms: int,
    partitions: int,
) -> dict[tuple[str, str], TopicCounts]:
    """(cluster, topic) -> its counts from `start_ms` (the series start) to `end_ms`, read from one bucket before."""
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
    deltas = (
        rows.withColumn(
            "appended",
            F.coalesce(F.greatest(F.col("offset") - F.lag("offset").over(by_partition), F.lit(0)), F.lit(0)),
        )
        .withColumn("first", F.when(F.row_number().over(by_partition) == 1, F.col("offset")).otherwise(F.lit(0)))
        .withColumn(
            "bucket",
            F.when(F.col("ts") < start_ms, F.lit(-1)).otherwise(F.floor((F.col("ts") - start_ms) / bucket_ms)),
        )
    )
    sums = (
        deltas.groupBy("cluster", "topic", "bucket")
        .agg(F.sum("appended").alias("appended"), F.sum("first").alias("first"))
        .collect()
    )
    appended: dict[tuple[str, str], dict[int, int]] = {}
    base: dict[tuple[str, str], int] = {}
    for r in sums:
        key = (r["cluster"], r["topic"])
        appended.setdefault(key, {})[int(r["bucket"])] = int(r["appended"])
        base[key] = base.get(key, 0) + int(r["first"])
    # every bucket with a row holds a sample: the first of them is where the topic's data begins
    return {key: TopicCounts(counts, base[key], min(counts)) for key, counts in appended.items()}


def source_topics(mirror: MirrorSettings, counts: Mapping[tuple[str, str], TopicCounts]) -> list[str]:
    """The mirror's source topics among the sampled ones, in name order."""
    return [topic for cluster, topic in sorted(counts) if mirror.covers(cluster, topic)]


def judge_mirrors(
    mirror: MirrorSettings, counts: Mapping[tuple[str, str], TopicCounts], buckets: int, history: int = 0
) -> list[TopicVerdict]:
    """Verdicts for every source topic of one mirror that the topic selection picks.

    `counts` cover `history` buckets before the window and then the window's `buckets`.
    """
    bucket_seconds = mirror.window / buckets
    series = range(history + buckets)
    out = []
    for topic in source_topics(mirror, counts):
        src = counts[(mirror.source, topic)]
        target_name = mirror.target_topic(topic)
        tgt = counts.get((mirror.target, target_name))
        source_series = [src.appended.get(i, 0) for i in series]
        target_series = None if tgt is None else [tgt.appended.get(i, 0) for i in series]
        backlog = None if tgt is None else src.start_level - tgt.start_level
        # Buckets before both sides' first samples are not "nothing copied": leave them out.
        uncovered = max(src.first_bucket, -1 if tgt is None else tgt.first_bucket) + 1
        judgement = judge_young_mirror(
            source_series,
            target_series,
            bucket_seconds,
            mirror.allowed_loss,
            history=history,
            backlog=backlog,
            uncovered=uncovered,
        )
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
    progress: Callable[[str], None] = say,
    *,
    now_ms: int | None = None,
    buckets: int = BUCKETS,
    history: int = HISTORY,
    partitions: int = 8,
    window_ms: int | None = None,
) -> list[TopicVerdict]:
    """Judge every mirror over its trailing window ending now, store and return the verdicts.

    `window_ms` (from --from) replaces every mirror's `window`, so a past range can be judged.
    `history` buckets before the window are read as well: the longest delay measured.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    verdicts: list[TopicVerdict] = []
    for name, configured in sorted(mirrors.items()):
        mirror = configured if window_ms is None else dataclasses.replace(configured, window=window_ms / 1000)
        window_ms_of = int(mirror.window * 1000)
        bucket_ms = max(1, window_ms_of // buckets)
        start = now - bucket_ms * (history + buckets)
        counts = appended_counts(
            spark, database_url, sorted({mirror.source, mirror.target}), start, now, bucket_ms, partitions
        )
        found = judge_mirrors(mirror, counts, buckets, history)
        _store(database_url, name, found, now)
        tally: dict[str, int] = {}
        for v in found:
            tally[v.judgement.verdict.value] = tally.get(v.judgement.verdict.value, 0) + 1
        summary = ", ".join(f"{n} {v}" for v, n in sorted(tally.items())) or "no source topics sampled"
        progress(f"mirrors: {name} ({mirror.source} -> {mirror.target}): {len(found)} topic(s): {summary}")
        bad = [v.topic for v in found if v.judgement.verdict not in (MirrorVerdict.OK, MirrorVerdict.NOT_ENOUGH_DATA)]
        log.info("mirror judged", mirror=name, topics=len(found), not_ok=bad[:20])
        verdicts.extend(found)
    return verdicts


def judged_range(start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """(end of the judged window or None for now, its length from --from or None for each mirror's window).

    A JobError, naming what to change, when a time cannot be read or --from is not before --to (or now).
    """
    start_ms, end_ms = parse_time(start), parse_time(end)
    if start_ms is None:
        return end_ms, None
    now = int(time.time() * 1000)
    check_range(start_ms, end_ms, now)
    until = now if end_ms is None else end_ms
    return until, until - start_ms


# A timer starts the job every two minutes whether mirrors are configured or not: the "none"
# line is said once (noted in the unit's state directory), not every run.
NO_MIRRORS_SAID = "mirrors-none-said"


def _said(name: str) -> Path | None:
    """Where a said-once note lives: systemd's StateDirectory; None outside a unit (always say)."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) / name if state else None


def say_once(name: str) -> bool:
    """True the first time (and each time outside a unit with a state directory); noted after."""
    note = _said(name)
    if note is None:
        return True
    if note.exists():
        return False
    with contextlib.suppress(OSError):
        note.touch()
    return True


def forget_said(name: str) -> None:
    """The condition is gone (mirrors were added): say it again should it come back."""
    note = _said(name)
    if note is not None:
        with contextlib.suppress(OSError):
            note.unlink(missing_ok=True)


def without_mirrors(settings: Settings, said: str, nothing: str, timer: str) -> bool:
    """True, having said so, when no mirror is configured: under systemd (a timer's runs) said once,
    until mirrors are added and gone again; a run by hand always says it."""
    if settings.mirrors:
        forget_said(said)
        return False
    if say_once(said):
        say(
            f"lagd: no mirrors configured, {nothing}: add [mirrors.NAME] with source and target clusters, or "
            f"stop the timer (systemctl disable --now {timer}); under systemd this is said once, later runs exit quietly"
        )
    return True


def main(settings: Settings, args: argparse.Namespace) -> int:
    """`lagd jobs mirrors`: 0 when done (whatever the verdicts), 1 with what failed and what to do next."""
    if without_mirrors(settings, NO_MIRRORS_SAID, "nothing to judge", "lagd-mirrors.timer"):
        return 0

    def run(spark: Any, range_: tuple[int | None, int | None]) -> None:
        now_ms, window_ms = range_
        run_mirrors(
            spark,
            settings.storage.database_url.reveal(),
            settings.mirrors,
            now_ms=now_ms,
            partitions=settings.jobs.jdbc_partitions,
            window_ms=window_ms,
        )

    def check() -> tuple[int | None, int | None]:
        return judged_range(getattr(args, "start", None), getattr(args, "end", None))

    return run_job(settings, "mirrors", args.master, check, run)


if __name__ == "__main__":
    raise SystemExit(
        submit_entry(
            "mirrors",
            main,
            None,
            "judge [--from, --to) instead of each window",
            "judge the window ending then (default now)",
        )
    )
