"""Commit history rows written as binary COPY by compiled code (_apply.c: copy_history) are the
rows the Python hands asyncpg (CommitRows.rows), or are left to it: random rows (astral and
non-ASCII names, partitions and offsets at their types' edges, null lags) are decoded from the
COPY bytes and compared; each kind of unusual column is shown to be the Python's; and a write
through Postgres, in several chunks and with a chunk left to the Python among them, reads back
the same rows.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import gc
import random
import struct
import sys
from array import array
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lagd.state import store as store_module
from lagd.state.changes import Changes
from lagd.state.history import NO_LAG, CommitRow, CommitRows
from lagd.state.store import Store
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions

COPY = store_module._copy_history
needs_c = pytest.mark.skipif(COPY is None, reason="no C compiler here: lagd builds the rows in Python")
NOV22 = 1_795_305_600_000
HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension


def test_the_compiled_copy_is_built_where_it_can_be() -> None:
    assert not can_compile() or COPY is not None, (
        f"a C compiler and Python's headers are here but lagd.state._apply is not importable: {REINSTALL}"
    )


def test_lagd_no_extensions_builds_the_rows_in_python() -> None:
    assert printed_without_extensions("from lagd.state import store; print(store._copy_history)") == "None"


def decode(data: bytes) -> list[CommitRow]:
    """The tuples of binary COPY data as commit history rows (its header and trailer checked)."""
    assert data[: len(HEADER)] == HEADER and data[-2:] == b"\xff\xff"
    rows: list[CommitRow] = []
    at = len(HEADER)
    while at < len(data) - 2:
        (count,) = struct.unpack_from(">h", data, at)
        assert count == 8
        at += 2
        fields: list[bytes | None] = []
        for _ in range(count):
            (n,) = struct.unpack_from(">i", data, at)
            at += 4
            fields.append(None if n == -1 else data[at : at + n])
            at += max(n, 0)
        ts, cluster, group, topic, partition, offset, lag, observed = fields
        assert ts and cluster is not None and group is not None and topic is not None and partition and offset
        assert observed
        rows.append(
            (
                struct.unpack(">q", ts)[0],
                cluster.decode(),
                group.decode(),
                topic.decode(),
                struct.unpack(">i", partition)[0],
                struct.unpack(">q", offset)[0],
                None if lag is None else struct.unpack(">q", lag)[0],
                struct.unpack(">q", observed)[0],
            )
        )
    assert at == len(data) - 2
    return rows


def compiled(rows: CommitRows, start: int, stop: int) -> bytes | None:
    assert COPY is not None
    return COPY(rows.ts, rows.cluster, rows.group, rows.topic, rows.partition, rows.offset, rows.lag, rows.observed,
                start, stop)  # fmt: skip


def random_rows(rnd: random.Random, n: int) -> CommitRows:
    names = ["c", "prod-eu", "ü-cluster", "組", "g\U0001f600", "", "a" * 300]
    rows = CommitRows()
    for _ in range(n):
        rows.add(
            rnd.choice([NOV22, 0, -1, 2**63 - 1, -(2**63) + 1, rnd.randrange(2**40)]),
            rnd.choice(names),
            rnd.choice(names) + str(rnd.randrange(100)),
            rnd.choice(names),
            rnd.choice([0, 1, 2**31 - 1, -(2**31), rnd.randrange(1000)]),
            rnd.choice([0, 2**63 - 1, -1, rnd.randrange(2**50)]),
            rnd.choice([NO_LAG, 0, -5, 2**63 - 1, rnd.randrange(10**6)]),
            rnd.choice([NOV22, rnd.randrange(2**45)]),
        )
    return rows


@needs_c
@pytest.mark.parametrize("seed", range(5))
def test_random_rows_are_written_as_the_python_hands_them_to_asyncpg(seed: int) -> None:
    rnd = random.Random(seed)
    rows = random_rows(rnd, 500)
    for start, stop in ((0, 500), (0, 0), (17, 18), (100, 437), (499, 500)):
        data = compiled(rows, start, stop)
        assert data is not None
        assert decode(data) == rows.rows(start, stop)


@needs_c
def test_a_null_lag_is_a_null_field() -> None:
    rows = CommitRows([(NOV22, "c", "g", "t", 0, 10, None, NOV22), (NOV22, "c", "g", "t", 0, 11, 0, NOV22)])
    data = compiled(rows, 0, 2)
    assert data is not None
    assert [r[6] for r in decode(data)] == [None, 0]
    assert b"\xff\xff\xff\xff" in data  # a field of length -1


class Name(str):
    """A str subclass: its UTF-8 is whatever it says, so the Python encodes it."""


def _with(rows: CommitRows, column: str, value: Any) -> CommitRows:
    out = CommitRows(rows)
    setattr(out, column, value)
    return out


@needs_c
@pytest.mark.parametrize(
    ("what", "column", "value"),
    [
        ("a lone surrogate in a group", "group", ["g\ud800", "g"]),
        ("a str subclass as topic", "topic", [Name("t"), "t"]),
        ("a cluster that is not a str", "cluster", [b"c", "c"]),
        ("a tuple of groups, not a list", "group", ("g", "g")),
        ("timestamps as a list", "ts", [NOV22, NOV22]),
        ("partitions of 8 bytes", "partition", array("q", [0, 1])),
        ("offsets as a plain int array", "offset", array("i", [1, 2])),
        ("a lag column shorter than the rows", "lag", array("q", [5])),
        ("observed times as bytes", "observed", bytes(16)),
    ],
)
def test_unusual_columns_are_left_to_the_python(what: str, column: str, value: Any) -> None:
    rows = CommitRows([(NOV22, "c", "g", "t", 0, 10, 1, NOV22), (NOV22 + 1, "c", "g", "t", 1, 11, None, NOV22)])
    assert compiled(rows, 0, 2) is not None, "the usual rows are compiled"
    assert compiled(_with(rows, column, value), 0, 2) is None, what


@needs_c
def test_a_range_past_the_rows_is_refused_or_left_to_the_python() -> None:
    rows = CommitRows([(NOV22, "c", "g", "t", 0, 10, 1, NOV22)])
    assert compiled(rows, 0, 2) is None  # columns shorter than `stop`: never read past them
    with pytest.raises(ValueError):
        compiled(rows, 1, 0)
    with pytest.raises(ValueError):
        compiled(rows, -1, 1)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url)
    yield s
    await s.close()


async def _history(store: Store) -> list[CommitRow]:
    async with store._raw() as apg:
        got = await apg.fetch(
            'SELECT ts, cluster, group_name, topic, partition, "offset", lag, observed FROM commit_history'
        )
    return sorted(tuple(r) for r in got)  # type: ignore[misc]


@needs_c
async def test_a_write_reads_back_the_same_rows_with_either_path(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """4,500 rows in chunks of 1,000 (five COPY calls), one chunk holding a row only the Python
    writes: every row is in Postgres as it was given, null lags null."""
    monkeypatch.setattr(store_module, "COPY_HISTORY_ROWS", 1_000)
    built: list[bool] = []

    def counted(*args: Any) -> bytes | None:
        assert COPY is not None
        data = COPY(*args)
        built.append(data is not None)
        return data

    monkeypatch.setattr(store_module, "_copy_history", counted)
    rnd = random.Random(7)
    given: list[CommitRow] = []
    for i in range(4_500):
        group = "g\U0001f600" if i == 2_222 else f"grp-{rnd.randrange(50)}"
        lag = None if i % 7 == 0 else rnd.randrange(10**6)
        given.append((NOV22 + i, "c", group, "orders", rnd.randrange(2**31), rnd.randrange(2**62), lag, NOV22 + i))
    rows = CommitRows(given)
    rows.group[3_333] = Name(rows.group[3_333])  # its chunk is left to asyncpg's encoder
    ch = Changes()
    ch.commit_history = rows
    await store.write(ch)
    assert built == [True, True, True, False, True]  # the fourth chunk went to asyncpg's encoder
    assert await _history(store) == sorted(given)


@needs_c
def test_history_days_are_the_pythons_bounds_and_floored_days() -> None:
    """The compiled bounds and days of a timestamp column are min, max and each `// DAY_MS` (floored
    for times before the epoch), at int64's edges too; another kind of column is left to the Python."""
    days = store_module._history_days
    assert days is not None
    day = store_module.DAY_MS
    rnd = random.Random(3)
    edges = [0, -1, 1, day, -day, -day - 1, day - 1, 2**63 - 1, -(2**63)]
    for _ in range(2_000):
        ts = [rnd.choice([*edges, rnd.randrange(-10 * day, 10 * day)]) for _ in range(rnd.randrange(1, 40))]
        assert days(array("q", ts)) == (min(ts), max(ts), {t // day for t in ts}), ts
    others: list[Any] = [array("q"), array("i", [1]), [1, 2], memoryview(bytes(8))]
    for other in others:
        assert days(other) is None
    assert store_module.history_days(array("i", [day, 3 * day])) == (day, 3 * day, {1, 3})  # the Python's answer


def _aligned_off(values: list[int]) -> memoryview:
    """An int64 column one byte off alignment (a slice of a larger buffer)."""
    raw = bytearray(1 + 8 * len(values))
    raw[1:] = array("q", values).tobytes()
    return memoryview(raw)[1:].cast("q")


@needs_c
def test_columns_off_alignment_are_read_as_they_are() -> None:
    rows = CommitRows([(NOV22, "c", "g", "t", 0, 10, None, NOV22), (NOV22 + 1, "c", "g", "t", 1, 11, 7, NOV22 + 2)])
    data = COPY(_aligned_off(list(rows.ts)), rows.cluster, rows.group, rows.topic, rows.partition,  # type: ignore[misc]
                _aligned_off(list(rows.offset)), rows.lag, rows.observed, 0, 2)  # fmt: skip
    assert data is not None and decode(data) == rows.rows()
    days = store_module._history_days
    assert days is not None and days(_aligned_off([NOV22, 5])) == (5, NOV22, {0, NOV22 // store_module.DAY_MS})


@needs_c
def test_rows_too_large_for_one_copy_message_are_left_to_the_python() -> None:
    """Postgres refuses a message over 1 GB, and a chunk goes as one: rows whose names make a
    chunk larger than 64 MB are the Python's, which asyncpg sends in parts."""
    rows = CommitRows([(NOV22, "c", "g" * (40 << 20), "t", 0, 10, 1, NOV22)] * 2)
    assert compiled(rows, 0, 1) is not None  # 40 MB: one message
    assert compiled(rows, 0, 2) is None


@needs_c
@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python class can offer a buffer (__buffer__) from 3.12 on")
def test_a_buffer_that_empties_the_lists_is_not_read_past() -> None:
    """Taking a column's buffer may run Python code: the lists' lengths are checked after it."""
    rows = CommitRows([(NOV22, "c", "g", "t", p, 10, 1, NOV22) for p in range(1_000)])

    class Emptying:
        def __buffer__(self, flags: int) -> memoryview:
            rows.cluster.clear()
            rows.group.clear()
            rows.topic.clear()
            return memoryview(rows.offset)

    assert COPY is not None
    got = COPY(rows.ts, rows.cluster, rows.group, rows.topic, rows.partition, Emptying(), rows.lag, rows.observed,
               0, 1_000)  # fmt: skip
    assert got is None


@needs_c
def test_the_name_columns_stay_out_of_the_collectors_sight() -> None:
    """Hundreds of thousands of names wait for Postgres in these columns at 1M group-partitions:
    lists of str the collector does not track, however the rows came (a row at a time, the
    compiled apply, kept rows), and still lists of str to the writer."""
    from lagd.core.model import Commit
    from lagd.state.windows import State

    state = State()
    state.apply_many(
        [Commit("c", f"g{g}", "t", p, 10 + p, 1 + p, NOV22 + p, NOV22) for g in range(30) for p in range(4)]
    )
    state.apply_many(
        [Commit("c", f"g{g}", "t", p, 20 + p, 9 + p, NOV22 + 9, NOV22) for g in range(30) for p in range(4)]
    )
    history = state.drain_changes().commit_history
    kept = history.keep(lambda _c, g: g != "g0")
    by_hand = CommitRows([(NOV22, "c", "g", "t", 0, 10, 1, NOV22)])
    for rows, n in ((history, 240), (kept, 232), (by_hand, 1)):
        assert len(rows) == n
        for names in (rows.cluster, rows.group, rows.topic):
            assert type(names) is list and len(names) == n and not gc.is_tracked(names)
        assert compiled(rows, 0, n) is not None  # the writer reads them as before
    assert {history.row(i)[2] for i in range(240)} == {f"g{g}" for g in range(30)}
    untrack = store_module._apply_c.untrack_names
    with pytest.raises(TypeError):
        untrack(["g", b"not a str"])
    with pytest.raises(TypeError):
        untrack(("g", "h"))
