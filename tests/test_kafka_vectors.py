"""Records real Apache Kafka wrote (tests/data/kafka-*-offsets-records.json), read without a broker.

`python -m tests.capture_kafka_records` made them: every kind of group each Kafka version runs,
made by real clients (see its docstring). lagd's encoder wrote none of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lagd.core.model import Commit, GroupDeleted, GroupMembers, IngestCounters, OffsetDeleted
from lagd.ingest.codec import DecodeError, decode
from lagd.ingest.records import ConsumerGroupOwners, events_from_record
from lagd.state.windows import State
from tests.capture_kafka_records import vectors_path

VERSIONS = ("4.4.0", "3.9.1")


def vectors(version: str) -> dict[str, Any]:
    path: Path = vectors_path(version)
    return dict(json.loads(path.read_text()))


def events(version: str) -> tuple[list[Any], IngestCounters]:
    """The events lagd's reader makes of the version's records, partition by partition, in order."""
    body = vectors(version)
    counters = IngestCounters()
    owners = ConsumerGroupOwners()
    out: list[Any] = []
    for r in body["records"]:
        key = bytes.fromhex(r["key"])
        value = None if r["value"] is None else bytes.fromhex(r["value"])
        out += events_from_record(
            "k", key, value, r["offset"], 1_800_000_000_000, counters, kip848=owners, source=r["partition"]
        )
    return out, counters


@pytest.mark.parametrize("version", VERSIONS)
def test_every_record_kafka_wrote_decodes(version: str) -> None:
    body = vectors(version)
    assert len(body["records"]) >= 10
    for r in body["records"]:
        try:
            decode(bytes.fromhex(r["key"]), None if r["value"] is None else bytes.fromhex(r["value"]))
        except DecodeError as exc:
            raise AssertionError(f"Kafka {version}'s record at {r['partition']}/{r['offset']}: {exc}") from None


@pytest.mark.parametrize("version", VERSIONS)
def test_classic_static_and_transactional_groups_read_as_kafka_left_them(version: str) -> None:
    groups = vectors(version)["groups"]
    evs, counters = events(version)
    assert counters.decode_errors == {} or set(counters.decode_errors) == {"unknown_topic_id"}, counters.decode_errors
    state = State(intervals=10)
    state.apply_many(evs)
    commits = {(e.group, e.partition): e.offset for e in evs if isinstance(e, Commit)}  # the newest of each
    # the classic group: partition 0 reset backwards to 1, partition 1 at 7, partition 2's offset deleted
    assert commits[(groups["classic"], 0)] == 1 and commits[(groups["classic"], 1)] == 7
    assert any(isinstance(e, OffsetDeleted) and e.group == groups["classic"] and e.partition == 2 for e in evs)
    # the static member's group, deleted by kafka-consumer-groups --delete
    assert any(isinstance(e, GroupDeleted) and e.group == groups["static"] for e in evs)
    # the transaction that committed moved the window; the aborted one is not in a read_committed view
    assert [e.offset for e in evs if isinstance(e, Commit) and e.group == groups["txn"]] == [11]


def test_kip848_owners_are_named_once_a_commit_names_their_topic() -> None:
    """Kafka 4 writes no type 4 record: a new KIP-848 group's assignment names its topic by an id
    that only its first (v4) commit names. The owners must come then, not be lost."""
    groups = vectors("4.4.0")["groups"]
    evs, _ = events("4.4.0")
    members = [e for e in evs if isinstance(e, GroupMembers) and e.group == groups["kip848"]]
    owned = [m for m in members if m.owners]
    assert owned, members
    owners = owned[0].owners
    assert sorted(o.partition for o in owners) == [0, 1, 2]
    assert {o.topic for o in owners} == {"vec-own"}
    assert {o.client_id for o in owners} == {f"java-{groups['kip848']}"}
    assert members[-1].owners == ()  # the member left when the console consumer exited
