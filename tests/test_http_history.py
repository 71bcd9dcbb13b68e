"""GET /lagd/v1/consumer/{cluster}/{group}/history: lag and lag in seconds per bucket, computed
in Postgres from the history tables the store writes (real Store, real Postgres, real server)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.core.config import async_database_url
from lagd.http.lagd_api import HISTORY_MAX_POINTS, HISTORY_SQL, history_step
from lagd.http.page import first_commit_query
from lagd.state.changes import Changes
from lagd.state.store import Store
from tests.http_state import build_context, serve

S = 1000
T0 = 1_700_000_000_000  # a whole minute


async def get(s: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
    async with s.get(path) as resp:
        assert resp.content_type == "application/json"
        return resp.status, json.loads(await resp.text())


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[aiohttp.ClientSession]:
    engine = create_async_engine(async_database_url(database_url))
    changes = Changes()
    # log ends: t/0 grows 100 -> 200 -> 300 over 20 s; t/1 stays at 50
    changes.log_end_history += [
        (T0, "c", "t", 0, 100),
        (T0 + 10 * S, "c", "t", 0, 200),
        (T0 + 20 * S, "c", "t", 0, 300),
        (T0, "c", "t", 1, 50),
        (T0 + 20 * S, "c", "t", 1, 50),
    ]
    # commits (ts, cluster, group, topic, partition, offset, lag, observed)
    changes.commit_history += [
        (T0 + 5 * S, "c", "g", "t", 0, 100, 0, T0 + 5 * S),  # caught up: 0 s
        (T0 + 15 * S, "c", "g", "t", 0, 150, 50, T0 + 15 * S),  # log end reached 150 by T0+10: 5 s
        (T0 + 25 * S, "c", "g", "t", 0, 200, 100, T0 + 25 * S),  # reached 200 at T0+10: 15 s
        (T0 + 5 * S, "c", "g", "t", 1, 40, 10, T0 + 5 * S),  # reached 40 by T0 (a lower bound): 5 s
        (T0 + 25 * S, "c", "g", "t", 1, 50, 0, T0 + 25 * S),
        (T0 + 15 * S, "c", "other", "t", 0, 0, 150, T0 + 15 * S),  # another group: not counted
        # two names of one hashtext (the history's index key, found by a search over g1..g300000)
        (T0 + 5 * S, "c", "g33130", "t", 0, 90, 10, T0 + 5 * S),
        (T0 + 5 * S, "c", "g198868", "t", 0, 70, 30, T0 + 5 * S),
        (T0 + 6 * S, "c", "g198868", "t", 1, 45, 5, T0 + 6 * S),
        (T0 + 5 * S, "other-cluster", "g", "t", 0, 0, 100, T0 + 5 * S),  # g of another cluster: not counted
    ]
    await Store(engine).write(changes)
    try:
        async with serve(build_context(engine=engine)) as base, aiohttp.ClientSession(base) as s:
            yield s
    finally:
        await engine.dispose()


async def test_lag_and_lag_seconds_per_bucket(api: aiohttp.ClientSession) -> None:
    status, body = await get(api, f"/lagd/v1/consumer/c/g/history?from={T0}&to={T0 + 30 * S}&step=10")
    assert status == 200, body
    assert (body["step"], body["from"], body["to"]) == (10, T0, T0 + 30 * S)
    assert body["points"] == [
        # t/0 lag 0 + t/1 lag 10; the worst commit waited 5 s
        {"bucket": T0, "lag": 10, "lag_seconds_max": 5.0, "commits": 2},
        # only t/0 committed (lag 50); t/1's 10 is carried forward
        {"bucket": T0 + 10 * S, "lag": 60, "lag_seconds_max": 5.0, "commits": 1},
        {"bucket": T0 + 20 * S, "lag": 100, "lag_seconds_max": 15.0, "commits": 2},
    ]


async def test_one_bucket_and_empty_ranges(api: aiohttp.ClientSession) -> None:
    status, body = await get(api, f"/lagd/v1/consumer/c/g/history?from={T0}&to={T0 + 60 * S}&step=60")
    assert status == 200
    assert body["points"] == [{"bucket": T0, "lag": 100, "lag_seconds_max": 15.0, "commits": 5}]
    status, body = await get(api, f"/lagd/v1/consumer/c/g/history?from={T0 + 60 * S}&to={T0}")
    assert (status, body["points"]) == (200, [])
    status, body = await get(api, "/lagd/v1/consumer/c/nobody/history")
    assert (status, body["points"]) == (200, [])


async def test_names_of_one_hash_and_clusters_stay_apart(api: aiohttp.ClientSession) -> None:
    """The index finds a group by a hash of its name: each query still compares the name and cluster."""
    span = f"from={T0}&to={T0 + 60 * S}&step=60"
    _, body = await get(api, f"/lagd/v1/consumer/c/g33130/history?{span}")
    assert body["points"] == [{"bucket": T0, "lag": 10, "lag_seconds_max": 5.0, "commits": 1}]
    _, body = await get(api, f"/lagd/v1/consumer/c/g198868/history?{span}")
    assert body["points"] == [{"bucket": T0, "lag": 35, "lag_seconds_max": 6.0, "commits": 2}]


async def test_one_groups_history_is_read_through_the_index(database_url: str) -> None:
    """Every commit is a history row and a day partition holds millions: the history of one group
    (the API's, the status page's) must be an index scan on the hash of its name."""
    engine = create_async_engine(async_database_url(database_url))
    changes = Changes()
    changes.commit_history += [(T0 + i * S, "c", f"g{i % 50}", "t", i % 4, i, 0, T0 + i * S) for i in range(400)]
    params = {"cluster": "c", "grp": "g7", "t0": T0, "t1": T0 + 600 * S, "look0": T0, "step_ms": 60 * S}
    first = first_commit_query("c", "g7", T0).compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
    try:
        await Store(engine).write(changes)
        async with engine.connect() as conn:
            await conn.execute(sa.text("SET enable_seqscan = off"))  # small tables: what an index can serve, it does
            history_plan = "\n".join(
                row[0] for row in await conn.execute(sa.text("EXPLAIN " + HISTORY_SQL.text), params)
            )
            first_plan = "\n".join(row[0] for row in await conn.execute(sa.text(f"EXPLAIN {first}")))
    finally:
        await engine.dispose()
    for plan in (history_plan, first_plan):
        scans = [line for line in plan.splitlines() if "on commit_history" in line]
        assert scans and all("Index" in line for line in scans), plan
        assert re.search(r"Index Cond: \(+hashtext\(group_name\) =", plan), plan


async def test_at_most_500_points(api: aiohttp.ClientSession) -> None:
    hours = 6 * 3600 * S
    status, body = await get(api, f"/lagd/v1/consumer/c/g/history?from={T0}&to={T0 + hours}&step=1")
    assert status == 200 and body["step"] == 44  # raised: 6 h in 1 s steps would be 21600 points
    status, body = await get(api, f"/lagd/v1/consumer/c/g/history?from={T0}&to={T0 + hours}")
    assert status == 200 and body["step"] == 60 and len(body["points"]) == 1
    for span in (0, 1, 499 * S, 500 * S, 501 * S, hours, 30 * 24 * hours, 10**15):
        step = history_step(span)
        assert span <= step * 1000 * HISTORY_MAX_POINTS
    status, body = await get(api, "/lagd/v1/consumer/c/g/history?step=0")
    assert status == 400


async def test_many_commits_a_bucket_give_what_dating_every_commit_gives(database_url: str) -> None:
    """The query dates only each partition's most-lagging commit of a bucket (the page's 6 h were
    138k commits to date, 0.4-3 s): under a steady producer, lag and commits are what dating
    every commit gives, and the lag in seconds is short of it by less than the log-end samples'
    interval (a commit is dated by the first sample at or beyond its offset, so by up to that
    interval late). Here 10 minutes of two partitions written at 10 records/s (log ends sampled
    every 10 s), committed every 5 s by a consumer that stalls for 95 s and then falls further
    behind, against a reference that dates every commit."""
    engine = create_async_engine(async_database_url(database_url))
    changes = Changes()
    end = {0: 0, 1: 0}
    samples: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for t in range(0, 601, 10):
        for p in (0, 1):
            samples[p].append((T0 + t * S, 10 * t + 3 * p))
            changes.log_end_history.append((T0 + t * S, "c", "t", p, 10 * t + 3 * p))
    commits = []
    for t in range(5, 600, 5):
        for p in (0, 1):
            log_end = 10 * t + 3 * p
            if 200 <= t < 295:
                offset = end[p]  # stalled
            elif t >= 295:
                offset = min(log_end, end[p] + 40)  # catching up
            else:
                offset = log_end - 20  # two seconds behind
            end[p] = offset
            commits.append((T0 + t * S, p, offset, log_end - offset))
            changes.commit_history.append((T0 + t * S, "c", "g", "t", p, offset, log_end - offset, T0 + t * S))

    def reference() -> list[dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        last: dict[int, int] = {}
        for ts, p, offset, lag in sorted(commits):
            b = (ts - T0) // (60 * S)
            reach = min((at for at, o in samples[p] if o >= offset), default=None)
            secs = 0.0 if lag <= 0 else (max(ts - reach, 0) / 1000 if reach is not None else None)
            point = out.setdefault(b, {"bucket": T0 + b * 60 * S, "lag": 0, "lag_seconds_max": None, "commits": 0})
            point["commits"] += 1
            if secs is not None:
                point["lag_seconds_max"] = max(point["lag_seconds_max"] or 0.0, secs)
            last[p] = lag
            point["lag"] = sum(last.values())
        return [out[b] for b in sorted(out)]

    try:
        await Store(engine).write(changes)
        async with serve(build_context(engine=engine)) as base, aiohttp.ClientSession(base) as s:
            status, body = await get(s, f"/lagd/v1/consumer/c/g/history?from={T0}&to={T0 + 600 * S}&step=60")
    finally:
        await engine.dispose()
    assert status == 200, body
    want = reference()
    assert max(p["lag_seconds_max"] for p in want) > 90  # the stall shows
    got = body["points"]
    assert [{**p, "lag_seconds_max": None} for p in got] == [{**p, "lag_seconds_max": None} for p in want]
    for mine, theirs in zip(got, want, strict=True):
        assert theirs["lag_seconds_max"] - 10.0 < mine["lag_seconds_max"] <= theirs["lag_seconds_max"], (mine, theirs)
    assert sum(m != t for m, t in zip(got, want, strict=True)) < len(want) / 2  # mostly the same
