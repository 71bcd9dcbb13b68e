"""State: windows, samples, tombstones and the changes recorded for the store."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    LogEndSample,
    OffsetDeleted,
    PartitionOwner,
    ReaderPosition,
    TopicDeleted,
    WindowEntry,
)
from lagd.evaluate.lagtime import run_start
from lagd.state.windows import LOG_END_WEIGHT, State, entries_of, flat_window, window_from_bytes

C, G, T = "c1", "g1", "t1"


def commit(
    offset: int, order: int, ts: int | None = None, *, group: str = G, topic: str = T, partition: int = 0
) -> Commit:
    ts = order * 1000 if ts is None else ts
    return Commit(C, group, topic, partition, offset, order, ts, ts + 1)


def sample(offset: int, ts: int, *, topic: str = T, partition: int = 0) -> LogEndSample:
    return LogEndSample(C, topic, partition, offset, ts)


def drained(data: bytes | None) -> array[int]:
    """A drained window (as the store writes it) back in the flat layout."""
    assert data is not None
    return window_from_bytes(data)


def offsets_orders(state: State, group: str = G, topic: str = T, partition: int = 0) -> list[tuple[int, int]]:
    return [(e.offset, e.order) for e in state.window(C, group, topic, partition)]


def test_append_with_lag_from_newest_sample_and_unknown_log_end() -> None:
    s = State(intervals=3)
    s.apply(commit(100, 1))
    s.apply(sample(150, 1500))
    s.apply(sample(180, 1600))
    s.apply(commit(170, 2))
    s.apply(commit(200, 3))  # beyond the log end: lag clamps at 0
    assert s.window(C, G, T, 0) == [
        WindowEntry(100, 1, 1000, 1001, None),
        WindowEntry(170, 2, 2000, 2001, 10),
        WindowEntry(200, 3, 3000, 3001, 0),
    ]


def test_full_window_drops_oldest() -> None:
    s = State(intervals=3)
    s.apply_many(commit(10 * i, i) for i in range(1, 6))
    assert offsets_orders(s) == [(30, 3), (40, 4), (50, 5)]
    assert s.partitions_tracked() == 1


def test_older_commit_is_inserted_in_order_with_null_lag() -> None:
    s = State(intervals=4)
    s.apply(sample(1000, 1))
    s.apply(commit(100, 10))
    s.apply(commit(300, 30))
    s.apply(commit(200, 20))
    assert [(e.offset, e.order, e.lag) for e in s.window(C, G, T, 0)] == [
        (100, 10, 900),
        (200, 20, None),
        (300, 30, 700),
    ]


def test_insert_into_full_window_drops_oldest_and_too_old_is_dropped() -> None:
    s = State(intervals=3)
    s.apply_many([commit(100, 10), commit(300, 30), commit(400, 40)])
    s.apply(commit(200, 20))
    assert offsets_orders(s) == [(200, 20), (300, 30), (400, 40)]
    s.apply(commit(50, 5))  # older than every entry of a full window
    assert offsets_orders(s) == [(200, 20), (300, 30), (400, 40)]


def test_replays_are_idempotent() -> None:
    s = State(intervals=5)
    events: list[Event] = [commit(100, 1), sample(500, 10), commit(200, 2), commit(300, 3)]
    s.apply_many(events)
    before = s.window(C, G, T, 0)
    s.drain_changes()
    s.apply_many(events)
    assert s.window(C, G, T, 0) == before
    changes = s.drain_changes()
    assert changes.windows == {} and changes.commit_history == [] and changes.log_end_history == []


def test_min_distance_merges_into_newest_keeping_its_timestamp() -> None:
    s = State(intervals=5, min_distance_ms=1000)
    s.apply(sample(1000, 1))
    s.apply(commit(100, 1, ts=10_000))
    s.apply(commit(150, 2, ts=10_999))  # < 1000 ms later: replaces offset, order, lag
    assert s.window(C, G, T, 0) == [WindowEntry(150, 2, 10_000, 10_001, 850)]
    s.apply(commit(200, 3, ts=11_000))  # exactly 1000 ms later than the kept ts: appended
    assert offsets_orders(s) == [(150, 2), (200, 3)]


def test_min_distance_replay_of_a_merged_commit_changes_nothing() -> None:
    """The audit's case: A merged into B's entry must not come back when A is replayed."""
    s = State(intervals=5, min_distance_ms=5000)
    s.apply(sample(1000, 1))
    a, b = commit(100, 1, ts=10_000), commit(200, 2, ts=11_000)
    s.apply_many([a, b])
    merged = [WindowEntry(200, 2, 10_000, 10_001, 800)]
    assert s.window(C, G, T, 0) == merged
    s.drain_changes()
    s.apply_many([a, b, a])
    assert s.window(C, G, T, 0) == merged
    ch = s.drain_changes()
    assert ch.windows == {} and ch.commit_history == []


def test_min_distance_replay_of_every_absorbed_commit_after_a_late_insert() -> None:
    s = State(intervals=5, min_distance_ms=5000)
    s.apply(sample(1000, 1))
    absorbed = [commit(100, 10, ts=20_000), commit(110, 11, ts=21_000), commit(120, 12, ts=24_999)]
    s.apply_many(absorbed)
    assert s.window(C, G, T, 0) == [WindowEntry(120, 12, 20_000, 20_001, 880)]
    s.apply(commit(50, 5, ts=15_000))  # late and 5 s before the entry after it: a commit of its own
    want = [WindowEntry(50, 5, 15_000, 15_001, None), WindowEntry(120, 12, 20_000, 20_001, 880)]
    assert s.window(C, G, T, 0) == want
    s.apply_many(reversed(absorbed))
    assert s.window(C, G, T, 0) == want


def test_min_distance_drops_a_late_commit_the_entry_after_it_would_have_absorbed() -> None:
    s = State(intervals=5, min_distance_ms=5000)
    s.apply_many([commit(100, 1, ts=1_000), commit(300, 4, ts=20_000)])
    s.apply(commit(250, 3, ts=20_000))  # same time as the newer entry: in order, that one would have merged
    assert offsets_orders(s) == [(100, 1), (300, 4)]
    s.apply(commit(200, 2, ts=15_001))  # 4.999 s before the newer entry: kept, a commit of its own
    assert offsets_orders(s) == [(100, 1), (200, 2), (300, 4)]


def test_min_distance_commit_timed_before_the_newest_entry_is_appended() -> None:
    """Only a commit less than min-distance *after* the newest entry merges (clock stepped back)."""
    s = State(intervals=5, min_distance_ms=5000)
    s.apply_many([commit(100, 1, ts=10_000), commit(200, 2, ts=9_000)])
    assert offsets_orders(s) == [(100, 1), (200, 2)]
    s.apply(commit(100, 1, ts=10_000))  # replay
    assert offsets_orders(s) == [(100, 1), (200, 2)]


def test_offset_deleted_only_when_newer_than_window() -> None:
    s = State()
    s.apply_many([commit(100, 5), commit(100, 6, partition=1)])
    s.apply(OffsetDeleted(C, G, T, 0, 5))  # not newer than the newest commit: ignored
    assert s.group_topics(C, G) == {T: [0, 1]}
    s.apply(OffsetDeleted(C, G, T, 0, 7))
    assert s.group_topics(C, G) == {T: [1]}
    assert s.partitions_tracked() == 1
    assert s.drain_changes().windows[(C, G, T, 0)] is None


def test_offset_tombstone_refuses_replayed_older_commits_and_accepts_newer_ones() -> None:
    s = State()
    s.apply_many([commit(100, 5), commit(100, 1, partition=1)])
    s.apply(OffsetDeleted(C, G, T, 0, 6))
    assert s.group_topics(C, G) == {T: [1]}
    s.drain_changes()
    s.apply(commit(100, 5))  # replay of the commit before the tombstone: refused
    s.apply(commit(90, 4))
    assert s.group_topics(C, G) == {T: [1]}
    assert not s.drain_changes()
    s.apply(commit(120, 7))  # newer than the tombstone: the partition comes back
    assert offsets_orders(s) == [(120, 7)]
    s.apply_many([commit(100, 5), OffsetDeleted(C, G, T, 0, 6), commit(120, 7)])  # replay it all again
    assert offsets_orders(s) == [(120, 7)]
    assert s.partitions_tracked() == 2
    s.apply(OffsetDeleted(C, G, T, 1, 3))  # the tombstone of partition 0 does not cover partition 1
    s.apply(commit(100, 1, partition=1))
    assert s.group_topics(C, G) == {T: [0]}
    s.apply(commit(100, 2, partition=1))  # order 2 < 3: still refused
    s.apply(commit(100, 4, partition=1))
    assert s.group_topics(C, G) == {T: [0, 1]}


def test_offset_tombstone_is_forgotten_once_the_full_window_covers_it() -> None:
    s = State(intervals=2)
    s.apply_many([commit(100, 5), OffsetDeleted(C, G, T, 0, 6), commit(110, 7), commit(120, 8)])
    assert offsets_orders(s) == [(110, 7), (120, 8)]
    s.apply(commit(100, 5))  # older than every entry of the full window: dropped without the tombstone
    assert offsets_orders(s) == [(110, 7), (120, 8)]
    assert s.offset_tombstones(C, G) == {}


def test_group_deleted_refuses_older_replays_and_accepts_newer_commits() -> None:
    s = State()
    s.apply_many([commit(100, 5), commit(110, 6)])
    s.apply(GroupDeleted(C, G, 10))
    assert s.group_topics(C, G) is None
    assert s.groups(C) == []
    s.apply(commit(120, 7))  # replay of an older commit: refused
    assert s.group_topics(C, G) is None
    s.apply(commit(130, 11))
    assert offsets_orders(s) == [(130, 11)]
    ch = s.drain_changes()
    assert ch.tombstones == {(C, G): 10}
    assert entries_of(drained(ch.windows[(C, G, T, 0)])) == [WindowEntry(130, 11, 11000, 11001, None)]


def test_replayed_group_tombstone_leaves_newer_windows() -> None:
    s = State()
    s.apply_many([commit(100, 5, partition=0), commit(100, 20, partition=1)])
    s.apply(GroupDeleted(C, G, 10))
    assert s.group_topics(C, G) == {T: [1]}


def test_group_members_replace_owners_by_order() -> None:
    s = State()
    s.apply(commit(1, 1))
    owner = PartitionOwner(T, 0, "/10.0.0.1", "client-a", "m1")
    s.apply(GroupMembers(C, G, 5, (owner,), "Stable"))
    assert s.owner(C, G, T, 0) == owner
    s.apply(GroupMembers(C, G, 4, (), "Stable"))  # older: ignored
    assert s.owner(C, G, T, 0) == owner
    s.apply(GroupMembers(C, G, 5, (), "Empty"))  # same order: replaces
    assert s.owner(C, G, T, 0) is None
    assert s.drain_changes().members[(C, G)] == GroupMembers(C, G, 5, (), "Empty")


def test_group_members_of_a_cluster_seed_a_resumed_reader() -> None:
    """The daemon hands these to the offsets reader, restored or applied alike."""
    s = State()
    owner = PartitionOwner(T, 0, "/10.0.0.1", "client-a", "m1")
    s.restore_members(GroupMembers(C, G, 5, (owner,), "Stable"))
    s.apply(GroupMembers(C, "other", 7, (), "Empty"))
    assert sorted(s.group_members(C), key=lambda m: m.group) == [
        GroupMembers(C, G, 5, (owner,), "Stable"),
        GroupMembers(C, "other", 7, (), "Empty"),
    ]
    assert s.group_members("no-such-cluster") == []


def test_log_end_samples_keep_newest_and_ignore_stale() -> None:
    s = State(lag_samples=3)
    s.apply_many([sample(10, 1), sample(20, 2), sample(15, 2), sample(30, 3), sample(40, 4)])
    assert s.log_end_samples(C, T, 0) == ([20, 30, 40], [2, 3, 4])
    assert s.latest_log_end(C, T, 0) == 40
    s.apply(sample(50, 4))  # not newer than the newest kept
    assert s.latest_log_end(C, T, 0) == 40
    s.apply(sample(7, 9, partition=2))
    assert s.topic_offsets(C, T) == [40, 0, 7]
    assert s.topics(C) == [T]
    ch = s.drain_changes()
    # the store keeps the coarse tier too: the sample that left the fine one (10 at 1) stays there
    assert ch.log_end[(C, T, 0)] == ([10, 20, 30, 40], [1, 2, 3, 4], None)
    assert ch.log_end_history == [
        (1, C, T, 0, 10),
        (2, C, T, 0, 20),
        (3, C, T, 0, 30),
        (4, C, T, 0, 40),
        (9, C, T, 2, 7),
    ]


def test_topic_deleted_leaves_every_group() -> None:
    s = State()
    s.apply_many([commit(1, 1), commit(1, 2, group="g2"), commit(1, 3, topic="t2"), sample(5, 1)])
    assert s.topic_consumers(C, T) == [G, "g2"]
    s.drain_changes()
    s.apply(TopicDeleted(C, T))
    assert s.group_topics(C, G) == {"t2": [0]}
    assert s.group_topics(C, "g2") == {}
    assert s.topic_consumers(C, T) == []
    assert s.topic_offsets(C, T) is None
    ch = s.drain_changes()
    assert ch.windows == {(C, G, T, 0): None, (C, "g2", T, 0): None}
    assert ch.log_end == {(C, T, 0): None}


def test_expiry_and_operator_removal() -> None:
    s = State(expire_group_ms=10_000)
    s.apply_many([commit(1, 1, ts=1_000), commit(1, 2, ts=20_000, group="g2"), commit(1, 3, ts=20_000, group="g3")])
    assert s.expire_groups(20_000) == [(C, G)]
    assert s.groups(C) == ["g2", "g3"]
    assert s.remove_group(C, "g2") is True
    assert s.remove_group(C, "g2") is False
    assert s.remove_group_topic(C, "g3", T) is True
    assert s.remove_group_topic(C, "g3", T) is False
    assert s.group_topics(C, "g3") == {}
    assert s.partitions_tracked() == 0


def test_reader_positions_and_history_rows() -> None:
    s = State()
    s.apply(sample(500, 1))
    s.apply(commit(100, 2))
    s.apply(ReaderPosition(C, 3, 42))
    ch = s.drain_changes()
    assert ch.positions == {(C, 3): 42}
    assert ch.commit_history == [(2000, C, G, T, 0, 100, 400, 2001)]
    assert not s.drain_changes()


def test_no_history_when_disabled() -> None:
    s = State(record_history=False)
    s.apply_many([sample(500, 1), commit(100, 2)])
    ch = s.drain_changes()
    assert ch.commit_history == [] and ch.log_end_history == []
    assert list(ch.windows) == [(C, G, T, 0)]


def test_group_version_grows_on_commits_samples_and_removals() -> None:
    s = State()
    s.apply_many([commit(1, 1), commit(1, 1, group="g2", topic="t2")])
    v0 = s.group_version(C, G)
    s.apply(commit(1, 1, group="g2", topic="t2"))  # replay elsewhere: no change
    assert s.group_version(C, G) == v0
    s.apply(sample(9, 1, topic="t2"))  # another topic
    assert s.group_version(C, G) == v0
    s.apply(sample(9, 1))
    v1 = s.group_version(C, G)
    assert v1 > v0
    s.apply(commit(2, 2))
    v2 = s.group_version(C, G)
    assert v2 > v1
    s.apply(commit(5, 5, topic="t3"))
    s.remove_group_topic(C, G, "t3")
    assert s.group_version(C, G) > v2


def test_restore_records_no_changes_and_keeps_newest() -> None:
    s = State(intervals=2)
    s.restore_window(
        (C, G, T, 0), [WindowEntry(3, 3, 30, 31, None), WindowEntry(1, 1, 10, 11, 5), WindowEntry(2, 2, 20, 21, 4)]
    )
    s.restore_log_end((C, T, 0), [10, 20], [1, 2])
    s.restore_members(GroupMembers(C, G, 1, (PartitionOwner(T, 0, "h", "cid"),)))
    s.restore_tombstone(C, "old", 7)
    assert offsets_orders(s) == [(2, 2), (3, 3)]
    assert s.last_commit(C, G) == 30
    assert s.owner(C, G, T, 0) == PartitionOwner(T, 0, "h", "cid")
    assert not s.drain_changes()
    s.apply(commit(5, 6, group="old"))  # below the restored tombstone
    assert s.group_topics(C, "old") is None
    s.apply(commit(4, 4))
    assert s.window(C, G, T, 0)[-1].lag == 16


@pytest.mark.parametrize(
    "entries",
    [
        [WindowEntry(1, 1, 10, 11, 5), WindowEntry(2, 2, 20, 21, None), WindowEntry(3, 3, 30, 31, 4)],  # as stored
        [WindowEntry(3, 3, 30, 31, None), WindowEntry(1, 1, 10, 11, 5), WindowEntry(2, 2, 40, 21, 4)],  # out of order
        [WindowEntry(7, 9, 70, 71, 0)],
    ],
)
def test_a_stored_flat_window_restores_as_its_entries_do(entries: list[WindowEntry]) -> None:
    """restore_flat takes the stored array as it is when in order (the fast path) and goes
    through restore_window otherwise: either way the same window, newest kept, last commit."""
    flat, slow = State(intervals=2), State(intervals=2)
    flat.restore_flat((C, G, T, 0), flat_window(entries))
    slow.restore_window((C, G, T, 0), entries)
    assert flat.window(C, G, T, 0) == slow.window(C, G, T, 0) and len(flat.window(C, G, T, 0)) == min(2, len(entries))
    assert flat.last_commit(C, G) == slow.last_commit(C, G)
    assert flat.partitions_tracked() == 1 and not flat.drain_changes()
    flat.restore_flat((C, G, T, 1), array("q"))  # nothing stored: nothing restored
    assert flat.partitions_tracked() == 1


def test_reads_of_unknown_things() -> None:
    s = State()
    assert s.clusters() == [] and s.groups(C) == [] and s.topics(C) == []
    assert s.window(C, G, T, 0) == [] and s.owner(C, G, T, 0) is None and s.last_commit(C, G) is None
    assert s.log_end_samples(C, T, 0) == ([], []) and s.latest_log_end(C, T, 0) is None
    assert s.group_topics(C, G) is None and s.topic_consumers(C, T) == []


@given(st.data(), st.integers(1, 6), st.sampled_from([0, 1000, 5000]))
def test_window_is_the_newest_orders_sorted_and_replays_change_nothing(
    data: st.DataObject, intervals: int, min_distance: int
) -> None:
    """Whatever the arrival order and min-distance, a window holds distinct orders, ascending,
    at most `intervals`, the newest order last; replaying already-applied commits at any point,
    in any order, changes nothing (timestamps need not grow with the order)."""
    by_order = data.draw(
        st.dictionaries(st.integers(0, 40), st.tuples(st.integers(0, 1000), st.integers(0, 20_000)), max_size=30)
    )
    events = data.draw(st.permutations([commit(o, r, ts) for r, (o, ts) in by_order.items()]))
    with_replays: list[Commit] = []
    for ev in events:
        with_replays.append(ev)
        with_replays += data.draw(st.lists(st.sampled_from(with_replays), max_size=3))
    plain = State(intervals=intervals, min_distance_ms=min_distance)
    replayed = State(intervals=intervals, min_distance_ms=min_distance)
    for s in (plain, replayed):
        s.apply(sample(500, 0))
    plain.apply_many(events)
    replayed.apply_many(with_replays)
    win = plain.window(C, G, T, 0)
    orders = [e.order for e in win]
    assert orders == sorted(set(orders)) and len(win) <= intervals
    if by_order:
        assert orders[-1] == max(by_order)
    assert replayed.window(C, G, T, 0) == win
    plain.drain_changes()
    plain.apply_many(data.draw(st.lists(st.sampled_from(events), max_size=40)) if events else [])
    assert plain.window(C, G, T, 0) == win
    assert not plain.drain_changes().windows


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 3)), max_size=40), st.integers(1, 8))
def test_kept_run_start_matches_a_scan(samples: list[tuple[int, int]], keep: int) -> None:
    """State tracks where the newest non-decreasing run of log-end offsets starts, as lag-in-time expects."""
    s = State(lag_samples=keep)
    t = 0
    for offset, gap in samples:
        t += gap
        s.apply(sample(offset, t))
    le = s.topic_log_ends(C, T).get(0)
    if le is not None:
        assert le.run_start == run_start(le.offsets)
        assert len(le.offsets) <= keep


def test_out_of_range_numbers_are_refused_before_anything_changes() -> None:
    """A commit at offset -2^63 (or past int64) used to leave a broken window and overflow the
    lag; it is refused whole, and the state stays as it was."""
    s = State()
    s.apply(sample(100, 1))
    s.apply(commit(10, 1))
    for bad in (commit(-(2**63), 2), commit(2**63, 3), commit(5, 2**63), sample(-1, 5), sample(2**63, 6)):
        with pytest.raises(ValueError, match=r"outside int64"):
            s.apply(bad)
    assert offsets_orders(s) == [(10, 1)]
    assert s.partitions_tracked() == 1 and s.groups(C) == [G]
    assert s.log_end_samples(C, T, 0) == ([100], [1])


def test_commit_history_rows_in_columns_behave_like_the_list_of_tuples() -> None:
    """CommitRows (lagd.state.history) replaces a list of tuples: same rows in, same rows out."""
    from lagd.state.history import CommitRows

    rows = [(1000 + i, "c", f"g{i % 3}", "t", i % 4, 10 * i, None if i % 5 == 0 else i, 2000 + i) for i in range(12)]
    cols = CommitRows(rows)
    assert len(cols) == 12 and cols == rows and list(cols) == rows
    assert cols[3] == rows[3] and cols[-1] == rows[-1] and cols[2:5] == rows[2:5]
    assert cols.rows(10, 99) == rows[10:]
    more = CommitRows()
    more += rows[:2]
    more.extend(cols)
    assert more == rows[:2] + rows
    del more[:5]
    assert more == (rows[:2] + rows)[5:]
    assert cols.keep(lambda c, g: g != "g1") == [r for r in rows if r[2] != "g1"]
    with pytest.raises(TypeError):
        del more[3:4]
    with pytest.raises(IndexError):
        cols[12]


def test_a_drain_in_slices_writes_no_window_older_than_its_positions() -> None:
    """The persister copies changed windows a slice at a time while apply goes on: a window
    changed between slices is taken as it then stands and drained again next time; the
    history rows and positions are those of the drain's start."""
    s = State(intervals=5)
    s.apply_many([commit(100, 1, partition=p) for p in range(4)])
    s.apply(ReaderPosition(C, 0, 10))
    drain = s.start_drain()
    assert len(drain) == 4
    assert not drain.step(1)
    s.apply_many([commit(200, 2, partition=p) for p in range(4)])  # apply between slices
    assert drain.step(10) and len(drain) == 0
    first = drain.changes
    assert first.positions == {(C, 0): 10}
    assert sorted(r[5] for r in first.commit_history) == [100] * 4
    newest = {key[3]: entries_of(drained(data))[-1].offset for key, data in first.windows.items()}
    assert set(newest) == {0, 1, 2, 3}
    assert sorted(newest.values()) == [100, 200, 200, 200]  # one was copied before the second apply
    second = s.drain_changes()
    assert {key[3] for key in second.windows} == {0, 1, 2, 3}  # every one changed again: drained again
    assert sorted(r[5] for r in second.commit_history) == [200] * 4
    assert all(entries_of(drained(data))[-1].offset == 200 for data in second.windows.values())


def test_log_end_samples_are_drained_in_slices_after_the_windows() -> None:
    """A partition's log-end samples cost LOG_END_WEIGHT windows of a drain's work: a thousand of
    them are copied a slice at a time, after the windows, each as it stands when its step comes
    (a sample added between slices is in it, and drained again next time)."""
    s = State(intervals=5)
    s.apply_many([commit(100, 1, partition=p) for p in range(3)])
    s.apply_many([sample(10, 1, partition=p) for p in range(1_000)])
    drain = s.start_drain()
    assert len(drain) == 3 + LOG_END_WEIGHT * 1_000 and drain.rows_left == 1_003
    assert not drain.step(3 + 10 * LOG_END_WEIGHT)  # the windows, then ten partitions' samples
    assert len(drain.changes.windows) == 3 and len(drain.changes.log_end) == 10
    assert not drain.step(1)  # always some progress: one partition's samples
    assert len(drain.changes.log_end) == 11
    s.apply_many([sample(20, 2, partition=p) for p in range(1_000)])  # the sampler goes on between slices
    assert drain.step(len(drain)) and len(drain) == 0
    got = drain.changes.log_end
    assert len(got) == 1_000
    assert sum(1 for offsets, _, _ in got.values() if offsets == [10]) == 11  # copied before the new samples
    assert sum(1 for offsets, _, _ in got.values() if offsets == [10, 20]) == 989
    assert len(s.drain_changes().log_end) == 1_000  # each changed again: drained again


def test_a_window_removed_between_slices_is_drained_as_removed() -> None:
    s = State(intervals=5)
    s.apply_many([commit(100, 1, partition=p) for p in range(2)])
    drain = s.start_drain()
    s.apply(GroupDeleted(C, G, 5))
    assert drain.step(10)
    assert drain.changes.windows == {(C, G, T, 0): None, (C, G, T, 1): None}
