"""Run every benchmark and write bench/RESULTS.md: `python -m bench` (what `make bench` does).

Each benchmark runs as its own process (`python -m bench.bench_<name>`), so one that
crashes, hangs or exhausts memory is recorded as a failure and the rest still run. Every
line a benchmark prints is one figure; RESULTS.md keeps them with the issue's target, the
method (the benchmark's docstring), the machine and the command to reproduce.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Bench:
    name: str
    target: str
    args: tuple[str, ...] = ()
    full_args: tuple[str, ...] = ()  # with --full: more sizes, for a finer growth curve (longer)
    timeout: float = 1800.0


BENCHES = (
    Bench("codec", "decode + event building >= 150,000 records/s on one core (issue 3)"),
    Bench(
        "state",
        "at 1M group-partitions, intervals 10: <= 1 KiB per group-partition, >= 100,000 commits/s applied "
        "on one core, p99 <= 5 ms to evaluate a group of 1,000 partitions, lagd's and Burrow's rules (issues 4, 13)",
    ),
    Bench("reader", "offsets-topic reader from a real broker (Tansu) to events: records/s (issue 3, context)"),
    Bench("store", "full restore of 100k group-partitions from Postgres <= 10 s (issue 4)"),
    Bench(
        "http",
        "the whole daemon (reader, apply, verdict watch, persister to Postgres, notifier) at 1,000 groups x 100 "
        "partitions and at 10,000 x 100 (1M group-partitions), 20,000 commits/s through the broker, "
        "GET /v3/kafka/{c}/consumer/{g}/lag at 200/s open loop: p99 <= 20 ms with the response cache off (and on); "
        "no event-loop stall above 50 ms; a commit shown within 1 s (issues 5, 13)",
    ),
    Bench(
        "body",
        "one /lag body of a group of 1,000 partitions written in-process, compiled where built (issue 52, "
        "context: no figure worse by more than 15%; the hand C it replaced, lagd/http/_json.c, 0.31-0.38 ms "
        "on 2026-12-03, the Cython build 0.62-0.85 ms, bench/HISTORY.md)",
    ),
    Bench(
        "catchup",
        "catch-up from a fresh start of 500,010 commit records (2,000 groups x 50 partitions), Burrow 1.2.1 on "
        "the same input in the same run: lagd >= Burrow's records/s, >= 1.5x its records per CPU-second, peak RSS "
        "<= Burrow's; no event-loop stall above 50 ms (worst /lag response) during catch-up (issue 13)",
        timeout=1200.0,
    ),
    Bench(
        "workers",
        "catch-up of the same 500,010 records with 1, 2 and 4 lagd workers ([scale]) and one plain process: "
        "2 workers >= 1.8x one worker's records/s; with 2 workers a SIGKILLed worker's groups judged again "
        "within 15 s (issue 16)",
        timeout=1800.0,
    ),
    Bench(
        "trends",
        "trends job on local[2]: rows/s and wall time; time close to linear from 1M to 10M rows (issue 7)",
        args=("--sizes", "1000000,10000000"),
        full_args=("--sizes", "1000000,3000000,10000000"),
        timeout=7200.0,
    ),
    Bench(
        "incidents",
        "the notifier's incident engine with one cluster-wide incident of 1,000 to 10,000 groups: time per change "
        "flat as the groups grow (context, issue 13: work that grows with the groups is incremental)",
    ),
    Bench(
        "watch",
        "the verdict watch's pass over 2,000 groups x 100 partitions, every group changed since the last: CPU "
        "per group as it judges now (Evaluator.snapshot) and as before (a GroupVerdict, then its snapshot), side "
        "by side (context, issue 13: how late a status change is noticed at scale)",
    ),
    Bench("replay", "replay of a 1-hour 8-partition trace: well under 1 s per group (issue 11)"),
    Bench(
        "quality",
        "14 labelled scenarios x 5 seeds scored from the first second, lagd at default settings: every true "
        "problem detected, 0 false alerts, 0 flaps, mean detection delay no worse than the best threshold rule "
        "that detects everything (issue 11)",
    ),
)


def discovered() -> list[Bench]:
    """bench_*.py files not listed above still run (with their own defaults)."""
    known = {b.name for b in BENCHES}
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    return [Bench(n, "see the method below") for n in names if n not in known]


@dataclass
class Result:
    bench: Bench
    command: str
    status: str  # "ran", "failed (exit N)", "timed out after N s", "missing"
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)
    errors: str = ""
    method: str = ""

    @property
    def targets(self) -> list[str]:
        """The benchmark's `target:` lines (see bench.target), without the prefix."""
        return [line.removeprefix("target: ") for line in self.lines if line.startswith("target: ")]

    @property
    def verdict(self) -> str:
        """met / MISSED over every target the benchmark judged; its status when it did not finish."""
        if self.status != "ran":
            return self.status
        if not self.targets:
            return "ran (no numeric target)"
        missed = sum(": MISSED (" in t for t in self.targets)
        return (
            f"MISSED {missed} of {len(self.targets)}" if missed else f"met ({len(self.targets)} of {len(self.targets)})"
        )


def _method(name: str) -> str:
    """The benchmark's docstring: how it measures."""
    try:
        tree = ast.parse((HERE / f"bench_{name}.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return ""
    return (ast.get_docstring(tree) or "").strip()


def run_one(bench: Bench, full: bool, index: int, total: int) -> Result:
    """Run one benchmark in its own process, echoing its figures and progress as they come.

    stderr (progress) is drained by its own thread so a chatty benchmark cannot block on a
    full pipe, and a timer kills a benchmark that hangs even if it prints nothing.
    """
    module = f"bench.bench_{bench.name}"
    args = list(bench.full_args if full else bench.args)
    command = " ".join([".venv/bin/python -m", module, *args])
    if not (HERE / f"bench_{bench.name}.py").exists():
        print(f"[{index}/{total}] {bench.name}: not present (bench/bench_{bench.name}.py), recorded as missing")
        return Result(bench, command, "missing")
    print(f"[{index}/{total}] {bench.name}: {command}", flush=True)
    started = time.monotonic()
    lines: list[str] = []
    errors: list[str] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def progress(stream: IO[str]) -> None:
        for line in stream:
            errors.append(line.rstrip("\n"))
            print(f"    . {errors[-1]}", flush=True)

    timer = threading.Timer(bench.timeout, kill)
    timer.start()
    reader = threading.Thread(target=progress, args=(proc.stderr,), daemon=True)
    reader.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(f"    {lines[-1]}", flush=True)
        rc = proc.wait()
    finally:
        timer.cancel()
    reader.join(5)
    if timed_out.is_set():
        status = f"timed out after {bench.timeout:.0f} s"
    elif rc != 0:
        status = f"failed (exit {rc})"
    else:
        status = "ran"
    seconds = time.monotonic() - started
    if status != "ran":
        print(f"    {bench.name}: {status}; last stderr lines:", flush=True)
        for line in errors[-5:]:
            print(f"      {line}")
    print(f"    ({seconds:.1f} s)", flush=True)
    return Result(bench, command, status, seconds, lines, "\n".join(errors), _method(bench.name))


def machine() -> list[str]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return [
        f"- CPU: {cpu or 'unknown'} ({os.cpu_count()} cores visible, `nproc` = {len(os.sched_getaffinity(0))})",
        f"- RAM: {mem or 'unknown'}",
        f"- Python: {platform.python_version()} ({platform.python_implementation()}), {platform.platform()}",
    ]


def render(results: list[Result], full: bool, started: dt.datetime) -> str:
    out = [
        "# lagd benchmark results",
        "",
        f"Produced by `make bench` (`.venv/bin/python -m bench{' --full' if full else ''}`) "
        f"on {started:%Y-%m-%d %H:%M} UTC. Every figure is measured on this machine; none is asserted in tests.",
        "",
        "## Machine",
        "",
        *machine(),
        "",
        "## Summary",
        "",
        "| benchmark | targets | time | target (issue) |",
        "|---|---|---|---|",
    ]
    for r in results:
        out.append(f"| {r.bench.name} | {r.verdict} | {r.seconds:.0f} s | {r.bench.target} |")
    for r in results:
        out += ["", f"## {r.bench.name}", "", f"- Target: {r.bench.target}", f"- Reproduce: `{r.command}`"]
        out.append(f"- Status: {r.verdict}")
        out += [f"  - {t}" for t in r.targets]
        if r.method:
            out += ["", "Method:", "", *(f"> {line}" if line else ">" for line in r.method.splitlines())]
        table = [line for line in r.lines if line.startswith("|")]
        figures = [line for line in r.lines if line.strip() and not line.startswith(("|", "target: "))]
        if table:
            out += ["", *table]
        if figures:
            out += ["", "Figures:", "", "```", *figures, "```"]
        if r.status not in ("ran", "missing") and r.errors.strip():
            out += ["", "Error output (last lines):", "", "```", *r.errors.strip().splitlines()[-15:], "```"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--full", action="store_true", help="more sizes where a benchmark has them (trends: 1M, 3M and 10M rows)"
    )
    ap.add_argument("--only", default="", help="comma-separated names to run (default: all)")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"), help="where to write the results")
    a = ap.parse_args(argv)
    wanted = {n.strip() for n in a.only.split(",") if n.strip()}
    benches = [*BENCHES, *discovered()]
    chosen = [b for b in benches if not wanted or b.name in wanted]
    unknown = wanted - {b.name for b in benches}
    if unknown:
        print(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {', '.join(b.name for b in benches)}")
        return 2
    started = dt.datetime.now(dt.UTC)
    results = [run_one(b, a.full, i, len(chosen)) for i, b in enumerate(chosen, 1)]
    Path(a.out).write_text(render(results, a.full, started), encoding="utf-8")
    failed = [r.bench.name for r in results if r.status != "ran"]
    missed = [r.bench.name for r in results if r.verdict.startswith("MISSED")]
    print(f"wrote {a.out}" + (f"; failed to run: {', '.join(failed)}" if failed else "; every benchmark ran"))
    if missed:
        print(f"targets missed in: {', '.join(missed)} (see the summary in {a.out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
