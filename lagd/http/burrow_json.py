"""A group's status as Burrow's v3 JSON, the body `/v3/.../status` and `/lag` answer, written directly
as text: exactly what `json.dumps(burrow_v3.group_status(v, only_bad))` writes, byte for byte
(tests/test_burrow_json.py and tests/test_http_burrow.py compare them), faster than building the
dicts. With the response cache off, or a group that changes every second, writing this text was the
larger part of a request's own work.

One source, run two ways. This Python is what runs uncompiled; where the build found Cython and a C
compiler it is also compiled, by Cython in pure-Python mode, into lagd.http._burrow_json_c
(hatch_build.py), which lagd.runtime.compiled.pick chooses unless LAGD_NO_EXTENSIONS=1. The
`cython.*` parts are what the compiler reads: C integers for a window entry's numbers and a double
for the complete (formatted by C code), C functions for the helpers. Run as Python they are only
annotations and decorators that return what they decorate (without Cython installed
lagd.runtime.cython_shim stands in). Being the same code, both ways write the same text and raise
the same errors (tests/test_burrow_json_c.py), but for one thing: a window number past int64 (which
the window's array cannot hold, lagd.state.windows) raises OverflowError compiled.

Compiled, a 1,000-partition body takes about twice as long as the hand-written C it replaced
(lagd/http/_json.c, until 2026-12-03), and half as long as this Python (bench/HISTORY.md, "Burrow's
JSON bodies from one typed source").
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the stand-in, whose types are Python's
    from lagd.runtime import cython_shim as cython
else:
    try:
        import cython  # what Cython reads: the magic module compiled, its Python stand-in uncompiled
    except ModuleNotFoundError:  # no Cython installed: it is only needed to build, never to run
        from lagd.runtime import cython_shim as cython

from lagd.core.model import PartitionStatus
from lagd.state.layout import FIELDS, LAG, OBSERVED, OFFSET, TS
from lagd.state.windows import NO_LAG

if TYPE_CHECKING:
    from lagd.evaluate import GroupVerdict, PartitionVerdict
    from lagd.evaluate.retention_view import RetentionNote

from lagd.evaluate.retention_view import STATUS_OF

# lagd.state.windows' layout as C constants where compiled (the module's own names as Python).
_FIELDS = cython.declare(cython.Py_ssize_t, FIELDS)
_OFFSET = cython.declare(cython.Py_ssize_t, OFFSET)
_TS = cython.declare(cython.Py_ssize_t, TS)
_OBSERVED = cython.declare(cython.Py_ssize_t, OBSERVED)
_LAG = cython.declare(cython.Py_ssize_t, LAG)
_NO_LAG = cython.declare(cython.longlong, NO_LAG)

# A status' text; a dict's look-up where Enum's `.value` runs Python code on every read.
_STATUS_TEXT: dict[PartitionStatus, str] = {status: status.value for status in PartitionStatus}


@cython.cfunc
@cython.inline
def _entry_json(entries: array[int], at: cython.Py_ssize_t) -> str:
    """Burrow's ConsumerOffset of a verdict's window entry (PartitionVerdict.entries from `at`)."""
    offset: cython.longlong = entries[at + _OFFSET]
    timestamp: cython.longlong = entries[at + _TS]
    observed: cython.longlong = entries[at + _OBSERVED]
    lag: cython.longlong = entries[at + _LAG]
    if lag == _NO_LAG:
        return f'{{"offset": {offset}, "timestamp": {timestamp}, "observedAt": {observed}, "lag": null}}'
    return f'{{"offset": {offset}, "timestamp": {timestamp}, "observedAt": {observed}, "lag": {lag}}}'


@cython.cfunc
@cython.inline
def _quoted(text: object, seen: dict[object, str]) -> str:
    """`json.dumps(text)`, each distinct one once per body (topics and owners repeat on every partition)."""
    written = seen.get(text)
    if written is None:
        written = seen[text] = json.dumps(text)
    return written


@cython.cfunc
@cython.inline
def _float_json(value: cython.double) -> str:
    """`repr(value)` as json.dumps writes a float (1.0, the usual complete, without formatting it)."""
    return "1.0" if value == 1.0 else repr(value)


@cython.cfunc
def _partition_json(p: PartitionVerdict, seen: dict[object, str]) -> str:
    """Burrow's PartitionStatus of one verdict (current_lag with an underscore)."""
    entries = p.entries
    start = "null" if entries is None else _entry_json(entries, 0)
    end = "null" if entries is None else _entry_json(entries, _FIELDS)
    complete: cython.double = float(p.complete)
    return (
        f'{{"topic": {_quoted(p.topic, seen)}, "partition": {p.partition}, "owner": {_quoted(p.owner, seen)}, '
        f'"client_id": {_quoted(p.client_id, seen)}, "status": "{_STATUS_TEXT[p.status]}", "start": {start}, '
        f'"end": {end}, "current_lag": {p.current_lag}, "complete": {_float_json(complete)}}}'
    )


def retention_fields(note: RetentionNote) -> dict[str, object]:
    """lagd's extra fields of a partition whose log start is sampled (lagd.evaluate.retention),
    after Burrow's own: the share of retention the lag uses, records deleted unread, the
    judgement (ok, at_risk, lost, compacted, unknown) and, lost or at risk, why."""
    out: dict[str, object] = {
        "retention_used": note.retention_used,
        "records_lost": note.lost,
        "retention": note.state.value,
    }
    if note.reason:
        out["retention_reason"] = note.reason
    return out


def partitions_json(
    parts: Iterable[PartitionVerdict], notes: dict[tuple[str, int], RetentionNote] | None = None
) -> str:
    """The partitions' JSON objects, in the order the iterable gives them, joined by ", "; with
    `notes`, each partition that has one gains lagd's retention fields (retention_fields)."""
    seen: dict[object, str] = {}
    if not notes:
        return ", ".join([_partition_json(p, seen) for p in parts])
    out: list[str] = []
    for p in parts:
        text = _partition_json(p, seen)
        note = notes.get((p.topic, p.partition))
        if note is not None:
            text = text[:-1] + ", " + json.dumps(retention_fields(note))[1:]
        out.append(text)
    return ", ".join(out)


def _bad(notes: dict[tuple[str, int], RetentionNote] | None, p: PartitionVerdict) -> bool:
    """Has the partition records lost or at risk (listed by `/status` though its window is OK)?"""
    note = notes.get((p.topic, p.partition)) if notes else None
    return note is not None and note.state in STATUS_OF


def group_status_json(v: GroupVerdict, only_bad: bool) -> str:
    """Burrow's ConsumerGroupStatus as JSON; `/status` lists only the non-OK partitions."""
    notes = {(n.topic, n.partition): n for n in v.retention} if v.retention else None
    parts = (
        [p for p in v.partitions if p.status is not PartitionStatus.OK or _bad(notes, p)] if only_bad else v.partitions
    )
    maxlag = partitions_json([v.maxlag], notes) if v.maxlag is not None else "null"
    return (
        f'{{"cluster": {json.dumps(v.cluster)}, "group": {json.dumps(v.group)}, "status": "{v.status.value}", '
        f'"complete": {float(v.complete)!r}, "partitions": [{partitions_json(parts, notes)}], '
        f'"partition_count": {v.partition_count}, "maxlag": {maxlag}, "totallag": {v.totallag}}}'
    )
