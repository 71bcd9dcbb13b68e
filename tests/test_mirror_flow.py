"""The MirrorMaker 2 flow rules (lagd.evaluate.mirror_flow, and the reason lagd.ingest.mirror_flows gives
when it may not read the heartbeats): pure, on made-up heartbeats and looks."""

from __future__ import annotations

import dataclasses
from array import array

from lagd.evaluate.mirror_flow import (
    CopyWatch,
    FlowLimits,
    FlowWindow,
    PartitionDelay,
    failover_seconds,
    judge_flow,
    partition_delay,
)
from lagd.ingest.mirror_flows import Denials, unreadable_heartbeats
from lagd.ingest.mirror_records import Checkpoint, OffsetSync
from lagd.state.windows import LogEnd

S = 1000
LIMITS = FlowLimits(stall_after_s=30, lag_after_s=10, window_s=120)


def window_with(latencies: list[float], start_ms: int = 1_000_000, every_s: int = 10) -> tuple[FlowWindow, int]:
    """A look every `every_s`, each just after a heartbeat arrived `latency` seconds after its
    emission; returns the window and the last look's time."""
    w = FlowWindow(LIMITS)
    now = start_ms
    for i, latency in enumerate(latencies):
        now = start_ms + i * every_s * S
        w.heartbeat(now - int(latency * S), arrived_ms=now)
        w.look(now)
    return w, now


def test_no_heartbeat_yet_is_named_not_judged() -> None:
    w = FlowWindow(LIMITS)
    w.look(5 * S)
    v = judge_flow("m", w, 5 * S)
    assert v.status == "NO_HEARTBEATS" and v.delay_s is None and "emit.heartbeats" in v.reason


def test_heartbeats_arriving_promptly_are_ok_with_their_latency() -> None:
    w, now = window_with([1, 0.5, 1.5, 0.25])
    v = judge_flow("m", w, now)
    assert (v.status, v.delay_s, v.heartbeat_age_s) == ("OK", 0.25, 0.25)


def test_once_heartbeats_stop_arriving_the_delay_grows_past_one_interval() -> None:
    w = FlowWindow(LIMITS)
    for t in (0, 2 * S, 4 * S):  # MM2 emitting every 2 s, each arriving 300 ms later
        w.heartbeat(t, arrived_ms=t + 300)
    assert w.delay_s(4 * S + 300) == 0.3
    assert w.delay_s(4 * S + 2 * S) == 0.3  # the next one is not due yet: still the latency
    assert w.delay_s(4 * S + 9 * S) == 7.0  # 9 s old, 2 s interval: 7 s with nothing newer


def test_a_heartbeat_read_from_the_backlog_has_no_latency_only_its_age() -> None:
    w = FlowWindow(LIMITS)
    w.heartbeat(10 * S, arrived_ms=None)
    assert (w.age_s(10 * S + 500), w.delay_s(10 * S + 500)) == (0.5, 0.0)
    assert w.delay_s(15 * S) == 4.0


def test_a_heartbeat_older_than_stall_after_is_stalled_and_not_before() -> None:
    w, _ = window_with([1, 1])
    newest = w.newest_heartbeat_ms
    assert newest is not None
    assert judge_flow("m", w, newest + 30 * S).status != "STALLED"
    stalled = judge_flow("m", w, newest + 30 * S + 1)
    assert stalled.status == "STALLED" and "no heartbeat replicated for 30 s" in stalled.reason


def test_lagging_needs_the_whole_trailing_half_behind_and_gives_the_trend() -> None:
    # heartbeats arrive in order, so a latency grows by at most the time between two looks
    behind, now = window_with([2, 2, 2, 2, 2, 4, 11, 12, 13, 14, 15, 16, 17])
    v = judge_flow("m", behind, now)
    assert v.status == "LAGGING" and "17 s behind" in v.reason
    assert v.delay_trend_s_per_min is not None and v.delay_trend_s_per_min > 0
    one_dip, now = window_with([2, 2, 2, 2, 2, 4, 11, 12, 13, 3, 15, 16, 17])
    assert judge_flow("m", one_dip, now).status == "OK"


def test_looks_older_than_the_window_are_forgotten() -> None:
    w, now = window_with([15] * 30)
    assert min(at for at, _ in w.looks) >= now - 120 * S
    assert len(w.looks) == 13


def test_an_older_or_repeated_heartbeat_changes_nothing() -> None:
    w = FlowWindow(LIMITS)
    w.heartbeat(50 * S, arrived_ms=51 * S)
    w.heartbeat(40 * S, arrived_ms=52 * S)
    w.heartbeat(50 * S, arrived_ms=53 * S)
    assert (w.newest_heartbeat_ms, w.newest_latency_ms) == (50 * S, 1 * S)


def test_the_newest_checkpoint_per_partition_gives_the_failover_gap_and_the_bound_holds() -> None:
    w = FlowWindow(LIMITS, max_checkpoints=2)
    w.checkpoint(Checkpoint("g", "src.t", 0, 100, 90, ""))
    w.checkpoint(Checkpoint("g", "src.t", 0, 130, 128, ""))  # a later one of the same key replaces it
    w.checkpoint(Checkpoint("g", "src.t", 1, 50, 50, ""))
    w.checkpoint(Checkpoint("h", "src.t", 0, 7, 1, ""))  # beyond the bound: counted, not kept
    w.heartbeat(10 * S, arrived_ms=None)
    v = judge_flow("m", w, 11 * S)
    assert [(g.group, g.partition, g.records) for g in v.gaps] == [("g", 0, 2), ("g", 1, 0)]
    assert w.dropped_checkpoints == 1


def source_samples() -> LogEnd:
    """The source's log end: 100 at 0 s, 200 at 10 s, 300 at 20 s."""
    return LogEnd(offsets=array("q", [100, 200, 300]), ts=array("q", [0, 10 * S, 20 * S]))


def test_a_partitions_delay_is_when_the_source_stood_where_the_copy_stands() -> None:
    # the target's log end 150 (sampled at 20 s); MM2 copied source 120 to target 20, the rest one
    # for one: the copy holds the source up to 250, where the source stood at 15 s
    synced = partition_delay("t", 0, 150, 20 * S, source_samples(), OffsetSync("t", 0, 120, 20))
    assert synced == PartitionDelay("t", 0, 50, 5.0, False, True, 20 * S)
    # without a sync the offsets are taken as the same: 150, reached at 5 s
    same = partition_delay("t", 0, 150, 20 * S, source_samples(), None)
    assert same == PartitionDelay("t", 0, 150, 15.0, False, False, 20 * S)
    caught_up = partition_delay("t", 0, 300, 20 * S, source_samples(), None)
    assert caught_up is not None and (caught_up.records, caught_up.seconds) == (0, 0.0)
    assert partition_delay("t", 0, 150, 20 * S, LogEnd(), None) is None


def test_a_backlog_in_the_data_partitions_makes_the_flow_lagging_though_heartbeats_are_prompt() -> None:
    w = FlowWindow(LIMITS)
    now = 1_000_000
    for i in range(13):
        now = 1_000_000 + i * 10 * S
        w.heartbeat(now - 200, arrived_ms=now)  # heartbeats 0.2 s late throughout
        behind = (PartitionDelay("t", 0, 500, 2.0 if i < 6 else 12.0 + i, False, True, now),)
        w.look(now, behind)
    v = judge_flow("m", w, now, behind)
    assert v.status == "LAGGING" and "t[0]: 500 records" in v.reason and v.delay_s == 24.0
    assert judge_flow("m", w, now).delay_s == 0.2  # the heartbeats alone


def test_a_copy_missing_past_its_limit_is_named_with_since_and_a_late_one_clears() -> None:
    watch = CopyWatch(missing_after_s=60)
    source = {"orders": {0, 1}, "payments": {0, 1, 2}}
    assert watch.look(0, source, {"orders": {0, 1}, "payments": {0, 1}}) == ()
    assert watch.look(59 * S, source, {"orders": {0, 1}}) == ()  # payments[2] lacks a copy since 0: 59 s
    late = watch.look(60 * S, source, {"orders": {0, 1}})
    # payments[2] has lacked a copy since 0, payments[0] and [1] only since 59 s: named once overdue
    assert [(m.topic, m.partitions, m.since_ms, m.topic_missing) for m in late] == [("payments", (2,), 0, True)]
    whole = watch.look(119 * S, source, {"orders": {0, 1}})
    assert [(m.topic, m.partitions, m.since_ms, m.topic_missing) for m in whole] == [("payments", (0, 1, 2), 0, True)]
    assert watch.look(120 * S, source, {"orders": {0, 1}, "payments": {0, 1, 2}}) == ()  # copied: forgotten
    assert watch.since == {}
    assert watch.look(121 * S, {"orders": {0, 1}}, {"orders": {0}}) == ()  # a new gap starts its own clock
    assert watch.look(181 * S, {"orders": {0, 1}}, {"orders": {0}})[0].topic_missing is False


def test_a_missing_copy_makes_a_heartbeating_flow_incomplete_but_a_stalled_one_stays_stalled() -> None:
    w, now = window_with([1, 1, 1])
    watch = CopyWatch(missing_after_s=0)
    missing = watch.look(now, {"orders": {0}, "audit": {0, 1}}, {"orders": {0}})
    v = judge_flow("m", w, now, missing=missing)
    assert v.status == "INCOMPLETE" and v.missing == missing
    assert "1 topic(s) the mirror covers have no copy on the target: audit" in v.reason
    assert "topics filter" in v.reason
    assert judge_flow("m", w, now + 60 * S, missing=missing).status == "STALLED"
    assert judge_flow("m", w, now).status == "OK"


def test_a_failover_gap_in_seconds_is_the_stretch_of_source_traffic_between_resume_point_and_group() -> None:
    now = 30 * S
    group_at_250 = Checkpoint("g", "src.t", 0, 250, 150, "")
    t = failover_seconds(group_at_250, source_samples(), None, now)  # same offsets both sides
    assert t is not None and (t.seconds, t.estimated) == (10.0, False)  # 150 passed at 5 s, 250 at 15 s
    synced = OffsetSync("t", 0, 200, 180)  # the copy runs 20 offsets behind the source's numbering
    t = failover_seconds(Checkpoint("g", "src.t", 0, 250, 190, ""), source_samples(), synced, now)
    assert t is not None and (t.seconds, t.estimated) == (4.0, False)  # resume at source 210: 11 s; group 15 s
    t = failover_seconds(Checkpoint("g", "src.t", 0, 250, 150, ""), source_samples(), synced, now)
    assert t is not None and (t.seconds, t.estimated) == (8.0, True)  # before the sync: taken at its shift
    assert failover_seconds(group_at_250, LogEnd(), None, now) is None
    w = FlowWindow(LIMITS)
    w.checkpoint(group_at_250)
    w.heartbeat(now, arrived_ms=None)
    gaps = judge_flow("m", w, now, gap_seconds=lambda c: failover_seconds(c, source_samples(), None, now)).gaps
    assert [(g.records, g.seconds, g.estimated) for g in gaps] == [(100, 10.0, False)]
    assert [(g.seconds, g.estimated) for g in judge_flow("m", w, now).gaps] == [(None, False)]


def test_no_heartbeats_because_lagd_may_not_read_the_topic_says_so_and_nothing_else_changes() -> None:
    w = FlowWindow(LIMITS)
    none_yet = judge_flow("m", w, 5 * S)
    denied = unreadable_heartbeats(none_yet, "src.heartbeats", frozenset({"src.heartbeats"}))
    assert denied.reason == "lagd may not read src.heartbeats (not authorized): allow its principal Read on the topic"
    assert dataclasses.replace(denied, reason=none_yet.reason) == none_yet
    # the checkpoints topic denied, or heartbeats read: the verdict as judged
    assert unreadable_heartbeats(none_yet, "src.heartbeats", frozenset({"src.checkpoints.internal"})) is none_yet
    w.heartbeat(4 * S, arrived_ms=4 * S)
    judged = judge_flow("m", w, 5 * S)
    assert unreadable_heartbeats(judged, "src.heartbeats", frozenset({"src.heartbeats"})) is judged


def test_a_topic_lagd_may_not_read_is_told_once_while_it_lasts_and_again_if_it_comes_back() -> None:
    d = Denials(hidden=frozenset({"src.heartbeats"}))
    assert d.newly() == ["src.heartbeats"]
    d.refused.add("src.checkpoints.internal")
    assert d.newly() == ["src.checkpoints.internal"]  # the heartbeats topic was told already
    assert d.retry() == {"src.checkpoints.internal"} and d.newly() == []  # retried, read this time
    d.hidden = frozenset()
    assert d.newly() == [] and d.told == frozenset()  # both readable now
    d.refused.add("src.checkpoints.internal")
    assert d.newly() == ["src.checkpoints.internal"]  # refused again: told again
