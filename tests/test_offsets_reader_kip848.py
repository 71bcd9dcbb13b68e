"""KIP-848 (new consumer protocol) groups: the offsets-topic reader learns their owners."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lagd.ingest.offsets_topic import read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.model import GroupMembers, IngestCounters, PartitionOwner
from tests.conftest import DATA
from tests.test_ingest_kafka import Store, cluster, running

Settle = Callable[..., Awaitable[Any]]
VECTORS = {v["name"]: v for v in json.loads((DATA / "consumer_offsets_vectors.json").read_text())["vectors"]}


async def test_reader_folds_kip848_member_records_into_owners(kafka: str, unique: str, settle: Settle) -> None:
    topic = f"__consumer_offsets_k848_{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
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
