"""KIP-848 (new consumer protocol) groups: the offsets-topic reader learns their owners.

Records are written byte-exact (types 4, 5 and 8 as a Kafka 4 coordinator writes them, v0
values) into an offsets topic of the test's own on the real Tansu broker.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from lagd.core.model import GroupDeleted, GroupMembers, IngestCounters, PartitionOwner
from lagd.ingest.codec import (
    ConsumerGroupCurrentMemberAssignment,
    ConsumerGroupMemberMetadata,
    ConsumerGroupPartitionMetadata,
    TopicAssignment,
    TopicMetadata,
    decode,
)
from lagd.ingest.offsets_topic import read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.ingest.records import ConsumerGroupOwners, events_from_record
from lagd.sim.encode import encode_offset_commit
from tests.conftest import DATA
from tests.test_ingest_kafka import Store, cluster, running
from tests.topics import create_topic

Settle = Callable[..., Awaitable[Any]]
VECTORS = {v["name"]: v for v in json.loads((DATA / "consumer_offsets_vectors.json").read_text())["vectors"]}


async def test_reader_folds_kip848_member_records_into_owners(kafka: str, unique: str, settle: Settle) -> None:
    topic = f"__consumer_offsets_k848_{unique}"
    await create_topic(kafka, topic, 1)
    topic_id = bytes(15) + b"\x01"  # the id that vector type 4 names "topic"
    records = [
        (
            VECTORS["kafka_cg_partition_metadata_type4"]["key_hex"],
            VECTORS["kafka_cg_partition_metadata_type4"]["value_hex"],
        ),
        (
            VECTORS["kafka_cg_member_metadata_type5_all_fields"]["key_hex"],
            VECTORS["kafka_cg_member_metadata_type5_all_fields"]["value_hex"],
        ),
        (
            "00080008" + b"group-id".hex() + "0009" + b"member-id".hex(),
            "000000000001000000000002" + topic_id.hex() + "030000000000000002000100",
        ),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, bytes.fromhex(value), key=bytes.fromhex(key), partition=0)
    finally:
        await producer.stop()

    store, stop = Store(), asyncio.Event()
    reader = read_offsets_topic(
        cluster(kafka, offsets_topic=topic), {}, store, ReaderProgress(), IngestCounters(), stop
    )
    async with running(reader):
        await settle(lambda: any(isinstance(e, GroupMembers) and e.owners for e in store.events), what="owners")
    members = [e for e in store.events if isinstance(e, GroupMembers) and e.owners]
    assert members[-1].owners == (
        PartitionOwner("topic", 0, "1.2.3.4", "client-id", "member-id"),
        PartitionOwner("topic", 2, "1.2.3.4", "client-id", "member-id"),
    )


# --- KIP-848 record encoders (test side; checked against lagd's decoder below) ------------

Rec = tuple[bytes, bytes | None]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _cstr(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _key(record_type: int, group: str, member: str | None = None) -> bytes:
    out = struct.pack(">h", record_type) + struct.pack(">h", len(group)) + group.encode()
    if member is not None:
        out += struct.pack(">h", len(member)) + member.encode()
    return out


def partition_metadata(group: str, topics: dict[bytes, tuple[str, int]]) -> Rec:
    """Type 4: the group's subscribed topics, by id (no racks)."""
    value = struct.pack(">h", 0) + _uvarint(len(topics) + 1)
    for topic_id, (name, partitions) in topics.items():
        value += topic_id + _cstr(name) + struct.pack(">i", partitions) + _uvarint(1) + b"\x00"
    return _key(4, group), value + b"\x00"


def member_metadata(group: str, member: str, client_id: str, host: str) -> Rec:
    """Type 5: who the member is (no instance id, rack, subscription, regex or assignor)."""
    value = (
        struct.pack(">h", 0)
        + b"\x00\x00"
        + _cstr(client_id)
        + _cstr(host)
        + _uvarint(1)
        + b"\x00"
        + struct.pack(">i", 30000)
        + b"\x00\x00"
    )
    return _key(5, group, member), value


def member_assignment(group: str, member: str, epoch: int, assigned: dict[bytes, list[int]]) -> Rec:
    """Type 8: the member's current assignment (nothing pending revocation)."""
    value = struct.pack(">hiib", 0, epoch, epoch - 1, 0) + _uvarint(len(assigned) + 1)
    for topic_id, partitions in assigned.items():
        value += topic_id + _uvarint(len(partitions) + 1) + b"".join(struct.pack(">i", p) for p in partitions)
        value += b"\x00"
    return _key(8, group, member), value + _uvarint(1) + b"\x00"


def member_left(group: str, member: str) -> list[Rec]:
    """The tombstones a coordinator writes when a member leaves (types 8 and 5)."""
    return [(_key(8, group, member), None), (_key(5, group, member), None)]


ORDERS_ID = bytes(range(16))
OTHER_ID = bytes(range(16, 32))


def test_encoders_write_what_the_decoder_reads() -> None:
    key, value = partition_metadata("g", {ORDERS_ID: ("orders", 4)})
    assert decode(key, value) == ConsumerGroupPartitionMetadata("g", (TopicMetadata(ORDERS_ID, "orders", 4, ()),))
    key, value = member_metadata("g", "m1", "app-1", "/10.0.0.1")
    rec = decode(key, value)
    assert isinstance(rec, ConsumerGroupMemberMetadata)
    assert (rec.member_id, rec.client_id, rec.client_host) == ("m1", "app-1", "/10.0.0.1")
    key, value = member_assignment("g", "m1", 3, {ORDERS_ID: [0, 1]})
    assert decode(key, value) == ConsumerGroupCurrentMemberAssignment(
        "g", "m1", 3, 2, 0, (TopicAssignment(ORDERS_ID, (0, 1)),), ()
    )


def _owners(events: list[Any]) -> list[tuple[str, int, str, str]]:
    (gm,) = events
    return [(o.topic, o.partition, o.member_id, o.host) for o in gm.owners]


def test_resumed_fold_changes_only_the_members_it_reads() -> None:
    """Resumed mid-partition and seeded with the stored owners, a member's record replaces
    that member's partitions and leaves every other member's as stored."""
    counters = IngestCounters()
    stored = GroupMembers(
        "c1",
        "g",
        10,
        (
            PartitionOwner("orders", 0, "/10.0.0.1", "app-1", "m1"),
            PartitionOwner("orders", 1, "/10.0.0.1", "app-1", "m1"),
            PartitionOwner("orders", 2, "/10.0.0.2", "app-2", "m2"),
            PartitionOwner("orders", 3, "/10.0.0.3", "app-3", "m3"),
        ),
        "Stable",
    )
    fold = ConsumerGroupOwners(resumed=True)
    fold.seed([stored])
    fold.learn_topic(ORDERS_ID, "orders")
    # m1 gives up partition 1 (to m2, whose own record comes next).
    events = events_from_record("c1", *member_assignment("g", "m1", 4, {ORDERS_ID: [0]}), 11, 0, counters, kip848=fold)
    assert _owners(events) == [
        ("orders", 0, "m1", "/10.0.0.1"),  # its type 5 record came before: the stored host
        ("orders", 2, "m2", "/10.0.0.2"),
        ("orders", 3, "m3", "/10.0.0.3"),
    ]
    # m1 moved: its new metadata record gives the new host.
    events_from_record("c1", *member_metadata("g", "m1", "app-1", "/10.0.0.9"), 12, 0, counters, kip848=fold)
    events = events_from_record(
        "c1", *member_assignment("g", "m2", 4, {ORDERS_ID: [1, 2]}), 13, 0, counters, kip848=fold
    )
    assert _owners(events) == [
        ("orders", 0, "m1", "/10.0.0.9"),
        ("orders", 1, "m2", "/10.0.0.2"),
        ("orders", 2, "m2", "/10.0.0.2"),
        ("orders", 3, "m3", "/10.0.0.3"),
    ]
    # A member read since resuming leaves: only its partitions go; a stored member that
    # leaves goes too.
    for rec in member_left("g", "m3"):
        events = events_from_record("c1", *rec, 14, 0, counters, kip848=fold)
    assert _owners(events) == [
        ("orders", 0, "m1", "/10.0.0.9"),
        ("orders", 1, "m2", "/10.0.0.2"),
        ("orders", 2, "m2", "/10.0.0.2"),
    ]
    assert events[0].state == "Stable"
    # A classic tombstone ends the stored view; new members start from nothing.
    assert events_from_record("c1", _key(2, "g"), None, 15, 0, counters, kip848=fold) == [GroupDeleted("c1", "g", 15)]
    assert fold.seeded == {}
    assert counters.decode_errors == {}


def test_resumed_fold_keeps_stored_partitions_behind_a_topic_id_it_cannot_name() -> None:
    """The id -> name mapping came before the resume point: a member's new assignment that
    names an unknown id must not drop the member's stored partitions of topics it may mean."""
    counters = IngestCounters()
    stored = GroupMembers(
        "c1",
        "g",
        10,
        (
            PartitionOwner("orders", 0, "/10.0.0.1", "app-1", "m1"),
            PartitionOwner("payments", 0, "/10.0.0.1", "app-1", "m1"),
            PartitionOwner("orders", 1, "/10.0.0.2", "app-2", "m2"),
        ),
        "Stable",
    )
    fold = ConsumerGroupOwners(resumed=True)
    fold.seed([stored])
    fold.learn_topic(OTHER_ID, "payments")  # e.g. from a v4 commit read since
    rec = member_assignment("g", "m1", 4, {ORDERS_ID: [0, 2], OTHER_ID: [1]})
    events = events_from_record("c1", *rec, 11, 0, counters, kip848=fold)
    assert _owners(events) == [
        ("orders", 0, "m1", "/10.0.0.1"),  # stored: "orders" has no known id, so it may be ORDERS_ID
        ("orders", 1, "m2", "/10.0.0.2"),
        ("payments", 1, "m1", "/10.0.0.1"),  # named: the new assignment replaces payments-0 by payments-1
    ]
    assert counters.decode_errors == {"unknown_topic_id": 1}
    # Once a v4 commit names the id, the member's next record is taken as it is.
    fold.learn_topic(ORDERS_ID, "orders")
    events = events_from_record("c1", *rec, 12, 0, counters, kip848=fold)
    assert _owners(events) == [
        ("orders", 0, "m1", "/10.0.0.1"),
        ("orders", 1, "m2", "/10.0.0.2"),
        ("orders", 2, "m1", "/10.0.0.1"),
        ("payments", 1, "m1", "/10.0.0.1"),
    ]


def test_resumed_fold_without_stored_owners_keeps_them_rather_than_replacing() -> None:
    counters = IngestCounters()
    fold = ConsumerGroupOwners(resumed=True)
    fold.learn_topic(ORDERS_ID, "orders")
    rec = member_assignment("g", "m1", 4, {ORDERS_ID: [0]})
    assert events_from_record("c1", *rec, 11, 0, counters, kip848=fold) == []
    assert counters.decode_errors == {"kip848_owners_unseeded": 1}
    # Read from the beginning the fold is complete and reports owners as it goes.
    fresh = ConsumerGroupOwners()
    fresh.learn_topic(ORDERS_ID, "orders")
    assert _owners(events_from_record("c1", *rec, 11, 0, counters, kip848=fresh)) == [("orders", 0, "m1", "")]


async def _write(kafka: str, topic: str, records: list[Rec]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def test_restarted_reader_keeps_the_owners_of_members_it_has_not_reread(
    kafka: str, unique: str, settle: Settle
) -> None:
    """Kill the reader after a KIP-848 group of three members is known, let one member's
    assignment change, restart from the stored position and owners: the group's owners are
    the stored ones with only that member's partitions changed."""
    topic = f"__consumer_offsets_k848r_{unique}"
    await create_topic(kafka, topic, 1)
    group = f"k848-{unique}"
    await _write(
        kafka,
        topic,
        [
            partition_metadata(group, {ORDERS_ID: ("orders", 4), OTHER_ID: ("other", 1)}),
            member_metadata(group, "m1", "app-1", "/10.0.0.1"),
            member_assignment(group, "m1", 1, {ORDERS_ID: [0, 1]}),
            member_metadata(group, "m2", "app-2", "/10.0.0.2"),
            member_assignment(group, "m2", 1, {ORDERS_ID: [2, 3]}),
            member_metadata(group, "m3", "app-3", "/10.0.0.3"),
            member_assignment(group, "m3", 1, {OTHER_ID: [0]}),
        ],
    )
    settings = cluster(kafka, offsets_topic=topic, groups_allow=f"^{group}$")

    first, progress = Store(), ReaderProgress()
    async with running(read_offsets_topic(settings, {}, first, progress, IngestCounters(), asyncio.Event())):
        await settle(lambda: progress.caught_up, what="first reader caught up")
    stored = [e for e in first.events if isinstance(e, GroupMembers)][-1]
    assert sorted((o.topic, o.partition, o.member_id) for o in stored.owners) == [
        ("orders", 0, "m1"),
        ("orders", 1, "m1"),
        ("orders", 2, "m2"),
        ("orders", 3, "m2"),
        ("other", 0, "m3"),
    ]

    # While lagd is down: m1 commits (a v4 commit names the topic id again) and drops
    # partition 1, which the coordinator has not handed to anyone yet.
    commit = encode_offset_commit(group, "orders", 0, 42, 1_700_000_000_000, value_version=4, topic_id=ORDERS_ID)
    await _write(kafka, topic, [commit, member_assignment(group, "m1", 2, {ORDERS_ID: [0]})])
    second, counters = Store(), IngestCounters()
    resumed = read_offsets_topic(
        settings, dict(first.positions), second, ReaderProgress(), counters, asyncio.Event(), members=[stored]
    )
    async with running(resumed):
        await settle(lambda: any(isinstance(e, GroupMembers) for e in second.events), what="owners after restart")
    (after,) = [e for e in second.events if isinstance(e, GroupMembers)]
    assert after.order > stored.order
    assert [(o.topic, o.partition, o.host, o.client_id, o.member_id) for o in after.owners] == [
        ("orders", 0, "/10.0.0.1", "app-1", "m1"),
        ("orders", 2, "/10.0.0.2", "app-2", "m2"),
        ("orders", 3, "/10.0.0.2", "app-2", "m2"),
        ("other", 0, "/10.0.0.3", "app-3", "m3"),
    ]

    # The same restart without the stored owners: the group's owners are left alone.
    third, progress, counters = Store(), ReaderProgress(), IngestCounters()
    blind = read_offsets_topic(settings, dict(first.positions), third, progress, counters, asyncio.Event())
    async with running(blind):
        await settle(lambda: progress.caught_up, what="blind reader caught up")
    assert [e for e in third.events if isinstance(e, GroupMembers)] == []
    assert counters.decode_errors == {"kip848_owners_unseeded": 1}
