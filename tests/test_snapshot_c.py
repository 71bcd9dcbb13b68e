"""The compiled loop of a group snapshot over its partitions (_trend.c: snapshot_rows) reads what
the Python reads (snapshot._read), or leaves the partitions to it: random verdicts (every status,
several topics in and out of order, empty and short windows, completes of every kind of float,
lags at int64's edges, estimated lags in seconds) are read both ways and compared, and each kind of
unusual field is shown to be the Python's.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
from array import array
from typing import Any

import pytest

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.evaluate import GroupVerdict, PartitionVerdict, snapshot
from lagd.state.layout import FIELDS, OFFSET
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions, verdict

needs_c = pytest.mark.skipif(
    snapshot._snapshot_rows is None, reason="no C compiler here: lagd reads the partitions in Python"
)
I64 = 2**63


def test_the_compiled_loop_is_built_where_it_can_be() -> None:
    assert not can_compile() or snapshot._snapshot_rows is not None, (
        f"a C compiler and Python's headers are here but lagd.evaluate._trend is not importable: {REINSTALL}"
    )


def test_lagd_no_extensions_reads_in_python() -> None:
    code = "from lagd.evaluate import snapshot; print(snapshot._snapshot_rows)"
    assert printed_without_extensions(code) == "None"


def random_verdict(rnd: random.Random) -> PartitionVerdict:
    entries = None if rnd.random() < 0.15 else array("q", [rnd.randrange(-I64, I64) for _ in range(2 * FIELDS)])
    return verdict(
        topic=rnd.choice(["orders", "payments", "ü-topic", "", "a" * 40]),
        partition=rnd.choice([0, 1, 7, 2**31, I64 - 1, -1]),
        status=rnd.choice(list(PartitionStatus)),
        entries=entries,
        current_lag=rnd.choice([0, 1, -1, 10**12, I64 - 1, -I64]),
        complete=rnd.choice([1.0, 0.0, 0.5, 0.9999999999999999, 1.0000000000000002, math.nan, -0.0]),
        lag_seconds=rnd.choice([0.0, -0.0, 1.5, 1e300, math.inf, math.nan, rnd.random()]),
        lag_seconds_estimated=rnd.random() < 0.3,
    )


def same(a: snapshot._Read, b: snapshot._Read) -> bool:
    """Equal reads, NaNs equal where they stand at the same place (rows and seconds are bytes: bit for bit)."""
    return a == b


@needs_c
@pytest.mark.parametrize("partitions", [True, False])
def test_random_verdicts_are_read_as_the_python_reads_them(partitions: bool) -> None:
    rnd = random.Random(29)
    for _ in range(400):
        parts = [random_verdict(rnd) for _ in range(rnd.randrange(8))]
        if rnd.random() < 0.5:
            parts.sort(key=lambda p: (p.topic, p.partition))  # as verdicts come
        read = snapshot._read_compiled(parts, partitions)
        assert read is not None, "every field here is of the usual type: the C must read them"
        assert same(read, snapshot._read(parts, partitions))


@needs_c
def test_a_snapshot_of_a_group_holds_its_partitions_rows() -> None:
    parts = [
        verdict(topic="b", partition=0, status=PartitionStatus.OK, current_lag=0),
        verdict(topic="b", partition=1, status=PartitionStatus.STOP, current_lag=9, lag_seconds_estimated=True),
        verdict(topic="a", partition=0, status=PartitionStatus.WARN, complete=0.5, lag_seconds=2.0),
        verdict(topic="a", partition=1, status=PartitionStatus.WARN, entries=None),
    ]
    v = GroupVerdict("c", "g", GroupStatus.ERR, 0.5, parts, 4, parts[1], 25, 3.0, 1000)
    snap = snapshot.snapshot_of(v)
    entries = verdict().entries
    assert entries is not None
    newest = entries[FIELDS + OFFSET]
    assert snap.topics == ("b", "a")
    assert list(snap.partition_values()) == [
        (0, 0, 0, newest, PartitionStatus.OK, 1.5),
        (0, 1, 9, newest, PartitionStatus.STOP, 1.5),
        (1, 0, 7, -1, PartitionStatus.WARN, 2.0),  # the window not full: no offset, as Burrow
        (1, 1, 7, -1, PartitionStatus.WARN, 1.5),
    ]
    assert snap.not_ok == ("STOP", "WARN") and snap.lag_seconds_bound
    assert snapshot.snapshot_of(v, partitions=False).rows is None


class Topic(str):
    pass


class Slower(PartitionVerdict):
    """A verdict whose fields may be read through Python code."""


class ArrayLike(array):  # type: ignore[type-arg]
    pass


class Listed(list[Any]):
    pass


UNUSUAL: list[tuple[str, Any]] = [
    ("a str subclass as topic", lambda: verdict(topic=Topic("orders"))),
    ("a partition past int64", lambda: verdict(partition=I64)),
    ("a lag past int64", lambda: verdict(current_lag=-I64 - 1)),
    ("a bool as partition", lambda: verdict(partition=True)),
    ("an int as complete", lambda: verdict(complete=1)),
    ("an int as lag in seconds", lambda: verdict(lag_seconds=2)),
    ("an int as estimated", lambda: verdict(lag_seconds_estimated=1)),
    ("a status that is no PartitionStatus", lambda: verdict(status="WARN")),
    ("entries of an array subclass", lambda: verdict(entries=ArrayLike("q", range(2 * FIELDS)))),
    ("entries as a list", lambda: verdict(entries=list(range(2 * FIELDS)))),
    ("entries of int32", lambda: verdict(entries=array("i", range(2 * FIELDS)))),
    ("a subclass of PartitionVerdict", lambda: Slower(**dataclasses.asdict(verdict()))),
]


@needs_c
@pytest.mark.parametrize(("what", "make"), UNUSUAL, ids=[w for w, _ in UNUSUAL])
def test_unusual_fields_are_left_to_the_python(what: str, make: Any) -> None:
    parts = [verdict(), make()]
    assert snapshot._read_compiled(parts, True) is None, what
    v = GroupVerdict("c", "g", GroupStatus.WARN, 1.0, parts, 2, None, 14, 1.5, 1000)
    try:
        expected = snapshot._read(parts, True)
    except (OverflowError, KeyError, AttributeError) as exc:  # a row cannot hold it, or no status: as before
        with pytest.raises(type(exc)):
            snapshot.snapshot_of(v)
    else:  # and the Python reads it
        snap = snapshot.snapshot_of(v)
        assert same((snap.rows, snap.seconds, snap.topics, snap.lag_seconds_bound, snap.not_ok), expected)


@needs_c
def test_a_list_subclass_and_short_entries_are_the_pythons() -> None:
    assert snapshot._read_compiled(Listed([verdict()]), True) is None
    short = [verdict(entries=array("q", range(FIELDS + OFFSET)))]
    assert snapshot._read_compiled(short, True) is None
    with pytest.raises(IndexError):  # as the Python answers a window shorter than its layout
        snapshot._read(short, True)
    assert snapshot._read_compiled(short, False) is not None  # without rows, the entries are not read


@needs_c
def test_a_slot_never_set_is_left_to_the_python() -> None:
    p = verdict()
    del p.lag_seconds
    assert snapshot._read_compiled([p], True) is None
    with pytest.raises(AttributeError):
        snapshot._read([p], True)


@needs_c
def test_a_collection_that_empties_the_list_before_the_loop_is_survived() -> None:
    """The compiled loop's first allocations may start a collection whose finalizers change the
    list (a helper's review crashed it so): its length is read after them. Run in a child, so
    a crash fails this test instead of the run."""
    code = """
import gc
from array import array
from lagd.evaluate import snapshot
from lagd.evaluate.verdict_types import PartitionVerdict
from lagd.core.model import PartitionStatus
from lagd.state.layout import FIELDS, OFFSET

parts = [
    PartitionVerdict(f"t{i}", i, PartitionStatus.WARN, array("q", range(2 * FIELDS)), 5, 1.0, "h", "c", 1.5, False, "", None)
    for i in range(50)
]
emptied = []

class Trap:
    def __del__(self):
        emptied.append(True)
        parts.clear()

gc.collect()  # what it frees goes to the free lists, which the next line empties again
held = [{} for _ in range(200)] + [[] for _ in range(200)]  # no free dict or list: the next are allocated
trap = Trap()
trap.cycle = trap
del trap
gc.set_threshold(1)  # the next tracked allocation, the loop's dict, collects (and empties the list)
got = snapshot._snapshot_rows(parts, PartitionVerdict, snapshot._STATUS_ORDER, array, FIELDS + OFFSET, True)
gc.set_threshold(700, 10, 10)
assert emptied, "the collection did not run where this test needs it"
assert got is not None and got[0] == b"" and got[2] == (), got
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
