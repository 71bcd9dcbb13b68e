"""Properties of the decoder: any bytes give a record or a DecodeError, never anything else;
event building never raises; encoded commits and group metadata decode to what was encoded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lagd.core.model import Commit, GroupMembers, IngestCounters, PartitionOwner
from lagd.ingest.codec import (
    DecodeError,
    GroupMetadata,
    OffsetCommit,
    Record,
    decode,
    decode_assignment,
    decode_subscription,
    decode_value,
)
from lagd.ingest.records import ConsumerGroupOwners, events_from_record
from lagd.sim.encode import SimMember, encode_group_metadata, encode_offset_commit

RECORD_TYPES = get_args(Record)
VECTORS = json.loads((Path(__file__).parent / "data" / "consumer_offsets_vectors.json").read_text("utf-8"))["vectors"]
SAMPLES: list[tuple[bytes, bytes | None]] = [
    (bytes.fromhex(v["key_hex"]), None if v["value_hex"] is None else bytes.fromhex(v["value_hex"]))
    for v in VECTORS
    if v["key_hex"] is not None
]
PAYLOADS: list[bytes] = [bytes.fromhex(v["value_hex"]) for v in VECTORS if v["value_hex"]]
KIP848 = ConsumerGroupOwners()  # shared across examples: state built from garbage must not break
PROPS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def mutate(base: bytes, seed: int) -> bytes:
    """`base` with 1-4 byte-level edits chosen by `seed`: flips, insertions, deletions,
    truncation, and extreme values written where lengths and counts usually sit.

    Edits come from a seeded RNG rather than from hypothesis draws: one draw per example
    keeps 10,000 examples within seconds, and a failure still names its seed.
    """
    rnd = random.Random(seed)
    data = bytearray(base)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.choice(("flip", "insert", "delete", "truncate", "extreme"))
        at = rnd.randrange(len(data)) if data else 0
        if op == "flip" and data:
            data[at] ^= rnd.randint(1, 255)
        elif op == "insert":
            data[at:at] = rnd.randbytes(rnd.randint(1, 8))
        elif op == "delete" and data:
            del data[at : at + rnd.randint(1, 8)]
        elif op == "truncate":
            del data[at:]
        elif op == "extreme" and data:
            data[at : at + 4] = rnd.choice((b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00", b"\xff"))
    return bytes(data)


def mutated_record() -> st.SearchStrategy[tuple[bytes, bytes | None]]:
    def build(pick: tuple[int, int, int]) -> tuple[bytes, bytes | None]:
        index, which, seed = pick
        key, value = SAMPLES[index]
        if which != 1:
            key = mutate(key, seed)
        if value is not None and which != 0:
            value = mutate(value, seed + 1)
        return key, value

    return st.tuples(st.integers(0, len(SAMPLES) - 1), st.integers(0, 2), st.integers(0, 2**32)).map(build)


def random_record() -> st.SearchStrategy[tuple[bytes, bytes | None]]:
    """Random keys (half of them starting with a plausible record type) and values."""

    def build(seed: int) -> tuple[bytes, bytes | None]:
        rnd = random.Random(seed)
        key = rnd.randbytes(rnd.randint(0, 40))
        if rnd.random() < 0.5:
            key = rnd.randint(-2, 26).to_bytes(2, "big", signed=True) + key
        value = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 80))
        return key, value

    return st.integers(0, 2**32).map(build)


def assert_decodes_or_rejects(key: bytes, value: bytes | None) -> None:
    try:
        rec = decode(key, value)
    except DecodeError as exc:
        assert exc.reason and str(exc)
        return
    assert isinstance(rec, RECORD_TYPES)


# The main property: 6,000 mutated vectors + 4,000 random records = 10,000 examples.


@settings(PROPS, max_examples=6_000)
@given(mutated_record())
def test_mutated_vectors_decode_or_raise_decode_error(record: tuple[bytes, bytes | None]) -> None:
    assert_decodes_or_rejects(*record)


@settings(PROPS, max_examples=4_000)
@given(random_record())
def test_random_bytes_decode_or_raise_decode_error(record: tuple[bytes, bytes | None]) -> None:
    assert_decodes_or_rejects(*record)


@settings(PROPS, max_examples=1_000)
@given(
    st.one_of(
        st.tuples(st.sampled_from(PAYLOADS), st.integers(0, 2**32)).map(lambda t: mutate(*t)), st.binary(max_size=64)
    ),
    st.integers(-1, 24),
)
def test_payload_decoders_decode_or_raise_decode_error(payload: bytes, record_type: int) -> None:
    for fn in (decode_assignment, decode_subscription, lambda p: decode_value(record_type, p)):
        try:
            fn(payload)
        except DecodeError:
            pass


@settings(PROPS, max_examples=1_000)
@given(st.one_of(mutated_record(), random_record(), st.tuples(st.none(), st.none())))
def test_events_from_record_never_raises_and_counts_once(record: tuple[Any, bytes | None]) -> None:
    counters = IngestCounters()
    events = events_from_record("c", record[0], record[1], 5, 9, counters)
    assert isinstance(events, list)
    assert sum(counters.records_by_type.values()) + sum(counters.decode_errors.values()) == 1
    assert isinstance(events_from_record("c", record[0], record[1], 5, 9, counters, kip848=KIP848), list)


# --- round trips -----------------------------------------------------------------------

names = st.text(max_size=30)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@settings(PROPS, max_examples=300)
@given(
    names,
    names,
    int32,
    int64,
    int64,
    st.text(max_size=300),
    int32,
    st.integers(0, 4),
    int64,
    st.sampled_from([0, 1]),
    st.one_of(st.none(), st.binary(min_size=16, max_size=16).filter(any)),
)
def test_commit_round_trip(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    ts: int,
    metadata: str,
    epoch: int,
    version: int,
    expire: int,
    key_version: int,
    topic_id: bytes | None,
) -> None:
    key, value = encode_offset_commit(
        group, topic, partition, offset, ts, metadata, epoch, version, expire, key_version, topic_id
    )
    rec = decode(key, value)
    assert rec == OffsetCommit(
        group,
        topic,
        partition,
        offset,
        epoch if version >= 3 else -1,
        metadata,
        ts,
        expire if version == 1 else -1,
        key_version,
        version,
        topic_id if version == 4 else None,
    )
    counters = IngestCounters()
    assert events_from_record("c", key, value, 3, 4, counters) == [
        Commit("c", group, topic, partition, offset, 3, ts, 4)
    ]


members_st = st.lists(
    st.builds(
        SimMember,
        member_id=names,
        client_id=names,
        client_host=names,
        assignment=st.dictionaries(names, st.lists(int32, max_size=6), max_size=3),
        group_instance_id=st.one_of(st.none(), names),
        rebalance_timeout=int32,
        session_timeout=int32,
    ),
    max_size=4,
)


@settings(PROPS, max_examples=200)
@given(
    names,
    st.sampled_from(["consumer", "connect", ""]),
    int32,
    st.one_of(st.none(), names),
    st.one_of(st.none(), names),
    members_st,
    st.integers(0, 4),
    int64,
)
def test_group_metadata_round_trip(
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    members: list[SimMember],
    version: int,
    cst: int,
) -> None:
    key, value = encode_group_metadata(group, protocol_type, generation, protocol, leader, members, version, cst)
    rec = decode(key, value)
    assert isinstance(rec, GroupMetadata)
    assert (rec.group, rec.protocol_type, rec.generation, rec.protocol, rec.leader, rec.value_version) == (
        group,
        protocol_type,
        generation,
        protocol,
        leader,
        version,
    )
    assert rec.current_state_timestamp == (cst if version >= 2 else -1)
    assert len(rec.members) == len(members)
    for got, want in zip(rec.members, members, strict=True):
        assert (got.member_id, got.client_id, got.client_host, got.session_timeout) == (
            want.member_id,
            want.client_id,
            want.client_host,
            want.session_timeout,
        )
        assert got.group_instance_id == (want.group_instance_id if version >= 3 else None)
        assert got.rebalance_timeout == (want.rebalance_timeout if version >= 1 else -1)
        if protocol_type == "consumer":
            assert got.assignment is not None
            assert dict(got.assignment.partitions) == {t: tuple(p) for t, p in want.assignment.items()}
        else:
            assert got.assignment is None
    (event,) = events_from_record("c", key, value, 11, 0, IngestCounters())
    assert isinstance(event, GroupMembers)
    if protocol_type == "consumer":
        want_owners = sorted(
            (t, p, m.client_host, m.client_id, m.member_id)
            for m in members
            for t, ps in m.assignment.items()
            for p in ps
        )
        assert sorted((o.topic, o.partition, o.host, o.client_id, o.member_id) for o in event.owners) == want_owners
        assert all(type(o) is PartitionOwner for o in event.owners)
    else:
        assert event.owners == ()
