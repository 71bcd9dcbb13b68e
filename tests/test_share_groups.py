"""The share-group poller's wire formats and edge checks, without a broker.

Answers are built as bytes with the same schemas a broker's answer is decoded with, then
decoded and parsed as the poller does; test_apache_kafka_share checks the whole path against
Kafka 4.4 itself.
"""

from __future__ import annotations

from typing import Any

from lagd.http.metrics import share_group_series
from lagd.ingest.share_groups import (
    DescribeShareGroupOffsets,
    DescribeShareGroupOffsetsRequest_v0,
    DescribeShareGroupOffsetsRequest_v1,
    ListGroupsRequest_v5,
    ListShareGroups,
    ShareGroup,
    ShareGroups,
    SharePartition,
    parse_share_groups,
    parse_share_offsets,
)
from lagd.ingest.validate import EdgeLimits

TOPIC_ID = bytes(range(16))


def _limits() -> EdgeLimits:
    return EdgeLimits("c")


def _answer(version: int, groups: list[Any]) -> Any:
    cls = (DescribeShareGroupOffsetsRequest_v0, DescribeShareGroupOffsetsRequest_v1)[version].RESPONSE_TYPE
    return cls.decode(cls(0, groups, {}).encode())


def _partition(index: int, start: int, lag: int, error: int = 0, version: int = 1) -> tuple[Any, ...]:
    if version == 0:
        return (index, start, 0, error, None, {})
    return (index, start, 0, lag, error, None, {})


def test_requests_are_built_as_kafka_reads_them() -> None:
    """ListGroups v5 filters on type "share"; DescribeShareGroupOffsets asks for every topic (null)."""
    listing = ListShareGroups().build(ListGroupsRequest_v5)
    assert listing.encode() == b"\x01\x02\x06share\x00"  # no states, types ["share"], no tags
    describe = DescribeShareGroupOffsets(["g1"]).build(DescribeShareGroupOffsetsRequest_v1)
    assert describe.encode() == b"\x02\x03g1\x00\x00\x00"  # [g1, topics null, tags], tags
    assert describe.FLEXIBLE_VERSION and describe.API_KEY == 90


def test_share_groups_are_listed_from_every_brokers_answer() -> None:
    answer = ListGroupsRequest_v5.RESPONSE_TYPE
    ok = answer.decode(
        answer(0, 0, [("s1", "", "Stable", "share", {}), ("c1", "consumer", "Empty", "classic", {})], {}).encode()
    )
    failed = answer.decode(answer(0, 15, [], {}).encode())
    bad = answer.decode(
        answer(0, 0, [("x\x00", "", "Stable", "share", {}), ("", "", "Stable", "share", {})], {}).encode()
    )
    states, errors, refused = parse_share_groups([ok, failed, bad], _limits())
    assert states == {"s1": "Stable"}
    assert refused == 2
    assert errors == ["GroupCoordinatorNotAvailableError"]


def test_offsets_are_read_as_kafka_reports_them_unknowns_as_none() -> None:
    answer = _answer(
        1,
        [("s1", [("t", TOPIC_ID, [_partition(1, 10, 50), _partition(0, -1, -1)], {})], 0, None, {})],
    )
    groups, refused = parse_share_offsets(answer, {"s1": "Empty"}, 123, _limits())
    assert refused == 0
    assert groups == [
        ShareGroup("s1", "Empty", (SharePartition("t", 0, None, None, 0), SharePartition("t", 1, 10, 50, 0)), 123)
    ]
    assert groups[0].total_lag == 50


def test_v0_answers_have_no_lag() -> None:
    answer = _answer(0, [("s1", [("t", TOPIC_ID, [_partition(0, 7, 0, version=0)], {})], 0, None, {})])
    groups, _ = parse_share_offsets(answer, {"s1": "Stable"}, 1, _limits())
    assert groups[0].partitions == (SharePartition("t", 0, 7, None, 0),)
    assert groups[0].total_lag is None


def test_hostile_answers_are_refused_and_counted_not_passed_on() -> None:
    answer = _answer(
        1,
        [
            (
                "s1",
                [("t", TOPIC_ID, [_partition(-3, 1, 1), _partition(1 << 30, 1, 1), _partition(2, 5, 5, 29)], {})],
                0,
                None,
                {},
            ),
            (
                "s1",
                [("", TOPIC_ID, [_partition(0, 1, 1)], {}), ("t\n", TOPIC_ID, [_partition(0, 1, 1)], {})],
                0,
                None,
                {},
            ),
            ("s1", [("t", TOPIC_ID, [_partition(2, 9, 9)], {})], 0, None, {}),
            ("not-listed", [], 0, None, {}),
            ("s2", [], 69, "gone", {}),
        ],
    )
    groups, refused = parse_share_offsets(answer, {"s1": "Stable", "s2": "Dead"}, 1, _limits())
    # two impossible partitions, one named twice, a nameless topic, a topic Kafka would refuse,
    # a group nobody listed
    assert refused == 6
    assert [g.partitions for g in groups if g.group == "s1"] == [  # named twice: one group
        (SharePartition("t", 2, 5, 5, 0, "TopicAuthorizationFailedError"),)
    ]
    assert [g.error for g in groups if g.group == "s2"] == ["GroupIdNotFound: gone"]


def test_metrics_show_known_values_only() -> None:
    view = ShareGroups()
    view.groups["c"] = {
        "s1": ShareGroup("s1", "Stable", (SharePartition("t", 0, 10, 4, 0), SharePartition("t", 1, None, None, 0)), 1)
    }
    out: list[str] = []
    share_group_series(out, view)
    text = "".join(out)
    assert 'lagd_share_group_lag{cluster="c",group="s1",topic="t",partition="0"} 4\n' in text
    assert 'lagd_share_group_start_offset{cluster="c",group="s1",topic="t",partition="0"} 10\n' in text
    assert 'lagd_share_group_total_lag{cluster="c",group="s1"} 4\n' in text
    assert 'partition="1"' not in text
    assert text.count("# TYPE ") == 3
