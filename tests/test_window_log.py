"""Windows written as a log (lagd.state.window_log, Store with windows_log) against the real
Postgres: the newest row of a key wins at restore, a copy of every window into a new
generation lets the older ones go, a worker folds the log into the keyed table, and a
downgrade loses no window."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from alembic import command

from lagd.core.model import Commit, GroupDeleted, WindowEntry
from lagd.db.migrate import alembic_config
from lagd.state import persister
from lagd.state.changes import Changes, WindowKey
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from lagd.state.window_log import MIN_APPENDED, MIN_SLICE, WindowCopy
from lagd.state.windows import State, flat_window, window_bytes
from tests.postgres import query

NOV22 = 1_795_305_600_000  # 2026-11-22T00:00:00Z


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url)
    yield s
    await s.close()


def one(offset: int, order: int) -> bytes:
    return window_bytes(flat_window([WindowEntry(offset, order, NOV22 + order, NOV22 + order, 0)]))


def windows_of(state: State) -> dict[WindowKey, list[WindowEntry]]:
    return {
        (c, g, t, p): state.window(c, g, t, p)
        for c in state.clusters()
        for g in state.groups(c)
        for t, parts in (state.group_topics(c, g) or {}).items()
        for p in parts
    }


# --- the copy's bookkeeping (pure) ------------------------------------------------------


def test_a_copy_is_due_at_start_and_again_once_the_log_received_as_many_windows_as_state_holds() -> None:
    copy = WindowCopy()
    assert copy.due(appending_to=None, windows=0)  # nothing copied since start
    copy.begin(3, [("c", "a"), ("c", "b")])
    assert not copy.due(appending_to=3, windows=10)  # one runs
    copy.appended = 7  # appended while the copy ran: they count towards the next
    copy.finish()
    assert copy.copied == 3 and copy.generation is None and copy.appended == 7
    assert not copy.due(appending_to=3, windows=10)
    assert copy.due(appending_to=4, windows=10)  # writes went to a generation no copy covers
    copy.appended = MIN_APPENDED - 1
    assert not copy.due(appending_to=3, windows=10)
    copy.appended = MIN_APPENDED + 10
    assert not copy.due(appending_to=3, windows=MIN_APPENDED + 11)
    assert copy.due(appending_to=3, windows=MIN_APPENDED + 10)


def test_a_copy_walks_the_groups_as_they_then_stand() -> None:
    state = State()
    state.apply_many([Commit("c", g, "t", p, 1, 1, NOV22, NOV22) for g in ("a", "b", "x") for p in range(3)])
    copy = WindowCopy()
    copy.begin(1, state.window_groups())
    state.apply(GroupDeleted("c", "b", 5))  # gone before its turn: nothing of it is copied
    taken = copy.next_keys(state, 2)  # a whole group at least: x's three windows
    assert len(taken) == 3 and not copy.complete
    taken += copy.next_keys(state, 2)  # b has none left, so a's are taken too
    assert copy.complete
    assert sorted(taken) == [("c", g, "t", p) for g in ("a", "x") for p in range(3)]
    assert copy.slice_size(10) == MIN_SLICE and copy.slice_size(10**6) > MIN_SLICE


# --- the store ---------------------------------------------------------------------------


async def test_the_newest_row_of_a_key_wins_and_an_empty_one_removes_the_window(
    store: Store, database_url: str
) -> None:
    k0, k1, k2 = ("c", "g", "t", 0), ("c", "g", "t", 1), ("c", "h", "t", 0)
    await store.write(Changes(windows={k0: one(10, 1), k1: one(20, 2), k2: one(30, 3)}))
    await store.write(Changes(windows={k0: one(11, 4), k1: None}))
    await store.write(Changes(windows={k0: one(12, 5)}))
    assert query(database_url, "SELECT count(*) FROM window_log") == [(6,)]  # appended, not updated
    assert query(database_url, "SELECT count(*) FROM windows") == [(0,)]
    state = State()
    await store.restore(state)
    assert windows_of(state) == {
        k0: [WindowEntry(12, 5, NOV22 + 5, NOV22 + 5, 0)],
        k2: [WindowEntry(30, 3, NOV22 + 3, NOV22 + 3, 0)],
    }
    assert query(database_url, "SELECT group_name, partition FROM current_windows ORDER BY 1, 2") == [
        ("g", 0),
        ("h", 0),
    ]


async def test_the_log_overrides_the_windows_table_until_a_copy_completes(database_url: str) -> None:
    """Windows stored before the log (or by workers) stay in `windows` until the first copy
    is complete; the log's rows are newer, a removal included."""
    keyed = Store.from_url(database_url, windows_log=False)
    k0, k1 = ("c", "g", "t", 0), ("c", "g", "t", 1)
    try:
        await keyed.write(Changes(windows={k0: one(10, 1), k1: one(20, 2)}))
    finally:
        await keyed.close()
    store = Store.from_url(database_url)
    try:
        await store.write(Changes(windows={k1: None}))
        state = State()
        await store.restore(state)
        assert windows_of(state) == {k0: [WindowEntry(10, 1, NOV22 + 1, NOV22 + 1, 0)]}
        assert state.groups("c") == ["g"]
        # a copy of every window into a new generation: the old one and the table's rows go
        first = store.generation
        generation = await store.open_generation()
        assert await store.append_copy({k0: one(10, 1)}) == 0
        assert await store.complete_generation(generation) == 1
        assert query(database_url, "SELECT count(*) FROM windows") == [(0,)]
        assert query(database_url, f"SELECT to_regclass('window_log_{first}')") == [(None,)]
        again = State()
        await store.restore(again)
        assert windows_of(again) == windows_of(state)
    finally:
        await store.close()


async def test_a_worker_folds_the_log_into_the_windows_table(database_url: str) -> None:
    store = Store.from_url(database_url)
    k0, k1 = ("c", "g", "t", 0), ("c", "g", "t", 1)
    try:
        await store.write(Changes(windows={k0: one(10, 1), k1: one(20, 2)}))
        await store.write(Changes(windows={k1: None, k0: one(11, 3)}))
    finally:
        await store.close()
    worker = Store.from_url(database_url, windows_log=False)
    try:
        assert await worker.fold_log() == 1
        assert await worker.fold_log() == 0  # nothing left to fold
        assert query(database_url, "SELECT count(*) FROM window_generations") == [(0,)]
        assert query(database_url, "SELECT count(*) FROM window_log") == [(0,)]
        state = State()
        await worker.restore_owned(state, "c", range(50), 50)
        assert windows_of(state) == {k0: [WindowEntry(11, 3, NOV22 + 3, NOV22 + 3, 0)]}
    finally:
        await worker.close()


async def test_a_downgrade_moves_the_log_into_the_windows_table(database_url: str) -> None:
    store = Store.from_url(database_url)
    try:
        await store.write(Changes(windows={("c", "g", "t", 0): one(10, 1), ("c", "g", "t", 1): one(20, 2)}))
        await store.write(Changes(windows={("c", "g", "t", 1): None}))
    finally:
        await store.close()
    command.downgrade(alembic_config(database_url), "0008")
    assert query(database_url, "SELECT group_name, partition, length(entries) FROM windows") == [("g", 0, 40)]
    assert query(database_url, "SELECT to_regclass('window_log')") == [(None,)]


# --- the persister ---------------------------------------------------------------------


async def test_copies_between_flushes_keep_the_log_bounded_and_the_restore_exact(database_url: str) -> None:
    """Windows change, appear and go between flushes while copies run; after each flush a
    restore gives exactly State's windows, and the log keeps at most a few copies' worth."""
    rng = random.Random(13)
    state = State(intervals=3)
    store = Store.from_url(database_url)
    wb = WriteBehind(store=store, state=state)
    # small slices and copies that come often: each copy spans several flushes with changes between
    wb.window_copy = WindowCopy(min_slice=150, max_slice=150, min_appended=600)
    groups = [f"g{i}" for i in range(20)]
    order, copies, last = 0, 0, None
    try:
        for step in range(40):
            events: list[Any] = []
            for _ in range(rng.randrange(20, 200)):
                order += 1
                group, partition = rng.choice(groups), rng.randrange(30)
                events.append(Commit("c", group, "t", partition, order, order, NOV22 + order, NOV22 + order))
            if step % 7 == 3:
                order += 1
                events.append(GroupDeleted("c", rng.choice(groups), order))
            state.apply_many(events)
            assert await persister.flush(wb)
            restored = State(intervals=3)
            await store.restore(restored)
            assert windows_of(restored) == windows_of(state), step
            (logged,) = query(database_url, "SELECT count(*) FROM window_log")[0]
            # two generations of a copy and as many changed windows each, and a flush
            assert logged <= 4 * max(state.partitions_tracked(), 600) + 200, step
            copies += wb.window_copy.copied is not None and wb.window_copy.copied != last
            last = wb.window_copy.copied
            # what /metrics shows of the log
            assert wb.status.log_copies == copies and wb.status.log_appended == wb.window_copy.appended
            running = wb.window_copy.generation is not None
            assert wb.status.log_copy_groups_left == (len(wb.window_copy.groups) if running else 0)
        assert copies >= 3
        completed = query(database_url, "SELECT generation FROM window_generations WHERE completed_at IS NOT NULL")
        assert completed == [(wb.window_copy.copied,)]
    finally:
        await store.close()


async def test_a_copy_that_fails_starts_afresh_and_the_log_keeps_every_window(database_url: str) -> None:
    state = State()
    state.apply_many([Commit("c", "g", "t", p, 5, p + 1, NOV22, NOV22) for p in range(10)])
    store = Store.from_url(database_url)
    wb = WriteBehind(store=store, state=state)
    real = store.append_copy

    async def refused(*args: Any, **kwargs: Any) -> int:
        raise ConnectionError("postgres went away")

    try:
        store.append_copy = refused  # type: ignore[method-assign]
        assert await persister.flush(wb)  # the write is done; the copy's slice fails
        assert wb.window_copy.generation is None and wb.window_copy.copied is None
        assert query(database_url, "SELECT count(*) FROM window_generations WHERE completed_at IS NOT NULL") == [(0,)]
        store.append_copy = real  # type: ignore[method-assign]
        state.apply(Commit("c", "g", "t", 0, 6, 20, NOV22 + 1, NOV22 + 1))
        assert await persister.flush(wb)
        assert wb.window_copy.copied == store.generation
        # the copy started afresh in the generation the writes append to: no other was opened
        assert query(database_url, "SELECT generation FROM window_generations") == [(store.generation,)]
        restored = State()
        await store.restore(restored)
        assert windows_of(restored) == windows_of(state)
    finally:
        await store.close()
