"""The notify loop: verdict changes in, incident events recorded to the outbox when leader.

Per cluster: while this instance holds the cluster's lease it feeds the engine the changes,
ticks it every second and records every event with the new state and the retained
group-status messages in one transaction. Without the lease it ignores the cluster's
changes (the leader handles them) and leaves its state alone.

Taking over a cluster (the lease gained, at start or after losing it):
- If the stored state is the one this process saved last (nobody else led in between, as
  after a database outage), the in-memory state is kept together with the events it still
  holds unrecorded, which are recorded first. Reloading instead would roll the engine back
  and reissue sequence numbers, so new events would collide with the held ones.
- Otherwise (another instance led, or this process never did) the stored state is loaded,
  and whatever this process held unrecorded is dropped: it continued a state that lost.
- Then the feed's snapshot of current verdicts is replayed, and groups that the engine has
  in open incidents but the snapshot no longer knows are reported NOTFOUND. Changes dropped
  as a standby, or never recorded by the previous leader, are caught up this way; statuses
  the engine already knows change nothing.

Every record is fenced (`outbox.Fence`) on the state this process last saved or loaded, so
two writers can never both extend one state: the loser gets no rows stored, gives the lease
back and takes over again later. If recording fails (database away) the events are kept in
memory and retried on the next tick with the newer state, so nothing is lost while the
process lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd import logs
from lagd.clock import Clock, wall_ms
from lagd.config import NotifySettings
from lagd.model import GroupStatus
from lagd.notify import outbox
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from lagd.notify.leader import Lease
from lagd.slices import SLICE_S, Slices
from lagd.turns import Turn, plain_turn

log = logs.get(__name__)

LEASE_RETRY = 5.0
TICK = 1.0
# Incident members JSON-encoded between two looks at the clock when the state is saved: a
# member of 100 bad partitions takes about 75 us, so a step stays well inside a slice (SLICE_S).
MEMBERS_PER_STEP = 8


class VerdictSource(Protocol):
    """Where the notifier takes verdict changes from: a process's own VerdictFeed
    (lagd.notify.feed) or, with workers, every worker's changes read from Postgres
    (lagd.notify.shared_verdicts.SharedFeed)."""

    async def get(self) -> GroupChange: ...

    def get_nowait(self) -> GroupChange: ...

    def empty(self) -> bool: ...

    def qsize(self) -> int: ...

    def snapshot(self, cluster: str) -> list[GroupChange] | None: ...


@dataclass(slots=True)
class _Unrecorded:
    events: list[IncidentEvent] = field(default_factory=list)
    retained: list[outbox.Retained] = field(default_factory=list)
    dirty: bool = False

    def any(self) -> bool:
        return bool(self.events or self.retained or self.dirty)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """A record that failed on the way: it may still have committed (e.g. lost at COMMIT)."""

    token: str
    events: int
    retained: int


async def run_notifier(
    engine: AsyncEngine,
    settings: NotifySettings,
    changes: VerdictSource,
    stop: asyncio.Event,
    lease_retry: float = LEASE_RETRY,
    *,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
) -> None:
    """Run until `stop` is set; releases every lease on the way out.

    `clock` (lagd.clock) is "now" for the engine's ticks, for groups found gone on a takeover
    and for the outbox rows recorded; the tick and lease intervals run on the loop's clock.
    A reconcile over every group awaits `turn` between its slices (lagd.turns).
    """
    rules = Rules.from_settings(settings)
    prefix = settings.topic_prefix
    incidents = IncidentEngine(rules)
    leases: dict[str, Lease] = {}
    held: dict[str, _Unrecorded] = {}
    stored: dict[str, outbox.Fence] = {}  # the stored state each cluster's engine state continues
    attempts: dict[str, list[_Attempt]] = {}  # failed records since the last success
    unreconciled: set[str] = set()  # taken over before the feed had a snapshot
    loop = asyncio.get_running_loop()
    next_tick = loop.time()
    next_lease = loop.time()

    def hold(cluster: str) -> _Unrecorded:
        return held.setdefault(cluster, _Unrecorded())

    async def take_over(cluster: str) -> None:
        """Just became leader of `cluster`: settle which state to continue, then catch up."""
        try:
            state = await outbox.load_engine_state(engine, cluster)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("cannot read the incident state; leaving the lease for now", cluster=cluster, error=str(exc))
            await leases[cluster].release()
            return
        found = outbox.Fence.of(state)
        pend = held.get(cluster)
        for attempt in attempts.pop(cluster, []):
            if found == outbox.Fence(True, attempt.token):
                # a record that seemed to fail did commit: what it carried is stored
                if pend is not None:
                    del pend.events[: attempt.events]
                    del pend.retained[: attempt.retained]
                stored[cluster] = found
        if stored.get(cluster) != found:
            if pend is not None and pend.events:
                log.warning(
                    "another instance recorded incidents meanwhile; dropping events this one did not record",
                    cluster=cluster,
                    dropped=len(pend.events),
                )
            held.pop(cluster, None)
            incidents.drop_cluster(cluster)
            if state is not None:
                try:
                    incidents.load_cluster(cluster, state)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("cannot restore incident state; starting afresh", cluster=cluster, error=str(exc))
                    incidents.drop_cluster(cluster)
            stored[cluster] = found
        await reconcile(cluster)

    async def reconcile(cluster: str) -> None:
        """Replay the current verdicts of the cluster's groups into the engine and record the outcome."""
        snap = changes.snapshot(cluster)
        if snap is None:
            unreconciled.add(cluster)  # no complete picture yet: again on a later tick
            return
        unreconciled.discard(cluster)
        pend = hold(cluster)
        before = len(pend.events)
        seen: set[str] = set()
        slices = Slices(SLICE_S, turn)  # thousands of groups: the loop gets its turns
        for ch in snap:
            seen.add(ch.group)
            pend.events.extend(incidents.apply(ch))
            pend.retained.append(outbox.status_row(prefix, ch))
            await slices.turn()
        now = clock()
        for group in sorted(incidents.members(cluster)):
            if group not in seen:  # in an open incident, but gone
                gone = GroupChange(cluster, group, GroupStatus.NOTFOUND, now)
                pend.events.extend(incidents.apply(gone))
                pend.retained.append(outbox.status_row(prefix, gone))
        pend.dirty = True
        log.info(
            "incident state caught up with current verdicts",
            cluster=cluster,
            groups=len(snap),
            events=len(pend.events) - before,
        )
        await flush(cluster)

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
            await take_over(cluster)
        return lease.is_leader

    async def flush(cluster: str) -> None:
        lease = leases.get(cluster)
        pend = held.get(cluster)
        if lease is None or not lease.is_leader or pend is None or not pend.any():
            return
        token = uuid.uuid4().hex
        state = incidents.save_rows(cluster, {outbox.SAVED_BY: token})
        slices = Slices(SLICE_S, turn)  # a full save of 10,000 members of 100 partitions: 331 ms of encoding
        while state.encode(MEMBERS_PER_STEP):
            await slices.turn()
        fence = stored.get(cluster, outbox.Fence(False))
        try:
            await outbox.record(engine, cluster, pend.events, state, pend.retained, prefix, fence=fence, clock=clock)
        except outbox.StateConflict as exc:
            log.warning("another instance writes this cluster's incidents; leaving it the lease", error=str(exc))
            incidents.save_failed(cluster)
            await lease.release()  # taken over again later, from the state then stored
            return
        except (SQLAlchemyError, OSError) as exc:
            incidents.save_failed(cluster)
            attempts.setdefault(cluster, []).append(_Attempt(token, len(pend.events), len(pend.retained)))
            log.warning("recording incident events failed; retrying on the next tick", cluster=cluster, error=str(exc))
            return
        attempts.pop(cluster, None)
        stored[cluster] = outbox.Fence(True, token)
        held[cluster] = _Unrecorded()

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
                    pend = hold(change.cluster)
                    pend.events.extend(incidents.apply(change))
                    pend.retained.append(outbox.status_row(prefix, change))
                    pend.dirty = True
                    if pend.events:
                        await flush(change.cluster)
                continue
            next_tick = loop.time() + TICK
            if loop.time() >= next_lease:
                for cluster in list(leases):
                    await ensure_lease(cluster, retry=True)
                next_lease = loop.time() + lease_retry
            for cluster in sorted(unreconciled):
                if leases[cluster].is_leader:
                    await reconcile(cluster)
            led = {cluster for cluster, lease in leases.items() if lease.is_leader}
            for ev in incidents.tick(clock(), led):
                pend = hold(ev.cluster)
                pend.events.append(ev)
                pend.dirty = True
            for cluster in list(held):
                await flush(cluster)
    finally:
        for lease in leases.values():
            await lease.release()
