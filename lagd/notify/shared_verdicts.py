"""Group verdicts shared through Postgres, so one notifier groups incidents across workers.

With workers (lagd.scale) each process judges only the groups of its offsets partitions, so a
notifier fed by its own process alone would see a broken broker as several smaller incidents,
one per worker, and only while it led. Instead every worker publishes its verdict changes to
`group_verdicts` (one row per group: its current status) and every notifier follows that
table, so the one holding a cluster's lease sees every group of the cluster.

Publishing (`VerdictPublisher`, one per worker): the worker's VerdictWatch feeds a local
VerdictFeed; the publisher drains it and upserts each change with a new
`version = nextval('group_verdicts_version')`, but only when the status or the body (kind,
partitions, topics, hosts) differs from the stored row. A worker that takes a group over and
judges it again as its last owner did therefore changes nothing, and nobody is alerted again. A
group deleted or expired is stored as a NOTFOUND row, so followers resolve its incidents. While
Postgres is away the changes are held in memory, the newest per group (a newer change of a
group replaces an older one not yet written, so nothing is lost and memory stays one change per
group), and retried with capped backoff (lagd.runtime.backoff). `flush` writes what is held at once,
for a worker about to let groups go (revocation) or to stop.

Following (`SharedFeed`, one per notifier): `follow` polls the table for rows whose version is
above what it has read and hands each changed row to the notifier as a GroupChange, with the
consuming side of a VerdictFeed (`get`, `get_nowait`, `empty`, `qsize`, `snapshot`). Sequence
values are taken in one order and committed in another: a row with a lower version can become
visible after one with a higher version was read. So each poll reads again from the highest
version seen by a poll `lookback_s` ago (a writer that commits within that time is never missed;
right after start, before any poll is that old, a poll reads every row), and a mirror
`{(cluster, group): version}` drops the rows already delivered. Every `full_every_s` the whole
table is read as a safety net (a writer slower than the lookback is caught then), which also
forgets the groups whose rows were removed. Memory: the mirror holds one entry per row, the
feed one change per group.

Removing rows: NOTFOUND rows would pile up with every group ever deleted. Each follower deletes,
once an hour, the NOTFOUND rows whose status is older than `notfound_keep_ms` (six hours by
default; many followers running the same DELETE is harmless). By then every follower has long
delivered them; one that was cut off for longer forgets the group at its next full read, and a
notifier that led meanwhile reports groups of open incidents missing from the snapshot NOTFOUND
when it takes over. A row that vanishes while its group was not NOTFOUND (removed by hand) is
delivered as NOTFOUND, so its incidents resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from itertools import islice
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.db.schema import group_verdicts
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.runtime import logs
from lagd.runtime.backoff import Backoff, describe_error
from lagd.runtime.clock import Clock, wall_ms
from lagd.state.store import is_poison

log = logs.get(__name__)

BATCH = 500  # changes per upsert statement (and transaction)
WRITE_TIMEOUT_S = 10.0  # one upsert that takes longer counts as failed (retried)
READ_TIMEOUT_S = 30.0
POLL_S = 1.0
LOOKBACK_S = 10.0
FULL_EVERY_S = 60.0
NOTFOUND_KEEP_MS = 6 * 3600 * 1000
CLEANUP_EVERY_S = 3600.0
_KINDS = ("group", "mirror", "cluster", "broker")

_UPSERT = text(
    """
    INSERT INTO group_verdicts AS v (cluster, group_name, status, at, body, worker, version)
    SELECT u.cluster, u.group_name, u.status, u.at, CAST(u.body AS jsonb), CAST(:worker AS text),
           nextval('group_verdicts_version')
    FROM unnest(CAST(:clusters AS text[]), CAST(:groups AS text[]), CAST(:statuses AS text[]),
                CAST(:ats AS bigint[]), CAST(:bodies AS text[])) AS u(cluster, group_name, status, at, body)
    ORDER BY u.cluster, u.group_name
    ON CONFLICT (cluster, group_name) DO UPDATE
    SET status = EXCLUDED.status, at = EXCLUDED.at, body = EXCLUDED.body, worker = EXCLUDED.worker,
        version = nextval('group_verdicts_version')
    WHERE v.status <> EXCLUDED.status OR v.body <> EXCLUDED.body
    RETURNING v.version
    """
)
# Rows are locked in (cluster, group) order, so two workers writing the same groups at a
# handover (or the shared `cluster:<name>` members) wait for each other instead of deadlocking.
# The version of an updated row is taken once its row lock is held, so a row's version only
# grows; an insert's is taken before (two racing inserts of one group: the loser updates).

Key = tuple[str, str]


# --- the row format -----------------------------------------------------------------------


def encode_body(change: GroupChange) -> dict[str, Any]:
    """The `body` column: everything of a GroupChange but its key, status and time."""
    return {
        "kind": change.kind,
        "partitions": [[t, p, str(s), h] for t, p, s, h in change.partitions],
        "topics": list(change.topics),
        "hosts": list(change.hosts),
        **({"reason": change.reason} if change.reason else {}),  # a broker's (the probe's) or a group's retention words
        **({"clear_at": change.clear_at} if change.clear_at is not None else {}),  # lagd.evaluate.clearing
        **({"led": [[t, p] for t, p in change.led]} if change.led else {}),  # a broker's: one incident per cause
    }


def decode_change(cluster: str, group: str, status: str, at: int, body: Any) -> GroupChange:
    """A row back into the GroupChange it was written from; ValueError (or KeyError, TypeError)
    for a row this version of lagd cannot read."""
    if isinstance(body, str):
        body = json.loads(body)
    kind = body.get("kind", "group")
    if kind not in _KINDS:
        raise ValueError(f"unknown member kind {kind!r}")
    return GroupChange(
        cluster=cluster,
        group=group,
        status=GroupStatus(status),
        at=int(at),
        partitions=tuple(
            (str(t), int(p), PartitionStatus(s).value, str(h)) for t, p, s, h in body.get("partitions", ())
        ),
        topics=tuple(str(t) for t in body.get("topics", ())),
        hosts=tuple(str(h) for h in body.get("hosts", ())),
        kind=kind,
        reason=str(body.get("reason", "")),
        clear_at=None if body.get("clear_at") is None else int(body["clear_at"]),
        led=tuple((str(t), int(p)) for t, p in body.get("led", ())),
    )


# --- publishing -----------------------------------------------------------------------------


class VerdictPublisher:
    """One worker's verdict changes into `group_verdicts` (see the module doc).

    `run(stop)` publishes until `stop` is set; `flush()` writes what is held at once (raises
    if Postgres does; what was not written stays held). Counters: `written` (rows whose status
    or body changed), `unchanged` (changes that repeated the stored row), `failed_writes`,
    `coalesced` (held changes replaced by a newer one of the same group), `refused` (changes
    Postgres refused for their data, dropped), `held` (changes waiting to be written).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        local: VerdictFeed,
        worker: str,
        *,
        clock: Clock = wall_ms,
        batch: int = BATCH,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.engine = engine
        self.local = local
        self.worker = worker
        self.clock = clock  # only to say how old the oldest held change is during an outage
        self.batch = max(1, batch)
        self.write_timeout_s = write_timeout_s
        self._held: dict[Key, GroupChange] = {}  # taken from the feed, not written yet; oldest first
        self._lock = asyncio.Lock()  # one writer at a time: run's retries and flush's calls
        self.written = 0
        self.unchanged = 0
        self.failed_writes = 0
        self.coalesced = 0
        self.refused = 0
        self.last_error: str | None = None

    @property
    def held(self) -> int:
        """Changes not written yet: taken from the local feed, or still waiting there."""
        return len(self._held) + self.local.qsize()

    def _hold(self, change: GroupChange) -> None:
        key = (change.cluster, change.group)
        if self._held.pop(key, None) is not None:
            self.coalesced += 1
        self._held[key] = change  # (re)inserted last: written after the older ones

    def _take(self) -> None:
        while not self.local.empty():
            self._hold(self.local.get_nowait())

    async def flush(self) -> None:
        """Write every change held and waiting in the local feed, `batch` to a transaction."""
        async with self._lock:
            self._take()
            while self._held:
                chunk = list(islice(self._held.values(), self.batch))
                await self._write(chunk)
                for change in chunk:  # nothing replaced them meanwhile: `_hold` runs under the lock
                    del self._held[(change.cluster, change.group)]

    async def _write(self, chunk: Sequence[GroupChange]) -> None:
        try:
            changed = await self._upsert(chunk)
        except Exception as exc:
            if not _refused(exc):
                raise
            changed = refused = 0
            for change in chunk:  # a row Postgres refuses must not hold up every other one
                try:
                    changed += await self._upsert([change])
                except Exception as one:
                    if not _refused(one):
                        raise
                    self._refuse(change, one)
                    refused += 1
            self.unchanged += len(chunk) - changed - refused
        else:
            self.unchanged += len(chunk) - changed
        self.written += changed

    def _refuse(self, change: GroupChange, exc: BaseException) -> None:
        self.refused += 1
        log.error(
            "Postgres refused a group verdict; not shared with the other workers",
            cluster=change.cluster,
            group=change.group[:200],
            status=str(change.status),
            error=describe_error(exc),
            hint="a group name or owner host Postgres cannot store (a NUL character?): incidents "
            "across workers miss this group; its own worker still serves its verdict",
        )

    async def _upsert(self, chunk: Sequence[GroupChange]) -> int:
        """Upsert `chunk` in one transaction; the number of rows whose status or body changed."""
        params = {
            "worker": self.worker,
            "clusters": [c.cluster for c in chunk],
            "groups": [c.group for c in chunk],
            "statuses": [str(c.status) for c in chunk],
            "ats": [c.at for c in chunk],
            "bodies": [json.dumps(encode_body(c), separators=(",", ":")) for c in chunk],
        }
        async with asyncio.timeout(self.write_timeout_s):
            async with self.engine.begin() as conn:
                return len((await conn.execute(_UPSERT, params)).all())

    async def run(self, stop: asyncio.Event) -> None:
        """Publish the local feed's changes until `stop` is set; never fatal.

        Returns when `stop` is set, leaving what it holds for a last `flush` by the caller.
        """
        backoff = Backoff()
        while not stop.is_set():
            if not self._held and self.local.empty():
                await self._next_change(stop)
                continue
            try:
                await self.flush()
            except Exception as exc:
                self.failed_writes += 1
                self.last_error = describe_error(exc)
                delay, log_now = backoff.failed()
                oldest = min((c.at for c in self._held.values()), default=None)
                (log.error if log_now else log.debug)(
                    "publishing group verdicts to Postgres failed; holding them and retrying",
                    worker=self.worker,
                    error=self.last_error,
                    held=self.held,
                    oldest_held_s=None if oldest is None else round((self.clock() - oldest) / 1000, 1),
                    attempt=backoff.attempts,
                    waiting_s=backoff.waiting_s,
                    retry_in_s=round(delay, 1),
                    hint="check storage.database-url and that Postgres is up; the newest status of every "
                    "group is kept and published once it answers, incidents across workers wait until then",
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
            else:
                attempts, waited = backoff.attempts, backoff.waiting_s
                if backoff.succeeded():
                    self.last_error = None
                    log.info("publishing group verdicts works again", attempts=attempts + 1, waited_s=waited)

    async def _next_change(self, stop: asyncio.Event) -> None:
        """Wait for a change in the local feed (held once taken) or for `stop`."""
        getter = asyncio.ensure_future(self.local.get())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            # VerdictFeed.get loses nothing when cancelled; one that already returned is kept
            if not getter.cancel() and not getter.cancelled() and getter.exception() is None:
                self._hold(getter.result())


def _refused(exc: BaseException) -> bool:
    """Postgres (or the driver) refused the data itself: retrying the same rows cannot succeed."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if is_poison(cur):
            return True
        cur = getattr(cur, "orig", None) or cur.__cause__
    return False


async def publish_verdicts(
    engine: AsyncEngine,
    local: VerdictFeed,
    worker: str,
    stop: asyncio.Event,
    *,
    clock: Clock = wall_ms,
    batch: int = BATCH,
) -> None:
    """Publish `local`'s changes as `worker` until `stop` is set. To also flush on revocation
    and at shutdown, build a VerdictPublisher and run its `run` and `flush` instead."""
    await VerdictPublisher(engine, local, worker, clock=clock, batch=batch).run(stop)


async def flush_verdicts(publisher: VerdictPublisher, timeout_s: float = WRITE_TIMEOUT_S) -> bool:
    """Write what `publisher` holds, giving up after `timeout_s`; True when nothing is left.

    For a worker letting groups go or stopping: their new owner judges them again anyway, so a
    failure is logged and not raised.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await publisher.flush()
    except Exception as exc:
        log.warning(
            "group verdicts not published before letting them go",
            worker=publisher.worker,
            held=publisher.held,
            error=describe_error(exc),
            hint="Postgres did not take them in time; the groups' next owner judges them again and "
            "publishes what changed",
        )
        return False
    return True


# --- following ------------------------------------------------------------------------------


class SharedFeed:
    """Every worker's verdict changes, read from `group_verdicts` (see the module doc).

    The consuming side of a VerdictFeed for run_notifier; `follow` fills it. `clusters`, when
    given, limits it to those clusters' rows.
    """

    PRODUCER = "group_verdicts"

    def __init__(
        self,
        clusters: Collection[str] | None = None,
        *,
        lookback_s: float = LOOKBACK_S,
        full_every_s: float = FULL_EVERY_S,
        notfound_keep_ms: int = NOTFOUND_KEEP_MS,
        cleanup_every_s: float = CLEANUP_EVERY_S,
        clock: Clock = wall_ms,
    ) -> None:
        self.clusters = None if clusters is None else sorted(set(clusters))
        self.lookback_s = lookback_s
        self.full_every_s = full_every_s
        self.notfound_keep_ms = notfound_keep_ms
        self.cleanup_every_s = cleanup_every_s
        self.clock = clock
        self._feed = VerdictFeed(producers=(self.PRODUCER,))
        # (cluster, group) -> (version delivered, whether the group was there: not NOTFOUND)
        self._mirror: dict[Key, tuple[int, bool]] = {}
        self._marks: deque[tuple[float, int]] = deque()  # (loop time a read began, highest version by then)
        self._highest = 0
        self._full_at: float | None = None
        self._cleaned_at: float | None = None
        self.reads = 0  # successful reads
        self.delivered = 0  # changes handed to the feed
        self.unreadable = 0  # rows this version of lagd cannot read (logged)

    # --- consumer (as VerdictFeed's) -----------------------------------------------------

    def empty(self) -> bool:
        return self._feed.empty()

    def qsize(self) -> int:
        return self._feed.qsize()

    def get_nowait(self) -> GroupChange:
        return self._feed.get_nowait()

    async def get(self) -> GroupChange:
        """The oldest waiting change; waits for one. Cancelling it never loses a change."""
        return await self._feed.get()

    def snapshot(self, cluster: str) -> list[GroupChange] | None:
        """The latest change of every group of `cluster` but NOTFOUND ones, oldest first; None
        before the first successful read of the table."""
        return self._feed.snapshot(cluster)

    @property
    def groups_tracked(self) -> int:
        """Entries in the mirror: one per row read and not removed since."""
        return len(self._mirror)

    # --- reading ---------------------------------------------------------------------------

    def floor(self, now: float) -> int:
        """The version a poll at loop time `now` reads above: the highest one seen by a read
        that began at least `lookback_s` before (0, every row, while no read is that old)."""
        cutoff = now - self.lookback_s
        marks = self._marks
        while len(marks) >= 2 and marks[1][0] <= cutoff:
            marks.popleft()
        return marks[0][1] if marks and marks[0][0] <= cutoff else 0

    async def poll(self, engine: AsyncEngine, *, full: bool | None = None) -> int:
        """Read the table once (every row when `full`, or when a full read is due); returns how
        many changes were delivered."""
        now = asyncio.get_running_loop().time()
        if full is None:
            full = self._full_at is None or now - self._full_at >= self.full_every_s
        floor = self.floor(now)  # (also drops the marks no longer needed)
        if full:
            floor = 0
        query = select(
            group_verdicts.c.cluster,
            group_verdicts.c.group_name,
            group_verdicts.c.status,
            group_verdicts.c.at,
            group_verdicts.c.body,
            group_verdicts.c.version,
        ).order_by(group_verdicts.c.version)
        if floor:
            query = query.where(group_verdicts.c.version > floor)
        if self.clusters is not None:
            query = query.where(group_verdicts.c.cluster.in_(self.clusters))
        async with engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        delivered = self._apply(rows)
        if full:
            delivered += self._forget_missing({(r.cluster, r.group_name) for r in rows})
            self._full_at = now
        self._marks.append((now, self._highest))
        self.reads += 1
        self._feed.mark_complete(self.PRODUCER)
        self.delivered += delivered
        return delivered

    def _apply(self, rows: Iterable[Any]) -> int:
        delivered = 0
        for cluster, group, status, at, body, version in rows:
            self._highest = max(self._highest, version)
            key = (cluster, group)
            before = self._mirror.get(key)
            if before is not None and before[0] == version:
                continue  # delivered already (a lookback read sees it again)
            try:
                change = decode_change(cluster, group, status, at, body)
            except (ValueError, KeyError, TypeError) as exc:
                self.unreadable += 1
                self._mirror[key] = (version, before[1] if before is not None else False)
                log.warning(
                    "cannot read a shared group verdict; skipping it",
                    cluster=cluster,
                    group=group[:200],
                    version=version,
                    error=describe_error(exc),
                    hint="written by another lagd version? run the same version on every worker",
                )
                continue
            self._mirror[key] = (version, change.status != GroupStatus.NOTFOUND)
            self._feed.put_nowait(change)
            delivered += 1
        return delivered

    def _forget_missing(self, present: set[Key]) -> int:
        """After a full read: forget rows that were removed; a group that was there is gone."""
        delivered = 0
        now = self.clock()
        for key in [k for k in self._mirror if k not in present]:
            _, there = self._mirror.pop(key)
            if there:
                self._feed.put_nowait(GroupChange(key[0], key[1], GroupStatus.NOTFOUND, now))
                delivered += 1
        return delivered

    async def follow(self, engine: AsyncEngine, stop: asyncio.Event, poll_s: float = POLL_S) -> None:
        """Poll the table every `poll_s` until `stop` is set; never fatal (Postgres away: logged,
        retried with backoff). Also removes old NOTFOUND rows once every `cleanup_every_s`."""
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            wait = poll_s
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    await self.poll(engine)
            except Exception as exc:
                wait, log_now = backoff.failed()
                (log.warning if log_now else log.debug)(
                    "reading the shared group verdicts failed; retrying",
                    error=describe_error(exc),
                    attempt=backoff.attempts,
                    waiting_s=backoff.waiting_s,
                    retry_in_s=round(wait, 1),
                    hint="check storage.database-url and that Postgres is up; incidents take in every "
                    "worker's verdicts again once it answers",
                )
            else:
                attempts, waited = backoff.attempts, backoff.waiting_s
                if backoff.succeeded():
                    log.info("reading the shared group verdicts works again", attempts=attempts + 1, waited_s=waited)
                if self._cleaned_at is None or loop.time() - self._cleaned_at >= self.cleanup_every_s:
                    self._cleaned_at = loop.time()
                    await self._cleanup(engine)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stop.wait()

    async def _cleanup(self, engine: AsyncEngine) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                removed = await remove_gone(engine, self.clock() - self.notfound_keep_ms, self.clusters)
        except Exception as exc:
            log.warning(
                "removing old NOTFOUND group verdicts failed; trying again in an hour",
                error=describe_error(exc),
                hint="harmless for now: the table keeps rows of deleted groups a little longer",
            )
            return
        if removed:
            log.info("removed old NOTFOUND group verdicts", rows=removed)


async def remove_gone(engine: AsyncEngine, before_ms: int, clusters: Collection[str] | None = None) -> int:
    """Delete the NOTFOUND rows (groups deleted or expired) judged before `before_ms`; returns
    how many. A group published again meanwhile is not NOTFOUND any more and stays."""
    stmt = delete(group_verdicts).where(
        group_verdicts.c.status == str(GroupStatus.NOTFOUND), group_verdicts.c.at < before_ms
    )
    if clusters is not None:
        stmt = stmt.where(group_verdicts.c.cluster.in_(sorted(clusters)))
    async with engine.begin() as conn:
        return (await conn.execute(stmt)).rowcount or 0
