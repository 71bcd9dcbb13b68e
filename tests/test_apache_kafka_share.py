"""Share groups (KIP-932) on Apache Kafka: lagd shows their lag per share-partition as Kafka's tool does.

A share group commits no offsets; its share coordinator keeps a start offset and a lag per
share-partition, which `kafka-share-groups --describe --offsets` prints and lagd polls
(lagd.ingest.share_groups: ListGroups v5 and DescribeShareGroupOffsets v1, built from
aiokafka's protocol types). The members are the Java share consumer of Kafka's own version;
the group's membership records in `__consumer_offsets` are named and counted, never unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from lagd.core.config import parse
from lagd.core.model import IngestCounters
from lagd.embedded.kafka import KAFKA_OLD_VERSION, KafkaCluster, start_kafka
from lagd.ingest.kafka_client import start_client
from lagd.ingest.share_groups import ShareGroups, poll_once
from lagd.ingest.validate import EdgeLimits
from tests.kafka_groups import (
    console_consumer,
    create_topic,
    describe_share_offsets,
    ensure_offsets_topic,
    produce,
    share_from_earliest,
)
from tests.test_apache_kafka import Lagd
from tests.test_apache_kafka import lagd_on_kafka as _lagd_fixture

lagd_on_kafka = _lagd_fixture  # lagd reading the offsets topic, and lagd polling the admin API


@pytest.fixture(autouse=True)
async def _offsets_topic(apache_kafka: KafkaCluster) -> None:
    """lagd reads `__consumer_offsets`, which a fresh broker has not created yet."""
    await ensure_offsets_topic(apache_kafka.bootstrap)


pytestmark = pytest.mark.slow

PARTITIONS = 3
PER_PARTITION = 20
READ = 25  # records the share consumer acknowledges before it leaves
MORE = 4  # records produced per partition afterwards: the lag grows by them


async def _share_partitions(lagd: Lagd, group: str) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    status, body = await lagd.get(f"/lagd/v1/share/real/{group}")
    if status != 200:
        return {}
    return {(p["topic"], p["partition"]): (p["start_offset"], p["lag"]) for p in body["partitions"]}


async def _share_agreed(lagd: Lagd, cluster: KafkaCluster, group: str, timeout: float = 30.0) -> dict[Any, Any]:
    """Until lagd's share-partitions equal `kafka-share-groups --describe --offsets`'s; what they agree on."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        tool = await asyncio.to_thread(describe_share_offsets, cluster, group)
        ours = await _share_partitions(lagd, group)
        if ours == tool and tool:
            return tool
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"{group} after {timeout:.0f} s: lagd {sorted(ours.items())} != tool {sorted(tool.items())}"
            )
        await asyncio.sleep(0.2)


async def test_share_group_lag_agrees_with_kafka_share_groups(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str
) -> None:
    """Start offset and lag per share-partition in /lagd/v1/share and /metrics equal Kafka's tool's."""
    b = apache_kafka.bootstrap
    topic, group = f"share-{unique}", f"share-{unique}-g"
    await create_topic(b, topic, PARTITIONS)
    await produce(b, topic, PER_PARTITION, PARTITIONS)
    await asyncio.to_thread(share_from_earliest, apache_kafka, group)
    await asyncio.to_thread(console_consumer(apache_kafka, topic, group, READ, share=True).wait)

    agreed = await _share_agreed(lagd_on_kafka, apache_kafka, group)
    # Kafka's numbers are Kafka's (a share-partition it has not initialised reads "-", null in
    # lagd); the test needs some to compare
    assert any(lag for _, lag in agreed.values()), agreed

    await produce(b, topic, MORE, PARTITIONS)  # the lag follows the log end, as the tool's does
    after = await _share_agreed(lagd_on_kafka, apache_kafka, group)
    assert sum(lag or 0 for _, lag in after.values()) > sum(lag or 0 for _, lag in agreed.values()), (agreed, after)

    _, body = await lagd_on_kafka.get("/lagd/v1/share/real")
    assert body["supported"] is True
    listed = {g["group"]: g for g in body["groups"]}
    assert listed[group]["state"] == "Empty" and listed[group]["total_lag"] == sum(
        lag for _, lag in after.values() if lag is not None
    )
    _, text = await lagd_on_kafka.get("/metrics")
    for (t, p), (start, lag) in after.items():
        labels = f'cluster="real",group="{group}",topic="{t}",partition="{p}"'
        assert (f"lagd_share_group_lag{{{labels}}} {lag}" in text) == (lag is not None), (labels, lag)
        assert (f"lagd_share_group_start_offset{{{labels}}} {start}" in text) == (start is not None), (labels, start)

    # shown, not judged: a share group commits nothing, so it is no consumer group of Burrow's API
    status, _ = await lagd_on_kafka.get(f"/v3/kafka/real/consumer/{group}/lag")
    assert status == 404
    status, _ = await lagd_on_kafka.get(f"/lagd/v1/share/real/no-such-{unique}")
    assert status == 404

    # the group's membership records: counted by kind (when lagd reads the topic), none as unknown
    _, clusters = await lagd_on_kafka.get("/lagd/v1/clusters")
    if clusters["clusters"][0]["offsets_source"] == "topic":
        await _counted(lagd_on_kafka, {"share_group_metadata", "share_group_member_metadata"})
    _, text = await lagd_on_kafka.get("/metrics")
    assert 'lagd_ingest_records_total{cluster="real",type="unknown"}' not in text


async def _counted(lagd: Lagd, kinds: set[str], timeout: float = 30.0) -> None:
    """Until lagd_ingest_records_total has a series for each of `kinds`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        _, text = await lagd.get("/metrics")
        counted = {
            line.split('type="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith('lagd_ingest_records_total{cluster="real",')
        }
        if kinds <= counted:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"after {timeout:.0f} s lagd counts {sorted(counted)}, not all of {sorted(kinds)}")
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def old_kafka() -> Iterator[KafkaCluster]:
    """Apache Kafka of the older line (3.9), which has no share-group API."""
    cluster = start_kafka(1, version=KAFKA_OLD_VERSION)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("old", [False, True], ids=["4.4", "3.9"])
async def test_the_poller_tells_brokers_without_the_share_api(
    apache_kafka: KafkaCluster, old_kafka: KafkaCluster, old: bool
) -> None:
    """Kafka 3.9 has no DescribeShareGroupOffsets: unsupported, not a cluster without share groups."""
    cluster = old_kafka if old else apache_kafka
    settings = parse({"clusters": {"c": {"bootstrap-servers": cluster.bootstrap.split(",")}}}, env={}).clusters["c"]
    client = await start_client(settings)
    try:
        view, counters = ShareGroups(), IngestCounters()
        supported = await poll_once(client, settings, view, counters, EdgeLimits.for_cluster(settings))
    finally:
        await client.close()
    assert supported is (not old)
    assert counters.failures == {}
