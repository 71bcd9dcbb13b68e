"""Write-behind: moves State's changes to Postgres in batches, and rides out outages.

Every `flush_interval` seconds, or sooner when the daemon sets `wake` after applying many
events, the loop drains State, folds the drained Changes into the pending batch and writes
it in one transaction. When Postgres is away the batch stays pending (latest value per key,
history appended), bounded by `buffer_max_changes`: past the bound the oldest history rows
go first, keyed state never, and the loss is counted. Writes are retried with exponential
backoff, and between retries Postgres is asked a trivial query every PROBE_EVERY_S: writes
resume within a couple of seconds of its return, not after a wait doubled up to
`backoff_max` (16.9 s after a 45 s outage, issue 50). The outage is logged once when it starts
and once when it ends, its length from the first failed write to Postgres' first answer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from lagd.core.config import StorageSettings
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.turns import Turn, plain_turn
from lagd.state.changes import Changes
from lagd.state.checkpoints import SAMPLE_EVERY_S, CheckpointPressure
from lagd.state.store import Store, is_poison
from lagd.state.window_log import WindowCopy
from lagd.state.windows import State

log = logs.get(__name__)


@dataclass
class PersisterStatus:
    """What /metrics and readiness read about persistence."""

    pending: int = 0  # changes waiting to be written
    last_write_ms: int | None = None  # wall time of the last successful write
    last_error: str | None = None  # the last write failure, None once writes succeed again
    write_seconds_last: float = 0.0  # duration of the last successful write
    dropped_history: int = 0  # history rows dropped because the buffer was full (total)
    healthy: bool = True  # False while writes fail
    failed_writes: int = 0  # failed write attempts (total)
    quarantined: int = 0  # rows Postgres refused, moved to the quarantine table (total)
    backlog_wait_seconds: float = 0.0  # time apply waited for Postgres with the backlog full (total)
    requested_checkpoints: int | None = None  # checkpoints Postgres ran on request lately (lagd.state.checkpoints)
    postgres_advice: str | None = None  # what to change in Postgres' WAL settings, while checkpoints come often
    # the window log (lagd.state.window_log): windows appended since the last copy began (the
    # next begins once they reach State's), groups left to copy, copies completed since start
    log_appended: int = 0
    log_copy_groups_left: int = 0
    log_copies: int = 0


# Flushes' worth of changes that may wait for Postgres beyond the write in progress before apply
# waits: 500k at the default flush-max-changes. The write in progress holds at most about as
# many, so in all about 1M, half the outage buffer (buffer-max-changes): it adds no memory
# ceiling an outage does not already have (history rows are ~70 B in columns, lagd.state.history;
# a changed window ~450 B of stored bytes, so up to ~500 MB at a million group-partitions).
# Until 2026-11-28 the write in progress counted against a bound of 1M: a catch-up that ended
# with a big write then held apply (and so every verdict) for the whole of that write, 14.1 s at
# 1M group-partitions in bench_http. Measured on the catch-up bench (500k records) with that
# older count: at 15 flushes apply stopped once for 2-2.9 s while Postgres took a 300k-change
# write (6.0-8.6 s in all); at 50 it never waited (4.6-4.7 s); at 5 catch-up waited for Postgres
# a fifth of its time.
BACKLOG_FLUSHES = 25
DRAIN_SLICE = 1_000  # changed windows copied per turn of the loop (1-2 ms)
# Keyed rows of a written batch freed per turn of the loop (about 2 ms). A catch-up's write holds
# a few hundred thousand windows: freed at once, 24-28 ms per 300,000 held the loop (and as long
# again to fold a drain that big into an empty batch, which `collect` now takes over instead);
# freed in slices, 57 ms of CPU in all. A batch of one slice or less is freed at once.
DISCARD_SLICE = 10_000


@dataclass
class WriteBehind:
    """The persister's settings, pending batch and status (run it with `run`)."""

    store: Store
    state: State
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    flush_interval: float = 1.0
    flush_max_changes: int = 20_000
    buffer_max_changes: int = 2_000_000
    # While Postgres takes writes, apply waits once this many changes wait beyond the write in
    # progress (BACKLOG_FLUSHES flushes' worth): catch-up then runs at Postgres' pace instead of
    # piling history rows up in memory. During an outage nothing waits (see buffer_max_changes).
    backlog_max_changes: int = 500_000
    retention_days: int = 14
    retention_every: float = 3600.0
    backoff_max: float = 30.0
    write_timeout: float = 120.0
    clock: Clock = wall_ms  # stamps writes, history and retention (lagd.runtime.clock)
    turn: Turn = plain_turn  # awaited between drain slices (lagd.runtime.turns)
    pending: Changes = field(default_factory=Changes)
    in_flight: int = 0  # changes of the write in progress (pending's size when it began; 0 between writes)
    status: PersisterStatus = field(default_factory=PersisterStatus)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    room: asyncio.Event = field(default_factory=asyncio.Event)  # set when apply may go on (see backlog_max_changes)
    _outage_started: float | None = None
    _answered_at: float | None = None  # during an outage: when Postgres first answered a probe
    _probed_at: float = 0.0
    _last_retention: float | None = None
    _drops_logged: bool = False  # the buffer-full error is logged once per outage
    checkpoints: CheckpointPressure = field(default_factory=CheckpointPressure)
    checkpoint_every: float = SAMPLE_EVERY_S
    _last_checkpoint_sample: float | None = None
    _advice_logged: float | None = None  # when the Postgres advice was last logged (once an hour)
    window_copy: WindowCopy = field(default_factory=WindowCopy)  # the store's window log (lagd.state.window_log)

    @classmethod
    def from_settings(
        cls,
        store: Store,
        state: State,
        wake: asyncio.Event,
        st: StorageSettings,
        *,
        clock: Clock = wall_ms,
        turn: Turn = plain_turn,
    ) -> WriteBehind:
        return cls(
            store=store,
            state=state,
            wake=wake,
            flush_interval=st.flush_interval,
            flush_max_changes=st.flush_max_changes,
            buffer_max_changes=st.buffer_max_changes,
            # waiting plus the write in progress: at most half the outage buffer, as before
            backlog_max_changes=min(
                BACKLOG_FLUSHES * st.flush_max_changes, max(st.flush_max_changes, st.buffer_max_changes // 4)
            ),
            retention_days=st.history_retention_days,
            clock=clock,
            turn=turn,
        )


def backlog_full(wb: WriteBehind) -> bool:
    """Should apply wait? Only while Postgres takes writes and more than backlog_max_changes
    wait beyond the write in progress, counting what State has not handed over yet. The write
    in progress itself does not count: apply goes on while Postgres takes it."""
    waiting = wb.pending.size() - wb.in_flight + wb.state.undrained()
    return wb.status.healthy and waiting > wb.backlog_max_changes


async def wait_for_room(wb: WriteBehind) -> None:
    """Called by apply after each batch: while the backlog is full, ask for a write and wait
    until one takes what waits (memory stays bounded by the backlog, not by how fast the readers
    fetch). The time waited is counted: verdicts lag behind the offsets topic by that much."""
    if not backlog_full(wb):
        return
    started = time.monotonic()
    try:
        while backlog_full(wb):
            wb.room.clear()
            wb.wake.set()
            await wb.room.wait()
    finally:
        wb.status.backlog_wait_seconds += time.monotonic() - started


def drop_oldest_history(pending: Changes, limit: int) -> int:
    """Shrink `pending` to `limit` changes by dropping the oldest history rows; returns how many.

    Keyed state (windows, members, tombstones, log-end samples, positions) is never dropped:
    it is bounded by the live keys and losing it would make a restart lie.
    """
    excess = pending.size() - limit
    if excess <= 0:
        return 0
    lists: list[Any] = [pending.commit_history, pending.log_end_history, pending.status_history]
    take = [0, 0, 0]
    dropped = 0
    while dropped < excess:
        best = -1
        for i, rows in enumerate(lists):
            if take[i] < len(rows) and (best < 0 or rows[take[i]][0] < lists[best][take[best]][0]):
                best = i
        if best < 0:
            break  # only keyed state left
        take[best] += 1
        dropped += 1
    for rows, n in zip(lists, take, strict=True):
        del rows[:n]
    return dropped


# Flushes' worth of changes waiting up to which the writes keep up (`keeping_up`). Under 20,000
# commits/s a second of changes is one flush's worth (flush_max_changes), so at two the persister
# was often "behind" in the steady state and went ahead of waiting requests; five is still a
# fifth of the backlog at which apply waits (BACKLOG_FLUSHES).
KEEPING_UP_FLUSHES = 5


def keeping_up(wb: WriteBehind, draining: int = 0) -> bool:
    """Do the writes keep up (at most KEEPING_UP_FLUSHES flushes' worth of changes waiting)?
    Then requests waiting for the loop go before the persister's next slice (lagd.runtime.turns); once
    it falls behind, it takes its turns at once, so ingest never waits on a persister the API
    starved."""
    return wb.pending.size() + draining <= KEEPING_UP_FLUSHES * wb.flush_max_changes


async def collect(wb: WriteBehind) -> None:
    """Drain State into the pending batch and enforce the buffer bound.

    The changed windows are copied DRAIN_SLICE at a time, the loop getting a turn between
    slices (a catch-up drains a few hundred thousand at once: about 100 ms in one go).
    Cancelled midway, the drain is finished before it ends, so nothing drained is lost.
    """
    drain = wb.state.start_drain()
    turn = wb.turn if keeping_up(wb, drain.rows_left) else plain_turn
    try:
        while len(drain) > DRAIN_SLICE:
            drain.step(DRAIN_SLICE)
            await turn()  # the loop's turn between slices
    finally:
        drain.step(len(drain))
        if drain.changes:
            if wb.pending:
                wb.pending.merge(drain.changes)
            else:  # the usual case: nothing waits, so the drain is the batch (no copy of its keys)
                wb.pending = drain.changes
    if wb.pending.size() > wb.buffer_max_changes:
        dropped = drop_oldest_history(wb.pending, wb.buffer_max_changes)
        if dropped and not wb._drops_logged:
            wb._drops_logged = True
            log.error(
                "persistence buffer full: dropping the oldest history rows",
                buffer_max_changes=wb.buffer_max_changes,
                hint="bring Postgres back or raise storage.buffer-max-changes; live state is kept",
            )
        wb.status.dropped_history += dropped
    wb.status.pending = wb.pending.size()


async def flush(wb: WriteBehind) -> bool:
    """Collect and write the pending batch once; True when nothing is left pending."""
    try:
        return await _flush(wb)
    finally:
        wb.room.set()  # written, or failed (an outage: nothing waits for Postgres then)


async def _flush(wb: WriteBehind) -> bool:
    async with wb.lock:
        await collect(wb)
        if not wb.pending:
            return True
        wb.in_flight = wb.pending.size()
        wb.room.set()  # what waited is in this write now: apply goes on while Postgres takes it
        started = time.monotonic()
        try:
            await asyncio.wait_for(_write(wb), wb.write_timeout)
        except Exception as exc:
            _failed(wb, exc)
            return False
        finally:
            wb.in_flight = 0
        took = time.monotonic() - started
        done, wb.pending = wb.pending, Changes()
        st = wb.status
        st.pending, st.last_write_ms, st.write_seconds_last, st.last_error = 0, wb.clock(), took, None
        if not st.healthy:
            outage = (wb._answered_at or started) - (wb._outage_started or started)
            log.info("postgres writes resumed", written=done.size(), outage_s=round(outage, 1), write_s=round(took, 1))
            st.healthy = True
            wb._outage_started = wb._answered_at = None
            wb._drops_logged = False
        await discard(done, wb.turn if keeping_up(wb) else plain_turn)
        await copy_windows(wb, len(done.windows))
        return True


async def copy_windows(wb: WriteBehind, appended: int) -> None:
    """After a write (nothing drained waits: an older value written after a newer copy would
    win at restore), copy the next slice of every window into the window log's newest
    generation, beginning a copy when one is due; once it is complete, the older generations
    go. A failed slice abandons the copy (the next one starts afresh in the same generation; the
    log keeps every window meanwhile); it is not an outage, the next write says whether Postgres
    is away."""
    store, copy = wb.store, wb.window_copy
    if not store.windows_log:
        return
    copy.appended += appended
    try:
        await _copy_slice(wb, appended)
    finally:
        wb.status.log_appended = copy.appended
        wb.status.log_copy_groups_left = len(copy.groups) if copy.generation is not None else 0


async def _copy_slice(wb: WriteBehind, appended: int) -> None:
    """`copy_windows`' slice: begin a copy when due, copy the next slice, complete the copy."""
    store, copy = wb.store, wb.window_copy
    try:
        if copy.due(store.generation, wb.state.partitions_tracked()):
            # into the generation writes append to unless a copy completed in it (at start, or
            # after a failed copy): a new one only when the older ones are to go
            current = store.generation
            generation = current if current is not None and current != copy.copied else await store.open_generation()
            copy.begin(generation, wb.state.window_groups())
        if copy.generation is None:
            return
        drain = wb.state.start_copy(copy.next_keys(wb.state, copy.slice_size(appended)))
        turn = wb.turn if keeping_up(wb) else plain_turn
        while not drain.step(DRAIN_SLICE):
            await turn()
        await store.append_copy(drain.changes.windows, turn=turn)
        if copy.complete:
            generation = copy.generation
            dropped = await store.complete_generation(generation)
            copy.finish()
            wb.status.log_copies += 1
            log.debug("window log compacted", generation=generation, dropped_generations=dropped)
    except Exception as exc:
        copy.abandon()
        log.warning(
            "copying windows into a new generation of the window log failed; starting afresh after the next write",
            error=f"{exc.__class__.__name__}: {exc}",
            hint="the log keeps every window meanwhile; check Postgres if writes fail too",
        )


async def discard(done: Changes, turn: Turn) -> None:
    """Free a written batch's keyed rows DISCARD_SLICE at a time, the loop getting a turn
    between slices; history rows are columns (a few objects) and go at once with the batch."""
    keyed: tuple[dict[Any, Any], ...] = (done.windows, done.members, done.pauses, done.log_end)
    for rows in keyed:
        while len(rows) > DISCARD_SLICE:
            # popitem in C (map, consumed by a zero-length deque): half a Python loop's cost (57 against 111 ms per 300,000)
            collections.deque(map(dict.popitem, itertools.repeat(rows, DISCARD_SLICE)), maxlen=0)
            await turn()


async def _write(wb: WriteBehind) -> None:
    """Write the pending batch; one Postgres refuses for its rows is written around them.

    A refused row would fail the all-or-nothing batch on every retry, across restarts: the
    batch is split instead, the refused rows go to the quarantine table and the rest is written.
    """
    try:
        await wb.store.write(wb.pending, turn=wb.turn if keeping_up(wb) else plain_turn)
    except Exception as exc:
        if not is_poison(exc):
            raise
        wb.status.quarantined += await wb.store.write_isolating(wb.pending, wb.clock())


def _failed(wb: WriteBehind, exc: Exception) -> None:
    st = wb.status
    st.failed_writes += 1
    st.last_error = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
    if st.healthy:
        st.healthy = False
        wb._outage_started = time.monotonic()
        log.error(
            "postgres write failed; buffering changes in memory and retrying",
            error=st.last_error,
            pending=st.pending,
            hint="check storage.database-url and that Postgres is up; verdicts keep being served",
        )


async def _retention(wb: WriteBehind) -> None:
    now = time.monotonic()
    if wb._last_retention is not None and now - wb._last_retention < wb.retention_every:
        return
    wb._last_retention = now
    try:
        await wb.store.apply_retention(wb.clock(), wb.retention_days)
    except Exception as exc:
        log.warning("history retention failed; retrying in an hour", error=f"{exc.__class__.__name__}: {exc}")


async def run(wb: WriteBehind) -> None:
    """The write-behind loop; runs until cancelled (then call `final_flush`)."""
    loop = asyncio.get_running_loop()
    backoff = wb.flush_interval
    next_attempt = 0.0
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wb.wake.wait(), wb.flush_interval)
        wb.wake.clear()
        if loop.time() < next_attempt:
            async with wb.lock:
                await collect(wb)  # keep the buffer bounded and the pending count true while waiting
            if not await answers(wb):
                continue
        if await flush(wb):
            backoff = wb.flush_interval
            next_attempt = 0.0
            await _retention(wb)
            await sample_checkpoints(wb)
        else:
            next_attempt = loop.time() + backoff
            backoff = min(backoff * 2, wb.backoff_max)


PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 1.0


async def answers(wb: WriteBehind) -> bool:
    """During an outage, between retries: has Postgres just come back? Asked at most every
    PROBE_EVERY_S (a trivial query). True when it answers after it did not (noted as the
    outage's end); while it answers and writes still fail, the backoff applies."""
    now = time.monotonic()
    if wb.status.healthy or now - wb._probed_at < PROBE_EVERY_S:
        return False
    wb._probed_at = now
    if not await wb.store.ping(PROBE_TIMEOUT_S):
        wb._answered_at = None
        return False
    if wb._answered_at is not None:
        return False
    wb._answered_at = time.monotonic()
    return True


ADVICE_EVERY_S = 3600.0  # how often the Postgres advice is logged again while it holds


async def sample_checkpoints(wb: WriteBehind) -> None:
    """Now and then, read Postgres' checkpoint counters; while requested checkpoints come often,
    keep the advice for the hints and /metrics, and log it (once an hour)."""
    now = time.monotonic()
    if wb._last_checkpoint_sample is not None and now - wb._last_checkpoint_sample < wb.checkpoint_every:
        return
    wb._last_checkpoint_sample = now
    try:
        wb.checkpoints.add(await wb.store.checkpoint_sample())
    except Exception as exc:  # only a diagnosis: the writes go on without it
        log.debug("postgres checkpoint statistics not read", error=f"{exc.__class__.__name__}: {exc}")
        return
    st = wb.status
    st.requested_checkpoints = wb.checkpoints.requested_recently()
    st.postgres_advice = wb.checkpoints.advice()
    if st.postgres_advice is None:
        wb._advice_logged = None
    elif wb._advice_logged is None or now - wb._advice_logged >= ADVICE_EVERY_S:
        wb._advice_logged = now
        log.warning("postgres checkpoints come often: its WAL fills max_wal_size", hint=st.postgres_advice)


async def final_flush(wb: WriteBehind, timeout: float) -> bool:
    """Write what is pending at shutdown, giving up after `timeout` seconds."""
    try:
        ok = await asyncio.wait_for(flush(wb), timeout)
    except TimeoutError:
        ok = False
    if not ok:
        hint = "the readers resume from the last stored position, so they are read again at start"
        if wb.status.healthy:  # Postgres takes writes, only not all of them within the stop budget
            log.warning("stopping before Postgres took every change", pending=wb.status.pending, hint=hint)
        else:
            log.error("final flush incomplete: changes not written", pending=wb.status.pending, hint=hint)
    return ok
