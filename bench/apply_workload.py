"""A fixed workload of State.apply_many and Drain, for instruction counts under callgrind: the commit
apply and window drain of lagd/state/apply.py, compiled, or the Python (LAGD_NO_EXTENSIONS=1). The
hand C it replaced was measured with it before it went (bench/HISTORY.md, issue 52).

Run: `[LAGD_NO_EXTENSIONS=1] PYTHONHASHSEED=0 valgrind --tool=callgrind python -m bench.apply_workload
MODE [--commits N] [--groups G]`. MODE `setup` fills G x 50 windows (G groups, 200 unless told, x 10 topics x 5 partitions,
intervals 10, 360 log-end samples a partition) and stops; `apply` then applies N steady-state commits
(each appended to a full window, its oldest dropped, history recorded) in batches of 20,000, the
changes discarded; `drain` the same with drain_changes after every batch, as bench_state runs it. The
cost of applying is apply's count less setup's, that of draining drain's less apply's.
"""

from __future__ import annotations

import argparse

from lagd.core.model import Commit
from lagd.state import windows
from lagd.state.windows import State

GROUPS, TOPICS, PARTITIONS, INTERVALS, SAMPLES = 200, 10, 5, 10, 360
BATCH = 20_000
T0 = 1_700_000_000_000


def filled(groups: int) -> tuple[State, int, int]:
    """A State whose windows are full (`groups` x TOPICS x PARTITIONS), with its order counter and newest time."""
    state = State(intervals=INTERVALS, record_history=False)
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            offsets = [10_000 + 100 * i for i in range(SAMPLES)]
            state.restore_log_end(("c", f"topic-{t}", p), offsets, [T0 + 10_000 * i for i in range(SAMPLES)])
    end_ts = T0 + 10_000 * (SAMPLES - 1)
    order = 0
    for r in range(INTERVALS):
        ts = end_ts - 60_000 * (INTERVALS - r)
        for g in range(groups):
            for t in range(TOPICS):
                for p in range(PARTITIONS):
                    order += 1
                    state.apply(Commit("c", f"group-{g}", f"topic-{t}", p, 40_000 + 400 * r, order, ts, ts))
    state.discard_changes()
    return state, order, end_ts


def steady(order: int, ts: int, n: int, groups: int) -> list[Commit]:
    """n commits, each of a window already full, a group after another."""
    events = []
    for i in range(n):
        g, t, p = i % groups, (i // groups) % TOPICS, (i // (groups * TOPICS)) % PARTITIONS
        events.append(Commit("c", f"group-{g}", f"topic-{t}", p, 45_000 + i % 500, order + 1 + i, ts, ts))
    return events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["setup", "apply", "drain"])
    ap.add_argument("--commits", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=GROUPS)
    args = ap.parse_args()
    state, order, ts = filled(args.groups)
    state.record_history = True
    events = steady(order, ts, args.commits, args.groups)
    if args.mode != "setup":
        for k in range(0, len(events), BATCH):
            state.apply_many(events[k : k + BATCH])
            if args.mode == "drain":
                state.drain_changes()
            else:
                state.discard_changes()
    print("compiled" if windows._apply_commits is not None else "python", args.mode, state.partitions_tracked())


if __name__ == "__main__":
    main()
