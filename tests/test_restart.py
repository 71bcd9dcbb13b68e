"""End to end: a restarted daemon judges every group exactly as before and does not re-read history.

Real parts only: the Tansu broker, the simulator writing byte-exact commits into an offsets
topic of this test's own, PostgreSQL, and the daemon itself (in process) read over HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from lagd import daemon
from lagd.core.config import Settings, parse
from lagd.embedded.services import free_port
from lagd.sim.driver import Driver
from lagd.sim.scenario import standard

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow


# lagd's default rules with their time knobs scaled to these seconds-long scenarios (1 s ticks):
# every commit kept (window-step 0, so a window is the last `intervals` commits, as Burrow's),
# a trend judged from 3 s of history, STOP after 4 s of silence, STALL after 2 s of one offset.
SCALED_EVALUATOR = {"window-step": 0.0, "min-history": 3.0, "stop-after": 4.0, "allowed-lag-seconds": 2.0}


def settings_for(
    kafka: str,
    database_url: str,
    port: int,
    offsets_topic: str,
    *,
    intervals: int = 10,
    evaluator: dict[str, Any] | None = None,
    notify: dict[str, Any] | None = None,
) -> Settings:
    return parse(
        {
            "clusters": {
                "sim": {
                    "bootstrap-servers": [kafka],
                    "offsets-topic": offsets_topic,
                    "offset-refresh": 0.5,
                    "topic-refresh": 2.0,
                }
            },
            "storage": {"database-url": database_url, "intervals": intervals, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2, **SCALED_EVALUATOR, **(evaluator or {})},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": notify or {"enabled": False},
        },
        env={},
    )


async def get(session: aiohttp.ClientSession, port: int, path: str) -> tuple[int, Any]:
    async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
        ctype = answer.headers.get("Content-Type", "")
        return answer.status, (await answer.json() if "json" in ctype else await answer.text())


async def snapshot(session: aiohttp.ClientSession, port: int, groups: list[str]) -> dict[str, Any]:
    """Each group's verdict and every partition's status and window, as the API shows them."""
    out: dict[str, Any] = {}
    for g in groups:
        _, lag = await get(session, port, f"/v3/kafka/sim/consumer/{g}/lag")
        _, detail = await get(session, port, f"/v3/kafka/sim/consumer/{g}")
        status = lag["status"]
        out[g] = {
            "status": status["status"],
            "partitions": sorted((p["topic"], p["partition"], p["status"]) for p in status["partitions"]),
            "windows": {
                t: [[o and o["offset"] for o in p["offsets"]] for p in parts]
                for t, parts in detail.get("topics", {}).items()
            },
        }
    return out


async def records_read(session: aiohttp.ClientSession, port: int) -> int:
    _, text = await get(session, port, "/metrics")
    return sum(
        int(float(m.group(1)))
        for m in re.finditer(r'^lagd_ingest_records_total\{cluster="sim"[^}]*\} (\S+)$', text, re.M)
    )


async def start_daemon(settings: Settings) -> tuple[asyncio.Task[int], asyncio.Event]:
    stop = asyncio.Event()
    return asyncio.create_task(daemon.run(settings, stop=stop)), stop


async def test_restart_keeps_every_verdict_and_resumes_where_it_left_off(
    kafka: str, database_url: str, unique: str, settle: Settle
) -> None:
    port = free_port()
    offsets_topic = f"__consumer_offsets_{unique}"
    scenario = dataclasses.replace(standard(unique, partitions=4), start_ms=int(time.time() * 1000))
    groups = [g.name for g in scenario.groups]
    settings = settings_for(kafka, database_url, port, offsets_topic)
    driver = Driver(kafka, scenario, mode="topic", offsets_topic=offsets_topic, offsets_partitions=4)
    await driver.start()
    task, stop = await start_daemon(settings)
    try:
        async with aiohttp.ClientSession() as session:
            await settle(lambda: _ready(session, port), timeout=30, what="first start ready")
            await driver.run(until=8.0)
            expected_groups = set(groups)
            await settle(lambda: _all_known(session, port, expected_groups), timeout=30, what="every group judged")
            # The simulator has stopped: every partition with lag ends STOP once stop-after has
            # passed. Wait for that terminal picture, then freeze it.
            await settle(lambda: _terminal(session, port, groups), timeout=30, what="verdicts settled on STOP/OK")
            before = await snapshot(session, port, groups)
            statuses = {v["status"] for v in before.values()}
            assert "ERR" in statuses and "OK" in statuses, before
            read_first = await records_read(session, port)
            assert read_first > 0
            stop.set()
            assert await asyncio.wait_for(task, 10) == 0

            task, stop = await start_daemon(settings)
            await settle(lambda: _ready(session, port), timeout=30, what="restart ready")
            after = await snapshot(session, port, groups)
            assert after == before
            assert all(v["status"] != "NOTFOUND" and v["windows"] for v in after.values())
            # Resumed from the stored positions: nothing of the topic was read again.
            assert await records_read(session, port) == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await driver.close()


async def _ready(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        status, _ = await get(session, port, "/burrow/admin/ready")
    except aiohttp.ClientError:
        return False
    return status == 200


async def _terminal(session: aiohttp.ClientSession, port: int, groups: list[str]) -> bool:
    """Every partition behind its log end reads STOP, every other one OK: nothing left to change."""
    for g in groups:
        _, lag = await get(session, port, f"/v3/kafka/sim/consumer/{g}/lag")
        for p in lag["status"]["partitions"]:
            if p["status"] != ("STOP" if p["current_lag"] > 0 else "OK"):
                return False
    return True


async def _all_known(session: aiohttp.ClientSession, port: int, groups: set[str]) -> bool:
    _, body = await get(session, port, "/v3/kafka/sim/consumer")
    return groups <= set(body.get("consumers", []))
