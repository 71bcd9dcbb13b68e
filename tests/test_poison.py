"""No single event or row stops a part of lagd: the apply task skips a poison event, and a
write batch Postgres refuses is split so that only the poison rows go to quarantine.

Real parts: State, the daemon's apply task, and PostgreSQL through the Store.
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from lagd import daemon
from lagd.core.config import Settings, parse
from lagd.core.model import Commit, GroupDeleted, LogEndSample, ReaderPosition
from lagd.evaluate.build import build_core
from lagd.state import persister
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from tests.http_state import TOKEN, build_context, serve
from tests.postgres import query

Settle = Callable[..., Awaitable[Any]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_one_poison_event_neither_stops_the_apply_task_nor_loses_its_batch(settle: Settle) -> None:
    settings = parse({"clusters": {"c": {"bootstrap-servers": ["k:9092"]}}}, env={})
    rt = daemon.build_runtime(settings, asyncio.Event())
    task = asyncio.create_task(daemon.apply_events(rt), name="apply")
    now = now_ms()
    try:
        await rt.events.put([LogEndSample("c", "orders", 0, 100, now)])
        # Its lag (log end - offset) overflows the window's int64: State raises.
        poison = Commit("c", "bad", "orders", 0, -(2**63), 2, now, now)
        await rt.events.put([Commit("c", "before", "orders", 0, 50, 1, now, now), poison])
        await rt.events.put([Commit("c", "after", "orders", 0, 60, 3, now, now)])
        await settle(lambda: "after" in rt.state.groups("c"), what="the batch after the poison one applied")
        assert not task.done()
        assert rt.state.window("c", "before", "orders", 0)[-1].offset == 50
        assert rt.counters["c"].rejected == {"apply_failed": 1}
    finally:
        task.cancel()


# Longer than a btree index row may be, even compressed (a repeated letter would compress to fit).
LONG = "".join(random.Random(9000).choices(string.ascii_letters + string.digits, k=9000))


async def test_a_batch_postgres_refuses_is_written_around_its_poison_rows(database_url: str) -> None:
    state, _ = build_core(Settings())
    now = now_ms()
    state.apply_many(
        [
            Commit("c", "good", "orders", 0, 10, 1, now, now),
            Commit("c", LONG, "orders", 0, 11, 2, now, now),
            Commit("c", "nul\x00", "orders", 1, 12, 3, now, now),
            GroupDeleted("c", LONG[::-1], 4),
            Commit("c", "good", "orders", 1, 13, 5, now, now),
            ReaderPosition("c", 0, 6),
        ]
    )
    store = Store.from_url(database_url)
    wb = WriteBehind(store, state, clock=lambda: now)
    try:
        assert await persister.flush(wb)
        # the window log has no index, so the long name's window is kept (in the keyed table of
        # workers its key is too long for the index: test_a_worker_quarantines_a_key_too_long_to_index)
        assert query(database_url, "SELECT length(group_name), partition FROM current_windows ORDER BY 2, 1") == [
            (4, 0),
            (len(LONG), 0),
            (4, 1),
        ]
        assert query(database_url, "SELECT cluster, partition, next_offset FROM reader_positions") == [("c", 0, 6)]
        assert query(database_url, "SELECT count(*) FROM commit_history WHERE group_name = 'good'") == [(2,)]
        # the long name's history row is kept (its index holds a hash of the name, migration 0008)
        assert query(database_url, "SELECT length(group_name) FROM commit_history WHERE group_name <> 'good'") == [
            (len(LONG),)
        ]
        quarantined = query(
            database_url, "SELECT table_name, cluster, row_key, error, times FROM quarantine ORDER BY id"
        )
        # group_pauses (lagd.state.pauses) refuses both names, as group_tombstones the long one
        assert sorted(q[0] for q in quarantined) == [
            "commit_history",
            "group_pauses",
            "group_pauses",
            "group_tombstones",
            "windows",
        ]
        assert wb.status.quarantined == 5 and wb.status.healthy
        assert all(q[1] == "c" and q[4] == 1 and "\x00" not in q[2] for q in quarantined)
        # The copy of every window into the log's new generation leaves the poison one out and
        # completes: the older generations are dropped.
        assert query(database_url, "SELECT count(*) FROM window_generations WHERE completed_at IS NOT NULL") == [(1,)]
        # The poison window changes again: its quarantine row is updated, not duplicated.
        state.apply(Commit("c", "nul\x00", "orders", 1, 14, 7, now + 1, now + 1))
        assert await persister.flush(wb)
        again = query(database_url, "SELECT table_name, times FROM quarantine WHERE table_name = 'windows'")
        assert again == [("windows", 2)]
    finally:
        await store.close()


async def test_a_worker_quarantines_a_key_too_long_to_index(database_url: str) -> None:
    """Workers (lagd.scale) upsert windows into the keyed table, whose index cannot hold a key
    this long: that window is quarantined, the rest written, and no window log is started."""
    state, _ = build_core(Settings())
    now = now_ms()
    state.apply_many(
        [Commit("c", "good", "orders", 0, 10, 1, now, now), Commit("c", LONG, "orders", 0, 11, 2, now, now)]
    )
    store = Store.from_url(database_url, windows_log=False)
    wb = WriteBehind(store, state, clock=lambda: now)
    try:
        assert await persister.flush(wb)
        assert query(database_url, "SELECT group_name FROM windows") == [("good",)]
        assert query(database_url, "SELECT table_name FROM quarantine ORDER BY id") == [("windows",), ("group_pauses",)]
        assert query(database_url, "SELECT count(*) FROM window_generations") == [(0,)]
        assert wb.status.quarantined == 2 and wb.status.healthy
    finally:
        await store.close()


async def test_an_outage_is_not_poison(database_url: str) -> None:
    """Postgres being away is retried as a whole, never quarantined."""
    state, _ = build_core(Settings())
    now = now_ms()
    state.apply(Commit("c", "good", "orders", 0, 10, 1, now, now))
    store = Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere")
    wb = WriteBehind(store, state)
    try:
        assert not await persister.flush(wb)
        assert wb.status.quarantined == 0 and not wb.status.healthy and wb.pending
    finally:
        await store.close()


async def test_quarantined_rows_are_listed_and_removed_with_the_admin_token(database_url: str) -> None:
    state, _ = build_core(Settings())
    now = now_ms()
    state.apply_many(
        [Commit("c", LONG, "orders", 0, 11, 2, now, now), Commit("c", "nul\x00", "orders", 1, 1, 3, now, now)]
    )
    store = Store.from_url(database_url, windows_log=False)  # keyed windows, as workers write: LONG is refused too
    try:
        assert await persister.flush(WriteBehind(store, state, clock=lambda: now))
        async with serve(build_context(engine=store.engine)) as base, aiohttp.ClientSession() as http:
            async with http.get(f"{base}/lagd/v1/quarantine") as answer:
                assert answer.status == 200
                listed = (await answer.json())["quarantine"]
            assert sorted(q["table"] for q in listed) == [
                "commit_history",
                "group_pauses",
                "group_pauses",
                "windows",
                "windows",
            ]
            assert all(q["cluster"] == "c" and q["times"] == 1 and q["size"] > 0 and q["error"] for q in listed)
            nul = next(q for q in listed if q["table"] == "windows" and "nul" in q["key"])
            assert "\\x00" in nul["key"] and nul["first_at"] == now
            url = f"{base}/lagd/v1/quarantine/{nul['id']}"
            async with http.delete(url) as answer:
                assert answer.status == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with http.delete(url, headers=auth) as answer:
                assert answer.status == 200 and await answer.json() == {"removed": 1}
            async with http.delete(url, headers=auth) as answer:
                assert answer.status == 404
            async with http.delete(f"{base}/lagd/v1/quarantine", headers=auth) as answer:
                assert await answer.json() == {"removed": 4}  # the other window, history and both pauses
            async with http.get(f"{base}/lagd/v1/quarantine") as answer:
                assert (await answer.json())["quarantine"] == []
    finally:
        await store.close()
