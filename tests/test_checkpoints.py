"""Postgres checkpoint pressure: the counting (pure), the sample read from a real Postgres, and
the advice reaching the log, /metrics' status and the reader's hint."""

from __future__ import annotations

import asyncio

import psycopg2  # type: ignore[import-untyped]
from structlog.testing import capture_logs

from lagd.state import persister
from lagd.state.checkpoints import REQUESTED_MIN, CheckpointPressure, CheckpointSample
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from lagd.state.windows import State


def sample(at: float, requested: int, timed: int = 0, compression: str = "off") -> CheckpointSample:
    return CheckpointSample(at, requested, timed, "1GB", compression)


def test_requested_checkpoints_are_counted_over_the_window_only() -> None:
    p = CheckpointPressure(window_s=600)
    assert p.requested_recently() is None and p.advice() is None  # one sample tells nothing yet
    p.add(sample(0, 10))
    assert p.requested_recently() is None
    p.add(sample(60, 11))
    assert p.requested_recently() == 1 and p.advice() is None
    for minute in range(2, 11):
        p.add(sample(minute * 60, 10 + minute))  # one a minute
    assert p.requested_recently() == 10 and p.span_s() == 600
    p.add(sample(660, 21))  # the sample of minute 0 leaves the window; minute 1 is the baseline
    assert p.requested_recently() == 10 and p.span_s() == 600
    for minute in range(12, 23):
        p.add(sample(minute * 60, 21))  # no more requested checkpoints
    assert p.requested_recently() == 0 and p.advice() is None


def test_a_statistics_reset_starts_the_count_again() -> None:
    p = CheckpointPressure()
    p.add(sample(0, 50))
    p.add(sample(60, 55))
    p.add(sample(120, 1))  # pg_stat_reset_shared: the counters went back
    assert p.requested_recently() is None
    p.add(sample(180, 2))
    assert p.requested_recently() == 1


def test_advice_names_the_settings_and_leaves_out_compression_already_on() -> None:
    p = CheckpointPressure()
    p.add(sample(0, 0, timed=3))
    p.add(sample(300, REQUESTED_MIN - 1, timed=3))
    assert p.advice() is None
    p.add(sample(600, REQUESTED_MIN, timed=4))
    advice = p.advice()
    assert advice is not None
    assert f"ran {REQUESTED_MIN} checkpoints on request in the last 10 min (1 on its timer)" in advice
    assert "max_wal_size (1GB)" in advice and "wal_compression = lz4" in advice
    # the counters are the whole server's: the advice does not put every checkpoint on lagd
    assert "These count the whole server" in advice and advice.endswith("else look at the server's other writers")
    q = CheckpointPressure()
    q.add(sample(0, 0, compression="lz4"))
    q.add(sample(60, 5, compression="lz4"))
    advice = q.advice()
    assert advice is not None and "in the last 1 min" in advice and "wal_compression" not in advice


async def test_a_sample_counts_a_checkpoint_run_on_request(database_url: str) -> None:
    store = Store.from_url(database_url)
    try:
        before = await store.checkpoint_sample()
        conn = psycopg2.connect(database_url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
            cur.execute("SHOW max_wal_size")
            size = cur.fetchone()[0]
            cur.execute("SHOW wal_compression")
            compression = cur.fetchone()[0]
        conn.close()
        # the checkpointer counts the checkpoint in its statistics after CHECKPOINT has returned
        # (PostgreSQL 15 flushes them from its main loop): read until it shows, for at most 10 s
        after = await store.checkpoint_sample()
        for _ in range(100):
            if after.requested > before.requested:
                break
            await asyncio.sleep(0.1)
            after = await store.checkpoint_sample()
    finally:
        await store.close()
    assert after.requested >= before.requested + 1  # other tests may drop databases meanwhile (also requested)
    assert after.timed >= before.timed and after.at > before.at
    assert (after.max_wal_size, after.wal_compression) == (size, compression)


class CountingStore:
    """A stand-in for Store's one query, so the test sets what Postgres reports."""

    def __init__(self, samples: list[CheckpointSample]) -> None:
        self.samples = samples

    async def checkpoint_sample(self) -> CheckpointSample:
        return self.samples.pop(0)


async def test_the_persister_keeps_the_advice_logs_it_once_and_drops_it_when_it_no_longer_holds() -> None:
    at = [0.0, 60.0, 120.0, 180.0, 800.0]
    reported = CountingStore([sample(at[0], 0), sample(at[1], 2), sample(at[2], 4), sample(at[3], 6), sample(at[4], 6)])
    wb = WriteBehind(store=reported, state=State(intervals=10))  # type: ignore[arg-type]
    wb.checkpoint_every = 0.0  # sample at every call
    with capture_logs() as logged:
        for _ in at:
            await persister.sample_checkpoints(wb)
            if wb.status.requested_checkpoints == 2:
                assert wb.status.postgres_advice is None
    warnings = [e for e in logged if e["event"] == "postgres checkpoints come often: its WAL fills max_wal_size"]
    assert len(warnings) == 1 and "max_wal_size" in warnings[0]["hint"]  # logged once while it held
    # the last sample is 620 s after the one before the burst: the window kept 180 s and 800 s
    assert wb.status.requested_checkpoints == 0 and wb.status.postgres_advice is None


async def test_an_unreadable_sample_leaves_the_writes_and_the_status_alone() -> None:
    class Failing:
        async def checkpoint_sample(self) -> CheckpointSample:
            raise OSError("connection refused")

    wb = WriteBehind(store=Failing(), state=State(intervals=10))  # type: ignore[arg-type]
    await persister.sample_checkpoints(wb)
    assert wb.status.requested_checkpoints is None and wb.status.postgres_advice is None
