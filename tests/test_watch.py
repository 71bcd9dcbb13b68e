"""The verdict watch: group status changes to history and the notifier; lagd's sight of a cluster.

Pure parts only (State, Evaluator, the feed, a real ReaderProgress); time is injected.
"""

from __future__ import annotations

import asyncio
import dataclasses

from lagd.config import ClusterSettings, EvaluatorSettings, Settings
from lagd.core import build_core
from lagd.evaluate import GroupVerdict
from lagd.ingest.progress import ReaderProgress
from lagd.model import Commit, GroupStatus, LogEndSample
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.notify.watch import VerdictWatch, cluster_member

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
        evaluator=dataclasses.replace(EvaluatorSettings(), cache_ttl=0.0),
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


def test_a_removed_group_is_offered_as_notfound() -> None:
    watch, feed = watch_of(healthy_progress(T0 + 30_000), Clock(T0))
    feed_commits(watch, "g", range(0, 30))
    watch.scan(T0 + 29_000)
    drain(feed)
    assert watch.state.remove_group(C, "g")
    assert watch.scan(T0 + 30_000) == 1
    assert [(c.group, c.status) for c in drain(feed)] == [("g", GroupStatus.NOTFOUND)]


def test_an_unreachable_cluster_is_one_member_err_then_ok_and_holds_verdicts() -> None:
    progress = healthy_progress(T0 + 59_000)
    watch, feed = watch_of(progress, Clock(T0))
    feed_commits(watch, "g", range(0, 60), behind=500)
    watch.scan(T0 + 59_000)
    assert [c.status for c in drain(feed)] == [GroupStatus.OK]
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


async def test_run_hands_the_loop_back_during_a_pass() -> None:
    clock = Clock(T0 + 59_000)
    watch, _ = watch_of(healthy_progress(T0 + 59_000), clock)
    for g in range(50):
        feed_commits(watch, f"g{g}", range(0, 60))
    turns = 0
    all_judged = asyncio.Event()
    on_change = watch._on_change

    def noted(verdict: GroupVerdict, now: int) -> None:
        on_change(verdict, now)
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
