"""Fill a real Apache Kafka `__consumer_offsets` by real clients: many aiokafka consumers committing.

What the catch-up benchmark's Kafka variant (`python -m bench.bench_catchup --kafka`) reads.
Nothing here writes to `__consumer_offsets` itself: the broker's group coordinator writes every
record, in the record versions of the Kafka it is (4.4.0 writes offset commit values v4, which
lagd's own encoder never writes).

The input, with the same shape as the Tansu variant's:
- `TOPICS` topics of `partitions` partitions, each partition holding `LOG_END` records
  (produced by aiokafka, so every commit below has a lag to compute);
- `groups` groups, group g reading topic g % TOPICS: one aiokafka consumer per group, which
  subscribes (JoinGroup and SyncGroup of the classic protocol, the coordinator then writes the
  group's metadata record), commits the offsets of all its partitions `ROUNDS` times (one
  OffsetCommit request of `partitions` offsets each time, the coordinator writing one record
  per partition), and leaves (LeaveGroup: the group is empty, another metadata record). The
  consumers run in `procs` processes, `concurrency` of them at a time in each;
- then one marker commit for each offsets partition that holds a group: the first group homed
  there commits partition 0 of its topic once more, alone (a consumer with a manual assignment:
  generation -1, no membership, so the coordinator writes that commit and nothing after it).
  Before returning, the last record of each offsets partition is read back and must be that
  marker commit: the benchmark's completion test looks for exactly those.

With the defaults, 2,000 consumers commit 2,000 x 50 x 5 = 500,000 offsets, and the markers
add 50: 500,050 offset commit records, plus the group metadata records the coordinator wrote
for the joins and leaves. The figures count every record of the topic (its log end offsets:
no transactions, no compaction in a fresh topic), since a reader reads them all.

Progress: one line every 5 s (commits written, groups done, rate). Nothing is cached between
runs: each run starts a new broker and fills it anew (about a minute or two on 2 cores).
Run alone: `python -m bench.kafka_fill --bootstrap HOST:PORT [--groups 2000] [--partitions 50]`
against a broker whose offsets topic has `OFFSETS_PARTITIONS` partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import struct
import sys
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from lagd.sim.encode import offsets_partition_for

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50
TOPICS = 10
LOG_END = 101  # records per data-topic partition
ROUNDS = 5
MARKER_OFFSET = 95
PROGRESS_S = 5.0
JOIN_TIMEOUT_S = 120.0


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def topic_of(g: int) -> str:
    return f"topic-{g % TOPICS:02d}"


def group_name(g: int) -> str:
    return f"group-{g:05d}"


def round_offset(r: int) -> int:
    return 10 + 15 * r


@dataclass
class Filled:
    """What the fill wrote, as the benchmark's completion test needs it."""

    groups: int = 0
    commits: int = 0  # offset commits the clients made (the coordinator wrote one record each)
    records: int = 0  # every record in __consumer_offsets (sum of its log end offsets)
    seconds: float = 0.0  # the whole fill: topics, data, commits, markers, the check
    commit_seconds: float = 0.0  # the consumers alone: from the first spawn to the last exit
    # offsets partition -> (group, topic, partition, offset) of its last record (the marker)
    markers: dict[int, tuple[str, str, int, int]] = field(default_factory=dict)


# --- one fill process: `concurrency` consumers at a time ---------------------------------


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.done = asyncio.Event()

    async def on_partitions_revoked(self, revoked: object) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if len(assigned) >= self.expect:
            self.done.set()


async def _one_group(bootstrap: str, g: int, partitions: int, counts: dict[str, int]) -> None:
    """One consumer of group g: join, commit ROUNDS times, leave; each step counted in `counts`."""
    topic = topic_of(g)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_name(g),
        client_id=f"fill-{g}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=60_000,
        session_timeout_ms=45_000,
        heartbeat_interval_ms=5_000,
        max_poll_interval_ms=600_000,
    )
    await consumer.start()
    try:
        listener = _Assigned(partitions)
        consumer.subscribe([topic], listener=listener)
        await asyncio.wait_for(listener.done.wait(), JOIN_TIMEOUT_S)
        counts["joined"] += 1
        for r in range(ROUNDS):
            await consumer.commit(
                {TopicPartition(topic, p): OffsetAndMetadata(round_offset(r), "") for p in range(partitions)}
            )
            counts["commits"] += partitions
    finally:
        await consumer.stop()
    counts["groups"] += 1


async def _worker(bootstrap: str, index: int, procs: int, groups: int, partitions: int, concurrency: int) -> None:
    """Fill process `index` of `procs`: groups g with g % procs == index. Reports on stdout."""
    quiet_aiokafka()
    mine = [g for g in range(groups) if g % procs == index]
    sem = asyncio.Semaphore(concurrency)
    pending = {"commits": 0, "groups": 0, "joined": 0}

    async def run(g: int) -> None:
        async with sem:
            await _one_group(bootstrap, g, partitions, pending)

    async def report() -> None:
        while True:
            await asyncio.sleep(0.5)
            if any(pending.values()):
                print(json.dumps(pending), flush=True)
                pending.update(commits=0, groups=0, joined=0)

    reporter = asyncio.create_task(report())
    try:
        await asyncio.gather(*(run(g) for g in mine))
    finally:
        reporter.cancel()
    print(json.dumps(pending), flush=True)


# --- the parent: topics, data, the fill processes, the markers, the check ---------------


async def _topics_and_data(bootstrap: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"topic-{t:02d}", partitions, 1) for t in range(TOPICS)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    await producer.start()
    try:
        futures = []
        for t in range(TOPICS):
            for p in range(partitions):
                b = producer.create_batch()
                for _ in range(LOG_END):
                    b.append(key=None, value=b"x" * 16, timestamp=None)
                futures.append(await producer.send_batch(b, f"topic-{t:02d}", partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _run_processes(
    bootstrap: str, groups: int, partitions: int, procs: int, concurrency: int, started: float
) -> int:
    """The fill processes, their progress summed into one line every PROGRESS_S. Commits made."""
    expected = groups * partitions * ROUNDS
    totals = {"commits": 0, "groups": 0, "joined": 0}
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.kafka_fill", "--worker", str(i), "--procs", str(procs),
            "--bootstrap", bootstrap, "--groups", str(groups), "--partitions", str(partitions),
            "--concurrency", str(concurrency),
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(procs)
    ]  # fmt: skip
    t0 = time.perf_counter()

    async def read(child: asyncio.subprocess.Process) -> None:
        assert child.stdout is not None
        async for line in child.stdout:
            part = json.loads(line)
            totals["commits"] += part["commits"]
            totals["groups"] += part["groups"]
            totals["joined"] += part["joined"]

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_S)
            now = time.perf_counter()
            say(
                f"fill: {totals['commits']:,}/{expected:,} offsets committed ({totals['commits'] / (now - t0):,.0f}/s); "
                f"consumers: {totals['joined']:,}/{groups:,} joined, {totals['groups']:,} done and left; "
                f"{now - started:.0f} s in"
            )

    ticker = asyncio.create_task(progress())
    try:
        await asyncio.gather(*(read(c) for c in children))
        codes = [await c.wait() for c in children]
    finally:
        ticker.cancel()
        for c in children:
            if c.returncode is None:
                c.kill()
                await c.wait()
    if any(codes) or totals["commits"] != expected:
        raise RuntimeError(
            f"fill processes exited {codes} after {totals['commits']:,} of {expected:,} commits: their "
            "errors are above; rerun, and if a join timed out, lower --fill-concurrency"
        )
    return totals["commits"]


def _homes(groups: int) -> dict[int, int]:
    """Offsets partition -> the first group homed there (Java hash of the name, as Kafka's)."""
    first: dict[int, int] = {}
    for g in range(groups):
        first.setdefault(offsets_partition_for(group_name(g), OFFSETS_PARTITIONS), g)
    return first


async def _coordinators_loaded(bootstrap: str, groups: int, timeout: float = 120.0) -> None:
    """Until every offsets partition's coordinator answers (Kafka makes __consumer_offsets at the
    first FindCoordinator, then loads each partition): describing a group writes nothing."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        waiting = [group_name(g) for g in _homes(groups).values()]
        deadline = time.monotonic() + timeout
        while waiting:
            still = []
            for group in waiting:
                try:
                    (answer,) = await admin.describe_consumer_groups([group])
                    if answer.groups[0][0] != 0:  # error_code: loading, not coordinator yet
                        still.append(group)
                except KafkaError:
                    still.append(group)
            waiting = still
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(
                    f"the group coordinator of {len(waiting)} offsets partitions still does not answer after "
                    f"{timeout:.0f} s: see the broker's log"
                )
            if waiting:
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


def _commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit key (versions 0 and 1), else None."""
    (version,) = struct.unpack_from(">h", key)
    if version not in (0, 1):
        return None
    pos = 2
    (n,) = struct.unpack_from(">h", key, pos)
    group = key[pos + 2 : pos + 2 + n].decode()
    pos += 2 + n
    (n,) = struct.unpack_from(">h", key, pos)
    topic = key[pos + 2 : pos + 2 + n].decode()
    pos += 2 + n
    (partition,) = struct.unpack_from(">i", key, pos)
    return group, topic, partition


async def _markers(bootstrap: str, groups: int) -> dict[int, tuple[str, str, int, int]]:
    """One commit, alone, by the first group homed on each offsets partition (see the docstring)."""
    markers: dict[int, tuple[str, str, int, int]] = {}

    async def commit(op: int, g: int) -> None:
        tp = TopicPartition(topic_of(g), 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_name(g), client_id=f"fill-marker-{g}", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: OffsetAndMetadata(MARKER_OFFSET, "")})
        finally:
            await consumer.stop()
        markers[op] = (group_name(g), tp.topic, 0, MARKER_OFFSET)

    await asyncio.gather(*(commit(op, g) for op, g in _homes(groups).items()))
    return markers


async def _check(bootstrap: str, markers: dict[int, tuple[str, str, int, int]]) -> int:
    """Every offsets partition's last record is its marker; the topic's record count."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        tps = [TopicPartition(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]
        reader.assign(tps)
        starts = await reader.beginning_offsets(tps)
        ends = await reader.end_offsets(tps)
        last: dict[int, tuple[str, str, int] | None] = {}
        for tp in tps:
            if ends[tp] > starts[tp]:
                reader.seek(tp, ends[tp] - 1)
            else:
                reader.pause(tp)
        deadline = time.monotonic() + 60
        while len(last) < len(markers) and time.monotonic() < deadline:
            for tp, records in (await reader.getmany(timeout_ms=1000)).items():
                for rec in records:
                    if rec.offset == ends[tp] - 1 and rec.key is not None:
                        last[tp.partition] = _commit_key(rec.key)
                reader.pause(tp)
    finally:
        await reader.stop()
    wrong = [
        f"partition {op}: last record {last.get(op)!r}, marker {m[:3]!r}"
        for op, m in markers.items()
        if last.get(op) != m[:3]
    ]
    if wrong:
        raise RuntimeError(
            "the last record of some __consumer_offsets partitions is not the marker commit, so the "
            "completion test would be wrong; something else wrote to the topic after the fill: " + "; ".join(wrong[:5])
        )
    return sum(ends[tp] - starts[tp] for tp in tps)


async def fill(
    bootstrap: str, groups: int = 2000, partitions: int = 50, procs: int = 4, concurrency: int = 50
) -> Filled:
    """The whole fill (see the docstring), with progress on stderr."""
    quiet_aiokafka()
    started = time.perf_counter()
    await _topics_and_data(bootstrap, partitions)
    say(
        f"fill: {TOPICS} topics x {partitions} partitions of {LOG_END} records each ({time.perf_counter() - started:.1f} s)"
    )
    say(
        f"fill: {groups:,} aiokafka consumers (one per group) in {procs} processes, {concurrency} at a time in each, "
        f"each committing {partitions} offsets {ROUNDS} times"
    )
    await _coordinators_loaded(bootstrap, groups)
    t0 = time.perf_counter()
    commits = await _run_processes(bootstrap, groups, partitions, procs, concurrency, started)
    commit_seconds = time.perf_counter() - t0
    say(f"fill: {commits:,} offsets committed in {commit_seconds:.1f} s ({commits / commit_seconds:,.0f}/s)")
    markers = await _markers(bootstrap, groups)
    records = await _check(bootstrap, markers)
    filled = Filled(
        groups=groups,
        commits=commits + len(markers),
        records=records,
        seconds=time.perf_counter() - started,
        commit_seconds=commit_seconds,
        markers=markers,
    )
    say(
        f"fill: done in {filled.seconds:.1f} s: __consumer_offsets holds {records:,} records, {filled.commits:,} of "
        f"them offset commits ({len(markers)} markers, each the last record of its partition, checked)"
    )
    return filled


def quiet_aiokafka() -> None:
    """aiokafka's warnings (a produce retried while a new topic's leaders settle, a coordinator
    still loading) are what a busy broker says to any client; its errors still show."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--procs", type=int, default=4, help="fill processes")
    ap.add_argument("--concurrency", type=int, default=50, help="consumers at a time in each fill process")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        asyncio.run(_worker(a.bootstrap, a.worker, a.procs, a.groups, a.partitions, a.concurrency))
    else:
        asyncio.run(fill(a.bootstrap, a.groups, a.partitions, a.procs, a.concurrency))


if __name__ == "__main__":
    main()
