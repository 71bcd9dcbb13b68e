"""Agreement during live traffic: lagd against `kafka-consumer-groups --describe` while groups commit.

On the real Apache Kafka (`apache_kafka`), a producer writes into every partition all the
time and four groups of different kinds commit all the time:

- `classic`: an aiokafka member of a classic group, committing its positions every 0.5 s;
- `static`: the same with a static member (`group.instance.id`);
- `txn`: transactional offset commits (`sendOffsetsToTransaction`), every fourth aborted;
- `kip848`: the Java consumer with `group.protocol=consumer` (tests/java/Committer.java).

Every client keeps its own record of what it did, with wall-clock times: each commit's
send and acknowledgement, each record's send, acknowledgement and offset. One lagd runs two
clusters on the same brokers, one reading `__consumer_offsets` ("topic") and one polling the
admin API ("admin"), both with `offset-refresh` R = 1 s.

At each sampled moment the tool runs once for all four groups (started at s, done at e), and
right after it lagd is asked for each group on both clusters (answers done by q). The
moment the tool read a group (its describe time d, somewhere in [s, e]: the tool's JVM takes
1.5 s and, on a loaded machine, up to 40 s) is pinned by its own answer: the moments at which
the group held every committed offset the tool printed, by the clients' record; d is the
earliest of them. Then, for every partition the tool prints with a committed offset, each
lagd answer is

- **exact** when lagd's committed offset and lag equal the tool's; else
- **within one offset-refresh** when lagd's committed offset is a value the group's committed
  offset held at some moment of W = [d - R, q] and lagd's lag is what that offset gives
  against a log end the partition held at some moment of W; else it **disagrees** (fails).

"A value held at some moment of [a, b]", from the clients' own record, in order of commits:
commit i is the committed offset from when it became visible until commit i+1 became
visible. It became visible no earlier than it was sent and no later than it was
acknowledged, except a transactional commit, which becomes visible with its transaction's
markers, after the commit returns; Kafka refuses the producer's next transaction until those
are written, so it is visible by the time the next transaction (committed or aborted) was
acknowledged. So commit i is possibly held in [a, b] when it was sent by b and commit i+1 is
not certainly visible before a. A log end held at some moment of [a, b] lies between one
past the highest offset acknowledged by a and one past the highest offset of a record sent
by b. The tool itself is held to the same rule over [s, e] (it agrees with the clients'
record), so the ground truth is checked too.

The table of every sample goes to test-artifacts/kafka-live-agreement.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as TP

from lagd.core.config import Settings, parse
from lagd.embedded.kafka import KafkaCluster
from lagd.embedded.services import free_port
from lagd.ingest.validate import DECODE_ERRORS_ONLY
from tests.kafka_groups import _num, _table, create_topic, ensure_offsets_topic, java_classes
from tests.test_apache_kafka import Lagd, lagd_running

pytestmark = pytest.mark.slow

REFRESH = 1.0  # offset-refresh of both of lagd's clusters, s
PARTITIONS = 3
SAMPLES = 6
SOURCES = ("topic", "admin")
KINDS = ("classic", "static", "txn", "kip848")

Key = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class Commit:
    """One commit a client made: sent at `sent_ms`, acknowledged at `acked_ms`; `visible_by_ms`
    is when it is certainly visible (acknowledgement; for a transaction, the next one's)."""

    offset: int
    sent_ms: int
    acked_ms: int
    visible_by_ms: float


@dataclass
class Record:
    """What the clients did, by their own account."""

    commits: dict[Key, list[Commit]] = field(default_factory=dict)
    sends: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # partition -> (sent, acked, offset)
    aborted: dict[Key, set[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def commit(self, key: Key, commit: Commit) -> None:
        self.commits.setdefault(key, []).append(commit)

    def held(self, key: Key, a_ms: float, b_ms: float) -> set[int]:
        """The committed offsets `key` held at some moment of [a_ms, b_ms] (in commit order)."""
        cs = self.commits.get(key, [])
        return {
            c.offset
            for i, c in enumerate(cs)
            if c.sent_ms <= b_ms and (i + 1 == len(cs) or cs[i + 1].visible_by_ms >= a_ms)
        }

    def held_when(self, key: Key, offset: int) -> list[tuple[float, float]]:
        """The moments `key` possibly held `offset`: from a commit of it being sent until the
        next commit is certainly visible (intervals, in commit order)."""
        cs = self.commits.get(key, [])
        end = float("inf")
        return [
            (c.sent_ms, cs[i + 1].visible_by_ms if i + 1 < len(cs) else end)
            for i, c in enumerate(cs)
            if c.offset == offset
        ]

    def log_end(self, partition: int, a_ms: float, b_ms: float) -> tuple[int, int]:
        """Bounds of the log ends `partition` held at some moment of [a_ms, b_ms]."""
        sends = self.sends.get(partition, [])
        lo = 1 + max((o for _, acked, o in sends if acked <= a_ms), default=-1)
        hi = 1 + max((o for sent, _, o in sends if sent <= b_ms), default=-1)
        return lo, hi

    def explains(self, key: Key, a_ms: float, b_ms: float, offset: int, lag: int) -> bool:
        """`offset` and `lag` are what the group and partition held at some moment of [a_ms, b_ms]."""
        if offset not in self.held(key, a_ms, b_ms):
            return False
        lo, hi = self.log_end(key[2], a_ms, b_ms)
        # lag is max(0, log end - offset), for a log end in [lo, hi]
        return lo <= offset + lag <= hi if lag > 0 else lo <= offset


def now_ms() -> int:
    return int(time.time() * 1000)


async def produce_steadily(bootstrap: str, topic: str, stop: asyncio.Event, record: Record) -> None:
    """Until `stop`: a record into each partition every 0.1 s (acks=all), each noted with its offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()

    async def into(partition: int) -> None:
        sends = record.sends.setdefault(partition, [])
        while not stop.is_set():
            sent = now_ms()
            try:
                meta = await producer.send_and_wait(topic, b"r", partition=partition)
            except KafkaError as exc:
                record.failures.append(f"producer, partition {partition}: {exc!r}")
            else:
                sends.append((sent, now_ms(), meta.offset))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    try:
        await asyncio.gather(*(into(p) for p in range(PARTITIONS)))
    finally:
        await producer.stop()


async def commit_steadily(
    bootstrap: str, topic: str, group: str, stop: asyncio.Event, record: Record, instance_id: str | None = None
) -> None:
    """A classic group member (aiokafka) reading everything and committing its positions every 0.5 s."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        client_id=f"live-{group}",
    )
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        commit_at = loop.time()
        while not stop.is_set():
            await consumer.getmany(timeout_ms=100)
            if loop.time() < commit_at or not consumer.assignment():
                continue
            commit_at = loop.time() + 0.5
            offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            sent = now_ms()
            try:
                await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
            except KafkaError as exc:
                record.failures.append(f"{group}: commit {exc!r}")
                continue
            acked = now_ms()
            for tp, o in offsets.items():
                record.commit((group, tp.topic, tp.partition), Commit(o, sent, acked, acked))
    finally:
        await consumer.stop()


async def commit_transactions(bootstrap: str, topic: str, group: str, stop: asyncio.Event, record: Record) -> None:
    """Transactional offset commits for `group` every 0.5 s: each partition's offset a few records
    behind its acknowledged log end; every fourth transaction is aborted, with offsets no commit
    ever has (1,000,000 and up), so lagd showing one would be caught."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"live-tx-{group}")
    await producer.start()
    pending: list[
        tuple[Commit, Key]
    ] = []  # the last committed transaction's commits, visible by the next one's acknowledgement
    previous = dict.fromkeys(range(PARTITIONS), 0)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            abort = n % 4 == 0
            offsets = {}
            for p in range(PARTITIONS):
                sends = record.sends.get(p, [])
                o = max(previous[p], sends[-1][2] + 1 - 3 if sends else 0, 0)
                offsets[p] = 1_000_000 + n if abort else o
            sent = now_ms()
            try:
                await producer.begin_transaction()
                await producer.send_offsets_to_transaction(
                    {TP(topic, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}, group
                )
                if abort:
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
            except KafkaError as exc:
                record.failures.append(f"{group}: transaction {exc!r}")
                break
            acked = now_ms()
            for c, key in pending:
                record.commit(key, Commit(c.offset, c.sent_ms, c.acked_ms, acked))
            pending = []
            for p, o in offsets.items():
                key = (group, topic, p)
                if abort:
                    record.aborted.setdefault(key, set()).add(o)
                else:
                    previous[p] = o
                    pending.append((Commit(o, sent, acked, float("inf")), key))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        for c, key in pending:  # the last: never certainly visible by the record's account
            record.commit(key, c)
        await producer.stop()


class JavaCommitter:
    """tests/java/Committer.java: the Java consumer committing every 0.5 s, its commits read into `record`."""

    def __init__(self, cluster: KafkaCluster, topic: str, group: str, protocol: str, record: Record) -> None:
        args = cluster.java_command(
            "Committer", cluster.bootstrap, group, topic, protocol, "500", log="committer.log",
            classes=str(java_classes(cluster)),
        )  # fmt: skip
        self.group, self.record = group, record
        self.errors = cluster.workdir / f"committer-{group}.err"
        with self.errors.open("w") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, *rest = line.split()
            if word == "COMMIT":
                sent, acked, topic, partition, offset = rest
                c = Commit(int(offset), int(sent), int(acked), int(acked))
                self.record.commit((self.group, topic, int(partition)), c)
            elif word == "FAILED":
                self.record.failures.append(f"{self.group}: {line.strip()}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.join(10)
        if self.proc.returncode != 0:
            self.record.failures.append(
                f"{self.group}: Committer exited {self.proc.returncode}: {self.errors.read_text()[-2000:]}"
            )


def two_sources(cluster: KafkaCluster, database_url: str, port: int) -> Settings:
    """One lagd, two clusters on the same brokers: "topic" reads __consumer_offsets, "admin" polls."""
    return parse(
        {
            "clusters": {
                source: {
                    "bootstrap-servers": cluster.bootstrap.split(","),
                    "offsets-source": source,
                    "offset-refresh": REFRESH,
                    "topic-refresh": 2.0,
                }
                for source in SOURCES
            },
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": {"enabled": False},
        },
        env={},
    )


async def lagd_view(lagd: Lagd, source: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (committed offset, lag) that lagd's cluster `source` serves for `group`."""
    status, body = await lagd.get(f"/v3/kafka/{source}/consumer/{group}/lag")
    if status != 200:
        return {}
    return {
        (p["topic"], p["partition"]): (p["end"]["offset"], p["current_lag"])
        for p in body["status"]["partitions"]
        if p["end"]
    }


def describe_all(cluster: KafkaCluster, groups: list[str]) -> dict[Key, tuple[int, int]]:
    """One `kafka-consumer-groups --describe --offsets` for every group: (group, topic, partition) ->
    (committed, lag), for the partitions with a committed offset."""
    args = [arg for g in groups for arg in ("--group", g)]
    out = cluster.consumer_groups("--describe", *args, "--offsets")
    rows: dict[Key, tuple[int, int]] = {}
    for r in _table(out):
        committed, lag = _num(r["CURRENT-OFFSET"]), _num(r["LAG"])
        if committed is not None and lag is not None:
            rows[(r["GROUP"], r["TOPIC"], int(r["PARTITION"]))] = (committed, lag)
    return rows


@dataclass
class Sample:
    n: int
    s_ms: int  # the tool started
    e_ms: int  # the tool printed
    q_ms: int  # lagd answered
    tool: dict[Key, tuple[int, int]]
    lagd: dict[str, dict[Key, tuple[int, int]]]  # source -> its view
    described: dict[str, float] = field(default_factory=dict)  # group -> its describe time d (judge)


@contextlib.asynccontextmanager
async def live_traffic(cluster: KafkaCluster, topic: str, groups: dict[str, str]) -> AsyncIterator[Record]:
    """The producer and the four committing groups, running until the block ends."""
    b = cluster.bootstrap
    record = Record()
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(produce_steadily(b, topic, stop, record)),
        asyncio.create_task(commit_steadily(b, topic, groups["classic"], stop, record)),
        asyncio.create_task(commit_steadily(b, topic, groups["static"], stop, record, f"{groups['static']}-1")),
        asyncio.create_task(commit_transactions(b, topic, groups["txn"], stop, record)),
    ]
    java = await asyncio.to_thread(JavaCommitter, cluster, topic, groups["kip848"], "consumer", record)
    try:
        yield record
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await asyncio.to_thread(java.stop)


async def test_lagd_agrees_with_kafka_consumer_groups_during_live_traffic(
    apache_kafka: KafkaCluster, database_url: str, unique: str, settle: Any, artifacts: Any
) -> None:
    """At SAMPLES moments of live traffic every group's committed offset and lag per partition, in
    both offsets sources, equal the tool's or are what the group held within one offset-refresh."""
    b = apache_kafka.bootstrap
    topic = f"live-{unique}"
    groups = {kind: f"live-{unique}-{kind}" for kind in KINDS}
    kind_of = {g: k for k, g in groups.items()}
    await ensure_offsets_topic(b)
    await create_topic(b, topic, PARTITIONS)
    samples: list[Sample] = []
    async with (
        lagd_running(two_sources(apache_kafka, database_url, free_port())) as lagd,
        live_traffic(apache_kafka, topic, groups) as record,
    ):

        async def all_committed() -> bool:
            for source in SOURCES:
                for g in groups.values():
                    if len(await lagd_view(lagd, source, g)) < PARTITIONS:
                        return False
            return True

        await settle(all_committed, timeout=90, interval=0.2, what="every group's commits in both of lagd's clusters")
        for n in range(SAMPLES):
            s = now_ms()
            tool = await asyncio.to_thread(describe_all, apache_kafka, list(groups.values()))
            e = now_ms()
            views: dict[str, dict[Key, tuple[int, int]]] = {}
            for source in SOURCES:
                views[source] = {}
                for g in groups.values():
                    for (t, p), v in (await lagd_view(lagd, source, g)).items():
                        views[source][(g, t, p)] = v
            samples.append(Sample(n, s, e, now_ms(), tool, views))
        _, metrics = await lagd.get("/metrics")
    # every record Kafka's coordinator wrote decoded: none rejected, and decode errors only of the
    # kinds that reject nothing (a KIP-848 assignment naming a topic id not yet learnt)
    rejected = re.findall(
        r'^lagd_ingest_rejected_total\{cluster="([^"]+)",reason="([^"]+)"\} ([0-9.e+]+)$', metrics, re.M
    )
    assert rejected and [r for r in rejected if float(r[2]) > 0] == [], rejected  # (every reason is listed)
    decode_errors = re.findall(
        r'^lagd_ingest_decode_errors_total\{cluster="([^"]+)",reason="([^"]+)"\} ([0-9.e+]+)$', metrics, re.M
    )
    assert {r for _, r, n in decode_errors if float(n) > 0} <= set(DECODE_ERRORS_ONLY), decode_errors
    # every client stopped: the record is complete (each in-flight send acknowledged or failed)
    assert not record.failures, record.failures

    rows, problems = judge(samples, record, kind_of)
    write_table(artifacts, apache_kafka.version, rows, samples)
    assert not problems, "\n".join(problems)
    # every kind of group was seen at every sample, on all its partitions
    assert len(rows) == SAMPLES * len(KINDS) * len(SOURCES), len(rows)


Interval = tuple[float, float]


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The moments in both `a` and `b` (closed intervals)."""
    return [(max(x0, y0), min(x1, y1)) for x0, x1 in a for y0, y1 in b if max(x0, y0) <= min(x1, y1)]


def describe_time(smp: Sample, record: Record, group: str) -> float | None:
    """The earliest moment of [s, e] at which `group` held every committed offset the tool
    printed for it (the tool read it then or later); None when no moment fits."""
    moments: list[Interval] = [(smp.s_ms, smp.e_ms)]
    for key, (k, _) in smp.tool.items():
        if key[0] == group:
            moments = intersect(moments, record.held_when(key, k))
    return min((a for a, _ in moments), default=None)


def judge(samples: list[Sample], record: Record, kind_of: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per sample, kind and source: partitions exact, within one offset-refresh, disagreeing;
    and every problem (a disagreement, the tool against the clients' record, a partition missing)."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    r_ms = REFRESH * 1000
    for smp in samples:
        for group in sorted({key[0] for key in smp.tool}):
            d = describe_time(smp, record, group)
            if d is None:
                problems.append(f"sample {smp.n}: the tool's answer for {group} fits no moment of the clients' record")
            else:
                smp.described[group] = d
        for key, (k, lag_k) in smp.tool.items():
            if not record.explains(key, smp.s_ms, smp.e_ms, k, lag_k):
                problems.append(
                    f"sample {smp.n}: kafka-consumer-groups {key} = ({k}, lag {lag_k}) is not what the clients "
                    f"record for [{smp.s_ms}, {smp.e_ms}]: offsets {sorted(record.held(key, smp.s_ms, smp.e_ms))}, "
                    f"log end {record.log_end(key[2], smp.s_ms, smp.e_ms)}"
                )
        for source in SOURCES:
            view = smp.lagd[source]
            for kind in KINDS:
                keys = sorted(key for key in smp.tool if kind_of[key[0]] == kind)
                row = {"sample": smp.n, "kind": kind, "source": source, "partitions": len(keys)}
                row.update(exact=0, within=0, disagree=0)
                if len(keys) != PARTITIONS:
                    problems.append(f"sample {smp.n}: the tool showed {kind} on {len(keys)} partitions")
                for key in keys:
                    mine = view.get(key)
                    d = smp.described.get(key[0], smp.e_ms)
                    if mine == smp.tool[key]:
                        row["exact"] += 1
                    elif mine is not None and record.explains(key, d - r_ms, smp.q_ms, *mine):
                        row["within"] += 1
                    else:
                        row["disagree"] += 1
                        problems.append(
                            f"sample {smp.n}, {source}: lagd {key} = {mine}, kafka-consumer-groups {smp.tool[key]}; "
                            f"held in [d - R, q] = [{d - r_ms:.0f}, {smp.q_ms}]: offsets "
                            f"{sorted(record.held(key, d - r_ms, smp.q_ms))}, "
                            f"log end {record.log_end(key[2], d - r_ms, smp.q_ms)}"
                        )
                extra = sorted(k for k in view if kind_of.get(k[0]) == kind and k not in smp.tool)
                if extra:
                    problems.append(f"sample {smp.n}, {source}: lagd shows {extra}, the tool does not")
                rows.append(row)
    return rows, problems


def write_table(artifacts: Any, version: str, rows: list[dict[str, Any]], samples: list[Sample]) -> None:
    """test-artifacts/kafka-live-agreement.md: per sample, kind and source, and the totals."""
    total: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        t = total.setdefault((r["kind"], r["source"]), [0, 0, 0])
        t[0] += r["exact"]
        t[1] += r["within"]
        t[2] += r["disagree"]
    lines = [
        f"# lagd against kafka-consumer-groups --describe during live traffic (Kafka {version})",
        "",
        "tests/test_apache_kafka_live.py. Agreement per partition: exact, or lagd's committed offset "
        f"and lag are what the group held within one offset-refresh ({REFRESH:g} s) before the tool read "
        "the group (its describe time d, pinned by the tool's own answer), "
        "by the clients' own record of their commits and sends.",
        "",
        "| group kind | offsets source | partitions | exact | within one offset-refresh | disagree |",
        "|---|---|---|---|---|---|",
    ]
    for (kind, source), (ex, wi, di) in total.items():
        lines.append(f"| {kind} | {source} | {ex + wi + di} | {ex} | {wi} | {di} |")
    lines += [
        "",
        "| sample | tool ran (s) | lagd answered after the tool (s) | W = [d - R, q] at most (s) |",
        "|---|---|---|---|",
    ]
    for s in samples:
        widest = max((s.q_ms - d for d in s.described.values()), default=0.0) / 1000 + REFRESH
        lines.append(f"| {s.n} | {(s.e_ms - s.s_ms) / 1000:.1f} | {(s.q_ms - s.e_ms) / 1000:.2f} | {widest:.2f} |")
    (artifacts / "kafka-live-agreement.md").write_text("\n".join(lines) + "\n")


def test_the_rule_of_values_held_in_an_interval() -> None:
    """The clients' record: which committed offsets and log ends a moment of [a, b] can show."""
    record = Record()
    key = ("g", "t", 0)
    for offset, sent, acked in ((5, 100, 110), (9, 200, 210), (12, 300, 310)):
        record.commit(key, Commit(offset, sent, acked, acked))
    assert record.held(key, 150, 190) == {5}  # between commits: the first only
    assert record.held(key, 205, 205) == {5, 9}  # the second sent, not yet acknowledged
    assert record.held(key, 211, 400) == {9, 12}
    # a transactional commit is certainly visible only once the next transaction was acknowledged
    record.commit(key, Commit(20, 400, 410, 900))
    record.commit(key, Commit(25, 900, 910, float("inf")))
    assert record.held(key, 800, 850) == {12, 20}  # 20's markers may still be on their way
    assert record.held(key, 901, 950) == {20, 25}  # the next transaction acknowledged: 20 is visible
    record.sends[0] = [(100, 105, 0), (200, 205, 1), (300, 305, 2)]
    assert record.log_end(0, 250, 250) == (2, 2)
    assert record.log_end(0, 250, 301) == (2, 3)  # offset 2 sent by 301: the log may hold it
    assert record.explains(key, 211, 250, 9, 0)  # lag 0: a log end of 2 is below the offset
    assert not record.explains(key, 211, 250, 9, 3)  # a log end of 12 was never held
    assert not record.explains(key, 211, 250, 5, 0)  # 5 was replaced before 211


def test_the_describe_time_is_pinned_by_the_tools_own_answer() -> None:
    """A tool that ran from 100 to 900 ms and printed offsets 9 (p0) and 4 (p1) read the group
    when it held both: from 400 ms (4 sent) to 500 ms (9 replaced, certainly)."""
    record = Record()
    p0, p1 = ("g", "t", 0), ("g", "t", 1)
    record.commit(p0, Commit(9, 150, 160, 160))
    record.commit(p0, Commit(12, 450, 500, 500))
    record.commit(p1, Commit(2, 150, 160, 160))
    record.commit(p1, Commit(4, 400, 410, 410))
    smp = Sample(0, 100, 900, 905, {p0: (9, 0), p1: (4, 0)}, {})
    assert describe_time(smp, record, "g") == 400
    smp = Sample(0, 100, 900, 905, {p0: (12, 0), p1: (2, 0)}, {})  # never held together
    assert describe_time(smp, record, "g") is None
