"""The compiled build of Burrow's JSON bodies (lagd/http/burrow_json.py compiled by Cython in
pure-Python mode into lagd.http._burrow_json_c, hatch_build.py) writes exactly the text the same source
writes as Python: random verdicts (every status, empty windows, lags and NO_LAG, numbers at int64's
edges, completes of every kind of float, strings with quotes, escapes, control characters, non-ASCII,
astral and lone surrogates) are written both ways and compared, and so are verdicts with unusual
fields, subclasses and lists that iterate in their own way (the compiled code must read them as the
Python does, or fail as it fails).

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the compiled code. The
compiled module is imported by its name here, so these tests compare both ways under
LAGD_NO_EXTENSIONS=1 too (which only makes lagd itself run the Python).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import random
import traceback
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.evaluate import GroupVerdict, PartitionVerdict
from lagd.http import burrow_json, burrow_v3
from lagd.runtime import compiled
from lagd.state.layout import FIELDS, LAG
from lagd.state.windows import NO_LAG
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions, verdict

COMPILED_NAME = "lagd.http._burrow_json_c"
SOURCE = Path(burrow_json.__file__)
I64 = 2**63


def built() -> ModuleType | None:
    try:
        return importlib.import_module(COMPILED_NAME)
    except ImportError:
        return None


BUILT = built()
needs_build = pytest.mark.skipif(
    BUILT is None, reason="not compiled here (no C compiler): lagd writes the JSON in Python"
)


def both(parts: list[Any]) -> tuple[str | type[BaseException], str | type[BaseException]]:
    """What the compiled build and the Python write of `parts` (or the type of what they raise)."""
    assert BUILT is not None
    answers: list[str | type[BaseException]] = []
    for module in (BUILT, burrow_json):
        try:
            answers.append(module.partitions_json(parts))
        except Exception as exc:
            answers.append(type(exc))
    return answers[0], answers[1]


def test_the_compiled_writer_is_built_where_it_can_be() -> None:
    assert compiled.compiled_name(burrow_json.__name__) == COMPILED_NAME
    if not can_compile():
        return
    assert BUILT is not None, (
        f"a C compiler and Python's headers are here but {COMPILED_NAME} is not importable: {REINSTALL}"
    )
    assert hashlib.sha1(SOURCE.read_bytes()).hexdigest() == BUILT.SOURCE_SHA1, f"built from another source: {REINSTALL}"
    assert BUILT.__file__ != burrow_json.__file__ and not str(BUILT.__file__).endswith(".py")


def test_lagd_no_extensions_writes_in_python() -> None:
    code = "from lagd.http import burrow_v3; print(burrow_v3.WRITER.__name__)"
    assert printed_without_extensions(code) == "lagd.http.burrow_json"


@needs_build
def test_lagd_uses_the_build_unless_turned_off() -> None:
    expected = "turned off" if compiled.os.environ.get(compiled.NO_EXTENSIONS) else "compiled"
    assert compiled.status(COMPILED_NAME, SOURCE) == expected
    assert (burrow_v3.WRITER is BUILT) == (expected == "compiled")


@needs_build
def test_a_build_of_another_source_is_not_used(tmp_path: Path) -> None:
    changed = tmp_path / "burrow_json.py"
    changed.write_bytes(SOURCE.read_bytes() + b"# changed\n")
    assert compiled.status(COMPILED_NAME, changed) in ("stale", "turned off")
    assert compiled.load(COMPILED_NAME, changed) is None


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


def random_group(rnd: random.Random) -> GroupVerdict:
    parts = [random_verdict(rnd) for _ in range(rnd.randrange(6))]
    return GroupVerdict(
        cluster=random_string(rnd),
        group=random_string(rnd),
        status=rnd.choice(list(GroupStatus)),
        complete=random_float(rnd),
        partitions=parts,
        partition_count=random_int(rnd),
        maxlag=rnd.choice([None, *parts]),
        totallag=random_int(rnd),
        lag_seconds=0.0,
        evaluated_at=0,
    )


@needs_build
def test_random_verdicts_are_written_as_the_python_writes_them() -> None:
    assert BUILT is not None
    rnd = random.Random(13)
    for _ in range(400):
        parts = [random_verdict(rnd) for _ in range(rnd.randrange(6))]
        written, python = both(parts)
        assert isinstance(written, str), "every field here is of the usual type: both must write them"
        assert written == python
        v = random_group(rnd)
        for only_bad in (False, True):
            assert BUILT.group_status_json(v, only_bad) == burrow_json.group_status_json(v, only_bad)


@needs_build
def test_the_text_is_json_with_every_field() -> None:
    assert BUILT is not None
    p = verdict(topic='t "1"', owner="ü", entries=array("q", [1, 2, 3, 4, 5, 6, 7, 8, 9, NO_LAG]), complete=0.25)
    written = BUILT.partitions_json([p, verdict(entries=None, status=PartitionStatus.OK)])
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
    assert BUILT.partitions_json([]) == ""


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


@needs_build
@pytest.mark.parametrize(
    "unusual",
    [
        {"partition": True},
        {"partition": I64},
        {"current_lag": -I64 - 1},
        {"current_lag": 7.0},
        {"complete": 1},
        {"complete": True},
        {"complete": "0.5"},
        {"complete": None},
        {"topic": Topic("orders")},
        {"owner": None},
        {"owner": ["unhashable"]},
        {"status": "WARN"},
        {"status": None},
        {"entries": (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)},
        {"entries": array("l", range(10))},
        {"entries": array("q", range(9))},
        {"entries": b"\x00" * 80},
        {"entries": memoryview(array("q", range(10)))},
        {"entries": ArrayLike("q", range(10))},
    ],
    ids=lambda changes: next(iter(changes)) + "=" + type(next(iter(changes.values()))).__name__,
)
def test_unusual_fields_are_written_or_refused_as_the_python_does(unusual: dict[str, Any]) -> None:
    """The same source, so the same answer, whatever the field holds: text, or the same error."""
    written, python = both([verdict(), verdict(**unusual)])
    assert written == python


@needs_build
def test_subclasses_are_read_as_the_python_reads_them() -> None:
    """A list or verdict of a subclass may read through Python code (its own iteration, a
    property): the compiled code reads it as the Python does."""
    assert BUILT is not None
    reordered = Reordered([verdict(partition=1), verdict(partition=2)])
    written, python = both(reordered)
    assert isinstance(written, str) and written == python
    assert written.index('"partition": 2') < written.index('"partition": 1')

    @dataclasses.dataclass(slots=True)
    class Verdict(PartitionVerdict):
        @property
        def reason(self) -> str:
            return "its own"

    plain = verdict()
    own = Verdict(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(PartitionVerdict)})
    written, python = both([plain, own])
    assert isinstance(written, str) and written == python
    assert both((plain, own)) == (written, written)  # any iterable, in its order


@needs_build
def test_a_field_never_set_raises_as_in_python() -> None:
    unset = PartitionVerdict.__new__(PartitionVerdict)  # slots never assigned: reading one raises
    assert both([verdict(), unset]) == (AttributeError, AttributeError)


@needs_build
def test_a_traceback_through_the_build_names_the_source() -> None:
    """hatch_build.py compiles the source at its own path: a traceback names its file and line."""
    assert BUILT is not None
    unset = PartitionVerdict.__new__(PartitionVerdict)
    with pytest.raises(AttributeError) as raised:
        BUILT.partitions_json([unset])
    frames = [frame for frame in traceback.extract_tb(raised.value.__traceback__) if frame.filename.endswith(".py")]
    assert frames[-1].filename.endswith("lagd/http/burrow_json.py"), frames
    line = SOURCE.read_text().splitlines()[frames[-1].lineno - 1] if frames[-1].lineno else ""
    assert "p." in line, (frames[-1], line)  # the line that reads the verdict's fields


def test_numbers_past_int64_in_a_window_are_refused_compiled() -> None:
    """The one place the compiled code differs: a window's numbers are C int64 there (as the window
    array holds them, lagd.state.windows), so a number past int64 in a window that is not such an
    array raises OverflowError compiled where the Python writes it."""
    odd = verdict(entries=(I64, 2, 3, 4, 5, 6, 7, 8, 9, 10))
    assert burrow_json.partitions_json([odd]).startswith('{"topic": "orders", "partition": 3')
    if BUILT is not None:
        with pytest.raises(OverflowError):
            BUILT.partitions_json([odd])
