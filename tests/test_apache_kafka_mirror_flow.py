"""A MirrorMaker 2 flow judged by lagd from MM2's own topics, on two real Apache Kafka clusters with
a real MM2: OK while it copies, STALLED within 60 s of MM2 stopping (default settings), OK again
once it is back; each mirrored group's failover position equals what kafka-consumer-groups says
on both clusters; the delay lagd reports agrees within 1 s with the latency of records the test
stamps on the source and times on arrival at the target.

Throttled by a producer quota on the target, the real daemon (`lagd run` in this process, its
log-end sampler on both clusters) judges the flow LAGGING from the data partitions' delay (the
heartbeats, in a partition of their own, mostly keep arriving within a second: tried first, the
heartbeats alone stayed OK for 180 s under such a quota), each partition's delay within 1 s of the
test's own measure (the source broker's append time of the newest record on the target), its
trend within 3 s a minute of the same least-squares slope of that measure; OK once the quota is
gone."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from lagd.core.config import Settings, parse
from lagd.core.model import IngestCounters
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from lagd.evaluate.mirror_flow import FlowVerdict
from lagd.ingest.mirror_flows import MirrorFlows, watch_mirror_flow
from tests.kafka_groups import create_topic, produce
from tests.mirror_maker import PARTITIONS, copied, mirror_maker, mirrored_run
from tests.test_apache_kafka import lagd_running

pytestmark = pytest.mark.slow


async def _until(
    flows: MirrorFlows,
    check: Callable[[FlowVerdict], bool],
    timeout: float,
    what: str,
    counters: IngestCounters | None = None,
) -> float:
    """Seconds until the flow's verdict passes `check` (it is read every offset-refresh)."""
    started = time.monotonic()
    while True:
        verdict = flows.verdicts.get("m")
        if verdict is not None and check(verdict):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            failures = None if counters is None else counters.failures
            raise AssertionError(f"not {what} within {timeout:.0f} s: {verdict}; reader failures {failures}")
        await asyncio.sleep(0.5)


async def test_a_flow_reads_ok_then_stalled_when_mirror_maker_stops_then_ok(
    mirror_clusters: tuple[KafkaCluster, KafkaCluster], unique: str
) -> None:
    source, target = mirror_clusters
    settings = parse(
        {
            "clusters": {
                "src": {"bootstrap-servers": source.bootstrap.split(",")},
                "dst": {"bootstrap-servers": target.bootstrap.split(",")},
            },
            "mirrors": {"m": {"source": "src", "target": "dst", "rename": "prefix", "prefix": "src."}},
        },
        env={},
    )
    flows, counters, stop = MirrorFlows(), IngestCounters(), asyncio.Event()
    watcher = asyncio.create_task(
        watch_mirror_flow(settings.clusters["dst"], settings.mirrors["m"], flows, counters, stop)
    )
    try:
        topic, group = f"orders-{unique}", f"billing-{unique}"
        judged: list[float] = []  # when the check below ended: MM2 is killed right after it

        async def judged_while_mirroring(on_source: dict[int, int], on_target: dict[int, int]) -> None:
            def group_read(v: FlowVerdict) -> bool:
                mine = {g.partition: g for g in v.gaps if g.group == group}
                return (
                    v.status == "OK"
                    and len(mine) == PARTITIONS
                    and all(g.upstream_offset == on_source[p] for p, g in mine.items())
                )

            await _until(flows, group_read, 60, "OK with the group's checkpoints read", counters)
            verdict = flows.verdicts["m"]
            assert verdict.delay_s is not None and verdict.delay_s < 5, verdict
            for g in verdict.gaps:
                if g.group == group:
                    assert g.topic == f"src.{topic}"
                    assert g.upstream_offset == on_source[g.partition]  # kafka-consumer-groups on the source
                    assert g.downstream_offset == on_target[g.partition]  # and on the target
                    # the failover gap in records: the difference of the two clusters' committed offsets
                    assert g.records == on_source[g.partition] - on_target[g.partition] >= 0
            judged.append(time.monotonic())

        await mirrored_run(source, target, topic, group, judged_while_mirroring)  # MM2 is stopped at its end
        # timed from before the kill: mirrored_run reads MM2's topics back after it, which takes seconds
        stopped = judged[0]
        await _until(flows, lambda v: v.status == "STALLED", 60 - (time.monotonic() - stopped), "STALLED")
        print(f"\nSTALLED {time.monotonic() - stopped:.1f} s after MM2 was stopped")
        assert time.monotonic() - stopped <= 60
        assert "no heartbeat replicated" in flows.verdicts["m"].reason

        with mirror_maker(source, target, topic):
            await _until(flows, lambda v: v.status == "OK", 120, "OK again after MM2 restarted")
    finally:
        stop.set()
        await watcher
    assert counters.failures == {}


@dataclass
class Arrivals:
    """Records of the mirrored topic as the test's own consumer on the target read them: (arrival ms,
    send ms, partition, offset). The send time is stamped in the record's value by the source's
    producer; the arrival is the target broker's append time where the target topic keeps it
    (message.timestamp.type = LogAppendTime), else when the consumer got the record. `appended`:
    the source broker's append time of each (partition, offset), where the test reads it."""

    seen: list[tuple[int, int, int, int]] = field(default_factory=list)
    appended: dict[tuple[int, int], int] = field(default_factory=dict)

    def latency_around(self, at_ms: int, within_ms: int = 500) -> float | None:
        """The median latency in seconds of the records that arrived within `within_ms` of `at_ms`."""
        near = sorted(a - t for a, t, _, _ in self.seen if abs(a - at_ms) <= within_ms)
        return None if not near else near[len(near) // 2] / 1000

    def behind_at(self, at_ms: int, partition: int) -> float | None:
        """How long before `at_ms` the newest record of `partition` that had arrived by then was sent."""
        sent = [t for a, t, p, _ in self.seen if p == partition and a <= at_ms]
        return None if not sent else (at_ms - max(sent)) / 1000

    def appended_behind_at(self, at_ms: int, partition: int) -> float | None:
        """As `behind_at`, from when the source broker appended that record (none of the test's own
        producer's delays in it); None until the test has read it on the source."""
        offsets = [o for a, _, p, o in self.seen if p == partition and a <= at_ms]
        appended = None if not offsets else self.appended.get((partition, max(offsets)))
        return None if appended is None else (at_ms - appended) / 1000

    def longest_pause_s(self, partition: int, around_ms: int, within_ms: int = 2000) -> float:
        """The longest time between two records appended to the source's `partition` within `within_ms`
        of `around_ms`: lagd's delay is interpolated between log-end samples (2 s apart here), so a
        pause in the traffic shifts it by up to that much."""
        near = sorted(t for (p, _), t in self.appended.items() if p == partition and abs(t - around_ms) <= within_ms)
        return max((b - a for a, b in itertools.pairwise(near)), default=0) / 1000

    def delay_trend_per_min(
        self, from_ms: int, to_ms: int, partitions: list[int], appended: bool = False
    ) -> float | None:
        """The least-squares slope, in seconds per minute, of the copy's delay (its partitions' largest
        `behind_at`, or `appended_behind_at`) looked at every second from `from_ms` to `to_ms`: lagd's
        trend, measured apart."""
        behind_at = self.appended_behind_at if appended else self.behind_at
        points: list[tuple[float, float]] = []
        for at in range(from_ms, to_ms + 1, 1000):
            behind = [behind_at(at, p) for p in partitions]
            if all(b is not None for b in behind):
                points.append((at / 60_000, max(b for b in behind if b is not None)))
        if len(points) < 3:
            return None
        mx, my = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
        return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


async def _stamped_traffic(bootstrap: str, topic: str, stop: asyncio.Event, bytes_per_s: int) -> None:
    """About `bytes_per_s` to `topic`, in 100-byte records every 50 ms, each stamped with its send time
    (8 bytes, big-endian ms, first in the value; the record's timestamp is the send time too)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        per_tick = max(1, bytes_per_s // 20 // 100)
        while not stop.is_set():
            for i in range(per_tick):
                sent = int(time.time() * 1000)
                await producer.send(
                    topic, struct.pack(">q", sent) + bytes(92), partition=i % PARTITIONS, timestamp_ms=sent
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    finally:
        await producer.stop()


LOG_APPEND_TIME = 1  # a record's timestamp type when its broker stamped it on append


async def _arrivals(bootstrap: str, topic: str, into: Arrivals, stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=50, enable_auto_commit=False
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            now = int(time.time() * 1000)
            for tp, records in batches.items():
                for r in records:
                    arrived = r.timestamp if r.timestamp_type == LOG_APPEND_TIME else now
                    into.seen.append((arrived, struct.unpack_from(">q", r.value)[0], tp.partition, r.offset))
    finally:
        await consumer.stop()


async def _source_appends(bootstrap: str, topic: str, into: Arrivals, stop: asyncio.Event) -> None:
    """The source broker's append time of every record of `topic` (LogAppendTime), into `appended`."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50, enable_auto_commit=False
    )
    await consumer.start()
    try:
        while not stop.is_set():
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                for r in records:
                    assert r.timestamp_type == LOG_APPEND_TIME, r
                    into.appended[(tp.partition, r.offset)] = r.timestamp
    finally:
        await consumer.stop()


async def test_the_delay_lagd_reports_agrees_with_records_stamped_on_the_source(
    mirror_clusters: tuple[KafkaCluster, KafkaCluster], unique: str
) -> None:
    source, target = mirror_clusters
    settings = parse(
        {
            "clusters": {
                "src": {"bootstrap-servers": source.bootstrap.split(",")},
                "dst": {"bootstrap-servers": target.bootstrap.split(","), "offset-refresh": 2.0},
            },
            "mirrors": {
                "m": {"source": "src", "target": "dst", "rename": "prefix", "prefix": "src."},
            },
        },
        env={},
    )  # fmt: skip
    topic = f"stamped-{unique}"
    await create_topic(source.bootstrap, topic, PARTITIONS)
    flows, counters, stop = MirrorFlows(), IngestCounters(), asyncio.Event()
    arrivals = Arrivals()
    tasks: list[asyncio.Task[None]] = []
    with mirror_maker(source, target, topic) as mm:
        try:
            tasks = [asyncio.create_task(_stamped_traffic(source.bootstrap, topic, stop, 20_000))]
            await _until_copying(target.bootstrap, f"src.{topic}")
            flow = watch_mirror_flow(settings.clusters["dst"], settings.mirrors["m"], flows, counters, stop)
            tasks += [
                asyncio.create_task(flow),
                asyncio.create_task(_arrivals(target.bootstrap, f"src.{topic}", arrivals, stop)),
            ]
            try:
                await _until(flows, lambda v: v.status == "OK" and v.delay_s is not None, 180, "OK")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nMirrorMaker 2's log:\n{mm.log_tail()}") from None
            await _until_caught_up(arrivals)  # MM2 copies what was produced before it found the topic first
            healthy = await _agreement(flows, arrivals, looks=5)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    print(f"\ndelay lagd reports vs stamped records' latency (s): {healthy}")
    assert counters.failures == {}


async def _until_read_past(arrivals: Arrivals, moments: dict[int, int], timeout: float = 60.0) -> None:
    """Until the test's consumer has read, on each partition, a record appended after its moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        newest = {p: max((a for a, _, q, _ in arrivals.seen if q == p), default=0) for p in moments}
        if all(newest[p] > at for p, at in moments.items()):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the test's consumer did not read past {moments} within {timeout:.0f} s")


async def _until_caught_up(arrivals: Arrivals, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latency = arrivals.latency_around(int(time.time() * 1000) - 500)
        if latency is not None and latency < 2.0:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"stamped records still {arrivals.latency_around(int(time.time() * 1000) - 500)} s late")


async def _until_copying(bootstrap: str, topic: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await copied(bootstrap, topic, 1):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"MirrorMaker 2 copied nothing to {topic} within {timeout:.0f} s")


async def _agreement(flows: MirrorFlows, arrivals: Arrivals, looks: int) -> list[tuple[float, float]]:
    """At `looks` verdicts in a row: lagd's delay (the newest heartbeat's latency) against the median
    latency of the stamped records that arrived around the time that heartbeat did; each within 1 s."""
    pairs: list[tuple[float, float]] = []
    last_at = 0
    while len(pairs) < looks:
        v = flows.verdicts["m"]
        if v.observed_ms != last_at and v.delay_s is not None and v.newest_heartbeat_ms is not None:
            last_at = v.observed_ms
            arrived_at = v.newest_heartbeat_ms + int(v.delay_s * 1000)
            await asyncio.sleep(0.6)  # the records that arrived just after that heartbeat are in too
            independent = arrivals.latency_around(arrived_at)
            assert independent is not None, f"no stamped record arrived near {arrived_at}"
            assert abs(v.delay_s - independent) <= 1.0, (v, independent)
            pairs.append((v.delay_s, independent))
        await asyncio.sleep(0.2)
    return pairs


def daemon_settings(source: KafkaCluster, target: KafkaCluster, database_url: str, mirror: dict[str, Any]) -> Settings:
    """The daemon's settings for a mirror "m" from src to dst as MM2 names it ("src." prefix), both
    clusters sampled every 2 s, with `mirror`'s keys on top; notify off."""
    clusters = {
        name: {"bootstrap-servers": c.bootstrap.split(","), "offset-refresh": 2.0, "topic-refresh": 2.0}
        for name, c in (("src", source), ("dst", target))
    }
    return parse(
        {
            "clusters": clusters,
            "mirrors": {"m": {"source": "src", "target": "dst", "rename": "prefix", "prefix": "src.", **mirror}},
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "http": {"listen": f"127.0.0.1:{free_port()}"},
            "notify": {"enabled": False},
        },
        env={},
    )


async def _flow_until(lagd: Any, check: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
    """The daemon's /lagd/v1/mirrors/m/flow body once it passes `check`."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, body = await lagd.get("/lagd/v1/mirrors/m/flow")
        if status == 200 and check(body):
            return body
        await asyncio.sleep(0.5)
    raise AssertionError(f"not {what} within {timeout:.0f} s: {body}")


def _measured_apart(arrivals: Arrivals, p: dict[str, Any]) -> tuple[float, float | None, float | None, float]:
    """A partition's delay as lagd gives it (`partitions` in the flow's body) and as the test's records
    measure it at the same moment: by the source's append times, by the producer's stamps; and the
    longest pause in the source's traffic around the record lagd's figure points at."""
    appended = arrivals.appended_behind_at(p["as_of_ms"], p["partition"])
    around = p["as_of_ms"] - int(1000 * (appended or 0))
    return (
        p["seconds"], appended, arrivals.behind_at(p["as_of_ms"], p["partition"]),
        arrivals.longest_pause_s(p["partition"], around),
    )  # fmt: skip


def _append_time(cluster: KafkaCluster, topic: str) -> None:
    """`topic`'s records stamped by `cluster`'s broker on append (message.timestamp.type)."""
    cluster.tool(
        "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap,
        "--entity-type", "topics", "--entity-name", topic,
        "--alter", "--add-config", "message.timestamp.type=LogAppendTime",
    )  # fmt: skip


def _quota(cluster: KafkaCluster, *args: str) -> None:
    """Every client's producer quota on `cluster` (kafka-configs --entity-type clients --entity-default)."""
    cluster.tool(
        "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap,
        "--entity-type", "clients", "--entity-default", "--alter", *args,
    )  # fmt: skip


async def test_the_daemon_judges_a_throttled_flow_lagging_from_its_partitions(
    mirror_clusters: tuple[KafkaCluster, KafkaCluster], database_url: str, unique: str
) -> None:
    source, target = mirror_clusters
    settings = daemon_settings(
        source, target, database_url,
        {"topics": f"slow-{unique}", "window": 60.0, "heartbeat-lag-after": 5.0, "heartbeat-stall-after": 120.0},
    )  # fmt: skip
    topic = f"slow-{unique}"
    await create_topic(source.bootstrap, topic, PARTITIONS)
    _append_time(source, topic)  # the source broker's own stamp of each record, for `appended`
    stop = asyncio.Event()
    arrivals = Arrivals()
    tasks: list[asyncio.Task[None]] = []
    with mirror_maker(source, target, topic):
        try:
            tasks = [
                asyncio.create_task(_stamped_traffic(source.bootstrap, topic, stop, 20_000)),
                asyncio.create_task(_source_appends(source.bootstrap, topic, arrivals, stop)),
            ]
            await _until_copying(target.bootstrap, f"src.{topic}")
            # the copy's records stamped by the target broker when appended: their arrival, whatever the
            # test's own consumer's delays on a busy machine (MM2 syncs topic configs only every 10 min)
            _append_time(target, f"src.{topic}")
            tasks.append(asyncio.create_task(_arrivals(target.bootstrap, f"src.{topic}", arrivals, stop)))
            await _until_caught_up(arrivals)
            async with lagd_running(settings) as lagd:
                ready_ms = int(time.time() * 1000)  # lagd's looks at the flow start about now
                flow = functools.partial(_flow_until, lagd)
                ok = await flow(lambda b: b["status"] == "OK" and len(b["partitions"]) == PARTITIONS, 90, "OK")
                assert all(p["synced"] for p in ok["partitions"]), ok
                _quota(target, "--add-config", "producer_byte_rate=12000")
                try:
                    lagging = await flow(lambda b: b["status"] == "LAGGING", 240, "LAGGING under a producer quota")
                    await _until_read_past(arrivals, {p["partition"]: p["as_of_ms"] for p in lagging["partitions"]})
                finally:
                    _quota(target, "--delete-config", "producer_byte_rate")
                assert lagging["delay_trend_s_per_min"] > 0, lagging
                worst = max(lagging["partitions"], key=lambda p: p["seconds"])
                assert worst["records"] > 0 and f"{topic}[{worst['partition']}]" in lagging["reason"], lagging
                # each partition's delay against the test's own: how long before the moment lagd's figure
                # describes the newest record that had arrived on the target by then was appended to the
                # source (and sent by the test's producer, which a busy event loop can hold back)
                rows = [_measured_apart(arrivals, p) for p in lagging["partitions"]]
                print(f"\nLAGGING: {lagging['reason']}; lagd's, appended, sent, the traffic's longest pause: {rows}")
                for mine, appended, _, _ in rows:
                    assert appended is not None and abs(mine - appended) <= 1.0, rows
                # the trend against the same slope of the stamped records' delay, over lagd's window
                await _until_read_past(arrivals, dict.fromkeys(range(PARTITIONS), lagging["observed_at"]))
                since_ms = max(ready_ms, lagging["observed_at"] - 60_000)
                theirs = arrivals.delay_trend_per_min(since_ms, lagging["observed_at"], list(range(PARTITIONS)), True)
                print(f"trend: lagd's {lagging['delay_trend_s_per_min']} s/min, the stamped records' {theirs} s/min")
                assert theirs is not None and abs(lagging["delay_trend_s_per_min"] - theirs) <= 3.0, (theirs, lagging)
                await flow(lambda b: b["status"] == "OK", 180, "OK once the quota is gone")
        finally:
            stop.set()
            await asyncio.gather(*tasks)


async def test_a_covered_topic_mm2_does_not_copy_makes_the_flow_incomplete_until_it_does(
    mirror_clusters: tuple[KafkaCluster, KafkaCluster], database_url: str, unique: str
) -> None:
    """lagd's mirror covers two topics; MM2's own filter names one. Past topic-missing-after the
    flow is INCOMPLETE naming the other, every partition of it; MM2 restarted with both: OK."""
    source, target = mirror_clusters
    kept, left = f"kept-{unique}", f"left-{unique}"
    settings = daemon_settings(
        source, target, database_url, {"topics": f"(kept|left)-{unique}", "topic-missing-after": 10.0}
    )
    for topic in (kept, left):
        await create_topic(source.bootstrap, topic, PARTITIONS)
        await produce(source.bootstrap, topic, 10, PARTITIONS)
    async with lagd_running(settings) as lagd:
        with mirror_maker(source, target, kept):
            await _until_copying(target.bootstrap, f"src.{kept}")
            # both were missing until MM2 started (lagd first): wait until lagd's samples hold kept's copy
            incomplete = await _flow_until(
                lagd,
                lambda b: b["status"] == "INCOMPLETE" and kept not in {m["topic"] for m in b["missing"]},
                90,
                f"INCOMPLETE with {kept}'s copy seen",
            )
            assert [(m["topic"], m["partitions"], m["topic_missing"]) for m in incomplete["missing"]] == [
                (left, list(range(PARTITIONS)), True)
            ], incomplete
            assert f"have no copy on the target: {left}" in incomplete["reason"], incomplete
            assert incomplete["observed_at"] - incomplete["missing"][0]["since_ms"] >= 10_000, incomplete
        with mirror_maker(source, target, f"(kept|left)-{unique}"):
            await _until_copying(target.bootstrap, f"src.{left}")
            ok = await _flow_until(lagd, lambda b: b["status"] == "OK", 90, "OK once MM2 copies both")
            assert ok["missing"] == [], ok
