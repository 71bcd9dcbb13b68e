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

While Postgres is away the lease is lost with its session, but nobody else can lead then: a
cluster whose lease went that way (`Lease.lost_to_outage`) is judged on, its changes taken and
its incidents ticked (a group ERR for the hold time and OK again inside the outage opens and
resolves its incident), and the events are held, each saying in its summary that it is
recorded late (as does an event whose record failed), until the lease is regained and they
are recorded (issue 50: the feed keeps only each group's newest status, so a change not
taken then was lost). Held memory stays bounded: a held `updated` replaces the one held
before it for its incident, and the retained statuses are not held (the takeover's catch-up
publishes every group's current one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import NotifySettings
from lagd.core.model import GroupStatus
from lagd.notify import eventlog, outbox
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from lagd.notify.leader import Lease
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.slices import SLICE_S, Slices
from lagd.runtime.turns import Turn, plain_turn

log = logs.get(__name__)

LEASE_RETRY = 5.0
TICK = 1.0
# Incident members JSON-encoded between two looks at the clock when the state is saved: a
# member of 100 bad partitions takes about 75 us, so a step stays well inside a slice (SLICE_S).
MEMBERS_PER_STEP = 8
LATE = "recorded late, Postgres was away"  # the summary's prefix of an event held through an outage


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

    def hold(self, events: list[IncidentEvent], kept: int) -> None:
        """Hold events made while Postgres is away, each marked late; an `updated` replaces the
        held `updated` of its incident (each event carries the whole incident) past the first
        `kept` events, which a record that seemed to fail may have stored (_Attempt)."""
        for ev in events:
            if ev.event == "updated":
                for i in range(len(self.events) - 1, kept - 1, -1):
                    held = self.events[i]
                    if held.incident_id == ev.incident_id:
                        if held.event == "updated" and held.summary.startswith(LATE):
                            del self.events[i]
                        break
            self.events.append(late(ev))

    def fail(self) -> None:
        """A record failed (Postgres away): what it carried goes out late, and says so."""
        self.events = [late(ev) for ev in self.events]


def late(ev: IncidentEvent) -> IncidentEvent:
    """The event as recorded after an outage held it: its summary says so."""
    return ev if ev.summary.startswith(LATE) else dataclasses.replace(ev, summary=f"{LATE}: {ev.summary}")


@dataclass(frozen=True, slots=True)
class _Attempt:
    """A record that failed on the way: it may still have committed (e.g. lost at COMMIT)."""

    token: str
    events: int
    retained: int


class Notifier:
    """One process's incident notifier: the engine, the leases it holds per cluster, and per
    cluster what is not recorded yet (`held`), the stored state it continues (`stored`) and the
    records that seemed to fail (`attempts`). `run_notifier` drives it."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: NotifySettings,
        changes: VerdictSource,
        lease_retry: float = LEASE_RETRY,
        *,
        clock: Clock = wall_ms,
        turn: Turn = plain_turn,
    ) -> None:
        self.engine = engine
        self.changes = changes
        self.lease_retry = lease_retry
        self.clock = clock
        self.turn = turn
        self.prefix = settings.topic_prefix
        # the retained group-status messages are MQTT's alone: none recorded while MQTT is off
        self.retained = settings.mqtt_enabled
        self.incidents = IncidentEngine(Rules.from_settings(settings))
        self.leases: dict[str, Lease] = {}
        self.held: dict[str, _Unrecorded] = {}
        self.stored: dict[str, outbox.Fence] = {}  # the stored state each cluster's engine state continues
        self.attempts: dict[str, list[_Attempt]] = {}  # failed records since the last success
        self.unreconciled: set[str] = set()  # taken over before the feed had a snapshot

    def hold(self, cluster: str) -> _Unrecorded:
        return self.held.setdefault(cluster, _Unrecorded())

    def _status(self, pend: _Unrecorded, change: GroupChange) -> None:
        """The group's retained status message, to be recorded with the next events (MQTT only)."""
        if self.retained:
            pend.retained.append(outbox.status_row(self.prefix, change))

    async def take_over(self, cluster: str) -> None:
        """Just became leader of `cluster`: settle which state to continue, then catch up."""
        try:
            state = await outbox.load_engine_state(self.engine, cluster)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("cannot read the incident state; leaving the lease for now", cluster=cluster, error=str(exc))
            await self.leases[cluster].release()
            return
        found = outbox.Fence.of(state)
        pend = self.held.get(cluster)
        for attempt in self.attempts.pop(cluster, []):
            if found == outbox.Fence(True, attempt.token):
                # a record that seemed to fail did commit: what it carried is stored
                if pend is not None:
                    del pend.events[: attempt.events]
                    del pend.retained[: attempt.retained]
                self.stored[cluster] = found
        if self.stored.get(cluster) != found:
            if pend is not None and pend.events:
                log.warning(
                    "another instance recorded incidents meanwhile; dropping events this one did not record",
                    cluster=cluster,
                    dropped=len(pend.events),
                )
            self.held.pop(cluster, None)
            self.incidents.drop_cluster(cluster)
            if state is not None:
                try:
                    self.incidents.load_cluster(cluster, state)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("cannot restore incident state; starting afresh", cluster=cluster, error=str(exc))
                    self.incidents.drop_cluster(cluster)
            self.stored[cluster] = found
        await self.reconcile(cluster)

    async def reconcile(self, cluster: str) -> None:
        """Replay the current verdicts of the cluster's groups into the engine and record the outcome."""
        snap = self.changes.snapshot(cluster)
        if snap is None:
            self.unreconciled.add(cluster)  # no complete picture yet: again on a later tick
            return
        self.unreconciled.discard(cluster)
        pend = self.hold(cluster)
        before = len(pend.events)
        seen: set[str] = set()
        slices = Slices(SLICE_S, self.turn)  # thousands of groups: the loop gets its turns
        for ch in snap:
            seen.add(ch.group)
            pend.events.extend(self.incidents.apply(ch))
            self._status(pend, ch)
            await slices.turn()
        now = self.clock()
        for group in sorted(self.incidents.members(cluster)):
            if group not in seen:  # in an open incident, but gone
                gone = GroupChange(cluster, group, GroupStatus.NOTFOUND, now)
                pend.events.extend(self.incidents.apply(gone))
                self._status(pend, gone)
        pend.dirty = True
        log.info(
            "incident state caught up with current verdicts",
            cluster=cluster,
            groups=len(snap),
            events=len(pend.events) - before,
        )
        await self.flush(cluster)

    async def ensure_lease(self, cluster: str, retry: bool) -> bool:
        """Whether we lead `cluster`; a new or `retry`ed lease asks Postgres again."""
        lease = self.leases.get(cluster)
        if lease is None:
            lease = self.leases[cluster] = Lease(self.engine, cluster)
            retry = True
        was = lease.is_leader
        if retry or (not was and time.monotonic() - lease.tried_at >= self.lease_retry):
            await lease.refresh()
        if lease.is_leader and not was:
            await self.take_over(cluster)
        return lease.is_leader

    async def flush(self, cluster: str) -> None:
        """Record what `cluster` holds unrecorded with the engine state, fenced on the stored one."""
        lease = self.leases.get(cluster)
        pend = self.held.get(cluster)
        if lease is None or not lease.is_leader or pend is None or not pend.any():
            return
        token = uuid.uuid4().hex
        state = self.incidents.save_rows(cluster, {outbox.SAVED_BY: token})
        slices = Slices(SLICE_S, self.turn)  # a full save of 10,000 members of 100 partitions: 331 ms of encoding
        while state.encode(MEMBERS_PER_STEP):
            await slices.turn()
        fence = self.stored.get(cluster, outbox.Fence(False))
        try:
            await outbox.record(
                self.engine, cluster, pend.events, state, pend.retained, self.prefix, fence=fence, clock=self.clock
            )
        except outbox.StateConflict as exc:
            log.warning("another instance writes this cluster's incidents; leaving it the lease", error=str(exc))
            self.incidents.save_failed(cluster)
            await lease.release()  # taken over again later, from the state then stored
            return
        except (SQLAlchemyError, OSError) as exc:
            self.incidents.save_failed(cluster)
            pend.fail()
            self.attempts.setdefault(cluster, []).append(_Attempt(token, len(pend.events), len(pend.retained)))
            log.warning("recording incident events failed; retrying on the next tick", cluster=cluster, error=str(exc))
            return
        self.attempts.pop(cluster, None)
        self.stored[cluster] = outbox.Fence(True, token)
        held_back = [ev for ev in pend.events if ev.summary.startswith(LATE)]
        if held_back:
            log.warning(
                "incident events held while Postgres was away recorded late",
                cluster=cluster,
                events=len(held_back),
                late_s=round((self.clock() - min(ev.at for ev in held_back)) / 1000, 1),
            )
        self.held[cluster] = _Unrecorded()
        for ev in pend.events:  # recorded: now they happened (a failed record is retried, not logged twice)
            eventlog.incident_event(ev)

    def away(self, cluster: str) -> bool:
        """Is `cluster` led by this process but for Postgres being away (see the module doc)?"""
        lease = self.leases.get(cluster)
        return lease is not None and lease.lost_to_outage

    def _kept(self, cluster: str) -> int:
        return sum(attempt.events for attempt in self.attempts.get(cluster, ()))

    async def take(self, change: GroupChange) -> None:
        """A verdict change: into the engine where we lead its cluster, recorded at once when it
        made incident events (its retained status waits for the next tick); held while Postgres
        is away (see the module doc)."""
        if not await self.ensure_lease(change.cluster, retry=False):
            if self.away(change.cluster):
                pend = self.hold(change.cluster)
                pend.hold(self.incidents.apply(change), self._kept(change.cluster))
                pend.dirty = True
            return
        pend = self.hold(change.cluster)
        pend.events.extend(self.incidents.apply(change))
        self._status(pend, change)
        pend.dirty = True
        if pend.events:
            await self.flush(change.cluster)

    async def refresh_leases(self) -> None:
        """Ask Postgres again about every lease (a standby takes over a lapsed one here)."""
        for cluster in list(self.leases):
            await self.ensure_lease(cluster, retry=True)

    async def tick(self) -> None:
        """Once a second: clusters reconciled that wait for it, the engine's timed events
        taken, and everything held recorded."""
        for cluster in sorted(self.unreconciled):
            if self.leases[cluster].is_leader:
                await self.reconcile(cluster)
        led = {cluster for cluster, lease in self.leases.items() if lease.is_leader or lease.lost_to_outage}
        for ev in self.incidents.tick(self.clock(), led):
            pend = self.hold(ev.cluster)
            if self.away(ev.cluster):
                pend.hold([ev], self._kept(ev.cluster))
            else:
                pend.events.append(ev)
            pend.dirty = True
        for cluster in list(self.held):
            await self.flush(cluster)

    async def release_leases(self) -> None:
        for lease in self.leases.values():
            await lease.release()


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

    `clock` (lagd.runtime.clock) is "now" for the engine's ticks, for groups found gone on a takeover
    and for the outbox rows recorded; the tick and lease intervals run on the loop's clock.
    A reconcile over every group awaits `turn` between its slices (lagd.runtime.turns).
    """
    notifier = Notifier(engine, settings, changes, lease_retry, clock=clock, turn=turn)
    loop = asyncio.get_running_loop()
    next_tick = next_lease = loop.time()
    try:
        with contextlib.suppress(SQLAlchemyError, OSError):
            for known in await outbox.engine_state_clusters(engine):
                await notifier.ensure_lease(known, retry=True)
        while not stop.is_set():
            change: GroupChange | None = None
            if not changes.empty() and loop.time() < next_tick:
                # One waiting: taken as it is, after a turn of the loop (requests first). Through
                # wait_for each change cost a task and a timer: 500 changes a second at 1M
                # group-partitions (bench_http).
                await turn()
                if changes.empty():
                    continue
                change = changes.get_nowait()
            else:
                try:
                    change = await asyncio.wait_for(changes.get(), timeout=max(0.0, next_tick - loop.time()))
                except TimeoutError:
                    change = None
            if change is not None:
                await notifier.take(change)
                continue
            next_tick = loop.time() + TICK
            if loop.time() >= next_lease:
                await notifier.refresh_leases()
                next_lease = loop.time() + lease_retry
            await notifier.tick()
    finally:
        await notifier.release_leases()
