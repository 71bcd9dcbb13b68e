"""`lagd replay` of a 1-hour, 8-partition trace: seconds per group, parsing included.

Run: `python -m bench.bench_replay [--groups 1] [--rounds 5]`. The trace is one hour of one
consumer group per 8-partition topic, as the log-end sampler and `__consumer_offsets` would
record it at 1 s: every second, each partition's log-end sample (200-600 msg/s, +-30% from
second to second) and the group's commit of what it has processed (trailing the log end by
up to 1 s of records): 3,600 x 8 x 2 = 57,600 JSON lines per group. The lines are built up
front as bytes; the timed part is what `lagd replay FILE` does after reading them:
`lagd.replay.parse_trace` (JSON, validation, ordering) and `lagd.replay.replay` with the
default settings (evaluator.rules = "lagd"), judging every group at each 1 s tick of trace
time (3,600 ticks), output written to memory. Process start and imports are not counted.
The figure is CPU seconds of this process per group (best of `rounds` replays of the whole
trace), because the machine is shared and wall time measures the neighbours too; the wall
times of the rounds (best, median) are printed next to it, and so are two more figures
that say where the time goes: parsing alone, and the whole replay with Burrow's rules
(evaluator.rules = "burrow"). Target (issue 11): well under 1 s
per group, judged here as <= 0.5 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import target
from lagd.core.config import Settings
from lagd.replay import parse_trace, replay

T0 = 1_790_000_000_000
SECONDS = 3600
PARTITIONS = 8
TARGET_S = 0.5


def trace_lines(groups: int, seed: int = 11) -> list[bytes]:
    """One hour of log-end samples and commits, ts ascending, one JSON line each."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    rates = [[rng.uniform(200, 600) for _ in range(PARTITIONS)] for _ in range(groups)]
    log_end = [[0.0] * PARTITIONS for _ in range(groups)]
    committed = [[0] * PARTITIONS for _ in range(groups)]
    for second in range(SECONDS):
        ts = T0 + second * 1000
        for g in range(groups):
            topic = f"topic-{g}"
            for p in range(PARTITIONS):
                log_end[g][p] += rates[g][p] * rng.uniform(0.7, 1.3)
                sample = {"ts": ts + p, "type": "log_end", "cluster": "bench", "topic": topic, "partition": p}
                lines.append(json.dumps({**sample, "offset": int(log_end[g][p])}).encode())
        for g in range(groups):
            for p in range(PARTITIONS):
                committed[g][p] = max(committed[g][p], int(log_end[g][p] - rng.uniform(0.0, 1.0) * rates[g][p]))
                commit = {"ts": ts + 500 + p, "type": "commit", "cluster": "bench", "group": f"group-{g}"}
                lines.append(
                    json.dumps({**commit, "topic": f"topic-{g}", "partition": p, "offset": committed[g][p]}).encode()
                )
    return lines


def best_cpu(rounds: int, work: Callable[[], object]) -> tuple[float, list[float]]:
    """Best CPU seconds of `rounds` calls of `work`, and the wall seconds of every call."""
    cpus: list[float] = []
    walls: list[float] = []
    for _ in range(rounds):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        work()
        cpus.append(time.process_time() - cpu0)
        walls.append(time.perf_counter() - wall0)
    return min(cpus), walls


def run(groups: int = 1, rounds: int = 5) -> dict[str, Any]:
    lines = trace_lines(groups)
    lagd = Settings()
    burrow = dataclasses.replace(lagd, evaluator=dataclasses.replace(lagd.evaluator, rules="burrow"))
    out = io.StringIO()

    def replay_with(settings: Settings) -> None:
        out.seek(0)
        out.truncate()
        replay(parse_trace([("bench", lines)]), settings, 1000, out)

    cpu, walls = best_cpu(rounds, lambda: replay_with(lagd))
    changes = out.getvalue().count("\n")
    parsing, _ = best_cpu(rounds, lambda: sum(1 for _ in parse_trace([("bench", lines)])))
    cpu_burrow, _ = best_cpu(rounds, lambda: replay_with(burrow))
    return {
        "groups": groups,
        "lines": len(lines),
        "status_changes": changes,
        "cpu_s_per_group": cpu / groups,
        "parse_s_per_group": parsing / groups,
        "burrow_cpu_s_per_group": cpu_burrow / groups,
        "wall_s_best": min(walls),
        "wall_s_median": statistics.median(walls),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_replay", description=__doc__.splitlines()[0] if __doc__ else None
    )
    ap.add_argument("--groups", type=int, default=1, help="groups in the trace, each on its own 8-partition topic")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    r = run(a.groups, a.rounds)
    print(
        f"replay: {r['cpu_s_per_group']:.3f} CPU-s per group for a 1-hour, {PARTITIONS}-partition trace "
        f"({r['groups']} group(s), {r['lines']:,} lines, {SECONDS:,} ticks, {r['status_changes']} status change line(s); "
        f"wall best {r['wall_s_best']:.3f} s, median {r['wall_s_median']:.3f} s)"
    )
    print(
        f"replay: of which parsing {r['parse_s_per_group']:.3f} s; the rest is State.apply and judging; "
        f'with evaluator.rules = "burrow" the whole replay takes {r["burrow_cpu_s_per_group"]:.3f} CPU-s per group'
    )
    target("replay of a 1-hour 8-partition trace, CPU seconds per group", r["cpu_s_per_group"], "<=", TARGET_S, "s")
    return r


if __name__ == "__main__":
    main()
