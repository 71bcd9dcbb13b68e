"""Capture the `__consumer_offsets` records a real Apache Kafka writes, as regression vectors.

    python -m tests.capture_kafka_records [VERSION ...]   (default: lagd.embedded.kafka.VERSIONS)

Starts Kafka VERSION (one KRaft node), makes every kind of group it runs with real clients
(`tests.kafka_groups.every_kind_of_group`) and writes every record of its offsets topic, as a
read_committed consumer sees them, to tests/data/kafka-VERSION-offsets-records.json. The
vectors are Kafka's, not lagd's: tests/test_kafka_vectors.py decodes them without a broker.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from lagd.embedded.kafka import VERSIONS, start_kafka
from tests.kafka_groups import every_kind_of_group, offsets_topic_records

DATA = Path(__file__).parent / "data"


def vectors_path(version: str) -> Path:
    return DATA / f"kafka-{version}-offsets-records.json"


async def capture(version: str) -> Path:
    cluster = await asyncio.to_thread(start_kafka, 1, version)
    try:
        groups = await every_kind_of_group(cluster, "vec")
        records = await offsets_topic_records(cluster.bootstrap)
    finally:
        cluster.stop()
    body = {
        "source": f"Apache Kafka {version} (Maven Central org.apache.kafka:kafka_2.13:{version}), one KRaft node, "
        "offsets.topic.num.partitions=4",
        "made_by": "python -m tests.capture_kafka_records (tests.kafka_groups.every_kind_of_group)",
        "groups": groups,
        "records": [
            {"partition": p, "offset": o, "key": k.hex(), "value": None if v is None else v.hex()}
            for p, o, k, v in records
        ],
    }
    path = vectors_path(version)
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def main(argv: list[str]) -> int:
    for version in argv or VERSIONS:
        print(f"captured {asyncio.run(capture(version))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
