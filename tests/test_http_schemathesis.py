"""Property-based API testing: schemathesis generates requests from the served OpenAPI
document and checks a live server (real State, real Postgres rows) answers each one
without a 5xx and within the documented statuses, content types and schemas."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.config import async_database_url
from lagd.db import schema
from lagd.http.app import bound_port, start_http
from tests.http_state import CLUSTER, build_context

ROWS: dict[Any, list[dict[str, Any]]] = {
    schema.incidents: [
        {
            "id": "inc-1",
            "cluster": CLUSTER,
            "severity": "ERR",
            "state": "open",
            "reason": "g-stall STALL",
            "opened_at": 1_000,
            "updated_at": 2_000,
            "resolved_at": None,
            "body": {"groups": ["g-stall"]},
        }
    ],
    schema.mirror_status: [
        {
            "mirror": "dr",
            "topic": "orders",
            "target_topic": "dr.orders",
            "verdict": "OK",
            "completeness": 1.0,
            "delay_seconds": None,
            "source_rate": 1.0,
            "target_rate": 1.0,
            "evaluated_at": 3_000,
            "details": {},
        }
    ],
    schema.trends: [
        {
            "step": 60,
            "bucket": 60_000 * i,
            "cluster": CLUSTER,
            "group_name": "g-warn",
            "topic": "orders",
            "partition": 1,
            "lag_min": None if i == 0 else 1,
            "lag_mean": 2.0,
            "lag_max": 3,
            "lag_last": 3,
            "lag_seconds_max": 1.5,
            "consume_rate": None,
            "produce_rate": 4.0,
        }
        for i in range(3)
    ],
}

KNOWN = {"cluster": CLUSTER, "group": "g-rewind", "topic": "events", "partition": 0}


@pytest.fixture
def live(database_url: str) -> Iterator[str]:
    """The server in its own thread and event loop, so hypothesis can drive it synchronously."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def setup() -> None:
        engine = create_async_engine(async_database_url(database_url))
        async with engine.begin() as conn:
            for table, rows in ROWS.items():
                await conn.execute(sa.insert(table), rows)
        runner = await start_http(build_context(engine=engine))
        box.update(engine=engine, runner=runner, base=f"http://127.0.0.1:{bound_port(runner)}")

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(setup())
        except BaseException as exc:  # reported to the test below
            box["error"] = exc
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30), "the server thread did not start within 30 s"
    if "error" in box:
        raise box["error"]
    try:
        yield str(box["base"])
    finally:

        async def teardown() -> None:
            await box["runner"].cleanup()
            await box["engine"].dispose()

        asyncio.run_coroutine_threadsafe(teardown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_lagd_api_conforms_to_its_openapi_document(live: str) -> None:
    api = schemathesis.openapi.from_url(f"{live}/lagd/v1/openapi.json")
    operations = []
    for result in api.get_all_operations():
        assert isinstance(result, Ok), f"the served document does not load: {result}"
        operations.append(result.ok())
    assert sorted(op.path for op in operations) == [
        "/lagd/v1/clusters",
        "/lagd/v1/consumer/{cluster}/{group}",
        "/lagd/v1/consumer/{cluster}/{group}/history",
        "/lagd/v1/consumer/{cluster}/{group}/trend",
        "/lagd/v1/consumer/{cluster}/{group}/window/{topic}/{partition}",
        "/lagd/v1/dead-letters",
        "/lagd/v1/groups",
        "/lagd/v1/incidents",
        "/lagd/v1/mirrors",
        "/lagd/v1/quarantine",
        "/lagd/v1/quarantine",
        "/lagd/v1/quarantine/{id}",
        "/lagd/v1/schemas",
        "/lagd/v1/schemas/{name}",
    ]
    statuses: list[int] = []
    for op in operations:
        names = {p.name for p in op.path_parameters}
        known = {k: v for k, v in KNOWN.items() if k in names}
        strategies = [op.as_strategy()]
        if known:
            strategies.append(op.as_strategy(path_parameters=known))

        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=st.one_of(strategies))
        def check(case: Any) -> None:
            response = case.call_and_validate(base_url=live)
            statuses.append(response.status_code)

        check()
    assert all(code < 500 for code in statuses)
    assert 200 in statuses and 404 in statuses  # both found and unknown groups were exercised
