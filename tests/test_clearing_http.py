"""The clear-time prediction where it is shown: lagd's API, /metrics and the status pages (a
real server over a State built from real events)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from lagd.core.model import Commit, LogEndSample
from lagd.evaluate import Evaluator
from lagd.http.context import Health, HttpContext
from lagd.http.openapi import document
from lagd.state.windows import State
from tests.http_state import build_settings, serve

CLUSTER = "prod"
START = 1_000_000
PRODUCE = 100  # records/s into each partition
BACKLOG = 200_000
CONSUME = 1_100  # records/s the draining consumer reads: the lag falls 1,000 records/s
EVERY_S = 2
COMMITS = 10
NOW = START + (COMMITS - 1) * EVERY_S * 1000 + 500
TRUE_CLEAR = START + BACKLOG * 1000 // (CONSUME - PRODUCE)  # 200 s after START


def build_state() -> State:
    s = State(intervals=COMMITS)
    end0 = 1_000_000
    for k in range(COMMITS * EVERY_S + 1):
        t = START + k * 1000 - 1
        for partition in (0, 1):
            s.apply(LogEndSample(CLUSTER, "orders", partition, end0 + PRODUCE * k, t))
    order = 0
    for i in range(COMMITS):
        secs = i * EVERY_S
        t = START + secs * 1000
        order += 1
        s.apply(Commit(CLUSTER, "g-drain", "orders", 0, end0 - BACKLOG + CONSUME * secs, order, t, t + 5))
        order += 1
        s.apply(Commit(CLUSTER, "g-drain", "orders", 1, end0 + PRODUCE * secs, order, t, t + 5))  # caught up
        order += 1
        s.apply(Commit(CLUSTER, "g-grow", "orders", 0, end0 - 1_000 + 50 * secs, order, t, t + 5))  # falls behind
    return s


@pytest.fixture
async def api() -> AsyncIterator[aiohttp.ClientSession]:
    state = build_state()
    ctx = HttpContext(
        settings=build_settings(),
        state=state,
        evaluator=Evaluator(state),
        now_ms=lambda: NOW,
        ready=lambda: True,
        health=Health(),
    )
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        yield s


async def test_the_api_says_when_a_draining_group_clears_and_not_for_a_growing_one(
    api: aiohttp.ClientSession,
) -> None:
    async with api.get(f"/lagd/v1/consumer/{CLUSTER}/g-drain") as resp:
        assert resp.status == 200
        body = json.loads(await resp.text())
    c = body["clearing"]
    assert c is not None
    left = (TRUE_CLEAR - NOW) / 1000.0
    assert abs(c["clears_in_seconds"] - left) <= 0.2 * (TRUE_CLEAR - START) / 1000.0, (c, left)
    assert abs(c["drain_rate"] - (CONSUME - PRODUCE)) <= 0.2 * (CONSUME - PRODUCE)
    assert c["clear_at_early"] <= c["clear_at"] and (c["clear_at_late"] is None or c["clear_at_late"] >= c["clear_at"])
    draining, caught_up = body["partitions"]
    assert draining["clearing"] == c  # the group clears with its slowest (only) draining partition
    assert caught_up["clearing"] is None
    assert body["maxlag"]["clearing"] == c
    async with api.get(f"/lagd/v1/consumer/{CLUSTER}/g-grow") as resp:
        body = json.loads(await resp.text())
    assert body["clearing"] is None and body["partitions"][0]["clearing"] is None
    schemas = document()["components"]["schemas"]
    assert set(schemas["Clearing"]["required"]) == set(c)
    assert "clearing" in schemas["Group"]["required"] and "clearing" in schemas["Partition"]["required"]


async def test_metrics_and_pages_show_the_clear_time(api: aiohttp.ClientSession) -> None:
    async with api.get("/metrics") as resp:
        text = await resp.text()
    lines = [line for line in text.splitlines() if line.startswith("lagd_group_clear_seconds{")]
    assert len(lines) == 1 and 'consumer_group="g-drain"' in lines[0], lines
    seconds = float(lines[0].rsplit(" ", 1)[1])
    assert abs(seconds - (TRUE_CLEAR - NOW) / 1000.0) <= 0.2 * (TRUE_CLEAR - START) / 1000.0
    async with api.get("/") as resp:
        page = await resp.text()
    row = next(r for r in page.split("<tr") if "g-drain" in r)
    assert "clears in about 3 min" in row
    assert "clears in" not in next(r for r in page.split("<tr") if "g-grow" in r)
    async with api.get(f"/group/{CLUSTER}/g-drain") as resp:
        page = await resp.text()
    assert "clears in about 3 min (" in page and "at 95 %; draining" in page
