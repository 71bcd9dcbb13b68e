"""The verdict watch: group status changes to history and the notifier; lagd's sight of a cluster.

Pure parts only (State, Evaluator, the feed, a real ReaderProgress); time is injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import random
import time
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from bench import bench_quality as quality
from lagd.core.config import ClusterSettings, EvaluatorSettings, Settings
from lagd.core.model import Commit, GroupStatus, LogEndSample, PartitionStatus
from lagd.evaluate.build import build_core
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots
from lagd.ingest.progress import ReaderProgress
from lagd.notify import watch as watch_module
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.notify.watch import CATCHING_UP_EVERY_MS, DUTY, VerdictWatch, cluster_member, pause_after, share_wait
from lagd.runtime.turns import Turns

C, T = "prod", "events"
T0 = 1_700_000_000_000


class Clock:
    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


def watch_of(progress: ReaderProgress, clock: Clock) -> tuple[VerdictWatch, VerdictFeed]:
    settings = Settings(
        clusters={C: ClusterSettings(name=C, bootstrap_servers=["x:9092"], offset_refresh=10.0)},
        # pause-learn 0: STOP after stop-after from the first commit, not the no-history default
        # (lagd.state.pauses): these tests are about when lagd judges, not about a group's pauses
        evaluator=dataclasses.replace(EvaluatorSettings(), cache_ttl=0.0, pause_learn=0.0),
    )
    state, evaluator = build_core(settings)
    feed = VerdictFeed()
    return VerdictWatch(state, evaluator, settings.clusters, {C: progress}, feed, clock), feed


def drain(feed: VerdictFeed) -> list[GroupChange]:
    out = []
    while not feed.empty():
        out.append(feed.get_nowait())
    return out


def healthy_progress(at: int) -> ReaderProgress:
    progress = ReaderProgress()
    progress.mark_caught_up()
    progress.mark_fresh(at)
    return progress


def feed_commits(watch: VerdictWatch, group: str, seconds: range, behind: int = 0) -> None:
    for t in seconds:
        ms = T0 + t * 1000
        if t % 10 == 0:
            watch.state.apply(LogEndSample(C, T, 0, 1000 * t, ms))
        watch.state.apply(Commit(C, group, T, 0, max(0, 1000 * t - behind), t + 1, ms, ms))


def test_a_status_change_goes_to_history_and_the_feed_once() -> None:
    clock = Clock(T0)
    watch, feed = watch_of(healthy_progress(T0 + 59_000), clock)
    feed_commits(watch, "g", range(0, 60))
    assert watch.scan(T0 + 59_000) == 1  # first judged: OK
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.OK)]
    assert watch.scan(T0 + 59_500) == 0
    assert drain(feed) == []
    assert watch.state.drain_changes().status_history == [(T0 + 59_000, C, "g", "OK")]
    assert feed.snapshot(C) is not None  # a complete pass was reported


def test_a_dashboard_judging_a_group_first_does_not_hide_its_change_from_the_watch() -> None:
    """The consumer stops; a dashboard's request judges the group before the watch's next pass.
    The watch still sees the change (each caller keeps the stamp of what it judged): a polled
    group must not lose its alert."""
    clock = Clock(T0)
    watch, feed = watch_of(healthy_progress(T0 + 59_000), clock)
    feed_commits(watch, "g", range(0, 60))
    assert watch.scan(T0 + 59_000) == 1
    drain(feed)
    at = T0 + 400_000
    watch.state.apply(LogEndSample(C, T, 0, 1000 * 400, at))
    watch.progress[C].mark_fresh(at)
    asked = watch.evaluator.group(C, "g", at)  # the request
    assert asked.status is GroupStatus.ERR
    assert watch.scan(at) == 1
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.ERR)]
    assert watch.scan(at + 500) == 0  # and once seen, not again


def test_groups_are_judged_rarely_while_the_reader_catches_up_and_at_once_when_it_has() -> None:
    progress = ReaderProgress()  # reading a backlog: not caught up
    watch, feed = watch_of(progress, Clock(T0))
    feed_commits(watch, "g", range(0, 60))
    assert watch.scan(T0 + 59_000) == 0  # the first pass while catching up judges nothing
    assert drain(feed) == [] and feed.snapshot(C) is None  # and is not a complete pass
    assert watch.scan(T0 + 59_000 + CATCHING_UP_EVERY_MS - 1) == 0
    assert watch.scan(T0 + 59_000 + CATCHING_UP_EVERY_MS) == 1  # still behind after 30 s: judged anyway
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.OK)]
    feed_commits(watch, "h", range(60, 118))
    assert watch.scan(T0 + 118_000) == 0  # next judged 30 s after the last time (89 s)
    assert watch.state.remove_group(C, "g")
    assert watch.scan(T0 + 118_500) == 0  # a skipped cluster's groups are not taken for removed
    progress.mark_caught_up()
    progress.mark_fresh(T0 + 118_600)
    assert watch.scan(T0 + 118_600) == 2  # at the end: every group judged in the very next pass
    assert sorted((c.group, c.status) for c in drain(feed)) == [("g", GroupStatus.NOTFOUND), ("h", GroupStatus.OK)]
    assert feed.snapshot(C) is not None


def test_a_removed_group_is_offered_as_notfound() -> None:
    watch, feed = watch_of(healthy_progress(T0 + 30_000), Clock(T0))
    feed_commits(watch, "g", range(0, 30))
    watch.scan(T0 + 29_000)
    drain(feed)
    assert watch.state.remove_group(C, "g")
    assert watch.scan(T0 + 30_000) == 1
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.NOTFOUND)]


def judged_ok_lagging() -> tuple[ReaderProgress, VerdictWatch, VerdictFeed]:
    """A watch that has judged group "g" OK: a minute of commits 500 records behind, the reader
    at the end at T0 + 59 s."""
    progress = healthy_progress(T0 + 59_000)
    watch, feed = watch_of(progress, Clock(T0))
    feed_commits(watch, "g", range(0, 60), behind=500)
    watch.scan(T0 + 59_000)
    assert [c.status for c in drain(feed)] == [GroupStatus.OK]
    return progress, watch, feed


def test_an_unreachable_cluster_is_one_member_err_then_ok_and_holds_verdicts() -> None:
    progress, watch, feed = judged_ok_lagging()
    # the reader and the sampler go silent: an hour later lagd is blind, not the consumer stopped
    later = T0 + 3_600_000
    watch.state.apply(LogEndSample(C, T, 0, 10_000_000, later))  # one late sample: records are waiting
    changes = []
    for now in (later, later + 1000):
        watch.scan(now)
        changes += drain(feed)
    assert [(c.group, c.status, c.kind) for c in changes] == [(cluster_member(C), GroupStatus.ERR, "cluster")]
    assert watch.evaluator.group(C, "g", later).status is GroupStatus.OK  # held, not STOP
    assert watch.sights[C].unreachable
    progress.mark_fresh(later + 2000)  # the reader reached the end again
    watch.scan(later + 2000)
    changes = drain(feed)
    assert (cluster_member(C), GroupStatus.OK, "cluster") in [(c.group, c.status, c.kind) for c in changes]
    assert watch.evaluator.group(C, "g", later + 2000).status is GroupStatus.ERR  # judged now: STOP


def test_brokers_that_never_answer_after_a_start_are_an_unreachable_cluster_not_a_catch_up() -> None:
    """A wrong broker address, or brokers down when lagd starts: the reader never gets an answer,
    so it never catches up. Within the same limit as a reader that stops moving (3 offset-refreshes
    and 10 s), the cluster is unreachable: degraded, one ERR member, a warning that names the
    brokers; and the blind time stays where the reader started rather than moving with every
    look. Once the brokers answer (partitions assigned) it is a catch-up again, not paged."""
    started = T0
    progress = ReaderProgress(started_at_ms=started)
    watch, feed = watch_of(progress, Clock(started))
    with capture_logs() as logged:
        watch.scan(started + 39_000)
        assert not watch.sights[C].unreachable and watch.sights[C].blind_since == started
        assert drain(feed) == []
        watch.scan(started + 40_001)
    sight = watch.sights[C]
    assert (sight.unreachable, sight.blind_since) == (True, started)
    assert sight.reason == "no answer from the cluster's brokers in the 40 s since the offsets reader started"
    assert [(c.group, c.status, c.kind) for c in drain(feed)] == [(cluster_member(C), GroupStatus.ERR, "cluster")]
    warned = [e for e in logged if e["log_level"] == "warning"]
    assert len(warned) == 1 and "brokers" in warned[0]["hint"]
    progress.track([0, 1], started + 41_000)  # the brokers answer: partitions assigned
    watch.scan(started + 42_000)
    assert not watch.sights[C].unreachable and watch.sights[C].reason == "offsets reader still catching up"
    assert [(c.group, c.status) for c in drain(feed)] == [(cluster_member(C), GroupStatus.OK)]


def test_a_reader_behind_but_reading_holds_verdicts_without_paging() -> None:
    """A reader that reads but runs minutes behind the offsets topic (lagd short of CPU under a
    flood of commits) holds the verdicts as of the records it reached, like a blind one, but the
    cluster is not reported unreachable: no ERR member, not degraded, one warning that says it
    is lagd's own load; and it is unreachable once it stops moving."""
    progress, watch, feed = judged_ok_lagging()
    later = T0 + 3_600_000
    watch.state.apply(LogEndSample(C, T, 0, 10_000_000, later))  # records are waiting
    # the reader has read every partition through T0 + 59 s, and read records a moment ago
    progress.read_records({0: T0 + 59_000, 1: T0 + 59_000}, later - 1000)
    progress.reached_end({1: later - 1000})  # partition 1 it read to the end; 0 holds the view back
    assert (progress.fresh_at_ms, progress.moving_at_ms) == (T0 + 59_000, later - 1000)
    with capture_logs() as logged:
        watch.scan(later)
        watch.scan(later + 1000)
    assert drain(feed) == []  # nobody paged
    warned = [e for e in logged if e["log_level"] == "warning"]
    assert [e["event"] for e in warned] == [
        "lagd reads the offsets topic slower than commits arrive; verdicts that need fresh data are held"
    ]  # once, and it names lagd's CPU, not the brokers
    assert "CPU" in warned[0]["hint"] and "brokers" not in warned[0]["hint"]
    sight = watch.sights[C]
    assert (sight.behind, sight.unreachable, sight.blind_since) == (True, False, T0 + 59_000)
    assert "behind the offsets topic" in sight.reason
    assert watch.evaluator.group(C, "g", later).status is GroupStatus.OK  # held as of its records, not STOP
    # it stops moving (while the sampler goes on): cut off, paged once
    watch.state.apply(LogEndSample(C, T, 0, 10_000_000, later + 60_000))
    watch.scan(later + 60_000)
    assert [(c.group, c.status) for c in drain(feed)] == [(cluster_member(C), GroupStatus.ERR)]
    assert watch.sights[C].unreachable and not watch.sights[C].behind
    # it reads again and reaches the end of both partitions: sees the cluster, judged now
    progress.reached_end({0: later + 61_000, 1: later + 61_000})
    watch.state.apply(LogEndSample(C, T, 0, 10_000_000, later + 61_000))  # and the sampler goes on
    watch.scan(later + 61_000)
    assert sorted((c.group, c.status) for c in drain(feed)) == [
        (cluster_member(C), GroupStatus.OK),
        ("g", GroupStatus.ERR),
    ]


def test_while_the_reader_is_behind_a_group_is_judged_again_only_when_its_moment_comes() -> None:
    """A reader behind moves the time verdicts are judged as of with every fetch. A group with no
    new data is judged again only when that time reaches the moment a time-driven rule could
    change it (here: STOP, a minute after its last commit) or goes back; not at every pass."""
    progress, watch, feed = judged_ok_lagging()
    evaluated = []
    snapshot = watch.evaluator.snapshot

    def counted(c: str, g: str, now: int) -> GroupSnapshot:
        evaluated.append(now)
        return snapshot(c, g, now)

    watch.evaluator.snapshot = counted  # type: ignore[method-assign]
    later = T0 + 3_600_000
    watch.state.apply(LogEndSample(C, T, 0, 10_000_000, later))  # records wait; the sampler is fresh
    for k in range(20):  # each second a fetch reads 5 s further, through T0 + 60 s, 65 s, ... 155 s
        progress.read_records({0: T0 + 60_000 + 5_000 * k}, later + 1000 * k)
        watch.scan(later + 1000 * k)
        assert watch.sights[C].behind
    # judged when the sample came (its version), then when the as-of time passed the STOP
    # moment (a minute after the newest commit, T0 + 59 s): 2 of 20 passes, not every one
    assert len(evaluated) == 2, evaluated
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.ERR)]
    # the as-of time goes back (a partition first read, with older records): judged again
    progress.read_records({1: T0 + 70_000}, later + 20_000)
    watch.scan(later + 20_000)
    assert len(evaluated) == 3


def test_a_cached_verdict_is_not_served_once_lagd_judges_as_of_an_earlier_time() -> None:
    """The response cache holds a verdict judged as of now; once lagd turns blind to the cluster
    (verdicts judged as of when it last saw it whole), the cached one is judged again, not served."""
    settings = Settings(
        clusters={C: ClusterSettings(name=C, bootstrap_servers=["x:9092"], offset_refresh=10.0)},
        evaluator=dataclasses.replace(EvaluatorSettings(), cache_ttl=5.0),
    )
    state, evaluator = build_core(settings)
    for t in range(0, 60):
        ms = T0 + t * 1000
        if t % 10 == 0:
            state.apply(LogEndSample(C, T, 0, 1000 * t, ms))
        state.apply(Commit(C, "g", T, 0, 1000 * t, t + 1, ms, ms))
    blind: list[int | None] = [None]
    evaluator.seen_through = lambda cluster, now: blind[0]
    first = evaluator.group(C, "g", T0 + 60_000)
    assert evaluator.group(C, "g", T0 + 61_000) is first  # seeing: served from the cache
    blind[0] = T0 + 30_000
    assert evaluator.group(C, "g", T0 + 62_000) is not first  # blind as of before it was judged


def test_long_passes_are_spaced_so_the_watch_takes_at_most_its_duty() -> None:
    assert pause_after(2.0, 0.1) == pytest.approx(1.9)  # short pass: every 2 s
    assert pause_after(2.0, 2.5) == 0.0  # a pass longer than the period: at once
    # a slice of 5 ms that others waited behind: 45 ms left to them at a duty of a tenth
    assert share_wait(0.005, 0.1) == pytest.approx(0.045)
    assert 0.005 / (0.005 + share_wait(0.005, DUTY)) == pytest.approx(DUTY)


async def test_the_time_between_two_passes_is_kept_as_the_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cycle_seconds` (lagd_verdict_cycle_seconds) is the time from one pass's start to the
    next's: the pass and the pause after it, so how late a status change can be noticed."""
    watch, _ = watch_of(healthy_progress(T0 + 59_000), Clock(T0 + 59_000))
    feed_commits(watch, "g", range(0, 60))
    pauses: list[float] = []
    second = asyncio.Event()

    def paced(every_s: float, elapsed_s: float) -> float:
        pauses.append(elapsed_s)
        if len(pauses) == 2:
            second.set()
        return 0.05

    monkeypatch.setattr(watch_module, "pause_after", paced)
    assert watch.cycle_seconds == 0.0
    task = asyncio.create_task(watch.run())
    await second.wait()
    task.cancel()
    assert 0.05 + pauses[0] <= watch.cycle_seconds < 5.0


async def test_a_pass_waits_for_a_request_that_came_during_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the pause between passes (and after a duty wait), the watch takes its turn before
    judging: a request that came meanwhile goes first (lagd.runtime.turns)."""
    watch, _ = watch_of(healthy_progress(T0 + 59_000), Clock(T0 + 59_000))
    feed_commits(watch, "g", range(0, 60))
    turns = Turns(max_wait_s=60.0)
    watch.turn = turns.turn
    passes: list[float] = []
    second = asyncio.Event()

    def paced(every_s: float, elapsed_s: float) -> float:
        passes.append(elapsed_s)
        if len(passes) == 1:
            turns.arrived()  # a request parsed while the watch pauses
        else:
            second.set()
        return 0.0

    monkeypatch.setattr(watch_module, "pause_after", paced)
    task = asyncio.create_task(watch.run())
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(passes) == 1  # the second pass waits for the request's handler
    turns.started()
    await asyncio.wait_for(second.wait(), 5.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def first_pass(
    watch: VerdictWatch, monkeypatch: pytest.MonkeyPatch, others_hold_s: float | None, **run: float
) -> float:
    """Run the watch (`run` its arguments) until its first pass ends, while another task holds
    the loop `others_hold_s` at each of its turns (None: no other task, an idle loop); returns
    the pass's elapsed time (as pause_after is told it)."""
    elapsed: list[float] = []
    done = asyncio.Event()

    def recorded(every_s: float, elapsed_s: float) -> float:
        elapsed.append(elapsed_s)
        done.set()
        return 3600.0

    monkeypatch.setattr(watch_module, "pause_after", recorded)

    async def requests(hold_s: float) -> None:
        while True:
            until = time.perf_counter() + hold_s  # a request being answered holds the loop
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0)

    busy = asyncio.create_task(requests(others_hold_s)) if others_hold_s is not None else None
    task = asyncio.create_task(watch.run(**run))
    await done.wait()
    task.cancel()
    if busy is not None:
        busy.cancel()
    return elapsed[0]


async def test_on_an_idle_loop_a_long_pass_runs_unpaused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing waits behind the watch's slices on an idle loop (after a start, at night), so no
    slice is followed by a `share_wait`: the pass takes about the time it holds the loop, not
    ten times as long. (With others waiting, see the next test.)"""
    watch, _ = watch_of(healthy_progress(T0 + 59_000), Clock(T0 + 59_000))
    for g in range(50):
        feed_commits(watch, f"g{g}", range(0, 60))
    elapsed = await first_pass(watch, monkeypatch, None, slice_s=0.0)  # a turn after every group
    assert len(watch.statuses) == 50 and watch.pass_seconds > 0
    # every slice followed by its wait: 1 / DUTY times; a preempted turn may count (the box is shared)
    assert elapsed < watch.pass_seconds / DUTY / 2


async def test_while_others_wait_a_long_pass_holds_the_loop_at_most_its_duty(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pass after a catch-up judges every group: with requests waiting, the watch
    leaves them the loop after each slice (share_wait) instead of holding it slice after slice
    and spacing only the next pass."""
    watch, _ = watch_of(healthy_progress(T0 + 59_000), Clock(T0 + 59_000))
    for g in range(400):
        feed_commits(watch, f"g{g}", range(0, 60))
    duty = 0.1
    # requests of 0.6 ms; a pass of many slices of 0.5 ms
    elapsed = await first_pass(watch, monkeypatch, 0.0006, slice_s=0.0005, duty=duty)
    assert len(watch.statuses) == 400
    # slice after slice, the watch would take 0.5 ms of every 1.1 and more (0.3 measured)
    assert watch.pass_seconds / elapsed <= 2 * duty


async def test_run_hands_the_loop_back_during_a_pass() -> None:
    clock = Clock(T0 + 59_000)
    watch, _ = watch_of(healthy_progress(T0 + 59_000), clock)
    for g in range(50):
        feed_commits(watch, f"g{g}", range(0, 60))
    turns = 0
    all_judged = asyncio.Event()
    on_change = watch._on_change

    def noted(snap: GroupSnapshot, now: int, before: GroupStatus | None) -> None:
        on_change(snap, now, before)
        if len(watch.statuses) == 50:
            all_judged.set()

    watch._on_change = noted  # type: ignore[method-assign]

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other())
    runner = asyncio.create_task(watch.run(every_s=3600.0, slice_s=0.0))
    await asyncio.wait_for(all_judged.wait(), 10)
    runner.cancel()
    ticker.cancel()
    assert turns >= 49  # the other task ran between groups of the same pass


@pytest.mark.parametrize("rules", ["lagd", "burrow"])
@pytest.mark.parametrize("make", [m for m in quality.SCENARIOS if m is not quality.scenario_restart])
def test_skipping_groups_that_are_not_due_changes_no_status(
    make: Callable[[random.Random, int], quality.Trace], rules: str
) -> None:
    """The scan re-judges a group only when it is due (new data, a time-driven rule's moment, a
    change of sight); on the quality benchmark's traces it sees every status change at the
    same second as judging every group every second, with far fewer evaluations."""
    trace = make(random.Random(f"{make.__name__}/2"), 2)
    expected = quality.lagd_statuses(trace, rules)
    cluster = quality.CLUSTER
    settings = Settings(
        clusters={cluster: ClusterSettings(name=cluster, bootstrap_servers=["x:9092"], offset_refresh=10.0)},
        evaluator=dataclasses.replace(EvaluatorSettings(), rules=rules, cache_ttl=0.0),  # type: ignore[arg-type]
    )
    state, evaluator = build_core(settings)
    progress = ReaderProgress()
    progress.mark_caught_up()
    watch = VerdictWatch(state, evaluator, settings.clusters, {cluster: progress}, None, lambda: 0)
    judged = 0
    snapshot = evaluator.snapshot

    def counted(c: str, g: str, now: int) -> GroupSnapshot:
        nonlocal judged
        judged += 1
        return snapshot(c, g, now)

    evaluator.snapshot = counted  # type: ignore[method-assign]
    seen: list[str] = []
    order = 0
    fed = 0  # seconds in which new commits or samples came
    for t in range(quality.DURATION + 1):
        ms = quality.START_MS + t * 1000
        news = t % quality.OFFSET_REFRESH == 0
        for p in range(len(trace.log_end)):
            if t % quality.OFFSET_REFRESH == 0:
                state.apply(LogEndSample(cluster, quality.TOPIC, p, trace.log_end[p][t], ms))
            off = trace.commits[p][t]
            if off is not None:
                news = True
                order += 1
                state.apply(Commit(cluster, quality.GROUP, quality.TOPIC, p, off, order, ms, ms))
        fed += news
        progress.mark_fresh(ms)
        watch.scan(ms)
        status = watch.statuses.get((cluster, quality.GROUP), GroupStatus.OK)
        seen.append("OK" if status in (GroupStatus.OK, GroupStatus.NOTFOUND) else status.value)
    assert seen == expected
    # judged when new data came, and otherwise only around time-driven moments (on average
    # less than once every 10 s), not every second
    assert judged <= fed + quality.DURATION // 10, (judged, fed)


def test_groups_let_go_to_another_worker_are_never_reported_notfound() -> None:
    """A worker's revoked groups still exist (another worker owns them): even let go in the middle
    of a pass, nothing is reported for them; a group really deleted still reads NOTFOUND."""
    from lagd.state.windows import offsets_partition

    clock = Clock(T0 + 59_000)
    watch, feed = watch_of(healthy_progress(T0 + 59_000), clock)
    names = [f"g{i}" for i in range(40)]
    for g in names:
        feed_commits(watch, g, range(0, 60))
    assert watch.scan(T0 + 59_000) == len(names)
    drain(feed)
    watch.state.drain_changes()

    revoked = {offsets_partition(g, 4) for g in names[:1]}
    gone_of = [g for g in names if offsets_partition(g, 4) in revoked]
    steps = watch._pass(T0 + 60_000)
    next(steps)  # the pass has begun: its list of groups is taken
    gone = watch.state.let_go(C, revoked, 4)
    watch.let_go(C, gone)
    assert sorted(gone) == sorted(gone_of)
    assert sum(steps) == 0
    assert drain(feed) == []
    assert watch.state.drain_changes().status_history == []

    # taken over again later, with the status its owner published: judging it agrees, no change
    for g in gone:
        feed_commits(watch, g, range(0, 60))
    watch.take_over(C, {g: GroupChange(C, g, GroupStatus.OK, T0 + 60_000) for g in gone})
    assert watch.scan(T0 + 61_000) == 0
    # offered as their current verdicts (the publisher writes only a row that differs), not recorded
    assert sorted((c.group, c.status) for c in drain(feed)) == sorted((g, GroupStatus.OK) for g in gone)
    assert watch.state.drain_changes().status_history == []

    # a group deleted for real is still reported NOTFOUND
    watch.state.remove_group(C, names[-1])
    assert watch.scan(T0 + 62_000) == 1
    assert [(c.group, c.status) for c in drain(feed)] == [(names[-1], GroupStatus.NOTFOUND)]


def test_blind_hint_names_postgres_when_ingest_waits_for_the_store() -> None:
    """A reader held up by backpressure (Postgres slower than ingest) is not a broker problem."""
    hints = []
    for waiting in (False, True):
        progress = healthy_progress(T0)
        watch, _ = watch_of(progress, Clock(T0))
        watch.store_behind = lambda waiting=waiting: waiting
        feed_commits(watch, "g", range(0, 2))
        with capture_logs() as logged:
            watch.judge_sights(T0 + 600_000)  # the reader has not stood at the end for 10 min
        hints += [e["hint"] for e in logged if e["event"].startswith("lagd cannot see the cluster")]
    assert len(hints) == 2
    assert "brokers" in hints[0] and "Postgres" not in hints[0]
    assert "Postgres" in hints[1] and "lagd_store_pending_changes" in hints[1]


def test_blind_hint_adds_what_to_change_in_postgres_when_its_checkpoints_slow_the_writes() -> None:
    hints = []
    for advice in (None, "Raise max_wal_size"):
        watch, _ = watch_of(healthy_progress(T0), Clock(T0))
        watch.store_behind = lambda: True
        watch.store_advice = lambda advice=advice: advice
        feed_commits(watch, "g", range(0, 2))
        with capture_logs() as logged:
            watch.judge_sights(T0 + 600_000)
        hints += [e["hint"] for e in logged if e["event"].startswith("lagd cannot see the cluster")]
    assert len(hints) == 2
    assert hints[0].startswith("Postgres takes") and "max_wal_size" not in hints[0]
    assert hints[1] == f"{hints[0]}. Raise max_wal_size"


HELD_AT = T0 + 900_000


def drive(
    watch: VerdictWatch,
    feed: VerdictFeed,
    seconds: range,
    partitions: int,
    log_end: Callable[[int, int], int | None],
    committed: Callable[[int, int], int | None],
    each_second: Callable[[int], None] | None = None,
) -> list[tuple[int, GroupChange]]:
    """Group "g" on topic T, second by second: each partition's log-end sample and commit of
    second t (None: none that second), then the reader marked fresh and a watch pass. Returns
    the changes offered, with the second of each."""
    offered: list[tuple[int, GroupChange]] = []
    for t in seconds:
        ms = T0 + t * 1000
        for partition in range(partitions):
            end = log_end(partition, t)
            if end is not None:
                watch.state.apply(LogEndSample(C, T, partition, end, ms))
            offset = committed(partition, t)
            if offset is not None:
                watch.state.apply(Commit(C, "g", T, partition, offset, partitions * t + partition + 1, ms, ms))
        watch.progress[C].mark_fresh(ms)
        watch.scan(ms)
        offered += [(t, change) for change in drain(feed)]
        if each_second is not None:
            each_second(t)
    return offered


def held_warn() -> tuple[VerdictWatch, GroupChange]:
    """A watch over a consumer that fell behind and now keeps pace, still behind: WARN is held
    (still-behind), though a first judgement of the same windows finds no trend and says OK.
    Returns the watch, at HELD_AT, and the group's last change it offered."""
    rate = 400

    def position(t: int) -> int:
        base = 1_000_000 - rate // 2  # half a second behind
        if t < 300:
            return base + rate * t
        if t < 700:
            return base + rate * 300 + int(0.85 * rate * (t - 300))  # falls behind
        return base + rate * 300 + int(0.85 * rate * 400) + rate * (t - 700)  # keeps pace, still behind

    owner, feed = watch_of(healthy_progress(HELD_AT), Clock(HELD_AT))
    offered = drive(
        owner,
        feed,
        range(0, 901),
        1,
        lambda _, t: 1_000_000 + rate * t if t % 10 == 0 else None,
        lambda _, t: position(t) if t % 5 == 0 else None,
    )
    last = offered[-1][1]
    assert last.status is GroupStatus.WARN
    held = owner.evaluator.group(C, "g", HELD_AT).partitions[0]
    assert (held.status, held.rule) == (PartitionStatus.WARN, "still-behind")
    return owner, last


def successor(owner: VerdictWatch, partitions: range = range(1)) -> VerdictWatch:
    """A new watch over the owner's windows and samples, restored as from Postgres (a worker
    taking the group over, or lagd restarted)."""
    new, _ = watch_of(healthy_progress(HELD_AT), Clock(HELD_AT))
    for partition in partitions:
        new.state.restore_window((C, "g", T, partition), owner.state.window(C, "g", T, partition))
        new.state.restore_log_end((C, T, partition), *owner.state.log_end_samples(C, T, partition))
    return new


def test_a_group_taken_over_keeps_its_warn_held_by_hysteresis() -> None:
    """A worker taking the group over starts from the partitions its last owner published, so
    the failover changes no verdict and clears no alert."""
    owner, published = held_warn()
    afresh = successor(owner)
    assert afresh.evaluator.group(C, "g", HELD_AT).status is GroupStatus.OK  # what hysteresis prevents

    taker = successor(owner)
    taker.take_over(C, {"g": published})
    assert taker.scan(HELD_AT) == 0  # judged WARN, as published: no change, no alert cleared
    assert taker.statuses[(C, "g")] is GroupStatus.WARN
    assert taker.evaluator.group(C, "g", HELD_AT).partitions[0].rule == "still-behind"


def test_a_group_resumed_as_it_was_is_no_change_yet_in_the_feeds_snapshot() -> None:
    """lagd restarted with the group in an open incident (WARN): its first judgement agrees, so
    nothing is recorded and no change reaches the history, but the feed's snapshot holds it:
    a notifier taking the cluster over would otherwise take it for gone (NOTFOUND) and resolve
    its incident (issue 50)."""
    owner, published = held_warn()
    restarted = successor(owner)
    feed = restarted.changes
    assert isinstance(feed, VerdictFeed)
    restarted.take_over(C, {"g": published})
    assert restarted.scan(HELD_AT) == 0
    assert restarted.state.drain_changes().status_history == []
    snap = feed.snapshot(C)
    assert snap is not None and [(c.group, c.status) for c in snap] == [("g", GroupStatus.WARN)]
    assert [p[:3] for p in snap[0].partitions] == [(T, 0, "WARN")]
    assert restarted.priors == {}  # kept only until the first judgement


def test_a_group_resumed_but_judged_otherwise_is_a_change() -> None:
    """A prior that the first judgement contradicts (the group recovered while lagd was down)
    is a change like any other: recorded and offered."""
    owner, published = held_warn()
    restarted = successor(owner)
    restarted.take_over(C, {"g": dataclasses.replace(published, status=GroupStatus.ERR)})
    assert restarted.scan(HELD_AT) == 1
    assert restarted.state.drain_changes().status_history == [(HELD_AT, C, "g", "WARN")]
    assert [(c.group, c.status) for c in drain(restarted.changes)] == [("g", GroupStatus.WARN)]  # type: ignore[arg-type]


def test_a_resumed_group_that_is_gone_leaves_no_prior_and_no_change_of_the_watch() -> None:
    """Taken over but deleted while lagd was down: the watch offers nothing for it (the notifier
    reports a member missing from the snapshot gone) and keeps no prior for it."""
    owner, published = held_warn()
    restarted = successor(owner, partitions=range(0))  # nothing of "g" restored
    restarted.take_over(C, {"g": published})
    assert restarted.scan(HELD_AT) == 0
    assert restarted.priors == {} and drain(restarted.changes) == []  # type: ignore[arg-type]
    assert restarted.changes is not None and restarted.changes.snapshot(C) == []


def test_a_resumed_sight_is_offered_at_its_first_judgement_changed_or_not() -> None:
    """lagd restarted with its sight of the cluster in an open incident and sees it now: the
    member is offered OK (its incident resolves as the cluster's, not as a member gone), once."""
    watch, feed = watch_of(healthy_progress(T0), Clock(T0))
    watch.resume_sight(C)
    watch.scan(T0)
    assert [(c.group, c.status, c.kind) for c in drain(feed)] == [(cluster_member(C), GroupStatus.OK, "cluster")]
    assert [(c.group, c.status) for c in feed.snapshot(C) or []] == [(cluster_member(C), GroupStatus.OK)]
    watch.scan(T0 + 2_000)
    assert drain(feed) == []


def test_a_published_sight_is_not_taken_over_as_a_group() -> None:
    """A worker given the offsets partition a `cluster:<name>` row hashes to takes no group over
    from it: a group never seen would be reported NOTFOUND at the first pass."""
    watch, feed = watch_of(healthy_progress(T0), Clock(T0))
    watch.take_over(C, {cluster_member(C): GroupChange(C, cluster_member(C), GroupStatus.ERR, T0, kind="cluster")})
    watch.scan(T0)
    assert watch.priors == {} and drain(feed) == []


def test_a_changes_partitions_hold_plain_values_the_collector_stops_tracking() -> None:
    """The feed keeps every group's latest change for as long as lagd runs: its partitions are
    tuples of plain values (the status as a str), which the collector stops tracking at its first
    look, so a full collection does not walk a million of them at 1M group-partitions."""
    _, published = held_warn()
    assert published.partitions == ((T, 0, "WARN", published.partitions[0][3]),)
    assert all(type(status) is str for _, _, status, _ in published.partitions)
    gc.collect()
    assert not any(gc.is_tracked(p) for p in published.partitions)


def test_a_partition_turning_warn_in_a_warn_group_is_offered_and_kept_at_takeover() -> None:
    """Partition 0 falls behind for good (the group turns WARN); later partition 1 falls behind
    too, then keeps pace, still behind (WARN held by hysteresis). The group's status never
    changes after the first WARN, yet the watch offers the change of its partitions, so what a
    successor starts from (the published verdict) holds partition 1's WARN."""
    rate = 400

    def position(partition: int, t: int) -> int:
        base = 1_000_000 - rate // 2  # half a second behind
        if partition == 0:
            return base + rate * t - (int(0.15 * rate * (t - 100)) if t > 100 else 0)  # falls behind from 100 s
        if t < 400:
            return base + rate * t
        if t < 700:
            return base + rate * 400 + int(0.85 * rate * (t - 400))  # falls behind
        return base + rate * 400 + int(0.85 * rate * 300) + rate * (t - 700)  # keeps pace, still behind

    owner, feed = watch_of(healthy_progress(HELD_AT), Clock(HELD_AT))
    offered = drive(
        owner,
        feed,
        range(0, 901),
        2,
        lambda _, t: 1_000_000 + rate * t if t % 10 == 0 else None,
        lambda partition, t: position(partition, t) if t % 5 == 0 else None,
    )
    changes = [change for _, change in offered]
    # new (OK), partition 0 falling behind (WARN), then partition 1 too: the same status
    assert [change.status for change in changes] == [GroupStatus.OK, GroupStatus.WARN, GroupStatus.WARN]
    last = changes[-1]
    assert [(p, s) for _, p, s, _ in last.partitions] == [(0, PartitionStatus.WARN), (1, PartitionStatus.WARN)]
    held = owner.evaluator.group(C, "g", HELD_AT).partitions[1]
    assert (held.status, held.rule) == (PartitionStatus.WARN, "still-behind")

    afresh = successor(owner, range(2))
    assert afresh.evaluator.group(C, "g", HELD_AT).partitions[1].status is PartitionStatus.OK  # without the prior
    taker = successor(owner, range(2))
    taker.take_over(C, {"g": last})
    assert taker.scan(HELD_AT) == 0
    assert taker.evaluator.group(C, "g", HELD_AT).partitions[1].rule == "still-behind"


def test_a_change_of_partitions_alone_is_offered_at_most_every_partitions_every_ms() -> None:
    """Records arrive on two partitions; partition 0's consumer stops committing at 300 s,
    partition 1's at 310 s. Partition 0 goes STOP (the group ERR: a status change,
    offered at once), partition 1 goes STOP some seconds later: the same status, offered only
    PARTITIONS_EVERY_MS after the first, at the first pass it may be."""
    owner, feed = watch_of(healthy_progress(T0), Clock(T0))
    partition_1_stops: list[int] = []

    def note_stop(t: int) -> None:
        if owner.evaluator.group(C, "g", T0 + t * 1000).partitions[1].status is PartitionStatus.STOP:
            partition_1_stops.append(t)

    offered = drive(
        owner,
        feed,
        range(0, 480),
        2,
        # (not sampled PARTITIONS_EVERY_MS after the first STOP: see the last assertion)
        lambda _, t: 1000 * t if t % 10 == 3 else None,
        lambda partition, t: 1000 * t if t < 300 + 10 * partition else None,
        note_stop,
    )
    partition_1_stopped = partition_1_stops[0] if partition_1_stops else None
    stopped = [
        (t, [s for _, _, s, _ in change.partitions]) for t, change in offered if change.status is GroupStatus.ERR
    ]
    assert [statuses for _, statuses in stopped] == [[PartitionStatus.STOP], [PartitionStatus.STOP] * 2]
    first, second = stopped[0][0], stopped[1][0]
    every_s = watch_module.PARTITIONS_EVERY_MS // 1000
    assert partition_1_stopped is not None and first < partition_1_stopped < first + every_s  # came early...
    assert second == first + every_s  # ...offered once it may be, not at the next sample (3 s later)


def test_what_a_group_keeps_between_passes_is_nothing_the_collector_tracks() -> None:
    """The evaluator's since-values and kept facts and the watch's snapshot live for as long as
    the group: they are bytes and plain tuples, which the collector stops tracking at its first
    look, so a full collection does not walk them (as arrays they were 60,000 objects at 1M
    group-partitions, most of a full collection's 80 ms)."""
    owner, _ = held_warn()
    owner.snapshots = Snapshots()
    owner.snapshots.put(owner.evaluator.group(C, "g", HELD_AT))
    since, facts = owner.evaluator._since[(C, "g")], owner.evaluator._facts[(C, "g")]
    assert since and facts  # held WARN: the group keeps both
    gc.collect()
    gc.collect()  # a tuple is untracked once what it holds is: its topics may be looked at after it
    kept = owner.snapshots._by_group[(C, "g")]
    assert not gc.is_tracked(since) and not gc.is_tracked(facts) and not gc.is_tracked(kept)
    snap = owner.snapshots.get(C, "g")
    assert snap is not None and snap.status is GroupStatus.WARN
    assert [(r.topic, r.partition, r.status) for r in snap.partitions()] == [(T, 0, PartitionStatus.WARN)]
