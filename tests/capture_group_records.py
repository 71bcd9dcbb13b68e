"""Capture the records Apache Kafka's group coordinator writes for share groups and Kafka Streams
applications, with Kafka's own decoding of each, as regression vectors for lagd's codec.

    .venv/bin/python -m tests.capture_group_records [OUT]   # default: tests/data/kafka_<version>_group_records.json

It starts one KRaft node (lagd.embedded.kafka), runs a share group (the Java share consumer),
a Kafka Streams application on the classic protocol and one on the streams group protocol
(tests/java/Passthrough.java), a classic aiokafka group and a KIP-848 group (the Java
consumer), then reads every `__consumer_offsets` record of those groups (key and value
bytes) and decodes the same log segments with Kafka's `kafka-dump-log --offsets-decoder`
(DumpLogSegments), whose JSON is the vector's oracle. tests/test_group_records.py decodes
every vector without Kafka and checks lagd against that JSON.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition

from lagd.embedded.kafka import KafkaCluster, classpath, java, start_kafka
from tests.kafka_groups import (
    commit_classic,
    console_consumer,
    create_topic,
    describe_offsets,
    describe_streams_offsets,
    java_classes,
    offsets_topic_records,
    produce,
    share_from_earliest,
    streams_app,
)

DATA = Path(__file__).parent / "data"
PARTITIONS = 2
PER_PARTITION = 10

SCENARIOS = {
    "share": "share group (KIP-932): ConsoleShareConsumer of Kafka's own version, share.auto.offset.reset=earliest, "
    "read 5 records and left",
    "streams-classic": "Kafka Streams passthrough app (tests/java/Passthrough.java), group.protocol=classic, "
    "ran until it committed every record, then closed",
    "streams-kip1071": "Kafka Streams passthrough app (tests/java/Passthrough.java), group.protocol=streams "
    "(KIP-1071), ran until it committed every record, then closed",
    "classic": "classic group: aiokafka consumer joined, committed offsets 3 and 4 and left",
    "kip848": "KIP-848 group: ConsoleConsumer of Kafka's own version, group.protocol=consumer, read every record",
}


def kafka_record_types(cluster: KafkaCluster) -> dict[str, str]:
    """Kafka's CoordinatorRecordType names by id (tests/java/RecordTypes.java)."""
    done = subprocess.run(
        [java(), "-cp", f"{java_classes(cluster)}:{classpath(cluster.version)}", "RecordTypes"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = done.stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.strip()}


def kafka_decoded(cluster: KafkaCluster) -> dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any] | None]]:
    """(partition, offset) -> (key, value) of every `__consumer_offsets` record, as Kafka's DumpLogSegments decodes it."""
    out: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any] | None]] = {}
    data = cluster.workdir / f"node-{cluster.nodes[0].node_id}"  # its log.dirs (start_kafka)
    decoder = json.JSONDecoder()
    for folder in sorted(data.glob("__consumer_offsets-*")):
        partition = int(folder.name.rsplit("-", 1)[1])
        for segment in sorted(folder.glob("*.log")):
            text = cluster.tool(
                "org.apache.kafka.tools.DumpLogSegments",
                "--files",
                str(segment),
                "--offsets-decoder",
                "--print-data-log",
            )
            for line in text.splitlines():
                if not line.startswith("| offset: ") or " key: " not in line:
                    continue
                offset = int(line.split()[2])
                rest = line[line.index(" key: ") + 6 :]
                key, end = decoder.raw_decode(rest)
                payload = rest[end:].split(" payload: ", 1)[1]
                value = None if payload.startswith("<DELETE>") else decoder.raw_decode(payload)[0]
                out[(partition, offset)] = (key, value)
    return out


def _group_of(key: dict[str, Any]) -> str | None:
    data = key.get("data", {})
    return data.get("groupId", data.get("group"))


async def capture(out_path: Path | None) -> Path:
    cluster = start_kafka(1)
    try:
        b = cluster.bootstrap
        run = datetime.datetime.now(datetime.UTC).strftime("%H%M%S")
        groups = {name: f"vec-{name}-{run}" for name in SCENARIOS}
        source, sink = f"vec-in-{run}", f"vec-out-{run}"
        await create_topic(b, source, PARTITIONS)
        await create_topic(b, sink, PARTITIONS)
        await produce(b, source, PER_PARTITION, PARTITIONS)

        await commit_classic(b, groups["classic"], {TopicPartition(source, 0): 3, TopicPartition(source, 1): 4})
        await asyncio.to_thread(
            console_consumer(cluster, source, groups["kip848"], PARTITIONS * PER_PARTITION, protocol="consumer").wait
        )
        share_from_earliest(cluster, groups["share"])
        await asyncio.to_thread(console_consumer(cluster, source, groups["share"], 5, share=True).wait)
        for name, protocol in (("streams-classic", "classic"), ("streams-kip1071", "streams")):
            await _run_streams(cluster, groups[name], source, sink, protocol)

        raw = {(p, o): (k, v) for p, o, k, v in await offsets_topic_records(b)}
        decoded = kafka_decoded(cluster)
        by_group = {g: name for name, g in groups.items()}
        records = []
        for (partition, offset), (key, value) in sorted(decoded.items()):
            scenario = by_group.get(_group_of(key) or "")
            if scenario is None:
                continue
            if (partition, offset) not in raw:
                raise SystemExit(f"record {partition}/{offset} decoded by Kafka but not read (aborted?): {key}")
            key_bytes, value_bytes = raw[(partition, offset)]
            records.append(
                {
                    "scenario": scenario,
                    "partition": partition,
                    "offset": offset,
                    "key_hex": key_bytes.hex(),
                    "value_hex": None if value_bytes is None else value_bytes.hex(),
                    "kafka_key": key,
                    "kafka_value": value,
                }
            )
        document = {
            "kafka_version": cluster.version,
            "made_by": "python -m tests.capture_group_records (one KRaft node of lagd.embedded.kafka); the oracle "
            "(kafka_key, kafka_value) is Kafka's own DumpLogSegments --offsets-decoder on the same segments",
            "captured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "scenarios": SCENARIOS,
            "record_types": kafka_record_types(cluster),
            "records": records,
        }
        path = out_path or DATA / f"kafka_{cluster.version}_group_records.json"
        path.write_text(json.dumps(document, indent=1) + "\n")
        return path
    finally:
        cluster.stop()


async def _run_streams(cluster: KafkaCluster, app_id: str, source: str, sink: str, protocol: str) -> None:
    app = streams_app(cluster, app_id, source, sink, protocol)
    try:
        await asyncio.to_thread(app.expect, "RUNNING")
        describe = describe_streams_offsets if protocol == "streams" else describe_offsets
        for _ in range(300):
            rows = await asyncio.to_thread(describe, cluster, app_id)
            if {k: c for k, (c, _, _) in rows.items()} == {(source, p): PER_PARTITION for p in range(PARTITIONS)}:
                return
            await asyncio.sleep(0.2)
        raise SystemExit(f"{app_id} did not commit every record: {rows}")
    finally:
        await asyncio.to_thread(app.stop)


if __name__ == "__main__":
    print(asyncio.run(capture(Path(sys.argv[1]) if len(sys.argv) > 1 else None)))
