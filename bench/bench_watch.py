"""The verdict watch's pass: CPU per group judged, as the watch judges now and as it judged before.

The watch (lagd.notify.watch.VerdictWatch) judges every group whose windows or samples changed
since its last pass and keeps its snapshot for the list pages. Under 20,000 commits/s at a
million group-partitions every group changes between two passes, so a pass judges them all;
the watch takes at most a tenth of a busy loop (watch.DUTY), so the CPU of a pass decides how
late a status change is noticed (bench_http's "verdict watch: one every N s").

Input: `--groups` groups x 100 partitions (10 topics of 100 partitions, each group reads one),
10 commits per group-partition 20 s apart, 30 log-end samples per topic-partition 10 s apart;
lagd's rules (the default), state in this process (no broker, no Postgres: this times the
pass alone; bench_http runs it inside the whole daemon). After a first pass (every trend
fitted), each round advances the clock 2 s, applies the commits 20,000 a second would bring
to this many partitions (2% of them a second, each to a random group-partition) and, every
fifth round, a new log-end sample of every topic-partition (offset-refresh 10 s), then times
one whole pass (VerdictWatch.scan, CPU time of this process: time.process_time) in two ways
on two copies of the watch over the same state, interleaved:
- "snapshot": what the watch runs (Evaluator.snapshot: each partition judged into a row);
- "verdict": what it ran until 2026-11-29 (Evaluator.group builds a GroupVerdict of
  PartitionVerdicts, then Snapshots.put reads them into rows).
Figures: CPU per group judged, median and worst over the rounds, each way; then their ratio.

Run: `python -m bench.bench_watch [--groups 2000] [--rounds 10]`. No target of its own
(issue 13: a commit's effect on a verdict visible within 1 s; the watch's cycle at scale).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Iterator

from lagd import collector
from lagd.config import ClusterSettings
from lagd.evaluate import Evaluator
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots, snapshot_of
from lagd.model import Commit, LogEndSample
from lagd.notify.watch import VerdictWatch
from lagd.state.windows import State

CLUSTER = "bench"
T0 = 1_700_000_000_000
TOPICS = [f"topic-{t}" for t in range(10)]
PARTITIONS = 100
SAMPLES = 30
COMMITS_PER_S = 0.02  # of the group-partitions: 20,000 commits/s at a million


def build(groups: int) -> tuple[State, int, int]:
    """The state (see the module doc), its clock and the last commit order used."""
    state = State(intervals=10, lag_samples=SAMPLES, record_history=False)
    for topic in TOPICS:
        for p in range(PARTITIONS):
            state.restore_log_end(
                (CLUSTER, topic, p),
                [10_000 + 100 * i for i in range(SAMPLES)],
                [T0 + 10_000 * i for i in range(SAMPLES)],
            )
    end_ts = T0 + 10_000 * (SAMPLES - 1)
    order = 0
    for r in range(10):
        ts = end_ts - 20_000 * (10 - r)
        for g in range(groups):
            topic = TOPICS[g % len(TOPICS)]
            for p in range(PARTITIONS):
                order += 1
                offset = 10_000 + 100 * (SAMPLES - 1) - 300 + 30 * r + p % 7
                state.apply(Commit(CLUSTER, f"group-{g:05d}", topic, p, offset, order, ts, ts))
        state.discard_changes()
    return state, end_ts + 1000, order


class VerdictFirst(Evaluator):
    """Judges for the watch as before Evaluator.snapshot: a GroupVerdict of PartitionVerdicts,
    then read into its snapshot (the same snapshot: tests/test_trend_c.py)."""

    def snapshot(self, cluster: str, group: str, now_ms: int) -> GroupSnapshot:
        return snapshot_of(self.group(cluster, group, now_ms, cache=False))


def rounds(state: State, now: int, order: int, groups: int, n: int) -> Iterator[dict[str, float]]:
    """CPU seconds per group of each way's pass, round by round (see the module doc)."""
    clock = [now]
    watches = {}
    for way in ("snapshot", "verdict"):
        evaluator = (VerdictFirst if way == "verdict" else Evaluator)(state, cache_ttl_ms=0)
        watch = VerdictWatch(state, evaluator, {CLUSTER: ClusterSettings()}, {}, None, lambda: clock[0])
        watch.snapshots = Snapshots()
        watch.scan(clock[0])  # the first pass: every trend fitted
        watches[way] = watch
    rng = random.Random(1)
    for r in range(n):
        clock[0] += 2000
        for _ in range(int(groups * PARTITIONS * COMMITS_PER_S * 2)):
            g, p = rng.randrange(groups), rng.randrange(PARTITIONS)
            order += 1
            offset = 10_000 + 100 * SAMPLES + (clock[0] // 1000) % 1000
            state.apply(
                Commit(CLUSTER, f"group-{g:05d}", TOPICS[g % len(TOPICS)], p, offset, order, clock[0], clock[0])
            )
        if r % 5 == 4:
            for topic in TOPICS:
                for p in range(PARTITIONS):
                    state.apply(LogEndSample(CLUSTER, topic, p, 10_000 + 100 * SAMPLES + clock[0] // 100, clock[0]))
        state.discard_changes()
        took = {}
        for way in ("snapshot", "verdict") if r % 2 else ("verdict", "snapshot"):
            started = time.process_time()
            watches[way].scan(clock[0])
            took[way] = (time.process_time() - started) / groups
        yield took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    collector.tune()  # the garbage collector's cadence as `lagd run` sets it
    state, now, order = build(a.groups)
    gc.collect()
    gc.freeze()  # the long-lived state, as the daemon freezes it once caught up
    per: dict[str, list[float]] = {"snapshot": [], "verdict": []}
    for k, took in enumerate(rounds(state, now, order, a.groups, a.rounds), 1):
        for way, s in took.items():
            per[way].append(s)
        print(
            f"round {k}/{a.rounds}: snapshot {took['snapshot'] * 1e6:.0f} us, verdict {took['verdict'] * 1e6:.0f} us a group"
        )
    for way, label in (
        ("snapshot", "Evaluator.snapshot, as the watch runs"),
        ("verdict", "GroupVerdict then its snapshot, as before"),
    ):
        xs = per[way]
        print(
            f"watch pass over {a.groups:,} groups x {PARTITIONS} partitions, {label}: "
            f"median {statistics.median(xs) * 1e6:.0f} us, worst {max(xs) * 1e6:.0f} us of CPU a group"
        )
    ratio = statistics.median(per["verdict"]) / statistics.median(per["snapshot"])
    print(f"the watch's pass: {ratio:.2f}x less CPU a group than before (medians)")


if __name__ == "__main__":
    main()
