"""Capture the records a real MirrorMaker 2 writes (heartbeats, offset syncs, checkpoints) as vectors.

    python -m tests.capture_mirror_records

Starts two Apache Kafka clusters (KAFKA_VERSION, one KRaft node each) and MirrorMaker 2
(MIRROR_MAKER_VERSION) between them, runs `tests.mirror_maker.mirrored_run`, checks the records
against Kafka's own tools and writes them to tests/data/mirror-maker-VERSION-records.json, which
tests/test_mirror_records.py decodes without a broker.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from lagd.embedded.kafka import MIRROR_MAKER_VERSION, start_kafka
from tests.mirror_maker import check_capture, mirrored_run

DATA = Path(__file__).parent / "data"
VECTORS = DATA / f"mirror-maker-{MIRROR_MAKER_VERSION}-records.json"


async def capture() -> Path:
    source, target = await asyncio.gather(asyncio.to_thread(start_kafka, 1), asyncio.to_thread(start_kafka, 1))
    try:
        body = await mirrored_run(source, target, "orders", "billing")
    finally:
        source.stop()
        target.stop()
    problems = check_capture(body)
    if problems:
        raise SystemExit("the run's records disagree with Kafka's tools, not captured:\n" + "\n".join(problems))
    VECTORS.write_text(json.dumps(body, indent=1) + "\n")
    return VECTORS


def main() -> int:
    print(f"captured {asyncio.run(capture())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
