"""The publisher: drains the outbox to MQTT in order, QoS 1, surviving broker outages.

Why a separate task: recording never waits on MQTT. A row is marked delivered only after the
broker acknowledged it (PUBACK), so an outage or a crash can repeat a message (same
`event_id`, subscribers drop it) but never lose or reorder one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd import logs
from lagd.config import NotifySettings
from lagd.notify import outbox

log = logs.get(__name__)

MAX_BACKOFF = 30.0


@dataclass(slots=True)
class PublisherStatus:
    """What /metrics shows about delivery."""

    connected: bool = False
    pending: int = 0
    published_total: int = 0
    failures: int = 0
    last_error: str = ""


def client_options(settings: NotifySettings) -> dict[str, Any]:
    """aiomqtt.Client keyword arguments from the notify settings (URL, credentials, TLS)."""
    url = urlsplit(settings.mqtt_url)
    tls = url.scheme == "mqtts"
    opts: dict[str, Any] = {
        "hostname": url.hostname or "127.0.0.1",
        "port": url.port or (8883 if tls else 1883),
        "identifier": settings.client_id,
    }
    if settings.username:
        opts["username"] = settings.username
        opts["password"] = settings.password.reveal()
    if tls:
        opts["tls_context"] = ssl.create_default_context(cafile=settings.tls_ca_file or None)
    return opts


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def drain(
    engine: AsyncEngine, client: aiomqtt.Client, status: PublisherStatus, batch: int = 50, timeout: float = 5.0
) -> int:
    """Publish pending rows in id order, each acknowledged before the next; returns how many."""
    sent = 0
    while True:
        rows = await outbox.pending(engine, batch)
        if not rows:
            status.pending = 0
            return sent
        acked: list[int] = []
        try:
            for row in rows:
                body = json.dumps(row.payload, separators=(",", ":"), sort_keys=True)
                await client.publish(row.topic, body, qos=1, retain=row.retain, timeout=timeout)
                acked.append(row.id)
                status.published_total += 1
                sent += 1
        finally:
            # shielded: a cancelled publisher still records what the broker acknowledged
            await asyncio.shield(outbox.mark_delivered(engine, acked))
        if len(rows) < batch:
            status.pending = 0
            return sent


async def publish_outbox(
    engine: AsyncEngine,
    settings: NotifySettings,
    stop: asyncio.Event,
    status: PublisherStatus,
    publish_timeout: float = 5.0,
) -> None:
    """Run until `stop`: connect, drain every `publish_interval`, reconnect with backoff."""
    backoff = 0.5
    opts = client_options(settings)
    while not stop.is_set():
        try:
            async with aiomqtt.Client(timeout=publish_timeout, **opts) as client:
                status.connected = True
                backoff = 0.5
                log.info("mqtt connected", host=opts["hostname"], port=opts["port"])
                while not stop.is_set():
                    await drain(engine, client, status, timeout=publish_timeout)
                    await _pause(stop, settings.publish_interval)
        except aiomqtt.MqttError as exc:
            status.last_error = f"mqtt: {exc}"
        except (SQLAlchemyError, OSError) as exc:
            status.last_error = f"database: {exc}"
        else:
            break
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
    status.connected = False
