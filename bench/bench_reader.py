"""Offsets-topic reader end to end: records/s from a real broker (Tansu) to emitted events.

Run: `python -m bench.bench_reader [--records 200000] [--groups 500]`. Writes v3 offset
commits (byte-exact, lagd.sim.encode) for `groups` groups x 20 partitions into a fresh
offsets topic of 50 partitions on an embedded Tansu, then times `read_offsets_topic` from
the beginning until every commit has been emitted. Includes aiokafka's fetch and record
parsing, lagd's decoding, filtering and event building; one process, one core.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lagd.core.config import ClusterSettings
from lagd.core.model import Commit, Event, IngestCounters
from lagd.embedded import services as embedded
from lagd.ingest.offsets_topic import read_offsets_topic
from lagd.ingest.progress import ReaderProgress
from lagd.sim.encode import encode_offset_commit, offsets_partition_for

PARTITIONS = 50


async def run(records: int, groups: int) -> dict[str, float]:
    broker = embedded.start_tansu()
    try:
        topic = f"__consumer_offsets_bench_{uuid.uuid4().hex[:6]}"
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
        await admin.start()
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.address, linger_ms=20, max_batch_size=1 << 20)
        await producer.start()
        now = int(time.time() * 1000)
        futures = []
        for i in range(records):
            group = f"group-{i % groups:05d}"
            key, value = encode_offset_commit(group, f"topic-{i % 37}", i % 20, i, now + i, metadata="")
            futures.append(await producer.send(topic, value, key=key, partition=offsets_partition_for(group)))
        await asyncio.gather(*futures)
        await producer.stop()

        seen = 0
        done = asyncio.Event()

        async def emit(batch: list[Event]) -> None:
            nonlocal seen
            seen += sum(1 for e in batch if isinstance(e, Commit))
            if seen >= records:
                done.set()

        settings = ClusterSettings(name="bench", bootstrap_servers=[broker.address], offsets_topic=topic)
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(read_offsets_topic(settings, {}, emit, ReaderProgress(), IngestCounters(), stop))
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - started
        stop.set()
        await task
        return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed}
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=500)
    args = ap.parse_args()
    r = asyncio.run(run(args.records, args.groups))
    print(
        f"offsets-topic reader from Tansu: {r['records_per_s']:,.0f} records/s ({r['records']:,} in {r['seconds']:.2f} s)"
    )


if __name__ == "__main__":
    main()
