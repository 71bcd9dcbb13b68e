"""One Burrow `/lag` body of a group of 1,000 partitions, written in this process: the micro-benchmark
of the body writer (lagd.http.burrow_json), apart from the HTTP server and the daemon.

What it measures: `burrow_v3.group_status_json(verdict, only_bad=False)`, the text `/lag` answers
for a group (the envelope around it is one more f-string), timed by `timeit` over a GroupVerdict of
10 topics x 100 partitions, every partition with a full window (two entries, the newest without a
lag in one partition of ten), 20 owners and client ids, completes of 1.0 and some below. It prints
the best and the median of `--repeat` rounds of `--number` bodies each, per body, and says whether
the compiled writer ran (lagd.runtime.compiled: LAGD_NO_EXTENSIONS=1 runs the Python).

Run: `python -m bench.bench_body [--partitions 1000] [--number 200] [--repeat 15]`, and
`LAGD_NO_EXTENSIONS=1 python -m bench.bench_body` for the interpreted Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit
from array import array

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.evaluate import GroupVerdict, PartitionVerdict
from lagd.http import burrow_v3
from lagd.state.windows import NO_LAG


def group(partitions: int) -> GroupVerdict:
    """A group of `partitions` partitions over topics of 100, as the evaluator answers it."""
    statuses = list(PartitionStatus)
    parts = []
    for i in range(partitions):
        newest_lag = NO_LAG if i % 10 == 0 else 40 + i
        entries = array(
            "q",
            [
                *(1_000_000 + i, 1, 1_764_000_000_000 + i, 1_764_000_000_100 + i, 35 + i),  # the oldest entry
                *(1_000_900 + i, 10, 1_764_000_180_000 + i, 1_764_000_180_100 + i, newest_lag),  # the newest
            ],
        )
        parts.append(
            PartitionVerdict(
                topic=f"orders-{i // 100}",
                partition=i % 100,
                status=statuses[i % len(statuses)] if i % 7 == 0 else PartitionStatus.OK,
                entries=entries,
                current_lag=40 + i,
                complete=1.0 if i % 5 else 0.7,
                owner=f"/10.0.0.{i % 20}",
                client_id=f"consumer-{i % 20}-7f3a",
                lag_seconds=1.5,
                lag_seconds_estimated=False,
                why="",
                since=None,
            )
        )
    return GroupVerdict(
        cluster="bench",
        group="group-1",
        status=GroupStatus.WARN,
        complete=0.94,
        partitions=parts,
        partition_count=partitions,
        maxlag=parts[-1],
        totallag=sum(p.current_lag for p in parts),
        lag_seconds=1.5,
        evaluated_at=1_764_000_200_000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--number", type=int, default=200, help="bodies per round")
    parser.add_argument("--repeat", type=int, default=15, help="rounds")
    args = parser.parse_args()
    verdict = group(args.partitions)
    # The body writer: burrow_v3.WRITER (lagd.http.burrow_json, compiled where built); before
    # 2026-12-03 burrow_v3.group_status_json itself, over lagd/http/_json.c where built.
    writer = getattr(burrow_v3, "WRITER", burrow_v3)
    write = writer.group_status_json
    body = write(verdict, False)
    if hasattr(burrow_v3, "WRITER"):
        how = f"writer {writer.__name__} ({'compiled' if str(writer.__file__).endswith('.so') else 'Python'})"
    else:
        how = f"_json.c {'on' if getattr(burrow_v3, '_partitions_json', None) is not None else 'off'}"
    print(
        f"== one /lag body of {args.partitions} partitions ({len(body):,} bytes), {how}, "
        f"LAGD_NO_EXTENSIONS={os.environ.get('LAGD_NO_EXTENSIONS', '')!r}; {args.repeat} rounds of {args.number}",
        flush=True,
    )
    rounds = timeit.repeat(lambda: write(verdict, False), number=args.number, repeat=args.repeat)
    per_body = [r / args.number * 1000 for r in rounds]
    print(f"per body: best {min(per_body):.3f} ms, median {statistics.median(per_body):.3f} ms")


if __name__ == "__main__":
    main()
