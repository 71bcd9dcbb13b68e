"""lagd against Apache Kafka itself: records its group coordinator wrote, read and judged right.

Every group here is made by a real client (aiokafka, the Java consumer of Kafka's own
version, Kafka's `kafka-consumer-groups`), so every record lagd reads was written by Kafka's
group coordinator, not by lagd's encoder. The ground truth is Kafka's own tool:
`kafka-consumer-groups --describe` must print the committed offsets and lags lagd serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka.structs import TopicPartition as TP

from lagd import daemon
from lagd.core.config import Settings, parse
from lagd.embedded.kafka import KAFKA_OLD_VERSION, KafkaCluster, start_kafka
from lagd.embedded.services import free_port
from lagd.ingest.codec import DecodeError, GroupRecord, OffsetCommit, SkippedRecord, decode
from tests.kafka_groups import (
    commit_classic,
    commit_in_transaction,
    console_consumer,
    create_topic,
    delete_group,
    describe_offsets,
    every_kind_of_group,
    offsets_topic_records,
    produce,
)

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

PARTITIONS = 3
PER_PARTITION = 20


def settings_for(
    cluster: KafkaCluster,
    database_url: str,
    port: int,
    source: str = "topic",
    mirrors: dict[str, Any] | None = None,
    **cluster_keys: Any,
) -> Settings:
    """lagd's settings for `cluster` (named "real"); `cluster_keys` add or override its keys
    (bootstrap-servers of another listener, SASL and TLS); `mirrors`: [mirrors.*] tables."""
    return parse(
        {
            "mirrors": mirrors or {},
            "clusters": {
                "real": {
                    "bootstrap-servers": cluster.bootstrap.split(","),
                    "offsets-source": source,
                    "offset-refresh": 1.0,
                    "topic-refresh": 2.0,
                    **cluster_keys,
                }
            },
            "storage": {"database-url": database_url, "flush-interval": 0.2},
            "evaluator": {"cache-ttl": 0.2},
            "http": {"listen": f"127.0.0.1:{port}"},
            "notify": {"enabled": False},
        },
        env={},
    )


class Lagd:
    """The real daemon, in this process, read over its HTTP API as a dashboard would."""

    def __init__(
        self, port: int, session: aiohttp.ClientSession, source: str = "", report: list[dict[str, Any]] | None = None
    ) -> None:
        self.port, self.session, self.source = port, session, source
        self.report = [] if report is None else report  # the agreement checks made (`agreed`)
        self.task: asyncio.Task[int] | None = None  # the daemon's run, while lagd_running holds it

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"http://127.0.0.1:{self.port}{path}") as answer:
            if "json" in answer.headers.get("Content-Type", ""):
                return answer.status, await answer.json()
            return answer.status, await answer.text()

    async def partitions(self, group: str) -> dict[tuple[str, int], dict[str, Any]]:
        """(topic, partition) -> Burrow's PartitionStatus for `group`; empty when lagd does not know it."""
        status, body = await self.get(f"/v3/kafka/real/consumer/{group}/lag")
        if status != 200:
            return {}
        return {(p["topic"], p["partition"]): p for p in body["status"]["partitions"]}

    async def agrees(self, cluster: KafkaCluster, group: str, command_config: Path | None = None) -> str:
        """ "" when lagd's committed offsets and lags equal `kafka-consumer-groups --describe`'s
        (through the SASL_SSL listener with `command_config`); else the difference."""
        tool = await asyncio.to_thread(describe_offsets, cluster, group, command_config)
        ours = await self.partitions(group)
        # partitions with a committed offset: Kafka's tool also lists those a live member owns uncommitted
        mine = {k: (p["end"]["offset"], p["current_lag"]) for k, p in ours.items() if p["end"]}
        theirs = {k: (committed, lag) for k, (committed, _, lag) in tool.items() if committed is not None}
        return (
            "" if mine == theirs else f"lagd {sorted(mine.items())} != kafka-consumer-groups {sorted(theirs.items())}"
        )


@contextlib.asynccontextmanager
async def lagd_running(
    settings: Settings, *, ready: bool = True, report: list[dict[str, Any]] | None = None
) -> AsyncIterator[Lagd]:
    """The daemon run in this process with `settings` until the block ends (then it must exit 0);
    with `ready`, entered once /burrow/admin/ready says READY, else once its HTTP API answers.
    `report` gathers its agreement checks (the `agreement` fixture)."""
    port = int(settings.http.listen.rpartition(":")[2])
    source = next(iter(settings.clusters.values())).offsets_source
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(settings, stop=stop))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        lagd = Lagd(port, session, source, report)
        try:
            for _ in range(600):
                if task.done():
                    raise AssertionError(f"lagd ended before it was ready: {task.result()}")
                try:
                    status, _ = await lagd.get("/burrow/admin/ready")
                except aiohttp.ClientError:
                    status = 0
                if status == 200 or (status and not ready):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("lagd not ready within 60 s on Apache Kafka")
            lagd.task = task
            yield lagd
        finally:
            stop.set()
            assert await asyncio.wait_for(task, 30) == 0


@pytest.fixture(params=["topic", "admin"])
async def lagd_on_kafka(
    apache_kafka: KafkaCluster, database_url: str, request: Any, agreement: list[dict[str, Any]]
) -> AsyncIterator[Lagd]:
    """lagd reading the offsets topic, and lagd polling committed offsets through the admin API."""
    async with lagd_running(
        settings_for(apache_kafka, database_url, free_port(), request.param), report=agreement
    ) as lagd:
        yield lagd


@pytest.fixture(scope="module")
def kafka_3() -> Iterator[KafkaCluster]:
    """The older line users still run (KAFKA_OLD_VERSION, one KRaft node)."""
    cluster = start_kafka(1, KAFKA_OLD_VERSION)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("source", ["topic", "admin"])
async def test_kafka_3_9_classic_groups_agree_with_its_own_tool(
    kafka_3: KafkaCluster, database_url: str, source: str, unique: str, settle: Settle, agreement: list[dict[str, Any]]
) -> None:
    """On Kafka 3.9: commits, a transactional commit, a reset backwards (REWIND) and a deleted group."""
    b = kafka_3.bootstrap
    topic = f"old-{unique}"
    classic, txn, gone = (f"old-{unique}-{k}" for k in ("classic", "txn", "gone"))
    async with lagd_running(settings_for(kafka_3, database_url, free_port(), source), report=agreement) as lagd:
        await create_topic(b, topic, PARTITIONS)
        await produce(b, topic, PER_PARTITION, PARTITIONS)
        await commit_classic(b, classic, {TP(topic, 0): 15, TP(topic, 1): 7, TP(topic, 2): 9})
        await commit_in_transaction(b, txn, {TP(topic, 0): 11}, f"tx-{unique}", abort=False)
        await commit_in_transaction(b, txn, {TP(topic, 0): 19}, f"tx-{unique}", abort=True)
        await commit_classic(b, gone, {TP(topic, 1): 3})
        for group in (classic, txn, gone):
            await agreed(lagd, kafka_3, group)
        await asyncio.to_thread(
            kafka_3.consumer_groups,
            "--reset-offsets",
            "--group",
            classic,
            "--topic",
            f"{topic}:0",
            "--to-offset",
            "4",
            "--execute",
        )
        await settle(lambda: _offset_is(lagd, classic, topic, 0, 4), timeout=30, what="the reset offset")
        assert (await lagd.partitions(classic))[(topic, 0)]["status"] == "REWIND"
        await agreed(lagd, kafka_3, classic)
        await delete_group(kafka_3, gone)

        await settle(lambda: _unknown(lagd, gone), timeout=30, what="the deleted group gone")


async def test_every_record_kafkas_coordinator_writes_decodes(apache_kafka: KafkaCluster, unique: str) -> None:
    """Classic, static, transactional, KIP-848 and share groups, deletions and resets: each record decodes."""
    groups = await every_kind_of_group(apache_kafka, f"rec-{unique}")
    mine = set(groups.values())
    kinds: dict[str, int] = {}
    commits: dict[tuple[str, int], list[int]] = {}
    for _, _, key, value in await offsets_topic_records(apache_kafka.bootstrap):
        try:
            record = decode(key, value)
        except DecodeError as exc:
            raise AssertionError(f"Kafka {apache_kafka.version} wrote a record lagd cannot decode: {exc}") from None
        if getattr(record, "group", None) not in mine:
            continue
        kind = record.kind if isinstance(record, GroupRecord) else type(record).__name__
        if isinstance(record, SkippedRecord):
            kind = f"skipped type {record.record_type}"
        kinds[kind] = kinds.get(kind, 0) + 1
        if isinstance(record, OffsetCommit):
            commits.setdefault((record.group, record.partition), []).append(record.offset)
    # the classic groups' metadata, every commit, the deleted group and offsets
    assert kinds.get("GroupMetadata", 0) >= 2 and kinds.get("GroupTombstone") == 1, kinds
    assert kinds.get("OffsetTombstone", 0) >= 2, kinds  # --delete-offsets, and the deleted group's offset
    # the aborted transactional commit (15) is not in the read_committed view; the committed one (11) is
    assert commits[(groups["txn"], 0)] == [11], commits
    assert commits[(groups["classic"], 0)] == [5, 1], commits  # the reset, as Kafka wrote it
    # KIP-848: the group, its member and its assignments, in records of their own
    for kip848 in ("ConsumerGroupMetadata", "ConsumerGroupMemberMetadata", "ConsumerGroupCurrentMemberAssignment"):
        assert kinds.get(kip848, 0) >= 1, kinds
    # share groups (KIP-932) write types of their own, each named by its kind; none is unknown
    assert kinds.get("share_group_metadata", 0) >= 1 and kinds.get("share_group_member_metadata", 0) >= 1, kinds
    assert not any(k.startswith("skipped type") for k in kinds), kinds


async def test_lagd_serves_what_kafka_consumer_groups_describes(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str, settle: Settle
) -> None:
    """Committed offsets and lags per partition equal Kafka's own tool's, for every kind of committing group."""
    b = apache_kafka.bootstrap
    topic = f"agree-{unique}"
    await create_topic(b, topic, PARTITIONS)
    await produce(b, topic, PER_PARTITION, PARTITIONS)
    classic, static, txn, kip848 = (f"agree-{unique}-{k}" for k in ("classic", "static", "txn", "kip848"))
    await commit_classic(b, classic, {TP(topic, 0): 5, TP(topic, 1): 7, TP(topic, 2): 9})
    await commit_classic(b, static, {TP(topic, 0): 3, TP(topic, 1): 20}, instance_id=f"inst-{unique}")
    await commit_in_transaction(b, txn, {TP(topic, 0): 11, TP(topic, 2): 4}, f"tx-{unique}", abort=False)
    await asyncio.to_thread(console_consumer(apache_kafka, topic, kip848, 45, protocol="consumer").wait)

    for group in (classic, static, txn, kip848):
        await agreed(lagd_on_kafka, apache_kafka, group)

    # an aborted transactional commit never moves the window
    await commit_in_transaction(b, txn, {TP(topic, 0): 19}, f"tx-{unique}", abort=True)
    await commit_in_transaction(b, txn, {TP(topic, 2): 6}, f"tx-{unique}", abort=False)
    await settle(lambda: _offset_is(lagd_on_kafka, txn, topic, 2, 6), timeout=30, what="the next committed transaction")
    assert (await lagd_on_kafka.partitions(txn))[(topic, 0)]["end"]["offset"] == 11
    assert await lagd_on_kafka.agrees(apache_kafka, txn) == ""

    # more records: the lag follows the log end, as the tool's does
    await produce(b, topic, 5, PARTITIONS)
    await agreed(lagd_on_kafka, apache_kafka, classic)


async def test_offsets_reset_backwards_reads_as_rewind(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str, settle: Settle
) -> None:
    """`kafka-consumer-groups --reset-offsets` to an earlier offset is REWIND, not garbage."""
    b = apache_kafka.bootstrap
    topic = f"rewind-{unique}"
    group = f"rewind-{unique}-g"
    await create_topic(b, topic, 1)
    await produce(b, topic, PER_PARTITION, 1)
    await commit_classic(b, group, {TP(topic, 0): 15})
    await settle(lambda: _offset_is(lagd_on_kafka, group, topic, 0, 15), timeout=30, what="the first commit")
    await asyncio.to_thread(
        apache_kafka.consumer_groups,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-offset",
        "4",
        "--execute",
    )
    await settle(lambda: _offset_is(lagd_on_kafka, group, topic, 0, 4), timeout=30, what="the reset offset")
    partition = (await lagd_on_kafka.partitions(group))[(topic, 0)]
    assert partition["status"] == "REWIND", partition
    assert await lagd_on_kafka.agrees(apache_kafka, group) == ""


async def test_deleted_offsets_and_groups_leave_lagd(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str, settle: Settle
) -> None:
    """`--delete-offsets` drops that partition from the group; `--delete` drops the group (404)."""
    b = apache_kafka.bootstrap
    topic = f"del-{unique}"
    group = f"del-{unique}-g"
    await create_topic(b, topic, 2)
    await produce(b, topic, PER_PARTITION, 2)
    await commit_classic(b, group, {TP(topic, 0): 10, TP(topic, 1): 12})
    await agreed(lagd_on_kafka, apache_kafka, group)

    await asyncio.to_thread(apache_kafka.consumer_groups, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")

    async def uncommitted() -> bool:
        # Burrow's body lists every partition of a topic the group commits to: one without a
        # committed offset has none (end null), as in Burrow
        parts = await lagd_on_kafka.partitions(group)
        return parts[(topic, 0)]["end"] is not None and (topic, 1) in parts and parts[(topic, 1)]["end"] is None

    await settle(uncommitted, timeout=30, what="the deleted offset gone")
    assert await lagd_on_kafka.agrees(apache_kafka, group) == ""

    await delete_group(apache_kafka, group)

    await settle(lambda: _unknown(lagd_on_kafka, group), timeout=30, what="the deleted group gone")


async def test_kip848_group_owners_and_client_ids_in_burrows_api(
    apache_kafka: KafkaCluster, lagd_on_kafka: Lagd, unique: str, settle: Settle
) -> None:
    """A live KIP-848 member (the Java consumer, group.protocol=consumer) owns its partitions in Burrow's body."""
    b = apache_kafka.bootstrap
    topic = f"own-{unique}"
    group = f"own-{unique}-g"
    await create_topic(b, topic, PARTITIONS)
    await produce(b, topic, PER_PARTITION, PARTITIONS)
    member = console_consumer(
        apache_kafka, topic, group, 10_000, protocol="consumer", properties=["auto.commit.interval.ms=500"]
    )
    try:

        async def owned() -> bool:
            parts = await lagd_on_kafka.partitions(group)
            return len(parts) == PARTITIONS and all(
                p["client_id"] == f"java-{group}" and p["owner"] for p in parts.values()
            )

        try:
            await settle(owned, timeout=60, what="the KIP-848 member as owner of every partition")
        except AssertionError:
            raise AssertionError(await lagd_on_kafka.partitions(group)) from None
        members = await asyncio.to_thread(apache_kafka.consumer_groups, "--describe", "--group", group, "--members")
        assert f"java-{group}" in members
        host = next(p["owner"] for p in (await lagd_on_kafka.partitions(group)).values())
        assert re.search(rf"/?{re.escape(host.lstrip('/'))}\b", members), (host, members)
    finally:
        member.proc.terminate()
        member.proc.wait(30)


async def agreed(
    lagd: Lagd, cluster: KafkaCluster, group: str, timeout: float = 30.0, command_config: Path | None = None
) -> None:
    """Until lagd agrees with `kafka-consumer-groups` on `group`; fails with the last difference.
    Each check goes into the agreement report (`lagd.report`)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    row = {"kafka": cluster.version, "source": lagd.source, "group": group.rsplit("-", 1)[-1], "agreed": False}
    lagd.report.append(row)
    while difference := await lagd.agrees(cluster, group, command_config):
        if loop.time() - started > timeout:
            row["detail"] = difference
            raise AssertionError(f"{group} after {timeout:.0f} s: {difference}")
        await asyncio.sleep(0.2)
    row.update(agreed=True, partitions=len(await lagd.partitions(group)), seconds=round(loop.time() - started, 1))


async def _unknown(lagd: Lagd, group: str) -> bool:
    """lagd answers 404 for `group` (deleted, or never seen)."""
    status, _ = await lagd.get(f"/v3/kafka/real/consumer/{group}/lag")
    return status == 404


async def _offset_is(lagd: Lagd, group: str, topic: str, partition: int, offset: int) -> bool:
    p = (await lagd.partitions(group)).get((topic, partition))
    return bool(p and p["end"] and p["end"]["offset"] == offset)


async def test_auto_on_a_new_cluster_streams_the_offsets_topic_once_the_first_group_makes_it(
    unique: str, settle: Settle
) -> None:
    """A new Apache Kafka has no `__consumer_offsets` until a group first uses it: "auto" polls
    the admin API meanwhile, looks for the topic before each round, and streams it from its
    beginning once it is there (quick-start trial: it used to poll for good)."""
    from structlog.testing import capture_logs

    from lagd.core.config import ClusterSettings
    from lagd.core.model import Commit, IngestCounters
    from lagd.ingest.progress import ReaderProgress
    from lagd.ingest.source import read_offsets

    fresh = start_kafka(1)
    try:
        b = fresh.bootstrap
        settings = ClusterSettings(
            name="fresh", bootstrap_servers=b.split(","), offset_refresh=0.5, topic_refresh=1.0, offsets_source="auto"
        )
        events: list[Any] = []

        async def emit(batch: list[Any]) -> None:
            events.extend(batch)

        progress, counters, stop = ReaderProgress(), IngestCounters(), asyncio.Event()
        with capture_logs() as logged:
            task = asyncio.create_task(read_offsets(settings, {}, emit, progress, counters, stop))
            try:
                await settle(lambda: progress.caught_up, timeout=60, what="the first admin polling round")
                assert progress.source == "admin" and not events
                topic, group = f"new-{unique}", f"new-{unique}-g"
                await create_topic(b, topic, 2)
                await produce(b, topic, 10, 2)
                await commit_classic(b, group, {TP(topic, 0): 4, TP(topic, 1): 9})

                def read() -> dict[tuple[str, int], int]:
                    return {
                        (e.topic, e.partition): e.offset for e in events if isinstance(e, Commit) and e.group == group
                    }

                await settle(lambda: read() == {(topic, 0): 4, (topic, 1): 9}, timeout=60, what="the commits read")
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
        assert progress.source == "topic"
        # streamed, not polled: a commit's order is its record's offset in the offsets topic
        # (polling orders by the time it saw a commit, in ms since 1970)
        assert all(e.order < 1_000_000 for e in events if isinstance(e, Commit)), events
        said = [e["event"] for e in logged if e["event"].startswith("offsets source:")]
        assert said == [
            "offsets source: admin polling, the offsets topic cannot be read",
            "offsets source: streaming the offsets topic, which has appeared",
        ], said
    finally:
        fresh.stop()
