"""The notifier's incident engine when a whole cluster goes bad: cost per change as groups grow.

A broker outage turns every group of a cluster WARN or ERR within the correlation window, so
they all join one incident, and a notifier taking the lease over replays every group's current
verdict into the engine (its reconcile). The engine (lagd.notify.incidents.IncidentEngine,
pure, in this process) gets N groups joining one incident, then a status change of each
(half to ERR), then each back to WARN: three rounds of N changes, timed apart in CPU time
(time.process_time, so other load on the machine does not count). Each change names one
topic of ten and five partitions, as GroupChange does from a verdict. The figure that
matters is the time per change at each N: flat when a change costs the same however many
groups the incident holds; it grew with N while the engine counted over the members
(2,000 groups: 1 ms a change).

Run: `python -m bench.bench_incidents [--groups 1000,5000,10000]`. No target of its own
(issue 13: work that grows with the number of groups is incremental); the last line compares
the largest N's time per change with the smallest's.
"""

from __future__ import annotations

import argparse
import time

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.notify.incidents import GroupChange, IncidentEngine, Rules

T0 = 1_700_000_000_000


def change(g: int, status: GroupStatus, at: int) -> GroupChange:
    topic = f"topic-{g % 10:02d}"
    parts = tuple((topic, p, PartitionStatus.WARN, "") for p in range(5))
    return GroupChange("bench", f"group-{g:05d}", status, at, parts, (topic,), ())


def rounds(n: int) -> list[float]:
    """CPU seconds of the three rounds of `n` changes (see the module doc)."""
    engine = IncidentEngine(Rules())
    plan = [
        [change(g, GroupStatus.WARN, T0 + g) for g in range(n)],
        [change(g, GroupStatus.ERR if g % 2 else GroupStatus.WARN, T0 + 10_000 + g) for g in range(n)],
        [change(g, GroupStatus.WARN, T0 + 20_000 + g) for g in range(n)],
    ]
    took = []
    for changes in plan:
        started = time.process_time()
        for ch in changes:
            engine.apply(ch)
        took.append(time.process_time() - started)
    incidents = len(engine.dump_cluster("bench")["open"])
    assert incidents == 1, f"expected one cluster-wide incident, got {incidents}"
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--groups", default="1000,5000,10000", help="group counts, comma-separated")
    a = ap.parse_args()
    per_change: dict[int, float] = {}
    for n in (int(x) for x in a.groups.split(",")):
        joins, changes, back = rounds(n)
        per_change[n] = (joins + changes + back) / (3 * n)
        print(
            f"incidents: {n:,} groups in one incident: joins {joins * 1000:.0f} ms, status changes "
            f"{changes * 1000:.0f} ms, back {back * 1000:.0f} ms ({per_change[n] * 1e6:.1f} us a change)"
        )
    small, large = min(per_change), max(per_change)
    print(
        f"incidents: time per change at {large:,} groups is {per_change[large] / per_change[small]:.2f}x "
        f"that at {small:,} (flat: 1x; growing with the groups: {large / small:.0f}x)"
    )


if __name__ == "__main__":
    main()
