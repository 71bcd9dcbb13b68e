"""Mirror job against the real Postgres and a local SparkSession: one verdict per mirrored topic."""

from __future__ import annotations

from typing import Any

import psycopg2  # type: ignore[import-untyped]
import pytest

from lagd.config import MirrorSettings
from lagd.jobs.mirrors import run_mirrors, target_topic

T0 = 1_800_000_000_000  # window start; the window is [T0, T0+600 s), ten 60 s buckets
S = 1000
NOW = T0 + 600 * S
STEP = 500  # messages appended per partition per 30 s sample on the source


def _samples(cluster: str, topic: str, per_step: list[int], offset_s: int = 0) -> list[tuple[Any, ...]]:
    """log_end_history rows for 2 partitions, one sample every 30 s from T0-60 s (+offset_s)."""
    rows = []
    for partition in (0, 1):
        end = 1000 * partition  # partitions start at different offsets: only deltas count
        for k, step in enumerate(per_step):
            end += step
            rows.append((T0 + (-60 + 30 * k + offset_s) * S, cluster, topic, partition, end))
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
        topics="^(healthy|stalls|lossy|unmirrored)$",
        rename="prefix",
        prefix="src.",
    )
    samples = 22  # T0-60 .. T0+570: two samples per bucket, two before the window
    rows = []
    for topic in ("healthy", "stalls", "lossy", "unmirrored", "skipped"):
        rows += _samples("src", topic, [STEP] * samples)
    # Healthy: the same counts, sampled 5 s later.
    rows += _samples("dst", "src.healthy", [STEP] * samples, offset_s=5)
    # Stalls: delivers until the sample at T0+275 (k=11, the last in bucket 4), then nothing.
    rows += _samples("dst", "src.stalls", [STEP] * 12 + [0] * (samples - 12), offset_s=5)
    # Lossy: 1 % of every step never arrives (495 of 500).
    rows += _samples("dst", "src.lossy", [STEP * 99 // 100] * samples, offset_s=5)
    _insert(database_url, rows)

    lines: list[str] = []
    got = run_mirrors(spark, database_url, {"dr": mirror}, lines.append, now_ms=NOW, partitions=2)
    verdicts = {v.topic: v.judgement for v in got}
    assert {t: j.verdict.value for t, j in verdicts.items()} == {
        "healthy": "OK",
        "stalls": "STALLED",
        "lossy": "INCOMPLETE",
        "unmirrored": "MISSING",
    }
    # Per topic and bucket the source appends 2 partitions x 2 samples x 500 = 2000: 20000 in the window.
    assert verdicts["healthy"].completeness == 1.0
    assert verdicts["healthy"].source_rate == pytest.approx(20000 / 600)
    # Stalls: target samples at T0+5 .. T0+275 carry 500 each (10 per partition) -> 10000 of 20000.
    assert verdicts["stalls"].completeness == pytest.approx(0.5)
    assert verdicts["lossy"].completeness == pytest.approx(0.99)  # 19800 / 20000
    assert lines == ["mirrors: dr (src -> dst): 4 topic(s): 1 INCOMPLETE, 1 MISSING, 1 OK, 1 STALLED"]

    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT topic, target_topic, verdict, evaluated_at FROM mirror_status ORDER BY topic")
            stored = cur.fetchall()
    finally:
        conn.close()
    assert stored == [
        ("healthy", "src.healthy", "OK", NOW),
        ("lossy", "src.lossy", "INCOMPLETE", NOW),
        ("stalls", "src.stalls", "STALLED", NOW),
        ("unmirrored", "src.unmirrored", "MISSING", NOW),
    ]


def test_target_topic_names() -> None:
    assert target_topic(MirrorSettings(rename="identity"), "orders") == "orders"
    assert target_topic(MirrorSettings(rename="prefix", prefix="east."), "orders") == "east.orders"
