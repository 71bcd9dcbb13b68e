"""The windows table's rows written as binary COPY by compiled code (_apply.c: copy_windows) are
the rows the Python builds for asyncpg (store._window_rows), group hash included, or are left to
it: random keys (astral and non-ASCII names, partitions at int32's edges) and removed windows are
decoded from the COPY bytes and compared; each kind of unusual key or value is shown to be the
Python's; and a write through Postgres restores the same either way.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lagd.core.model import Commit
from lagd.state import store as store_module
from lagd.state.changes import Changes, WindowKey
from lagd.state.store import COPY_WINDOWS_BYTES, COPY_WINDOWS_ROWS, Store
from lagd.state.windows import State, group_hash
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions

COPY = store_module._copy_windows
needs_c = pytest.mark.skipif(COPY is None, reason="no C compiler here: lagd builds the rows in Python")
NOV22 = 1_795_305_600_000


def test_the_compiled_copy_is_built_where_it_can_be() -> None:
    assert not can_compile() or COPY is not None, (
        f"a C compiler and Python's headers are here but lagd.state._apply is not importable: {REINSTALL}"
    )


def test_lagd_no_extensions_builds_the_rows_in_python() -> None:
    assert printed_without_extensions("from lagd.state import store; print(store._copy_windows)") == "None"


HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension


def decode(data: bytes) -> list[tuple[Any, ...]]:
    """The tuples of binary COPY data as the windows table's rows (its header and trailer checked)."""
    assert data[: len(HEADER)] == HEADER and data[-2:] == b"\xff\xff"
    rows, at = [], len(HEADER)
    while at < len(data) - 2:
        (count,) = struct.unpack_from(">h", data, at)
        at += 2
        fields = []
        for _ in range(count):
            (n,) = struct.unpack_from(">i", data, at)
            at += 4
            fields.append(data[at : at + n])
            at += n
        cluster, group, topic, partition, entries, hashed = fields
        rows.append(
            (
                cluster.decode(),
                group.decode(),
                topic.decode(),
                struct.unpack(">i", partition)[0],
                entries,
                struct.unpack(">i", hashed)[0],
            )
        )
    return rows


def python_rows(windows: dict[WindowKey, bytes | None]) -> tuple[list[tuple[Any, ...]], list[WindowKey]]:
    gone: list[WindowKey] = []
    rows = list(store_module._window_rows(windows, functools.cache(group_hash), gone))
    return rows, gone


def compiled_rows(
    windows: dict[WindowKey, bytes | None], n: int, max_bytes: int = COPY_WINDOWS_BYTES
) -> tuple[list[tuple[Any, ...]], list[WindowKey]]:
    """Every row, read up to `n` rows or about `max_bytes` at a time from where the last call stopped."""
    assert COPY is not None
    gone: list[WindowKey] = []
    rows: list[tuple[Any, ...]] = []
    pos, size, done = 0, len(windows), False
    while not done:
        got = COPY(windows, pos, size, n, max_bytes, gone)
        assert got is not None, "every key here is of the usual type: the C must write them"
        data, count, pos, done = got
        decoded = decode(data)
        assert len(decoded) == count <= n
        if count > 1:  # it stopped at the first row past max_bytes
            assert len(data) - 2 - row_size(decoded[-1]) < max_bytes
        rows += decoded
    return rows, gone


def row_size(row: tuple[Any, ...]) -> int:
    """The bytes of one row in binary COPY: its field count, then each field's length and bytes."""
    cluster, group, topic, _, entries, _ = row
    return 2 + 6 * 4 + sum(len(x.encode()) for x in (cluster, group, topic)) + 4 + len(entries) + 4


NAMES = ["orders", "g-1", "", "ü-group", "日本", "emoji 😀 group", "\U0010ffff", "a" * 300, "nul\x00in"]


def random_windows(rnd: random.Random) -> dict[WindowKey, bytes | None]:
    windows: dict[WindowKey, bytes | None] = {}
    for _ in range(rnd.randrange(40)):
        key = (
            rnd.choice(NAMES),
            rnd.choice(NAMES) + str(rnd.randrange(5)),
            rnd.choice(NAMES),
            rnd.choice([0, 1, 2**31 - 1, -(2**31), rnd.randrange(1000)]),
        )
        windows[key] = rnd.choice([None, b"", bytes(rnd.randrange(1, 200)), rnd.randbytes(80)])
    return windows


@needs_c
@pytest.mark.parametrize(
    ("n", "max_bytes"),
    [
        (1, COPY_WINDOWS_BYTES),
        (3, COPY_WINDOWS_BYTES),
        (COPY_WINDOWS_ROWS, 0),
        (COPY_WINDOWS_ROWS, 500),
        (COPY_WINDOWS_ROWS, COPY_WINDOWS_BYTES),
    ],
)
def test_random_windows_are_written_as_the_python_builds_them(n: int, max_bytes: int) -> None:
    rnd = random.Random(17)
    for _ in range(300):
        windows = random_windows(rnd)
        assert compiled_rows(windows, n, max_bytes) == python_rows(windows)


@needs_c
def test_the_group_hash_is_kafkas() -> None:
    """Java's String.hashCode over UTF-16 code units (astral characters as two), then Utils.abs:
    compared with windows.group_hash, which tests/test_codec.py pins to what Java prints."""
    rnd = random.Random(5)
    groups = ["", "a", "polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES", "😀" * 7, "\uffff" * 9]
    groups += [
        "".join(
            chr(rnd.choice([rnd.randrange(32, 0xD800), rnd.randrange(0x10000, 0x110000)]))
            for _ in range(rnd.randrange(20))
        )
        for _ in range(500)
    ]
    groups = list(dict.fromkeys(groups))  # one window each
    windows: dict[WindowKey, bytes | None] = {("c", g, "t", 0): b"x" for g in groups}
    rows, _ = compiled_rows(windows, COPY_WINDOWS_ROWS)
    assert [r[5] for r in rows] == [group_hash(g) for g in groups]


class Named(str):
    pass


UNUSUAL: list[tuple[str, WindowKey, Any]] = [
    ("a partition past int32", ("c", "g", "t", 2**31), b"x"),
    ("a partition below int32", ("c", "g", "t", -(2**31) - 1), b"x"),
    ("a lone surrogate in a topic", ("c", "g", "t\ud800", 0), b"x"),
    ("a str subclass", ("c", Named("g"), "t", 0), b"x"),
    ("a bool as partition", ("c", "g", "t", True), b"x"),
    ("a key of three", ("c", "g", "t"), b"x"),
    ("a bytearray as entries", ("c", "g", "t", 0), bytearray(b"x")),
]


@needs_c
@pytest.mark.parametrize(("what", "key", "value"), UNUSUAL, ids=[w for w, _, _ in UNUSUAL])
def test_unusual_keys_and_values_are_left_to_the_python(what: str, key: Any, value: Any) -> None:
    assert COPY is not None
    windows: dict[Any, Any] = {("c", "g", "t", 9): None, ("c", "g", "t", 2): b"ok", key: value}
    gone: list[Any] = [("before",)]
    assert COPY(windows, 0, len(windows), COPY_WINDOWS_ROWS, COPY_WINDOWS_BYTES, gone) is None, what
    assert gone == [("before",)]  # what this call had put there is taken back


@needs_c
def test_a_dict_changed_in_size_between_calls_raises() -> None:
    assert COPY is not None
    windows: dict[WindowKey, bytes | None] = {("c", "g", "t", p): b"x" for p in range(5)}
    got = COPY(windows, 0, 5, 2, COPY_WINDOWS_BYTES, [])
    assert got is not None
    windows[("c", "g", "t", 9)] = b"y"
    with pytest.raises(RuntimeError, match="changed size"):
        COPY(windows, got[2], 5, 2, COPY_WINDOWS_BYTES, [])


@pytest.fixture(params=[True, False], ids=["appended to the log", "upserted, as workers write them"])
async def store(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    s = Store.from_url(database_url, windows_log=request.param)
    yield s
    await s.close()


@needs_c
async def test_a_write_restores_the_same_with_either_path(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows written by the compiled COPY (several chunks of them, by bytes), then rewritten with
    a key it leaves to the Python among them, restore as they were; removed ones are deleted."""
    monkeypatch.setattr(store_module, "COPY_WINDOWS_BYTES", 100_000)  # 6,000 windows of 3 commits: 10 chunks
    state = State(intervals=3)
    state.apply_many(
        [Commit("c", f"g{g}", "orders", p, 10 * g + p, 5, NOV22, NOV22 + 1) for g in range(60) for p in range(100)]
    )
    await store.write(state.drain_changes())
    fresh = State(intervals=3)
    await store.restore(fresh)
    assert all(
        fresh.window("c", f"g{g}", "orders", p) == state.window("c", f"g{g}", "orders", p)
        for g in range(60)
        for p in range(100)
    )
    # a removed window, and a rewrite whose one unusual key sends the whole write to the Python
    ch = Changes()
    ch.windows[("c", "g0", "orders", 0)] = None
    ch.windows[("c", "g1", "orders", 0)] = _bytes_of(state, "g2", 0)
    ch.windows[("c", "g\ud800", "orders", 0)] = _bytes_of(state, "g2", 0)
    with pytest.raises(UnicodeEncodeError) as refused:  # asyncpg's encoder refuses it, as it always did
        await store.write(ch)
    assert store_module.is_poison(refused.value)  # and the persister counts and skips it
    del ch.windows[("c", "g\ud800", "orders", 0)]
    calls: list[int] = []
    real = store_module._copy_windows
    assert real is not None

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(store_module, "_copy_windows", counted)
    await store.write(ch)
    assert calls  # the compiled path wrote this one
    after = State(intervals=3)
    await store.restore(after)
    assert after.window("c", "g0", "orders", 0) == [] and state.window("c", "g0", "orders", 0) != []
    assert after.window("c", "g1", "orders", 0) == state.window("c", "g2", "orders", 0)


def _bytes_of(state: State, group: str, partition: int) -> bytes:
    from lagd.state.windows import window_bytes

    arr = state._window_array("c", group, "orders", partition)
    assert arr is not None
    return window_bytes(arr)
