"""Workers: catch-up of the pre-filled offsets topic with 1, 2 and 4 lagd workers, and a failover.

Input, broker, shim, database and completion test are bench_catchup's (read its docstring):
500,010 commit records of 2,000 groups x 50 partitions in a 50-partition `__consumer_offsets`
on one embedded Tansu, a fresh migrated database per run. Each run is one `lagd run` with
`[scale] workers = N` and a `group-id` of its own (for N = 1, `group-id` alone: one worker
process, in the consumer group, without the supervisor), spawned fresh; time runs from the spawn to the poll that
first sees completion, asked of worker 0 only: its API forwards a group's detail to the
group's owner and merges the consumer lists of every worker (lagd.http.routing), so this is
the same test as for one process. `scale.session-timeout` is 6 s (the brokers' minimum):
Tansu holds every JoinGroup answer until half the group's session timeout has passed (its
group coordinator, `Controller::join`; checked 2026-11-26: rebalance-timeout, heartbeat and
static membership do not shorten it, a lower session timeout would also weaken failure
detection, and Apache Kafka delays a new group's first join by group.initial.rebalance.delay.ms,
3 s by default), so every run pays 3-4 s of joining before any worker reads. Each run also
says the last poll (every 0.25 s) at which the workers' /metrics counted no record read, and
the records/s from there (reading began after it; the scrape that first sees records already
judges every group, about a second, so its own time would flatter the read phase; it also
costs the workers that second of CPU inside the measured time, in every run alike), so the
cost of the join and the speed of reading show apart; the target is end to end. Each run
has a consumer group of its own. Figures per run: records/s (500,010 / time), CPU-s summed over the
supervisor and every worker (utime + stime from /proc at completion), CPU-s and peak RSS per
worker, and how busy the whole machine was (/proc/stat, every process: lagd, Tansu, Postgres,
the shim, this bench) over the run and over its read phase, in cores: the ceiling the 2 cores
put on what more workers can give (one worker's read phase keeping 1.22 cores busy leaves at
most 2 / 1.22 = 1.64x for two, before their own overhead). The baseline is one plain lagd process (no [scale]) on the same input in the same run.

Failover (after the 2-worker run completes): worker 1 gets SIGKILL; the time from the kill to
the first poll (every 0.25 s) at which the workers' own /metrics pages together list every one
of the 2,000 groups again (`burrow_kafka_consumer_status` series: the groups each judges
itself) is the failover time. The supervisor starts the killed worker again after a second,
so the groups may land on it or on the survivor, whichever the rebalance gives them to.

Limits: this 2-core machine also runs Tansu, the shim, Postgres and this process, so N workers
compete with them for the 2 cores; figures move by a third between runs. Burrow is not run
here (bench_catchup runs it on the same input and reports its ratio to one lagd process).
Run: `python -m bench.bench_workers [--workers 1,2,4] [--groups 2000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench import target
from bench.bench_catchup import (
    POLL_S,
    ROOT,
    Input,
    _complete,
    cpu_seconds,
    drop_database,
    fill,
    free_port,
    fresh_database,
    lagd_config,
    machine_busy_seconds,
    peak_rss_mb,
    records_read,
    say,
    spawn,
)
from lagd.embedded import services as embedded

SESSION_TIMEOUT_S = 6.0
TIMEOUT_S = 600.0


@dataclass
class WorkersRun:
    label: str
    workers: int
    seconds: float = 0.0
    cpu_s: float = 0.0
    per_worker: list[tuple[int, float, float]] = field(default_factory=list)  # (pid, CPU-s, peak RSS MB)
    failover_s: float | None = None
    completed: bool = False
    reading_s: float | None = None  # the last poll at which the workers' /metrics counted no record read
    machine_busy_s: float = 0.0  # CPU-s the whole machine was busy from the spawn to completion
    reading_busy_s: float | None = None  # ... and from `reading_s` on


def tree(pid: int) -> list[int]:
    """`pid` and its children (the supervisor's workers), from /proc."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                kids.append(int(stat.parent.name))
    return [pid, *sorted(kids)]


def config_text(bootstrap: str, url: str, port: int, workers: int | None) -> str:
    """bench_catchup's settings (notify off), with [scale] for `workers` (None: a plain process)."""
    scale = ""
    if workers is not None:
        # A consumer group of its own per run: members of an earlier run (the one SIGKILLed by
        # the failover test) would otherwise hold up the next run's join until Tansu expires them
        # (a 4-worker run once waited 90 s).
        scale = f'\n[scale]\nsession-timeout = {SESSION_TIMEOUT_S}\ngroup-id = "bench-{uuid.uuid4().hex[:6]}"\n'
        scale += f"workers = {workers}\n" if workers > 1 else ""
    return lagd_config(bootstrap, url, port, "", uuid.uuid4().hex[:6], scale)


async def groups_judged(session: aiohttp.ClientSession, bases: list[str]) -> int:
    """Groups the workers at `bases` judge between them (each its own, from its /metrics)."""
    judged: set[str] = set()
    for base in bases:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(base + "/metrics") as resp:
                text = (await resp.read()).decode()
            judged |= set(re.findall(r'^burrow_kafka_consumer_status\{[^}]*consumer_group="([^"]+)"', text, re.M))
    return len(judged)


async def workers_read(session: aiohttp.ClientSession, bases: list[str]) -> int:
    """Offsets-topic records the workers at `bases` have read between them (0 while none
    answers). Asked only until the first record: the scrape that first sees some already
    judges every group (about a second here), so it is not what dates the start of reading."""
    total = 0
    for base in bases:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(base + "/metrics") as resp:
                total += records_read((await resp.read()).decode())
    return total


async def run_one(
    label: str, workers: int | None, bootstrap: str, info: Input, workdir: Path, failover: bool
) -> WorkersRun:
    url, admin_url, dbname = fresh_database()
    port = free_port()
    while workers and any(embedded.port_open("127.0.0.1", port + i) for i in range(workers)):
        port = free_port()
    config = workdir / f"{label}.toml"
    config.write_text(config_text(bootstrap, url, port, workers))
    run = WorkersRun(label, workers or 0)
    base = f"http://127.0.0.1:{port}"
    bases = [f"http://127.0.0.1:{port + i}" for i in range(max(1, workers or 1))]
    log = (workdir / f"{label}.log").open("wb")
    argv = [sys.executable, "-m", "lagd", "run", "--config", str(config), "--no-migrate"]
    started = time.perf_counter()
    busy0 = busy_none = reading_busy0 = machine_busy_seconds()
    none_read = 0.0  # the last poll at which no worker had read a record
    proc = spawn(argv, log, ROOT)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            note_at = 0.0
            while time.perf_counter() - started < TIMEOUT_S:
                if proc.poll() is not None:
                    raise RuntimeError(f"{label} exited with {proc.returncode} (log {workdir / label}.log)")
                if run.reading_s is None:
                    asked, busy_asked = time.perf_counter() - started, machine_busy_seconds()
                    if await workers_read(session, bases) > 0:
                        run.reading_s = none_read  # reading began after the last poll that saw none
                        reading_busy0 = busy_none
                    none_read, busy_none = asked, busy_asked
                async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=30)) as api:
                    ok, note = await _complete(api, info)
                now = time.perf_counter()
                if ok:
                    run.seconds = now - started
                    pids = tree(proc.pid)
                    run.cpu_s = sum(cpu_seconds(p) for p in pids)
                    run.per_worker = [(p, cpu_seconds(p), peak_rss_mb(p)) for p in pids]
                    busy = machine_busy_seconds()
                    run.machine_busy_s = busy - busy0
                    if run.reading_s is not None:
                        run.reading_busy_s = busy - reading_busy0
                    run.completed = True
                    break
                if now - note_at >= 5:
                    note_at = now
                    say(f"{label}: {now - started:5.1f} s: {note}")
                await asyncio.sleep(POLL_S)
            if run.completed and failover:
                victim = tree(proc.pid)[-1]  # the newest worker process
                killed = time.perf_counter()
                os.kill(victim, signal.SIGKILL)
                while time.perf_counter() - killed < 120:
                    if await groups_judged(session, bases) >= info.groups:
                        run.failover_s = time.perf_counter() - killed
                        break
                    await asyncio.sleep(POLL_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()
        drop_database(admin_url, dbname)
    return run


def report(r: WorkersRun, records: int) -> None:
    state = "" if r.completed else " (DID NOT COMPLETE)"
    print(
        f"{r.label}: {records:,} records in {r.seconds:.2f} s{state}: {records / r.seconds:,.0f} records/s, "
        f"{r.cpu_s:.2f} CPU-s in all ({records / r.cpu_s if r.cpu_s else float('nan'):,.0f} records per CPU-second)"
    )
    if r.reading_s is not None and r.seconds > r.reading_s:
        read_s = r.seconds - r.reading_s
        busy = f", the machine {r.reading_busy_s / read_s:.2f} cores busy" if r.reading_busy_s is not None else ""
        print(
            f"{r.label}: no record read yet {r.reading_s:.2f} s after start (start-up, and for workers the group join); "
            f"from there {read_s:.2f} s: {records / read_s:,.0f} records/s{busy}"
        )
    for pid, cpu, rss in r.per_worker:
        print(f"{r.label}:   process {pid}: {cpu:.2f} CPU-s, peak RSS {rss:,.0f} MB")
    cores = os.cpu_count() or 1
    print(
        f"{r.label}: the machine was busy {r.machine_busy_s:.2f} CPU-s of the {cores * r.seconds:.2f} its {cores} "
        f"cores had ({r.machine_busy_s / r.seconds:.2f} cores on average): lagd, Tansu, Postgres, the shim and this bench"
    )
    if r.failover_s is not None:
        print(f"{r.label}: after SIGKILL of one worker, the other judged all groups {r.failover_s:.1f} s later")


async def main_async(a: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="lagd-bench-workers-"))
    shim_port = free_port()
    broker = embedded.start_tansu(port=free_port(), advertised_port=shim_port)
    shim = spawn(
        [sys.executable, "-m", "bench.kafka_shim", "--listen", f"127.0.0.1:{shim_port}", "--upstream", broker.address],
        sys.stderr,
        ROOT,
    )
    try:
        embedded.wait_port("127.0.0.1", shim_port, 20, shim)  # type: ignore[arg-type]
        bootstrap = f"127.0.0.1:{shim_port}"
        info = await fill(bootstrap, a.groups, a.partitions)
        plain = await run_one("one process", None, bootstrap, info, workdir, failover=False)
        report(plain, info.records)
        runs: dict[int, WorkersRun] = {}
        for n in [int(x) for x in a.workers.split(",")]:
            runs[n] = await run_one(f"{n} worker{'s' if n > 1 else ''}", n, bootstrap, info, workdir, n == 2)
            report(runs[n], info.records)
        if 1 in runs and 2 in runs and runs[1].completed and runs[2].completed:
            ratio = runs[1].seconds / runs[2].seconds
            print(
                f"ratio 2 workers / 1 worker: records/s {ratio:.2f}x; 2 workers / one process {plain.seconds / runs[2].seconds:.2f}x"
            )
            one, two = runs[1].reading_s, runs[2].reading_s
            if one is not None and two is not None:
                # context, not the target: the join is the broker's (see the docstring)
                print(
                    f"ratio 2 workers / 1 worker from the start of reading: "
                    f"{(runs[1].seconds - one) / (runs[2].seconds - two):.2f}x"
                )
            target("2 workers' records/s relative to one worker's", ratio, ">=", 1.8, "x")
        if 2 in runs and runs[2].failover_s is not None:
            target(
                "with 2 workers, a SIGKILLed worker's groups judged again by the other",
                runs[2].failover_s,
                "<=",
                15,
                "s",
            )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shim.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            shim.wait(5)
        broker.stop()
        if a.keep:
            say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--workers", default="1,2,4", help="worker counts to run, comma-separated")
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs)")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
