"""The verdict watch's pass: CPU per group judged, as the watch judges now and as it judged before.

The watch (lagd.notify.watch.VerdictWatch) judges every group whose windows or samples changed
since its last pass and keeps its snapshot for the list pages. Under 20,000 commits/s at a
million group-partitions every group changes between two passes, so a pass judges them all;
the watch takes at most a tenth of a busy loop (watch.DUTY), so the CPU of a pass decides how
late a status change is noticed (bench_http's "verdict watch: one every N s").

Input: `--groups` groups x 100 partitions (10 topics of 100 partitions, each group reads one),
10 commits per group-partition 20 s apart, 30 log-end samples per topic-partition 10 s apart
and a log-start sample every 30 s (as log-start-refresh samples it: the log start a million
records below the log end, in 10,000-record segments, so retention is judged on every partition
and none is at risk);
lagd's rules (the default), state in this process (no broker, no Postgres: this times the
pass alone; bench_http runs it inside the whole daemon). After a first pass (every trend
fitted), each round advances the clock, applies commits and log-end samples, then times one
whole pass (VerdictWatch.scan, CPU time of this process: time.process_time) in two ways on two
copies of the watch over the same state, interleaved. Two scenarios:
- "a pass every 2 s" (the watch keeping up): the clock moves 2 s, the commits 20,000 a second
  would bring to a million group-partitions come, scaled (2% of the group-partitions a second,
  each to a random one: 4% of them between two passes, so most partitions' trend facts stand),
  and every fifth round a new log-end sample of every topic-partition (offset-refresh 10 s);
- "every partition new" (the watch behind, as at a million group-partitions under that load,
  where a pass started every 43-75 s: bench_http --duration 60): the clock moves 60 s, every
  group-partition gets a commit and every topic-partition a sample, so every trend is fitted
  again;
and the ways:
- "snapshot": what the watch runs (Evaluator.snapshot: each partition judged into a row);
- "verdict": what it ran until 2026-11-29 (Evaluator.group builds a GroupVerdict of
  PartitionVerdicts, then Snapshots.put reads them into rows).
Figures: CPU per group judged, median and worst over the rounds, each way and scenario; then
their ratio.

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

from lagd.core.config import ClusterSettings
from lagd.core.model import Commit, LogEndSample, LogStartSample
from lagd.evaluate import Evaluator
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots, snapshot_of
from lagd.notify.watch import VerdictWatch
from lagd.runtime import collector
from lagd.state.windows import State

CLUSTER = "bench"
T0 = 1_700_000_000_000
TOPICS = [f"topic-{t}" for t in range(10)]
PARTITIONS = 100
SAMPLES = 30
COMMITS_PER_S = 0.02  # of the group-partitions: 20,000 commits/s at a million
END_TS = T0 + 10_000 * (SAMPLES - 1)  # the newest sample before the rounds
BASE = 2_000_000  # offsets start here, so the log start can be a million records below the log end
LOG_END0 = BASE + 10_000 + 100 * (SAMPLES - 1)  # and its offset
RETAINED = 1_000_000  # records between the log start and the log end
SEGMENT = 10_000  # the log start moves in steps of this many records
LOG_START_EVERY_MS = 30_000  # log-start-refresh's default


def log_start_at(end: int) -> int:
    """The log start below log end `end`: RETAINED records back, in whole segments."""
    return (end - RETAINED) // SEGMENT * SEGMENT


def sample_log_starts(state: State, at: int, end: int) -> None:
    for topic in TOPICS:
        for p in range(PARTITIONS):
            state.apply(LogStartSample(CLUSTER, topic, p, log_start_at(end), at))


def log_end(now: int) -> int:
    """Every topic-partition's log end at `now` during the rounds: one record a second more, as
    bench_http's feeder appends; consumers commit within 4 records of it (as its commits do)."""
    return LOG_END0 + (now - END_TS) // 1000


def build(groups: int) -> tuple[State, int, int]:
    """The state (see the module doc), its clock and the last commit order used."""
    state = State(intervals=10, lag_samples=SAMPLES, record_history=False)
    for topic in TOPICS:
        for p in range(PARTITIONS):
            state.restore_log_end(
                (CLUSTER, topic, p),
                [BASE + 10_000 + 100 * i for i in range(SAMPLES)],
                [T0 + 10_000 * i for i in range(SAMPLES)],
            )
    for i in range(0, SAMPLES, 3):
        sample_log_starts(state, T0 + 10_000 * i, BASE + 10_000 + 100 * i)
    order = 0
    for r in range(10):
        ts = END_TS - 20_000 * (10 - r)
        for g in range(groups):
            topic = TOPICS[g % len(TOPICS)]
            for p in range(PARTITIONS):
                order += 1
                offset = LOG_END0 - 300 + 30 * r + p % 7
                state.apply(Commit(CLUSTER, f"group-{g:05d}", topic, p, offset, order, ts, ts))
        state.discard_changes()
    return state, END_TS + 1000, order


class VerdictFirst(Evaluator):
    """Judges for the watch as before Evaluator.snapshot: a GroupVerdict of PartitionVerdicts,
    then read into its snapshot (the same snapshot: tests/test_trend_c.py)."""

    def snapshot(self, cluster: str, group: str, now_ms: int) -> GroupSnapshot:
        return snapshot_of(self.group(cluster, group, now_ms, cache=False))


def commit_all(state: State, groups: int, now: int, order: int, rng: random.Random) -> int:
    """A commit to every group-partition and a sample of every topic-partition at `now`; the last order."""
    for topic in TOPICS:
        for p in range(PARTITIONS):
            state.apply(LogEndSample(CLUSTER, topic, p, log_end(now), now))
    sample_log_starts(state, now, log_end(now))
    for g in range(groups):
        topic = TOPICS[g % len(TOPICS)]
        for p in range(PARTITIONS):
            order += 1
            offset = log_end(now) - rng.randrange(4)
            state.apply(Commit(CLUSTER, f"group-{g:05d}", topic, p, offset, order, now, now))
    state.discard_changes()
    return order


def rounds(state: State, now: int, order: int, groups: int, n: int, all_new: bool) -> Iterator[dict[str, float]]:
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
        if all_new:
            clock[0] += 60_000
            order = commit_all(state, groups, clock[0], order, rng)
            yield timed(watches, clock[0], groups, r)
            continue
        clock[0] += 2000
        for _ in range(int(groups * PARTITIONS * COMMITS_PER_S * 2)):
            g, p = rng.randrange(groups), rng.randrange(PARTITIONS)
            order += 1
            offset = log_end(clock[0]) - rng.randrange(4)
            state.apply(
                Commit(CLUSTER, f"group-{g:05d}", TOPICS[g % len(TOPICS)], p, offset, order, clock[0], clock[0])
            )
        if r % 5 == 4:
            for topic in TOPICS:
                for p in range(PARTITIONS):
                    state.apply(LogEndSample(CLUSTER, topic, p, log_end(clock[0]), clock[0]))
        if r % (LOG_START_EVERY_MS // 2000) == 14:
            sample_log_starts(state, clock[0], log_end(clock[0]))
        state.discard_changes()
        yield timed(watches, clock[0], groups, r)


def timed(watches: dict[str, VerdictWatch], now: int, groups: int, r: int) -> dict[str, float]:
    """One pass of each watch (which first alternates by round), CPU seconds per group."""
    took = {}
    for way in ("snapshot", "verdict") if r % 2 else ("verdict", "snapshot"):
        started = time.process_time()
        watches[way].scan(now)
        took[way] = (time.process_time() - started) / groups
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    collector.tune()  # the garbage collector's cadence as `lagd run` sets it
    for all_new, scenario in ((False, "a pass every 2 s"), (True, "every partition new")):
        state, now, order = build(a.groups)
        gc.collect()
        gc.freeze()  # the long-lived state, as the daemon freezes it once caught up
        per: dict[str, list[float]] = {"snapshot": [], "verdict": []}
        for k, took in enumerate(rounds(state, now, order, a.groups, a.rounds, all_new), 1):
            for way, s in took.items():
                per[way].append(s)
            print(
                f"{scenario}, round {k}/{a.rounds}: snapshot {took['snapshot'] * 1e6:.0f} us, "
                f"verdict {took['verdict'] * 1e6:.0f} us a group"
            )
        for way, label in (
            ("snapshot", "Evaluator.snapshot, as the watch runs"),
            ("verdict", "GroupVerdict then its snapshot, as before"),
        ):
            xs = per[way]
            print(
                f"watch pass over {a.groups:,} groups x {PARTITIONS} partitions, {scenario}, {label}: "
                f"median {statistics.median(xs) * 1e6:.0f} us, worst {max(xs) * 1e6:.0f} us of CPU a group"
            )
        ratio = statistics.median(per["verdict"]) / statistics.median(per["snapshot"])
        print(f"the watch's pass, {scenario}: {ratio:.2f}x less CPU a group than before (medians)")
        del state
        gc.unfreeze()


if __name__ == "__main__":
    main()
