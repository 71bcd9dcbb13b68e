"""State and evaluator at scale: memory per group-partition, commits/s, group evaluation time.

Run: `python -m bench.bench_state [--groups 1000] [--partitions 1000]` (default 1M
group-partitions at intervals 10, windows full). Each group reads 10 topics of
partitions/10 partitions; topics are shared by groups (100 topics), as on real clusters.
Targets (issues 4 and 13): <= 1 KiB per group-partition (its window, and what the evaluator
and the verdict watch keep of it when it lags: since when it holds its status, the facts of its
trend, its snapshot), >= 100,000 commits/s on one core,
p99 <= 5 ms to evaluate a group of 1,000 partitions (verdict cache off), judged for lagd's
rules (the default; a group judged for the first time, and one re-judged with its windows
unchanged) and for Burrow's. The windows are filled commit by commit a minute apart, so both
rule sets keep the same ten commits.
Times are CPU time of this process (time.process_time), so other load on the machine
does not count against the figures; they include the garbage collector's passes, run at the
cadence `lagd run` sets (collector.tune: young collections every 50,000 allocations; the
bench ran Python's default of 700 until 2026-11-23, which the daemon no longer does).
Evaluation figures for lagd's rules: "cold" fits every partition's trend (a first judgement,
or every window changed since the last one); "warm" reuses the facts the evaluator keeps per
partition (lagd_fast.LagdJudge), as when only time or newer log-end samples moved. Healthy
groups, judged uncached: caught up; 20 records (2 s) behind (judged without a trend); and
keeping up 8-10 s behind, judged for the first time (a flat trend for every partition; its slope
is not fitted where its z decides, since 2026-11-26: p50 29.6-29.8 ms before, 22.1-22.3 ms
after, A/B at 10 groups of 1,000 partitions). Where the compiled rules code is built
(lagd/evaluate/_trend.c), the evaluation p50s are then measured again at 30 groups, in two
processes of their own: one with it, one in Python (LAGD_NO_EXTENSIONS=1), printed side by
side (`--no-side-by-side` skips them).

Recorded 2026-11-23 (2-core box shared with other jobs, load average 1-3; Python 3.11), 3 runs:
  lagd cold p50 26.1-26.8 ms / p99 62-67 ms (about 6 young collections of ~35 ms land among
  the 300 runs: the facts kept per partition are young until one untracks them); lagd warm
  p50 6.9-9.0 ms / p99 8.8-12.4 ms; Burrow's p50 4.3-5.2 ms / p99 5.2-6.5 ms; caught-up
  1.3-1.4 ms. The code before the kept facts (a Trend object per partition), at the same
  collector cadence: cold 25.7-26.2 / 43.7-44.6 ms, warm 13.5-14.0 / 14.9-19.8 ms, Burrow's
  5.2-5.7 / 10.9-11.2 ms; at the old default cadence cold 29 / 211-261 ms and warm 13-14 /
  301-355 ms (full collections rescanning the kept Trend objects).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench import target
from lagd.core.model import Commit
from lagd.core.ruleset import LAGD, rule_set
from lagd.evaluate import Evaluator, native
from lagd.evaluate.snapshot import Snapshots
from lagd.runtime import collector
from lagd.state.windows import State

CLUSTER = "bench"
INTERVALS = 10
TOPICS = 100
TOPICS_PER_GROUP = 10
SAMPLES = 360
JUDGED = 50  # groups whose evaluator memory is traced


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def topic_names(g: int) -> list[str]:
    return [f"topic-{(g * TOPICS_PER_GROUP + k) % TOPICS:03d}" for k in range(TOPICS_PER_GROUP)]


def run(groups: int = 1000, partitions: int = 1000, commits: int = 1_000_000, evals: int = 300) -> dict[str, Any]:
    per_topic = partitions // TOPICS_PER_GROUP
    collector.tune()  # the garbage collector's cadence as `lagd run` sets it
    state = State(intervals=INTERVALS, lag_samples=SAMPLES, record_history=False)
    t0 = 1_700_000_000_000
    # Log-end samples: 360 per topic-partition, one every 10 s, 100 records each.
    gc.collect()
    before_samples = rss_bytes()
    for t in range(TOPICS):
        for p in range(per_topic):
            state.restore_log_end(
                (CLUSTER, f"topic-{t:03d}", p),
                [10_000 + 100 * i for i in range(SAMPLES)],
                [t0 + 10_000 * i for i in range(SAMPLES)],
            )
    gc.collect()
    sample_bytes = rss_bytes() - before_samples
    end_ts = t0 + 10_000 * (SAMPLES - 1)
    log_end = 10_000 + 100 * (SAMPLES - 1)

    # Fill every window through apply(): 10 commits per group-partition, lagging behind.
    gc.collect()
    before = rss_bytes()
    order = 0
    fill_start = time.process_time()
    for r in range(INTERVALS):
        ts = end_ts - 60_000 * (INTERVALS - r)
        for g in range(groups):
            group = f"group-{g:05d}"
            for topic in topic_names(g):
                for p in range(per_topic):
                    order += 1
                    state.apply(Commit(CLUSTER, group, topic, p, log_end - 5000 + 400 * r, order, ts, ts))
        state.discard_changes()
    fill_s = time.process_time() - fill_start
    gc.collect()
    tracked = state.partitions_tracked()
    window_bytes = rss_bytes() - before
    per_gp = window_bytes / tracked
    print(f"group-partitions: {tracked:,} (intervals {INTERVALS}, windows full); fill via apply: {fill_s:.1f} s")
    print(f"memory per group-partition (windows, RSS delta): {per_gp:.0f} B")
    print(
        f"memory of log-end samples: {sample_bytes / 2**20:.0f} MiB for {TOPICS * per_topic:,} topic-partitions x {SAMPLES}"
    )

    # Steady-state commits: every one appends to a full window and drops its oldest.
    state.record_history = True
    events = []
    for i in range(commits):
        g = i % groups
        topic = topic_names(g)[(i // groups) % TOPICS_PER_GROUP]
        p = (i // (groups * TOPICS_PER_GROUP)) % per_topic
        order += 1
        events.append(Commit(CLUSTER, f"group-{g:05d}", topic, p, log_end - 1000 + i % 500, order, end_ts, end_ts))
    gc.collect()
    gc.freeze()  # the long-lived state is not garbage: keep the collector from rescanning it
    half = commits // 2
    start = time.process_time()
    state.apply_many(events[:half])
    apply_s = time.process_time() - start
    rate = half / apply_s
    print(f"commits applied: {rate:,.0f}/s on one core ({half:,} in {apply_s:.2f} s)")
    state.discard_changes()
    # As the daemon runs it: drain (build the store's Changes) every flush-max-changes commits.
    batch = 20_000
    drain_s = 0.0
    start = time.process_time()
    for k in range(half, commits, batch):
        state.apply_many(events[k : k + batch])
        d = time.process_time()
        state.drain_changes()
        drain_s += time.process_time() - d
    both_s = time.process_time() - start
    rate_drained = (commits - half) / both_s
    print(
        f"commits applied incl. drain_changes every {batch:,}: {rate_drained:,.0f}/s "
        f"({drain_s / both_s:.0%} of the time building Changes)"
    )
    # The daemon always drains, so the target is judged on this rate, not the apply-only one.
    target("commits applied per CPU-second, as the daemon runs it", rate_drained, ">=", 100_000, "commits/s")
    del events

    # Evaluate one group of `partitions` partitions, verdict cache off (TTL 0), with lagd's
    # rules (the default) and with Burrow's. lagd's: "cold" is a group judged for the first
    # time (every partition's trend computed); "warm" re-judges groups whose windows did not
    # change since their last evaluation (the per-partition trends are reused), which is what
    # the daemon's periodic scan mostly does. Every partition is falling behind (WARN).
    now = end_ts + 30_000
    p50 = p99 = 0.0
    figures: dict[str, float] = {}
    for rules in ("lagd", "burrow"):
        for phase in ("cold", "warm") if rules == "lagd" else ("",):
            evaluator = Evaluator(state, cache_ttl_ms=0, rules=rule_set(rules))
            if phase == "warm":
                for k in range(min(evals, groups)):
                    evaluator.group(CLUSTER, f"group-{k % groups:05d}", now - 1000)
            verdict = evaluator.group(CLUSTER, "group-00000", now) if phase != "cold" else None
            times = []
            for k in range(evals):
                name = f"group-{k % groups:05d}"
                if phase == "cold":
                    evaluator.forget(CLUSTER, name)
                s = time.process_time()
                verdict = evaluator.group(CLUSTER, name, now)
                times.append((time.process_time() - s) * 1000)
            times.sort()
            q50 = statistics.median(times)
            q99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            label = f"{rules} rules" + (f", {phase}" if phase else "")
            assert verdict is not None
            print(
                f"evaluate a group of {verdict.partition_count} partitions ({label}, {evals} runs): "
                f"p50 {q50:.2f} ms, p99 {q99:.2f} ms; every partition lagging, status {verdict.status}"
            )
            target(
                f"evaluate a lagging group of {verdict.partition_count} partitions ({label}), p99", q99, "<=", 5, "ms"
            )
            if rules == "lagd" and phase == "cold":
                p50, p99 = q50, q99
            figures[f"eval_{rules}_{phase or 'any'}_p50_ms"], figures[f"eval_{rules}_{phase or 'any'}_p99_ms"] = (
                q50,
                q99,
            )
    evaluator = Evaluator(state, cache_ttl_ms=0, rules=LAGD)
    # A healthy group: every partition caught up (no rule to run, no lag in time), lagd's rules.
    healthy = "group-00001"
    for topic in topic_names(1):
        for p in range(per_topic):
            order += 1
            state.apply(Commit(CLUSTER, healthy, topic, p, log_end, order, end_ts, end_ts))
    state.discard_changes()
    hp50, hp99 = _eval_times(evaluator, healthy, now, evals)
    print(f"evaluate a caught-up group of {partitions} partitions (uncached): p50 {hp50:.2f} ms, p99 {hp99:.2f} ms")
    # A healthy group as most are: every partition committing every second 20 records (2 s of
    # production) behind the log end, judged a second after the newest commit and sample.
    keeping_up = "group-00002"
    for topic in topic_names(2):
        for p in range(per_topic):
            for r in range(INTERVALS - 1, -1, -1):
                order += 1
                ts = end_ts - 1000 * r
                state.apply(Commit(CLUSTER, keeping_up, topic, p, log_end - 20 - 10 * r, order, ts, ts))
    state.discard_changes()
    kp50, kp99 = _eval_times(evaluator, keeping_up, end_ts + 1000, evals)
    verdict = evaluator.group(CLUSTER, keeping_up, end_ts + 1000)
    print(
        f"evaluate a group of {partitions} partitions each 20 records behind (uncached): "
        f"p50 {kp50:.2f} ms, p99 {kp99:.2f} ms; status {verdict.status}"
    )
    # A healthy group whose records wait longer than allowed-lag-seconds (5 s): every partition
    # commits a minute apart 8-10 s behind the log end, so each needs its trend, which is flat
    # (keeping up). Judged for the first time (every trend fitted) a second after the newest
    # commit; the slope is left unfitted where the trend's z decides (lagd_fast._fit).
    steady = "group-00003"
    jitter = random.Random(3)
    for r in range(INTERVALS):
        ts = end_ts - 60_000 * (INTERVALS - 1 - r)
        for topic in topic_names(3):
            for p in range(per_topic):
                order += 1
                behind_ms = 8_000 + int(jitter.random() * 2_000)
                offset = 10_000 + 100 * (ts - behind_ms - t0) // 10_000  # the log end behind_ms before ts
                state.apply(Commit(CLUSTER, steady, topic, p, offset, order, ts, ts))
    state.discard_changes()
    times = []
    for _ in range(evals):
        evaluator.forget(CLUSTER, steady)
        s = time.process_time()
        verdict = evaluator.group(CLUSTER, steady, end_ts + 1000)
        times.append((time.process_time() - s) * 1000)
    times.sort()
    sp50, sp99 = statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"evaluate a group of {partitions} partitions keeping up 8-10 s behind (trend needed; first judgement, "
        f"uncached): p50 {sp50:.2f} ms, p99 {sp99:.2f} ms; status {verdict.status}, "
        f"{sum(p.rule == 'keeping-up' for p in verdict.partitions)} partitions keeping up"
    )
    # What the daemon keeps per judged group-partition besides its window (lagd's rules): each
    # partition's status and since when (hysteresis), the facts kept for partitions whose trend
    # was needed, and the verdict watch's snapshot for the list pages. Every partition here is
    # lagging, so every trend is kept: the most it costs. Traced (tracemalloc) over the first
    # JUDGED groups, judged once each.
    evaluator = Evaluator(state, cache_ttl_ms=0, rules=LAGD)
    snapshots = Snapshots()
    judged = min(JUDGED, groups)
    gc.collect()
    tracemalloc.start()
    for k in range(judged):
        snapshots.put(evaluator.group(CLUSTER, f"group-{k:05d}", now, cache=False))
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_judged = held / (judged * partitions)
    print(
        f"memory the evaluator and the verdict watch keep per judged group-partition (lagging): {per_judged:.0f} B "
        f"({held / 2**20:.1f} MiB for {judged} groups of {partitions} partitions)"
    )
    target(
        "memory per group-partition: window and what the evaluator keeps of a lagging one",
        per_gp + per_judged,
        "<=",
        1024,
        "B",
    )
    return {
        "group_partitions": tracked,
        "bytes_per_group_partition": per_gp,
        "log_end_sample_bytes": sample_bytes,
        "commits_per_s": rate,
        "commits_per_s_with_drain": rate_drained,
        "healthy_eval_p50_ms": hp50,
        "healthy_eval_p99_ms": hp99,
        "keeping_up_eval_p50_ms": kp50,
        "keeping_up_eval_p99_ms": kp99,
        "steady_eval_p50_ms": sp50,
        "steady_eval_p99_ms": sp99,
        "eval_p50_ms": p50,
        "eval_p99_ms": p99,
        **figures,
    }


# The evaluation figures run again in Python beside the compiled code, at a smaller scale (each
# in a process of its own, the same scale for both): what the compiled code (lagd/evaluate/_trend.c) buys.
SIDE_BY_SIDE = ["--groups", "30", "--commits", "1000", "--evals", "150"]
COMPARED = [
    ("eval_lagd_cold_p50_ms", "lagging, every trend fitted"),
    ("eval_lagd_warm_p50_ms", "lagging, facts standing"),
    ("keeping_up_eval_p50_ms", "20 records behind"),
    ("steady_eval_p50_ms", "keeping up 8-10 s behind"),
]


def side_by_side() -> None:
    """Print the evaluation p50s with the compiled code and with LAGD_NO_EXTENSIONS=1 (Python)."""
    results = {}
    for label, extra in (("compiled", {}), ("Python", {"LAGD_NO_EXTENSIONS": "1"})):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run(
                [sys.executable, "-m", "bench.bench_state", *SIDE_BY_SIDE, "--json", out.name, "--no-side-by-side"],
                env={**os.environ, **extra},
                check=True,
                stdout=subprocess.DEVNULL,
            )
            results[label] = json.loads(Path(out.name).read_text())
    parts = [f"{what} {results['compiled'][key]:.2f} / {results['Python'][key]:.2f} ms" for key, what in COMPARED]
    print(
        "judging a group of 1,000 partitions, p50, compiled / Python (LAGD_NO_EXTENSIONS=1), "
        f"30 groups each: {'; '.join(parts)}"
    )


def _eval_times(evaluator: Evaluator, group: str, now: int, evals: int) -> tuple[float, float]:
    """p50 and p99 (ms of CPU) of `evals` evaluations of `group` at `now`, verdict cache off."""
    times = []
    for _ in range(evals):
        s = time.process_time()
        evaluator.group(CLUSTER, group, now)
        times.append((time.process_time() - s) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=1000, help="per group (multiple of 10)")
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--evals", type=int, default=300)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument(
        "--no-side-by-side", action="store_true", help="skip the evaluation figures in Python beside the compiled code"
    )
    a = ap.parse_args()
    print(f"rules code: {native.describe()}", flush=True)
    figures = run(a.groups, a.partitions, a.commits, a.evals)
    if a.json:
        Path(a.json).write_text(json.dumps(figures))
    if not a.no_side_by_side and native.compiled() is not None:
        side_by_side()


if __name__ == "__main__":
    main()
