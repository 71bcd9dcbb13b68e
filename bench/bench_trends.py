"""Trends job throughput on local[2]: history rows per second, wall time, and growth from small to large.

Run: `python -m bench.bench_trends [--sizes 1000000,10000000] [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]`.
For each size N a scratch database on the system Postgres is migrated and filled by
generate_series SQL: 1,000 group-partitions (10 groups x 10 topics x 10 partitions), one
commit every 10 s each (every 17th with a NULL lag), N rows in all; log-end samples of the 100
topic-partitions every 10 s (N/10 rows); one status change per group per hour. Then
`run_trends` computes the 1-minute and 1-hour rollups of the whole range on `local[2]`
(JDBC reads in 8 partitions) and upserts them. Reported: wall time of the job (not of the
data generation), commit rows per second, and the time ratio between consecutive sizes
against the size ratio (close to it = linear), after an untimed warm-up run so JVM start-up and JIT
do not inflate the first size. Target (issue 7): close to linear from 1M to 10M; judged as time
growth / row growth <= 1.3.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import uuid
from typing import Any

import psycopg2  # type: ignore[import-untyped]

from bench import target
from lagd.db.migrate import upgrade
from lagd.runtime import logs

T0 = 1_800_000_000_000
KEYS = 1000  # group-partitions
TOPIC_PARTITIONS = 100
EVERY_MS = 10_000


def _admin(url: str, sql: str) -> None:
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _db_url(admin_url: str, name: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + name


def fill(url: str, rows: int) -> tuple[int, int]:
    """Generate `rows` commit rows (+ rows/10 log-end samples); returns (start_ms, end_ms) of the history."""
    per_key = max(1, rows // KEYS)
    end = T0 + per_key * EVERY_MS
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET synchronous_commit = off")
            cur.execute("CREATE TABLE commit_history_default PARTITION OF commit_history DEFAULT")
            cur.execute("CREATE TABLE log_end_history_default PARTITION OF log_end_history DEFAULT")
            cur.execute(
                "INSERT INTO commit_history SELECT %(t0)s + i * %(every)s + (k %% 10) * 37, 'bench', "
                "'group-' || (k / 100), 'topic-' || ((k / 10) %% 10), k %% 10, i * 100 + k %% 7, "
                "CASE WHEN i %% 17 = 0 THEN NULL ELSE (k * 13 + i) %% 500 END, %(t0)s + i * %(every)s "
                "FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, %(keys)s - 1) AS k",
                {"t0": T0, "every": EVERY_MS, "n": per_key, "keys": KEYS},
            )
            cur.execute(
                "INSERT INTO log_end_history SELECT %(t0)s + i * %(every)s, 'bench', 'topic-' || (p / 10), p %% 10, "
                "i * 100 + 500 FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, %(tps)s - 1) AS p",
                {"t0": T0, "every": EVERY_MS, "n": per_key, "tps": TOPIC_PARTITIONS},
            )
            cur.execute(
                "INSERT INTO status_history SELECT %(t0)s + h * 3600000 + g * 1000, 'bench', 'group-' || g, "
                "(ARRAY['OK', 'WARN', 'ERR'])[1 + (h + g) %% 3] "
                "FROM generate_series(0, %(hours)s) AS h, generate_series(0, 9) AS g",
                {"t0": T0, "hours": (end - T0) // 3_600_000},
            )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE commit_history_default, log_end_history_default, status_history")
    finally:
        conn.close()
    return T0, end


def measure(spark: Any, admin_url: str, rows: int) -> dict[str, Any]:
    from lagd.jobs.trends import run_trends

    name = f"lagd_bench_trends_{uuid.uuid4().hex[:8]}"
    _admin(admin_url, f"CREATE DATABASE {name}")
    url = _db_url(admin_url, name)
    try:
        upgrade(url)
        g0 = time.perf_counter()
        start, end = fill(url, rows)
        generated = time.perf_counter() - g0
        t0 = time.perf_counter()
        result = run_trends(spark, url, start, end, partitions=8, now_ms=end)
        wall = time.perf_counter() - t0
    finally:
        _admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return {
        "rows": rows,
        "log_end_rows": rows // KEYS * TOPIC_PARTITIONS,
        "hours": round((end - start) / 3_600_000, 2),
        "generate_s": round(generated, 1),
        "wall_s": round(wall, 1),
        "rows_per_s": round(rows / wall),
        "trend_rows": result.trend_rows,
        "status_rows": result.status_rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    doc = __doc__ or ""
    ap = argparse.ArgumentParser(prog="python -m bench.bench_trends", description=doc.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated commit row counts")
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--warmup", type=int, default=100_000, help="rows of an untimed first run (JVM and JIT warm-up)")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    logs.configure("warning", "console")  # stdout carries the figures only
    from lagd.jobs.spark import build_session

    spark = build_session(master=a.master, app_name="lagd-bench-trends", shuffle_partitions=8, driver_memory="4g")
    out: dict[str, Any] = {"master": a.master, "sizes": {}}
    try:
        if a.warmup:
            # The first job in a JVM pays for class loading and JIT; without this run the
            # smallest size looks slow and the growth ratio flatters the large one.
            print(f"trends bench: warm-up run over {a.warmup:,} rows (not reported) ...", file=sys.stderr, flush=True)
            measure(spark, a.admin_url, a.warmup)
        for n in sizes:
            print(f"trends bench: generating and rolling up {n:,} commit rows ...", file=sys.stderr, flush=True)
            r = measure(spark, a.admin_url, n)
            out["sizes"][n] = r
            print(
                f"trends: {r['rows']:,} commit rows (+{r['log_end_rows']:,} log-end rows, {r['hours']} h of history) "
                f"on {a.master}: wall {r['wall_s']} s, {r['rows_per_s']:,} rows/s "
                f"({r['trend_rows']:,} trend rows, {r['status_rows']:,} status rows; data generated in "
                f"{r['generate_s']} s, not counted)",
                flush=True,
            )
    finally:
        spark.stop()
    for small, big in itertools.pairwise(sizes):
        ratio = out["sizes"][big]["wall_s"] / max(out["sizes"][small]["wall_s"], 1e-9)
        out.setdefault("growth", {})[f"{small}->{big}"] = round(ratio, 2)
        print(f"trends: growth {small:,} -> {big:,} rows: time x{ratio:.2f} for rows x{big / small:.0f}", flush=True)
        # Linear growth gives 1.0; allow 30% for the larger shuffle and JDBC write of the bigger run.
        target(f"time growth per row growth, {small:,} -> {big:,} rows", ratio / (big / small), "<=", 1.3)
    return out


if __name__ == "__main__":
    main()
