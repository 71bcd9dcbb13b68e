"""The notify loop: verdict changes in, incident events recorded to the outbox when leader.

Per cluster: while this instance holds the cluster's lease it restores the engine state from
Postgres, feeds it changes, ticks it every second and records every event with the new
state and the retained group-status messages in one transaction. Without the lease it drops
the cluster's changes (the leader handles them) and reloads the state when it takes over.
If recording fails (database away) the events are kept in memory and retried on the next
tick with the newer state, so nothing is lost while the process lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd import logs
from lagd.config import NotifySettings
from lagd.notify import outbox
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from lagd.notify.leader import Lease

log = logs.get(__name__)

LEASE_RETRY = 5.0
TICK = 1.0


@dataclass(slots=True)
class _Unrecorded:
    events: list[IncidentEvent] = field(default_factory=list)
    retained: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    dirty: bool = False


def _now_ms() -> int:
    return int(time.time() * 1000)


async def run_notifier(
    engine: AsyncEngine,
    settings: NotifySettings,
    changes: asyncio.Queue[GroupChange],
    stop: asyncio.Event,
    lease_retry: float = LEASE_RETRY,
) -> None:
    """Run until `stop` is set; releases every lease on the way out."""
    rules = Rules.from_settings(settings)
    incidents = IncidentEngine(rules)
    leases: dict[str, Lease] = {}
    unrecorded: dict[str, _Unrecorded] = {}
    loop = asyncio.get_running_loop()
    next_tick = loop.time()
    next_lease = loop.time()

    async def ensure_lease(cluster: str, retry: bool) -> bool:
        """Whether we lead `cluster`; a new or `retry`ed lease asks Postgres again."""
        lease = leases.get(cluster)
        if lease is None:
            lease = leases[cluster] = Lease(engine, cluster)
            retry = True
        was = lease.is_leader
        if retry or (not was and time.monotonic() - lease.tried_at >= lease_retry):
            await lease.refresh()
        if lease.is_leader and not was:
            try:
                state = await outbox.load_engine_state(engine, cluster)
                if state is not None:
                    incidents.load_cluster(cluster, state)
            except (SQLAlchemyError, OSError, ValueError, KeyError) as exc:
                log.error("cannot restore incident state; starting afresh", cluster=cluster, error=str(exc))
        return lease.is_leader

    async def flush(cluster: str) -> None:
        pend = unrecorded.get(cluster)
        if pend is None or not (pend.events or pend.retained or pend.dirty):
            return
        try:
            await outbox.record(
                engine, cluster, pend.events, incidents.dump_cluster(cluster), pend.retained, settings.topic_prefix
            )
        except (SQLAlchemyError, OSError) as exc:
            log.warning("recording incident events failed; retrying on the next tick", cluster=cluster, error=str(exc))
            return
        unrecorded[cluster] = _Unrecorded()

    try:
        with contextlib.suppress(SQLAlchemyError, OSError):
            for known in await outbox.engine_state_clusters(engine):
                await ensure_lease(known, retry=True)
        while not stop.is_set():
            timeout = max(0.0, next_tick - loop.time())
            try:
                change = await asyncio.wait_for(changes.get(), timeout=timeout)
            except TimeoutError:
                change = None
            if change is not None:
                if await ensure_lease(change.cluster, retry=False):
                    pend = unrecorded.setdefault(change.cluster, _Unrecorded())
                    pend.events.extend(incidents.apply(change))
                    pend.retained.append(outbox.group_status_message(settings.topic_prefix, change))
                    pend.dirty = True
                    if pend.events:
                        await flush(change.cluster)
                continue
            next_tick = loop.time() + TICK
            if loop.time() >= next_lease:
                for cluster in list(leases):
                    await ensure_lease(cluster, retry=True)
                next_lease = loop.time() + lease_retry
            for ev in incidents.tick(_now_ms()):
                lease = leases.get(ev.cluster)
                if lease is not None and lease.is_leader:
                    pend = unrecorded.setdefault(ev.cluster, _Unrecorded())
                    pend.events.append(ev)
                    pend.dirty = True
            for cluster in list(unrecorded):
                await flush(cluster)
    finally:
        for lease in leases.values():
            await lease.release()
