"""The cached evaluator: group verdicts from State, exactly, and when they are recomputed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lagd.core.model import (
    Commit,
    GroupMembers,
    GroupStatus,
    LogEndSample,
    PartitionOwner,
    PartitionStatus,
    WindowEntry,
)
from lagd.core.ruleset import LAGD
from lagd.evaluate import Evaluator, GroupVerdict, group_status, lag_seconds, partition_status
from lagd.evaluate.rules import apply_minimum_complete
from lagd.evaluate.snapshot import snapshot_of
from lagd.evaluate.verdict_types import PartitionVerdict
from lagd.state.windows import State

C, G = "c1", "g1"


def commit(topic: str, partition: int, offset: int, order: int, ts: int, group: str = G) -> Commit:
    return Commit(C, group, topic, partition, offset, order, ts, ts + 5)


def lagging_state() -> State:
    """Topic a/0 keeps up (lag 0 at each commit); b/0 stalls at offset 100; b/1 falls behind."""
    s = State(intervals=3)
    for i in range(3):
        t = 10_000 * (i + 1)
        s.apply(LogEndSample(C, "a", 0, 1000 * (i + 1), t - 1))
        s.apply(LogEndSample(C, "b", 0, 500 + 100 * i, t - 1))
        s.apply(LogEndSample(C, "b", 1, 2000 + 1000 * i, t - 1))
        s.apply(commit("a", 0, 1000 * (i + 1), 3 * i, t))
        s.apply(commit("b", 0, 100, 3 * i + 1, t))
        s.apply(commit("b", 1, 1000 + 500 * i, 3 * i + 2, t))
    s.apply(GroupMembers(C, G, 99, (PartitionOwner("b", 1, "/10.1.1.1", "worker-7", "m"),), "Stable"))
    return s


def test_group_verdict_exact() -> None:
    ev = Evaluator(lagging_state())
    v = ev.group(C, G, 30_000)
    assert (v.cluster, v.group, v.status, v.complete, v.partition_count, v.totallag, v.evaluated_at) == (
        C, G, GroupStatus.ERR, 1.0, 3, 0 + 600 + 2000, 30_000)  # fmt: skip
    assert [(p.topic, p.partition, p.status, p.current_lag) for p in v.partitions] == [
        ("a", 0, PartitionStatus.OK, 0),
        ("b", 0, PartitionStatus.STALL, 600),
        ("b", 1, PartitionStatus.WARN, 2000),
    ]
    b1 = v.partitions[2]
    assert v.maxlag is b1
    assert (b1.owner, b1.client_id, b1.complete, b1.since) == ("/10.1.1.1", "worker-7", 1.0, 30_000)
    assert b1.start == WindowEntry(1000, 2, 10_000, 10_005, 1000)
    assert b1.end == WindowEntry(2000, 8, 30_000, 30_005, 2000)
    # committed 2000 equals the oldest kept sample (9.999 s): a lower bound, 20.001 s, flagged
    assert (b1.lag_seconds, b1.lag_seconds_estimated) == (20.001, True)
    assert v.lag_seconds == 20.001
    assert v.partitions[0].owner == "" and v.partitions[0].lag_seconds == 0.0
    assert "lag never decreased" in b1.reason
    assert v.partitions[1].reason == "committing the same offset without progress"


def test_not_found_for_unknown_and_expired_groups() -> None:
    s = State(expire_group_ms=60_000)
    s.apply(commit("a", 0, 1, 1, 1_000))
    ev = Evaluator(s)
    for verdict in (ev.group(C, "nope", 5_000), ev.group(C, G, 61_001)):
        assert verdict == GroupVerdict(
            C, verdict.group, GroupStatus.NOTFOUND, 1.0, [], 0, None, 0, 0.0, verdict.evaluated_at
        )
    assert ev.group(C, G, 61_000).status == GroupStatus.OK  # exactly expire-group old: still known


def test_cache_until_version_changes_or_ttl() -> None:
    s = lagging_state()
    ev = Evaluator(s, cache_ttl_ms=5_000)
    first = ev.group(C, G, 30_000)
    assert ev.group(C, G, 34_999) is first
    s.apply(LogEndSample(C, "zzz", 0, 5, 31_000))  # a topic the group does not read
    assert ev.group(C, G, 34_999) is first
    s.apply(LogEndSample(C, "a", 0, 3500, 31_000))  # a topic it reads: recomputed
    second = ev.group(C, G, 34_999)
    assert second is not first and second.partitions[0].current_lag == 500
    assert ev.group(C, G, 39_999) is not second  # TTL passed


def test_a_verdict_asked_without_caching_is_not_kept_for_others() -> None:
    """The verdict scan and the all-groups pages judge every group in turn: their verdicts
    must not fill the response cache (~700 B per group-partition for a TTL), but they use a
    cached verdict when one is there."""
    s = lagging_state()
    ev = Evaluator(s, cache_ttl_ms=5_000)
    scanned = ev.group(C, G, 30_000, cache=False)
    asked = ev.group(C, G, 30_001)
    assert asked is not scanned and asked.status == scanned.status
    assert ev.group(C, G, 30_002, cache=False) is asked  # a cached one serves both
    assert ev.group(C, G, 30_003) is asked


def test_a_snapshot_reads_a_cached_verdict_and_a_judgement_for_it_drops_the_cached_one() -> None:
    """The verdict watch and the list pages judge through Evaluator.snapshot. A cached verdict that
    stands serves them as it serves `group(cache=False)`; once a time-driven rule's moment passes,
    the snapshot is judged anew, and the cached verdict, judged before that moment, is no longer
    served for the rest of its TTL (the stamp it was reused under is the new judgement's)."""
    s = State(intervals=3)
    for i in range(1, 4):  # a consumer 1,000 records behind that stops committing after 30 s
        s.apply(LogEndSample(C, "a", 0, 1000 * i + 1000, 10_000 * i - 1))
        s.apply(commit("a", 0, 1000 * i, i, 10_000 * i))
    ev = Evaluator(s, rules=LAGD, cache_ttl_ms=10**9)
    first = ev.group(C, G, 30_000)
    assert ev.snapshot(C, G, 30_001) == snapshot_of(first)
    stop = ev._due[(C, G)][1]  # silent for longer than stop-after: STOP from then on
    snap = ev.snapshot(C, G, stop)
    assert (first.status, snap.status, snap.not_ok) == (GroupStatus.OK, GroupStatus.ERR, ("STOP",))
    later = ev.group(C, G, stop + 1)
    assert later is not first and (later.status, later.not_ok) == (GroupStatus.ERR, ("STOP",))


def test_since_tracks_when_status_was_first_seen() -> None:
    s = lagging_state()
    ev = Evaluator(s, cache_ttl_ms=0)
    assert ev.group(C, G, 30_000).partitions[1].since == 30_000
    assert ev.group(C, G, 35_000).partitions[1].since == 30_000
    # b/0 is silent for longer than its window span (20 s) -> STOP, a new status
    stopped = ev.group(C, G, 50_001).partitions[1]
    assert (stopped.status, stopped.since) == (PartitionStatus.STOP, 50_001)


def test_allowed_lag_and_minimum_complete() -> None:
    s = lagging_state()
    assert Evaluator(s, allowed_lag=2000).group(C, G, 30_000).status == GroupStatus.OK
    s2 = State(intervals=10)
    s2.apply(LogEndSample(C, "a", 0, 500, 1))
    s2.apply(commit("a", 0, 100, 1, 10_000))
    s2.apply(commit("a", 0, 100, 2, 20_000))
    assert Evaluator(s2).group(C, G, 20_000).status == GroupStatus.ERR  # STALL at 20% complete
    v = Evaluator(s2, minimum_complete=0.3).group(C, G, 20_000)
    assert (v.status, v.complete, v.partitions[0].complete, v.partitions[0].status) == (
        GroupStatus.OK, 0.0, 0.2, PartitionStatus.OK)  # fmt: skip


def test_group_without_partitions_is_ok_with_complete_zero() -> None:
    s = State()
    s.apply(commit("a", 0, 1, 1, 1_000))
    s.remove_group_topic(C, G, "a")
    v = Evaluator(s).group(C, G, 2_000)
    assert (v.status, v.complete, v.partitions, v.maxlag, v.totallag) == (GroupStatus.OK, 0.0, [], None, 0)


def test_unknown_log_end_reads_zero_lag_and_estimated_time() -> None:
    s = State()
    s.apply(commit("a", 0, 10, 1, 1_000))
    p: PartitionVerdict = Evaluator(s).group(C, G, 2_000).partitions[0]
    assert (p.status, p.current_lag, p.lag_seconds, p.lag_seconds_estimated, p.end) == (
        PartitionStatus.OK, 0, 0.0, True, WindowEntry(10, 1, 1_000, 1_005, None))  # fmt: skip


def test_every_partition_of_a_known_topic_counts_and_those_without_commits_are_ok() -> None:
    """Burrow keeps a slot per topic partition: 4 partitions known from the broker, commits on p0 only."""
    s = State(intervals=3)
    for p in range(4):
        s.apply(LogEndSample(C, "t", p, 1000, 1))
    for i, offset in enumerate((700, 800, 900)):
        s.apply(commit("t", 0, offset, i + 1, 10_000 * (i + 1)))  # lags 300, 200, 100: progressing
    s.apply(GroupMembers(C, G, 9, (PartitionOwner("t", 2, "/10.0.0.2", "w-2", "m"),), "Stable"))
    v = Evaluator(s).group(C, G, 30_000)
    assert (v.status, v.partition_count, v.complete, v.totallag) == (GroupStatus.OK, 4, 0.25, 100)
    assert [(p.partition, p.status, p.current_lag, p.complete, p.start, p.end) for p in v.partitions] == [
        (0, PartitionStatus.OK, 100, 1.0, WindowEntry(700, 1, 10_000, 10_005, 300), WindowEntry(900, 3, 30_000, 30_005, 100)),
        (1, PartitionStatus.OK, 0, 0.0, None, None),
        (2, PartitionStatus.OK, 0, 0.0, None, None),
        (3, PartitionStatus.OK, 0, 0.0, None, None),
    ]  # fmt: skip
    assert v.maxlag is v.partitions[0]
    p2 = v.partitions[2]
    assert (p2.owner, p2.client_id, p2.reason, p2.since, p2.lag_seconds, p2.lag_seconds_estimated) == (
        "/10.0.0.2", "w-2", "no commits in the window", 30_000, 0.0, False)  # fmt: skip


def test_partition_count_without_broker_samples_and_with_a_commit_beyond_them() -> None:
    s = State(intervals=3)
    s.apply(commit("u", 0, 10, 1, 1_000))  # topic u: no samples, partition count unknown
    s.apply(commit("u", 2, 10, 2, 1_000))
    s.apply(LogEndSample(C, "w", 0, 10, 1))  # topic w: samples for 2 partitions, a commit on p3
    s.apply(LogEndSample(C, "w", 1, 10, 1))
    s.apply(commit("w", 3, 10, 3, 1_000))
    v = Evaluator(s).group(C, G, 1_000)
    assert [(p.topic, p.partition, p.complete) for p in v.partitions] == [
        ("u", 0, 1 / 3), ("u", 2, 1 / 3), ("w", 0, 0.0), ("w", 1, 0.0), ("w", 2, 0.0), ("w", 3, 1 / 3)
    ]  # fmt: skip
    assert (v.partition_count, v.complete, v.status) == (6, 0.0, GroupStatus.OK)


def test_stop_looks_only_at_the_last_intervals_broker_samples() -> None:
    """p0 caught up (log end 100) 5 samples ago, beyond the last 3: STOP; p1 did so within them: not STOP."""
    s = State(intervals=3, lag_samples=10)
    for p, ends in ((0, (100, 500, 600, 700, 800)), (1, (100, 700, 800))):
        for k, end in enumerate(ends):
            s.apply(LogEndSample(C, "t", p, end, k + 1))
    order = 0
    for ts in (10_000, 11_000, 12_000):
        for p in (0, 1):
            order += 1
            s.apply(commit("t", p, 100, order, ts))
    v = Evaluator(s).group(C, G, 20_000)  # silent 8 s, longer than the 2 s the window spans
    assert [(p.partition, p.status, p.current_lag) for p in v.partitions] == [
        (0, PartitionStatus.STOP, 700),
        (1, PartitionStatus.STALL, 700),
    ]


def test_min_distance_replay_keeps_the_verdict() -> None:
    """A merged commit replayed must not re-enter the window (it turned STALL into WARN)."""
    s = State(intervals=10, min_distance_ms=5000)
    s.apply(LogEndSample(C, "t", 0, 1000, 1))
    a = commit("t", 0, 100, 1, 10_000)
    s.apply(a)
    s.apply(commit("t", 0, 200, 2, 11_000))
    s.apply(a)
    p = Evaluator(s).group(C, G, 10_000).partitions[0]
    assert (p.status, p.current_lag, p.start, p.end) == (
        PartitionStatus.STALL, 800, WindowEntry(200, 2, 10_000, 10_005, 800), WindowEntry(200, 2, 10_000, 10_005, 800))  # fmt: skip


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 30_000)), max_size=25),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 80), st.integers(1, 30_000)), max_size=15),
    st.integers(0, 5),
    st.sampled_from([0.0, 0.5]),
    st.integers(0, 90_000),
)
def test_fast_path_decides_as_the_pure_rules(
    commits: list[tuple[int, int, int]],
    samples: list[tuple[int, int, int]],
    allowed: int,
    minimum: float,
    now: int,
) -> None:
    """The evaluator's single pass over flat windows agrees with the rules over entry windows
    (partition_status, group_status, lag_seconds), partition by partition."""
    s = State(intervals=3, lag_samples=5)
    for order, (partition, offset, ts) in enumerate(commits):
        s.apply(commit("t", partition, offset, order, ts))
    for partition, offset, ts in samples:
        s.apply(LogEndSample(C, "t", partition, offset, ts))
    if not commits:
        return
    v = Evaluator(s, allowed_lag=allowed, minimum_complete=minimum).group(C, G, now)
    for p in v.partitions:
        window = s.window(C, G, "t", p.partition)
        offsets, ts = s.log_end_samples(C, "t", p.partition)
        lag = max(0, offsets[-1] - window[-1].offset) if window and offsets else 0
        complete = len(window) / 3
        expected = apply_minimum_complete(partition_status(window, offsets[-3:], lag, now, allowed), complete, minimum)
        assert (p.status, p.current_lag, p.complete) == (expected, lag, complete)
        if lag:
            lt = lag_seconds(window[-1].offset, offsets, ts, now)
            assert (p.lag_seconds, p.lag_seconds_estimated) == (lt.seconds, lt.estimated)
    summary = group_status(v.partitions, minimum)
    assert (v.status, v.complete, v.totallag, v.partition_count) == (
        summary.status, summary.complete, summary.totallag, summary.partition_count)  # fmt: skip
    assert v.maxlag is (v.partitions[summary.maxlag] if summary.maxlag is not None else None)
    assert v.lag_seconds == max([p.lag_seconds for p in v.partitions], default=0.0)


def test_a_hostile_partition_number_is_listed_alone_not_padded_up_to() -> None:
    s = State(intervals=3)
    s.apply(LogEndSample(C, "t", 0, 10, 1))
    s.apply(commit("t", 0, 10, 1, 1_000))
    s.apply(commit("t", 2**31 - 1, 10, 2, 1_000))
    v = Evaluator(s).group(C, G, 1_000)
    assert [p.partition for p in v.partitions] == [0, 2**31 - 1]
