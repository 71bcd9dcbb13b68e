"""The compiled writer of a group's partitions as Burrow's JSON (lagd/http/_json.c) writes exactly
the text the Python writes (burrow_v3._partition_json), or leaves the list to it: random verdicts
(every status, empty windows, lags and NO_LAG, numbers at int64's edges, completes of every kind of
float, strings with quotes, escapes, control characters, non-ASCII, astral and lone surrogates)
are written both ways and compared, and each kind of unusual field is shown to be the Python's.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
from array import array
from typing import Any

import pytest

from lagd.core.model import PartitionStatus
from lagd.evaluate import PartitionVerdict
from lagd.http import burrow_v3
from lagd.state.windows import FIELDS, LAG, NO_LAG
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions, verdict

WRITE = burrow_v3._partitions_json
needs_c = pytest.mark.skipif(WRITE is None, reason="no C compiler here: lagd writes the JSON in Python")
I64 = 2**63


def python_json(parts: list[Any]) -> str:
    """The Python's text, which the C must match."""
    dumps = functools.cache(json.dumps)
    return ", ".join(burrow_v3._partition_json(p, dumps) for p in parts)


def c_json(parts: list[Any]) -> str | None:
    assert WRITE is not None
    return WRITE(parts, PartitionVerdict, burrow_v3._STATUS_VALUES, json.dumps)


def test_the_compiled_writer_is_built_where_it_can_be() -> None:
    assert not can_compile() or WRITE is not None, (
        "a C compiler and Python's headers are here but lagd.http._json is not importable (or was built for "
        f"another window entry layout): {REINSTALL}"
    )


def test_lagd_no_extensions_writes_in_python() -> None:
    assert printed_without_extensions("from lagd.http import burrow_v3; print(burrow_v3._partitions_json)") == "None"


ODD_STRINGS = [
    "",
    "plain",
    'a "quoted" one',
    "back\\slash",
    "new\nline\ttab\r\x08\x0c",
    "\x00\x01\x1f",
    "del\x7f",
    "ü é ß",
    "日本語",
    "emoji 😀",
    "lone \ud800 surrogate",
    "~ tilde and space ",
]


def random_string(rnd: random.Random) -> str:
    if rnd.random() < 0.5:
        return rnd.choice(ODD_STRINGS)
    alphabet = 'ab-_.09 "\\\n\x00\x7f\x80üÿ\u0100\u2028\ud7ff\ue000\uffff😀\udc00'
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(12)))


def random_int(rnd: random.Random) -> int:
    return rnd.choice([0, 1, -1, 7, 10**12, -(10**12), I64 - 1, -I64, -I64 + 1, rnd.randrange(-I64, I64)])


def random_float(rnd: random.Random) -> float:
    return rnd.choice(
        [
            0.0,
            -0.0,
            1.0,
            0.1,
            0.5,
            1 / 3,
            2.0,
            -3.0,
            1e15,
            -1e15,
            1e15 - 1,
            1e16,
            1e22,
            1e-7,
            5e-324,
            1.7976931348623157e308,
            math.inf,
            -math.inf,
            math.nan,
            rnd.random(),
            rnd.uniform(-1e17, 1e17),
            float(rnd.randrange(-(2**53), 2**53)),
        ]
    )


def random_entries(rnd: random.Random) -> array[int] | None:
    if rnd.random() < 0.15:
        return None
    values = [random_int(rnd) for _ in range(2 * FIELDS)]
    for at in (0, FIELDS):
        if rnd.random() < 0.4:
            values[at + LAG] = NO_LAG
    return array("q", values)


def random_verdict(rnd: random.Random) -> PartitionVerdict:
    return verdict(
        topic=random_string(rnd),
        partition=random_int(rnd),
        status=rnd.choice(list(PartitionStatus)),
        entries=random_entries(rnd),
        current_lag=random_int(rnd),
        complete=random_float(rnd),
        owner=random_string(rnd),
        client_id=random_string(rnd),
    )


@needs_c
def test_random_verdicts_are_written_as_the_python_writes_them() -> None:
    rnd = random.Random(13)
    for _ in range(400):
        parts = [random_verdict(rnd) for _ in range(rnd.randrange(6))]
        written = c_json(parts)
        assert written is not None, "every field here is of the usual type: the C must write them"
        assert written == python_json(parts)
        assert burrow_v3.partitions_json(parts) == written


@needs_c
def test_the_text_is_json_with_every_field() -> None:
    p = verdict(topic='t "1"', owner="ü", entries=array("q", [1, 2, 3, 4, 5, 6, 7, 8, 9, NO_LAG]), complete=0.25)
    written = c_json([p, verdict(entries=None, status=PartitionStatus.OK)])
    assert written is not None
    first, second = json.loads(f"[{written}]")
    assert first == {
        "topic": 't "1"',
        "partition": 3,
        "owner": "ü",
        "client_id": "client-1",
        "status": "WARN",
        "start": {"offset": 1, "timestamp": 3, "observedAt": 4, "lag": 5},
        "end": {"offset": 6, "timestamp": 8, "observedAt": 9, "lag": None},
        "current_lag": 7,
        "complete": 0.25,
    }
    assert second["start"] is None and second["end"] is None and second["status"] == "OK"
    assert c_json([]) == ""


class Topic(str):
    pass


class Reordered(list[Any]):
    """A list that iterates backwards: the Python's join follows its iteration."""

    def __iter__(self) -> Any:
        return reversed(list(super().__iter__()))


class ArrayLike(array):  # type: ignore[type-arg]
    """An array whose indexing is its own: the Python reads what it answers."""

    def __getitem__(self, i: Any) -> Any:
        return 42


@needs_c
@pytest.mark.parametrize(
    "unusual",
    [
        {"partition": True},
        {"partition": I64},
        {"current_lag": -I64 - 1},
        {"current_lag": 7.0},
        {"complete": 1},
        {"complete": True},
        {"topic": Topic("orders")},
        {"owner": None},
        {"status": "WARN"},
        {"entries": (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)},
        {"entries": array("l", range(10))},
        {"entries": array("q", range(9))},
        {"entries": b"\x00" * 80},
        {"entries": memoryview(array("q", range(10)))},
        {"entries": ArrayLike("q", range(10))},
    ],
    ids=lambda changes: next(iter(changes)) + "=" + type(next(iter(changes.values()))).__name__,
)
def test_unusual_fields_are_left_to_the_python(unusual: dict[str, Any]) -> None:
    parts = [verdict(), verdict(**unusual)]
    assert c_json(parts) is None
    try:
        expected: str | type[Exception] = python_json(parts)
    except Exception as exc:  # the Python's own error is what the caller gets
        expected = type(exc)
    if isinstance(expected, str):
        assert burrow_v3.partitions_json(parts) == expected
    else:
        with pytest.raises(expected):
            burrow_v3.partitions_json(parts)


@needs_c
def test_subclasses_are_left_to_the_python() -> None:
    """A list or verdict of a subclass may read through Python code (its own iteration, a
    property): the Python writes it, reading it as it reads everything."""
    reordered = Reordered([verdict(partition=1), verdict(partition=2)])
    assert c_json(reordered) is None
    assert burrow_v3.partitions_json(reordered) == python_json(reordered)
    assert burrow_v3.partitions_json(reordered).index('"partition": 2') < burrow_v3.partitions_json(reordered).index(
        '"partition": 1'
    )

    @dataclasses.dataclass(slots=True)
    class Verdict(PartitionVerdict):
        @property
        def reason(self) -> str:
            return "its own"

    plain = verdict()
    own = Verdict(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(PartitionVerdict)})
    assert c_json([plain, own]) is None
    assert burrow_v3.partitions_json([plain, own]) == python_json([plain, own])


@needs_c
def test_statuses_must_be_pairs_and_parts_a_list() -> None:
    assert WRITE is not None
    with pytest.raises(TypeError):
        WRITE([verdict()], PartitionVerdict, ((PartitionStatus.OK,),), json.dumps)
    assert WRITE((verdict(),), PartitionVerdict, burrow_v3._STATUS_VALUES, json.dumps) is None


@needs_c
def test_a_dumps_that_fails_fails_the_write() -> None:
    assert WRITE is not None

    def refuses(value: Any) -> str:
        raise ValueError("no")

    with pytest.raises(ValueError):
        WRITE([verdict(topic='needs "escapes"')], PartitionVerdict, burrow_v3._STATUS_VALUES, refuses)
    assert (
        WRITE([verdict()], PartitionVerdict, burrow_v3._STATUS_VALUES, refuses) is not None
    )  # plain strings need no dumps


@needs_c
def test_a_field_never_set_raises_as_in_python() -> None:
    unset = PartitionVerdict.__new__(PartitionVerdict)  # slots never assigned: reading one raises
    with pytest.raises(AttributeError):
        c_json([verdict(), unset])
    with pytest.raises(AttributeError):
        python_json([unset])
