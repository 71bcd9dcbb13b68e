"""Store figures on the system Postgres: restore time and write throughput.

Run: `python -m bench.bench_store [--partitions 100000] [--history 1000000]`. Uses a scratch
database it creates and drops. Targets (issue 4): restore of 100k group-partitions ≤ 10 s.

The first figures are a single daemon's (windows appended to the window log); `--keyed` takes
them for the keyed table workers (lagd.scale) upsert instead.

`--sustained SECONDS [--windows 1000000] [--rate 20000]` measures instead what a large estate's
steady writes cost Postgres: `--windows` stored windows, then every second `--rate` of them
changed (random) and as many commit history rows, written by `Store.write` as the persister
does, for SECONDS, in two modes, each on a fresh database: as a single daemon writes them
(appended to the window log, each write followed by the persister's own copy of every window
into a new generation, `persister.copy_windows` over a State holding the same windows:
lagd.state.window_log), and as workers write them (upserted into the
keyed table). Per mode: Postgres' CPU (every Postgres process of the machine,
from /proc: the checkpointer and WAL writer included), WAL MB/s, whole pages written into the
WAL per second, checkpoints on request, and the seconds that took longer than a second. On the
machine's Postgres as it is configured (its WAL settings move the WAL figures, not the CPU:
lagd.state.checkpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import random
import time
import uuid
from typing import Any

import psycopg2  # type: ignore[import-untyped]

from bench import target
from bench.bench_http import WalMark
from lagd.core.model import WindowEntry
from lagd.db.migrate import upgrade
from lagd.state import persister
from lagd.state.changes import Changes, CommitRows
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from lagd.state.windows import State, flat_window, window_bytes, window_from_bytes

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
NOV22 = 1_795_305_600_000


def _admin(sql: str, url: str = ADMIN_URL) -> None:
    conn = psycopg2.connect(url)
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


async def measure(url: str, partitions: int, intervals: int, history: int, keyed: bool) -> dict[str, float]:
    store = Store.from_url(url, windows_log=not keyed)
    out: dict[str, float] = {}
    try:
        first = window_changes(partitions, intervals)
        t = time.perf_counter()
        await store.write(first)
        took = time.perf_counter() - t
        out["insert_group_partitions_per_s"] = partitions / took
        again = window_changes(partitions, intervals, round_=1)
        t = time.perf_counter()
        await store.write(again)  # every key again: appended to the log, or the update path when keyed
        took = time.perf_counter() - t
        out["rewrite_group_partitions_per_s"] = partitions / took
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


def postgres_cpu_seconds() -> float:
    """CPU seconds used so far by every Postgres process of this machine (/proc)."""
    ticks = 0
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{proc}/cmdline", "rb") as f:
                arg0 = f.read().split(b"\0", 1)[0]
            if not (arg0.startswith(b"postgres") or arg0.endswith(b"/postgres")):  # backends, the postmaster
                continue
            with open(f"{proc}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


async def sustained(url: str, windows: int, rate: int, seconds: float, as_log: bool) -> dict[str, float]:
    """`windows` stored, then `rate` of them changed a second with as many history rows (see the doc)."""
    store = Store.from_url(url, windows_log=as_log)
    try:
        full = window_changes(windows, 10)
        keys = list(full.windows)
        state = State(intervals=10)  # what the persister's copy reads: the same windows
        for k in keys:
            data = full.windows[k]
            assert data is not None
            state.restore_flat(k, window_from_bytes(data))
        wb = WriteBehind(store=store, state=state)
        for i in range(0, windows, 100_000):
            ch = Changes()
            ch.windows = {k: full.windows[k] for k in keys[i : i + 100_000]}
            await store.write(ch)
        _admin("CHECKPOINT", url)
        rnd = random.Random(1)
        wal0, cpu0, t0 = WalMark.read(url), postgres_cpu_seconds(), time.perf_counter()
        writes = late = 0
        while time.perf_counter() - t0 < seconds:
            began = time.perf_counter()
            ch = Changes()
            changed = {k: full.windows[k] for k in rnd.sample(keys, rate)}
            ch.commit_history = CommitRows(
                (NOV22 + writes * 1000 + i, "bench", k[1], "topic", k[3], i, 1, NOV22 + i)
                for i, k in enumerate(changed)
            )
            ch.windows = changed
            await store.write(ch)
            await persister.copy_windows(wb, len(changed))  # after each write, as the persister runs it
            writes += 1
            took = time.perf_counter() - began
            if took < 1.0:
                await asyncio.sleep(1.0 - took)
            else:
                late += 1
        elapsed = time.perf_counter() - t0
        wal1, cpu1 = WalMark.read(url), postgres_cpu_seconds()
        if wal0 is None or wal1 is None:
            raise SystemExit("pg_stat_wal not readable: --sustained needs Postgres 14 or newer")
        return {
            "writes": writes,
            "late": late,
            "cores": (cpu1 - cpu0) / elapsed,
            "wal_mb_s": (wal1.wal_bytes - wal0.wal_bytes) / elapsed / 1e6,
            "full_pages_s": (wal1.full_pages - wal0.full_pages) / elapsed,
            "requested": wal1.requested - wal0.requested,
        }
    finally:
        await store.close()


def main_sustained(seconds: float, windows: int, rate: int) -> None:
    for as_log in (True, False):
        name = f"lagd_bench_{uuid.uuid4().hex[:8]}"
        _admin(f"CREATE DATABASE {name}")
        url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        try:
            upgrade(url)
            f = asyncio.run(sustained(url, windows, rate, seconds, as_log))
        finally:
            _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        mode = "windows appended to the log and copied (a single daemon)" if as_log else "windows upserted (workers)"
        print(
            f"sustained {rate:,} changed windows of {windows:,} and {rate:,} history rows a second, {mode}: "
            f"Postgres {f['cores']:.2f} cores, {f['wal_mb_s']:.1f} MB/s of WAL, {f['full_pages_s']:,.0f} whole pages/s, "
            f"{f['requested']:.0f} checkpoints on request; {f['late']:.0f} of {f['writes']:.0f} writes over 1 s"
        )


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--intervals", type=int, default=10)
    ap.add_argument("--history", type=int, default=1_000_000)
    ap.add_argument("--sustained", type=float, default=0.0, help="seconds of steady writes instead (see the doc)")
    ap.add_argument("--windows", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--keyed", action="store_true", help="windows upserted into the keyed table, as workers write them")
    args = ap.parse_args(argv)
    if args.sustained:
        main_sustained(args.sustained, args.windows, args.rate)
        return {}
    name = f"lagd_bench_{uuid.uuid4().hex[:8]}"
    _admin(f"CREATE DATABASE {name}")
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        upgrade(url)
        figures: dict[str, Any] = asyncio.run(measure(url, args.partitions, args.intervals, args.history, args.keyed))
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    p = args.partitions
    how = "upserted into the keyed table (workers)" if args.keyed else "appended to the window log"
    print(f"write {p} group-partitions, {how}: {figures['insert_group_partitions_per_s']:,.0f} /s")
    print(f"write the same {p} again: {figures['rewrite_group_partitions_per_s']:,.0f} /s")
    print(f"write {args.history} commit history rows: {figures['history_rows_per_s']:,.0f} rows/s")
    print(f"restore {p} group-partitions (intervals {args.intervals}): {figures['restore_seconds']:.2f} s")
    target(f"full restore of {p:,} group-partitions", figures["restore_seconds"], "<=", 10, "s")
    return figures


if __name__ == "__main__":
    main()
