"""Records Apache Kafka's group coordinator wrote for share groups, Kafka Streams applications,
classic and KIP-848 groups, decoded by lagd and checked against Kafka's own decoding of them.

The vectors (tests/data/kafka_*_group_records.json) were captured from a real broker by
tests/capture_group_records.py, which says how each was made; each carries Kafka's
DumpLogSegments JSON of its key and value, the oracle here. No Kafka runs in this test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lagd.core.model import Commit, IngestCounters
from lagd.ingest.codec import (
    GROUP_RECORD_KINDS,
    ConsumerGroupCurrentMemberAssignment,
    ConsumerGroupMemberMetadata,
    ConsumerGroupMetadata,
    ConsumerGroupTargetAssignmentMember,
    ConsumerGroupTargetAssignmentMetadata,
    ConsumerGroupTombstone,
    GroupMetadata,
    GroupRecord,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    decode,
    uuid_str,
)
from lagd.ingest.records import events_from_record

FILES = sorted((Path(__file__).parent / "data").glob("kafka_*_group_records.json"))
DOCS = {f.name: json.loads(f.read_text()) for f in FILES}
VECTORS = [(name, i, r) for name, doc in DOCS.items() for i, r in enumerate(doc["records"])]
SHARE_TYPES = {10, 11, 12, 13, 14, 15}  # what Kafka 4.4 writes (9 was 4.0's)
STREAMS_TYPES = {17, 19, 20, 21, 22, 23}  # what Kafka 4.4 writes (18 was 4.0-4.1's)


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def test_the_vectors_cover_every_kind_of_group_kafka_4_4_writes() -> None:
    assert FILES, "no captured vectors in tests/data"
    for name, doc in DOCS.items():
        types = {int(r["kafka_key"]["type"]) for r in doc["records"]}
        assert SHARE_TYPES | STREAMS_TYPES | {1, 2, 3, 5, 6, 7, 8} <= types, (name, sorted(types))
        assert {r["scenario"] for r in doc["records"]} == set(doc["scenarios"]), name
        assert any(r["kafka_value"] is None for r in doc["records"]), "no tombstone captured"


def test_lagd_names_each_share_and_streams_type_as_kafka_does() -> None:
    """GROUP_RECORD_KINDS against Kafka's CoordinatorRecordType, as the capturing broker listed it."""
    for name, doc in DOCS.items():
        kafka = {int(k): v for k, v in doc["record_types"].items()}
        for rtype, (kind, _) in GROUP_RECORD_KINDS.items():
            if rtype in kafka:  # 9 and 18 are gone from 4.4's list
                assert kind == kafka[rtype].lower(), (name, rtype)
        assert {t for t, n in kafka.items() if n.startswith(("SHARE_", "STREAMS_"))} <= set(GROUP_RECORD_KINDS), name


@pytest.mark.parametrize(("doc", "index", "vector"), VECTORS, ids=[f"{n}:{i}" for n, i, _ in VECTORS])
def test_each_captured_record_decodes_as_kafka_decodes_it(doc: str, index: int, vector: dict[str, Any]) -> None:
    key, value = _bytes(vector["key_hex"]), _bytes(vector["value_hex"])
    assert key is not None
    kafka_key, kafka_value = vector["kafka_key"], vector["kafka_value"]
    kdata = kafka_key["data"]
    vdata = None if kafka_value is None else kafka_value["data"]
    rtype = int(kafka_key["type"])
    record = decode(key, value)
    assert (value is None) == (kafka_value is None)
    if rtype in GROUP_RECORD_KINDS:
        assert isinstance(record, GroupRecord)
        assert (record.record_type, record.group, record.member_id) == (rtype, kdata["groupId"], kdata.get("memberId"))
        assert record.value_version == (None if kafka_value is None else int(kafka_value["version"]))
        assert record.kind == DOCS[doc]["record_types"][str(rtype)].lower()
    elif rtype == 1 and vdata is not None:
        assert isinstance(record, OffsetCommit)
        assert (record.group, record.topic, record.partition) == (kdata["group"], kdata["topic"], kdata["partition"])
        assert (record.offset, record.commit_timestamp, record.value_version) == (
            vdata["offset"],
            vdata["commitTimestamp"],
            int(kafka_value["version"]),
        )
        assert record.leader_epoch == vdata.get("leaderEpoch", -1)
        if "topicId" in vdata:
            assert record.topic_id is not None and uuid_str(record.topic_id) == vdata["topicId"]
    elif rtype == 1:
        assert record == OffsetTombstone(kdata["group"], kdata["topic"], kdata["partition"])
    elif rtype == 2 and vdata is not None:
        assert isinstance(record, GroupMetadata)
        assert (record.group, record.protocol_type, record.generation, record.protocol, record.leader) == (
            kdata["group"],
            vdata["protocolType"],
            vdata["generation"],
            vdata["protocol"],
            vdata["leader"],
        )
        assert [(m.member_id, m.client_id, m.client_host) for m in record.members] == [
            (m["memberId"], m["clientId"], m["clientHost"]) for m in vdata["members"]
        ]
    elif rtype == 2:
        assert record == GroupTombstone(kdata["group"])
    elif vdata is None:
        assert record == ConsumerGroupTombstone(rtype, kdata["groupId"], kdata.get("memberId"))
    else:
        _assert_kip848(record, rtype, kdata, vdata)
    # and as ingest reads it: counted by kind, never unknown, never refused
    counters = IngestCounters()
    events = events_from_record("real", key, value, vector["offset"], 0, counters)
    assert "unknown" not in counters.records_by_type and not counters.decode_errors, counters
    if isinstance(record, GroupRecord):
        assert events == []  # named and counted; share and streams groups' lag does not come from these
    if isinstance(record, OffsetCommit):
        assert [e for e in events if isinstance(e, Commit)] == [
            Commit("real", record.group, record.topic, record.partition, record.offset, vector["offset"],
                   record.commit_timestamp, 0)
        ]  # fmt: skip


def _assert_kip848(record: object, rtype: int, kdata: dict[str, Any], vdata: dict[str, Any]) -> None:
    """KIP-848 records (types 3, 5-8) against Kafka's JSON of them."""
    group = kdata["groupId"]
    if rtype == 3:
        assert isinstance(record, ConsumerGroupMetadata)
        assert (record.group, record.epoch) == (group, vdata["epoch"])
    elif rtype == 5:
        assert isinstance(record, ConsumerGroupMemberMetadata)
        assert (record.group, record.member_id, record.client_id, record.client_host) == (
            group,
            kdata["memberId"],
            vdata["clientId"],
            vdata["clientHost"],
        )
        assert list(record.subscribed_topic_names) == vdata["subscribedTopicNames"]
    elif rtype == 6:
        assert isinstance(record, ConsumerGroupTargetAssignmentMetadata)
        assert (record.group, record.assignment_epoch) == (group, vdata["assignmentEpoch"])
    elif rtype == 7:
        assert isinstance(record, ConsumerGroupTargetAssignmentMember)
        assert {uuid_str(t.topic_id): list(t.partitions) for t in record.topic_partitions} == {
            t["topicId"]: t["partitions"] for t in vdata["topicPartitions"]
        }
    elif rtype == 8:
        assert isinstance(record, ConsumerGroupCurrentMemberAssignment)
        assert (record.member_epoch, record.previous_member_epoch, record.state) == (
            vdata["memberEpoch"],
            vdata["previousMemberEpoch"],
            vdata["state"],
        )
        assert {uuid_str(t.topic_id): list(t.partitions) for t in record.assigned_partitions} == {
            t["topicId"]: t["partitions"] for t in vdata["assignedPartitions"]
        }
    else:
        raise AssertionError(f"type {rtype} captured but not checked: {vdata}")
