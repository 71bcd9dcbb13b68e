"""The publisher: drains the outbox to MQTT in order, QoS 1, surviving broker outages.

Why a separate task: recording never waits on MQTT. A row is marked delivered only after the
broker acknowledged it (PUBACK), so an outage or a crash can repeat a message (same
`event_id`, subscribers drop it) but never lose or reorder one.

Why a lease: every lagd instance runs a publisher, but only the one holding the publish
lease (a Postgres advisory lock, see `leader`) connects to MQTT and drains the outbox; the
others wait as standbys. Two instances therefore never send the same rows twice, and never
fight over one MQTT client id (the default id is made unique per host and process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import NotifySettings
from lagd.notify import outbox
from lagd.notify.leader import AVAILABILITY_KEY, PUBLISH_KEY, Lease
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

MAX_BACKOFF = 30.0
LEASE_RETRY = 5.0


@dataclass(slots=True)
class PublisherStatus:
    """What /metrics shows about delivery."""

    connected: bool = False
    leader: bool = False  # holds the publish lease (only the leader connects and publishes)
    pending: int = 0
    published_total: int = 0
    failures: int = 0
    last_error: str = ""


def client_id(settings: NotifySettings) -> str:
    """The MQTT client id: the configured one, made unique per host and process if it is the default.

    A broker disconnects a client when another connects with the same id, so instances left on
    the default id would keep kicking each other off.
    """
    configured = settings.client_id
    if configured != NotifySettings.client_id:
        return configured
    return f"{configured}-{socket.gethostname()}-{os.getpid()}"


def client_options(settings: NotifySettings) -> dict[str, Any]:
    """aiomqtt.Client keyword arguments from the notify settings (URL, credentials, TLS)."""
    url = urlsplit(settings.mqtt_url)
    tls = url.scheme == "mqtts"
    opts: dict[str, Any] = {
        "hostname": url.hostname or "127.0.0.1",
        "port": url.port or (8883 if tls else 1883),
        "identifier": client_id(settings),
    }
    if settings.username:
        opts["username"] = settings.username
        opts["password"] = settings.password.reveal()
    if tls:
        opts["tls_context"] = ssl.create_default_context(cafile=settings.tls_ca_file or None)
    return opts


_CLEAR_KEY = json.dumps(outbox.CLEAR)  # in a payload's text only where it may be a clear


def wire_body(row: outbox.OutboxRow) -> bytes:
    """What goes over MQTT for an outbox row: its JSON text as stored, or nothing for a retained
    clear. Until 2026-11-28 each payload was decoded from jsonb and encoded again (sorted, compact):
    4.7% of the loop at 1M group-partitions in bench_http, where thousands of statuses change a pass."""
    if row.retain and _CLEAR_KEY in row.payload and json.loads(row.payload).get(outbox.CLEAR):
        return b""
    return row.payload.encode()


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


def _honour_cancel() -> None:
    """Re-raise a cancellation that a library's asyncio.wait_for swallowed (Python 3.11).

    aiomqtt waits for PUBACK with wait_for; when the ack and a cancel arrive together it
    returns normally, and a cancelled publisher would run on forever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


# Outbox rows read, published and marked delivered at a time. Their publishes are handed to the
# client together, in order (`_hand_over`): paho-mqtt keeps up to its in-flight limit (20)
# unacknowledged on the wire and sends the rest as acks come. Publishing each only after the ack
# of the one before cost 172-216 us of the loop per 7 KB status message against mosquitto here,
# 105-120 us handed over 50 or 200 at a time: bench_http --phases large, where 500 statuses
# change a second, spent a tenth of its loop publishing them one by one. Each batch also costs
# three round trips to Postgres (the lease, the rows, their delivery).
BATCH = 200


async def drain(
    engine: AsyncEngine,
    client: aiomqtt.Client,
    status: PublisherStatus,
    batch: int = BATCH,
    timeout: float = 5.0,
    lease: Lease | None = None,
    *,
    clock: Clock = wall_ms,
) -> int:
    """Publish pending rows in id order; returns how many the broker acknowledged.

    With a `lease`, it is checked before each batch and draining stops once it is lost. The
    rows acknowledged are marked delivered, stamped with the time `clock` (lagd.runtime.clock) reads,
    also when a publish fails (which then propagates).
    """
    sent = 0
    while True:
        if lease is not None and not await lease.refresh():
            status.leader = False
            return sent
        rows = await outbox.pending(engine, batch)
        if not rows:
            status.pending = 0
            return sent
        acked: list[int] = []
        publishes = _hand_over(client, rows, timeout)
        try:
            # The broker acknowledges QoS 1 messages of one connection in the order it receives
            # them, so the rows acknowledged are always the first ones: a failure leaves the
            # rest pending, to go again after them, in order.
            for row, publish in zip(rows, publishes, strict=True):
                await publish
                acked.append(row.id)
                status.published_total += 1
                sent += 1
                _honour_cancel()
        finally:
            for publish in publishes:
                if not publish.done():
                    publish.cancel()
                publish.add_done_callback(_retrieved)
            # shielded: a cancelled publisher still records what the broker acknowledged
            await asyncio.shield(outbox.mark_delivered(engine, acked, clock=clock))
        if len(rows) < batch:
            status.pending = 0
            return sent


def _hand_over(client: aiomqtt.Client, rows: Sequence[outbox.OutboxRow], timeout: float) -> list[asyncio.Task[None]]:
    """Publish `rows` at QoS 1, handed to the client all at once and in their order: tasks start
    in the order they are made, and each hands its message to paho-mqtt before its first await."""
    client.pending_calls_threshold = max(client.pending_calls_threshold, len(rows))  # no warning per batch
    return [
        asyncio.ensure_future(client.publish(row.topic, wire_body(row), qos=1, retain=row.retain, timeout=timeout))
        for row in rows
    ]


def _retrieved(publish: asyncio.Future[None]) -> None:
    """Take a publish's failure, which the caller already acts on through the first one."""
    if not publish.cancelled():
        publish.exception()


async def publish_outbox(
    engine: AsyncEngine,
    settings: NotifySettings,
    stop: asyncio.Event,
    status: PublisherStatus,
    publish_timeout: float = 5.0,
    lease_retry: float = LEASE_RETRY,
    *,
    clock: Clock = wall_ms,
) -> None:
    """Run until `stop`: while holding the publish lease, connect, drain every `publish_interval`
    and reconnect with backoff; without it, stay off MQTT and retry the lease every `lease_retry`.
    """
    backoff = 0.5
    opts = client_options(settings)
    lease = Lease(engine, "*", key=PUBLISH_KEY, sink="mqtt")
    try:
        while not stop.is_set():
            status.leader = await lease.refresh()
            if not status.leader:
                status.connected = False
                await _pause(stop, lease_retry)
                continue
            try:
                async with aiomqtt.Client(timeout=publish_timeout, **opts) as client:
                    status.connected = True
                    backoff = 0.5
                    log.info("mqtt connected", host=opts["hostname"], port=opts["port"], client_id=opts["identifier"])
                    while not stop.is_set():
                        await drain(engine, client, status, timeout=publish_timeout, lease=lease, clock=clock)
                        if not lease.is_leader:
                            log.warning("publish lease lost; leaving the outbox to the new leader")
                            break
                        await _pause(stop, settings.publish_interval)
            except aiomqtt.MqttError as exc:
                status.last_error = f"mqtt: {exc}"
            except (SQLAlchemyError, OSError) as exc:
                status.last_error = f"database: {exc}"
            else:
                status.connected = False
                continue  # stopped, or the lease was lost: the loop decides
            status.connected = False
            status.failures += 1
            with contextlib.suppress(SQLAlchemyError, OSError):
                status.pending = await outbox.pending_count(engine)
            log.warning(
                "notify delivery interrupted; messages stay in the outbox and go out in order when it is back",
                error=status.last_error,
                retry_in=backoff,
                pending=status.pending,
            )
            await _pause(stop, backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
    finally:
        status.connected = False
        status.leader = False
        await lease.release()


ONLINE, DEGRADED = b"online", b"degraded"


async def _while_connected(
    clients: list[tuple[str, aiomqtt.Client]], stop: asyncio.Event, lease: Lease, lease_retry: float
) -> None:
    """Return on stop or when another instance holds the lease; raise MqttError as soon as a
    connection drops. While the lease is lost with Postgres (Lease.lost_to_outage) the topics
    say "degraded": lagd serves verdicts, but stores no history and records no incident.

    Each client listens on its own topic: aiomqtt ends a message iteration with MqttError when
    the connection goes, which is how a dropped connection is noticed at once.
    """

    async def hold() -> None:
        degraded = False
        while not stop.is_set():
            led = await lease.refresh()
            if not led and not lease.lost_to_outage:
                return  # another instance announces now
            if degraded == led:  # Postgres went away, or is back
                degraded = not led
                word = DEGRADED if degraded else ONLINE
                for topic, client in clients:
                    await client.publish(topic, word, qos=1, retain=True)
                log.info("availability announced", state=word.decode())
            await _pause(stop, lease_retry)

    async def watch(topic: str, client: aiomqtt.Client) -> None:
        await client.subscribe(topic, qos=1)
        async for _ in client.messages:
            pass
        raise aiomqtt.MqttError(f"connection for {topic} closed")

    tasks = [asyncio.create_task(hold()), *(asyncio.create_task(watch(t, c)) for t, c in clients)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


@dataclass(slots=True)
class AvailabilityStatus:
    """What /metrics could show about the availability announcer."""

    online: bool = False
    leader: bool = False
    last_error: str = ""


async def announce_availability(
    engine: AsyncEngine,
    settings: NotifySettings,
    clusters: list[str],
    stop: asyncio.Event,
    status: AvailabilityStatus | None = None,
    lease_retry: float = LEASE_RETRY,
    keepalive: int = 30,
) -> None:
    """Keep `<prefix>/<cluster>/status` at "online" (retained) while lagd runs ("degraded" while
    Postgres is away: see _while_connected), "offline" after.

    Why one MQTT connection per cluster: a connection has one last will, and each cluster's
    topic needs its own. The broker publishes the will ("offline", retained) when the
    connection dies without a clean goodbye (a crash, a cut network, keepalive missed); a
    clean stop publishes "offline" itself first. Only the holder of the availability lease
    announces, so a standby stopping never marks a cluster offline under a live leader.
    """
    status = status or AvailabilityStatus()
    lease = Lease(engine, "*", key=AVAILABILITY_KEY, sink="mqtt-status")
    backoff = 0.5
    base = client_options(settings)
    try:
        while not stop.is_set():
            status.leader = await lease.refresh()
            if not status.leader:
                await _pause(stop, lease_retry)
                continue
            try:
                async with contextlib.AsyncExitStack() as stack:
                    clients: list[tuple[str, aiomqtt.Client]] = []
                    for n, cluster in enumerate(clusters):
                        topic = outbox.availability_topic(settings.topic_prefix, cluster)
                        opts = {**base, "identifier": f"{base['identifier']}-status-{n}"}
                        will = aiomqtt.Will(topic, b"offline", qos=1, retain=True)
                        client = await stack.enter_async_context(aiomqtt.Client(will=will, keepalive=keepalive, **opts))
                        await client.publish(topic, ONLINE, qos=1, retain=True)
                        clients.append((topic, client))
                    status.online = True
                    backoff = 0.5
                    log.info("availability announced", clusters=clusters, state="online")
                    await _while_connected(clients, stop, lease, lease_retry)
                    for topic, client in clients:  # a clean goodbye sends no will: say it
                        with contextlib.suppress(aiomqtt.MqttError):
                            await client.publish(topic, b"offline", qos=1, retain=True, timeout=2)
                    status.online = False
            except aiomqtt.MqttError as exc:
                status.online = False
                status.last_error = f"mqtt: {exc}"
                log.warning(
                    "availability topic not announced; retrying (the broker shows the last will meanwhile)",
                    error=status.last_error,
                    retry_in=backoff,
                )
                await _pause(stop, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
    finally:
        status.online = False
        status.leader = False
        await lease.release()
