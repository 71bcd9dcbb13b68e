"""A MirrorMaker 2 flow judged by lagd from MM2's own topics, on two real Apache Kafka clusters with
a real MM2: OK while it copies, STALLED within 60 s of MM2 stopping (default settings), OK again
once it is back; each mirrored group's failover position equals what kafka-consumer-groups says
on both clusters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from lagd.config import parse
from lagd.embedded_kafka import KafkaCluster, start_kafka
from lagd.evaluate.mirror_flow import FlowVerdict
from lagd.ingest.mirror_flows import MirrorFlows, watch_mirror_flow
from lagd.model import IngestCounters
from tests.mirror_maker import PARTITIONS, mirror_maker, mirrored_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    """Two clusters of their own (MM2's topics on them hold this module's runs only): source, target."""
    source = start_kafka(1)
    try:
        target = start_kafka(1)
    except BaseException:
        source.stop()
        raise
    yield source, target
    source.stop()
    target.stop()


async def _until(flows: MirrorFlows, check: Callable[[FlowVerdict], bool], timeout: float, what: str) -> float:
    """Seconds until the flow's verdict passes `check` (it is read every offset-refresh)."""
    started = time.monotonic()
    while True:
        verdict = flows.verdicts.get("m")
        if verdict is not None and check(verdict):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not {what} within {timeout:.0f} s: {verdict}")
        await asyncio.sleep(0.5)


async def test_a_flow_reads_ok_then_stalled_when_mirror_maker_stops_then_ok(
    clusters: tuple[KafkaCluster, KafkaCluster], unique: str
) -> None:
    source, target = clusters
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
        body = await mirrored_run(source, target, topic, group)  # MM2 runs inside, and is stopped at its end
        stopped = time.monotonic()
        verdict = flows.verdicts["m"]
        assert verdict.status == "OK", verdict
        assert (
            verdict.heartbeat_age_s is not None
            and verdict.heartbeat_age_s < settings.clusters["dst"].offset_refresh + 5
        )

        def gaps_read(v: FlowVerdict) -> bool:
            return len([g for g in v.gaps if g.group == group]) == PARTITIONS

        await _until(flows, gaps_read, 30, "the group's checkpoints read")
        gaps = {g.partition: g for g in flows.verdicts["m"].gaps if g.group == group}
        for p, g in gaps.items():
            assert g.topic == f"src.{topic}"
            assert g.upstream_offset == body["source_committed"][str(p)]  # kafka-consumer-groups on the source
            assert g.downstream_offset == body["target_committed"][str(p)]  # and on the target
            assert g.records == g.upstream_offset - g.downstream_offset >= 0

        await _until(flows, lambda v: v.status == "STALLED", 60 - (time.monotonic() - stopped), "STALLED")
        assert time.monotonic() - stopped <= 60
        assert "no heartbeat replicated" in flows.verdicts["m"].reason

        with mirror_maker(source, target, topic):
            await _until(flows, lambda v: v.status == "OK", 120, "OK again after MM2 restarted")
    finally:
        stop.set()
        await watcher
    assert counters.failures == {}
