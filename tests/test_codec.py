"""The offsets-topic decoder and encoder against the published vectors, and event building."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lagd.core.model import Commit, GroupDeleted, GroupMembers, IngestCounters, OffsetDeleted, PartitionOwner
from lagd.ingest.codec import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignment,
    ConsumerGroupMemberMetadata,
    ConsumerGroupMetadata,
    ConsumerGroupPartitionMetadata,
    ConsumerGroupTargetAssignmentMember,
    ConsumerGroupTargetAssignmentMetadata,
    ConsumerGroupTombstone,
    DecodeError,
    GroupMetadata,
    GroupRecord,
    GroupTombstone,
    Member,
    OffsetCommit,
    OffsetTombstone,
    SkippedRecord,
    Subscription,
    TopicAssignment,
    decode,
    decode_assignment,
    decode_control_record,
    decode_subscription,
    decode_value,
    uuid_str,
)
from lagd.ingest.records import ConsumerGroupOwners, events_from_record
from lagd.sim.encode import (
    SimMember,
    encode_assignment,
    encode_group_metadata,
    encode_group_tombstone,
    encode_offset_commit,
    encode_offset_tombstone,
    java_string_hash,
    offsets_partition_for,
)
from lagd.state.windows import offsets_partition

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "consumer_offsets_vectors.json").read_text(encoding="utf-8")
)["vectors"]
BY_NAME = {v["name"]: v for v in VECTORS}


def _hex(v: str | None) -> bytes | None:
    return None if v is None else bytes.fromhex(v)


def _opt_hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


# --- records in the vectors' own naming -------------------------------------------------


def _tps(pairs: tuple[tuple[str, tuple[int, ...]], ...]) -> list[dict[str, Any]]:
    return [{"topic": t, "partitions": list(p)} for t, p in pairs]


def assignment_fields(a: Assignment) -> dict[str, Any]:
    return {"version": a.version, "assigned_partitions": _tps(a.partitions), "user_data": _opt_hex(a.user_data)}


def subscription_fields(s: Subscription) -> dict[str, Any]:
    return {
        "version": s.version,
        "topics": list(s.topics),
        "user_data": _opt_hex(s.user_data),
        "owned_partitions": _tps(s.owned_partitions),
        "generation_id": s.generation_id,
        "rack_id": s.rack_id,
    }


def member_fields(m: Member) -> dict[str, Any]:
    out: dict[str, Any] = {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout": m.rebalance_timeout,
        "session_timeout": m.session_timeout,
        "subscription_hex": m.subscription.hex(),
        "assignment_hex": m.assignment_bytes.hex(),
        "assignment": None if m.assignment is None else assignment_fields(m.assignment),
    }
    try:
        out["subscription"] = subscription_fields(decode_subscription(m.subscription))
    except DecodeError as exc:
        out["subscription"] = f"undecodable: {exc}"
    return out


def _tas(items: tuple[TopicAssignment, ...]) -> list[dict[str, Any]]:
    out = []
    for ta in items:
        d: dict[str, Any] = {"topic_id": uuid_str(ta.topic_id), "partitions": list(ta.partitions)}
        d["assignment_epochs"] = None if ta.assignment_epochs is None else list(ta.assignment_epochs)
        out.append(d)
    return out


def _classic(c: ClassicMemberMetadata | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "session_timeout_ms": c.session_timeout_ms,
        "supported_protocols": [{"name": n, "metadata_hex": m.hex()} for n, m in c.supported_protocols],
    }


def record_fields(rec: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(key fields, value fields) of a decoded record, named as in the vectors."""
    if isinstance(rec, OffsetCommit):
        key = {"key_version": rec.key_version, "group": rec.group, "topic": rec.topic, "partition": rec.partition}
        value = {
            "value_version": rec.value_version,
            "offset": rec.offset,
            "leader_epoch": rec.leader_epoch,
            "metadata": rec.metadata,
            "commit_timestamp": rec.commit_timestamp,
            "expire_timestamp": rec.expire_timestamp,
        }
        return key, value
    if isinstance(rec, OffsetTombstone):
        return {
            "key_version": rec.key_version,
            "group": rec.group,
            "topic": rec.topic,
            "partition": rec.partition,
        }, None
    if isinstance(rec, GroupTombstone):
        return {"key_version": 2, "group": rec.group}, None
    if isinstance(rec, GroupMetadata):
        return {"key_version": 2, "group": rec.group}, {
            "value_version": rec.value_version,
            "protocol_type": rec.protocol_type,
            "generation": rec.generation,
            "protocol": rec.protocol,
            "leader": rec.leader,
            "current_state_timestamp": rec.current_state_timestamp,
            "members": [member_fields(m) for m in rec.members],
        }
    if isinstance(rec, ConsumerGroupMetadata):
        return {"key_version": 3, "group": rec.group}, {
            "value_version": 0,
            "epoch": rec.epoch,
            "metadata_hash": rec.metadata_hash,
        }
    if isinstance(rec, ConsumerGroupPartitionMetadata):
        topics = [
            {
                "topic_id": uuid_str(t.topic_id),
                "topic_name": t.topic_name,
                "num_partitions": t.num_partitions,
                "partition_metadata": [{"partition": p, "racks": list(r)} for p, r in t.partition_racks],
            }
            for t in rec.topics
        ]
        return {"key_version": 4, "group": rec.group}, {"value_version": 0, "topics": topics}
    if isinstance(rec, ConsumerGroupMemberMetadata):
        return {"key_version": 5, "group": rec.group, "member_id": rec.member_id}, {
            "value_version": 0,
            "instance_id": rec.instance_id,
            "rack_id": rec.rack_id,
            "client_id": rec.client_id,
            "client_host": rec.client_host,
            "subscribed_topic_names": list(rec.subscribed_topic_names),
            "subscribed_topic_regex": rec.subscribed_topic_regex,
            "rebalance_timeout_ms": rec.rebalance_timeout_ms,
            "server_assignor": rec.server_assignor,
            "classic_member_metadata": _classic(rec.classic_member_metadata),
        }
    if isinstance(rec, ConsumerGroupTargetAssignmentMetadata):
        return {"key_version": 6, "group": rec.group}, {"value_version": 0, "assignment_epoch": rec.assignment_epoch}
    if isinstance(rec, ConsumerGroupTargetAssignmentMember):
        return {"key_version": 7, "group": rec.group, "member_id": rec.member_id}, {
            "value_version": 0,
            "topic_partitions": _tas(rec.topic_partitions),
        }
    if isinstance(rec, ConsumerGroupCurrentMemberAssignment):
        return {"key_version": 8, "group": rec.group, "member_id": rec.member_id}, {
            "value_version": 0,
            "member_epoch": rec.member_epoch,
            "previous_member_epoch": rec.previous_member_epoch,
            "state": rec.state,
            "assigned_partitions": _tas(rec.assigned_partitions),
            "partitions_pending_revocation": _tas(rec.partitions_pending_revocation),
        }
    raise AssertionError(f"unexpected record {rec!r}")


def assert_stated(expected: Any, actual: Any, path: str = "") -> None:
    """Every field the vector states equals ours (fields it omits are not compared)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for k, v in expected.items():
            assert k in actual, f"{path}.{k}: decoder has no such field"
            assert_stated(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_stated(e, a, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _value_type(decoded_value: dict[str, Any]) -> int:
    return 1 if "offset" in decoded_value else 2


RECORDS = [v for v in VECTORS if v["kind"] == "record"]


def test_vector_file_has_every_published_vector() -> None:
    assert len(VECTORS) == 53
    assert sum(1 for v in VECTORS if v.get("expect_strict_failure")) == 2
    assert {v["kind"] for v in VECTORS} == {
        "record",
        "control_record",
        "consumer_protocol_subscription",
        "consumer_protocol_assignment",
    }


@pytest.mark.parametrize("vec", [v for v in RECORDS if not v.get("expect_strict_failure")], ids=lambda v: v["name"])
def test_record_vector_decodes_to_stated_fields(vec: dict[str, Any]) -> None:
    key, value = _hex(vec["key_hex"]), _hex(vec["value_hex"])
    stated_key, stated_value = vec["decoded"]["key"], vec["decoded"]["value"]
    if key is None:
        assert value is not None
        rec = decode_value(_value_type(stated_value), value)
    else:
        rec = decode(key, value)
    got_key, got_value = record_fields(rec)
    if stated_key is not None:
        assert_stated(stated_key, got_key, "key")
    assert_stated(stated_value, got_value, "value")


@pytest.mark.parametrize("vec", [v for v in RECORDS if v.get("expect_strict_failure")], ids=lambda v: v["name"])
def test_broken_vector_is_a_decode_error(vec: dict[str, Any]) -> None:
    key, value = _hex(vec["key_hex"]), _hex(vec["value_hex"])
    assert value is not None
    with pytest.raises(DecodeError) as err:
        if key is None:
            decode_value(_value_type(vec["decoded"]["value"]), value)
        else:
            decode(key, value)
    assert err.value.reason == "truncated"
    if key is not None:  # the key alone is valid: the tombstone form decodes
        assert_stated(vec["decoded"]["key"], record_fields(decode(key, None))[0], "key")


@pytest.mark.parametrize("vec", [v for v in VECTORS if v["kind"] == "control_record"], ids=lambda v: v["name"])
def test_control_record_vector(vec: dict[str, Any]) -> None:
    key, value = bytes.fromhex(vec["key_hex"]), bytes.fromhex(vec["value_hex"])
    marker = decode_control_record(key, value)
    stated = vec["decoded"]
    assert marker.key_version == stated["control_key"]["control_key_version"]
    assert marker.control_type == stated["control_key"]["control_type"]
    assert marker.value_version == stated["end_txn_marker"]["version"]
    assert marker.coordinator_epoch == stated["end_txn_marker"]["coordinator_epoch"]
    # Outside a control batch its bytes are no valid coordinator record: never misread as one.
    with pytest.raises(DecodeError):
        decode(key, value)


@pytest.mark.parametrize(
    "vec", [v for v in VECTORS if v["kind"] == "consumer_protocol_subscription"], ids=lambda v: v["name"]
)
def test_subscription_vector(vec: dict[str, Any]) -> None:
    got = subscription_fields(decode_subscription(bytes.fromhex(vec["value_hex"])))
    assert_stated(vec["decoded"]["subscription"], got)


@pytest.mark.parametrize(
    "vec", [v for v in VECTORS if v["kind"] == "consumer_protocol_assignment"], ids=lambda v: v["name"]
)
def test_assignment_vector(vec: dict[str, Any]) -> None:
    payload = bytes.fromhex(vec["value_hex"])
    a = decode_assignment(payload)
    assert_stated(vec["decoded"]["assignment"], assignment_fields(a))
    assert encode_assignment(dict(a.partitions), a.version, a.user_data) == payload


def test_opaque_member_payloads_keep_the_member() -> None:
    vec = BY_NAME["kafka_formatter_group_key_v2_value_v4"]
    rec = decode(bytes.fromhex(vec["key_hex"]), bytes.fromhex(vec["value_hex"]))
    assert isinstance(rec, GroupMetadata)
    (member,) = rec.members
    assert member.assignment is None
    assert member.assignment_bytes == b"\x01\x02"
    assert member.subscription == b"\x00\x01"


def test_assignment_rules() -> None:
    body = bytes.fromhex("000000010003666f6f000000020000000000000002ffffffff")
    newer = decode_assignment(b"\x00\x07" + body + b"trailing")
    assert newer == Assignment(7, (("foo", (0, 2)),), None)
    with pytest.raises(DecodeError) as err:
        decode_assignment(b"\xff\xff" + body)
    assert err.value.reason == "bad_version"


def test_non_consumer_protocol_payloads_are_not_parsed() -> None:
    member = SimMember("m", "c", "h", {"t": [0]})
    key, value = encode_group_metadata("g", protocol_type="connect", members=[member])
    rec = decode(key, value)
    assert isinstance(rec, GroupMetadata)
    assert rec.members[0].assignment is None
    assert rec.members[0].assignment_bytes == encode_assignment({"t": [0]})


def test_corrupt_lengths_are_decode_errors() -> None:
    key, value = encode_offset_commit("g", "t", 0, 5, 1000, metadata="m")
    huge_meta = value[:14] + b"\x7f\xff" + value[16:]
    with pytest.raises(DecodeError) as err:
        decode(key, huge_meta)
    assert err.value.reason == "truncated"
    gkey, gvalue = encode_group_metadata("g", members=[("m", "c", "h", {"t": [0, 1]})])
    count_at = 2 + (2 + len("consumer")) + 4 + (2 + len("range")) + 2 + 8
    assert gvalue[count_at : count_at + 4] == b"\x00\x00\x00\x01"
    with pytest.raises(DecodeError) as err:
        decode(gkey, gvalue[:count_at] + b"\x7f\xff\xff\xff" + gvalue[count_at + 4 :])
    assert err.value.reason == "bad_length"
    with pytest.raises(DecodeError) as err:
        decode(b"\x00\x02\x00\x05ab", None)
    assert err.value.reason == "truncated"


def test_unknown_versions_and_types() -> None:
    key, value = encode_offset_commit("g", "t", 0, 5, 1000)
    with pytest.raises(DecodeError) as err:
        decode(key, b"\x00\x05" + value[2:])
    assert err.value.reason == "unknown_value_version"
    with pytest.raises(DecodeError) as err:
        decode(key, b"\xff\xfe" + value[2:])
    assert err.value.reason == "bad_version"
    assert decode(b"\x00\x11\x00\x02s1", b"\x00\x00\x01\x02") == GroupRecord(
        17, "streams_group_metadata", "s1", None, 0
    )
    assert decode(b"\x00\x63", b"whatever") == SkippedRecord(99, None)
    assert decode(b"\x00\x63\x00\x02s1", b"whatever") == SkippedRecord(99, "s1")
    assert decode(b"\x00\x0a\x00\x02s1\x00\x01m", None) == GroupRecord(
        10, "share_group_member_metadata", "s1", "m", None
    )
    with pytest.raises(DecodeError) as err:  # a share-group member key without its member
        decode(b"\x00\x0a\x00\x02s1", b"\x00\x00")
    assert err.value.reason == "truncated"
    with pytest.raises(DecodeError) as err:
        decode(b"\x00\x0b\x00\x02s1", b"\xff\xff")
    assert err.value.reason == "bad_version"
    assert decode(b"\x00\x05\x00\x02g1\x00\x02m1", None) == ConsumerGroupTombstone(5, "g1", "m1")
    assert decode(b"\x00\x03\x00\x02g1", b"\x00\x01\x00\x00\x00\x07\x00") == SkippedRecord(3, "g1")


def test_v4_commit_topic_id_tag_and_unknown_tags() -> None:
    tid = bytes(range(1, 17))
    key, value = encode_offset_commit("g", "t", 3, 42, 1000, value_version=4, topic_id=tid)
    rec = decode(key, value)
    assert isinstance(rec, OffsetCommit)
    assert (rec.offset, rec.topic_id, rec.commit_timestamp) == (42, tid, 1000)
    # A tag lagd does not know (tag 5, 3 bytes) is skipped by its size.
    extra = value[:-19] + b"\x02\x00\x10" + tid + b"\x05\x03abc"
    assert decode(key, extra) == rec
    long_meta = "x" * 4096  # a compact length that needs a 2-byte varint
    key, value = encode_offset_commit("g", "t", 3, 42, 1000, metadata=long_meta, value_version=4)
    got = decode(key, value)
    assert isinstance(got, OffsetCommit) and got.metadata == long_meta


# --- encoder: byte-exact against the vectors --------------------------------------------


@pytest.mark.parametrize(
    "vec",
    [v for v in RECORDS if not v.get("expect_strict_failure") and v["value_hex"] and "offset" in v["decoded"]["value"]],
    ids=lambda v: v["name"],
)
def test_encoder_reproduces_commit_vectors(vec: dict[str, Any]) -> None:
    value = bytes.fromhex(vec["value_hex"])
    rec = decode_value(1, value) if vec["key_hex"] is None else decode(bytes.fromhex(vec["key_hex"]), value)
    assert isinstance(rec, OffsetCommit)
    key_out, value_out = encode_offset_commit(
        rec.group,
        rec.topic,
        rec.partition,
        rec.offset,
        rec.commit_timestamp,
        metadata=rec.metadata,
        leader_epoch=rec.leader_epoch,
        value_version=rec.value_version,
        expire_timestamp=rec.expire_timestamp,
        key_version=rec.key_version,
        topic_id=rec.topic_id,
    )
    assert value_out == value
    if vec["key_hex"] is not None:
        assert key_out.hex() == vec["key_hex"]


@pytest.mark.parametrize(
    "vec",
    [v for v in RECORDS if v["value_hex"] and "protocol_type" in (v["decoded"]["value"] or {})],
    ids=lambda v: v["name"],
)
def test_encoder_reproduces_group_vectors(vec: dict[str, Any]) -> None:
    value = bytes.fromhex(vec["value_hex"])
    rec = decode_value(2, value) if vec["key_hex"] is None else decode(bytes.fromhex(vec["key_hex"]), value)
    assert isinstance(rec, GroupMetadata)
    members = [
        SimMember(
            m.member_id,
            m.client_id,
            m.client_host,
            group_instance_id=m.group_instance_id,
            rebalance_timeout=m.rebalance_timeout,
            session_timeout=m.session_timeout,
            subscription=m.subscription,
            assignment_bytes=m.assignment_bytes,
        )
        for m in rec.members
    ]
    key_out, value_out = encode_group_metadata(
        rec.group,
        protocol_type=rec.protocol_type,
        generation=rec.generation,
        protocol=rec.protocol,
        leader=rec.leader,
        members=members,
        value_version=rec.value_version,
        current_state_timestamp=rec.current_state_timestamp,
    )
    assert value_out == value
    if vec["key_hex"] is not None:
        assert key_out.hex() == vec["key_hex"]
    for m in rec.members:  # parsed assignments re-encode to the same payload
        if m.assignment is not None:
            a = m.assignment
            assert encode_assignment(dict(a.partitions), a.version, a.user_data) == m.assignment_bytes


def test_encoder_tombstones_match_vectors() -> None:
    assert encode_offset_tombstone("group-id", "foo", 1, key_version=0) == (
        bytes.fromhex(BY_NAME["kafka_formatter_offset_tombstone_key_v0"]["key_hex"]),
        None,
    )
    assert encode_group_tombstone("group-id") == (
        bytes.fromhex(BY_NAME["kafka_formatter_group_tombstone_key_v2"]["key_hex"]),
        None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_round_trip(version: int) -> None:
    members: list[SimMember | tuple[str, str, str, dict[str, list[int]]]] = [
        ("m-1", "client-1", "/10.0.0.1", {"orders": [0, 2], "events": [1]}),
        SimMember("m-2", "client-2", "/10.0.0.2", {"orders": [1]}, group_instance_id="static-2"),
    ]
    key, value = encode_group_metadata(
        "g", generation=4, leader="m-1", members=members, value_version=version, current_state_timestamp=77
    )
    rec = decode(key, value)
    assert isinstance(rec, GroupMetadata)
    assert (rec.group, rec.generation, rec.protocol, rec.leader, rec.value_version) == ("g", 4, "range", "m-1", version)
    assert rec.current_state_timestamp == (77 if version >= 2 else -1)
    assert [m.member_id for m in rec.members] == ["m-1", "m-2"]
    assert rec.members[1].group_instance_id == ("static-2" if version >= 3 else None)
    assert rec.members[0].assignment == Assignment(0, (("orders", (0, 2)), ("events", (1,))), None)
    assert decode_subscription(rec.members[0].subscription).topics == ("orders", "events")


# --- partitioning -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "java_hash", "partition"),
    [  # hashes and partitions printed by Java 17: s.hashCode(), Utils.abs(h) % 50
        ("hello", 99162322, 22),
        ("group-id", 506313513, 13),
        ("polygenelubricants", -(2**31), 0),
        ("sim-g1", -902351520, 20),
        ("zzzzzzzz", -1910022912, 12),
        ("ünïcødé-grüppe", -1229792406, 6),
        ("\U0001f600emoji", -1233692477, 27),
    ],
)
def test_offsets_partition_matches_java(group: str, java_hash: int, partition: int) -> None:
    assert java_string_hash(group) == java_hash
    assert offsets_partition_for(group) == partition
    # lagd's own (workers share groups by it; a reread partition rebases its groups by it)
    assert offsets_partition(group, 50) == partition


# --- events -------------------------------------------------------------------------------


def test_commit_event() -> None:
    counters = IngestCounters()
    key, value = encode_offset_commit("g", "orders", 3, 1500, 1_700_000_000_123, metadata="x")
    events = events_from_record("c1", key, value, 42, 1_700_000_001_000, counters)
    assert events == [Commit("c1", "g", "orders", 3, 1500, 42, 1_700_000_000_123, 1_700_000_001_000)]
    assert counters.records_by_type == {"offset_commit": 1}
    assert counters.decode_errors == {}


def test_group_members_event() -> None:
    counters = IngestCounters()
    key, value = encode_group_metadata(
        "g",
        members=[("m-2", "c-2", "/h2", {"b": [1]}), ("m-1", "c-1", "/h1", {"a": [1, 0], "b": [0]})],
    )
    events = events_from_record("c1", key, value, 7, 0, counters)
    assert events == [
        GroupMembers(
            "c1",
            "g",
            7,
            (
                PartitionOwner("a", 0, "/h1", "c-1", "m-1"),
                PartitionOwner("a", 1, "/h1", "c-1", "m-1"),
                PartitionOwner("b", 0, "/h1", "c-1", "m-1"),
                PartitionOwner("b", 1, "/h2", "c-2", "m-2"),
            ),
            "Stable",
        )
    ]
    key, value = encode_group_metadata("g", members=(), leader=None, protocol=None, generation=2)
    assert events_from_record("c1", key, value, 8, 0, counters) == [GroupMembers("c1", "g", 8, (), "Empty")]
    assert counters.records_by_type == {"group_metadata": 2}


def test_tombstone_events() -> None:
    counters = IngestCounters()
    key, _ = encode_offset_tombstone("g", "orders", 2)
    assert events_from_record("c1", key, None, 9, 0, counters) == [OffsetDeleted("c1", "g", "orders", 2, 9)]
    key, _ = encode_group_tombstone("g")
    assert events_from_record("c1", key, None, 10, 0, counters) == [GroupDeleted("c1", "g", 10)]
    assert counters.records_by_type == {"offset_tombstone": 1, "group_tombstone": 1}


def test_bad_and_skipped_records_are_counted_not_raised() -> None:
    counters = IngestCounters()
    assert events_from_record("c1", None, b"\x00\x03", 1, 0, counters) == []
    assert events_from_record("c1", b"\x00\x01\x00\x05ab", b"", 2, 0, counters) == []
    key, value = encode_offset_commit("g", "t", 0, 1, 1)
    assert events_from_record("c1", key, value[:-3], 3, 0, counters) == []
    assert events_from_record("c1", b"\x00\x63\x00\x01s", b"\x00\x00", 4, 0, counters) == []
    assert events_from_record("c1", b"\x00\x11\x00\x01s", b"\x00\x00", 4, 0, counters) == []
    assert events_from_record("c1", b"\x00\x0e\x00\x01s\x00\x01m", None, 4, 0, counters) == []
    vec = BY_NAME["redpanda_kafka_cg_member_metadata_type5_null_classic"]
    assert events_from_record("c1", _hex(vec["key_hex"]), _hex(vec["value_hex"]), 5, 0, counters) == []
    assert events_from_record("c1", b"\x00\x08\x00\x01g\x00\x01m", None, 6, 0, counters) == []
    assert counters.decode_errors == {"null_key": 1, "truncated": 2}
    assert counters.records_by_type == {
        "unknown": 1,
        "streams_group_metadata": 1,
        "share_group_current_member_assignment_tombstone": 1,
        "consumer_group_member_metadata": 1,
        "consumer_group_tombstone_type_8": 1,
    }


def test_kip848_owners_are_folded_from_member_records() -> None:
    """Type 4 names the topic, type 5 says who the member is, type 8 what it owns."""
    counters = IngestCounters()
    owners = ConsumerGroupOwners()
    topic_id = bytes(15) + b"\x01"  # the id vector type 4 maps to "topic"
    assignment_key = bytes.fromhex("00080008") + b"group-id" + bytes.fromhex("0009") + b"member-id"
    assignment_value = bytes.fromhex("000000000001000000000002") + topic_id + bytes.fromhex("030000000000000002000100")
    assert decode(assignment_key, assignment_value) == ConsumerGroupCurrentMemberAssignment(
        "group-id", "member-id", 1, 0, 0, (TopicAssignment(topic_id, (0, 2)),), ()
    )
    # The assignment first: the topic id is not known yet, so no owner (counted).
    events = events_from_record("c1", assignment_key, assignment_value, 1, 0, counters, kip848=owners)
    assert events == [GroupMembers("c1", "group-id", 1, (), "Stable")]
    assert counters.decode_errors == {"unknown_topic_id": 1}
    for order, name in ((2, "kafka_cg_partition_metadata_type4"), (3, "kafka_cg_member_metadata_type5_all_fields")):
        vec = BY_NAME[name]
        events = events_from_record(
            "c1", bytes.fromhex(vec["key_hex"]), bytes.fromhex(vec["value_hex"]), order, 0, counters, kip848=owners
        )
    assert events == [
        GroupMembers(
            "c1",
            "group-id",
            3,
            (
                PartitionOwner("topic", 0, "1.2.3.4", "client-id", "member-id"),
                PartitionOwner("topic", 2, "1.2.3.4", "client-id", "member-id"),
            ),
            "Stable",
        )
    ]
    # Without the fold the same records are only counted.
    assert events_from_record("c1", assignment_key, assignment_value, 4, 0, counters) == []
    # The member leaves: its tombstones empty the group.
    events = events_from_record("c1", assignment_key, None, 5, 0, counters, kip848=owners)
    member_key = bytes.fromhex(BY_NAME["kafka_cg_member_metadata_type5_all_fields"]["key_hex"])
    events += events_from_record("c1", member_key, None, 6, 0, counters, kip848=owners)
    assert events[-1] == GroupMembers("c1", "group-id", 6, (), "Empty")
    # A v4 commit's topic id names a topic too.
    other_id = bytes(range(16))
    key, value = encode_offset_commit("g2", "payments", 0, 1, 1, value_version=4, topic_id=other_id)
    events_from_record("c1", key, value, 7, 0, counters, kip848=owners)
    assert owners.topic_names[other_id] == "payments"
