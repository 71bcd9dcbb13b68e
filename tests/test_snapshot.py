"""The verdict watch's snapshot of every group, which the list pages read instead of judging
every group per request (lagd.evaluate.snapshot). Pure parts and a real HTTP server."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from lagd.core.model import Commit, GroupStatus, LogEndSample, PartitionStatus
from lagd.evaluate import Evaluator, GroupVerdict
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots, group_reason, snapshot_of
from lagd.http import metrics, page
from lagd.http.context import CTX, HttpContext
from lagd.ingest.progress import ReaderProgress
from lagd.notify.watch import VerdictWatch
from lagd.state.windows import State
from tests.http_state import CLUSTER, GROUPS, NOW, build_context, serve
from tests.test_http_metrics import parse


def watched(ctx: HttpContext, partitions: bool = True) -> VerdictWatch:
    """A verdict watch over the context's state that keeps the snapshots its pages read."""
    progress = ReaderProgress()
    progress.mark_caught_up()
    progress.mark_fresh(NOW)
    ctx.snapshots = Snapshots(partitions)
    watch = VerdictWatch(ctx.state, ctx.evaluator, ctx.settings.clusters, {CLUSTER: progress}, None, lambda: NOW)
    watch.snapshots = ctx.snapshots
    return watch


def counting(evaluator: Evaluator) -> list[str]:
    """The groups `evaluator` judges from now on, in order."""
    judged: list[str] = []
    group, snapshot = evaluator.group, evaluator.snapshot

    def counted(c: str, g: str, now: int, *, cache: bool = True) -> GroupVerdict:
        judged.append(g)
        return group(c, g, now, cache=cache)

    def counted_snapshot(c: str, g: str, now: int) -> GroupSnapshot:
        judged.append(g)
        return snapshot(c, g, now)

    evaluator.group = counted  # type: ignore[method-assign]
    evaluator.snapshot = counted_snapshot  # type: ignore[method-assign]
    return judged


def test_a_snapshot_names_its_partitions_that_are_not_ok() -> None:
    """What the verdict watch offers the notifier of a group not OK, read from the rows' status
    column: the same partitions, in the same order, as the snapshot's partitions say."""
    ctx = build_context()
    named = []
    for group in GROUPS:
        snap = ctx.evaluator.snapshot(CLUSTER, group, NOW)
        want = [(p.topic, p.partition, p.status) for p in snap.partitions() if p.status is not PartitionStatus.OK]
        assert snap.not_ok_partitions() == want
        assert snapshot_of(ctx.evaluator.group(CLUSTER, group, NOW), partitions=False).not_ok_partitions() == []
        named += want
    assert {status for _, _, status in named} >= {PartitionStatus.WARN}, named


def test_a_snapshot_holds_what_the_list_pages_show_of_the_verdict() -> None:
    ctx = build_context()
    for group in GROUPS:
        v = ctx.evaluator.group(CLUSTER, group, NOW, cache=False)
        snap = snapshot_of(v)
        assert (snap.status, snap.complete, snap.partition_count, snap.totallag, snap.lag_seconds) == (
            v.status,
            v.complete,
            v.partition_count,
            v.totallag,
            v.lag_seconds,
        )
        assert snap.evaluated_at == v.evaluated_at == NOW
        assert snap.not_ok == tuple(sorted({p.status.value for p in v.partitions} - {"OK"}))
        assert snap.lag_seconds_bound == any(p.lag_seconds_estimated and p.current_lag for p in v.partitions)
        rows = [(r.topic, r.partition, r.current_lag, r.offset, r.status, r.lag_seconds) for r in snap.partitions()]
        assert rows == [
            (
                p.topic,
                p.partition,
                p.current_lag,
                p.end.offset if p.complete == 1.0 and p.end is not None else None,
                p.status,
                p.lag_seconds,
            )
            for p in v.partitions
        ]
        # the plain tuples /metrics reads: the topic by its index, -1 for no offset shown
        assert list(snap.partition_values()) == [
            (
                snap.topics.index(p.topic),
                p.partition,
                p.current_lag,
                p.end.offset if p.complete == 1.0 and p.end is not None else -1,
                p.status,
                p.lag_seconds,
            )
            for p in v.partitions
        ]
        assert list(snapshot_of(v, partitions=False).partitions()) == []
        assert list(snapshot_of(v, partitions=False).partition_values()) == []
    assert {snapshot_of(ctx.evaluator.group(CLUSTER, g, NOW)).status for g in GROUPS} >= {
        GroupStatus.OK,
        GroupStatus.WARN,
        GroupStatus.ERR,
    }


def test_metrics_from_the_watchs_snapshots_are_the_metrics_of_judging_every_group() -> None:
    judged_ctx, watched_ctx = build_context(), build_context()
    watch = watched(watched_ctx)
    watch.scan(NOW)
    assert len(watched_ctx.snapshots or ()) == len(GROUPS)
    judged = counting(watched_ctx.evaluator)
    a = metrics.render(judged_ctx.state, judged_ctx.evaluator, judged_ctx.health, NOW)
    b = metrics.render(watched_ctx.state, watched_ctx.evaluator, watched_ctx.health, NOW, "partition", watch.snapshots)
    assert judged == []  # the scrape judged no group: it read the watch's snapshots
    sa, sb = parse(a)[0], parse(b)[0]
    for s in (sa, sb):
        del s[("lagd_evaluation_seconds", frozenset())]  # the scrape's own CPU time
    assert sa == sb
    assert any(name == "burrow_kafka_consumer_partition_lag" for name, _ in sb)


async def test_the_list_pages_read_snapshots_and_judge_only_groups_the_watch_has_not() -> None:
    ctx = build_context()
    watch = watched(ctx)
    watch.scan(NOW)
    judged = counting(ctx.evaluator)
    # a group the watch has not judged yet (it came after the pass)
    ctx.state.apply(Commit(CLUSTER, "g-new", "orders", 0, 300, 1000, NOW, NOW))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        async with s.get("/lagd/v1/groups") as resp:
            listed = {g["group"]: g for g in (await resp.json())["groups"]}
        assert judged == ["g-new"]  # judged once, and kept
        for path in ("/metrics", "/", "/lagd/v1/groups"):
            async with s.get(path) as resp:
                assert resp.status == 200
    assert judged == ["g-new"]
    assert sorted(listed) == sorted([*GROUPS, "g-new"])
    assert listed["g-warn"]["status"] == "WARN" and listed["g-new"]["status"] == "OK"


def test_the_watch_keeps_snapshots_current_and_drops_those_of_groups_it_no_longer_sees() -> None:
    ctx = build_context()
    watch = watched(ctx, partitions=False)
    snapshots = ctx.snapshots
    assert snapshots is not None
    watch.scan(NOW)
    ok = snapshots.get(CLUSTER, "g-ok")
    assert ok is not None and ok.status is GroupStatus.OK and ok.rows is None
    # g-ok's consumer stops while its partition fills up: ERR at the watch's next passes
    later = NOW + 10 * 60_000
    for t in range(NOW + 10_000, later + 1, 10_000):
        ctx.state.apply(LogEndSample(CLUSTER, "orders", 0, 300 + t // 100, t))
    watch.progress[CLUSTER].mark_fresh(later)
    watch.scan(later)
    stopped = snapshots.get(CLUSTER, "g-ok")
    assert stopped is not None and stopped.status is GroupStatus.ERR and stopped.evaluated_at == later
    assert stopped.not_ok == ("STOP",)
    watch.let_go(CLUSTER, ["g-warn"])
    assert snapshots.get(CLUSTER, "g-warn") is None
    assert ctx.state.remove_group(CLUSTER, "g-stall")
    watch.scan(later + 1)
    assert snapshots.get(CLUSTER, "g-stall") is None


def test_lag_history_sums_the_frozen_commit_lags_per_window_slot() -> None:
    state = build_context().state
    for group in GROUPS:
        expected = [0] * state.intervals
        for topic, partitions in (state.group_topics(CLUSTER, group) or {}).items():
            for partition in partitions:
                window = state.window(CLUSTER, group, topic, partition)
                for i, entry in enumerate(window, state.intervals - len(window)):
                    expected[i] += entry.lag or 0
        assert page.lag_history(state, CLUSTER, group) == expected
    assert page.lag_history(state, CLUSTER, "g-warn") != [0] * state.intervals


async def test_the_status_page_lists_every_group_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index judges nothing the watch has judged, and its per-group work (the lag history
    of every partition's window) runs between turns of the loop, never in one go."""
    ctx = build_context()
    watched(ctx).scan(NOW)
    monkeypatch.setattr(metrics, "SLICE_S", 0.0)  # a turn after each group
    events: list[str] = []
    history = page.lag_history

    def recorded(state: State, cluster: str, group: str) -> list[int]:
        events.append(group)
        return history(state, cluster, group)

    monkeypatch.setattr(page, "lag_history", recorded)

    async def other() -> None:
        while True:
            events.append("-")
            await asyncio.sleep(0)

    app = web.Application()
    app[CTX] = ctx
    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    judged = counting(ctx.evaluator)
    response = await page.index(make_mocked_request("GET", "/", app=app))
    task.cancel()
    assert judged == []
    assert sorted(e for e in events if e != "-") == sorted(GROUPS)
    assert all(events[k + 1] == "-" for k, e in enumerate(events[:-1]) if e != "-")
    assert isinstance(response, web.Response) and isinstance(response.text, str)
    assert all(f'href="/group/{CLUSTER}/{g}"' in response.text for g in GROUPS)


def test_a_groups_reason_counts_its_partitions_not_its_statuses() -> None:
    """The status page and the status-change log line say how many partitions are at each status
    (the quick-start trial saw "1 partition STOP" for a group whose 3 partitions had stopped);
    a snapshot kept without partitions names the statuses without a count."""
    ctx = build_context()
    stopped = ctx.evaluator.group(CLUSTER, "g-stop", NOW)
    warned = ctx.evaluator.group(CLUSTER, "g-warn", NOW)
    stop = next(p for p in stopped.partitions if p.status is PartitionStatus.STOP)
    warn = next(p for p in warned.partitions if p.status is PartitionStatus.WARN)
    three_stopped = [dataclasses.replace(stop, partition=k) for k in range(3)]
    verdict = dataclasses.replace(stopped, partitions=[*three_stopped, dataclasses.replace(warn, partition=3)])
    snap = snapshot_of(verdict)
    assert snap.not_ok == ("STOP", "WARN")  # the statuses, once each
    assert group_reason(verdict.status, *snap.partition_statuses()) == "3 partitions STOP, 1 partition WARN"
    bare = snapshot_of(verdict, partitions=False)
    assert group_reason(verdict.status, *bare.partition_statuses()) == "partitions at STOP, WARN"
