"""Edge checks of offsets-topic records: hostile fields are counted by reason and skipped.

Pure: real-format records (lagd.sim.encode) through events_from_record with a cluster's
EdgeLimits, as the offsets-topic reader calls it.
"""

from __future__ import annotations

import struct

import pytest
from structlog.testing import capture_logs

from lagd.core.config import ClusterSettings, parse
from lagd.core.model import Commit, GroupDeleted, IngestCounters, OffsetDeleted
from lagd.evaluate.build import build_core
from lagd.http.context import Health
from lagd.http.metrics import render
from lagd.ingest.records import events_from_record
from lagd.ingest.validate import MAX_PARTITIONS, REASONS, EdgeLimits
from lagd.sim.encode import (
    SimMember,
    encode_group_metadata,
    encode_group_tombstone,
    encode_offset_commit,
    encode_offset_tombstone,
)

NOW = 1_800_000_000_000
DAY = 86_400_000


def limits(**kw: object) -> EdgeLimits:
    lim = EdgeLimits("c1", **kw)  # type: ignore[arg-type]
    lim.partition_counts = {"orders": 4}
    return lim


def commit(
    group: str = "g", topic: str = "orders", partition: int = 1, offset: int = 10, ts: int = NOW
) -> tuple[bytes, bytes]:
    return encode_offset_commit(group, topic, partition, offset, ts)


def events(kv: tuple[bytes | None, bytes | None], lim: EdgeLimits, counters: IngestCounters) -> list[object]:
    return list(events_from_record("c1", kv[0], kv[1], 7, NOW, counters, limits=lim, source=3))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (commit(offset=-(2**63)), "offset_out_of_range"),
        (commit(offset=2**63 - 1), "offset_out_of_range"),
        (commit(offset=-5), "offset_out_of_range"),
        (commit(offset=-1), "offset_none"),
        (commit(partition=2**31 - 1), "partition_beyond_topic"),
        (commit(partition=4), "partition_beyond_topic"),
        (commit(partition=-1), "partition_out_of_range"),
        (commit(topic="unknown-topic", partition=2**31 - 1), "partition_out_of_range"),
        (commit(topic="unknown-topic", partition=MAX_PARTITIONS), "partition_out_of_range"),
        (commit(topic="t" * 250), "topic_name_invalid"),
        (commit(topic="a/b"), "topic_name_invalid"),
        (commit(topic=""), "topic_name_invalid"),
        (commit(topic="or\x00ders"), "topic_name_invalid"),
        (commit(group="g" * 9000), "group_name_too_long"),
        (commit(group="é" * 513), "group_name_too_long"),  # 1026 UTF-8 bytes
        (commit(group="g\x00"), "group_name_invalid"),
        (commit(ts=NOW - 30 * 365 * DAY), "commit_time_too_old"),
        (commit(ts=253_402_300_799_000), "commit_time_in_future"),  # 9999-12-31
        (commit(ts=-(2**63)), "commit_time_too_old"),
        (encode_offset_tombstone("g" * 9000, "orders", 1), "group_name_too_long"),
        (encode_offset_tombstone("g", "orders", 2**31 - 1), "partition_beyond_topic"),
        (encode_group_tombstone("g" * 2000), "group_name_too_long"),
        (encode_group_metadata("g\x00"), "group_name_invalid"),
        (encode_group_metadata("g", members=[SimMember("m", "client\x00", "/h", {"orders": [0]})]), "owner_invalid"),
        ((b"\x00\x01\x00\x01g", b"\x00\x03"), "truncated"),
        ((b"\x00\x01\x7f\xff", b"\x00\x03" + bytes(22)), "truncated"),  # a 32,767-byte group in 2 bytes
        ((b"\x00\x02\xff\xfe", None), "bad_length"),  # negative string length
        ((commit()[0], b"\x00\x09" + bytes(30)), "unknown_value_version"),
        ((None, b"x"), "null_key"),
    ],
)
def test_hostile_fields_are_rejected_by_reason(record: tuple[bytes | None, bytes | None], reason: str) -> None:
    counters = IngestCounters()
    assert events(record, limits(), counters) == []
    assert counters.rejected == {reason: 1}
    assert reason in REASONS


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (commit(group="g" * 9000), "group_name_too_long"),
        (commit(group="é" * 513), "group_name_too_long"),
        (commit(group="g\x00"), "group_name_invalid"),
        (commit(partition=4), "partition_beyond_topic"),
        (commit(partition=-1), "partition_out_of_range"),
    ],
)
def test_a_topic_already_seen_valid_does_not_let_a_hostile_commit_through(
    record: tuple[bytes, bytes], reason: str
) -> None:
    """The checks keep a short way for the usual commit (a topic already found valid): it must
    still refuse the group names and partitions the long way refuses."""
    counters = IngestCounters()
    lim = limits()
    assert [type(e) for e in events(commit(), lim, counters)] == [Commit]
    assert events(record, lim, counters) == []
    assert counters.rejected == {reason: 1}


def test_2gb_lengths_are_rejected_without_allocating() -> None:
    counters = IngestCounters()
    key = b"\x00\x02" + struct.pack(">h", 1) + b"g"
    value = b"\x00\x03" + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 1) + b"\xff\xff" * 2
    value += struct.pack(">q", -1) + struct.pack(">i", 2**31 - 1)  # 2^31-1 members
    assert events((key, value), limits(), counters) == []
    assert counters.rejected == {"bad_length": 1}


def test_good_records_pass_and_edges_are_inclusive() -> None:
    counters = IngestCounters()
    lim = limits()
    good = [
        commit(offset=0, partition=0),
        commit(offset=2**63 - 2, partition=3),
        commit(topic="t" * 249, partition=MAX_PARTITIONS - 1),
        commit(group="g" * 1024),
        commit(group=""),
        commit(ts=NOW - 7 * DAY),
        commit(ts=NOW + DAY),
    ]
    out = [ev for kv in good for ev in events(kv, lim, counters)]
    assert [type(e) for e in out] == [Commit] * len(good)
    assert counters.rejected == {}
    assert events(encode_offset_tombstone("g", "orders", 3), lim, counters) == [
        OffsetDeleted("c1", "g", "orders", 3, 7)
    ]
    assert events(encode_group_tombstone("g"), lim, counters) == [GroupDeleted("c1", "g", 7)]


def test_group_name_cap_is_a_cluster_setting() -> None:
    c = ClusterSettings(name="c1", max_group_name=16)
    counters = IngestCounters()
    lim = EdgeLimits.for_cluster(c)
    assert events(commit(group="g" * 17, ts=NOW), lim, counters) == []
    assert counters.rejected == {"group_name_too_long": 1}


def test_commit_age_defaults_to_expire_group() -> None:
    s = parse({"clusters": {"a": {"bootstrap-servers": ["k:9092"]}}, "storage": {"expire-group": 3600}}, env={})
    assert s.clusters["a"].max_commit_age == 3600.0
    lim = EdgeLimits.for_cluster(s.clusters["a"])
    counters = IngestCounters()
    assert events(commit(ts=NOW - 3_601_000), lim, counters) == []
    assert counters.rejected == {"commit_time_too_old": 1}


def test_unknown_record_types_share_one_label() -> None:
    """Unknown types share one label; share- and streams-group types (9, 17) go by their kind."""
    counters = IngestCounters()
    for rtype in (27008, 17, 9, 24, 32767):
        key = struct.pack(">h", rtype) + b"\x00\x01g"
        assert events((key, b"\x00\x00"), limits(), counters) == []
    assert counters.records_by_type == {
        "unknown": 3,
        "streams_group_metadata": 1,
        "share_group_partition_metadata": 1,
    }
    assert counters.rejected == {}


def test_a_rejection_is_logged_once_per_reason_per_minute_with_its_position() -> None:
    counters = IngestCounters()
    lim = limits()
    with capture_logs() as logs:
        for i in range(5):
            events_from_record("c1", *commit(offset=-7), i, NOW + i, counters, limits=lim, source=3)
        events_from_record("c1", *commit(topic="a/b"), 5, NOW, counters, limits=lim, source=3)
        events_from_record("c1", *commit(offset=-7), 6, NOW + 60_000, counters, limits=lim, source=2)
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["reason"], e["offsets_partition"], e["offset"]) for e in warned] == [
        ("offset_out_of_range", 3, 0),
        ("topic_name_invalid", 3, 5),
        ("offset_out_of_range", 2, 6),
    ]
    assert "hint" in warned[0]
    assert counters.rejected == {"offset_out_of_range": 6, "topic_name_invalid": 1}


def test_rejections_are_exported_with_a_fixed_label_set() -> None:
    counters = IngestCounters()
    events(commit(offset=-(2**63)), limits(), counters)
    events((struct.pack(">h", 27008) + b"\x00\x01g", b"\x00\x00"), limits(), counters)
    state, evaluator = build_core(parse({"clusters": {"c1": {"bootstrap-servers": ["k:9092"]}}}, env={}))
    text = render(state, evaluator, Health(counters={"c1": counters}), NOW)
    lines = [line for line in text.splitlines() if line.startswith("lagd_ingest_rejected_total{")]
    assert len(lines) == len(REASONS)
    assert 'lagd_ingest_rejected_total{cluster="c1",reason="offset_out_of_range"} 1' in lines
    assert 'lagd_ingest_records_total{cluster="c1",type="unknown"} 1' in text
    assert "type_27008" not in text


def test_a_stale_partition_count_asks_for_a_metadata_refresh() -> None:
    lim = limits()
    assert not lim.stale_counts
    events(commit(partition=5), lim, IngestCounters())
    assert lim.stale_counts
