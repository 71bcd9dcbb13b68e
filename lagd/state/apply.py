"""The usual commit applied to the state, and changed windows copied for the store: the typed Python
that stands in for lagd/state/_apply.c (issue 52, a spike: measured in bench/HISTORY.md).

`apply_commits` is `State._commit` for the commit a running daemon applies almost every time: one
newer than the newest entry of a window the state holds, of a group with no tombstone. It applies
events from an index on and stops at the first one it does not apply exactly as `State._commit`
would (another event type, a new group, topic or partition, a commit at or older than the window's
newest, a tombstone, a pause to weigh, numbers past int64), returning its index: the Python applies
that one and calls again past it, so events keep their order. It reads no private attribute: State
hands it its change counter, its dirty windows and its history rows, and takes the counter back.

`drain_windows` is Drain.step's copy of changed windows into the bytes the store writes
(windows.window_bytes).

One source, run two ways, as lagd.http.burrow_json: compiled by Cython in pure-Python mode into
lagd.state._apply_c where the build could (hatch_build.py; lagd.runtime.compiled.pick), plain Python
otherwise. The `if cython.compiled:` parts reach the arrays' memory directly; the Python beside them
does the same with the arrays' methods.
"""

from __future__ import annotations

import sys
from array import array
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the stand-in, whose types are Python's
    from lagd.runtime import cython_shim as cython
else:
    try:
        import cython  # what Cython reads: the magic module compiled, its Python stand-in uncompiled
    except ModuleNotFoundError:  # no Cython installed: it is only needed to build, never to run
        from lagd.runtime import cython_shim as cython

if cython.compiled:
    from cython.cimports.cpython import array as carray  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from cython.cimports.cpython.bytes import PyBytes_FromStringAndSize  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from cython.cimports.cpython.long import PyLong_AsLongLongAndOverflow  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from cython.cimports.libc.string import memmove  # type: ignore[import-untyped, import-not-found, unused-ignore]
else:
    import array as carray

from lagd.state.layout import FIELDS, LAG, OBSERVED, OFFSET, ORDER, TS

# lagd.state.layout as C constants where compiled (the module's own names as Python).
_F = cython.declare(cython.Py_ssize_t, FIELDS)
_OFFSET = cython.declare(cython.Py_ssize_t, OFFSET)
_ORDER = cython.declare(cython.Py_ssize_t, ORDER)
_TS = cython.declare(cython.Py_ssize_t, TS)
_OBSERVED = cython.declare(cython.Py_ssize_t, OBSERVED)
_LAG = cython.declare(cython.Py_ssize_t, LAG)
_NO_LAG = cython.declare(cython.longlong, -(2**63))
_MIN_Q, _MAX_Q = -(2**63), 2**63 - 1
_MIN_I, _MAX_I = -(2**31), 2**31 - 1
# _bswap64's masks as C constants (a literal beside a C integer would be a Python int)
_LOW32 = cython.declare(cython.ulonglong, 0x00000000FFFFFFFF)
_LOW16 = cython.declare(cython.ulonglong, 0x0000FFFF0000FFFF)
_LOW8 = cython.declare(cython.ulonglong, 0x00FF00FF00FF00FF)
_SWAP = cython.declare(cython.bint, sys.byteorder == "little")  # the store keeps int64s big-endian


@cython.cfunc
@cython.inline
def _q(value: object) -> cython.bint:
    """Is `value` an exact int an int64 holds (what a flat window and a C long long hold)?"""
    return type(value) is int and _MIN_Q <= value <= _MAX_Q  # type: ignore[operator]


@cython.cfunc
@cython.inline
def _as_q(value: object) -> tuple[cython.bint, cython.longlong]:
    """(True, value) for an exact int an int64 holds, else (False, 0)."""
    if type(value) is not int:
        return False, 0
    if cython.compiled:
        overflow: cython.int = 0
        v: cython.longlong = PyLong_AsLongLongAndOverflow(value, cython.address(overflow))
        return overflow == 0, v
    if _MIN_Q <= value <= _MAX_Q:  # type: ignore[operator]
        return True, value  # type: ignore[return-value]
    return False, 0


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _less_apart(newer: cython.longlong, older: cython.longlong, limit: cython.longlong) -> cython.bint:
    """`newer - older < limit`, exactly (the difference of two int64s needs 65 bits)."""
    if not cython.compiled:
        return newer - older < limit
    d: cython.ulonglong
    if newer >= older:
        d = cython.cast(cython.ulonglong, newer) - cython.cast(cython.ulonglong, older)
        closer: cython.bint = limit > 0 and d < cython.cast(cython.ulonglong, limit)
        return closer
    d = cython.cast(cython.ulonglong, older) - cython.cast(cython.ulonglong, newer)  # -(newer - older)
    if limit >= 0:
        return True
    below: cython.bint = d > cython.cast(cython.ulonglong, 0) - cython.cast(cython.ulonglong, limit)
    return below


@cython.cfunc
@cython.inline
def _is_q(value: object) -> cython.bint:
    """Is `value` an array of int64 ('q'), the kind State keeps windows and log-end offsets in?"""
    if type(value) is not array:
        return False
    if cython.compiled:
        is_q: cython.bint = cython.cast(carray.array, value).ob_descr.typecode == 113  # 'q', without a str
        return is_q
    return value.typecode == "q"  # type: ignore[attr-defined, no-any-return]


@cython.cfunc
@cython.inline
def _push(column: carray.array, value: cython.longlong) -> None:
    """Append to an array of this module's own (never exported: resized without a check)."""
    if cython.compiled:
        n: cython.Py_ssize_t = len(column)
        carray.resize_smart(column, n + 1)
        column.data.as_longlongs[n] = value
    else:
        column.append(value)


@cython.cfunc
@cython.inline
def _push32(column: carray.array, value: cython.int) -> None:
    if cython.compiled:
        n: cython.Py_ssize_t = len(column)
        carray.resize_smart(column, n + 1)
        column.data.as_ints[n] = value
    else:
        column.append(value)


@cython.cclass
class _Rows:
    """History rows of the commits applied in one call, added to State's CommitRows in one go
    (`flush`): adding them one by one through CommitRows.add cost as much as the rest."""

    ts: carray.array
    offset: carray.array
    lag: carray.array
    observed: carray.array
    partition: carray.array
    cluster: list[str]
    group: list[str]
    topic: list[str]

    def __init__(self) -> None:
        self.ts, self.offset = carray.array("q"), carray.array("q")
        self.lag, self.observed = carray.array("q"), carray.array("q")
        self.partition = carray.array("i")
        self.cluster, self.group, self.topic = [], [], []

    def flush(self, into: Any) -> None:
        """Append the rows to `into` (a CommitRows), column by column."""
        if not self.cluster:
            return
        into.ts.extend(self.ts)
        into.cluster.extend(self.cluster)
        into.group.extend(self.group)
        into.topic.extend(self.topic)
        into.partition.extend(self.partition)
        into.offset.extend(self.offset)
        into.lag.extend(self.lag)
        into.observed.extend(self.observed)


def history_fits(rows: Any) -> bool:
    """Are `rows`' columns what this code appends to (CommitRows' layout)?"""
    kinds = (("ts", "q"), ("partition", "i"), ("offset", "q"), ("lag", "q"), ("observed", "q"))
    for name, code in kinds:
        column = getattr(rows, name, None)
        if type(column) is not array or column.typecode != code:
            return False
    return all(type(getattr(rows, name, None)) is list for name in ("cluster", "group", "topic"))


@cython.cclass
class _Apply:
    """One call's settings, counter and outputs (State's, handed in)."""

    intervals: cython.Py_ssize_t
    min_distance: cython.longlong
    window_step: cython.longlong
    pauses: cython.bint
    pause_min: cython.longlong
    pause_cadences: cython.longlong
    seq: int
    dirty: dict[Any, None]
    rows: _Rows | None


@cython.cfunc
def _newest_log_end(log_end: dict[str, Any], topic: str, partition: object) -> tuple[cython.int, cython.longlong]:
    """(1, offset): the partition's newest log-end offset kept; (0, 0): none kept; (-1, 0): kept in
    a form this code does not read (the Python applies the commit)."""
    ends = log_end.get(topic)
    if ends is None:
        return 0, 0
    if type(ends) is not dict:
        return -1, 0
    le = ends.get(partition)
    if le is None:
        return 0, 0
    offsets = le.offsets
    if not _is_q(offsets):
        return -1, 0
    o: carray.array = offsets
    n: cython.Py_ssize_t = len(o)
    if n == 0:
        return 0, 0
    if cython.compiled:
        return 1, o.data.as_longlongs[n - 1]
    return 1, o[n - 1]


@cython.cfunc
def _apply_one(s: _Apply, clusters: dict[str, Any], ev: tuple[Any, ...]) -> cython.bint:
    """State._commit of one commit: True applied, False left to the Python (nothing changed)."""
    cluster, group, topic, partition = ev[0], ev[1], ev[2], ev[3]
    ts_obj = ev[6]
    ok1: cython.bint
    ok2: cython.bint
    ok3: cython.bint
    ok4: cython.bint
    offset: cython.longlong
    order: cython.longlong
    ts: cython.longlong
    observed: cython.longlong
    ok1, offset = _as_q(ev[4])
    ok2, order = _as_q(ev[5])
    ok3, ts = _as_q(ts_obj)
    ok4, observed = _as_q(ev[7])
    if not (ok1 and ok2 and ok3 and ok4) or offset < 0:
        return False  # State._commit refuses it (ValueError)
    if type(cluster) is not str or type(group) is not str or type(topic) is not str or type(partition) is not int:
        return False
    part: cython.int = 0
    if s.rows is not None:
        if not _MIN_I <= partition <= _MAX_I:  # CommitRows keeps partitions as int32
            return False
        part = partition
    cs = clusters.get(cluster)
    if cs is None:
        return False
    tombstones = cs.tombstones
    groups = cs.groups
    log_end = cs.log_end
    if type(tombstones) is not dict or type(groups) is not dict or type(log_end) is not dict:
        return False
    if tombstones and group in tombstones:
        return False  # a deleted group: the Python weighs the tombstone
    gs = groups.get(group)
    if gs is None or gs.deleted is not None:
        return False  # a new group, or one with offset tombstones
    windows = gs.windows
    if type(windows) is not dict:
        return False
    parts = windows.get(topic)
    if type(parts) is not dict:
        return False  # a new topic of the group
    arr_obj = parts.get(partition)
    if not _is_q(arr_obj):
        return False  # a new partition
    arr: carray.array = arr_obj
    size: cython.Py_ssize_t = len(arr)
    n: cython.Py_ssize_t = size // _F
    if size % _F != 0 or n == 0:
        return False
    if cython.compiled:
        a: cython.p_longlong = arr.data.as_longlongs
        newest_order: cython.longlong = a[(n - 1) * _F + _ORDER]
        newest_ts: cython.longlong = a[(n - 1) * _F + _TS]
        cadence_ts: cython.longlong = a[(n - 2) * _F + _TS] if n > 1 else 0
    else:
        newest_order = arr[(n - 1) * _F + _ORDER]
        newest_ts = arr[(n - 1) * _F + _TS]
        cadence_ts = arr[(n - 2) * _F + _TS] if n > 1 else 0
    if order <= newest_order:
        return False  # a replayed or late commit: the Python places it
    found: cython.int
    newest: cython.longlong
    found, newest = _newest_log_end(log_end, topic, partition)
    if found < 0:
        return False
    lag: cython.longlong = _NO_LAG
    if found:
        lag = 0 if newest < offset else newest - offset  # offset >= 0: no overflow
    # What else changes is read and checked before the window changes, so that an unexpected type
    # leaves nothing half done (the Python then applies the commit).
    last = gs.last_commit
    if type(last) is not int:
        return False
    newer: cython.bint = ts_obj > last
    if newer and s.pauses:
        # a group silence of pause-min and more than `cadences` of this partition's newest commit
        # intervals (lagd.state.pauses; State._commit asks the same): the Python checks for a pause
        if not _q(last):
            return False
        newest_ts_obj: int = newest_ts
        cadence = newest_ts_obj - cadence_ts if n > 1 else 0
        gap = ts_obj - last
        if gap >= s.pause_min and gap > s.pause_cadences * cadence:
            return False
    newest_too: cython.bint = False
    if newer:
        nc = cs.newest_commit
        if nc is not None and type(nc) is not int:
            return False
        newest_too = nc is None or ts_obj > nc
    # The window as State._commit leaves it.
    if s.min_distance > 0 and ts >= newest_ts and _less_apart(ts, newest_ts, s.min_distance):
        # min-distance: the newest entry takes the new offset, order and lag, keeps its time
        if cython.compiled:
            a[(n - 1) * _F + _OFFSET] = offset
            a[(n - 1) * _F + _ORDER] = order
            a[(n - 1) * _F + _LAG] = lag
        else:
            arr[(n - 1) * _F + _OFFSET] = offset
            arr[(n - 1) * _F + _ORDER] = order
            arr[(n - 1) * _F + _LAG] = lag
    else:
        _append_entry(s, arr, n, offset, order, ts, observed, lag)
    # the group's and the cluster's newest commit times, the change counters, the dirty window
    if newer:
        gs.last_commit = ts_obj
    if newest_too:
        cs.newest_commit = ts_obj
    s.seq += 1
    gs.seq = s.seq
    key = (cluster, group, topic, partition)
    if cython.compiled:
        # Three strs and an int hold no reference back: out of the collector's sight, as its first
        # pass would put it, so the dirty dict and the drained windows keyed by it stay untracked
        # too (State._dirty_windows).
        PyObject_GC_UnTrack(key)  # type: ignore[name-defined]  # noqa: F821  (apply.pxd)
    s.dirty[key] = None
    rows = s.rows
    if rows is not None:
        _push(rows.ts, ts)
        rows.cluster.append(cluster)
        rows.group.append(group)
        rows.topic.append(topic)
        _push32(rows.partition, part)
        _push(rows.offset, offset)
        _push(rows.lag, lag)  # the newest entry holds this commit whichever branch ran
        _push(rows.observed, observed)
    return True


@cython.cfunc
def _append_entry(
    s: _Apply,
    arr: carray.array,
    n: cython.Py_ssize_t,
    offset: cython.longlong,
    order: cython.longlong,
    ts: cython.longlong,
    observed: cython.longlong,
    lag: cython.longlong,
) -> None:
    """A new newest entry: the second newest dropped when window-step thins it (too close to its
    elder), the oldest dropped past `intervals`. In place where the length stays (a full window,
    every commit at steady state)."""
    m: cython.Py_ssize_t = n
    if cython.compiled:
        a: cython.p_longlong = arr.data.as_longlongs
        if m >= 3 and s.window_step and _less_apart(a[(m - 2) * _F + _TS], a[(m - 3) * _F + _TS], s.window_step):
            memmove(a + (m - 2) * _F, a + (m - 1) * _F, 8 * _F)
            m -= 1
        if m >= s.intervals:
            drop: cython.Py_ssize_t = m - s.intervals + 1
            memmove(a, a + drop * _F, 8 * _F * (m - drop))
            m -= drop
        if m < n:  # room: write it in place, then cut what is left over
            e: cython.p_longlong = a + m * _F
            e[_OFFSET], e[_ORDER], e[_TS], e[_OBSERVED], e[_LAG] = offset, order, ts, observed, lag
            if m + 1 < n:
                del arr[(m + 1) * _F :]
            return
        arr.extend((offset, order, ts, observed, lag))  # checks exports, as the array's methods do
        return
    if m >= 3 and s.window_step and arr[(m - 2) * _F + _TS] - arr[(m - 3) * _F + _TS] < s.window_step:
        del arr[(m - 2) * _F : (m - 1) * _F]
        m -= 1
    if m >= s.intervals:
        del arr[: (m - s.intervals + 1) * _F]
    arr.extend((offset, order, ts, observed, lag))


def apply_commits(
    clusters: dict,  # type: ignore[type-arg]  # unparameterised: Cython checks an exact dict
    events: list,  # type: ignore[type-arg]
    start: cython.Py_ssize_t,
    commit: type,
    intervals: cython.Py_ssize_t,
    min_distance_ms: cython.longlong,
    window_step_ms: cython.longlong,
    pauses: Any,
    seq: Any,
    dirty: Any,
    history: Any,
) -> tuple[int, int]:
    """State._commit for each event from events[start] on, up to the first one only the Python
    applies: (its index, len(events) when none; the change counter after the commits applied).
    `pauses` is State.pause_settings, `seq` State's change counter, `dirty` its dirty windows and
    `history` its CommitRows, or None when it records no history."""
    if not issubclass(commit, tuple):
        raise TypeError("apply_commits: commit a named tuple type")
    s = _Apply()
    s.intervals, s.min_distance, s.window_step = intervals, min_distance_ms, window_step_ms
    s.pauses = pauses is not None
    if s.pauses:
        if not (_q(pauses.min_ms) and _q(pauses.cadences)):
            return start, seq  # settings of another kind or past int64: the Python applies
        s.pause_min, s.pause_cadences = pauses.min_ms, pauses.cadences
    if s.intervals < 1 or start < 0:
        raise ValueError("apply_commits: start must be >= 0 and intervals >= 1")
    if history is not None and not history_fits(history):
        return start, seq  # history columns of another layout: the Python applies
    if type(seq) is not int or type(dirty) is not dict:
        return start, seq  # State of other types: the Python applies
    s.seq, s.dirty = seq, dirty
    s.rows = _Rows() if history is not None else None
    i: cython.Py_ssize_t = start
    stop: cython.Py_ssize_t = len(events)
    try:
        while i < stop:
            ev = events[i]
            if type(ev) is not commit or len(ev) != 8 or not _apply_one(s, clusters, cython.cast(tuple, ev)):
                break
            i += 1
    finally:  # the rows of every commit applied, even when one failed (it is applied again, then a replay)
        if s.rows is not None:
            s.rows.flush(history)
    return i, s.seq


def drain_windows(
    clusters: dict,  # type: ignore[type-arg]  # unparameterised: Cython checks exact types
    keys: list,  # type: ignore[type-arg]
    out: dict,  # type: ignore[type-arg]
    n: cython.Py_ssize_t,
) -> int:
    """Drain.step's copy of up to `n` changed windows: pops keys (cluster, group, topic, partition)
    off the end of `keys` and sets out[key] to the window as window_bytes makes it (its int64s
    big-endian) or None where the state holds none. Stops early, the key left in place, at one it
    does not copy as the Python would; returns how many it copied."""
    copied: cython.Py_ssize_t = 0
    while copied < n and keys:
        key = keys[-1]
        if type(key) is not tuple or len(key) != 4:
            break
        data: object = None
        cs = clusters.get(key[0])
        if cs is not None:
            groups = cs.groups
            if type(groups) is not dict:
                break
            gs = groups.get(key[1])
            if gs is not None:
                windows = gs.windows
                if type(windows) is not dict:
                    break
                parts = windows.get(key[2])
                if parts is not None and type(parts) is not dict:
                    break
                arr = parts.get(key[3]) if parts else None
                if arr is not None:
                    if not _is_q(arr):
                        break
                    data = _big_endian(arr)
        out[key] = data  # type: ignore[assignment]
        keys.pop()
        copied += 1
    return copied


@cython.cfunc
def _big_endian(arr: carray.array) -> bytes:
    """The window's int64s big-endian (windows.window_bytes)."""
    if cython.compiled:
        size: cython.Py_ssize_t = len(arr)
        data: bytes = PyBytes_FromStringAndSize(cython.NULL, 8 * size)  # filled below: no one else holds it
        chars: cython.p_char = data
        to: cython.p_ulonglong = cython.cast(cython.p_ulonglong, chars)
        src: cython.p_ulonglong = arr.data.as_ulonglongs
        k: cython.Py_ssize_t
        if _SWAP:
            for k in range(size):
                to[k] = _bswap64(src[k])
        else:
            memmove(to, src, 8 * size)
        return data
    copy = arr[:]
    if _SWAP:
        copy.byteswap()
    data_py: bytes = copy.tobytes()
    return data_py


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _bswap64(v: cython.ulonglong) -> cython.ulonglong:
    """`v` byte-swapped (x86-64 and arm64 are little-endian; GCC and Clang make it one instruction)."""
    v = ((v & _LOW32) << 32) | ((v >> 32) & _LOW32)
    v = ((v & _LOW16) << 16) | ((v >> 16) & _LOW16)
    swapped: cython.ulonglong = ((v & _LOW8) << 8) | ((v >> 8) & _LOW8)
    return swapped
