"""One retry policy for every reconnect loop (lagd.runtime.backoff): jittered, capped, and logged at once
and then at a steady cadence, by the daemon's start-up retries and the Kafka readers alike."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaConnectionError
from structlog.testing import capture_logs

from lagd import daemon
from lagd.core.model import IngestCounters
from lagd.embedded.services import free_port
from lagd.ingest.kafka_client import reconnecting, start_client
from lagd.runtime.backoff import Backoff, describe_error
from tests.test_ingest_kafka import cluster

Settle = Callable[..., Awaitable[Any]]


def test_waits_are_jittered_capped_and_grow() -> None:
    fleet = [Backoff(rng=random.Random(seed)) for seed in range(20)]
    waits = [[b.failed()[0] for _ in range(12)] for b in fleet]
    for w in waits:
        # The n-th wait lies in the upper half of 0.5 s x 2^(n-1), capped at 30 s: it backs off.
        assert all(min(30.0, 0.5 * 2**n) / 2 <= d <= min(30.0, 0.5 * 2**n) for n, d in enumerate(w))
    # A fleet that failed together does not retry together.
    assert len({round(sum(w[:6]), 3) for w in waits}) == len(fleet)
    assert len({round(w[3], 3) for w in waits}) > 10


def test_logs_at_once_then_every_30_s_with_the_attempt_count() -> None:
    now = [0.0]
    b = Backoff(clock=lambda: now[0])
    logged = []
    for second in range(100):
        now[0] = float(second)
        _, log_now = b.failed()
        if log_now:
            logged.append((b.attempts, b.waiting_s))
    assert logged == [(1, 0.0), (31, 30.0), (61, 60.0), (91, 90.0)]
    assert b.succeeded() is True
    assert b.attempts == 0 and b.failed()[1] is True  # a new outage is logged at once again


def test_errors_are_named_once() -> None:
    exc = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]")
    assert str(exc).startswith("KafkaConnectionError")
    assert describe_error(exc) == "KafkaConnectionError: Unable to bootstrap from [('127.0.0.1', 1)]"
    assert describe_error(OSError("refused")) == "OSError: refused"
    assert describe_error(TimeoutError()) == "TimeoutError"


async def test_start_up_retry_says_what_it_waits_for_at_once(settle: Settle) -> None:
    stop = asyncio.Event()
    calls = [0]

    async def attempt() -> None:
        calls[0] += 1
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")

    with capture_logs() as logged:
        task = asyncio.ensure_future(daemon._retry("restoring state from Postgres", attempt, stop, "start Postgres"))
        await settle(lambda: calls[0] >= 3, what="three attempts")
        stop.set()
        assert await task is None
    errors = [e for e in logged if e["log_level"] == "error"]
    assert len(errors) == 1  # the first failure at once; the next line only 30 s later
    first = errors[0]
    assert first["event"] == "restoring state from Postgres failed; retrying"
    assert first["attempt"] == 1 and first["hint"] == "start Postgres" and 0.2 <= first["retry_in_s"] <= 0.5
    assert first["error"] == "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 1)"


async def test_kafka_reconnect_loop_warns_once_per_outage_not_per_attempt(settle: Settle) -> None:
    settings = cluster(f"127.0.0.1:{free_port()}", request_timeout=1.0)
    stop, counters = asyncio.Event(), IngestCounters()

    async def session() -> None:
        client = await start_client(settings)
        await client.close()

    with capture_logs() as logged:
        task = asyncio.ensure_future(
            reconnecting(session, stop, counters, cluster=settings, what="test reader", counter="test", hint="start it")
        )
        await settle(lambda: sum(counters.failures.values()) >= 3, what="three failed attempts")
        stop.set()
        await task
    warned = [e for e in logged if e["log_level"] == "warning"]
    assert len(warned) == 1 and warned[0]["attempt"] == 1
    # aiokafka's "Unable to bootstrap" is explained: the address that refused, and what to check
    (address,) = settings.bootstrap_servers
    assert warned[0]["listener"] == address and warned[0]["error"] == "connection refused", warned
    assert "bootstrap-servers" in warned[0]["hint"], warned
