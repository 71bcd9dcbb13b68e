"""The describe answers admin polling reads (lagd.ingest.group_describe), as the broker writes them.

The end-to-end check is tests/test_apache_kafka.py (admin polling on Apache Kafka 4.4 with a
KIP-848 group); these pin the layouts byte for byte.
"""

from __future__ import annotations

from aiokafka.protocol.admin import DescribeGroupsResponse_v3

from lagd.core.model import PartitionOwner
from lagd.ingest.admin_poll import parse_describe
from lagd.ingest.group_describe import (
    GROUP_ID_NOT_FOUND,
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResponse_v0,
    DescribeGroups,
    consumer_group_views,
)

TOPIC_ID = bytes(range(16))


def test_consumer_group_describe_answer_gives_kip848_owners_and_names_the_classic_groups() -> None:
    assignment = ([(TOPIC_ID, "orders", [0, 2], {})], {})
    member = ("m-1", None, None, 5, "java-app", "/10.0.0.7", ["orders"], None, assignment, assignment, {})
    wire = ConsumerGroupDescribeResponse_v0(
        0,
        [
            (0, None, "app", "Stable", 5, 5, "uniform", [member], -2147483648, {}),
            (GROUP_ID_NOT_FOUND, "Group classic is not a consumer group.", "classic", "", 0, 0, "", [], 0, {}),
        ],
        {},
    ).encode()
    views, others = consumer_group_views([ConsumerGroupDescribeResponse_v0.decode(wire)])
    assert others == {"classic"}
    assert views["app"].owners == (
        PartitionOwner("orders", 0, "/10.0.0.7", "java-app", "m-1"),
        PartitionOwner("orders", 2, "/10.0.0.7", "java-app", "m-1"),
    )
    assert views["app"].subscribed == frozenset({"orders"}) and views["app"].has_members


def test_describe_groups_v3_reads_every_group_of_a_batch() -> None:
    """aiokafka reads v3 answers with v2's layout: the second group of a batch came out garbled."""
    wire = DescribeGroupsResponse_v3(
        0,
        [
            (0, "a", "Empty", "consumer", "", [], -2147483648),
            (0, "b", "Dead", "", "", [], -2147483648),
        ],
    ).encode()
    struct = DescribeGroups(["a", "b"]).build(DescribeGroups._CLASSES[-1])
    assert struct.API_VERSION == 3
    answer = struct.RESPONSE_TYPE.decode(wire)
    assert sorted(parse_describe([answer])) == ["a", "b"]


def test_requests_encode_as_their_versions() -> None:
    struct = ConsumerGroupDescribe(["app"]).build(ConsumerGroupDescribe._CLASSES[0])
    assert struct.encode() == b"\x02\x04app\x00\x00"  # compact array of 1, "app", false, no tags
