"""When will it clear, on Apache Kafka itself: a group works a backlog off at a steady pace; every
clear time lagd's API predicts is compared with when `kafka-consumer-groups --describe` first
reports the group caught up.

The group (aiokafka, a classic member) reads its two partitions at PACE records/s each and
commits its positions every 0.5 s, while a producer adds PRODUCE records/s to each; the
partitions start BACKLOGS records behind, so they clear at different times and the group with
the slower one. lagd runs with a window step of 2 s (the default 15 s would take a minute of
draining to reach the 5 commits a prediction needs; the prediction itself is the same code).
The truth: the first describe that shows every partition within CAUGHT_UP records of the log
end (what the producer adds between two commits), taken at the middle of the tool's run.
Tolerance: each prediction within 20 % of the drain's length (from the consumer's first
commit to the truth), plus the uncertainty of the truth itself (the describe's run time and
the gap since the previous one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata

from lagd.core.config import parse
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from tests.kafka_groups import _num, _table, create_topic, ensure_offsets_topic
from tests.test_apache_kafka import lagd_running

pytestmark = pytest.mark.slow

PACE = 250  # records/s the group reads from each partition
PRODUCE = 20  # records/s the producer adds to each
BACKLOGS = (12_000, 7_000)  # records behind at the start, per partition: the first clears last (~52 s)
CAUGHT_UP = PRODUCE  # within a second of production of the log end: caught up
TOLERANCE = 0.2


def now_ms() -> int:
    return int(time.time() * 1000)


async def produce(bootstrap: str, topic: str, stop: asyncio.Event, ready: asyncio.Event) -> None:
    """The backlogs at once, then PRODUCE records/s into each partition until `stop`."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        for p, n in enumerate(BACKLOGS):
            for _ in range(n):
                await producer.send(topic, b"r", partition=p)
        await producer.flush()
        ready.set()
        while not stop.is_set():
            for p in range(len(BACKLOGS)):
                for _ in range(PRODUCE // 10):
                    await producer.send(topic, b"r", partition=p)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
        await producer.flush()
    finally:
        await producer.stop()


async def consume_at_pace(bootstrap: str, topic: str, group: str, stop: asyncio.Event, started: list[int]) -> None:
    """Read each partition at PACE records/s (never ahead of its quota) and commit every 0.5 s."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=PACE,
        client_id=f"pace-{group}",
    )
    await consumer.start()
    consumer.subscribe([topic])
    loop = asyncio.get_running_loop()
    try:
        while not consumer.assignment() and not stop.is_set():
            await consumer.getmany(timeout_ms=100)  # joins the group; records taken here are few or none
        t0 = loop.time()
        done = dict.fromkeys(consumer.assignment(), 0)
        commit_at = t0
        while not stop.is_set():
            for tp in list(done):
                want = int(PACE * (loop.time() - t0)) - done[tp]
                if want > 0:
                    got = await consumer.getmany(tp, timeout_ms=20, max_records=want)
                    done[tp] += sum(len(v) for v in got.values())
            if loop.time() >= commit_at:
                commit_at += 0.5
                offsets = {tp: await consumer.position(tp) for tp in done}
                await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
                if not started:
                    started.append(now_ms())
            await asyncio.sleep(0.05)
    finally:
        await consumer.stop()


def lags(cluster: KafkaCluster, group: str) -> dict[int, int]:
    """partition -> LAG, as `kafka-consumer-groups --describe --offsets` prints it."""
    out = cluster.consumer_groups("--describe", "--group", group, "--offsets")
    return {int(r["PARTITION"]): lag for r in _table(out) if (lag := _num(r["LAG"])) is not None}


async def test_the_predicted_clear_time_matches_when_kafka_says_the_group_caught_up(
    apache_kafka: KafkaCluster, database_url: str, unique: str
) -> None:
    b = apache_kafka.bootstrap
    topic, group = f"clear-{unique}", f"clear-{unique}"
    await ensure_offsets_topic(b)
    await create_topic(b, topic, len(BACKLOGS))
    settings = parse(
        {
            "clusters": {"real": {"bootstrap-servers": b.split(","), "offset-refresh": 1.0, "topic-refresh": 2.0}},
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2, "window-step": 2.0},
            "http": {"listen": f"127.0.0.1:{free_port()}"},
            "notify": {"enabled": False},
        },
        env={},
    )
    stop, backlog_in = asyncio.Event(), asyncio.Event()
    started: list[int] = []
    predictions: list[tuple[int, int]] = []  # (asked at, predicted clear_at), ms
    async with lagd_running(settings) as lagd:
        producing = asyncio.create_task(produce(b, topic, stop, backlog_in))
        await asyncio.wait_for(backlog_in.wait(), 120)
        consuming = asyncio.create_task(consume_at_pace(b, topic, group, stop, started))
        try:
            truth: tuple[float, float] | None = None  # the describe that first saw it caught up: (start, end)
            previous_end = float(now_ms())
            deadline = time.monotonic() + 240
            while truth is None:
                assert time.monotonic() < deadline, f"not caught up within 240 s; predictions {predictions}"
                status, body = await lagd.get(f"/lagd/v1/consumer/real/{group}")
                if status == 200 and body["clearing"] is not None:
                    predictions.append((now_ms(), body["clearing"]["clear_at"]))
                s = now_ms()
                seen = await asyncio.to_thread(lags, apache_kafka, group)
                e = now_ms()
                if len(seen) == len(BACKLOGS) and max(seen.values()) <= CAUGHT_UP and started:
                    truth = (previous_end, float(e))
                previous_end = float(s)
        finally:
            stop.set()
            await asyncio.gather(producing, consuming)
    assert started and predictions, "lagd never predicted a clear time"
    low, high = truth
    true_clear = (low + high) / 2
    slack = TOLERANCE * (true_clear - started[0]) + (high - low) / 2
    errors = [(at - started[0], (clear - true_clear) / 1000.0) for at, clear in predictions if at < true_clear]
    first_at = (predictions[0][0] - started[0]) / 1000.0
    print(
        f"clearing on Kafka: drain {(true_clear - started[0]) / 1000:.1f} s, truth within +-{(high - low) / 2000:.1f} s; "
        f"first prediction {first_at:.1f} s into it; errors (s) {[round(err, 1) for _, err in errors]}"
    )
    assert errors, predictions
    bad = [(round(at / 1000, 1), round(err, 1)) for at, err in errors if abs(err) * 1000 > slack]
    assert not bad, f"predictions off by more than {slack / 1000:.1f} s: {bad}"
