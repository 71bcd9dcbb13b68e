"""Composition root: builds lagd's parts, runs them under one asyncio loop, stops them cleanly.

Order at start: HTTP first (so /burrow/admin answers and readiness says STARTING), then the
database (migrate, restore windows and reader positions, retrying while it is away), then
the readers resume where the store left off. READY goes to systemd once state is restored.
On SIGTERM: readers stop first, what they queued is applied, the store gets a final flush
(bounded in time), then HTTP and the rest stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import ConfigError, Settings, load
from lagd.core.model import Event, IngestCounters
from lagd.evaluate import Evaluator, native
from lagd.evaluate.build import build_core
from lagd.evaluate.snapshot import Snapshots
from lagd.http.app import bound_port, start_http
from lagd.http.context import Health, HttpContext
from lagd.ingest.log_end import Leadership, sample_log_ends
from lagd.ingest.mirror_flows import MirrorFlows, mm2_alias, watch_mirror_flow
from lagd.ingest.offsets_group import Assignment, read_offsets_as_worker
from lagd.ingest.probe import Probes, watch_probe
from lagd.ingest.progress import ReaderProgress
from lagd.ingest.share_groups import ShareGroups, poll_share_groups
from lagd.ingest.source import read_offsets
from lagd.notify import outbox
from lagd.notify.broker_verdicts import PRODUCER as PROBES
from lagd.notify.broker_verdicts import watch_brokers
from lagd.notify.delivery import SinkStatus, run_sink
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import in_open_incident, open_members
from lagd.notify.mirror_verdicts import watch_mirrors
from lagd.notify.mqtt import PublisherStatus, announce_availability, publish_outbox
from lagd.notify.notifier import VerdictSource, run_notifier
from lagd.notify.shared_verdicts import SharedFeed, VerdictPublisher, flush_verdicts
from lagd.notify.sinks import status_page_url
from lagd.notify.watch import VerdictWatch, cluster_member
from lagd.runtime import collector, logs, sdnotify
from lagd.runtime.backoff import Backoff, describe_error
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.loop_lag import LoopLag, watch_loop
from lagd.runtime.turns import Turns, plain_turn
from lagd.scale.handover import WorkerHandover
from lagd.scale.ownership import Me, OwnerMap
from lagd.scale.relay import relay_log_ends
from lagd.state import persister
from lagd.state.guard import PoisonLog, apply_guarded
from lagd.state.persister import PersisterStatus, WriteBehind
from lagd.state.store import Store
from lagd.state.windows import State

log = logs.get("lagd.daemon")

EVENT_QUEUE_BATCHES = (
    10  # backpressure: readers wait when apply falls this far behind (a batch is one fetch: <= 500 records)
)
APPLY_SLICE = 500  # events applied between two turns of the event loop (about 1.5 ms)
# Batches queued behind the one applied from which apply has fallen behind and takes its turns
# at once, not after waiting requests (lagd.runtime.turns): half the queue, 2,500 events at most, an
# eighth of a second under 20,000 commits/s.
APPLY_BEHIND_BATCHES = EVENT_QUEUE_BATCHES // 2
STOP_BUDGET_S = 4.0  # everything must be down within 5 s of SIGTERM


T = TypeVar("T")


@dataclass
class Runtime:
    """The live pieces, shared by the tasks and read by HTTP. Plain data, no behaviour."""

    settings: Settings
    state: State
    evaluator: Evaluator
    events: asyncio.Queue[list[Event]]
    stop: asyncio.Event
    restored: asyncio.Event = field(default_factory=asyncio.Event)
    counters: dict[str, IngestCounters] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    persist_wake: asyncio.Event = field(default_factory=asyncio.Event)
    assignments: dict[str, Assignment] = field(default_factory=dict)  # workers: cluster -> owned offsets partitions
    clock: Clock = wall_ms  # the one clock every part reads "now" from (lagd.runtime.clock)
    # HTTP requests first: the background loops leave their turns to requests waiting (lagd.runtime.turns)
    turns: Turns = field(default_factory=Turns)
    share_groups: ShareGroups = field(default_factory=ShareGroups)  # shown, not judged (lagd.ingest.share_groups)
    mirror_flows: MirrorFlows = field(default_factory=MirrorFlows)  # MM2 flows (lagd.ingest.mirror_flows)
    probes: Probes = field(default_factory=Probes)  # the end-to-end probe's broker verdicts (lagd.ingest.probe)
    leadership: Leadership = field(default_factory=Leadership)  # partitions each broker led lately (log-end sampler)

    def ready(self) -> bool:
        return self.restored.is_set() and all(getattr(p, "caught_up", False) for p in self.progress.values())


def build_runtime(settings: Settings, stop: asyncio.Event, *, clock: Clock = wall_ms) -> Runtime:
    state, evaluator = build_core(settings)
    return Runtime(
        settings=settings,
        state=state,
        evaluator=evaluator,
        events=asyncio.Queue(EVENT_QUEUE_BATCHES),
        stop=stop,
        counters={name: IngestCounters() for name in settings.clusters},
        clock=clock,
    )


async def apply_events(rt: Runtime, wb: WriteBehind | None = None) -> None:
    """The only writer of State: applies queued event batches in arrival order.

    One event the state cannot apply is counted, logged and skipped (lagd.state.guard), so
    it cannot stop ingest, nor crash-loop lagd on the same record after every restart. With
    `wb`, a batch waits while the persister's backlog is full (persister.wait_for_room).
    """
    flush_at = rt.settings.storage.flush_max_changes
    applied = 0
    poison = PoisonLog()
    while True:
        batch = await rt.events.get()
        for i in range(0, len(batch), APPLY_SLICE):
            if i or rt.turns.waiting:
                # a big batch is applied in slices, HTTP answered between them; requests waiting
                # go first (before the first slice too: apply resumed from the queue, not from a
                # turn) while apply keeps up, not once batches queue up behind this one
                await (rt.turns.turn() if rt.events.qsize() < APPLY_BEHIND_BATCHES else plain_turn())
            apply_guarded(rt.state, batch[i : i + APPLY_SLICE], rt.counters, poison)
        rt.events.task_done()  # a worker's handover waits for the queue to be applied (events.join)
        applied += len(batch)
        if applied >= flush_at:
            applied = 0
            rt.persist_wake.set()
        if wb is not None:
            await persister.wait_for_room(wb)


async def drain_queue(rt: Runtime) -> None:
    """Apply what the readers queued before they stopped (guarded: a poison event at shutdown
    must not skip the final flush)."""
    poison = PoisonLog()
    while not rt.events.empty():
        apply_guarded(rt.state, rt.events.get_nowait(), rt.counters, poison)
        rt.events.task_done()


async def expire_groups(rt: Runtime, every_s: float = 60.0) -> None:
    while True:
        gone = rt.state.expire_groups(rt.clock())
        if gone:
            log.info("groups expired", count=len(gone), expire_group_s=rt.settings.storage.expire_group)
        await asyncio.sleep(every_s)


async def freeze_when_caught_up(rt: Runtime, every_s: float = 1.0) -> None:
    """Once the readers have caught up, move what the catch-up built (windows, groups) out of the
    collector's sight: a full collection over a million-object heap stalls the loop for
    hundreds of milliseconds, and these objects live as long as lagd. Then just wait for stop."""
    while not rt.ready():  # noqa: ASYNC110 - readiness is a predicate over several readers, not an event
        await asyncio.sleep(every_s)
    gc.freeze()
    # not gc.get_freeze_count(): it walks every frozen object (241 ms at 1M group-partitions)
    log.info("caught up: long-lived state frozen for the garbage collector")
    await rt.stop.wait()


async def resume_open_incidents(engine: AsyncEngine, watch: VerdictWatch) -> None:
    """Before the first verdict pass of a restarted lagd: the groups in open incidents start from
    the statuses the incident engine stored (their non-OK partitions as the rules' priors), so
    a WARN held by hysteresis neither resolves its incident nor is reported again, and each is
    offered to the notifier at its first judgement, agreeing or not, as is lagd's sight of the
    cluster where that is in an open incident (a member missing from the notifier's snapshot is
    taken for gone). (Workers start from what the groups' last owner published instead:
    lagd.scale.handover.)"""
    for cluster in watch.clusters:
        try:
            data = await outbox.load_engine_state(engine, cluster)
            members = open_members(cluster, data) if data is not None else {}
            sight = data is not None and in_open_incident(data, cluster_member(cluster))
        except Exception as exc:  # not worth failing the start for: the groups are judged afresh
            log.warning(
                "open incidents not read; their groups are judged afresh",
                cluster=cluster,
                error=describe_error(exc),
                hint="check that Postgres answers; a WARN held only by hysteresis may resolve its incident",
            )
            continue
        if sight:
            watch.resume_sight(cluster)
        if members:
            watch.take_over(cluster, members)
            log.info("groups of open incidents resumed", cluster=cluster, groups=len(members))


async def pet_watchdog(interval: float) -> None:
    """Pets systemd's watchdog while the loop runs; a hung loop gets the daemon restarted."""
    while True:
        sdnotify.notify("WATCHDOG=1")
        await asyncio.sleep(interval)


class _Stopped(Exception):
    """Stop was requested while a startup step was still running."""


async def _unless_stopped(step: Awaitable[T], stop: asyncio.Event) -> T:
    """Await `step` unless `stop` is set first: then cancel it and raise _Stopped.

    Startup talks to a database that may hang (accepts connections, never answers): SIGTERM
    must not wait for it.
    """
    task = asyncio.ensure_future(step)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, even when abandoned
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait([task], timeout=0.5)  # let it close its sockets; never wait long
    if task.done() and not task.cancelled():
        return task.result()
    raise _Stopped


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn` in a daemon thread and await its result.

    Unlike asyncio.to_thread, a call that hangs (a database that never answers) delays
    neither the loop's shutdown nor the process exit: the thread is abandoned.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if done.done():  # the awaiting side gave up (stop)
            return
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name=f"lagd-{getattr(fn, '__name__', 'step')}", daemon=True).start()
    return await done


async def _retry(what: str, attempt: Callable[[], Awaitable[Any]], stop: asyncio.Event, hint: str) -> Any:
    """Run `attempt` until it succeeds or stop is set, with capped, jittered backoff
    (lagd.runtime.backoff): the first failure is logged at once, then one line every 30 s or so.

    Each attempt races `stop`, so SIGTERM ends a hung attempt at once; returns None then.
    """
    backoff = Backoff()
    while not stop.is_set():
        try:
            result = await _unless_stopped(attempt(), stop)
        except _Stopped:
            break
        except Exception as exc:
            delay, log_now = backoff.failed()
            error = describe_error(exc)
            (log.error if log_now else log.debug)(
                f"{what} failed; retrying",
                error=error,
                hint=hint,
                attempt=backoff.attempts,
                waiting_s=backoff.waiting_s,
                retry_in_s=round(delay, 1),
            )
            sdnotify.notify(f"STATUS={what} failed ({exc.__class__.__name__}, attempt {backoff.attempts}); retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        else:
            attempts, waited = backoff.attempts, backoff.waiting_s
            if backoff.succeeded():
                log.info(f"{what} succeeded after failures", attempts=attempts + 1, waited_s=waited)
            return result
    return None


def consumed_topics(rt: Runtime, cluster: str) -> set[str]:
    """Topics whose log-end offsets the sampler must read: those any known group consumes."""
    return rt.state.consumed_topics(cluster)


def _reload_log_level(config_path: str | None) -> None:
    if not config_path:
        return
    try:
        level = load(config_path).log.level
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded", error=str(exc), hint="fix the file; the old level stays")
        return
    logs.set_level(level)
    log.info("log level reloaded", level=level)


async def _noting(status: PersisterStatus, attempt: Awaitable[T]) -> T:
    """Run a start-up attempt on Postgres, noting in the store's status whether it answered: a
    database that refuses lagd from the start is a failing store, not a healthy one with nothing
    written yet (the status page, /metrics)."""
    try:
        result = await attempt
    except Exception as exc:
        status.healthy, status.last_error = False, describe_error(exc)
        raise
    status.healthy, status.last_error = True, None
    return result


async def _restore(rt: Runtime, store: Store, migrate: bool) -> dict[tuple[str, int], int]:
    """Migrate, then restore. A worker (lagd.scale) restores only log-end samples here: its
    groups come as the consumer group assigns it their offsets partitions."""
    if migrate:
        from lagd.db.migrate import migration_summary, upgrade  # Alembic: a fifth of start-up, only when migrating

        before, after = await _in_thread(upgrade, rt.settings.storage.database_url.reveal())
        log.info(migration_summary(before, after), from_revision=before, to_revision=after)
    started = time.monotonic()
    if rt.settings.scale.enabled:
        await store.fold_log()  # workers write `windows`: what a single daemon logged goes there first
    positions = await store.restore(rt.state, groups=not rt.settings.scale.enabled)
    log.info(
        "state restored",
        group_partitions=rt.state.partitions_tracked(),
        reader_positions=len(positions),
        seconds=round(time.monotonic() - started, 2),
    )
    return positions


def _start_readers(
    rt: Runtime, positions: dict[tuple[str, int], int], spawn: Callable[[Coroutine[Any, Any, None], str], None]
) -> None:
    for name, cluster in rt.settings.clusters.items():
        progress = ReaderProgress(started_at_ms=rt.clock())
        rt.progress[name] = progress
        counters = rt.counters[name]
        mine = {p: off for (c, p), off in positions.items() if c == name}
        # The stored owners were written with these positions: a resumed reader folds
        # KIP-848 member records into them instead of starting from an empty group.
        members = rt.state.group_members(name) if cluster.offsets_source != "admin" else None
        topics_of = functools.partial(_group_topics, rt, name)
        reader = read_offsets(
            cluster,
            mine,
            rt.events,
            progress,
            counters,
            rt.stop,
            members=members,
            known_topics=topics_of,
            clock=rt.clock,
            turn=rt.turns.turn,
        )
        spawn(reader, f"offsets-{name}")
        wanted = functools.partial(consumed_topics, rt, name)
        sampler = sample_log_ends(
            cluster,
            wanted,
            rt.events,
            counters,
            rt.stop,
            patterns=mirror_patterns(rt.settings, name),
            known=rt.state.topics(name),
            every_topic=True,  # Burrow's /topic paths list every topic, consumed or not
            clock=rt.clock,
            leadership=rt.leadership,
            record_candidates=functools.partial(rt.state.record_candidates, name),
        )
        spawn(sampler, f"log-end-{name}")
        spawn(poll_share_groups(cluster, rt.share_groups, counters, rt.stop, clock=rt.clock), f"share-groups-{name}")


def _start_workers(
    rt: Runtime, handover: WorkerHandover, spawn: Callable[[Coroutine[Any, Any, None], str], None]
) -> None:
    """A worker's readers (lagd.scale): the consumer group shares out each cluster's offsets
    partitions; the log-end sampler reads this worker's share of the topics (those whose name
    hashes to an offsets partition it owns, as a group's would), and the samples of the other
    topics its groups consume come from the store, where their sampler keeps them. It reads the
    first unconsumed records of its own groups (lagd.ingest.record_ts), on any topic."""
    scale = rt.settings.scale
    for name, cluster in rt.settings.clusters.items():
        # no start time: a worker's first answer is its share of the offsets partitions, which a
        # rebalance may hold back up to the session timeout (300 s at most), so silence is no proof
        progress = ReaderProgress(source="topic")
        rt.progress[name] = progress
        counters = rt.counters[name]
        assignment = rt.assignments[name] = Assignment()
        reader = read_offsets_as_worker(
            cluster,
            scale.group,
            scale.session_timeout,
            handover,
            assignment,
            rt.events,
            progress,
            counters,
            rt.stop,
            clock=rt.clock,
            turn=rt.turns.turn,
        )
        spawn(reader, f"offsets-{name}")
        sampler = sample_log_ends(
            cluster,
            functools.partial(_consumed_share, rt, name, assignment),
            rt.events,
            counters,
            rt.stop,
            patterns=mirror_patterns(rt.settings, name),
            known=rt.state.topics(name),
            every_topic=True,
            share=assignment.owns,
            clock=rt.clock,
            leadership=rt.leadership,
            # the partitions of this worker's own groups, whichever worker samples their topics
            record_candidates=functools.partial(rt.state.record_candidates, name),
        )
        spawn(sampler, f"log-end-{name}")
        # every worker polls every share group: they are few, cheap to ask, and any worker answers
        spawn(poll_share_groups(cluster, rt.share_groups, counters, rt.stop, clock=rt.clock), f"share-groups-{name}")
        relay = relay_log_ends(
            handover.store, rt.state, name, assignment.owns, rt.events, rt.stop, cluster.offset_refresh
        )
        spawn(relay, f"log-end-relay-{name}")


def _start_mirror_flows(rt: Runtime, spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
    """A reader of MirrorMaker 2's heartbeats and checkpoints per mirror with an MM2 alias (every
    worker runs one too: they are two small topics, and each worker answers for every mirror)."""
    for name, mirror in rt.settings.mirrors.items():
        if mm2_alias(mirror):
            target = rt.settings.clusters[mirror.target]
            source = rt.settings.clusters[mirror.source]
            flow = watch_mirror_flow(
                target, mirror, rt.mirror_flows, rt.counters[target.name], rt.stop,
                clock=rt.clock, source=source, log_ends=rt.state,
            )  # fmt: skip
            spawn(flow, f"mirror-flow-{name}")


def _start_probes(rt: Runtime, spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
    """The end-to-end probe of each cluster with `probe = true` (every worker runs one: each answers
    for every broker, and each run reads back only its own probes)."""
    for name, cluster in rt.settings.clusters.items():
        if cluster.probe:
            spawn(watch_probe(cluster, rt.probes, rt.counters[name], rt.stop, clock=rt.clock), f"probe-{name}")


def _consumed_share(rt: Runtime, cluster: str, assignment: Assignment) -> set[str]:
    """The consumed topics a worker samples itself: its share (the rest come relayed, lagd.scale.relay)."""
    return {t for t in rt.state.consumed_topics(cluster) if assignment.owns(t)}


def _reports_topic(rt: Runtime, cluster: str, topic: str) -> bool:
    assignment = rt.assignments.get(cluster)
    return assignment is None or assignment.owns(topic)


def mirror_patterns(settings: Settings, cluster: str) -> list[re.Pattern[str]]:
    """Topics of `cluster` that a mirror watches: sampled even when no group consumes them."""
    out: list[re.Pattern[str]] = []
    for m in settings.mirrors.values():
        if m.source == cluster:
            out.append(re.compile(m.topics))
        if m.target == cluster:
            out.append(re.compile("^" + re.escape(m.prefix)) if m.rename == "prefix" else re.compile(m.topics))
    return out


def _group_topics(rt: Runtime, cluster: str, group: str) -> list[str]:
    return list(rt.state.group_topics(cluster, group) or ())


async def run(
    settings: Settings,
    *,
    migrate: bool = True,
    config_path: str | None = None,
    stop: asyncio.Event | None = None,
    clock: Clock = wall_ms,
) -> int:
    """Run lagd until SIGTERM/SIGINT (or `stop` is set); returns the exit status.

    `clock` is the one clock every part reads "now" from (lagd.runtime.clock): the wall clock unless
    a test drives time itself.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGHUP, _reload_log_level, config_path)
        installed.append(signal.SIGHUP)
    try:
        await _run(build_runtime(settings, stop, clock=clock), migrate)
    finally:
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    return 0


async def _run(rt: Runtime, migrate: bool) -> None:
    settings = rt.settings
    log.info(
        "lagd starting", clusters=list(settings.clusters), listen=settings.http.listen, rules_code=native.describe()
    )
    # workers share a cluster's windows, so they upsert them; a single daemon appends (lagd.state.window_log)
    store = Store.from_url(settings.storage.database_url, windows_log=not settings.scale.enabled)
    clock = rt.clock
    wb = WriteBehind.from_settings(store, rt.state, rt.persist_wake, settings.storage, clock=clock, turn=rt.turns.turn)
    publisher = PublisherStatus()
    loop_lag = LoopLag()
    health = Health(
        counters=rt.counters,
        progress=rt.progress,
        persister=wb.status,
        # no MQTT link to report (or to alert on) while MQTT is off
        publisher=publisher if mqtt_on(settings) else None,
        loop_lag=loop_lag,
    )
    # every group's last verdict, kept by the verdict watch for the pages that list every group
    snapshots = Snapshots(partitions=settings.http.metrics_detail != "group")

    def forget(cluster: str, group: str) -> None:  # a group deleted through the API
        rt.evaluator.forget(cluster, group)
        snapshots.drop(cluster, group)

    ctx = HttpContext(
        settings=settings,
        state=rt.state,
        evaluator=rt.evaluator,
        now_ms=clock,
        ready=rt.ready,
        health=health,
        engine=store.engine,
        on_delete=forget,
        snapshots=snapshots,
        turns=rt.turns,
        share_groups=rt.share_groups,
        mirror_flows=rt.mirror_flows,
        probes=rt.probes,
    )
    ingest: list[asyncio.Task[None]] = []
    others: list[asyncio.Task[None]] = []

    def spawn_ingest(coro: Coroutine[Any, Any, None], name: str) -> None:
        ingest.append(asyncio.create_task(coro, name=name))

    def spawn(coro: Coroutine[Any, Any, None], name: str) -> None:
        others.append(asyncio.create_task(coro, name=name))

    runner = await start_http(ctx)
    handover: WorkerHandover | None = None
    verdicts_out: VerdictPublisher | None = None
    if settings.scale.enabled:
        scheme = "https" if settings.http.tls_cert_file else "http"
        host = settings.http.listen.rpartition(":")[0]
        me = Me.of(f"{host}:{bound_port(runner)}", settings.scale.advertise_host, scheme=scheme)
        ctx.owners = OwnerMap(store.engine, me)
        handover = WorkerHandover(rt.state, rt.evaluator, rt.events, wb, store, store.engine, me, clock)
        handover.held = ctx.owners.held
        log.info("worker", worker=me.worker, url=me.url, group_id=settings.scale.group)
    spawn(watch_loop(loop_lag), "loop-lag")
    interval = sdnotify.watchdog_interval()
    if interval:
        spawn(pet_watchdog(interval), "watchdog")
    try:
        sdnotify.notify("STATUS=restoring state from Postgres")
        positions = await _retry(
            "restoring state from Postgres",
            lambda: _noting(wb.status, _restore(rt, store, migrate)),
            rt.stop,
            "check storage.database-url (LAGD_STORAGE_DATABASE_URL overrides the file's, password included) "
            "and that Postgres is up; lagd starts once it answers",
        )
        if positions is not None and not rt.stop.is_set():
            rt.restored.set()
            gc.freeze()  # the restored state is long-lived: keep the collector from rescanning it
            if handover is not None:
                _start_workers(rt, handover, spawn_ingest)
                health.reports_topic = functools.partial(_reports_topic, rt)
            else:
                _start_readers(rt, positions, spawn_ingest)
            _start_mirror_flows(rt, spawn_ingest)
            _start_probes(rt, spawn_ingest)
            spawn(freeze_when_caught_up(rt), "gc-freeze")
            spawn(collector.pace(turn=rt.turns.turn), "gc-pace")
            spawn(apply_events(rt, wb), "apply")
            spawn(persister.run(wb), "persister")
            spawn(expire_groups(rt), "expiry")
            changes: VerdictFeed | None = None
            if settings.notify.enabled or handover is not None:
                changes = VerdictFeed(producers=_producers(settings))
            notifier_input: VerdictSource | None = changes
            if handover is not None and changes is not None:
                # Workers: every worker's changes go to group_verdicts (also what a worker taking a
                # group over starts from); the notifier holding the lease follows the table.
                verdicts_out = VerdictPublisher(store.engine, changes, handover.me.worker, clock=clock)
                spawn(verdicts_out.run(rt.stop), "verdict-publisher")
                handover.publish_verdicts = verdicts_out.flush
                if settings.notify.enabled:
                    shared = SharedFeed(clusters=list(settings.clusters), clock=clock)
                    spawn(shared.follow(store.engine, rt.stop), "verdict-follower")
                    notifier_input = shared
            if settings.notify.enabled and changes is not None and notifier_input is not None:
                if settings.mirrors:
                    mirrors = watch_mirrors(
                        store.engine, settings.mirrors, changes, clock=clock, flows=rt.mirror_flows.verdicts
                    )
                    spawn(mirrors, "mirrors")
                probed = [name for name, c in settings.clusters.items() if c.probe]
                if probed:
                    grace = 3 * max(settings.clusters[c].probe_interval for c in probed) + 10
                    spawn(
                        watch_brokers(rt.probes, probed, changes, grace, clock=clock, leadership=rt.leadership),
                        "broker-verdicts",
                    )
                spawn(
                    run_notifier(
                        store.engine, settings.notify, notifier_input, rt.stop, clock=clock, turn=rt.turns.turn
                    ),
                    "notifier",
                )
                if mqtt_on(settings):
                    # every instance runs one; only the holder of the publish lease drains the outbox
                    spawn(publish_outbox(store.engine, settings.notify, rt.stop, publisher, clock=clock), "mqtt")
                    # <prefix>/<cluster>/status: online while running, offline (last will) after
                    spawn(
                        announce_availability(store.engine, settings.notify, list(settings.clusters), rt.stop),
                        "mqtt-status",
                    )
                _start_sinks(rt, store, health, spawn)
            watch = VerdictWatch(rt.state, rt.evaluator, settings.clusters, rt.progress, changes, clock)
            watch.snapshots = snapshots
            watch.turn = rt.turns.turn
            if handover is None and settings.notify.enabled:
                await resume_open_incidents(store.engine, watch)
            watch.store_behind = functools.partial(persister.backlog_full, wb)
            watch.store_advice = lambda: wb.status.postgres_advice
            health.sights = watch.sights
            if handover is not None:
                handover.watch = watch
            health.watch = watch
            spawn(watch.run(), "verdicts")
            sdnotify.notify("READY=1")
            sdnotify.notify("STATUS=running")
            log.info("lagd running", group_partitions=rt.state.partitions_tracked())
            await _supervise(rt, ingest + others)
    finally:
        sdnotify.notify("STOPPING=1")
        log.info("lagd stopping")
        budget_end = time.monotonic() + STOP_BUDGET_S
        rt.stop.set()
        # A worker's reader hands its partitions over before it leaves the group (applied,
        # flushed, let go: lagd.ingest.offsets_group), so give it the time a flush takes.
        await _cancel(ingest, STOP_BUDGET_S - 1.5 if settings.scale.enabled else 1.0)
        await drain_queue(rt)
        if rt.restored.is_set():
            await persister.final_flush(wb, max(0.5, budget_end - time.monotonic() - 1.0))
        if verdicts_out is not None:
            await flush_verdicts(verdicts_out, max(0.2, min(1.0, budget_end - time.monotonic() - 0.5)))
        await _cancel(others, 0.5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner.cleanup(), max(0.2, budget_end - time.monotonic() - 0.3))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(store.close(), 0.3)
        log.info("lagd stopped")


def _producers(settings: Settings) -> tuple[str, ...]:
    """What feeds the verdict feed: the groups, and the mirrors and the probes where configured."""
    probes = any(c.probe for c in settings.clusters.values()) and settings.notify.enabled
    return ("groups", *(("mirrors",) if settings.mirrors else ()), *((PROBES,) if probes else ()))


def mqtt_on(settings: Settings) -> bool:
    """Whether incidents also go out over MQTT (the sinks go out whenever incidents are on)."""
    return settings.notify.enabled and settings.notify.mqtt_enabled


def _start_sinks(
    rt: Runtime, store: Store, health: Health, spawn: Callable[[Coroutine[Any, Any, None], str], None]
) -> None:
    """One delivery task per notification sink, each from its own outbox position (lagd.notify.delivery)."""
    page = status_page_url(rt.settings.notify.status_page_url, rt.settings.http.listen)
    statuses = {}
    for sink in rt.settings.sinks.values():
        statuses[sink.name] = status = SinkStatus(sink.name, sink.kind)
        run = run_sink(
            store.engine,
            sink,
            rt.stop,
            status,
            status_url=page,
            poll_interval=rt.settings.notify.publish_interval,
            clock=rt.clock,
        )
        spawn(run, f"sink-{sink.name}")
    health.sinks = statuses


async def _supervise(rt: Runtime, tasks: list[asyncio.Task[None]]) -> None:
    """Wait for stop; a part that dies unexpectedly is logged and stops the daemon (systemd restarts it).

    Every part runs until lagd stops: one that raises, is cancelled or merely returns before
    stop is a failure (exit 1), never a silent exit 0 that Restart=on-failure would not restart.
    """
    stopper = asyncio.create_task(rt.stop.wait())
    try:
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    for task in done:
        if task is stopper:
            continue
        if task.cancelled():
            error = "cancelled"
        elif task.exception() is not None:
            error = repr(task.exception())
        elif rt.stop.is_set():
            continue  # ended together with a requested stop
        else:
            error = "returned before lagd was told to stop"
        if error == "cancelled" and rt.stop.is_set():
            continue
        log.error(
            "a part of lagd failed",
            part=task.get_name(),
            error=error,
            hint="lagd stops so that systemd restarts it; please report this with the log",
        )
        raise SystemExit(1)


async def _cancel(tasks: list[asyncio.Task[None]], timeout: float) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
