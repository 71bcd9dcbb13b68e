"""Store figures on the system Postgres: restore time and write throughput.

Run: `python -m bench.bench_store [--partitions 100000] [--history 1000000]`. Uses a scratch
database it creates and drops. Targets (issue 4): restore of 100k group-partitions ≤ 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import psycopg2  # type: ignore[import-untyped]

from bench import target
from lagd.db.migrate import upgrade
from lagd.model import WindowEntry
from lagd.state.changes import Changes, CommitRows
from lagd.state.store import Store
from lagd.state.windows import State, flat_window, window_bytes

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
NOV22 = 1_795_305_600_000


def _admin(sql: str) -> None:
    conn = psycopg2.connect(ADMIN_URL)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def window_changes(partitions: int, intervals: int, round_: int = 0) -> Changes:
    """`partitions` group-partitions (100 partitions per group), each a full window."""
    ch = Changes()
    for k in range(partitions):
        group, part = divmod(k, 100)
        base = round_ * 1_000_000 + k
        ch.windows[("bench", f"group-{group}", "topic", part)] = window_bytes(
            flat_window(
                WindowEntry(base + 10 * i, base * 16 + i, NOV22 + 1000 * i, NOV22 + 1000 * i + 3, None if i == 0 else 7)
                for i in range(intervals)
            )
        )
    for p in range(50):
        ch.positions[("bench", p)] = 1_000_000 + round_
    return ch


def history_changes(rows: int) -> Changes:
    ch = Changes()
    ch.commit_history = CommitRows(
        (NOV22 - 3_600_000 + i, "bench", f"group-{i % 1000}", "topic", i % 100, i, i % 17, NOV22 + i)
        for i in range(rows)
    )
    return ch


async def measure(url: str, partitions: int, intervals: int, history: int) -> dict[str, float]:
    store = Store.from_url(url)
    out: dict[str, float] = {}
    try:
        first = window_changes(partitions, intervals)
        t = time.perf_counter()
        await store.write(first)
        took = time.perf_counter() - t
        out["insert_group_partitions_per_s"] = partitions / took
        again = window_changes(partitions, intervals, round_=1)
        t = time.perf_counter()
        await store.write(again)  # every row conflicts: the update path
        took = time.perf_counter() - t
        out["upsert_group_partitions_per_s"] = partitions / took
        hist = history_changes(history)
        t = time.perf_counter()
        await store.write(hist)
        out["history_rows_per_s"] = history / (time.perf_counter() - t)
        state = State(intervals=intervals)
        t = time.perf_counter()
        positions = await store.restore(state)
        out["restore_seconds"] = time.perf_counter() - t
        assert state.partitions_tracked() == partitions and len(positions) == 50
    finally:
        await store.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--intervals", type=int, default=10)
    ap.add_argument("--history", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    name = f"lagd_bench_{uuid.uuid4().hex[:8]}"
    _admin(f"CREATE DATABASE {name}")
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        upgrade(url)
        figures: dict[str, Any] = asyncio.run(measure(url, args.partitions, args.intervals, args.history))
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    p = args.partitions
    print(f"write {p} group-partitions (insert): {figures['insert_group_partitions_per_s']:,.0f} /s")
    print(f"write {p} group-partitions (upsert over existing): {figures['upsert_group_partitions_per_s']:,.0f} /s")
    print(f"write {args.history} commit history rows: {figures['history_rows_per_s']:,.0f} rows/s")
    print(f"restore {p} group-partitions (intervals {args.intervals}): {figures['restore_seconds']:.2f} s")
    target(f"full restore of {p:,} group-partitions", figures["restore_seconds"], "<=", 10, "s")
    return figures


if __name__ == "__main__":
    main()
