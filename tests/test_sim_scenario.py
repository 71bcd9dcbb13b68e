"""The workload scenario is pure: log ends and commits are functions of time."""

from __future__ import annotations

import pytest

from lagd.ingest.progress import ReaderProgress
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec, committed, log_end, standard, step


def test_steady_partitions_grow_at_their_own_rate() -> None:
    t = TopicSpec("a", 4, rate=2.0)
    assert [log_end(t, p, 3.0) for p in range(4)] == [6, 7, 9, 10]


def test_bursty_grows_in_bursts_and_idle_not_at_all() -> None:
    b = TopicSpec("b", 1, rate=1.0, pattern="bursty", burst_every=2.0)
    assert [log_end(b, 0, x) for x in (0.0, 1.0, 1.9, 2.0, 3.5, 4.0)] == [0, 0, 0, 2, 2, 4]
    idle = TopicSpec("c", 1, pattern="idle", initial=3)
    assert [log_end(idle, 0, x) for x in (0.0, 50.0)] == [3, 3]


def test_deleted_topic_stops_growing() -> None:
    t = TopicSpec("a", 1, rate=1.0, deleted_at=2.0)
    assert [log_end(t, 0, x) for x in (1.0, 2.0, 9.0)] == [1, 2, 2]


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("healthy", [0, 2, 4, 6, 8]),
        ("lagging", [0, 1, 2, 3, 4]),
        ("stalled", [0, 2, 4, 4, 4]),
        ("rewinding", [0, 2, 0, 1, 3]),
        ("recovering", [0, 1, 2, 6, 8]),
    ],
)
def test_group_behaviours(behaviour: str, expected: list[int]) -> None:
    topic = TopicSpec("a", 1, rate=2.0)
    g = GroupSpec("g", ("a",), behaviour, speed=0.5, at=2.0, rewind_by=5)  # type: ignore[arg-type]
    s = Scenario((topic,), (g,))
    assert [committed(s, g, "a", 0, float(x)) for x in range(5)] == expected


def test_crash_looping_rewinder_restarts_from_one_checkpoint() -> None:
    topic = TopicSpec("a", 1, rate=2.0)
    g = GroupSpec("g", ("a",), "rewinding", at=2.0, rewind_by=3, every=2.0)
    s = Scenario((topic,), (g,))
    # healthy until 2 s (log end 4), then from checkpoint 4 - 3 = 1 at 2 records/s, back to 1 every 2 s
    assert [committed(s, g, "a", 0, float(x)) for x in range(8)] == [0, 2, 1, 3, 1, 3, 1, 3]


def test_draining_consumer_works_off_each_burst_before_the_next() -> None:
    bursty = TopicSpec("b", 1, rate=2.0, pattern="bursty", burst_every=4.0)
    g = GroupSpec("g", ("b",), "draining", speed=2.0)
    s = Scenario((bursty,), (g,))
    # bursts of 8 records at 4 s and 8 s, drained at 4 records/s: lag 8, 4, 0, 0, then again
    assert [log_end(bursty, 0, float(x)) for x in range(4, 10)] == [8, 8, 8, 8, 16, 16]
    assert [committed(s, g, "b", 0, float(x)) for x in range(10)] == [0, 0, 0, 0, 0, 4, 8, 8, 8, 12]
    # a fractional burst size (12.5 records/s x 15 s) never makes the offset step back
    odd = Scenario(
        (TopicSpec("o", 2, rate=10.0, pattern="bursty", burst_every=15.0),),
        (g := GroupSpec("d", ("o",), "draining", speed=3.0),),
    )
    offsets = [committed(odd, g, "o", 1, x / 2) for x in range(390)]  # to 194.5 s: 14.5 s after a burst
    assert offsets == sorted(offsets) and offsets[-1] == log_end(odd.topics[0], 1, 194.5)
    steady = Scenario((TopicSpec("c", 1, rate=2.0),), (GroupSpec("h", ("c",), "draining", speed=2.0),))
    assert committed(steady, steady.groups[0], "c", 0, 3.0) == 6  # keeps up like a healthy consumer


def test_step_produces_differences_and_silences_stopped_and_deleted_groups() -> None:
    s = Scenario(
        (TopicSpec("a", 2, rate=1.0),),
        (
            GroupSpec("ok", ("a",)),
            GroupSpec("stop", ("a",), "stopped", at=2.0),
            GroupSpec("del", ("a",), "deleted", at=2.0),
        ),
    )
    first = step(s, -1.0, 0.0)
    assert first.produce == {} and set(first.commits) == {"ok", "stop", "del"}
    second = step(s, 0.0, 1.0)
    assert second.produce == {("a", 0): 1, ("a", 1): 1}
    assert second.commits["ok"] == {("a", 0): 1, ("a", 1): 1}
    third = step(s, 1.0, 2.0)
    assert set(third.commits) == {"ok"}
    assert third.deleted_groups == ("del",)
    assert step(s, 2.0, 3.0).deleted_groups == ()


def test_unknown_topic_in_a_group_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown topic 'x'"):
        Scenario((TopicSpec("a"),), (GroupSpec("g", ("x",)),))


def test_standard_scenario_shape() -> None:
    s = standard("u1")
    assert [t.partitions for t in s.topics] == [8, 8, 8]
    assert len(s.groups) == 5
    assert len({g.behaviour for g in s.groups}) == 5


def test_reader_progress() -> None:
    p = ReaderProgress()
    assert not p.caught_up
    p.measure({0: 0, 1: 5, 2: 0}, {0: 10, 1: 15, 2: 0})
    assert p.fraction == 0.0 and not p.caught_up
    p.advance(0, 10)
    assert p.fraction == 0.5 and not p.caught_up
    p.advance(1, 15)
    assert p.caught_up and p.fraction == 1.0
    p.measure({3: 0}, {3: 100})  # a partition discovered later does not make it unready again
    assert p.caught_up
