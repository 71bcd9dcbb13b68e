"""Hostile input: no record, name or request can crash, freeze or blind lagd (issue 12).

Two halves:
- a pure property test: random events (any int64, any string) that pass lagd's edge checks
  go to the real State and Evaluator, which must never raise and never allocate beyond a
  bound (tracemalloc);
- an end-to-end test: hostile records written into a real offsets topic (Tansu) next to a
  healthy group, read by the real daemon with PostgreSQL; it must stay up, count each
  rejection by reason, keep judging the healthy group and keep persisting.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import struct
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lagd import daemon
from lagd.core.config import Settings, parse
from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    IngestCounters,
    LogEndSample,
    OffsetDeleted,
    PartitionOwner,
)
from lagd.embedded.services import free_port
from lagd.evaluate.build import build_core
from lagd.ingest.validate import EdgeLimits
from lagd.sim.driver import Driver
from lagd.sim.encode import (
    encode_group_metadata,
    encode_group_tombstone,
    encode_offset_commit,
    encode_offset_tombstone,
)
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from lagd.state.guard import PoisonLog, apply_guarded
from tests.postgres import query

Settle = Callable[..., Awaitable[Any]]

NOW = 1_800_000_000_000
DAY = 86_400_000
EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, 2**63 - 2, -(2**63), 99_999, 100_000]
# Any int64, biased towards the edges and the small numbers real records carry.
INT64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(EDGES), st.integers(-3, 1_000))
TIME = st.one_of(INT64, st.integers(NOW - 8 * DAY, NOW + 2 * DAY))
TEXT = st.text(max_size=40)
# The broker's metadata in this world: topic -> partition count (what the reader and the sampler see).
COUNTS = {"orders": 4, "payments": 1, "t": 16}
TOPIC = st.one_of(st.sampled_from(sorted(COUNTS)), TEXT)


def _log_end(topic: str, draw: Any) -> LogEndSample:
    """A broker sample: the sampler asks only for partitions the metadata lists."""
    partition = draw(st.integers(0, COUNTS[topic] - 1))
    return LogEndSample("c", topic, partition, draw(INT64), draw(TIME))


@st.composite
def hostile_event(draw: Any) -> Event:
    kind = draw(st.sampled_from(["commit", "commit", "commit", "log_end", "offset_deleted", "deleted", "members"]))
    group = draw(st.one_of(st.sampled_from(["g", "h"]), TEXT))
    if kind == "commit":
        return Commit("c", group, draw(TOPIC), draw(INT64), draw(INT64), draw(INT64), draw(TIME), draw(TIME))
    if kind == "log_end":
        return _log_end(draw(st.sampled_from(sorted(COUNTS))), draw)
    if kind == "offset_deleted":
        return OffsetDeleted("c", group, draw(TOPIC), draw(INT64), draw(INT64))
    if kind == "deleted":
        return GroupDeleted("c", group, draw(INT64))
    owners = draw(st.lists(st.builds(PartitionOwner, TOPIC, INT64, TEXT, TEXT, TEXT), max_size=4))
    return GroupMembers("c", group, draw(INT64), tuple(owners), draw(TEXT))


def admitted(ev: Event, limits: EdgeLimits, now: int) -> bool:
    """What the offsets-topic reader lets through to the state (lagd.ingest.validate)."""
    if isinstance(ev, Commit):
        return limits.commit_problem(ev.group, ev.topic, ev.partition, ev.offset, ev.timestamp, now) is None
    if isinstance(ev, OffsetDeleted):
        return limits.tombstone_problem(ev.group, ev.topic, ev.partition) is None
    if isinstance(ev, GroupDeleted):
        return limits.group_problem(ev.group) is None
    if isinstance(ev, GroupMembers):
        return limits.group_problem(ev.group) is None and not any(
            "\x00" in o.topic + o.host + o.client_id + o.member_id for o in ev.owners
        )
    return True


ALLOCATION_BOUND = 4 * 1024 * 1024


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.lists(hostile_event(), max_size=60), st.sampled_from(["lagd", "burrow"]))
def test_state_and_evaluator_never_raise_nor_allocate_beyond_a_bound(events: list[Event], rules: str) -> None:
    state, evaluator = build_core(
        parse({"clusters": {"c": {"bootstrap-servers": ["k:9092"]}}, "evaluator": {"rules": rules}}, env={})
    )
    limits = EdgeLimits("c", partition_counts=dict(COUNTS))
    counters = {"c": IngestCounters()}
    poison = PoisonLog()
    tracemalloc.start()
    try:
        for ev in events:
            if admitted(ev, limits, NOW):
                # as the daemon applies them: an event the state refuses (a negative log end, say)
                # is counted and skipped, never raised out
                apply_guarded(state, [ev], counters, poison)
        for group in state.groups("c"):
            verdict = evaluator.group("c", group, NOW)
            assert len(verdict.partitions) <= sum(COUNTS.values()) + len(events)
        state.drain_changes()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ALLOCATION_BOUND, f"{peak} bytes for {len(events)} events"


# --- end to end: the real daemon against hostile records on a real broker ------------------


def _name(seed: int, n: int) -> str:
    """A name that does not compress (a repeated letter would fit Postgres' index compressed)."""
    return "".join(random.Random(seed).choices(string.ascii_letters + string.digits, k=n))


def group_head(version: int) -> bytes:
    """A classic group metadata value up to its member count: consumer, generation 1, no
    protocol, no leader (and no state time before v2)."""
    head = struct.pack(">hh", version, 8) + b"consumer" + struct.pack(">i", 1) + b"\xff\xff" * 2
    return head + (struct.pack(">q", -1) if version >= 2 else b"")


def hostile_records(u: str, real_topic: str, now: int) -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, the reason lagd must count it under) for each hostile record."""
    commit = encode_offset_commit
    good_key, good_value = commit(f"h-{u}", real_topic, 0, 1, now)
    member = struct.pack(">h", 1) + b"m" + struct.pack(">h", 1) + b"c" + struct.pack(">h", 2) + b"/h"
    return [
        (*commit(f"neg-{u}", real_topic, 0, -(2**63), now), "offset_out_of_range"),
        (*commit(f"none-{u}", real_topic, 0, -1, now), "offset_none"),
        (*commit(f"wide-{u}", real_topic, 2**31 - 1, 5, now), "partition_beyond_topic"),
        (*commit(f"far-{u}", f"nowhere-{u}", 150_000, 5, now), "partition_out_of_range"),
        (*commit(_name(9000, 9000), real_topic, 0, 5, now), "group_name_too_long"),
        (*commit(f"nul\x00{u}", real_topic, 0, 5, now), "group_name_invalid"),
        (*commit(f"slash-{u}", "bad/topic", 0, 5, now), "topic_name_invalid"),
        (*commit(f"old-{u}", real_topic, 0, 5, 0), "commit_time_too_old"),
        (*commit(f"y9999-{u}", real_topic, 0, 5, 253_402_300_799_000), "commit_time_in_future"),
        (*encode_offset_tombstone(_name(9001, 9000), real_topic, 0), "group_name_too_long"),
        (*encode_group_tombstone(_name(9002, 3000)), "group_name_too_long"),
        (*encode_group_metadata(f"owner-{u}", members=[(f"m\x00{u}", "c", "/h", {real_topic: [0]})]), "owner_invalid"),
        (b"\x13\x37garbage", b"\xde\xad\xbe\xef" * 3, "unknown"),  # record type 4919: skipped as unknown
        (b"\x00", b"\x00", "truncated"),  # a key shorter than its type
        (good_key, good_value[:9], "truncated"),  # a commit cut short
        (good_key[:-3], good_value, "truncated"),  # a key cut short
        (b"\x00\x01\x7f\xff" + b"g" * 8, good_value, "truncated"),  # a 32 KiB group length in 12 bytes
        (b"\x00\x01\xff\xfe" + good_key[2:], good_value, "bad_length"),  # a negative string length
        # group metadata claiming 2^31-1 members (2 GB+) in a few bytes
        (encode_group_tombstone(f"huge-{u}")[0], group_head(3) + struct.pack(">i", 2**31 - 1) + member, "bad_length"),
        # one member whose subscription claims 2 GB
        (
            encode_group_tombstone(f"huge2-{u}")[0],
            group_head(1) + struct.pack(">i", 1) + member + struct.pack(">iii", 1000, 1000, 2**31 - 1),
            "truncated",
        ),
        (good_key, struct.pack(">h", 9) + good_value[2:], "unknown_value_version"),
        (struct.pack(">h", -5) + b"\x00\x01g", b"\x00\x00", "bad_record_type"),
        (None, good_value, "null_key"),
        (*encode_group_tombstone(f"ghost-{u}"), "accepted"),  # a tombstone for a group never seen
        (*encode_offset_tombstone(f"ghost2-{u}", real_topic, 1), "accepted"),
    ]


def e2e_settings(kafka: str, database_url: str, port: int, offsets_topic: str) -> Settings:
    return parse(
        {
            "clusters": {
                "sim": {
                    "bootstrap-servers": [kafka],
                    "offsets-topic": offsets_topic,
                    "offset-refresh": 0.5,
                    "topic-refresh": 2.0,
                }
            },
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": {"enabled": False},
        },
        env={},
    )


async def metric_values(session: aiohttp.ClientSession, port: int, name: str) -> dict[str, float]:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as answer:
        text = await answer.text()
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M)}


@pytest.mark.slow
async def test_the_daemon_survives_hostile_records_and_keeps_working(
    kafka: str, database_url: str, unique: str, settle: Settle
) -> None:
    u = unique
    port = free_port()
    offsets_topic = f"__consumer_offsets_{u}"
    orders = f"orders-{u}"
    healthy = f"billing-{u}"
    sc = Scenario(
        topics=(TopicSpec(orders, 3, rate=2.0),),
        groups=(GroupSpec(healthy, (orders,), "healthy"),),
        start_ms=time.time_ns() // 1_000_000,
    )
    driver = Driver(kafka, sc, mode="topic", offsets_topic=offsets_topic, offsets_partitions=2)
    await driver.start()
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(e2e_settings(kafka, database_url, port, offsets_topic), stop=stop))
    records = hostile_records(u, orders, time.time_ns() // 1_000_000)
    expected: dict[str, int] = {}
    for _, _, reason in records:
        if reason not in ("unknown", "accepted"):
            expected[reason] = expected.get(reason, 0) + 1
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/burrow/admin/ready") as answer:
                        return answer.status == 200
                except aiohttp.ClientError:
                    return False

            await settle(ready, timeout=30, what="daemon ready")
            await driver.run(until=3.0)
            hostile_end: dict[int, int] = {}  # offsets partition -> after the last hostile record
            for i, (key, value, _) in enumerate(records):  # one record per batch (Tansu quirk)
                meta = await producer.send_and_wait(offsets_topic, value, key=key, partition=i % 2)
                hostile_end[i % 2] = meta.offset + 1
            await driver.run(until=6.0)

            async def rejected() -> dict[str, float]:
                values = await metric_values(session, port, "lagd_ingest_rejected_total")
                return {re.sub(r'.*reason="([^"]+)".*', r"\1", k): v for k, v in values.items() if v}

            async def all_counted() -> bool:
                return await rejected() == expected

            await settle(all_counted, timeout=30, what=f"every hostile record counted: {expected}")
            assert not task.done(), "the daemon stopped"
            types = await metric_values(session, port, "lagd_ingest_records_total")
            assert types.get('cluster="sim",type="unknown"') == 1
            assert not any("type_" in k for k in types)

            # The healthy group is judged on its newest commits, read after the hostile ones.
            last = {p: driver.commits[(healthy, orders, p)][-1] for p in range(3)}

            async def judged() -> bool:
                async with session.get(f"http://127.0.0.1:{port}/v3/kafka/sim/consumer/{healthy}/lag") as answer:
                    if answer.status != 200:
                        return False
                    status = (await answer.json())["status"]
                ends = {p["partition"]: p["end"]["offset"] for p in status["partitions"] if p["end"]}
                return bool(status["status"] == "OK" and ends == last)

            await settle(judged, timeout=20, what="the healthy group judged OK on its newest commits")
            async with session.get(f"http://127.0.0.1:{port}/v3/kafka/sim/consumer") as answer:
                consumers = (await answer.json())["consumers"]
            assert healthy in consumers and not any(len(c) > 1024 or "\x00" in c for c in consumers)

            # Still persisting: the healthy group's newest offsets and the reader positions past
            # every hostile record reach Postgres; nothing needed quarantine.
            def persisted() -> bool:
                rows = query(
                    database_url,
                    # the newest entry's offset: the first int64 of the last 40-byte entry
                    "SELECT partition, ('x' || encode(substring(entries FROM length(entries) - 39 FOR 8), 'hex'))"
                    "::bit(64)::bigint FROM current_windows WHERE group_name = %s",
                    healthy,
                )
                positions = dict(query(database_url, "SELECT partition, next_offset FROM reader_positions"))
                return dict(rows) == last and all(positions.get(p, 0) >= n for p, n in hostile_end.items())

            await settle(persisted, timeout=20, what="windows and reader positions persisted")
            async with session.get(f"http://127.0.0.1:{port}/metrics") as answer:
                assert "\nlagd_store_healthy 1\n" in await answer.text()
            assert query(database_url, "SELECT count(*) FROM quarantine") == [(0,)]
            assert not task.done()
    finally:
        stop.set()
        await producer.stop()
        assert await asyncio.wait_for(task, 15) == 0
        await driver.close()
