"""The compiled apply of the usual commit (lagd/state/apply.py, compiled by Cython) changes the state exactly as
`State._commit` does, or leaves the event to it: random streams of commits (in order, replayed,
late, duplicated, close together, past int64), offset and group tombstones, log-end samples and
positions, under every window setting (intervals, min-distance, window-step, history on and
off), are applied both ways and must leave the same state to the last field: windows, times,
change counters, dirty windows and history rows.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the compiled code.
"""

from __future__ import annotations

import dataclasses
import gc
import random
from array import array
from typing import Any

import pytest

from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    IngestCounters,
    LogEndSample,
    OffsetDeleted,
    ReaderPosition,
)
from lagd.core.ruleset import lagd_rules
from lagd.state import windows
from lagd.state.guard import PoisonLog, apply_guarded
from lagd.state.pauses import PauseSettings
from lagd.state.windows import State
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions

APPLY = windows._apply_commits
needs_c = pytest.mark.skipif(APPLY is None, reason="no C compiler here: lagd applies every commit in Python")
T0 = 1_700_000_000_000


def test_the_compiled_apply_is_built_where_it_can_be() -> None:
    assert not can_compile() or APPLY is not None, (
        "a C compiler and Python's headers are here but lagd.state._apply_c (apply.py compiled) is not "
        f"importable: {REINSTALL}"
    )


def test_lagd_no_extensions_applies_in_python() -> None:
    code = "from lagd.state import windows; print(windows._apply_commits is None, windows._drain_windows is None)"
    assert printed_without_extensions(code) == "True True"


def _plain(value: Any) -> Any:
    """The state's objects as plain values, to compare two states field by field."""
    if isinstance(value, array):
        return (value.typecode, value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, set):
        return sorted(value, key=repr)
    return value


def _dump(state: State) -> Any:
    history = state._changes.commit_history
    return (
        _plain(state._clusters),
        state._seq,
        state._tracked,
        sorted(state._dirty_windows, key=repr),
        {name: _plain(getattr(history, name)) for name in history.__slots__},
    )


def _stream(rng: random.Random, n: int) -> list[Event]:
    """Commits of 2 clusters x 8 groups x 2 topics x 3 partitions, mostly in order, with the
    other events among them (tombstones and odd commits rare: a batch holding an odd one is
    applied again event by event, in Python, by apply_guarded)."""
    events: list[Event] = []
    order = 0
    clock = T0
    for _ in range(n):
        order += rng.choice([1, 1, 1, 2, 5])
        clock += rng.choice([0, 1, 500, 2_000, 10_000, 30_000, 61_000])
        cluster, group = rng.choice(["c1", "c2"]), rng.choice([f"g{k}" for k in range(8)])
        topic, partition = rng.choice(["t1", "t2"]), rng.randrange(3)
        roll = rng.random()
        if roll < 0.72:
            events.append(Commit(cluster, group, topic, partition, rng.randrange(10_000), order, clock, clock + 5))
        elif roll < 0.80 and events:
            events.append(rng.choice(events))  # a replay of anything seen
        elif roll < 0.84:
            late = order - rng.randrange(1, 30)
            events.append(Commit(cluster, group, topic, partition, rng.randrange(10_000), late, clock - 40_000, clock))
        elif roll < 0.90:
            events.append(LogEndSample(cluster, topic, partition, rng.randrange(12_000), clock))
        elif roll < 0.903:
            events.append(OffsetDeleted(cluster, group, topic, partition, order))
        elif roll < 0.905:
            events.append(GroupDeleted(cluster, group, order))
        elif roll < 0.998:
            events.append(ReaderPosition(cluster, rng.randrange(4), order))
        else:  # past what a window holds, or odd: State._commit refuses them (ValueError)
            odd = rng.choice([(-1, order, clock), (2**63, order, clock), (5, 2**63, clock), (5, order, -(2**64))])
            events.append(Commit(cluster, group, topic, partition, odd[0], odd[1], odd[2], clock))
            if rng.random() < 0.3:  # a partition CommitRows cannot keep (int32): its add refuses it
                events.append(Commit(cluster, group, topic, 2**31, 5, order, clock, clock))
    return events


def _apply(events: list[Event], settings: dict[str, Any], chunks: list[int]) -> Any:
    """Apply in these chunks, draining now and then in random steps (as the persister does)."""
    state = State(**settings)
    counters = {"c1": IngestCounters(), "c2": IngestCounters()}
    poison = PoisonLog()
    rng = random.Random(len(chunks))
    drained = []
    i = 0
    for size in chunks:
        apply_guarded(state, events[i : i + size], counters, poison)
        i += size
        if rng.random() < 0.2:
            drain = state.start_drain()
            while not drain.step(rng.choice([1, 2, 7, 100])):
                pass
            drained.append(drain.changes.windows)
    return _dump(state), poison.skipped, {c: dataclasses.asdict(v) for c, v in counters.items()}, drained


SETTINGS = [
    {"intervals": 10},
    {"intervals": 1},
    {"intervals": 2, "min_distance_ms": 5_000},
    {"intervals": 3, "rules": lagd_rules(30_000)},
    {"intervals": 10, "rules": lagd_rules(30_000), "min_distance_ms": 1_000},
    {"intervals": 5, "record_history": False},
    {"intervals": 4, "min_distance_ms": 2**62, "rules": lagd_rules(-5)},
]


@needs_c
@pytest.mark.parametrize("settings", SETTINGS, ids=[repr(s) for s in SETTINGS])
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_apply_changes_the_state_as_the_python(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    events = _stream(rng, 2_500)
    chunks = []
    left = len(events)
    while left:
        chunks.append(min(left, rng.choice([1, 3, 50, 200])))
        left -= chunks[-1]
    applied_by_c = 0

    def counting(*args: Any) -> int:
        nonlocal applied_by_c
        assert APPLY is not None
        stop: int = APPLY(*args)
        applied_by_c += stop - args[3]
        return stop

    monkeypatch.setattr(windows, "_apply_commits", counting)
    fast = _apply(events, settings, chunks)
    monkeypatch.setattr(windows, "_apply_commits", None)
    monkeypatch.setattr(windows, "_drain_windows", None)
    slow = _apply(events, settings, chunks)
    assert fast == slow
    assert fast[1] > 0  # the odd commits were refused and counted both ways
    assert applied_by_c > len(events) // 4


@needs_c
def test_a_steady_stream_is_applied_by_the_c_alone() -> None:
    """Once each window holds a commit, every newer one is the C's, growing the window up to
    `intervals` entries and sliding it after; the window and history are the Python's."""
    assert APPLY is not None
    fast, slow = State(intervals=3), State(intervals=3)
    first = [Commit("c", "g", "t", p, 0, p, T0, T0) for p in range(2)]
    fast.apply_many(list(first))
    slow.apply_many(list(first))
    later = [Commit("c", "g", "t", k % 2, k, 10 + k, T0 + 60_000 * k, T0 + 60_000 * k) for k in range(20)]
    later.insert(7, LogEndSample("c", "t", 1, 50, T0 + 400_000))
    assert APPLY(fast, fast._clusters, later, 0, Commit, 3, 0, 0, True) == 7  # up to the sample
    fast.apply(later[7])
    assert APPLY(fast, fast._clusters, later, 8, Commit, 3, 0, 0, True) == len(later)
    for event in later:
        slow.apply(event)
    assert _dump(fast) == _dump(slow)
    assert fast.window("c", "g", "t", 1) is not None and len(fast._clusters["c"].groups["g"].windows["t"][1]) == 15


@needs_c
def test_apply_commits_refuses_what_it_cannot_apply() -> None:
    assert APPLY is not None
    state = State()
    good: list[Any] = [state, state._clusters, [], 0, Commit, 10, 0, 0, True]
    assert APPLY(*good) == 0
    with pytest.raises(TypeError):
        APPLY(*good[:8])
    for index, bad in [(1, []), (2, ()), (4, dict), (4, 3), (5, 1.5), (6, "0"), (6, 2**64)]:
        args = list(good)
        args[index] = bad
        with pytest.raises((TypeError, OverflowError)):
            APPLY(*args)
    for index, bad in [(3, -1), (5, 0)]:
        args = list(good)
        args[index] = bad
        with pytest.raises(ValueError):
            APPLY(*args)


@needs_c
def test_settings_the_c_cannot_hold_leave_every_commit_to_the_python() -> None:
    state = State(min_distance_ms=2**64)
    assert state._compiled_apply() is None
    state.apply_many([Commit("c", "g", "t", 0, 1, 1, T0, T0), Commit("c", "g", "t", 0, 2, 2, T0 + 1, T0 + 1)])
    assert len(state._clusters["c"].groups["g"].windows["t"][0]) == 5  # min-distance merged them


@needs_c
def test_history_columns_of_another_layout_leave_every_commit_to_the_python() -> None:
    """The C writes history rows straight into CommitRows' columns (arrays 'q' and 'i', lists):
    where they are not those, it applies nothing and the Python does."""
    assert APPLY is not None
    state = State()
    state.apply_many([Commit("c", "g", "t", 0, 1, 1, T0, T0)])
    state._changes.commit_history.partition = array("q", state._changes.commit_history.partition)
    later = [Commit("c", "g", "t", 0, 2, 2, T0 + 60_000, T0 + 60_000)]
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, True) == 0
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, False) == 1  # no history: nothing to write


@needs_c
def test_a_partition_past_int32_is_left_to_the_python_where_history_is_kept() -> None:
    """CommitRows keeps partitions as int32 and its add refuses others; such a window (restored,
    say) gets its commits from the Python, which refuses them as before."""
    assert APPLY is not None
    state = State()
    state.apply_many([Commit("c", "g", "t", 0, 1, 1, T0, T0)])
    big = 2**31
    state._clusters["c"].groups["g"].windows["t"][big] = array("q", [1, 1, T0, T0, windows.NO_LAG])
    later = [Commit("c", "g", "t", big, 2, 2, T0 + 60_000, T0 + 60_000)]
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, True) == 0
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, False) == 1


DRAIN = windows._drain_windows


@needs_c
def test_the_compiled_drain_copies_windows_as_window_bytes() -> None:
    """Every kind of key: a window, a partition, topic, group or cluster the state no longer
    holds (None), a window of another array type and a key of another shape (the Python's)."""
    assert DRAIN is not None
    state = State()
    state.apply_many([Commit("c", "g", "t", p, 10 * p, p + 1, T0 + p, T0 + p) for p in range(3)])
    state.apply_many([Commit("c", "g", "t", 0, 99, 9, T0 + 60_000, T0 + 60_000)])
    state._clusters["c"].groups["g"].windows["t"][2] = array("l", [1, 2, 3, 4, 5])  # 8 bytes too, format "l"
    state._clusters["c"].groups["h"] = windows._Group(windows={"t": {}})
    keys = [("c", "g", "t", 0), ("c", "g", "t", 1), ("c", "g", "t", 2), ("c", "g", "t", 5), ("c", "g", "u", 0)]
    keys += [("c", "h", "t", 0), ("c", "nobody", "t", 0), ("d", "g", "t", 0)]
    for order in (keys, keys[::-1]):
        fast_drain = windows.Drain(state, windows.Changes(), list(order))
        while not fast_drain.step(3):
            pass
        expected = {k: (windows.window_bytes(a) if (a := state._window_array(*k)) is not None else None) for k in order}
        assert fast_drain.changes.windows == expected
        # keys listed a step (3) at a time, each step's popped from the end, as the Python does
        assert list(fast_drain.changes.windows) == [k for i in range(0, len(order), 3) for k in order[i : i + 3][::-1]]
    left = list(keys)
    out: dict[Any, Any] = {}
    assert DRAIN(state._clusters, left, out, 3) == 3 and len(left) == 5  # up to the key it leaves to the Python
    assert DRAIN(state._clusters, left, out, 9) == 2 and left[-1] == ("c", "g", "t", 2)
    odd: list[Any] = [("c", "g", "t"), "not a key"]
    assert DRAIN(state._clusters, odd, out, 5) == 0 and len(odd) == 2
    with pytest.raises(TypeError):
        DRAIN(state._clusters, (), out, 1)


def _one_window(**settings: Any) -> State:
    state = State(**settings)
    state.apply_many([Commit("c", "g", "t", 0, 1, 1, T0, T0)])
    return state


@needs_c
def test_a_negative_kept_log_end_gives_no_lag_below_zero() -> None:
    """A log end restored from a corrupt row may be negative: the lag is 0, as the Python says,
    not a difference wrapped around (found by a review, under UBSan)."""
    assert APPLY is not None
    fast, slow = _one_window(), _one_window()
    for state in (fast, slow):
        state._clusters["c"].log_end["t"] = {0: windows.LogEnd(array("q", [-(2**63)]), array("q", [T0]))}
    later = [Commit("c", "g", "t", 0, 7, 2, T0 + 60_000, T0 + 60_000)]
    assert APPLY(fast, fast._clusters, later, 0, Commit, 10, 0, 0, True) == 1
    slow.apply(later[0])
    assert _dump(fast) == _dump(slow) and fast._clusters["c"].groups["g"].windows["t"][0][-1] == 0
    # a log end one short of the commit: 0 too; none kept (None): no lag, applied by the C all the same
    for newest, lag in ((6, 0), (None, windows.NO_LAG)):
        fast, slow = _one_window(), _one_window()
        for state in (fast, slow):
            kept = None if newest is None else windows.LogEnd(array("q", [newest]), array("q", [T0]))
            state._clusters["c"].log_end["t"] = {0: kept}  # type: ignore[dict-item]
        assert APPLY(fast, fast._clusters, later, 0, Commit, 10, 0, 0, True) == 1
        slow.apply(later[0])
        assert _dump(fast) == _dump(slow) and fast._clusters["c"].groups["g"].windows["t"][0][-1] == lag


@needs_c
def test_python_code_run_by_a_lookup_cannot_free_what_the_c_reads() -> None:
    """A key whose comparison drops the dict being searched (a hostile state): the C holds the
    dicts it searches, so it returns or raises, and never reads freed memory (found by a review)."""
    assert APPLY is not None

    holder: dict[str, Any] = {}

    class Evil(int):
        def __hash__(self) -> int:
            return hash(0)

        def __eq__(self, other: object) -> bool:
            gone = holder.pop("t", None)  # the state's last reference to the dict being searched
            if gone is not None:
                gone.clear()
            return False

    for kind in ("log_end", "windows"):
        state = _one_window()
        state.apply(LogEndSample("c", "t", 0, 50, T0))
        cs = state._clusters["c"]
        holder = cs.log_end if kind == "log_end" else cs.groups["g"].windows
        searched = holder["t"]  # what a lookup of partition 0 searches: an entry of 0's hash comes first
        searched[Evil(5)] = searched.pop(0)
        searched[0] = windows.LogEnd() if kind == "log_end" else array("q", [1, 1, T0, T0, windows.NO_LAG])
        del searched
        later = [Commit("c", "g", "t", 0, 7, 2, T0 + 60_000, T0 + 60_000)]
        try:
            APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, True)
        except Exception:
            pass  # raising is fine; reading freed memory is not
    odd = Commit("c", "g", "t", True, 7, 3, T0 + 60_000, T0 + 60_000)  # a partition not an int: the Python's
    assert APPLY(_one_window(), _one_window()._clusters, [odd], 0, Commit, 10, 0, 0, True) == 0


@needs_c
def test_state_of_other_types_leaves_the_commit_to_the_python() -> None:
    assert APPLY is not None
    later = [Commit("c", "g", "t", 0, 7, 2, T0 + 60_000, T0 + 60_000)]
    state = _one_window()
    state._dirty_windows = list(state._dirty_windows)  # type: ignore[assignment]
    window = list(state._clusters["c"].groups["g"].windows["t"][0])
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, True) == 0
    assert list(state._clusters["c"].groups["g"].windows["t"][0]) == window  # nothing half done
    state = _one_window()
    state._seq = 1.5  # type: ignore[assignment]
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 0, True) == 0
    assert list(state._clusters["c"].groups["g"].windows["t"][0]) == window


@needs_c
def test_the_changed_windows_stay_out_of_the_collectors_sight() -> None:
    """The keys of changed windows, and the drained windows keyed by them, are in containers the
    cyclic collector does not track: at 1M group-partitions hundreds of thousands of them wait for
    Postgres, and a tracked set and dict of them made every full collection walk them all."""
    state = State()
    state.apply_many([Commit("c", f"g{g}", "t", p, 10, 1 + p, T0 + p, T0 + p) for g in range(20) for p in range(5)])
    assert len(state.drain_changes().windows) == 100  # windows made (by the Python), then written
    later = 1_000 + T0
    state.apply_many([Commit("c", f"g{g}", "t", p, 20, 10 + p, later + p, later) for g in range(20) for p in range(5)])
    assert len(state._dirty_windows) == 100
    assert not gc.is_tracked(state._dirty_windows)
    assert not any(gc.is_tracked(k) for k in state._dirty_windows)
    drain = state.start_drain()
    while not drain.step(7):
        assert 0 < drain.rows_left < 100
    assert len(drain.changes.windows) == 100 and not gc.is_tracked(drain.changes.windows)
    assert drain.rows_left == 0 and len(drain) == 0
    # a key of another shape (a str subclass) is the Python's: tracked as any tuple, and drained alike
    state.apply_many([Commit("c", type("Name", (str,), {})("odd"), "t", 0, 10, 200, T0, T0)])
    assert len(state.drain_changes().windows) == 1


@needs_c
@pytest.mark.parametrize("seed", range(3))
def test_with_pause_settings_the_compiled_apply_changes_the_state_as_the_python(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """With pauses recorded (lagd.state.pauses), a commit after a long group silence goes to the
    Python, which keeps the pause: both ways end in the same state, pauses included."""
    rng = random.Random(seed)
    events = _stream(rng, 2_500)
    settings: dict[str, Any] = {"intervals": 10, "rules": lagd_rules(15_000), "pauses": PauseSettings()}
    fast = _apply(events, settings, [200] * 13)
    monkeypatch.setattr(windows, "_apply_commits", None)
    monkeypatch.setattr(windows, "_drain_windows", None)
    slow = _apply(events, settings, [200] * 13)
    assert fast == slow


@needs_c
def test_a_commit_after_a_pause_is_handed_back_and_the_pause_kept() -> None:
    """Commits 1 s apart are the C's; the first after 45 s of silence is the Python's, which
    keeps the 46 s pause; applying it again adds nothing."""
    assert APPLY is not None
    state = State(intervals=10, rules=lagd_rules(15_000), pauses=PauseSettings())
    state.apply_many([Commit("c", "g", "t", 0, 0, 0, T0, T0)])
    steady = [Commit("c", "g", "t", 0, k, k, T0 + 1_000 * k, T0 + 1_000 * k) for k in range(1, 20)]
    after = Commit("c", "g", "t", 0, 20, 20, T0 + 65_000, T0 + 65_000)
    assert APPLY(state, state._clusters, [*steady, after], 0, Commit, 10, 0, 15_000, True) == len(steady)
    state.apply_many([after])
    assert state.group_pauses("c", "g") == (T0, T0 + 65_000, 46_000)
    state.apply_many([after])
    assert state.group_pauses("c", "g") == (T0, T0 + 65_000, 46_000)


@needs_c
def test_a_checkpointing_consumer_stays_with_the_c() -> None:
    """Commits 60 s apart: each silence is one commit interval, no pause, so the C applies them."""
    assert APPLY is not None
    state = State(intervals=10, rules=lagd_rules(15_000), pauses=PauseSettings())
    state.apply_many([Commit("c", "g", "t", 0, k, k, T0 + 60_000 * k, T0 + 60_000 * k) for k in range(2)])
    later = [Commit("c", "g", "t", 0, k, k, T0 + 60_000 * k, T0 + 60_000 * k) for k in range(2, 12)]
    assert APPLY(state, state._clusters, later, 0, Commit, 10, 0, 15_000, True) == len(later)
    assert state.group_pauses("c", "g") == (T0,)
