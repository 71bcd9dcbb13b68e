"""Postgres checkpoint pressure: when lagd's writes fill Postgres' WAL with whole pages.

After every Postgres checkpoint the first change to each page writes the whole page (8 KB) into
the WAL, not only the row. Workers (lagd.scale) rewrite each changed window in place: at a
million group-partitions the changes reach most of the windows table's pages between two
checkpoints, so on a Postgres with the stock `max_wal_size = 1GB` the whole pages fill the WAL,
which forces the next checkpoint, and so on. A single daemon appends windows to a log
(lagd.state.window_log), which writes few whole pages, but a catch-up's writes still fill the
stock WAL in seconds. Measured on a 2-core box on 2026-11-28:
- `python -m bench.bench_store --sustained 60` (20,000 changed windows of 1M and 20,000 history
  rows a second), windows upserted: stock settings 39.4 MB/s of WAL, 8,345 whole pages a second,
  4 checkpoints on request a minute; with `max_wal_size = 8GB` and `wal_compression = lz4` 9.6
  MB/s, 2,082, none. Appended to the log and copied: 24.0 MB/s, 128 whole pages a second, 2 a
  minute with the stock settings.
- `bench_http` at 1M group-partitions while measuring, windows upserted: 63.9 MB/s of WAL and
  10,609 whole pages a second against 12.0 MB/s and none; appended: 14.7 MB/s and 28, stock.
What the settings do not change: Postgres' CPU, nor lagd's latencies within the noise of single
runs. They save disk writes and replication traffic; docs/operations.md: Postgres for a large estate.

Postgres counts the checkpoints it ran on request apart from those of its timer; the persister
samples both now and then (`Store.checkpoint_sample`). This module keeps the samples of the
last few minutes and says what to change when requested checkpoints come often. Pure: the
times come in the samples.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

WINDOW_S = 600.0  # how far back the count looks
SAMPLE_EVERY_S = 60.0  # how often the persister samples (one cheap query)
# Requested checkpoints in the window that call for advice. Postgres' timer alone runs one every
# checkpoint_timeout (5 min by default), so 3 in 10 minutes is a WAL filling max_wal_size
# faster than the timer (or someone running CHECKPOINT, DROP DATABASE or backups that often).
REQUESTED_MIN = 3


# Where Postgres keeps the checkpoint counters: pg_stat_bgwriter up to 16, pg_stat_checkpointer
# from 17. Ask HAS_CHECKPOINTER_SQL first, then the query `counters_sql` names, for (requested, timed).
HAS_CHECKPOINTER_SQL = "SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL"


def counters_sql(has_checkpointer: bool) -> str:
    """The query for (checkpoints run on request, checkpoints run by the timer)."""
    if has_checkpointer:
        return "SELECT num_requested, num_timed FROM pg_stat_checkpointer"
    return "SELECT checkpoints_req, checkpoints_timed FROM pg_stat_bgwriter"


@dataclass(frozen=True, slots=True)
class CheckpointSample:
    """Postgres' checkpoint counters and WAL settings at one moment."""

    at: float  # monotonic seconds
    requested: int  # checkpoints run on request since the statistics were reset: mostly a full WAL
    timed: int  # checkpoints run by checkpoint_timeout
    max_wal_size: str  # as SHOW prints it ("1GB")
    wal_compression: str  # as SHOW prints it ("off", "lz4", ...)


class CheckpointPressure:
    """The samples of the last `window_s` seconds (and the one just before, the baseline)."""

    __slots__ = ("_samples", "window_s")

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: collections.deque[CheckpointSample] = collections.deque()

    def add(self, sample: CheckpointSample) -> None:
        if self._samples and (sample.requested < self._samples[-1].requested or sample.timed < self._samples[-1].timed):
            self._samples.clear()  # the statistics were reset: count from here
        self._samples.append(sample)
        while len(self._samples) > 1 and self._samples[1].at <= sample.at - self.window_s:
            self._samples.popleft()

    def requested_recently(self) -> int | None:
        """Checkpoints run on request between the oldest kept sample and the newest; None
        before two samples."""
        if len(self._samples) < 2:
            return None
        return self._samples[-1].requested - self._samples[0].requested

    def span_s(self) -> float:
        """The seconds `requested_recently` counts over."""
        return self._samples[-1].at - self._samples[0].at if len(self._samples) > 1 else 0.0

    def advice(self) -> str | None:
        """What to change in Postgres when requested checkpoints come often; None otherwise."""
        requested = self.requested_recently()
        if requested is None or requested < REQUESTED_MIN:
            return None
        last = self._samples[-1]
        minutes = max(1, round(self.span_s() / 60))
        timed = last.timed - self._samples[0].timed
        text = (
            f"Postgres ran {requested} checkpoints on request in the last {minutes} min ({timed} on its timer), most "
            f"likely because the WAL filled max_wal_size ({last.max_wal_size}). These count the whole server: "
            "every database's writes fill the WAL, lagd's among them. After each checkpoint the first change "
            "to every page goes whole into the WAL (to disk and to replicas), which fills it again. Where lagd "
            "writes most of it, raise max_wal_size (8GB at a million group-partitions)"
        )
        if last.wal_compression in ("off", "false", "0", ""):
            text += " and set wal_compression = lz4"
        return text + " (docs/operations.md: Postgres for a large estate); else look at the server's other writers"
