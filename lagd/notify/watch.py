"""The verdict watch: turns group verdicts into status changes, and lagd's sight into one incident.

Each pass judges every group that may have changed (Evaluator.changed), records a changed group
status in the history the trends job rolls up, and offers it to the notifier as a GroupChange;
a change of the partitions that are not OK under the same status is offered too (not recorded),
at most every 30 s a group: the notifier's state, the retained status message and the verdict
published for a worker taking the group over then name them. It
also judges whether lagd sees each cluster (lagd.evaluate.sight): while blind, the
evaluator holds time-driven verdicts as of the moment lagd last saw the cluster, and the
cluster itself becomes one incident member (`cluster:<name>`, ERR while unreachable).
It judges each group into a snapshot (Evaluator.snapshot: no verdict objects per partition),
which it keeps for the pages that list every group (lagd.evaluate.snapshot), so they need not
judge every group per request; the partitions not OK it offers to the notifier are read from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lagd.core.config import ClusterSettings
from lagd.core.model import GroupStatus, PartitionOwner, PartitionStatus
from lagd.evaluate import Evaluator
from lagd.evaluate.clearing import snapshot_clearing
from lagd.evaluate.retention_view import retention_reason
from lagd.evaluate.sight import ClusterSight, judge_sight
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots
from lagd.evaluate.verdicts import Stamp
from lagd.notify import eventlog
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.runtime import logs
from lagd.runtime.slices import SLICE_S
from lagd.runtime.turns import Turn, plain_turn
from lagd.state.windows import State

log = logs.get("lagd.watch")

SCAN_EVERY_S = 2.0
# While a cluster's offsets reader catches up, what it has read is an older, partial picture
# (some offsets partitions ahead of others) that changes with every batch: judging it every
# pass costs as much as the reading itself and reports nothing an operator can act on. Its
# groups are judged this often until the reader stands at the end (then every pass again).
CATCHING_UP_EVERY_MS = 30_000
# The most of the event loop's time the watch takes when passes grow long and others wait: the
# API is interactive, alerts are not (Alertmanager itself waits 30 s to group them). In
# bench_http (every group changing all the time; interleaved runs), 0.25 answered /lag with the
# response cache off at p50 29-33 ms and p99 89-102 ms, a pass starting every 2.2-3.8 s; 0.10 at
# p50 6-10 ms and p99 64-82 ms, a pass every 3.5-9.5 s (lagd_verdict_cycle_seconds): status
# changes wait that long under such load, 2 s when idle.
DUTY = 0.10
PARTITIONS_EVERY_MS = 30_000  # a group's change of not-OK partitions alone is offered at most this often
CLEAR_MOVES = 0.2  # a bad group's clear time moving by this share of the time left is offered again
OTHERS_RAN_S = 0.0005  # a turn of the loop this long between two slices ran others' work


def cluster_member(cluster: str) -> str:
    """The incident member name of lagd's own view of a cluster."""
    return f"cluster:{cluster}"


def _not_ok(snap: GroupSnapshot) -> list[tuple[str, int, PartitionStatus]]:
    """The (topic, partition, status) of the group's partitions that are not OK, in its order
    (none where the group is OK: not one of its partitions is then)."""
    if snap.status is GroupStatus.OK:
        return []
    return snap.not_ok_partitions()


def _not_ok_hash(snap: GroupSnapshot) -> int:
    """A hash of the (topic, partition, status) of the group's partitions that are not OK, 0
    when all are (a group judged OK has none)."""
    bad = tuple(_not_ok(snap))
    return hash(bad) if bad else 0


def group_change(
    snap: GroupSnapshot, owners: Mapping[tuple[str, int], PartitionOwner], at: int, clear_at: int | None = None
) -> GroupChange:
    """The notifier's view of a group's judgement: its status and its non-OK partitions, each
    with the host that owns it (from `owners`, the group's members: lagd.state State.group_owners),
    and when it is expected to clear (`clear_at`, lagd.evaluate.clearing)."""
    bad = [(topic, p, status.value, _host(owners.get((topic, p)))) for topic, p, status in _not_ok(snap)]
    return GroupChange(
        cluster=snap.cluster,
        group=snap.group,
        status=snap.status,
        at=at,
        partitions=tuple(bad),  # plain strs: PartitionInfo
        topics=tuple(sorted({topic for topic, _, _, _ in bad})),
        hosts=tuple(sorted({host for _, _, _, host in bad if host})),
        reason=retention_reason(snap.retention),
        clear_at=clear_at,
    )


def _host(owner: PartitionOwner | None) -> str:
    return owner.host if owner is not None else ""


def share_wait(held_s: float, duty: float) -> float:
    """How long to leave the loop to others after a slice of `held_s` they waited behind, so
    that the slice and the wait together give the watch `duty` of the loop."""
    return held_s * (1.0 / duty - 1.0)


def pause_after(every_s: float, elapsed_s: float) -> float:
    """How long to wait after a pass that took `elapsed_s`: the next starts `every_s` after this
    one began, at once after a longer one. (The duty needs no pause here: each slice others
    waited behind was followed by its `share_wait` within the pass.)"""
    return max(every_s - elapsed_s, 0.0)


@dataclass
class VerdictWatch:
    """Status changes of every group and the sight of every cluster (see the module doc)."""

    state: State
    evaluator: Evaluator
    clusters: Mapping[str, ClusterSettings]
    progress: Mapping[str, Any]  # cluster -> ReaderProgress (caught_up, fresh_at_ms)
    changes: VerdictFeed | None
    clock: Callable[[], int]
    statuses: dict[tuple[str, str], GroupStatus] = field(default_factory=dict)
    # the evaluator's stamp of the verdict each status came from: a group is judged again once
    # anything it depends on changed since then, whoever else judged it in between
    stamps: dict[tuple[str, str], Stamp | None] = field(default_factory=dict)
    # a hash of the (topic, partition, status) of each not-OK group's partitions that are not
    # OK, as last offered, and when: a partition turning WARN in a group already WARN changes
    # no status, but the notifier's state and the published verdict (what a worker taking the
    # group over, or lagd restarted, keeps as the rules' prior) must know it. Offered at most
    # every PARTITIONS_EVERY_MS a group, so partitions flapping in a bad group stay quiet.
    not_ok: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # the statuses groups were taken over with (take_over: lagd restarted with open incidents, or
    # a worker given them), until their first judgement here. One that agrees is no change (not
    # recorded, nobody alerted again) but is still offered as the group's current verdict: the
    # feed's snapshot must hold every group judged, or a notifier taking the cluster over takes
    # a group missing from it for gone (NOTFOUND) and falsely resolves its incident.
    priors: dict[tuple[str, str], GroupStatus] = field(default_factory=dict)
    sights: dict[str, ClusterSight] = field(default_factory=dict)
    judged_at: dict[str, int] = field(default_factory=dict)  # cluster -> when its groups were last judged
    pass_seconds: float = 0.0  # time the last pass held the loop (its slices, not the waits between)
    # time between the starts of the last two passes: how late a status change can be noticed
    cycle_seconds: float = 0.0
    # True while ingest waits for Postgres (lagd.state.persister.backlog_full): then a reader
    # that falls behind is held up by the store, not by the brokers, and the hint says so
    store_behind: Callable[[], bool] | None = None
    # what to change in Postgres' WAL settings while its checkpoints come often (lagd.state.checkpoints)
    store_advice: Callable[[], str | None] | None = None
    # what the list pages (/metrics, /lagd/v1/groups, the status page) read of each verdict judged
    snapshots: Snapshots | None = None
    turn: Turn = plain_turn  # awaited between the slices of a pass (lagd.runtime.turns: requests first)
    # group status changes logged one by one, at most so many a cluster a minute (lagd.notify.eventlog)
    status_lines: eventlog.LineBudget = field(default_factory=eventlog.LineBudget)
    # the clear time last offered, and when (lagd.evaluate.clearing), of each group that is bad or
    # was bad and still works a backlog off: it is offered again under the same status, at most
    # every PARTITIONS_EVERY_MS, when its estimate appears, goes, or moves by more than
    # CLEAR_MOVES of the time left (the incident it is in says when it clears)
    clears: dict[tuple[str, str], tuple[int | None, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.evaluator.seen_through = self.seen_through

    def sight(self, name: str, now: int) -> ClusterSight:
        """lagd's sight of one cluster now (pure: from the readers' progress and the state)."""
        progress = self.progress.get(name)
        newest_commit, newest_sample = self.state.newest_times(name)
        cluster = self.clusters.get(name)
        return judge_sight(
            name,
            now,
            caught_up=bool(getattr(progress, "caught_up", False)),
            reader_fresh_at=getattr(progress, "fresh_at_ms", None),
            reader_moving_at=getattr(progress, "moving_at_ms", None),
            reader_started_at=getattr(progress, "started_at_ms", None),
            reader_answered=bool(getattr(progress, "answered", True)),
            reader_problem=str(getattr(progress, "problem", "")),
            newest_commit=newest_commit,
            newest_sample=newest_sample,
            offset_refresh_ms=int((cluster.offset_refresh if cluster else 10.0) * 1000),
        )

    def seen_through(self, name: str, now: int) -> int | None:
        """What the evaluator asks at each evaluation: judge as of the time through which lagd
        has read the cluster whole (ClusterSight.judged_as_of)."""
        return self.sight(name, now).judged_as_of

    def judge_sights(self, now: int) -> None:
        """Keep each cluster's sight for /metrics, readiness and /lagd/v1; an unreachable cluster
        (or one reachable again) is offered to the notifier as a change of its member."""
        for name in self.clusters:
            sight = self.sight(name, now)
            before = self.sights.get(name)
            self.sights[name] = sight
            was_unreachable = before is not None and before.unreachable
            prior = self.priors.pop((name, cluster_member(name)), None) if before is None else None
            if prior is not None and self.changes is not None:
                # resumed from an open incident: its member's current status, changed or not
                # (missing from the feed's snapshot it would be taken for gone)
                status = GroupStatus.ERR if sight.unreachable else GroupStatus.OK
                self.changes.put_nowait(GroupChange(name, cluster_member(name), status, now, kind="cluster"))
            if sight.unreachable != was_unreachable:
                if sight.unreachable:
                    log.warning(
                        "lagd cannot see the cluster; verdicts that need fresh data are held",
                        cluster=name,
                        reason=sight.reason,
                        hint=self._blind_hint(),
                    )
                else:
                    log.info("lagd sees the cluster again", cluster=name)
                if self.changes is not None and prior is None:
                    status = GroupStatus.ERR if sight.unreachable else GroupStatus.OK
                    self.changes.put_nowait(GroupChange(name, cluster_member(name), status, now, kind="cluster"))
            if sight.behind != (before is not None and before.behind):
                # lagd's own shortfall, not the cluster's: said in the log and /metrics, not paged
                if sight.behind:
                    log.warning(
                        "lagd reads the offsets topic slower than commits arrive; verdicts that need fresh data are held",
                        cluster=name,
                        reason=sight.reason,
                        hint=self._behind_hint(),
                    )
                elif sight.blind_since is None:
                    log.info("lagd has caught up with the offsets topic again", cluster=name)

    def _blind_hint(self) -> str:
        if self.store_behind is not None and self.store_behind():
            hint = (
                "Postgres takes lagd's writes slower than lagd reads (lagd_store_pending_changes is at its "
                "bound): check Postgres' load and disk; lagd reads on as fast as it can write"
            )
            advice = self.store_advice() if self.store_advice is not None else None
            return hint if advice is None else f"{hint}. {advice}"
        return "check that the brokers are reachable; lagd resumes judging once they answer"

    def _behind_hint(self) -> str:
        if self.store_behind is not None and self.store_behind():
            return self._blind_hint()
        return (
            "lagd's CPU is the limit (lagd_event_loop_lag_seconds, process CPU near one core): give it a "
            "faster core, narrow the group filters, or share the cluster between workers ([scale] workers)"
        )

    def let_go(self, cluster: str, groups: list[str]) -> None:
        """Groups another worker owns now (lagd.scale): forget their statuses without a change,
        so no NOTFOUND is reported for groups that still exist."""
        for group in groups:
            self._forget((cluster, group))
            self.evaluator.forget(cluster, group)

    def _forget(self, key: tuple[str, str]) -> None:
        """Drop what the watch keeps of a group: its status, stamp and snapshot."""
        self.statuses.pop(key, None)
        self.priors.pop(key, None)
        self.stamps.pop(key, None)
        self.not_ok.pop(key, None)
        self.clears.pop(key, None)
        if self.snapshots is not None:
            self.snapshots.drop(*key)

    def take_over(self, cluster: str, published: Mapping[str, GroupChange]) -> None:
        """Groups this worker was just given, with the verdict their last owner published (or those
        of open incidents, lagd restarted): a first judgement that agrees is no change (nothing
        recorded, nobody re-alerted) yet offered as the current verdict (see `priors`), and its
        partitions that were not OK keep their status as the rules' prior (hysteresis)."""
        for group, change in published.items():
            key = (cluster, group)
            if change.kind != "group" or key in self.statuses:
                continue  # lagd's sight is no group (see resume_sight); one judged here has its own prior
            self.priors[key] = change.status
            bad = tuple((t, p, PartitionStatus(s)) for t, p, s, _ in change.partitions)
            if bad:
                self.not_ok.setdefault((cluster, group), (hash(bad), change.at))
            self.evaluator.take_over(cluster, group, bad, change.at)

    def resume_sight(self, cluster: str) -> None:
        """lagd restarted with its sight of `cluster` in an open incident: the first judgement of
        the sight is offered whatever it finds, changed or not (see `priors`)."""
        if cluster not in self.sights:
            self.priors[(cluster, cluster_member(cluster))] = GroupStatus.ERR

    def scan(self, now: int) -> int:
        """One whole pass over every group at once; returns how many changed status."""
        return sum(self._pass(now))

    def _judge_now(self, cluster: str, now: int) -> bool:
        """Judge the cluster's groups in this pass? Always once its reader has caught up; while
        it catches up, every CATCHING_UP_EVERY_MS from the first pass (see there)."""
        if getattr(self.progress.get(cluster), "caught_up", True):
            return True
        first = self.judged_at.setdefault(cluster, now)
        return now - first >= CATCHING_UP_EVERY_MS

    def _pass(self, now: int) -> Iterator[int]:
        """One pass, a group at a time: yields 1 for a group whose status changed, else 0, so
        the daemon can hand the loop back between groups (nothing blocks it for long)."""
        self.judge_sights(now)
        seen: set[tuple[str, str]] = set()
        skipped: set[str] = set()
        evaluator = self.evaluator
        for cluster in self.clusters:
            if not self._judge_now(cluster, now):
                skipped.add(cluster)
                continue
            self.judged_at[cluster] = now
            for group in self.state.groups(cluster):
                key = (cluster, group)
                if not self.state.has_group(cluster, group):
                    # gone since the pass began (deleted, expired, or let go to another worker):
                    # a deleted one is reported NOTFOUND below, a let-go one not at all
                    continue
                seen.add(key)
                if key in self.statuses and not evaluator.changed(cluster, group, self.stamps.get(key), now):
                    yield 0  # nothing it depends on changed: its status stands
                    continue
                snap = evaluator.snapshot(cluster, group, now)  # no verdict objects: rows (lagd.evaluate.snapshot)
                self.stamps[key] = evaluator.stamp(cluster, group)
                if self.snapshots is not None:
                    self.snapshots.keep(snap)
                before = self.statuses.get(key)
                if before != snap.status:
                    self.statuses[key] = snap.status
                    if self.priors.pop(key, None) is snap.status:
                        self._resumed(snap, now)  # as taken over: no change, but the current verdict
                        yield 0
                    else:
                        self._on_change(snap, now, before)
                        yield 1
                else:
                    if self.changes is not None and (
                        self._partitions_due(key, snap, now) or self._clear_due(key, snap, now)
                    ):
                        self.changes.put_nowait(self._change(snap, now))  # the same status, other partitions
                    yield 0
        for key in [k for k in self.priors if k not in seen and k[0] not in skipped]:
            del self.priors[key]  # taken over but not there (deleted meanwhile): the notifier reports it gone
        for key in [k for k in self.statuses if k not in seen and k[0] not in skipped]:
            before = self.statuses.get(key)
            self._forget(key)
            # NOTFOUND: resolves its incidents
            self._on_change(self.evaluator.snapshot(key[0], key[1], now), now, before)
            yield 1
        eventlog.held_back(self.status_lines, now)
        if self.changes is not None and not skipped:
            self.changes.mark_complete("groups")

    def _change(self, snap: GroupSnapshot, now: int) -> GroupChange:
        """The group's change as offered to the notifier, with the owners of its partitions and,
        for a bad group catching up, when it is expected to clear."""
        key = (snap.cluster, snap.group)
        clear_at = self._clear_at(snap)
        if snap.status is not GroupStatus.OK or (key in self.clears and snap.totallag > 0):
            self.clears[key] = (clear_at, now)  # bad, or recovered and still working its backlog off
        else:
            self.clears.pop(key, None)
        return group_change(snap, self.state.group_owners(snap.cluster, snap.group), now, clear_at)

    def _clear_at(self, snap: GroupSnapshot) -> int | None:
        if snap.totallag <= 0 or snap.status is GroupStatus.NOTFOUND:
            return None
        clearing = snapshot_clearing(self.state, snap)
        return clearing.clear_at if clearing is not None else None

    def _clear_due(self, key: tuple[str, str], snap: GroupSnapshot, now: int) -> bool:
        """Is a bad group's new clear time to be offered (see `clears`)? Noted as offered by `_change`."""
        kept = self.clears.get(key)
        if kept is None:
            return False  # OK, and not since it was bad: nobody waits for it to clear
        last, at = kept
        if now - at < PARTITIONS_EVERY_MS:
            return False  # a group catching up commits, so it is judged again soon enough
        new = self._clear_at(snap)
        if new is None or last is None:
            return new != last
        return abs(new - last) > CLEAR_MOVES * max(new - now, 1_000)

    def _partitions_due(self, key: tuple[str, str], snap: GroupSnapshot, now: int) -> bool:
        """Is a change of the partitions that are not OK, under the same group status, to be
        offered now? At most once every PARTITIONS_EVERY_MS a group (noted as offered); until
        then the group is judged again at every pass, so the change is offered once it may be."""
        not_ok = _not_ok_hash(snap)
        kept = self.not_ok.get(key)
        if not_ok == (kept[0] if kept is not None else 0):
            return False
        if kept is not None and now - kept[1] < PARTITIONS_EVERY_MS:
            self.stamps[key] = None
            return False
        self._offered(key, not_ok, now)
        return True

    def _offered(self, key: tuple[str, str], not_ok: int, now: int) -> None:
        if not_ok:
            self.not_ok[key] = (not_ok, now)
        else:
            self.not_ok.pop(key, None)

    def _resumed(self, snap: GroupSnapshot, now: int) -> None:
        """A group judged as it was taken over: nothing to record, but the feed gets its verdict."""
        if self.changes is not None:
            self._offered((snap.cluster, snap.group), _not_ok_hash(snap), now)
            self.changes.put_nowait(self._change(snap, now))

    def _on_change(self, snap: GroupSnapshot, now: int, before: GroupStatus | None) -> None:
        self.state.record_status(snap.cluster, snap.group, snap.status.value, now)
        statuses, counted = snap.partition_statuses()
        eventlog.group_status_changed(
            self.status_lines,
            snap.cluster,
            snap.group,
            before,
            snap.status,
            statuses,
            now,
            counted,
            retention_reason(snap.retention),
        )
        if self.changes is not None:
            self._offered((snap.cluster, snap.group), _not_ok_hash(snap), now)
            # coalesced per group: bounded by the number of groups, never dropped
            self.changes.put_nowait(self._change(snap, now))

    async def run(self, every_s: float = SCAN_EVERY_S, slice_s: float = SLICE_S, duty: float = DUTY) -> None:
        """A pass every `every_s`, handing the loop back every `slice_s` of work, so HTTP and
        ingest go on while thousands of groups are judged. While other work waits for the loop,
        each slice it waited behind is followed by a wait (`share_wait`), so the watch takes at
        most `duty` of the loop during a pass as well as over the cycle: ingest and the API
        come first, and status changes arrive a few seconds later. A slice after which nothing
        else ran kept nobody waiting and does not count: on an idle loop (after a start, at
        night) passes start every `every_s` (at once after a longer one) and run unpaused."""
        previous = None
        while True:
            started = mark = time.perf_counter()
            if previous is not None:
                self.cycle_seconds = started - previous
            previous = started
            busy = 0.0  # the pass's slices
            for _ in self._pass(self.clock()):
                now = time.perf_counter()
                if now - mark >= slice_s:
                    held = now - mark
                    busy += held
                    await self.turn()
                    turned = time.perf_counter()
                    if turned - now >= OTHERS_RAN_S:
                        # others waited behind this slice: leave them the loop for the rest of
                        # the duty cycle now, not only after the pass, so that a long pass (the
                        # first after a catch-up judges every group) never holds the loop back
                        # to back while requests wait
                        await asyncio.sleep(share_wait(held, duty))
                        await self.turn()  # requests that came meanwhile go before the next slice
                        turned = time.perf_counter()
                    mark = turned
            busy += time.perf_counter() - mark
            self.pass_seconds = busy
            await asyncio.sleep(pause_after(every_s, time.perf_counter() - started))
            await self.turn()  # requests that came meanwhile go before the next pass
