"""lagd on an Apache Kafka that asks for SASL and TLS, and denies what no ACL allows.

One Kafka node for the module, with a SASL_SSL (SCRAM-SHA-512) listener whose certificate a
CA made for this run signed, and the StandardAuthorizer with no access where no ACL says so.
Its PLAINTEXT listener is the broker's own (to its controller, whose principal is a super
user); lagd and every client come in through SASL_SSL: "app" (a super user) makes the
groups and runs Kafka's tools, and lagd's principals have only the ACLs a test gives them.

A MirrorMaker 2 mirror is watched on this one node as both its source and its target (MM2's
topics written by "app" with the bytes a real MM2 4.3.1 wrote, tests/data): lagd reads MM2's
topics and samples the mirrored ones with the ACLs README gives, and says which ACL it lacks.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import TopicPartition as TP
from structlog.testing import capture_logs

from lagd.embedded.kafka import SCRAM_MECHANISM, KafkaCluster, SaslSslListener, start_kafka
from lagd.embedded.services import free_port
from lagd.ingest.source import unreadable_reason
from tests.kafka_groups import allow, commit_classic, create_topic, describe_offsets, produce
from tests.test_apache_kafka import Lagd, agreed, lagd_running, settings_for
from tests.tls_ca import Ca, issue_server, make_ca

Settle = Callable[..., Awaitable[Any]]
pytestmark = pytest.mark.slow

USERS = {
    "app": "app-secret",
    "lagd": "lagd-secret",
    "streams": "streams-secret",
    "polls": "polls-secret",
    "describes": "describes-secret",
    "mirrors": "mirrors-secret",
    "no-heartbeats": "no-heartbeats-secret",
    "describe-heartbeats": "describe-heartbeats-secret",
    "no-syncs": "no-syncs-secret",
    "describe-syncs": "describe-syncs-secret",
}
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:app",  # ANONYMOUS: the broker itself, on PLAINTEXT
    "allow.everyone.if.no.acl.found": "false",
}
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class Secure:
    """The cluster, its listener and CA, a CA that signed nothing of it, and the tools' client
    properties (user "app")."""

    cluster: KafkaCluster
    listener: SaslSslListener
    ca: Ca
    stranger: Ca
    app_config: Path

    @property
    def bootstrap(self) -> str:
        return self.cluster.sasl_ssl_bootstrap

    def client(self, user: str) -> dict[str, Any]:
        """aiokafka keywords for `user` through the SASL_SSL listener."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": USERS[user],
            "ssl_context": create_ssl_context(cafile=str(self.ca.cert)),
        }

    def lagd_keys(self, user: str) -> dict[str, Any]:
        """lagd's cluster keys for `user` through the SASL_SSL listener."""
        return {
            "bootstrap-servers": self.bootstrap.split(","),
            "security-protocol": "SASL_SSL",
            "sasl-mechanism": SCRAM_MECHANISM,
            "sasl-username": user,
            "sasl-password": USERS[user],
            "tls-ca-file": str(self.ca.cert),
        }

    def allow(self, user: str, operations: list[str], *resources: str) -> None:
        allow(self.cluster, user, operations, *resources, command_config=self.app_config)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    folder = tmp_path_factory.mktemp("tls")
    ca, stranger = make_ca(folder, "lagd-test-ca"), make_ca(folder, "stranger-ca")
    listener = SaslSslListener(issue_server(ca, folder, "broker"), ca.cert, USERS)
    cluster = start_kafka(1, sasl_ssl=listener, broker_properties=AUTHORIZER)
    try:
        made = Secure(cluster, listener, ca, stranger, listener.client_properties("app", folder / "app.properties"))
        # "lagd" may use either offsets source (README: the least ACLs of each, together)
        made.allow("lagd", ["Read"], "--topic", OFFSETS_TOPIC)
        made.allow("lagd", ["Describe"], "--topic", "*", "--group", "*")
        yield made
    finally:
        cluster.stop()


async def _groups(secure: Secure, topics: list[str], groups: dict[str, str]) -> None:
    """Topics of 2 partitions with 20 records each, and classic groups (group -> topic) that
    committed offsets 5 and 7 on them, all made by "app" through SASL_SSL."""
    app = secure.client("app")
    for topic in topics:
        await create_topic(secure.bootstrap, topic, 2, **app)
        await produce(secure.bootstrap, topic, 20, 2, **app)
    for group, topic in groups.items():
        await commit_classic(secure.bootstrap, group, {TP(topic, 0): 5, TP(topic, 1): 7}, **app)


async def _cluster(lagd: Lagd) -> dict[str, Any]:
    _, body = await lagd.get("/lagd/v1/clusters")
    (cluster,) = body["clusters"]
    return dict(cluster)


@pytest.mark.parametrize("source", ["topic", "admin"])
async def test_lagd_reads_and_judges_through_sasl_ssl(
    secure: Secure, database_url: str, unique: str, source: str
) -> None:
    """A classic group committed over SASL_SSL: lagd (SCRAM-SHA-512, the test CA) serves the
    committed offsets and lags `kafka-consumer-groups --describe --command-config` prints, and judges it."""
    topic, group = f"sasl-{unique}", f"sasl-{unique}-g"
    await _groups(secure, [topic], {group: topic})
    described = await asyncio.to_thread(describe_offsets, secure.cluster, group, secure.app_config)
    assert described == {(topic, 0): (5, 20, 15), (topic, 1): (7, 20, 13)}, described

    settings = settings_for(secure.cluster, database_url, free_port(), source, **secure.lagd_keys("lagd"))
    async with lagd_running(settings) as lagd:
        await agreed(lagd, secure.cluster, group, command_config=secure.app_config)
        status, body = await lagd.get(f"/v3/kafka/real/consumer/{group}/status")
        assert status == 200 and body["status"]["status"] == "OK", body
        cluster = await _cluster(lagd)
        assert cluster["offsets_source"] == source and not cluster["degraded"], cluster


@pytest.mark.parametrize("mistake", ["wrong password", "untrusted certificate"])
async def test_a_listener_lagd_cannot_use_is_one_clear_error_and_the_cluster_degraded(
    secure: Secure, database_url: str, mistake: str, settle: Settle
) -> None:
    """A refused password, or a broker certificate signed by a CA lagd was not given: one log
    line names the listener and the setting to fix, /lagd/v1/clusters and readiness say the
    cluster cannot be read and why, and lagd keeps retrying with backoff, neither crashing nor spinning."""
    keys = secure.lagd_keys("lagd")
    if mistake == "wrong password":
        keys["sasl-password"] = "not-the-password"
        error, fix = "SASL authentication failed: Authentication failed", "check sasl-username and sasl-password"
    else:
        keys["tls-ca-file"] = str(secure.stranger.cert)
        error, fix = (
            "TLS certificate verification failed",
            f"set tls-ca-file to the CA that signed it (now {secure.stranger.cert})",
        )
    listener = secure.bootstrap
    settings = settings_for(secure.cluster, database_url, free_port(), "auto", **keys)
    loop = asyncio.get_running_loop()
    with capture_logs() as logged:
        started = loop.time()
        async with lagd_running(settings, ready=False) as lagd:

            async def degraded() -> bool:
                return await lagd.get("/burrow/admin/ready") == (503, "DEGRADED: cannot read cluster(s) real")

            await settle(degraded, timeout=60, what="readiness to say the cluster cannot be read")
            cluster = await _cluster(lagd)
            window = loop.time() - started
            assert lagd.task is not None and not lagd.task.done()
    assert cluster["degraded"] and cluster["offsets_source"] is None, cluster
    assert cluster["reason"].startswith("no answer from the cluster's brokers"), cluster
    assert f"{listener}: {error}" in cluster["reason"] and fix in cluster["reason"], cluster

    told = [e for e in logged if e["log_level"] in ("warning", "error", "critical")]
    # the failure once, although each reader of the cluster (the offsets-source probe, the
    # log-end sampler, the share-group poller) met it, whichever met it first; then the
    # cluster's change of status, with the same cause
    readers = {
        "choosing the offsets source failed; reconnecting",
        "log-end sampler failed; reconnecting",
        "share-group poller failed; reconnecting",
    }
    assert len(told) == 2 and told[0]["event"] in readers, told
    assert told[1]["event"] == "lagd cannot see the cluster; verdicts that need fresh data are held", told
    failed, blind = told
    assert failed["listener"] == listener and failed["error"].startswith(error) and fix in failed["hint"], failed
    assert f"{listener}: {error}" in blind["reason"], blind
    attempts = [e for e in logged if e["event"].endswith("failed; reconnecting")]
    # every reader retried, each waiting at least 0.25 s x 2^(n-1) before its n-th retry: no more
    # attempts than fit in the window at the shortest waits, where a spin would make hundreds
    assert {e["event"] for e in attempts} == readers, attempts
    assert len(attempts) <= len(readers) * (math.log2(window / 0.25 + 1) + 1), (len(attempts), window)


async def test_auto_streams_the_offsets_topic_with_the_least_acls_it_needs(
    secure: Secure, database_url: str, unique: str, settle: Settle
) -> None:
    """Read on __consumer_offsets and Describe on the consumed topic, nothing more: "auto"
    streams the topic and says so, and lagd agrees with Kafka's tool. Without Describe on a
    topic, its group's committed offsets still stream, but their lag is unknown."""
    seen, unseen = f"streams-{unique}-seen", f"streams-{unique}-unseen"
    group, blind = f"streams-{unique}-g", f"streams-{unique}-blind"
    await _groups(secure, [seen, unseen], {group: seen, blind: unseen})
    secure.allow("streams", ["Read"], "--topic", OFFSETS_TOPIC)
    secure.allow("streams", ["Describe"], "--topic", seen)

    settings = settings_for(secure.cluster, database_url, free_port(), "auto", **secure.lagd_keys("streams"))
    with capture_logs() as logged:
        async with lagd_running(settings) as lagd:
            assert (await _cluster(lagd))["offsets_source"] == "topic"
            await agreed(lagd, secure.cluster, group, command_config=secure.app_config)
            # a log-end round after lagd read both groups' commits: the new records' lag shows
            await produce(secure.bootstrap, seen, 5, 2, **secure.client("app"))
            await agreed(lagd, secure.cluster, group, command_config=secure.app_config)
            parts = await lagd.partitions(blind)
    chosen = [e for e in logged if e["event"].startswith("offsets source:")]
    assert [(e["event"], e["offsets_source"]) for e in chosen] == [
        ("offsets source: streaming the offsets topic", "topic")
    ], chosen
    # without Describe on its topic: committed offsets, no lag
    assert {k: (p["end"]["offset"], p["end"]["lag"]) for k, p in parts.items()} == {
        (unseen, 0): (5, None),
        (unseen, 1): (7, None),
    }, parts


async def test_auto_falls_back_to_admin_polling_with_the_least_acls_it_needs(
    secure: Secure, database_url: str, unique: str, settle: Settle
) -> None:
    """Denied __consumer_offsets, allowed Describe on the group and its topic, nothing more:
    "auto" polls the admin API, says so and why, and lagd agrees with Kafka's tool. Without
    Describe on the group, or on its topic, lagd does not see the group."""
    topic, hidden = f"polls-{unique}-t", f"polls-{unique}-hidden"
    group, no_group_acl, no_topic_acl = (f"polls-{unique}-{k}" for k in ("g", "nogroupacl", "notopicacl"))
    await _groups(secure, [topic, hidden], {group: topic, no_group_acl: topic, no_topic_acl: hidden})
    secure.allow("polls", ["Describe"], "--topic", topic, "--group", group)
    secure.allow("polls", ["Describe"], "--group", no_topic_acl)
    # Describe on the offsets topic without Read: still polled, for that reason
    secure.allow("describes", ["Describe"], "--topic", OFFSETS_TOPIC)
    settings = settings_for(secure.cluster, database_url, free_port(), "auto", **secure.lagd_keys("describes"))
    assert await unreadable_reason(settings.clusters["real"]) == f"not authorized to read topic {OFFSETS_TOPIC}"

    settings = settings_for(secure.cluster, database_url, free_port(), "auto", **secure.lagd_keys("polls"))
    with capture_logs() as logged:
        async with lagd_running(settings) as lagd:
            assert (await _cluster(lagd))["offsets_source"] == "admin"
            # ready: a full round, begun after every group here committed, listed and polled them all
            await agreed(lagd, secure.cluster, group, command_config=secure.app_config)
            unseen = {g: (await lagd.get(f"/v3/kafka/real/consumer/{g}/lag"))[0] for g in (no_group_acl, no_topic_acl)}
    chosen = [e for e in logged if e["event"].startswith("offsets source:")]
    assert [(e["event"], e["offsets_source"], e["reason"]) for e in chosen] == [
        (
            "offsets source: admin polling, the offsets topic cannot be read",
            "admin",
            f"not authorized to describe topic {OFFSETS_TOPIC}",
        )
    ], chosen
    assert f"allow lagd Describe and Read on {OFFSETS_TOPIC}" in chosen[0]["hint"]
    assert unseen == {no_group_acl: 404, no_topic_acl: 404}


MM2_RECORDS: dict[str, list[dict[str, Any]]] = json.loads(
    (Path(__file__).parent / "data" / "mirror-maker-4.3.1-records.json").read_text()
)["records"]
CAPTURED_HEARTBEAT_MS = 1796278513946  # the newest captured heartbeat's emission (its record's timestamp)


async def _mm2_topics(secure: Secure, alias: str, target_alias: str) -> dict[str, str]:
    """MM2's three topics for source alias `alias` and target alias `target_alias` (this node
    being both clusters), holding the records a real MM2 wrote, bytes as captured (the record
    timestamps now, so that retention keeps them); returns them by role."""
    topics = {
        "heartbeats": f"{alias}.heartbeats",
        "checkpoints": f"{alias}.checkpoints.internal",
        "offset syncs": f"mm2-offset-syncs.{target_alias}.internal",
    }
    captured = {
        "heartbeats": MM2_RECORDS["dst:src.heartbeats"],
        "checkpoints": MM2_RECORDS["dst:src.checkpoints.internal"],
        "offset syncs": MM2_RECORDS["src:mm2-offset-syncs.dst.internal"],
    }
    app = secure.client("app")
    producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap, **app)
    await producer.start()
    try:
        for role, topic in topics.items():
            await create_topic(secure.bootstrap, topic, 1, **app)
            for r in captured[role]:
                key, value = bytes.fromhex(r["key"]), bytes.fromhex(r["value"]) if r["value"] else None
                await producer.send_and_wait(topic, value, key=key, partition=r["partition"])
    finally:
        await producer.stop()
    return topics


async def _mirrored_topics(secure: Secure, topic: str, copy: str) -> None:
    """The mirrored topic and its copy, 2 partitions of 700 records each (past the offsets the
    captured offset syncs and checkpoints name: 644 and 498)."""
    for name in (topic, copy):
        await create_topic(secure.bootstrap, name, 2, **secure.client("app"))
        await produce(secure.bootstrap, name, 700, 2, **secure.client("app"))


def _mirror(alias: str, target_alias: str, topic: str) -> dict[str, Any]:
    """A mirror of `topic` from this node to itself, its copies named `<alias>.<topic>`."""
    return {
        "m": {
            "source": "real",
            "target": "real",
            "rename": "prefix",
            "prefix": f"{alias}.",
            "topics": f"^{topic}$",
            "mm2-target-alias": target_alias,
        }
    }


async def _mirror_failures(lagd: Lagd) -> list[str]:
    """The mirror readers' failures counted in /metrics."""
    _, text = await lagd.get("/metrics")
    return [line for line in text.splitlines() if line.startswith("lagd_ingest_failures_total") and "mirror" in line]


async def test_a_mirror_is_read_with_the_acls_readme_gives(secure: Secure, database_url: str, settle: Settle) -> None:
    """README's ACLs for a mirror, nothing more (with Read on __consumer_offsets, its offsets
    source): Read on MM2's heartbeats and checkpoints topics on the target and its offset-syncs
    topic on the source, no group; Describe on the mirrored topic on the source and its copy on
    the target. lagd reads all three of MM2's topics and samples both topics: the newest
    heartbeat (STALLED: it was emitted when the records were captured), the group's failover gap
    in records and seconds, both partitions' delay translated by an offset sync; no reader fails."""
    topics = await _mm2_topics(secure, "src", "dst")
    await _mirrored_topics(secure, "orders", "src.orders")
    secure.allow("mirrors", ["Read"], "--topic", OFFSETS_TOPIC)
    secure.allow("mirrors", ["Read"], *(arg for t in topics.values() for arg in ("--topic", t)))
    secure.allow("mirrors", ["Describe"], "--topic", "orders", "--topic", "src.orders")

    mirrors = _mirror("src", "dst", "orders")
    settings = settings_for(secure.cluster, database_url, free_port(), "topic", mirrors, **secure.lagd_keys("mirrors"))
    with capture_logs() as logged:
        async with lagd_running(settings) as lagd:

            async def read_all() -> dict[str, Any] | None:
                status, flow = await lagd.get("/lagd/v1/mirrors/m/flow")
                if status != 200 or len(flow["failover"]) < 2 or len(flow["partitions"]) < 2:
                    return None
                if any(g["seconds"] is None for g in flow["failover"]):
                    return None  # the source's log-end samples of orders not taken yet
                return dict(flow)

            flow = await settle(read_all, timeout=60, what="the flow with MM2's three topics read")
            failures = await _mirror_failures(lagd)
    assert flow["status"] == "STALLED" and flow["newest_heartbeat_at"] == CAPTURED_HEARTBEAT_MS, flow
    assert {
        (g["group"], g["topic"], g["partition"], g["upstream_offset"], g["downstream_offset"]) for g in flow["failover"]
    } == {("billing", "src.orders", p, 498, 495) for p in (0, 1)}, flow
    assert {(p["topic"], p["partition"], p["synced"]) for p in flow["partitions"]} == {
        ("orders", 0, True),
        ("orders", 1, True),
    }, flow
    assert failures == [], failures
    told = [e for e in logged if e["log_level"] in ("warning", "error", "critical") and "mirror" in str(e)]
    assert told == [], told


@pytest.mark.parametrize("acl", ["no", "describe"])
@pytest.mark.parametrize("unread", ["heartbeats", "syncs"])
async def test_a_mirror_without_read_on_one_of_mm2s_topics_names_the_acl_to_add(
    secure: Secure, database_url: str, settle: Settle, unread: str, acl: str
) -> None:
    """README's ACLs for a mirror but Read on MM2's heartbeats topic (on the target) or its
    offset-syncs topic (on the source): with no ACL on it, the broker leaves the topic out of
    lagd's metadata as if MM2 had not made it; with Describe (on topic `*`, say), it refuses the
    fetch. Either way lagd says which topic it may not read and the ACL to add, once over three
    more offset-refreshes, and reads the others: the checkpoints, and the heartbeats or the flow's
    reason saying it may not read them."""
    user = alias = f"{acl}-{unread}"
    topic = f"payments-{alias}"
    topics = await _mm2_topics(secure, alias, f"dst-{alias}")
    await _mirrored_topics(secure, topic, f"{alias}.{topic}")
    role = {"heartbeats": "heartbeats", "syncs": "offset syncs"}[unread]
    denied = topics[role]
    secure.allow(user, ["Read"], "--topic", OFFSETS_TOPIC)
    secure.allow(user, ["Read"], *(arg for t in topics.values() if t != denied for arg in ("--topic", t)))
    secure.allow(user, ["Describe"], "--topic", topic, "--topic", f"{alias}.{topic}")
    if acl == "describe":
        secure.allow(user, ["Describe"], "--topic", denied)

    mirrors = _mirror(alias, f"dst-{alias}", topic)
    settings = settings_for(secure.cluster, database_url, free_port(), "topic", mirrors, **secure.lagd_keys(user))
    with capture_logs() as logged:
        async with lagd_running(settings) as lagd:

            async def told_and_checkpoints_read() -> dict[str, Any] | None:
                status, flow = await lagd.get("/lagd/v1/mirrors/m/flow")
                if status != 200 or len(flow["failover"]) != 2 or not await _mirror_failures(lagd):
                    return None
                return dict(flow)

            flow = await settle(told_and_checkpoints_read, timeout=60, what="the flow told and its checkpoints read")

            async def three_refreshes_later() -> bool:  # each retries a refused fetch: still told once
                _, later = await lagd.get("/lagd/v1/mirrors/m/flow")
                return bool(later["observed_at"] >= flow["observed_at"] + 3000)

            await settle(three_refreshes_later, timeout=30, what="three more offset-refreshes")
            failures = await _mirror_failures(lagd)
    if unread == "heartbeats":
        assert flow["status"] == "NO_HEARTBEATS", flow
        assert flow["reason"] == (
            f"lagd may not read {denied} (not authorized): allow its principal Read on the topic"
        ), flow
    else:
        assert flow["status"] == "STALLED" and flow["newest_heartbeat_at"] == CAPTURED_HEARTBEAT_MS, flow
    told = [e for e in logged if e["log_level"] in ("warning", "error", "critical") and "mirror" in str(e)]
    assert [(e["event"], e["topic"], e["hint"]) for e in told] == [
        (
            "lagd may not read a MirrorMaker 2 topic; the flow is judged without it",
            denied,
            f"allow lagd's principal Read on topic {denied} on cluster real",
        )
    ], told
    assert failures == ['lagd_ingest_failures_total{cluster="real",failure="mirror_flow_not_authorized"} 1'], failures
