"""The end-to-end probe of one cluster (opt-in: `clusters.<name>.probe = true`): the thin async shell
around `lagd.evaluate.probe`.

The canary topic (`probe-topic`) has one partition per broker, whose only replica is that broker
(replication factor 1: the partition fails with its broker, so its probes test that broker and no
other). lagd creates the topic when it is missing and adds a partition for a broker that has none
(CreateTopics / CreatePartitions with an explicit assignment); every round it reads the topic's
metadata again, and a partition led by no broker, or by another than its own (an operator moved
it), makes its broker NOT_TAKING_WRITES with the reason saying so. lagd does not move partitions
back: see docs/probe.md.

Every `probe-interval` one record goes to each broker's partition (acks=all); its ack, or its
failure, or `probe-timeout` passing without either, is noted. One consumer without a group reads
the partitions back: each partition is assigned at the offset of the first probe this lagd wrote
to it, so a restart never reads (or counts as lost) what an earlier run wrote, and records of
other writers are ignored (each record names the lagd run that wrote it); after a reconnection the
new consumer goes on where the last one stopped. Nothing waits on a
broker in the loop's path: each send is a task of its own, at most MAX_IN_FLIGHT per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewPartitions, NewTopic
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters
from lagd.evaluate.probe import (
    NO_LEADER,
    BrokerVerdict,
    ProbeLimits,
    ProbeLog,
    canary_assignment,
    partition_of_broker,
)
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_admin, start_consumer
from lagd.ingest.kafka_options import client_options
from lagd.ingest.mirror_flows import extend_assignment
from lagd.runtime import logs
from lagd.runtime.backoff import describe_error
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

MAX_IN_FLIGHT = 3  # unsettled probes per partition: beyond, a round skips it (its broker is failing anyway)
JUDGE_EVERY_S = 0.25  # verdicts are judged this often: a probe settles at its ack or its timeout
MAGIC = b"lagd-probe 1 "
TOPIC_EXISTS = 36
UNKNOWN_TOPIC = 3


@dataclass
class Probes:
    """Every probed cluster's newest verdicts (cluster -> broker -> verdict), read by HTTP and /metrics,
    what stands in the way of probing it (cluster -> problem; absent when none), and the clusters
    each of whose canary brokers has been judged at least once."""

    verdicts: dict[str, dict[int, BrokerVerdict]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    complete: set[str] = field(default_factory=set)


def probe_limits(cluster: ClusterSettings) -> ProbeLimits:
    return ProbeLimits(
        timeout_ms=int(cluster.probe_timeout * 1000),
        slow_after_ms=int(cluster.probe_slow_after * 1000),
        window_ms=int(max(300.0, 30 * cluster.probe_interval) * 1000),
    )


def encode(run: str, seq: int, sent_ms: int) -> bytes:
    return MAGIC + f"{run} {seq} {sent_ms}".encode()


def decode(value: bytes | None, run: str) -> int | None:
    """The sequence number of a probe record this run wrote, else None."""
    if not value or not value.startswith(MAGIC):
        return None
    parts = value[len(MAGIC) :].split(b" ")
    if len(parts) != 3 or parts[0].decode(errors="replace") != run or not parts[1].isdigit():
        return None
    return int(parts[1])


async def watch_probe(
    cluster: ClusterSettings, probes: Probes, counters: IngestCounters, stop: asyncio.Event, *, clock: Clock = wall_ms
) -> None:
    """Probe `cluster` every probe-interval into `probes` until `stop`, reconnecting after failures
    as every reader does; the probes' log survives reconnections."""
    state = _Run(ProbeLog(probe_limits(cluster)), uuid.uuid4().hex[:12])
    # judged on its own, sessions or not: while lagd reconnects, the probes sent settle as failed
    judge = asyncio.create_task(_judge(cluster.name, state, probes, stop, clock), name=f"probe-judge-{cluster.name}")
    try:
        await reconnecting(
            functools.partial(_session, cluster, state, probes, stop, clock),
            stop,
            counters,
            cluster=cluster,
            what="the end-to-end probe",
            counter="probe",
            hint=f"check that the cluster is reachable and lagd may create, write and read {cluster.probe_topic}",
        )
    finally:
        judge.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await judge


async def _judge(name: str, state: _Run, probes: Probes, stop: asyncio.Event, clock: Clock) -> None:
    while not stop.is_set():
        verdicts = probes.verdicts[name] = state.log.judge(name, clock(), state.leaders)
        if state.leaders and verdicts.keys() >= state.leaders.keys():
            probes.complete.add(name)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), JUDGE_EVERY_S)


@dataclass
class _Run:
    log: ProbeLog
    run: str
    seq: int = 0
    leaders: dict[int, tuple[int, int]] = field(default_factory=dict)  # broker -> (partition, leader)
    # partition -> the offset to read next: this run's first probe there, then past each record read.
    # Kept across reconnections, so a new session's consumer goes on where the last one stopped.
    read_from: dict[int, int] = field(default_factory=dict)


async def _session(cluster: ClusterSettings, state: _Run, probes: Probes, stop: asyncio.Event, clock: Clock) -> None:
    loop = asyncio.get_running_loop()
    admin = await start_admin(cluster)
    producer: Any = None
    consumer: Any = None
    sends: set[asyncio.Task[None]] = set()  # probes in flight, and the topic's metadata being read
    reader: asyncio.Task[None] | None = None
    try:
        opts = client_options(cluster)
        opts["request_timeout_ms"] = max(1000, int(cluster.probe_timeout * 1000))
        producer = AIOKafkaProducer(**opts, acks="all", linger_ms=0, enable_idempotence=False)
        await producer.start()
        consumer = await start_consumer(cluster, fetch_max_wait_ms=100)
        prober = _Prober(cluster, state, admin, producer, consumer, clock, sends)
        reader = asyncio.create_task(prober.read(stop), name=f"probe-reader-{cluster.name}")
        await prober.manage(probes)  # the first read of the topic before the first round; later ones beside the rounds
        managing: asyncio.Task[None] | None = None
        next_round = loop.time()
        while not stop.is_set():
            if loop.time() >= next_round:
                next_round = max(next_round + cluster.probe_interval, loop.time())
                prober.send_round()
                if managing is None or managing.done():  # a metadata request to a dead broker delays no round
                    managing = asyncio.create_task(prober.manage(probes))
                    sends.add(managing)
                    managing.add_done_callback(sends.discard)
            await prober.assign_new()
            if reader.done():
                reader.result()  # its failure ends the session (reconnected)
                raise RuntimeError("the probe's reader ended")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), JUDGE_EVERY_S)
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        for task in sends:
            task.cancel()
        if consumer is not None:
            await close_quietly(consumer.stop)
        if producer is not None:
            await close_quietly(producer.stop)
        await close_quietly(admin.close)


class _Prober:
    def __init__(
        self,
        cluster: ClusterSettings,
        state: _Run,
        admin: Any,
        producer: Any,
        consumer: Any,
        clock: Clock,
        sends: set[asyncio.Task[None]],
    ) -> None:
        self.cluster = cluster
        self.topic = cluster.probe_topic
        self.state = state
        self.admin = admin
        self.producer = producer
        self.consumer = consumer
        self.clock = clock
        self.sends = sends
        self.in_flight: dict[int, int] = {}
        self.assigned: set[TopicPartition] = set()

    async def manage(self, probes: Probes) -> None:
        """Read the brokers and the canary topic's partitions; create the topic, or a partition for a
        broker that has none. A failure is kept in `probes.problems` and the old leaders stay."""
        try:
            async with asyncio.timeout(max(1.0, self.cluster.probe_timeout)):
                await self._manage()
        except Exception as exc:
            problem = f"{describe_error(exc)} while reading or creating {self.topic}"
            if probes.problems.get(self.cluster.name) != problem:
                log.warning(
                    "the probe cannot manage its canary topic",
                    cluster=self.cluster.name,
                    error=describe_error(exc),
                    hint="probing goes on with the leaders last read; if no broker is down, lagd needs Describe, "
                    f"Create and Alter on topic {self.topic} (or create it with one partition per broker, each "
                    "broker the only replica of one)",
                )
            probes.problems[self.cluster.name] = problem
        else:
            probes.problems.pop(self.cluster.name, None)

    async def _manage(self) -> None:
        meta = (await self.admin._send_request(MetadataRequest([self.topic], False))).to_object()
        brokers = [b["node_id"] for b in meta["brokers"]]
        topic = next((t for t in meta["topics"] if t["topic"] == self.topic), None)
        if topic is None or topic["error_code"] == UNKNOWN_TOPIC:
            plan = canary_assignment(brokers, {})
            answer = await self.admin.create_topics([NewTopic(self.topic, -1, -1, replica_assignments=plan)])
            for _, code, *rest in answer.topic_errors:
                if code not in (0, TOPIC_EXISTS):
                    raise RuntimeError(f"CreateTopics {self.topic} answered error {code} {rest}")
            log.info("probe canary topic created", cluster=self.cluster.name, topic=self.topic, assignment=plan)
            return  # its leaders are read next round
        if topic["error_code"]:
            raise RuntimeError(f"metadata of {self.topic} answered error {topic['error_code']}")
        replicas = {p["partition"]: list(p["replicas"]) for p in topic["partitions"]}
        leaders = {p["partition"]: p["leader"] for p in topic["partitions"]}
        plan = canary_assignment(brokers, replicas)
        if plan:
            total = len(replicas) + len(plan)
            await self.admin.create_partitions({self.topic: NewPartitions(total, [plan[p] for p in sorted(plan)])})
            log.info("probe partitions added", cluster=self.cluster.name, topic=self.topic, assignment=plan)
        # Kafka names no leader -1, as NO_LEADER does
        self.state.leaders = {b: (p, leaders.get(p, NO_LEADER)) for b, p in partition_of_broker(replicas).items()}

    def send_round(self) -> None:
        for broker, (partition, _) in sorted(self.state.leaders.items()):
            if self.in_flight.get(partition, 0) >= MAX_IN_FLIGHT:
                continue  # still waiting on the earlier ones: they settle as failed at their timeout
            self.state.seq += 1
            seq, now = self.state.seq, self.clock()
            self.state.log.sent(seq, broker, partition, now)
            self.in_flight[partition] = self.in_flight.get(partition, 0) + 1
            task = asyncio.create_task(self._send(seq, partition, now))
            self.sends.add(task)
            task.add_done_callback(self.sends.discard)

    async def _send(self, seq: int, partition: int, sent_ms: int) -> None:
        try:
            # bounded even if the client waits longer: its own expiry is probe-timeout too
            async with asyncio.timeout(3 * self.cluster.probe_timeout):
                fut = await self.producer.send(self.topic, encode(self.state.run, seq, sent_ms), partition=partition)
                meta = await fut
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.state.log.failed(seq, describe_error(exc))
        else:
            self.state.log.acked(seq, self.clock())
            self.state.read_from.setdefault(partition, meta.offset)
        finally:
            self.in_flight[partition] -= 1

    async def assign_new(self) -> None:
        """Read a partition back from this run's first probe in it, or where the last session stopped."""
        found = {TopicPartition(self.topic, p) for p in self.state.read_from}
        for tp in await extend_assignment(self.consumer, self.assigned, found):
            self.consumer.seek(tp, self.state.read_from[tp.partition])

    async def read(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not self.assigned:
                await asyncio.sleep(JUDGE_EVERY_S)
                continue
            batches = await self.consumer.getmany(timeout_ms=500, max_records=1000)
            now = self.clock()
            for tp, records in batches.items():
                for r in records:
                    self.state.read_from[tp.partition] = r.offset + 1
                    seq = decode(r.value, self.state.run)
                    if seq is not None:
                        self.state.log.received(seq, now)
