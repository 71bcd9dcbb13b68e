"""The group page's history: how long `/group/{cluster}/{group}` takes on a realistic history.

Run: `python -m bench.bench_history [--hours 24] [--partitions 32] [--other-groups 20] [--runs 7]`.

What it builds, in a private PostgreSQL of its own (lagd.embedded.services, migrated as in production):
one cluster, a topic of `--partitions` partitions written at 100 records/s each, and the group
under test on it committing every 5 s (a consumer's default auto-commit), 2 s behind, for
`--hours` up to now; `--other-groups` more groups on the same topic commit alike (the history
table holds them too); the topic's log-end offsets are sampled every 10 s (offset-refresh's
default), as lagd's sampler stores them. At the defaults that is, for 24 h, 553k commit rows of
the group (4.4M in all) and 276k log-end rows. Day partitions as the store makes them.

What it measures:
- the history query the page runs (lagd.http.lagd_api.HISTORY_SQL, through
  lagd_api.group_history) for the page's 1 h, 6 h (the default) and 24 h: the median of
  `--runs` runs, and EXPLAIN (ANALYZE, BUFFERS)'s execution time and its slowest nodes;
- the page itself, from the real daemon: `lagd run` as its own process on this database (its
  cluster's brokers do not answer; the page's charts come from the stored history all the
  same), `GET /group/{cluster}/{group}` `--runs` times per range on an idle loop, beside
  `GET /` and `GET /burrow/admin/ready`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg2  # type: ignore[import-untyped]
from sqlalchemy.dialects import postgresql

from lagd.db.migrate import upgrade
from lagd.embedded.services import free_port, start_private_postgres
from lagd.http.lagd_api import DB_TIMEOUT_S, HISTORY_LOOKBACK_MS, HISTORY_SQL, history_step
from lagd.http.page import first_commit_query
from lagd.state.store import DAY_MS, partition_name

CLUSTER, TOPIC, GROUP = "prod", "orders", "billing"
RATE = 100  # records/s per partition
COMMIT_EVERY_MS = 5_000
SAMPLE_EVERY_MS = 10_000
BEHIND_MS = 2_000
ROOT = Path(__file__).resolve().parent.parent


def fill(url: str, hours: float, partitions: int, other_groups: int, now: int) -> dict[str, int]:
    """The history described in the module doc, ending at `now`; returns row counts."""
    start = now - int(hours * 3_600_000)
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for table in ("commit_history", "log_end_history"):
                for day in range((start - HISTORY_LOOKBACK_MS) // DAY_MS, now // DAY_MS + 1):
                    cur.execute(
                        f'CREATE TABLE IF NOT EXISTS "{partition_name(table, day)}" PARTITION OF "{table}" '
                        f"FOR VALUES FROM ({day * DAY_MS}) TO ({(day + 1) * DAY_MS})"
                    )
            # log-end offset of a partition at t: RATE records a second since `start`
            cur.execute(
                """INSERT INTO log_end_history (ts, cluster, topic, partition, "offset")
                SELECT t, %(c)s, %(t)s, p, (t - %(s)s) * %(r)s / 1000
                FROM generate_series(%(s)s::bigint - %(look)s, %(n)s::bigint, %(e)s::bigint) t,
                     generate_series(0, %(p)s - 1) p""",
                {
                    "c": CLUSTER,
                    "t": TOPIC,
                    "s": start,
                    "look": HISTORY_LOOKBACK_MS,
                    "n": now,
                    "e": SAMPLE_EVERY_MS,
                    "p": partitions,
                    "r": RATE,
                },
            )
            groups = [GROUP] + [f"other-{i}" for i in range(other_groups)]
            for i, g in enumerate(groups):
                print(f"  history of group {i + 1}/{len(groups)}", end="\r", file=sys.stderr, flush=True)
                cur.execute(
                    """INSERT INTO commit_history (ts, cluster, group_name, topic, partition, "offset", lag, observed)
                    SELECT t, %(c)s, %(g)s, %(t)s, p, (t - %(b)s - %(s)s) * %(r)s / 1000, %(b)s * %(r)s / 1000, t + 50
                    FROM generate_series(%(s)s::bigint + %(off)s, %(n)s::bigint, %(e)s::bigint) t,
                         generate_series(0, %(p)s - 1) p""",
                    {
                        "c": CLUSTER,
                        "g": g,
                        "t": TOPIC,
                        "s": start,
                        "off": (i * 37) % COMMIT_EVERY_MS,
                        "n": now,
                        "e": COMMIT_EVERY_MS,
                        "p": partitions,
                        "r": RATE,
                        "b": BEHIND_MS,
                    },
                )
            print(file=sys.stderr)
            cur.execute("ANALYZE commit_history")
            cur.execute("ANALYZE log_end_history")
            cur.execute(
                "SELECT (SELECT count(*) FROM commit_history), "
                "(SELECT count(*) FROM commit_history WHERE group_name = %s), (SELECT count(*) FROM log_end_history)",
                (GROUP,),
            )
            total, mine, log_end = cur.fetchone()
    finally:
        conn.close()
    return {"commit_rows": total, "group_commit_rows": mine, "log_end_rows": log_end}


def query_params(now: int, hours: int) -> dict[str, Any]:
    """HISTORY_SQL's parameters as the page passes them for `hours` (lagd.http.page.group_page)."""
    start = now - hours * 3_600_000
    step = history_step(now - start)
    return {
        "cluster": CLUSTER,
        "grp": GROUP,
        "t0": start,
        "t1": now,
        "look0": max(0, start - HISTORY_LOOKBACK_MS),
        "step_ms": step * 1000,
    }


def compiled(params: dict[str, Any]) -> str:
    """HISTORY_SQL with its parameters in, as psycopg2 text."""
    return str(HISTORY_SQL.bindparams(**params).compile(compile_kwargs={"literal_binds": True}))


def time_first_commit(url: str, now: int, hours: int, runs: int) -> tuple[float, float]:
    """The page's other query (lagd.http.page.first_commit_query): median wall ms over `runs`
    and EXPLAIN ANALYZE's execution ms."""
    stmt = first_commit_query(CLUSTER, GROUP, now - hours * 3_600_000)
    sql = str(stmt.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                cur.execute(sql)
                cur.fetchall()
                times.append((time.perf_counter() - t) * 1000)
            cur.execute("EXPLAIN ANALYZE " + sql)
            plan = [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    execution = next(float(ln.split(":")[1].split()[0]) for ln in plan if ln.startswith("Execution Time"))
    return statistics.median(times), execution


def time_query(
    url: str, now: int, hours: int, runs: int, plan_to: Path | None = None
) -> tuple[float, float, list[str], int]:
    """Median wall ms of the query over `runs`, EXPLAIN ANALYZE's execution ms, its slowest
    nodes, and the number of points it returns."""
    sql = compiled(query_params(now, hours))
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            times = []
            points = 0
            for _ in range(runs):
                t = time.perf_counter()
                cur.execute(sql)
                points = len(cur.fetchall())
                times.append((time.perf_counter() - t) * 1000)
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            plan = [r[0] for r in cur.fetchall()]
            if plan_to is not None:
                plan_to.write_text("\n".join(plan) + "\n")
    finally:
        conn.close()
    execution = next(float(ln.split(":")[1].split()[0]) for ln in plan if ln.startswith("Execution Time"))
    nodes = [ln.strip() for ln in plan if "actual time=" in ln]
    slowest = sorted(nodes, key=lambda ln: -float(ln.split("actual time=")[1].split("..")[1].split()[0]))[:4]
    return statistics.median(times), execution, slowest, points


async def time_pages(port: int, runs: int) -> dict[str, float]:
    """Median ms of each page from the running daemon (one request at a time: an idle loop), and
    how many group pages came without charts (the history query ran past lagd's timeout)."""
    out: dict[str, float] = {}
    paths = {f"group page {h} h": f"/group/{CLUSTER}/{GROUP}?hours={h}" for h in (1, 6, 24)}
    paths |= {"index page": "/", "ready": "/burrow/admin/ready"}
    unavailable = 0
    async with aiohttp.ClientSession() as session:
        for name, path in paths.items():
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                    body = await resp.text()
                times.append((time.perf_counter() - t) * 1000)
                if name.startswith("group") and "history unavailable" in body:
                    unavailable += 1  # the query ran past lagd's DB_TIMEOUT_S: the page shows no charts
            out[name] = statistics.median(times)
            if unavailable:
                out[f"{name}: answers without charts"] = unavailable
                unavailable = 0
    return out


def run_daemon(url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`lagd run` on the database; its cluster's brokers do not answer (a port nothing listens on)."""
    port = free_port()
    config = workdir / "lagd.toml"
    config.write_text(
        f"""
[clusters.{CLUSTER}]
bootstrap-servers = ["127.0.0.1:{free_port()}"]

[storage]
database-url = "{url}"

[http]
listen = "127.0.0.1:{port}"

[notify]
enabled = false
"""
    )
    log = (workdir / "lagd.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lagd", "run", "--config", str(config)], stdout=log, stderr=log, cwd=ROOT
    )
    return proc, port


async def wait_http(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit("lagd run exited; see its log")
            try:
                async with session.get(f"http://127.0.0.1:{port}/"):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
    raise SystemExit(f"lagd did not answer on port {port} within {timeout} s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--hours", type=float, default=24.0, help="hours of history up to now")
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--other-groups", type=int, default=7, help="more groups on the same topic")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--plans", type=Path, help="write each range's whole EXPLAIN ANALYZE into this folder")
    ap.add_argument("--no-daemon", action="store_true", help="the query only, not the page from lagd run")
    a = ap.parse_args(argv)
    pg = start_private_postgres()
    figures: dict[str, Any] = {}
    try:
        upgrade(pg.url)
        now = int(time.time() * 1000)
        t = time.perf_counter()
        rows = fill(pg.url, a.hours, a.partitions, a.other_groups, now)
        print(
            f"history: {rows['group_commit_rows']:,} commit rows of the group, {rows['commit_rows']:,} in all, "
            f"{rows['log_end_rows']:,} log-end rows ({a.hours:g} h, {a.partitions} partitions; "
            f"filled in {time.perf_counter() - t:.0f} s)"
        )
        figures.update(rows)
        for hours in (1, 6, 24):
            plan_to = None
            if a.plans is not None:
                a.plans.mkdir(parents=True, exist_ok=True)
                plan_to = a.plans / f"history_{hours}h.txt"
            median, execution, slowest, points = time_query(pg.url, now, hours, a.runs, plan_to)
            figures[f"query_{hours}h_ms"] = median
            print(f"history query, {hours} h: {median:.1f} ms median of {a.runs}; EXPLAIN ANALYZE {execution:.1f} ms")
            first, first_exec = time_first_commit(pg.url, now, hours, a.runs)
            figures[f"first_commit_{hours}h_ms"] = first
            print(f"  the page's first-commit query: {first:.1f} ms median; EXPLAIN ANALYZE {first_exec:.2f} ms")
            print(f"  {points} points; slowest nodes:")
            for ln in slowest:
                print(f"    {ln[:160]}")
        if not a.no_daemon:
            with tempfile.TemporaryDirectory(prefix="lagd-bench-history-") as wd:
                proc, port = run_daemon(pg.url, Path(wd))
                try:
                    asyncio.run(wait_http(port, proc))
                    pages = asyncio.run(time_pages(port, a.runs))
                finally:
                    proc.terminate()
                    proc.wait(30)
            for name, ms in pages.items():
                figures[name] = ms
                if name.endswith("without charts"):
                    print(
                        f"  {name}: {ms:.0f} of {a.runs} (history unavailable: the query ran past {DB_TIMEOUT_S:g} s)"
                    )
                else:
                    print(f"lagd run, GET {name}: {ms:.1f} ms median of {a.runs}")
    finally:
        pg.stop()
    return figures


if __name__ == "__main__":
    os.environ.setdefault("LAGD_LOG_LEVEL", "warning")
    main()
