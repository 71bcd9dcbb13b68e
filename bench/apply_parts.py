"""lagd/state/_apply.c (the store's COPY encoders) against its Python, without Postgres (issue 52): CPU
ms, best of 5, of history_days, copy_history and copy_windows on fixed data, and of what the Python
does in their place (min/max/days_of; the rows as tuples for asyncpg's encoder, whose own encoding
is not counted here: it needs a connection).

Run: `python -m bench.apply_parts [--rows 500000] [--windows 100000]`.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

from lagd.state import store
from lagd.state.history import CommitRows
from lagd.state.windows import group_hash

T0 = 1_795_305_600_000


def best_ms(work: Callable[[], Any]) -> float:
    """CPU ms of the fastest of five runs."""
    times = []
    for _ in range(5):
        start = time.process_time()
        work()
        times.append((time.process_time() - start) * 1000)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--windows", type=int, default=100_000)
    args = ap.parse_args()
    rows = CommitRows()
    for i in range(args.rows):
        rows.add(T0 + 10 * i, "bench", f"group-{i % 2000}", f"topic-{i % 10}", i % 50, i, 7, T0 + 10 * i + 3)
    windows: dict[Any, bytes | None] = {
        ("bench", f"group-{k // 100}", "topic", k % 100): bytes(range(200)) + bytes(200) for k in range(args.windows)
    }
    step = store.COPY_HISTORY_ROWS

    def copy_history() -> None:
        assert store._copy_history is not None
        for i in range(0, len(rows), step):
            cols = (rows.ts, rows.cluster, rows.group, rows.topic, rows.partition, rows.offset, rows.lag)
            store._copy_history(*cols, rows.observed, i, min(i + step, len(rows)))

    def history_tuples() -> None:
        for i in range(0, len(rows), store.COPY_CHUNK):
            rows.rows(i, i + store.COPY_CHUNK)

    def copy_windows() -> None:
        assert store._copy_windows is not None
        pos, done = 0, False
        gone: list[Any] = []
        while not done:
            got = store._copy_windows(
                windows, pos, len(windows), store.COPY_WINDOWS_ROWS, store.COPY_WINDOWS_BYTES, gone
            )
            assert got is not None
            _, _, pos, done = got

    def window_tuples() -> None:
        list(store._window_rows(windows, functools.cache(group_hash), []))

    figures = {"history_days (python)": best_ms(lambda: (min(rows.ts), max(rows.ts), store.days_of(rows.ts)))}
    if store._history_days is not None:
        figures["history_days (compiled)"] = best_ms(lambda: store.history_days(rows.ts))
    figures["commit history rows as tuples (python)"] = best_ms(history_tuples)
    if store._copy_history is not None:
        figures["copy_history (compiled)"] = best_ms(copy_history)
    figures["window rows as tuples (python)"] = best_ms(window_tuples)
    if store._copy_windows is not None:
        figures["copy_windows (compiled)"] = best_ms(copy_windows)
    for name, ms in figures.items():
        print(f"{name}: {ms:.1f} ms")


if __name__ == "__main__":
    main()
