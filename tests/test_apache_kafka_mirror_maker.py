"""Real MirrorMaker 2 between two real Apache Kafka clusters: the records it writes about its own
progress decode, and agree with what Kafka's tools say of the mirrored group on both clusters."""

from __future__ import annotations

import asyncio

import pytest

from lagd.embedded.kafka import KafkaCluster
from tests.mirror_maker import check_capture, mirrored_run

pytestmark = pytest.mark.slow


def test_mirror_makers_records_agree_with_both_clusters(
    mirror_clusters: tuple[KafkaCluster, KafkaCluster], unique: str
) -> None:
    source, target = mirror_clusters
    body = asyncio.run(mirrored_run(source, target, f"orders-{unique}", f"billing-{unique}"))
    assert check_capture(body) == []
