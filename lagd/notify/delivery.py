"""Sink delivery: one loop per sink drains the outbox from that sink's own position.

Why a position per sink: the outbox is written once (with the incident state, see `outbox`)
and read by every sink at its own pace. A sink whose receiver is slow or down retries the
event at its head with exponential backoff and jitter, and after `dead-letter-after` seconds
moves it to `dead_letters` (GET /lagd/v1/dead-letters) and goes on; the other sinks, each in
its own task, never wait for it.

Why it loses nothing: the position (and the retry state of the head event) is stored in
Postgres and only advanced after the receiver answered 2xx or the event was dead-lettered,
in the same transaction as the dead letter. A crash or restart sends the head event again:
delivery is at least once, and every repeat carries the same event id (`X-Lagd-Event-Id`,
the body's `event_id`, PagerDuty's dedup key, Alertmanager's labels).

Why a lease: like the MQTT publisher, only the holder of the sink's lease (a Postgres advisory
lock, `lagd-sink:<name>`) delivers, so two lagd instances never both send.

A new sink starts at the end of the outbox: it gets events recorded after it was first run,
not the whole history.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import SinkSettings
from lagd.db.schema import dead_letters, outbox, sink_positions
from lagd.notify import sinks
from lagd.notify.leader import Lease
from lagd.notify.outbox import list_incidents
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

LEASE_RETRY = 5.0
BATCH = 100
DB_RETRY_MAX = 30.0


def sink_lease_key(name: str) -> str:
    return f"lagd-sink:{name}"


def backoff(attempt: int, initial: float, cap: float, rnd: float) -> float:
    """Seconds to wait after the `attempt`-th failure (1-based): doubling from `initial`, at most
    `cap`, with "equal jitter" (between half and all of it; `rnd` in [0, 1)) so that retries of
    many events or instances do not arrive in lockstep."""
    base = min(cap, initial * 2.0 ** min(attempt - 1, 62))
    return base / 2 + base / 2 * rnd


class Retryable(Exception):
    """The receiver may take it later (connection refused, timeout, 408, 425, 429, 5xx)."""


class Refused(Exception):
    """The receiver will never take it (another 4xx): dead-lettered at once."""


@dataclass(slots=True)
class SinkStatus:
    """What /metrics shows about one sink."""

    name: str
    kind: str
    leader: bool = False
    position: int = 0
    backlog: int = 0  # incident events after the position
    delivered_total: int = 0
    failures_total: int = 0
    dead_letters_total: int = 0
    retrying_since: int | None = None  # ms: first failure of the event at the head
    last_error: str = ""
    last_delivered_at: int | None = None


@dataclass(frozen=True, slots=True)
class _Head:
    position: int
    retry_id: int | None
    retry_since: int | None
    attempts: int


@dataclass(frozen=True, slots=True)
class _Row:
    id: int
    event_id: str
    payload: dict[str, Any]


def _incident_rows() -> Any:
    return outbox.c.retain.is_(False)  # retained rows are MQTT's group-status messages


async def load_head(engine: AsyncEngine, sink: str, *, clock: Clock = wall_ms) -> _Head:
    """The sink's stored position; a sink seen for the first time starts at the end of the outbox."""
    async with engine.begin() as conn:
        row = (await conn.execute(select(sink_positions).where(sink_positions.c.sink == sink))).first()
        if row is None:
            end = int(await conn.scalar(select(func.coalesce(func.max(outbox.c.id), 0))) or 0)
            await conn.execute(
                insert(sink_positions)
                .values(sink=sink, position=end, updated_at=clock())
                .on_conflict_do_nothing(index_elements=[sink_positions.c.sink])
            )
            row = (await conn.execute(select(sink_positions).where(sink_positions.c.sink == sink))).one()
        return _Head(int(row.position), row.retry_id, row.retry_since, int(row.attempts))


async def rows_after(engine: AsyncEngine, position: int, limit: int = BATCH) -> list[_Row]:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(outbox.c.id, outbox.c.event_id, outbox.c.payload)
            .where(outbox.c.id > position, _incident_rows())
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return [_Row(int(r.id), str(r.event_id), dict(r.payload)) for r in result]


async def backlog(engine: AsyncEngine, position: int) -> int:
    async with engine.connect() as conn:
        n = await conn.scalar(select(func.count()).select_from(outbox).where(outbox.c.id > position, _incident_rows()))
        return int(n or 0)


async def advance(engine: AsyncEngine, sink: str, position: int, *, clock: Clock = wall_ms) -> None:
    """The event at `position` is delivered: move past it and clear the retry state."""
    async with engine.begin() as conn:
        await conn.execute(
            update(sink_positions)
            .where(sink_positions.c.sink == sink, sink_positions.c.position < position)
            .values(position=position, retry_id=None, retry_since=None, attempts=0, last_error="", updated_at=clock())
        )


async def note_failure(
    engine: AsyncEngine, sink: str, row_id: int, since: int, attempts: int, error: str, *, clock: Clock = wall_ms
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(sink_positions)
            .where(sink_positions.c.sink == sink)
            .values(retry_id=row_id, retry_since=since, attempts=attempts, last_error=error[:2000], updated_at=clock())
        )


async def dead_letter(
    engine: AsyncEngine, sink: str, row: _Row, error: str, attempts: int, since: int, *, clock: Clock = wall_ms
) -> None:
    """Give up on `row` for `sink`: store it in dead_letters and move past it, in one transaction."""
    now = clock()
    async with engine.begin() as conn:
        await conn.execute(
            insert(dead_letters)
            .values(
                sink=sink,
                outbox_id=row.id,
                event_id=row.event_id,
                error=error[:2000],
                attempts=attempts,
                first_attempt_at=since,
                dead_at=now,
                payload=row.payload,
            )
            .on_conflict_do_nothing(constraint="uq_dead_letters_sink_event_id")
        )
        await conn.execute(
            update(sink_positions)
            .where(sink_positions.c.sink == sink, sink_positions.c.position < row.id)
            .values(position=row.id, retry_id=None, retry_since=None, attempts=0, last_error="", updated_at=now)
        )


async def list_dead_letters(engine: AsyncEngine, sink: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Dead letters, newest first, for the HTTP API."""
    query = select(dead_letters).order_by(dead_letters.c.id.desc()).limit(limit)
    if sink is not None:
        query = query.where(dead_letters.c.sink == sink)
    async with engine.connect() as conn:
        return [
            {
                "sink": r.sink,
                "event_id": r.event_id,
                "outbox_id": r.outbox_id,
                "error": r.error,
                "attempts": r.attempts,
                "first_attempt_at": r.first_attempt_at,
                "dead_at": r.dead_at,
                "payload": r.payload,
            }
            for r in await conn.execute(query)
        ]


async def send(session: aiohttp.ClientSession, req: sinks.Request, timeout: float) -> None:
    """Send one request; raise Retryable or Refused unless the receiver answered 2xx."""
    try:
        async with session.request(
            req.method, req.url, data=req.body, headers=req.headers, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            text = (await resp.text(errors="replace"))[:300]
            if 200 <= resp.status < 300:
                return
            what = f"HTTP {resp.status} from {_where(req.url)}: {text.strip()}"
            if resp.status in (408, 425, 429) or resp.status >= 500:
                raise Retryable(what)
            raise Refused(what + " (the receiver refuses this request: check the sink's url, headers and keys)")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise Retryable(f"{exc.__class__.__name__} talking to {_where(req.url)}: {exc}") from None


def _where(url: str) -> str:
    """The URL without its path and query (Slack and webhook URLs carry secrets there)."""
    parts = url.split("/", 3)
    return "/".join(parts[:3]) if len(parts) >= 3 else url


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def run_sink(
    engine: AsyncEngine,
    settings: SinkSettings,
    stop: asyncio.Event,
    status: SinkStatus,
    *,
    status_url: str = "",
    poll_interval: float = 1.0,
    lease_retry: float = LEASE_RETRY,
    rnd: Callable[[], float] = random.random,
    clock: Clock = wall_ms,
) -> None:
    """Deliver the outbox's incident events to one sink until `stop` (see the module doc).

    `clock` (lagd.runtime.clock) is "now" for payloads, alerts, positions and dead letters, and for
    `dead-letter-after`; waits between attempts run on the loop's clock.
    """
    name = settings.name
    lease = Lease(engine, name, key=sink_lease_key(name), sink=name)
    refresh_every = settings.alert_ttl / 3
    next_refresh = 0.0
    db_delay = 0.5
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                status.leader = await lease.refresh()
                if not status.leader:
                    await _pause(stop, lease_retry)
                    continue
                try:
                    if settings.kind == "alertmanager" and loop.time() >= next_refresh:
                        next_refresh = loop.time() + refresh_every
                        await _refresh_alerts(engine, session, settings, status, status_url, clock)
                    head = await load_head(engine, name, clock=clock)
                    status.position = head.position
                    rows = await rows_after(engine, head.position)
                    status.backlog = len(rows) if len(rows) < BATCH else await backlog(engine, head.position)
                    for row in rows:
                        if not await _deliver(
                            engine, session, settings, stop, status, lease, head, row, status_url, rnd, clock
                        ):
                            break  # stopped or the lease was lost: the outer loop decides
                        head = _Head(row.id, None, None, 0)
                        status.position = row.id
                        status.backlog = max(0, status.backlog - 1)
                    db_delay = 0.5
                    if len(rows) < BATCH:
                        await _pause(
                            stop,
                            min(poll_interval, max(0.0, next_refresh - loop.time()))
                            if settings.kind == "alertmanager"
                            else poll_interval,
                        )
                except (SQLAlchemyError, OSError) as exc:
                    status.last_error = f"database: {exc}"
                    log.warning(
                        "sink delivery paused: the database is away; it resumes from the stored position",
                        sink=name,
                        error=str(exc),
                        retry_in=db_delay,
                    )
                    await _pause(stop, db_delay)
                    db_delay = min(db_delay * 2, DB_RETRY_MAX)
    finally:
        status.leader = False
        await lease.release()


async def _deliver(
    engine: AsyncEngine,
    session: aiohttp.ClientSession,
    settings: SinkSettings,
    stop: asyncio.Event,
    status: SinkStatus,
    lease: Lease,
    head: _Head,
    row: _Row,
    status_url: str,
    rnd: Callable[[], float],
    clock: Clock,
) -> bool:
    """Deliver `row` (retrying, or dead-lettering); False if stopped or the lease was lost first."""
    name = settings.name
    attempts = head.attempts if head.retry_id == row.id else 0
    since = head.retry_since if head.retry_id == row.id else None
    while not stop.is_set():
        now = clock()
        req = sinks.request_for(settings, row.payload, now, status_url)
        try:
            await send(session, req, settings.timeout)
        except Refused as exc:
            await _give_up(engine, status, name, row, str(exc), attempts + 1, since or now, clock)
            return True
        except Retryable as exc:
            attempts += 1
            since = since or now
            status.failures_total += 1
            status.last_error = str(exc)
            status.retrying_since = since
            if now - since >= settings.dead_letter_after * 1000:
                await _give_up(engine, status, name, row, str(exc), attempts, since, clock)
                return True
            await note_failure(engine, name, row.id, since, attempts, str(exc), clock=clock)
            wait = backoff(attempts, settings.retry_initial, settings.retry_max, rnd())
            wait = min(wait, max(0.0, (since - clock()) / 1000 + settings.dead_letter_after) + 0.001)
            if attempts == 1 or attempts % 10 == 0:
                log.warning(
                    "sink delivery failed; retrying with backoff (other sinks go on)",
                    sink=name,
                    **_about(row),
                    error=str(exc),
                    attempt=attempts,
                    retry_in=round(wait, 2),
                    hint=f"it goes to dead-letters after {settings.dead_letter_after:g}s (sinks.{name}.dead-letter-after)",
                )
            await _pause(stop, wait)
            if stop.is_set() or not await lease.refresh():
                return False
            continue
        # shielded: a delivery the receiver took is recorded even if the task is cancelled now
        await asyncio.shield(advance(engine, name, row.id, clock=clock))
        status.delivered_total += 1
        status.last_delivered_at = clock()
        status.retrying_since = None
        status.last_error = ""
        return True
    return False


def _about(row: _Row) -> dict[str, Any]:
    """What a delivery line says of the event: the fields the incident lines use (lagd.notify.eventlog)."""
    p = row.payload
    return {
        "cluster": p.get("cluster"),
        "incident_id": p.get("id"),
        "event_id": row.event_id,
        "event_kind": p.get("event"),  # opened, updated, resolved ("event" is the line's message)
        "status": p.get("severity"),
        "reason": p.get("reason"),
    }


async def _give_up(
    engine: AsyncEngine, status: SinkStatus, name: str, row: _Row, error: str, attempts: int, since: int, clock: Clock
) -> None:
    await asyncio.shield(dead_letter(engine, name, row, error, attempts, since, clock=clock))
    status.dead_letters_total += 1
    status.retrying_since = None
    log.error(
        "sink gave up on an event; it is in the dead letters",
        sink=name,
        **_about(row),
        error=error,
        attempts=attempts,
        hint="see GET /lagd/v1/dead-letters; fix the receiver or the sink's settings",
    )


async def _refresh_alerts(
    engine: AsyncEngine,
    session: aiohttp.ClientSession,
    settings: SinkSettings,
    status: SinkStatus,
    status_url: str,
    clock: Clock,
) -> None:
    """Re-post every open incident's alert before its endsAt passes (Alertmanager would resolve it)."""
    open_ = await list_incidents(engine, state="open", limit=10_000)
    if not open_:
        return
    now = clock()
    ttl_ms = int(settings.alert_ttl * 1000)
    alerts = [
        sinks.alert(inc, now, ttl_ms, sinks.incident_url(status_url, str(inc["id"])), resolved=False) for inc in open_
    ]
    try:
        await send(session, sinks.alertmanager(alerts, settings), settings.timeout)
    except (Retryable, Refused) as exc:
        status.failures_total += 1
        if not status.last_error.startswith("refreshing alerts"):  # once per streak of failures
            log.warning(
                "re-posting the open incidents' alerts failed; they expire at their endsAt unless a later post lands",
                sink=settings.name,
                open_incidents=len(open_),
                error=str(exc),
            )
        status.last_error = f"refreshing alerts: {exc}"
