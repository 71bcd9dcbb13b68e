"""Real MirrorMaker 2 between two real Apache Kafka clusters: the records it writes about its own
progress decode, and agree with what Kafka's tools say of the mirrored group on both clusters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lagd.embedded.kafka import KafkaCluster, start_kafka
from tests.mirror_maker import check_capture, mirrored_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    """Two clusters of their own (MM2's topics on them hold this module's run only): source, target."""
    source = start_kafka(1)
    try:
        target = start_kafka(1)
    except BaseException:
        source.stop()
        raise
    yield source, target
    source.stop()
    target.stop()


def test_mirror_makers_records_agree_with_both_clusters(
    clusters: tuple[KafkaCluster, KafkaCluster], unique: str
) -> None:
    source, target = clusters
    body = asyncio.run(mirrored_run(source, target, f"orders-{unique}", f"billing-{unique}"))
    assert check_capture(body) == []
