"""Write-behind against a private Postgres that the test stops and restarts under load."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import psycopg2  # type: ignore[import-untyped]
import pytest
from structlog.testing import capture_logs

from lagd.core.model import Commit, LogEndSample, ReaderPosition, WindowEntry
from lagd.db.migrate import upgrade
from lagd.embedded.services import Postgres, start_private_postgres
from lagd.state import persister
from lagd.state.changes import Changes
from lagd.state.persister import WriteBehind, drop_oldest_history
from lagd.state.store import Store
from lagd.state.windows import State, flat_window, window_bytes

NOV22 = 1_795_305_600_000


@pytest.fixture
def private_postgres() -> Iterator[Postgres]:
    pg = start_private_postgres()
    upgrade(pg.url)
    yield pg
    pg.stop()


def count(url: str, sql: str) -> Any:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]
    finally:
        conn.close()


async def test_outage_buffers_then_writes_everything(private_postgres: Postgres, settle: Any) -> None:
    pg = private_postgres
    state = State(intervals=10)
    store = Store.from_url(pg.url)
    wb = WriteBehind(store=store, state=state, flush_interval=0.05, backoff_max=0.4)
    task = asyncio.create_task(persister.run(wb))
    applied = 0

    async def produce(stop: asyncio.Event) -> None:
        """Commits for 20 partitions of one group, one round each tick, with log-end samples."""
        nonlocal applied
        while not stop.is_set():
            i = applied
            ts = NOV22 + i * 1000
            batch: list[Any] = [LogEndSample("c", "t", p, 10 * i + 5, ts) for p in range(20)]
            batch += [Commit("c", "g", "t", p, 10 * i, 1000 * i + p, ts, ts + 1) for p in range(20)]
            batch.append(ReaderPosition("c", 0, 1000 * i + 20))
            state.apply_many(batch)
            applied += 1
            wb.wake.set()
            await asyncio.sleep(0.01)

    stop_producing = asyncio.Event()
    producer = asyncio.create_task(produce(stop_producing))
    try:
        await settle(lambda: wb.status.last_write_ms is not None, what="a first write")

        await asyncio.to_thread(pg.stop_server)
        await settle(lambda: not wb.status.healthy, what="the persister to notice the outage")
        assert wb.status.last_error is not None
        first_pending = wb.status.pending
        failures = wb.status.failed_writes
        await settle(
            lambda: wb.status.pending > first_pending and wb.status.failed_writes >= failures + 2,
            what="pending to grow across retries",
        )
        assert not task.done() and not producer.done()
        assert await store.ping() is False

        await asyncio.to_thread(pg.start_server)  # same data, same port: the URL stays valid
        stop_producing.set()
        await producer
        await settle(lambda: wb.status.healthy and wb.status.pending == 0, timeout=30, what="recovery")
    finally:
        stop_producing.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await persister.final_flush(wb, timeout=10)
    await store.close()

    assert wb.status.dropped_history == 0 and wb.status.last_error is None
    assert count(pg.url, "SELECT count(*) FROM commit_history") == 20 * applied
    assert count(pg.url, "SELECT count(*) FROM log_end_history") == 20 * applied
    assert count(pg.url, 'SELECT count(DISTINCT (partition, "offset")) FROM commit_history') == 20 * applied
    assert count(pg.url, "SELECT next_offset FROM reader_positions") == 1000 * (applied - 1) + 20
    fresh = State(intervals=10)
    check = Store.from_url(pg.url)
    try:
        assert await check.restore(fresh) == {("c", 0): 1000 * (applied - 1) + 20}
    finally:
        await check.close()
    for p in range(20):
        assert fresh.window("c", "g", "t", p) == state.window("c", "g", "t", p)
        assert fresh.log_end_samples("c", "t", p) == state.log_end_samples("c", "t", p)
    newest = fresh.window("c", "g", "t", 3)[-1]
    assert newest == WindowEntry(
        10 * (applied - 1), 1000 * (applied - 1) + 3, NOV22 + (applied - 1) * 1000, NOV22 + (applied - 1) * 1000 + 1, 5
    )


def test_buffer_bound_drops_oldest_history_never_keyed_state() -> None:
    pending = Changes()
    pending.windows[("c", "g", "t", 0)] = window_bytes(flat_window([WindowEntry(1, 1, 1, 1, None)]))
    pending.positions[("c", 0)] = 9
    pending.commit_history = [(ts, "c", "g", "t", 0, ts, None, ts) for ts in (10, 20, 30, 40)]
    pending.log_end_history = [(ts, "c", "t", 0, ts) for ts in (15, 35)]
    pending.status_history = [(5, "c", "g", "OK")]

    assert drop_oldest_history(pending, limit=5) == 4
    assert [r[0] for r in pending.commit_history] == [30, 40]
    assert [r[0] for r in pending.log_end_history] == [35]
    assert pending.status_history == []
    assert pending.size() == 5

    assert drop_oldest_history(pending, limit=1) == 3  # history gone; keyed state stays over the bound
    assert pending.size() == 2 and ("c", "g", "t", 0) in pending.windows
    assert drop_oldest_history(pending, limit=10) == 0


async def test_persister_bound_counts_drops_while_database_is_away(settle: Any) -> None:
    state = State()
    store = Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere")
    wb = WriteBehind(store=store, state=state, flush_interval=0.02, backoff_max=0.05, buffer_max_changes=30)
    for i in range(50):
        state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
    assert await persister.flush(wb) is False
    # 1 window + 50 history rows against a bound of 30: the 21 oldest commits go
    assert wb.status.dropped_history == 21 and wb.status.pending == 30 and not wb.status.healthy
    assert wb.pending.commit_history[0][5] == 21
    assert await persister.final_flush(wb, timeout=5) is False
    await store.close()


async def test_apply_waits_for_a_write_when_the_backlog_is_full_and_never_in_an_outage(database_url: str) -> None:
    state = State()
    store = Store.from_url(database_url)
    wb = WriteBehind(store=store, state=state, flush_interval=3600.0, backlog_max_changes=20)
    task = asyncio.create_task(persister.run(wb))
    try:
        for i in range(30):
            state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
        assert persister.backlog_full(wb)  # 30 history rows and a window past 20
        # waits until the persister (woken by the wait itself, not its hour-long interval) has taken them
        await asyncio.wait_for(persister.wait_for_room(wb), 30)
        assert not persister.backlog_full(wb) and state.undrained() == 0
        assert wb.status.backlog_wait_seconds > 0  # counted: lagd_store_backlog_wait_seconds_total
        assert await persister.flush(wb)  # after the write in progress: nothing more to write
        assert count(database_url, "SELECT count(*) FROM commit_history WHERE group_name = 'g'") == 30
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()
    away = Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere")
    wb = WriteBehind(store=away, state=state, backoff_max=0.05, backlog_max_changes=20)
    for i in range(30, 60):
        state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
    assert persister.backlog_full(wb)
    assert await persister.flush(wb) is False  # Postgres away: an outage
    for i in range(60, 90):
        state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
    assert not persister.backlog_full(wb)  # ingest never waits for a database that is away
    await asyncio.wait_for(persister.wait_for_room(wb), 1)
    assert wb.status.backlog_wait_seconds == 0
    await away.close()


async def test_apply_waits_for_what_waits_beyond_the_write_in_progress_not_for_that_write(database_url: str) -> None:
    """Once a write has taken the waiting changes, apply goes on while Postgres takes it, and
    waits again only when more than the bound wait beyond it: a catch-up that ends with a big
    write must not hold every verdict back for the whole of that write. Postgres is held up by
    another connection's lock on the window log."""
    state = State()
    store = Store.from_url(database_url)
    wb = WriteBehind(store=store, state=state, flush_interval=3600.0, backlog_max_changes=20)
    blocker = await asyncpg.connect(database_url)
    lock = blocker.transaction()
    await lock.start()
    await blocker.execute("LOCK TABLE window_log IN ACCESS EXCLUSIVE MODE")
    task = asyncio.create_task(persister.run(wb))
    try:
        for i in range(30):
            state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
        assert persister.backlog_full(wb)
        await asyncio.wait_for(persister.wait_for_room(wb), 30)  # a write took them; Postgres holds it
        assert wb.in_flight == 31 and state.undrained() == 0 and not persister.backlog_full(wb)
        for i in range(30, 60):
            state.apply(Commit("c", "g", "t", 0, i, i, NOV22 + i, NOV22 + i))
        assert persister.backlog_full(wb)  # 30 history rows and a window beyond the write in progress
        waiting = asyncio.create_task(persister.wait_for_room(wb))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done() and wb.in_flight == 31  # the write is held: nothing takes the rest
        await lock.rollback()  # Postgres goes on: the first write ends, the next takes the rest
        await asyncio.wait_for(waiting, 30)
        assert not persister.backlog_full(wb) and state.undrained() == 0
        assert await persister.flush(wb)
        assert count(database_url, "SELECT count(*) FROM commit_history WHERE group_name = 'g'") == 60
        assert wb.in_flight == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await blocker.close()
        await store.close()


async def test_a_collect_cancelled_between_slices_keeps_all_it_took() -> None:
    """A flush cut short (a worker's revoke gives its flush 5 s) must not lose the changes its
    drain had already taken from State: the drain is finished before the collect ends."""
    state = State()
    partitions = persister.DRAIN_SLICE * 2 + 5
    state.apply_many([Commit("c", "g", "t", p, 7, p + 1, NOV22, NOV22) for p in range(partitions)])
    state.apply(ReaderPosition("c", 0, 99))
    wb = WriteBehind(store=Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere"), state=state)
    task = asyncio.create_task(persister.collect(wb))
    for _ in range(2):
        await asyncio.sleep(0)  # the first slice is copied, the task yields
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert len(wb.pending.windows) == partitions and all(arr for arr in wb.pending.windows.values())
    assert len(wb.pending.commit_history) == partitions and wb.pending.positions == {("c", 0): 99}
    assert state.undrained() == 0
    await wb.store.close()


async def test_a_final_flush_cut_short_by_the_stop_budget_is_a_warning_not_an_error(database_url: str) -> None:
    """Stopping right after a catch-up can leave more changes than Postgres takes in the stop
    budget: nothing is lost (the readers read them again at start), so it is not an ERROR;
    it is one while Postgres is away (test above)."""
    state = State()
    store = Store.from_url(database_url)
    wb = WriteBehind(store=store, state=state)
    state.apply(Commit("c", "slow", "t", 0, 1, 1, NOV22, NOV22))
    blocker = await asyncpg.connect(database_url)
    try:
        async with blocker.transaction():
            await blocker.execute("LOCK TABLE window_log IN ACCESS EXCLUSIVE MODE")  # the write waits on it
            with capture_logs() as logged:
                assert await persister.final_flush(wb, timeout=0.5) is False
    finally:
        await blocker.close()
        await store.close()
    levels = [
        (e["log_level"], e["event"]) for e in logged if "Postgres took" in e["event"] or "final flush" in e["event"]
    ]
    assert levels == [("warning", "stopping before Postgres took every change")]


async def test_a_big_written_batch_is_freed_a_slice_at_a_time_with_turns_between(database_url: str) -> None:
    """A catch-up's write holds hundreds of thousands of windows: freeing them at once held the
    loop 24-28 ms per 300,000. The flush frees them DISCARD_SLICE at a time after the write,
    taking a turn of the loop between slices, and writes every one first."""
    state = State()
    partitions = persister.DISCARD_SLICE * 2 + 5
    state.apply_many([Commit("c", "g", "t", p, 7, p + 1, NOV22, NOV22) for p in range(partitions)])
    after_write = 0
    wb: WriteBehind

    async def turn() -> None:
        nonlocal after_write
        if wb.status.last_write_ms is not None:  # the write is done: these turns free its batch
            after_write += 1
        await asyncio.sleep(0)

    # windows upserted (as workers write them): no copy into the window log takes turns after the write
    wb = WriteBehind(store=Store.from_url(database_url, windows_log=False), state=state, turn=turn)
    try:
        assert await persister.flush(wb)
    finally:
        await wb.store.close()
    assert after_write == 2  # 20,005 windows: two slices of 10,000 with a turn after each
    assert count(database_url, "SELECT count(*) FROM windows") == partitions
    assert not wb.pending


async def test_discard_frees_keyed_rows_down_to_one_slice_and_lets_other_tasks_run() -> None:
    done = Changes()
    for p in range(persister.DISCARD_SLICE * 2 + 5):
        done.windows[("c", "g", "t", p)] = b"\x00" * 8
    left: list[int] = []
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await asyncio.sleep(0)

    async def turn() -> None:
        left.append(len(done.windows))
        await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    before = ran
    await persister.discard(done, turn)
    task.cancel()
    assert left == [persister.DISCARD_SLICE + 5, 5]  # the rest goes with the batch, at once
    assert ran - before >= 2  # the other task ran between the slices


async def test_writes_resume_within_seconds_of_postgres_return_however_long_the_retry_wait(
    private_postgres: Postgres, settle: Any
) -> None:
    """Postgres comes back while the retry wait has doubled to 12.8 s: a probe every second
    finds it, so writes resume within 3 s, and the outage logged is the outage, not the wait
    (issue 50: 16.9 s after a 45 s outage, and outage_s counted the wait)."""
    pg = private_postgres
    state = State(intervals=10)
    store = Store.from_url(pg.url)
    wb = WriteBehind(store=store, state=state, flush_interval=0.2, backoff_max=30.0)
    task = asyncio.create_task(persister.run(wb))

    def commit(i: int) -> None:
        ts = NOV22 + i * 1000
        state.apply_many([Commit("c", "g", "t", 0, i, i, ts, ts + 1)])
        wb.wake.set()

    try:
        commit(1)
        await settle(lambda: wb.status.last_write_ms is not None, what="a first write")
        await asyncio.to_thread(pg.stop_server)
        stopped_at = time.monotonic()
        commit(2)
        # failures after 0.2, 0.4, ... 6.4 s of waiting: the next wait is 12.8 s
        await settle(lambda: wb.status.failed_writes >= 7, timeout=60, what="the retry wait doubled to 12.8 s")
        with capture_logs() as logs:
            await asyncio.to_thread(pg.start_server)
            back_at = time.monotonic()
            await settle(lambda: wb.status.healthy and wb.status.pending == 0, timeout=30, what="writes resumed")
            resumed_after = time.monotonic() - back_at
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()
    assert resumed_after < 3.0, resumed_after
    [resumed] = [e for e in logs if e["event"] == "postgres writes resumed"]
    assert resumed["outage_s"] <= back_at - stopped_at + 1.5, (resumed, back_at - stopped_at)
    assert count(pg.url, "SELECT count(*) FROM commit_history") == 2
