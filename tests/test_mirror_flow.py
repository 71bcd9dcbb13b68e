"""The MirrorMaker 2 flow rules (lagd.evaluate.mirror_flow): pure, on made-up looks."""

from __future__ import annotations

from lagd.evaluate.mirror_flow import FlowLimits, FlowWindow, judge_flow
from lagd.ingest.mirror_records import Checkpoint

S = 1000
LIMITS = FlowLimits(stall_after_s=30, lag_after_s=10, window_s=120)


def window_with(ages: list[float], start_ms: int = 1_000_000, every_s: int = 10) -> tuple[FlowWindow, int]:
    """Looks every `every_s` at which the newest heartbeat was `age` seconds old; the last look's time."""
    w = FlowWindow(LIMITS)
    now = start_ms
    for i, age in enumerate(ages):
        now = start_ms + i * every_s * S
        w.heartbeat(now - int(age * S))
        w.look(now)
    return w, now


def test_no_heartbeat_yet_is_named_not_judged() -> None:
    w = FlowWindow(LIMITS)
    w.look(5 * S)
    v = judge_flow("m", w, 5 * S)
    assert v.status == "NO_HEARTBEATS" and v.heartbeat_age_s is None and "emit.heartbeats" in v.reason


def test_fresh_heartbeats_are_ok() -> None:
    w, now = window_with([1, 0.5, 1.5, 1])
    v = judge_flow("m", w, now)
    assert (v.status, v.heartbeat_age_s) == ("OK", 1.0)


def test_a_heartbeat_older_than_stall_after_is_stalled_and_not_before() -> None:
    w, _ = window_with([1, 1])
    newest = w.newest_heartbeat_ms
    assert newest is not None
    assert judge_flow("m", w, newest + 30 * S).status != "STALLED"
    assert judge_flow("m", w, newest + 30 * S + 1).status == "STALLED"


def test_lagging_needs_the_whole_trailing_half_behind() -> None:
    behind, now = window_with([2, 2, 2, 2, 2, 2, 12, 14, 16, 18, 20, 22, 24])
    v = judge_flow("m", behind, now)
    assert v.status == "LAGGING" and v.age_trend_s_per_min is not None and v.age_trend_s_per_min > 0
    one_spike, now = window_with([2, 2, 2, 2, 2, 2, 12, 14, 16, 3, 20, 22, 24])
    assert judge_flow("m", one_spike, now).status == "OK"


def test_looks_older_than_the_window_are_forgotten() -> None:
    w, now = window_with([15] * 30)
    assert min(at for at, _ in w.looks) >= now - 120 * S
    assert len(w.looks) == 13


def test_a_repeated_or_older_heartbeat_changes_nothing() -> None:
    w = FlowWindow(LIMITS)
    w.heartbeat(50 * S)
    w.heartbeat(40 * S)
    w.heartbeat(50 * S)
    assert w.newest_heartbeat_ms == 50 * S


def test_the_newest_checkpoint_per_partition_gives_the_failover_gap_and_the_bound_holds() -> None:
    w = FlowWindow(LIMITS, max_checkpoints=2)
    w.checkpoint(Checkpoint("g", "src.t", 0, 100, 90, ""))
    w.checkpoint(Checkpoint("g", "src.t", 0, 130, 128, ""))  # a later one of the same key replaces it
    w.checkpoint(Checkpoint("g", "src.t", 1, 50, 50, ""))
    w.checkpoint(Checkpoint("h", "src.t", 0, 7, 1, ""))  # beyond the bound: counted, not kept
    w.heartbeat(10 * S)
    v = judge_flow("m", w, 11 * S)
    assert [(g.group, g.partition, g.records) for g in v.gaps] == [("g", 0, 2), ("g", 1, 0)]
    assert w.dropped_checkpoints == 1
