"""Store against the real Postgres: every kind of change round-trips, retention, migrations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg2  # type: ignore[import-untyped]
import pytest
from alembic import command

from lagd.core.model import (
    Commit,
    GroupDeleted,
    GroupMembers,
    LogEndSample,
    OffsetDeleted,
    PartitionOwner,
    ReaderPosition,
    RecordTimestamp,
    TopicDeleted,
    WindowEntry,
)
from lagd.core.ruleset import lagd_rules
from lagd.db.migrate import alembic_config, upgrade
from lagd.db.schema import metadata
from lagd.state.changes import Changes
from lagd.state.pauses import PauseSettings, stop_floor
from lagd.state.store import DAY_MS, Store, partition_name
from lagd.state.windows import State, flat_window, window_bytes
from tests.postgres import query

NOV22 = 1_795_305_600_000  # 2026-11-22T00:00:00Z
assert NOV22 % DAY_MS == 0


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url)
    yield s
    await s.close()


HAND_WINDOW = [
    WindowEntry(100, 1, NOV22 - 2000, NOV22 - 1990, None),
    WindowEntry(110, 2, NOV22 - 1000, NOV22 - 990, 5),
]


def hand_changes() -> Changes:
    ch = Changes()
    ch.windows[("c1", "g1", "t", 0)] = window_bytes(flat_window(HAND_WINDOW))
    ch.windows[("c1", "g1", "t", 1)] = window_bytes(flat_window([WindowEntry(7, 3, NOV22 - 500, NOV22 - 400, 0)]))
    ch.members[("c1", "g1")] = GroupMembers(
        "c1",
        "g1",
        9,
        (PartitionOwner("t", 0, "/10.0.0.1", "app-1", "m-1"), PartitionOwner("t", 1, "/10.0.0.2", "app-2")),
        "Stable",
    )
    ch.tombstones[("c1", "old")] = 42
    ch.log_end[("c1", "t", 0)] = ([100, 115], [NOV22 - 3000, NOV22 - 1000], None)
    ch.positions[("c1", 0)] = 1234
    ch.positions[("c1", 7)] = 99
    ch.positions[("c2", 0)] = 5
    # history across the day boundary: two rows the day before, one on the 22nd
    ch.commit_history += [
        (NOV22 - 1, "c1", "g1", "t", 0, 100, None, NOV22 - 1),
        (NOV22 - 2, "c1", "g1", "t", 1, 7, 0, NOV22),
        (NOV22 + 5, "c1", "g1", "t", 0, 110, 5, NOV22 + 6),
    ]
    ch.log_end_history += [(NOV22 - 3000, "c1", "t", 0, 100), (NOV22 + 1000, "c1", "t", 0, 115)]
    ch.status_history += [(NOV22, "c1", "g1", "WARN")]
    return ch


async def test_write_then_restore_every_kind(store: Store, database_url: str) -> None:
    await store.write(hand_changes())

    state = State(intervals=10)
    positions = await store.restore(state)

    assert positions == {("c1", 0): 1234, ("c1", 7): 99, ("c2", 0): 5}
    assert await store.positions("c1") == {0: 1234, 7: 99}
    assert state.window("c1", "g1", "t", 0) == HAND_WINDOW
    assert state.window("c1", "g1", "t", 1) == [WindowEntry(7, 3, NOV22 - 500, NOV22 - 400, 0)]
    assert state.owner("c1", "g1", "t", 0) == PartitionOwner("t", 0, "/10.0.0.1", "app-1", "m-1")
    assert state.owner("c1", "g1", "t", 1) == PartitionOwner("t", 1, "/10.0.0.2", "app-2", "")
    assert state.log_end_samples("c1", "t", 0) == ([100, 115], [NOV22 - 3000, NOV22 - 1000])
    # the restored tombstone refuses a replayed older commit of the deleted group
    state.apply(Commit("c1", "old", "t", 0, 1, 41, NOV22, NOV22))
    assert state.groups("c1") == ["g1"]

    assert query(database_url, "SELECT ts, partition, lag FROM commit_history_20261121 ORDER BY ts") == [
        (NOV22 - 2, 1, 0),
        (NOV22 - 1, 0, None),
    ]
    assert query(database_url, 'SELECT ts, "offset", lag FROM commit_history_20261122') == [(NOV22 + 5, 110, 5)]
    assert query(database_url, "SELECT ts FROM log_end_history_20261121") == [(NOV22 - 3000,)]
    assert query(database_url, "SELECT ts FROM log_end_history_20261122") == [(NOV22 + 1000,)]
    assert query(database_url, "SELECT ts, status FROM status_history") == [(NOV22, "WARN")]
    assert query(database_url, "SELECT state FROM group_members") == [("Stable",)]


async def test_the_mark_of_a_record_read_is_stored_and_restored(store: Store, database_url: str) -> None:
    """Lag in seconds read from a record (lagd.ingest.record_ts) is exact after a restart at once."""
    s = State(intervals=3)
    for i in range(3):
        s.apply(LogEndSample("c1", "t", 0, 1000, NOV22 + 10_000 * i))
    s.apply(RecordTimestamp("c1", "t", 0, 400, 401, NOV22 - 60_000))
    await store.write(s.drain_changes())
    assert query(database_url, "SELECT record FROM log_end") == [([400, 401, NOV22 - 60_000, 0],)]
    state = State(intervals=3)
    await store.restore(state)
    le = state.log_end_of("c1", "t", 0)
    assert le is not None and (le.record_from, le.coarse_offsets.tolist()) == (400, [401])
    worker = State(intervals=3)  # a worker given groups of the topic restores its samples alone
    assert await store.restore_log_ends(worker, "c1", ["t"]) == 1
    le = worker.log_end_of("c1", "t", 0)
    assert le is not None and le.record_from == 400


async def test_rewrite_is_idempotent_and_none_deletes(store: Store, database_url: str) -> None:
    first = hand_changes()
    await store.write(first)
    keyed = hand_changes()
    keyed.commit_history, keyed.log_end_history, keyed.status_history = [], [], []
    await store.write(keyed)  # the same keyed state again changes nothing
    assert query(database_url, "SELECT count(*) FROM current_windows") == [(2,)]
    assert query(database_url, "SELECT count(*) FROM reader_positions") == [(3,)]

    later = Changes()
    later.windows[("c1", "g1", "t", 1)] = None
    later.windows[("c1", "g1", "t", 0)] = window_bytes(flat_window([WindowEntry(120, 8, NOV22, NOV22 + 1, None)]))
    later.members[("c1", "g1")] = None
    later.log_end[("c1", "t", 0)] = None
    later.positions[("c1", 0)] = 2000
    later.tombstones[("c1", "old")] = 50
    await store.write(later)

    state = State()
    positions = await store.restore(state)
    assert positions[("c1", 0)] == 2000
    assert state.group_topics("c1", "g1") == {"t": [0]}
    assert state.window("c1", "g1", "t", 0) == [WindowEntry(120, 8, NOV22, NOV22 + 1, None)]
    assert state.owner("c1", "g1", "t", 0) is None
    assert state.log_end_samples("c1", "t", 0) == ([], [])
    assert query(database_url, "SELECT tombstone_order FROM group_tombstones") == [(50,)]
    assert query(database_url, "SELECT count(*) FROM commit_history") == [(3,)]


async def test_state_drain_write_restore_equal(store: Store) -> None:
    state = State(intervals=3)
    events: list[Any] = [
        LogEndSample("c", "orders", 0, 50, NOV22 - 10_000),
        LogEndSample("c", "orders", 1, 80, NOV22 - 10_000),
        LogEndSample("c", "gone", 0, 9, NOV22 - 10_000),
        GroupMembers("c", "billing", 3, (PartitionOwner("orders", 0, "/h", "cid"),), "Stable"),
    ]
    for i in range(5):
        events.append(Commit("c", "billing", "orders", 0, 10 * i, 100 + i, NOV22 + i * 1000, NOV22 + i * 1000 + 5))
        events.append(Commit("c", "billing", "orders", 1, 20 * i, 200 + i, NOV22 + i * 1000, NOV22 + i * 1000 + 5))
    events += [
        Commit("c", "late", "orders", 0, 3, 300, NOV22 - 5, NOV22),
        Commit("c", "temp", "orders", 1, 1, 400, NOV22, NOV22),
        Commit("c", "temp", "gone", 0, 1, 401, NOV22, NOV22),
        OffsetDeleted("c", "billing", "orders", 1, 500),
        GroupDeleted("c", "temp", 600),
        TopicDeleted("c", "gone"),
        ReaderPosition("c", 12, 601),
    ]
    state.apply_many(events)
    store_changes = state.drain_changes()
    await store.write(store_changes)
    # A second round after the first flush: overwrites and removals of already-stored rows.
    state.apply_many(
        [Commit("c", "late", "orders", 0, 6, 700, NOV22 + 9000, NOV22 + 9001), ReaderPosition("c", 12, 701)]
    )
    await store.write(state.drain_changes())

    fresh = State(intervals=3)
    positions = await store.restore(fresh)
    assert positions == {("c", 12): 701}
    assert fresh.groups("c") == state.groups("c") == ["billing", "late"]
    for group in state.groups("c"):
        topics = state.group_topics("c", group)
        assert fresh.group_topics("c", group) == topics
        assert topics is not None
        for topic, parts in topics.items():
            for p in parts:
                assert fresh.window("c", group, topic, p) == state.window("c", group, topic, p)
                assert fresh.owner("c", group, topic, p) == state.owner("c", group, topic, p)
    assert fresh.topics("c") == state.topics("c") == ["orders"]
    for p in (0, 1):
        assert fresh.log_end_samples("c", "orders", p) == state.log_end_samples("c", "orders", p)
    assert len(fresh.window("c", "billing", "orders", 0)) == 3


async def test_restored_min_distance_window_still_refuses_merged_replays(store: Store) -> None:
    """The rule that keeps merged commits out needs nothing but the stored window."""
    a = Commit("c", "g", "t", 0, 100, 1, NOV22, NOV22 + 1)
    b = Commit("c", "g", "t", 0, 200, 2, NOV22 + 1000, NOV22 + 1001)  # merges into a's entry
    c = Commit("c", "g", "t", 0, 300, 3, NOV22 + 6000, NOV22 + 6001)
    state = State(intervals=3, min_distance_ms=5000)
    state.apply_many([LogEndSample("c", "t", 0, 1000, NOV22 - 1), a, b, c])
    await store.write(state.drain_changes())
    fresh = State(intervals=3, min_distance_ms=5000)
    await store.restore(fresh)
    want = [WindowEntry(200, 2, NOV22, NOV22 + 1, 800), WindowEntry(300, 3, NOV22 + 6000, NOV22 + 6001, 700)]
    assert fresh.window("c", "g", "t", 0) == state.window("c", "g", "t", 0) == want
    fresh.apply_many([a, b, c, a])
    assert fresh.window("c", "g", "t", 0) == want
    assert not fresh.drain_changes().windows


async def test_retention_drops_only_old_partitions(store: Store, database_url: str) -> None:
    ch = Changes()
    for d in range(-4, 1):
        ch.commit_history.append((NOV22 + d * DAY_MS + 60_000, "c", "g", "t", 0, d + 10, 1, NOV22))
        ch.log_end_history.append((NOV22 + d * DAY_MS, "c", "t", 0, d + 10))
    ch.status_history += [(NOV22 - 3 * DAY_MS, "c", "g", "OK"), (NOV22 - DAY_MS, "c", "g", "WARN")]
    await store.write(ch)
    # now is noon on the 22nd, keep 2 days: the 19th and 18th end before the cutoff (20th noon)
    dropped = await store.apply_retention(NOV22 + DAY_MS // 2, days=2)
    assert dropped == 4
    names = {
        r[0]
        for r in query(
            database_url,
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relkind = 'r'",
        )
    }
    assert names == {
        partition_name(t, NOV22 // DAY_MS + d) for t in ("commit_history", "log_end_history") for d in (-2, -1, 0)
    }
    assert query(database_url, 'SELECT "offset" FROM commit_history ORDER BY ts') == [(8,), (9,), (10,)]
    assert query(database_url, "SELECT status FROM status_history") == [("WARN",)]
    # the store notices the drop: a late row for a dropped day recreates its partition
    late = Changes(commit_history=[(NOV22 - 4 * DAY_MS, "c", "g", "t", 0, 1, None, NOV22)])
    await store.write(late)
    assert query(database_url, "SELECT count(*) FROM commit_history_20261118") == [(1,)]
    assert await store.apply_retention(NOV22 + DAY_MS // 2, days=2) == 1


async def test_ping_and_unreachable_database() -> None:
    bad = Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere")
    assert await bad.ping() is False
    with pytest.raises(OSError):
        await bad.write(Changes(positions={("c", 0): 1}))
    await bad.close()


async def test_ping_live(store: Store) -> None:
    assert await store.ping() is True


def test_migration_up_and_down(empty_database_url: str) -> None:
    tables = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
    assert query(empty_database_url, tables) == []
    upgrade(empty_database_url)
    up = [r[0] for r in query(empty_database_url, tables)]
    for name in ("windows", "group_members", "group_tombstones", "log_end", "reader_positions", "commit_history"):
        assert name in up
    assert set(up) - {"alembic_version"} == set(metadata.tables)  # the migrations make what lagd.db.schema says
    upgrade(empty_database_url)  # at head: nothing to do
    command.downgrade(alembic_config(empty_database_url), "base")
    assert [r[0] for r in query(empty_database_url, tables)] == ["alembic_version"]


def test_a_migration_tells_from_which_revision_to_which(empty_database_url: str) -> None:
    """The quick-start trial: lagd migrated its database without a word. `upgrade` says from
    which revision to which, and the words lagd logs (and `lagd db upgrade` prints) say so."""
    from alembic.script import ScriptDirectory

    from lagd.db.migrate import migration_summary

    head = ScriptDirectory.from_config(alembic_config(empty_database_url)).get_current_head()
    assert upgrade(empty_database_url, "0003") == (None, "0003")
    assert upgrade(empty_database_url) == ("0003", head)
    assert upgrade(empty_database_url) == (head, head)
    assert migration_summary(None, "0003") == "database schema created (revision 0003)"
    assert migration_summary("0003", head) == f"database schema migrated from revision 0003 to {head}"
    assert migration_summary(head, head) == f"database schema up to date (revision {head})"


async def test_migration_0004_converts_windows_both_ways(empty_database_url: str) -> None:
    """Windows stored as five arrays (0003) become one bytea (0004) and back, null lags kept."""
    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0003")
    extreme = 2**63 - 1
    conn = psycopg2.connect(empty_database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO windows VALUES ('c1', 'g1', 't', 0, %s, %s, %s, %s, %s), ('c1', 'g1', 't', 1, %s, %s, %s, %s, %s)",
                (
                    *([100, 110], [1, 2], [NOV22 - 2000, NOV22 - 1000], [NOV22 - 1990, NOV22 - 990], [None, 5]),
                    *([extreme], [-5], [0], [-(2**63) + 1], [0]),
                ),
            )
    finally:
        conn.close()
    command.upgrade(cfg, "head")
    state = State(intervals=10)
    s = Store.from_url(empty_database_url)
    try:
        await s.restore(state)
    finally:
        await s.close()
    assert state.window("c1", "g1", "t", 0) == HAND_WINDOW
    assert state.window("c1", "g1", "t", 1) == [WindowEntry(extreme, -5, 0, -(2**63) + 1, 0)]
    command.downgrade(cfg, "0003")
    rows = query(empty_database_url, "SELECT * FROM windows ORDER BY partition")
    assert rows == [
        ("c1", "g1", "t", 0, [100, 110], [1, 2], [NOV22 - 2000, NOV22 - 1000], [NOV22 - 1990, NOV22 - 990], [None, 5]),
        ("c1", "g1", "t", 1, [extreme], [-5], [0], [-(2**63) + 1], [0]),
    ]


async def test_asyncpg_url_form_and_impossible_history_times(database_url: str) -> None:
    store = Store.from_url(database_url.replace("postgresql://", "postgresql+asyncpg://"))
    try:
        assert await store.ping() is True
        ch = Changes(
            commit_history=[
                (10**18, "c", "g", "t", 0, 1, None, NOV22),  # beyond year 9999: no day partition can hold it
                (NOV22, "c", "g", "t", 0, 2, None, NOV22),
            ]
        )
        await store.write(ch)
        assert store.skipped_history == 1
        assert query(database_url, 'SELECT "offset" FROM commit_history') == [(2,)]
    finally:
        await store.close()


def test_days_of_a_column_of_timestamps() -> None:
    from array import array

    from lagd.state.store import DAY_MS, days_of

    assert days_of(array("q")) == set()
    assert days_of(array("q", [5 * DAY_MS + 1, 5 * DAY_MS + 7])) == {5}
    assert days_of(array("q", [6 * DAY_MS, 5 * DAY_MS + 7])) == {5, 6}
    assert days_of(array("q", [2 * DAY_MS, 9 * DAY_MS, 2 * DAY_MS + 1])) == {2, 9}


async def test_keyed_rows_beyond_one_copy_chunk_are_all_written(store: Store) -> None:
    """Windows, members and log-end rows are built and copied a chunk at a time: a flush with
    more of each than one chunk holds restores whole."""
    from lagd.state.store import COPY_CHUNK, LOG_END_CHUNK

    state = State(intervals=3)
    groups = COPY_CHUNK + 7
    partitions = LOG_END_CHUNK * 2 + 3
    events: list[Any] = [LogEndSample("big", "orders", p, 500 + p, NOV22 - 10_000) for p in range(partitions)]
    for g in range(groups):
        name = f"g{g:05d}"
        events.append(GroupMembers("big", name, g, (PartitionOwner("orders", g % partitions, "/h", "cid"),), "Stable"))
        events.append(Commit("big", name, "orders", g % partitions, g, 10 + g, NOV22, NOV22 + 1))
    state.apply_many(events)
    await store.write(state.drain_changes())
    fresh = State(intervals=3)
    await store.restore(fresh)
    assert fresh.groups("big") == state.groups("big") and len(fresh.groups("big")) == groups
    for g in (0, COPY_CHUNK - 1, COPY_CHUNK, groups - 1):
        name, p = f"g{g:05d}", g % partitions
        assert fresh.window("big", name, "orders", p) == state.window("big", name, "orders", p)
        assert fresh.owner("big", name, "orders", p) == state.owner("big", name, "orders", p) is not None
    assert all(
        fresh.log_end_samples("big", "orders", p) == state.log_end_samples("big", "orders", p)
        for p in range(partitions)
    )


async def test_a_restart_keeps_each_groups_pauses(store: Store, database_url: str) -> None:
    """Pauses (lagd.state.pauses) are written with the rest of the state and restored at start:
    a restarted lagd judges the group's next silence against the pauses it saw before. A commit
    applied again (a replay after the restart) adds no pause twice; a removed group's row goes."""
    pauses = PauseSettings()
    state = State(intervals=10, rules=lagd_rules(15_000), pauses=pauses)

    def commits(group: str, start_s: int, seconds: int) -> list[Commit]:
        return [
            Commit("c", group, "orders", p, 100 * t + p, 1_000 * t + p, NOV22 + t * 1000, NOV22 + t * 1000)
            for t in range(start_s, start_s + seconds)
            for p in (0, 1)
        ]

    # deploys: 40 s and 75 s of silence (every second before, between and after); "calm" never pauses
    state.apply_many([*commits("deploys", 0, 60), *commits("deploys", 100, 60), *commits("deploys", 235, 30)])
    state.apply_many([*commits("calm", 0, 300), *commits("gone", 0, 10)])
    assert state.group_pauses("c", "deploys") == (NOV22, NOV22 + 100_000, 41_000, NOV22 + 235_000, 76_000)
    assert state.group_pauses("c", "calm") == (NOV22,)
    await store.write(state.drain_changes())
    state.remove_group("c", "gone")
    await store.write(state.drain_changes())
    assert query(database_url, "SELECT group_name FROM group_pauses ORDER BY group_name") == [("calm",), ("deploys",)]

    fresh = State(intervals=10, rules=lagd_rules(15_000), pauses=pauses)
    await store.restore(fresh)
    for group in ("deploys", "calm"):
        assert fresh.group_pauses("c", group) == state.group_pauses("c", group)
    now = NOV22 + 300_000
    assert stop_floor(fresh.group_pauses("c", "deploys"), now, pauses) == (114_000, 76_000.0)
    fresh.apply_many(commits("deploys", 235, 30))  # replayed after the restart: nothing new
    assert fresh.group_pauses("c", "deploys") == state.group_pauses("c", "deploys")
    assert not fresh.drain_changes().pauses
