"""The compiled reader of the offsets topic's usual record (lagd/ingest/_commits.c) reads exactly
as the Python it stands in for (`build_batch` through `events_from_record`, the limits and the
group filter), or leaves the record to it: random mixes of usual commits, every record of the
real vectors (tests/data/consumer_offsets_vectors.json), hostile bytes, and commits the limits
or the filter refuse are read both ways and must give the same events in the same order, the
same positions, counters, limits, filter and key cache.

Where a C compiler and Python's headers are on this machine the build must have compiled it:
otherwise these tests would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import hashlib
import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord

from lagd.core.model import Commit, Event, IngestCounters
from lagd.ingest import codec, offsets_topic
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.offsets_topic import build_batch
from lagd.ingest.records import ConsumerGroupOwners
from lagd.ingest.validate import MAX_OFFSET, EdgeLimits
from lagd.runtime import compiled
from lagd.sim.encode import encode_group_tombstone, encode_offset_commit, encode_offset_tombstone
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions

READ = offsets_topic._read_commits
needs_c = pytest.mark.skipif(READ is None, reason="no C compiler here: lagd reads every record in Python")
VECTORS = Path(__file__).parent / "data" / "consumer_offsets_vectors.json"
NOW = 1_700_000_000_000
AGE_MS = 7 * 86_400_000
AHEAD_MS = 86_400_000
COUNTS = {"orders": 8, "clicks": 3, "payments.v2": 50}
GROUPS = ["billing", "search-indexer", "denied-audit", "ünïcødé-grüppe", "g" * 300, "nul\x00group", "x", ""]
TOPICS = ["orders", "clicks", "payments.v2", "not-sampled-yet", "bad topic!", "t" * 300]


def test_the_compiled_reader_is_built_where_it_can_be() -> None:
    assert not can_compile() or READ is not None, (
        f"a C compiler and Python's headers are here but lagd.ingest._commits is not importable: {REINSTALL}"
    )


def test_lagd_no_extensions_reads_in_python() -> None:
    code = "from lagd.ingest import offsets_topic; print(offsets_topic._read_commits is None)"
    assert printed_without_extensions(code) == "True"


@needs_c
def test_a_build_of_another_source_is_not_used(tmp_path: Path) -> None:
    source = Path(offsets_topic.__file__).with_name("_commits.c")
    changed = tmp_path / "_commits.c"
    changed.write_bytes(source.read_bytes() + b"/* changed */\n")
    assert compiled.status("lagd.ingest._commits", source) == "compiled"
    assert compiled.status("lagd.ingest._commits", changed) == "stale"
    assert compiled.load("lagd.ingest._commits", changed) is None


def _record(offset: int, key: bytes | None, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "__consumer_offsets", 7, offset, NOW, 0, key, value, None, len(key or b""), len(value or b""), ()
    )


def _v3(key_group: bytes, topic: bytes, partition: int, offset: int, ts: int, meta: bytes = b"") -> tuple[bytes, bytes]:
    """A commit written byte by byte (raw names: invalid UTF-8 too), key type 1, value v3."""
    key = struct.pack(">hh", 1, len(key_group)) + key_group + struct.pack(">h", len(topic)) + topic
    key += struct.pack(">i", partition)
    value = struct.pack(">hqih", 3, offset, -1, len(meta)) + meta + struct.pack(">q", ts)
    return key, value


def _vectors() -> list[tuple[bytes | None, bytes | None]]:
    data = json.loads(VECTORS.read_text())
    vectors = data["vectors"] if isinstance(data, dict) else data
    return [
        (
            bytes.fromhex(v["key_hex"]) if v["key_hex"] is not None else None,
            bytes.fromhex(v["value_hex"]) if v["value_hex"] is not None else None,
        )
        for v in vectors
    ]


def _times(rng: random.Random) -> int:
    return rng.choice(
        [NOW - 5_000, NOW - 60_000, NOW - AGE_MS, NOW - AGE_MS - 1, NOW + AHEAD_MS, NOW + AHEAD_MS + 1, -1, 2**63 - 1]
        + [NOW - rng.randrange(AGE_MS)] * 6
    )


def _offset(rng: random.Random) -> int:
    return rng.choice([0, -1, -2, MAX_OFFSET, MAX_OFFSET - 1, -(2**63)] + [rng.randrange(10**9)] * 10)


def _topic_id(rng: random.Random, topic: str) -> bytes | None:
    """The topic's own id mostly (as Kafka 4 writes it), none, or another topic's."""
    return rng.choice([hashlib.md5(topic.encode()).digest()] * 4 + [None, hashlib.md5(b"other").digest()])


def _usual(rng: random.Random) -> tuple[bytes, bytes]:
    """A commit of value v3, or v4 as Kafka 4 writes every commit (with its topic's id)."""
    group, topic = rng.choice(GROUPS), rng.choice(TOPICS)
    partition = rng.choice([0, 1, 2, 7, 8, 49, 50, -1, 2**31 - 1])
    meta = rng.choice(["", "", "", "meta", "ü" * 40])
    version = rng.choice([3, 3, 4])
    return encode_offset_commit(
        group,
        topic,
        partition,
        _offset(rng),
        _times(rng),
        metadata=meta,
        key_version=rng.choice([0, 1, 1]),
        value_version=version,
        topic_id=_topic_id(rng, topic) if version == 4 else None,
    )


def _hostile(rng: random.Random) -> tuple[bytes | None, bytes | None]:
    key, value = _usual(rng)
    kind = rng.randrange(9)
    if kind == 0:
        return key[: rng.randrange(len(key))], value
    if kind == 1:
        return key, value[: rng.randrange(len(value))]
    if kind == 2:
        return key, value + rng.randbytes(rng.randrange(1, 9))  # trailing bytes: the Python ignores them
    if kind == 3:  # a negative or oversized length in the key, or in the metadata
        b = bytearray(key)
        b[2:4] = struct.pack(">h", rng.choice([-1, -32768, 32767, len(key)]))
        return bytes(b), value
    if kind == 4:
        b = bytearray(value)
        if b[1] == 4:  # the compact metadata length, a varint: null, long, unfinished, or past the end
            b[14:15] = rng.choice([b"\x00", b"\xff\xff\xff\xff\xff\x01", b"\x80", bytes([len(value)])])
        else:
            b[14:16] = struct.pack(">h", rng.choice([-1, -2, 32767, len(value)]))
        return key, bytes(b)
    if kind == 8 and value[1] == 4:  # v4's tagged fields: another tag, a second one, another size
        tags = rng.choice([b"\x01\x01\x02ab", b"\x02\x00\x10" + bytes(16) + b"\x01\x00", b"\x01\x00\x0f" + bytes(15)])
        cut = value.rindex(b"\x00\x10") - 1 if b"\x00\x10" in value[-19:] else len(value) - 1
        return key, value[:cut] + tags
    if kind == 5:  # names that are not UTF-8
        return _v3(b"\xff\xfe-group", rng.choice([b"orders", b"ord\xc3"]), 1, 5, NOW - 1)
    if kind == 6:
        return None, value
    if kind == 7:
        return rng.randbytes(rng.randrange(12)), rng.randbytes(rng.randrange(30))
    return key, b""


def _mix(rng: random.Random, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    vectors = _vectors()
    out = []
    for offset in range(1000, 1000 + n):
        roll = rng.random()
        if roll < 0.55:
            key, value = _usual(rng)
        elif roll < 0.65:
            key, value = rng.choice(vectors)
        elif roll < 0.72:
            group, topic = rng.choice(GROUPS[:4]), rng.choice(TOPICS[:3])
            key, value = encode_offset_commit(
                group, topic, 1, rng.randrange(10**6), NOW - 1000, value_version=rng.choice([0, 1, 2, 4])
            )
        elif roll < 0.76:
            key, value = encode_offset_tombstone(rng.choice(GROUPS), rng.choice(TOPICS), 1)
        elif roll < 0.78:
            key, value = encode_group_tombstone(rng.choice(GROUPS))
        else:
            key, value = _hostile(rng)
        out.append(_record(offset, key, value))
    return out


def _read(records: list[ConsumerRecord[bytes, bytes]], slices: list[int], max_group_bytes: int = 1024) -> Any:
    """Everything reading `records` (in slices of these sizes) gives and changes."""
    keys = codec.CommitKeys()
    groups = GroupFilter(deny="^denied")
    owners = ConsumerGroupOwners()  # v4 commits name topic ids to it
    counters = IngestCounters()
    limits = EdgeLimits("c1", max_group_bytes, AGE_MS, AHEAD_MS, partition_counts=dict(COUNTS))
    out: list[Event] = []
    positions = []
    i = 0
    for size in slices:
        positions.append(build_batch("c1", 7, records[i : i + size], NOW, groups, counters, out, owners, limits, keys))
        i += size
    types = [type(e) for e in out]
    return (
        out,
        types,
        positions,
        dataclasses.asdict(counters),
        dataclasses.asdict(limits),
        groups.cache,
        keys.known,
        owners.topic_names,
    )


def _both(monkeypatch: pytest.MonkeyPatch, records: list[Any], slices: list[int], **kw: Any) -> tuple[Any, int]:
    """(what reading gives, compiled then Python, asserted equal; how many records the C read)."""
    read_by_c = 0

    def counting(*args: Any) -> int:
        nonlocal read_by_c
        assert READ is not None
        tally, before = args[16], args[16][0]
        try:
            stop: int = READ(*args)
            return stop
        finally:
            read_by_c += tally[0] - before

    monkeypatch.setattr(offsets_topic, "_read_commits", counting)
    fast = _read(records, slices, **kw)
    monkeypatch.setattr(offsets_topic, "_read_commits", None)
    slow = _read(records, slices, **kw)
    assert fast == slow
    return fast, read_by_c


@needs_c
@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_reader_reads_as_the_python(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    records = _mix(rng, 3000)
    slices = []
    left = len(records)
    while left:
        slices.append(min(left, rng.choice([1, 2, 7, 50, 500])))
        left -= slices[-1]
    (out, _, positions, counters, *_), read_by_c = _both(monkeypatch, records, slices)
    commits = [e for e in out if type(e) is Commit]
    assert len(commits) > 300 and counters["rejected"] and counters["decode_errors"] and counters["filtered_groups"]
    assert positions[-1] == records[-1].offset + 1
    # the C read a good share of the commits (the rest: other value versions, the vectors, and a
    # group or topic the Python met first)
    assert read_by_c > len(commits) // 3


@needs_c
def test_a_run_of_usual_commits_is_read_by_the_c_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first commit of a group and topic (the Python checks the topic's name once),
    every later one is the C's, filtered ones included, and equal to the Python's."""
    records = [_record(0, *encode_offset_commit("billing", "orders", 1, 5, NOW - 10))]
    for i in range(1, 400):
        group = "denied-x" if i % 3 == 0 else "billing"
        records.append(_record(i, *encode_offset_commit(group, "orders", i % 8, i, NOW - 10)))
    (out, *_), read_by_c = _both(monkeypatch, records, [1, 399])
    assert len(out) == 1 + 266 + 2  # commits, then a position per slice
    assert read_by_c == 399  # all but the first (the Python checks the topic's name once)


@needs_c
@pytest.mark.parametrize("max_group_bytes", [0, 3, 4, 7, 8, 1024, -4])
def test_the_group_name_limit_holds_at_its_edges(monkeypatch: pytest.MonkeyPatch, max_group_bytes: int) -> None:
    records = [_record(0, *encode_offset_commit("warm", "orders", 0, 1, NOW - 10))]
    records += [_record(i, *encode_offset_commit("g" * i, "orders", 0, i, NOW - 10)) for i in range(1, 4)]
    records += [_record(i + 4, *encode_offset_commit("é" * i, "orders", 0, i, NOW - 10)) for i in range(1, 4)]
    (out, *_), read_by_c = _both(monkeypatch, records, [1, len(records) - 1], max_group_bytes=max_group_bytes)
    # the C reads a name the short path passes (4 bytes a character at most), the Python the rest
    assert read_by_c == sum(1 for e in out[1:] if type(e) is Commit and len(e.group) * 4 <= max_group_bytes)


@needs_c
def test_the_c_reads_every_usual_commit_the_limits_pass_up_to_their_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-back answers as the Python does, so reading alike is not enough: at each limit's
    edge the commit passes, and the C must be the one reading it."""
    edges = [
        ("billing", "orders", 0, 0, NOW - AGE_MS, ""),
        ("billing", "orders", 7, MAX_OFFSET - 1, NOW + AHEAD_MS, ""),
        ("g" * 256, "clicks", 2, 1, NOW, ""),
        ("billing", "orders", 3, 2, NOW, "some metadata"),
        ("ü" * 256, "orders", 3, 2, NOW, "ü" * 100),
    ]
    records = [_record(0, *encode_offset_commit("warm", "orders", 0, 1, NOW - 10))]
    records.append(_record(1, *encode_offset_commit("warm", "clicks", 0, 1, NOW - 10)))
    records += [
        _record(i + 2, *encode_offset_commit(g, t, p, o, ts, metadata=m)) for i, (g, t, p, o, ts, m) in enumerate(edges)
    ]
    (out, *_), read_by_c = _both(monkeypatch, records, [2, len(records) - 2])
    assert sum(type(e) is Commit for e in out) == len(records)
    assert read_by_c == len(edges)
    # one past each edge: refused by the Python, which the C leaves them to
    beyond = [
        ("billing", "orders", 0, 0, NOW - AGE_MS - 1, ""),
        ("billing", "orders", 8, 1, NOW, ""),
        ("billing", "orders", 0, MAX_OFFSET, NOW, ""),
        ("billing", "orders", 0, 1, NOW + AHEAD_MS + 1, ""),
        ("g" * 1025, "orders", 0, 1, NOW, ""),
    ]
    records[2:] = [
        _record(i + 2, *encode_offset_commit(g, t, p, o, ts, metadata=m))
        for i, (g, t, p, o, ts, m) in enumerate(beyond)
    ]
    (out, _, _, counters, *_), read_by_c = _both(monkeypatch, records, [2, len(records) - 2])
    assert read_by_c == 0 and sum(counters["rejected"].values()) == len(beyond)


def _args(records: list[Any], start: int = 0, **changed: Any) -> list[Any]:
    """read_commits' arguments for `records` under the test's limits, some of them changed."""
    values = dict(
        records=records,
        start=start,
        out=[],
        keys={},
        keys_max=1 << 18,
        allowed={},
        allows=GroupFilter().allows,
        partition_counts=dict(COUNTS),
        topics_ok={"orders"},
        max_group_bytes=1024,
        max_offset=MAX_OFFSET,
        oldest=NOW - AGE_MS,
        newest=NOW + AHEAD_MS,
        cluster="c1",
        observed=NOW,
        commit=Commit,
        tally=[0, 0],
        topic_names=None,
    )
    unknown = set(changed) - set(values)
    assert not unknown, unknown
    values.update(changed)  # in place: the arguments keep their order
    return list(values.values())


@needs_c
def test_read_commits_stops_at_the_first_record_it_leaves_to_the_python() -> None:
    assert READ is not None
    usual = encode_offset_commit("billing", "orders", 1, 5, NOW - 10)
    records = [_record(10, *usual), _record(11, *encode_offset_tombstone("billing", "orders", 1)), _record(12, *usual)]
    keys: dict[bytes, codec.KeyFields] = {}
    out: list[Event] = []
    tally = [0, 0]
    assert READ(*_args(records, 0, out=out, keys=keys, tally=tally, allowed={"billing": True})) == 1
    assert out == [Commit("c1", "billing", "orders", 1, 5, 10, NOW - 10, NOW)] and type(out[0]) is Commit
    assert READ(*_args(records, 2, out=out, keys=keys, tally=tally, allowed={"billing": True})) == 3
    assert READ(*_args(records, 3, out=out, keys=keys, tally=tally)) == 3
    assert tally == [2, 0]
    assert keys == {usual[0]: ("billing", "orders", 1, 1)}
    # built as the Python builds it: equal, and hashed alike
    assert hash(out[0]) == hash(Commit("c1", "billing", "orders", 1, 5, 10, NOW - 10, NOW))


@needs_c
def test_read_commits_bounds_the_key_cache() -> None:
    assert READ is not None
    records = [_record(i, *encode_offset_commit(f"g{i}", "orders", 1, 5, NOW - 10)) for i in range(10)]
    out: list[Event] = []
    keys: dict[bytes, codec.KeyFields] = {}
    assert READ(*_args(records, out=out, keys=keys, keys_max=4)) == 10 and len(out) == 10
    # full at 4, the oldest (4 // 64 + 1 = 1) dropped before each new one: the newest 4 stay
    assert list(keys) == [r.key for r in records[6:]]


def test_the_python_bounds_the_key_cache_the_same_way() -> None:
    keys = [encode_offset_commit(f"g{i}", "orders", 1, 5, NOW - 10)[0] for i in range(10)]
    known = codec.CommitKeys(max_keys=4)
    for key in keys:
        known.fields(key)
    assert list(known.known) == keys[6:]


@needs_c
def test_read_commits_asks_the_filter_for_a_group_not_judged_yet() -> None:
    """GroupFilter.allows reads None in its cache as not judged yet; so does the C."""
    assert READ is not None
    records = [_record(0, *encode_offset_commit("billing", "orders", 1, 5, NOW - 10))]
    groups = GroupFilter(deny="^nothing")
    groups.cache["billing"] = None  # type: ignore[assignment]
    tally = [0, 0]
    out: list[Event] = []
    assert READ(*_args(records, out=out, allowed=groups.cache, allows=groups.allows, tally=tally)) == 1
    assert len(out) == 1 and tally == [1, 0] and groups.cache["billing"] is True


@needs_c
def test_what_was_read_is_counted_when_a_record_raises() -> None:
    assert READ is not None
    records = [_record(i, *encode_offset_commit(g, "orders", 1, 5, NOW - 10)) for i, g in enumerate("aab")]

    def allows(group: str) -> bool:
        if group == "b":
            raise RuntimeError("a filter that fails")
        return True

    out: list[Event] = []
    tally = [0, 0]
    with pytest.raises(RuntimeError):
        READ(*_args(records, out=out, allows=allows, tally=tally))
    assert len(out) == 2 and tally == [2, 0]


@needs_c
def test_read_commits_refuses_what_it_cannot_read() -> None:
    assert READ is not None
    records = [_record(0, *encode_offset_commit("billing", "orders", 1, 5, NOW - 10))]
    assert READ(*_args(records)) == 1
    with pytest.raises(TypeError):
        READ(*_args(records)[:16])
    Short = collections.namedtuple("Short", "a b c")
    bad_values: list[tuple[str, Any]] = [
        ("records", tuple(records)),
        ("out", ()),
        ("keys", []),
        ("topics_ok", ["orders"]),
        ("cluster", b"c1"),
        ("observed", float(NOW)),
        ("commit", dict),
        ("commit", 3),
        ("commit", tuple),
        ("commit", os.stat_result),  # a C struct sequence: it frees items by its own count
        ("commit", Short),
        ("tally", [0]),
        ("tally", (0, 0)),
        ("keys_max", 4.0),
        ("max_offset", True),
    ]
    for name, bad in bad_values:
        with pytest.raises(TypeError):
            READ(*_args(records, **{name: bad}))
    for name, bad in [("start", -1), ("keys_max", -1)]:
        with pytest.raises(IndexError):
            READ(*_args(records, **{name: bad}))
    with pytest.raises(OverflowError):
        READ(*_args(records, max_offset=2**64))


@needs_c
def test_records_that_are_not_aiokafkas_are_left_to_the_python() -> None:
    """A record without the attributes, or of other types, is the Python's to judge (as before);
    an attribute that fails otherwise than by its absence fails the read."""
    assert READ is not None

    class Odd:
        key = bytearray(b"\x00\x01")
        value = b"\x00\x03"
        offset = 1

    class Failing:
        key = b"\x00\x01"

        @property
        def value(self) -> bytes:
            raise KeyError("a record that fails")

    for rec in [object(), Odd(), _record(0, b"\x00\x01", None)]:
        assert READ(*_args([rec], partition_counts={}, topics_ok=set())) == 0
    with pytest.raises(KeyError):
        READ(*_args([Failing()]))


@needs_c
def test_limits_the_c_cannot_hold_leave_every_record_to_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Limits past int64, or not plain ints, and a cluster name not a plain str: the Python reads."""
    records = [_record(0, *encode_offset_commit("billing", "orders", 1, 5, NOW - 10))] * 3
    groups, counters = GroupFilter(), IngestCounters()
    for limits, observed in [
        (EdgeLimits("c1", 1024, -(2**64), AHEAD_MS), NOW),
        (EdgeLimits("c1", 1024, AGE_MS, AHEAD_MS), 2**64),
        (EdgeLimits("c1", 1024.0, AGE_MS, AHEAD_MS), NOW),  # type: ignore[arg-type]
    ]:
        assert offsets_topic._usual_commits("c1", observed, groups, counters, limits, codec.CommitKeys()) is None
    _both(monkeypatch, records, [3], max_group_bytes=-(2**70))


@needs_c
def test_commits_of_str_and_int_are_out_of_the_collectors_sight() -> None:
    """Hundreds of Commits wait between the reader and apply at any time, and most commits at 1M
    group-partitions add a key to the reader's bounded cache: made of str and int alone (the C
    reads no other), it leaves both untracked, as CPython leaves such plain tuples; the Commits
    are the ones the Python makes."""
    assert READ is not None
    records = [_record(i, *encode_offset_commit("billing", "orders", i % 4, i, NOW - 10)) for i in range(1, 9)]
    out: list[Event] = []
    assert READ(*_args(records, 0, out=out, allowed={"billing": True})) == 8
    assert len(out) == 8 and all(type(e) is Commit for e in out)
    assert not any(gc.is_tracked(e) for e in out)
    keys: dict[bytes, Any] = {}
    assert READ(*_args(records, 0, keys=keys, allowed={"billing": True})) == 8
    assert len(keys) == 4 and not any(gc.is_tracked(k) for k in keys.values())  # the key cache's fields too
    assert not gc.is_tracked(keys)
    assert out[3] == Commit("c1", "billing", "orders", 0, 4, 4, NOW - 10, NOW)
    assert gc.is_tracked(Commit("c1", "billing", "orders", 0, 4, 4, NOW - 10, NOW))  # the Python's, as CPython makes it


@needs_c
def test_kafka_4s_v4_commits_are_read_by_the_c_once_their_topic_id_is_named() -> None:
    """Kafka 4 writes every commit as value v4 with its topic's id: the C reads them, except one
    whose id the KIP-848 fold does not know by that name yet (the Python learns it)."""
    assert READ is not None
    tid = hashlib.md5(b"orders").digest()
    v4 = encode_offset_commit("billing", "orders", 1, 5, NOW - 10, value_version=4, topic_id=tid)
    plain_v4 = encode_offset_commit("billing", "orders", 1, 6, NOW - 10, value_version=4)
    records = [_record(10, *v4), _record(11, *plain_v4)]
    out: list[Event] = []
    assert READ(*_args(records, 0, out=out, allowed={"billing": True})) == 2  # no fold: nothing to learn
    assert [e.offset for e in out] == [5, 6]  # type: ignore[union-attr]
    names: dict[bytes, str] = {}
    assert READ(*_args(records, 0, out=[], allowed={"billing": True}, topic_names=names)) == 0
    names[tid] = "orders"
    assert READ(*_args(records, 0, out=[], allowed={"billing": True}, topic_names=names)) == 2
    names[tid] = "payments"  # the id now names another topic: the Python decides
    assert READ(*_args(records, 0, out=[], allowed={"billing": True}, topic_names=names)) == 0
