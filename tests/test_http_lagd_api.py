"""lagd's own API (/lagd/v1): verdicts with reasons and lag in seconds, windows, and the
incidents, mirrors and trends tables (real Postgres via `database_url`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd.core.config import async_database_url
from lagd.db import schema
from lagd.http.page import lag_history, sparkline
from tests.http_state import CLUSTER, NOW, build_context, serve


async def get(s: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
    async with s.get(path) as resp:
        assert resp.content_type == "application/json"
        return resp.status, json.loads(await resp.text())


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(async_database_url(database_url))
    yield eng
    await eng.dispose()


@pytest.fixture
async def api(engine: AsyncEngine) -> AsyncIterator[aiohttp.ClientSession]:
    async with serve(build_context(engine=engine)) as base, aiohttp.ClientSession(base) as s:
        yield s


async def test_groups_list(api: aiohttp.ClientSession) -> None:
    code, body = await get(api, "/lagd/v1/groups")
    assert code == 200
    assert [(g["group"], g["status"], g["totallag"], g["partition_count"]) for g in body["groups"]] == [
        ("g-ok", "OK", 0, 2),  # one committed partition of a two-partition topic
        ("g-rewind", "ERR", 2600, 2),  # one committed partition of a two-partition topic
        ("g-stall", "ERR", 2950, 2),  # one committed partition of a two-partition topic
        ("g-stop", "ERR", 6700, 2),  # one committed partition of a two-partition topic
        ("g-warn", "WARN", 1500, 2),
    ]
    assert body["groups"][4] == {
        "cluster": CLUSTER,
        "group": "g-warn",
        "status": "WARN",
        "complete": 1.0,
        "partition_count": 2,
        "totallag": 1500,
        "lag_seconds": 15.001,
        "not_ok": ["WARN"],
        "evaluated_at": NOW,
    }
    assert [g["not_ok"] for g in body["groups"]] == [[], ["REWIND"], ["STALL"], ["STOP"], ["WARN"]]
    code, body = await get(api, "/lagd/v1/groups?cluster=elsewhere")
    assert (code, body) == (200, {"groups": []})


async def test_group_verdict_with_reasons(api: aiohttp.ClientSession) -> None:
    code, body = await get(api, "/lagd/v1/consumer/prod/g-warn")
    assert code == 200
    assert body["reasons"] == [
        {
            "status": "WARN",
            "rule": "lag-not-decreasing",
            "reason": "lag never decreased across the window",
            "since": NOW,
            "partitions": [{"topic": "orders", "partition": 1, "since": NOW}],
        }
    ]
    assert body["maxlag"] == {
        "topic": "orders",
        "partition": 1,
        "status": "WARN",
        "rule": "lag-not-decreasing",
        "reason": "lag never decreased across the window",
        "since": NOW,
        "current_lag": 1500,
        "complete": 1.0,
        "lag_seconds": 15.001,
        "lag_seconds_estimated": False,
        "lag_seconds_from": "log_end_samples",
        "record_timestamp_type": None,
        "owner": "/10.0.0.7",
        "client_id": "worker-7",
        "start": {"offset": 500, "order": 3, "timestamp": 10_000, "observed": 10_005, "lag": 500},
        "end": {"offset": 1500, "order": 15, "timestamp": 30_000, "observed": 30_005, "lag": 1500},
        "clearing": None,
    }
    assert body["clearing"] is None
    assert [(p["topic"], p["partition"], p["rule"]) for p in body["partitions"]] == [
        ("orders", 0, "caught-up"),
        ("orders", 1, "lag-not-decreasing"),
    ]
    code, body = await get(api, "/lagd/v1/consumer/prod/g-stop")
    assert [(r["status"], r["rule"]) for r in body["reasons"]] == [("STOP", "stop")]
    code, body = await get(api, "/lagd/v1/consumer/prod/g-ok")
    assert body["reasons"] == []
    code, body = await get(api, "/lagd/v1/consumer/prod/nope")
    assert (code, body["error"], body["message"]) == (404, True, "cluster or consumer not found")


async def test_window(api: aiohttp.ClientSession) -> None:
    code, body = await get(api, "/lagd/v1/consumer/prod/g-rewind/window/events/0")
    assert code == 200
    assert body == {
        "cluster": CLUSTER,
        "group": "g-rewind",
        "topic": "events",
        "partition": 0,
        "owner": "",
        "client_id": "",
        "window": [
            {"offset": 500, "order": 5, "timestamp": 10_000, "observed": 10_005, "lag": 500},
            {"offset": 300, "order": 11, "timestamp": 20_000, "observed": 20_005, "lag": 1700},
            {"offset": 400, "order": 17, "timestamp": 30_000, "observed": 30_005, "lag": 2600},
        ],
        "log_end": [{"offset": 1000, "ts": 9_999}, {"offset": 2000, "ts": 19_999}, {"offset": 3000, "ts": 29_999}],
    }
    code, body = await get(api, "/lagd/v1/consumer/prod/g-rewind/window/events/1")
    assert (code, body["message"]) == (404, "cluster, consumer, topic or partition not found")
    code, body = await get(api, "/lagd/v1/consumer/prod/g-rewind/window/events/x")
    assert (code, body["message"]) == (400, "partition must be an integer, got 'x'")


async def test_incidents(api: aiohttp.ClientSession, engine: AsyncEngine) -> None:
    def row(i: str, state: str, opened: int, resolved: int | None) -> dict[str, Any]:
        return {
            "id": i,
            "cluster": CLUSTER,
            "severity": "ERR",
            "state": state,
            "reason": "g-stall STALL",
            "opened_at": opened,
            "updated_at": opened + 10,
            "resolved_at": resolved,
            "body": {"groups": ["g-stall"]},
        }

    rows = [
        row("inc-1", "resolved", 1_000, 5_000),
        row("inc-2", "open", 2_000, None),
        row("inc-3", "open", 3_000, None),
    ]
    async with engine.begin() as conn:
        await conn.execute(sa.insert(schema.incidents), rows)
    code, body = await get(api, "/lagd/v1/incidents")
    assert (code, body) == (200, {"incidents": [rows[2], rows[1], rows[0]]})
    code, body = await get(api, "/lagd/v1/incidents?state=open&limit=1")
    assert body == {"incidents": [rows[2]]}
    code, body = await get(api, "/lagd/v1/incidents?state=resolved")
    assert body == {"incidents": [rows[0]]}
    code, body = await get(api, "/lagd/v1/incidents?state=sleeping")
    assert (code, body["message"]) == (400, "state must be open or resolved, got 'sleeping'")
    code, body = await get(api, "/lagd/v1/incidents?limit=0")
    assert (code, body["message"]) == (400, "limit must be between 1 and 1000, got 0")
    # Postgres text cannot hold NUL: a bad request, not a database outage (found by schemathesis)
    code, body = await get(api, "/lagd/v1/incidents?cluster=a%00b")
    assert (code, body["message"]) == (400, "cluster must not contain NUL characters")
    code, body = await get(api, "/lagd/v1/consumer/prod/g%00x/trend")
    assert (code, body["message"]) == (400, "group must not contain NUL characters")


async def test_mirrors(api: aiohttp.ClientSession, engine: AsyncEngine) -> None:
    row = {
        "mirror": "dr",
        "topic": "orders",
        "target_topic": "src.orders",
        "verdict": "LAGGING",
        "completeness": 0.98,
        "delay_seconds": 12.5,
        "source_rate": 100.0,
        "target_rate": None,
        "evaluated_at": 29_000,
        "details": {"missing": 20},
    }
    async with engine.begin() as conn:
        await conn.execute(sa.insert(schema.mirror_status), [row])
    code, body = await get(api, "/lagd/v1/mirrors")
    assert (code, body) == (200, {"mirrors": [row]})


async def test_trend_sums_partitions_per_bucket(api: aiohttp.ClientSession, engine: AsyncEngine) -> None:
    def row(step: int, bucket: int, partition: int, lag_max: int, seconds: float) -> dict[str, Any]:
        return {
            "step": step,
            "bucket": bucket,
            "cluster": CLUSTER,
            "group_name": "g-warn",
            "topic": "orders",
            "partition": partition,
            "lag_min": 0,
            "lag_mean": lag_max / 2,
            "lag_max": lag_max,
            "lag_last": lag_max - 1,
            "lag_seconds_max": seconds,
            "consume_rate": 2.0,
            "produce_rate": 3.0,
        }

    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(schema.trends),
            [
                row(60, 60_000, 0, 10, 1.5),
                row(60, 60_000, 1, 30, 4.0),
                row(60, 120_000, 0, 5, 0.5),
                row(60, 180_000, 0, 7, 0.7),
                row(3600, 0, 0, 99, 9.0),
            ],
        )
    code, body = await get(api, "/lagd/v1/consumer/prod/g-warn/trend?from=60000&to=120000&step=60")
    assert code == 200
    assert body == {
        "cluster": CLUSTER,
        "group": "g-warn",
        "step": 60,
        "from": 60_000,
        "to": 120_000,
        "points": [
            {
                "bucket": 60_000,
                "lag_max": 40,
                "lag_last": 38,
                "lag_seconds_max": 4.0,
                "consume_rate": 4.0,
                "produce_rate": 6.0,
            },
            {
                "bucket": 120_000,
                "lag_max": 5,
                "lag_last": 4,
                "lag_seconds_max": 0.5,
                "consume_rate": 2.0,
                "produce_rate": 3.0,
            },
        ],
    }
    code, body = await get(api, "/lagd/v1/consumer/prod/g-warn/trend?from=0&to=0&step=3600")
    assert [p["lag_max"] for p in body["points"]] == [99]
    code, body = await get(api, "/lagd/v1/consumer/prod/g-warn/trend?from=120001&to=120000")
    assert (code, body["points"]) == (200, [])  # an empty range
    for query, message in (
        ("step=61", "step must be 60 or 3600 seconds, got 61"),
        ("from=-1", "from must be between 0 and 9007199254740991, got -1"),
    ):
        code, body = await get(api, f"/lagd/v1/consumer/prod/g-warn/trend?{query}")
        assert (code, body["message"]) == (400, message), query


async def test_database_unavailable_answers_503() -> None:
    dead = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none", connect_args={"timeout": 2})
    try:
        async with serve(build_context(engine=dead)) as base, aiohttp.ClientSession(base) as s:
            for path in (
                "/lagd/v1/incidents",
                "/lagd/v1/mirrors",
                "/lagd/v1/mirrors/dr/trends",
                "/lagd/v1/consumer/prod/g-ok/trend",
            ):
                code, body = await get(s, path)
                assert code == 503, path
                assert "check storage.database-url" in body["message"]
            async with s.get("/") as resp:  # the page still renders, saying incidents are unavailable
                assert resp.status == 200
                assert "incidents unavailable" in await resp.text()
    finally:
        await dead.dispose()


async def test_status_page(api: aiohttp.ClientSession, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(schema.incidents),
            [
                {
                    "id": "inc-9",
                    "cluster": CLUSTER,
                    "severity": "ERR",
                    "state": "open",
                    "reason": "g-stop <STOP>",
                    "opened_at": 1,
                    "updated_at": 2,
                    "resolved_at": None,
                    "body": {},
                }
            ],
        )
    async with api.get("/") as resp:
        assert (resp.status, resp.content_type) == (200, "text/html")
        html = await resp.text()
    assert '<meta http-equiv="refresh" content="10">' in html
    assert f'<a href="/group/{CLUSTER}/g-warn">g-warn</a>' in html and ">WARN</span>" in html
    assert html.count("<svg ") == 5  # one sparkline per group
    assert "g-stop &lt;STOP&gt;" in html  # incident text escaped
    assert "http://" not in html and "https://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "reader catching up" in html and "opened <time" in html and "still open" in html


async def test_group_page(api: aiohttp.ClientSession) -> None:
    async with api.get(f"/group/{CLUSTER}/g-warn") as resp:
        assert (resp.status, resp.content_type) == (200, "text/html")
        html = await resp.text()
    assert 'id="chart-lag"' in html and 'id="chart-lag-seconds"' in html
    assert "no history in this range" in html  # nothing stored for it yet: empty charts, no error
    assert html.count('<tr class="partition">') >= 1 and "UTC" in html
    async with api.get(f"/group/{CLUSTER}/nobody") as resp:
        assert resp.status == 404 and "does not know this group" in await resp.text()
    async with api.get("/group/elsewhere/nobody") as resp:
        assert resp.status == 404
        assert f"lagd watches no cluster named elsewhere (it watches: {CLUSTER})" in await resp.text()


def test_sparkline_history_sums_partition_lags_per_window_slot() -> None:
    state = build_context().state
    assert lag_history(state, CLUSTER, "g-warn") == [500, 1000, 1500]
    assert sparkline([0, 5, 10], width=100, height=24).endswith('points="0.0,22.0 50.0,12.0 100.0,2.0"/></svg>')


async def test_mirror_trends_by_topic_and_bucket(api: aiohttp.ClientSession, engine: AsyncEngine) -> None:
    def row(topic: str, step: int, bucket: int, produced: int, replicated: int | None) -> dict[str, Any]:
        return {
            "mirror": "dr",
            "topic": topic,
            "step": step,
            "bucket": bucket,
            "target_topic": "src." + topic,
            "produced": produced,
            "replicated": replicated,
            "completeness": None if replicated is None else replicated / produced,
            "completeness_cumulative": None if replicated is None else replicated / produced,
            "backlog": None if replicated is None else produced - replicated,
            "delay_seconds": None if replicated is None else 30.0,
            "delay_beyond_history": False,
        }

    stored = [
        row("orders", 60, 60_000, 100, 50),
        row("orders", 60, 120_000, 100, 150),
        row("audit", 60, 60_000, 10, None),
        row("orders", 60, 180_000, 100, 100),
        row("orders", 3600, 0, 300, 300),
    ]
    async with engine.begin() as conn:
        await conn.execute(sa.insert(schema.mirror_trends), stored)
        await conn.execute(sa.insert(schema.mirror_trends), [{**stored[0], "mirror": "other"}])

    def point(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in ("mirror", "step")}

    code, body = await get(api, "/lagd/v1/mirrors/dr/trends?from=60000&to=120000")
    assert code == 200
    assert body == {
        "mirror": "dr",
        "step": 60,
        "from": 60_000,
        "to": 120_000,
        "points": [point(stored[2]), point(stored[0]), point(stored[1])],  # by topic, then bucket
    }
    code, body = await get(api, "/lagd/v1/mirrors/dr/trends?from=0&to=200000&topic=orders")
    assert [p["bucket"] for p in body["points"]] == [60_000, 120_000, 180_000]
    code, body = await get(api, "/lagd/v1/mirrors/dr/trends?from=0&to=0&step=3600")
    assert [(p["produced"], p["replicated"]) for p in body["points"]] == [(300, 300)]
    code, body = await get(api, "/lagd/v1/mirrors/nobody/trends?from=0&to=200000")
    assert (code, body["points"]) == (200, [])
    code, body = await get(api, "/lagd/v1/mirrors/dr/trends?step=120")
    assert (code, body["message"]) == (400, "step must be 60 or 3600 seconds, got 120")
