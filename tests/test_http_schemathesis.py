"""Property-based API testing: schemathesis generates requests from the served OpenAPI
document and checks a live server (real State, real Postgres rows) answers each one
without a 5xx and within the documented statuses, content types and schemas: lagd's own
/lagd/v1 API and Burrow's v3 API alike, and a method no path takes answers as documented."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import jsonschema
import pytest
import requests
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.core.config import async_database_url
from lagd.db import schema
from lagd.http.app import bound_port, start_http
from lagd.runtime import logs
from tests.http_state import CLUSTER, TOKEN, build_context

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

# Path parameters that name what exists: g-rewind commits for events partition 0; the
# config kind "cluster" has a module "prod".
KNOWN: dict[str, Any] = {
    "cluster": CLUSTER,
    "group": "g-rewind",
    "topic": "events",
    "partition": 0,
    "kind": "cluster",
    "name": "prod",
    "id": 1,
    "mirror": "dr",
}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
METHODS = ("get", "post", "put", "patch", "delete")


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


def _operations(live: str) -> tuple[dict[str, Any], list[Any]]:
    document = requests.get(f"{live}/lagd/v1/openapi.json", timeout=30).json()
    api = schemathesis.openapi.from_dict(document)
    operations = []
    for result in api.get_all_operations():
        assert isinstance(result, Ok), f"the served document does not load: {result}"
        operations.append(result.ok())
    return document, operations


def _sent_as_generated(case: Any) -> bool:
    """Whether the server receives the path parameters the document allows.

    schemathesis percent-decodes a generated value before encoding it, so a generated "%7B"
    or "%2E" reaches the server as "{" or "." (a dot segment the URL resolves away): values
    the document excludes, which lagd rightly routes elsewhere.
    """
    for param in case.operation.path_parameters:
        pattern = param.definition.get("schema", {}).get("pattern")
        value = case.path_parameters.get(param.name)
        if pattern and isinstance(value, str) and not re.search(pattern, unquote(value)):
            return False
    return True


def _exercise(live: str, op: Any, statuses: list[int], max_examples: int = 25) -> None:
    """Generated requests (some naming what exists), with and without the admin token."""
    names = {p.name for p in op.path_parameters}
    known = {k: v for k, v in KNOWN.items() if k in names}
    strategies = [op.as_strategy()]
    if known:
        strategies.append(op.as_strategy(path_parameters=known))

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(strategies), authed=st.booleans())
    def check(case: Any, authed: bool) -> None:
        assume(_sent_as_generated(case))
        response = case.call_and_validate(base_url=live, headers=AUTH if authed else None)
        statuses.append(response.status_code)

    check()


def test_lagd_api_conforms_to_its_openapi_document(live: str) -> None:
    _, all_operations = _operations(live)
    operations = [op for op in all_operations if op.path.startswith("/lagd/")]
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
        "/lagd/v1/mirrors/{mirror}/flow",
        "/lagd/v1/mirrors/{mirror}/trends",
        "/lagd/v1/quarantine",
        "/lagd/v1/quarantine",
        "/lagd/v1/quarantine/{id}",
        "/lagd/v1/schemas",
        "/lagd/v1/schemas/{name}",
        "/lagd/v1/share/{cluster}",
        "/lagd/v1/share/{cluster}/{group}",
    ]
    statuses: list[int] = []
    for op in operations:
        _exercise(live, op, statuses)
    assert all(code < 500 for code in statuses)
    assert 200 in statuses and 404 in statuses  # both found and unknown groups were exercised


# What each Burrow operation answers for what exists (KNOWN), with the admin token: run in
# this order, reads first, then the changes (the topic of the group before the group).
BURROW_KNOWN: list[tuple[str, str, int]] = [
    ("GET", "/burrow/admin", 200),
    ("GET", "/burrow/admin/ready", 200),
    ("GET", "/v3/admin/loglevel", 200),
    ("GET", "/v3/config", 200),
    ("GET", "/v3/config/{kind}", 200),
    ("GET", "/v3/config/{kind}/{name}", 200),
    ("GET", "/v3/kafka", 200),
    ("GET", "/v3/kafka/{cluster}", 200),
    ("GET", "/v3/kafka/{cluster}/consumer", 200),
    ("GET", "/v3/kafka/{cluster}/consumer/{group}", 200),
    ("GET", "/v3/kafka/{cluster}/consumer/{group}/lag", 200),
    ("GET", "/v3/kafka/{cluster}/consumer/{group}/status", 200),
    ("GET", "/v3/kafka/{cluster}/topic", 200),
    ("GET", "/v3/kafka/{cluster}/topic/{topic}", 200),
    ("GET", "/v3/kafka/{cluster}/topic/{topic}/consumers", 200),
    ("POST", "/v3/admin/loglevel", 200),
    ("DELETE", "/v3/kafka/{cluster}/consumer/{group}/topic/{topic}", 200),
    ("DELETE", "/v3/kafka/{cluster}/consumer/{group}", 200),
]


def test_burrow_v3_conforms_to_the_openapi_document(live: str) -> None:
    """Every Burrow v3 path is documented, answers what exists with 200 and Burrow's body (by
    the document's schema), and answers generated requests within what the document says."""
    _, all_operations = _operations(live)
    operations = {(op.method.upper(), op.path): op for op in all_operations if not op.path.startswith("/lagd/")}
    assert sorted(operations) == sorted((method, path) for method, path, _ in BURROW_KNOWN)
    level = logs.current_level()
    statuses: list[int] = []
    try:
        for method, path, expected in BURROW_KNOWN:
            op = operations[(method, path)]
            names = {p.name for p in op.path_parameters}
            body = {"body": {"level": level}} if method == "POST" else {}
            case = op.Case(path_parameters={k: v for k, v in KNOWN.items() if k in names}, **body)
            response = case.call_and_validate(base_url=live, headers=AUTH)
            assert response.status_code == expected, (method, path, response.text)
            _exercise(live, op, statuses)
    finally:
        logs.set_level(level)
    assert all(code < 500 for code in statuses)
    assert {200, 401, 404} <= set(statuses)


def test_a_method_no_path_takes_answers_405_as_documented(live: str) -> None:
    """Every documented path, asked with a method it does not list (with the admin token, so
    no 401 or 403 could stand in), answers 405 with Allow and the documented body."""
    document, _ = _operations(live)
    documented = document["components"]["responses"]["MethodNotAllowed"]
    assert documented["headers"]["Allow"]["required"] is True
    body_schema = {**documented["content"]["application/json"]["schema"], "components": document["components"]}
    tried = 0
    for path, item in document["paths"].items():
        listed = [m.upper() for m in METHODS if m in item]
        allow = ", ".join(sorted(listed + (["HEAD"] if "GET" in listed else [])))
        url = live + re.sub(r"\{(\w+)\}", lambda m: quote(str(KNOWN[m.group(1)]), safe=""), path)
        for method in METHODS:
            if method in item:
                continue
            response = requests.request(method.upper(), url, headers=AUTH, json={}, timeout=30)
            assert (response.status_code, response.headers.get("Allow")) == (405, allow), (method, path)
            jsonschema.validate(response.json(), body_schema)
            assert response.json()["error"] is True
            tried += 1
    assert tried >= 3 * len(document["paths"])
