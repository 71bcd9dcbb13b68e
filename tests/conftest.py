"""Session fixtures for the real services tests run against (see shared/design/TESTING.md).

Each service is real. When one cannot start, the fixture fails with the reason: no test is
skipped because a service is missing.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from lagd.db.migrate import upgrade
from lagd.embedded import services as embedded
from lagd.embedded.kafka import KafkaCluster, start_kafka

DATA = Path(__file__).parent / "data"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


# --- PostgreSQL -------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[embedded.Postgres]:
    """A PostgreSQL server of the run's own on a free TCP port: never one that happens to run here."""
    pg = embedded.start_private_postgres()
    yield pg
    pg.stop()


def _admin_exec(admin_url: str, sql: str) -> None:
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + name
    return base + ("?" + query if query else "")


@pytest.fixture(scope="session")
def migrated_template(postgres: embedded.Postgres) -> Iterator[str]:
    """A database migrated to head once per run; tests copy it (CREATE DATABASE ... TEMPLATE)."""
    name = f"lagd_tmpl_{uuid.uuid4().hex[:8]}"
    _admin_exec(postgres.url, f"CREATE DATABASE {name}")
    upgrade(_with_database(postgres.url, name))
    yield name
    _admin_exec(postgres.url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(postgres: embedded.Postgres, migrated_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test (a plain postgresql:// URL)."""
    name = f"lagd_t_{uuid.uuid4().hex[:10]}"
    _admin_exec(postgres.url, f"CREATE DATABASE {name} TEMPLATE {migrated_template}")
    yield _with_database(postgres.url, name)
    _admin_exec(postgres.url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def empty_database_url(postgres: embedded.Postgres) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    name = f"lagd_e_{uuid.uuid4().hex[:10]}"
    _admin_exec(postgres.url, f"CREATE DATABASE {name}")
    yield _with_database(postgres.url, name)
    _admin_exec(postgres.url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- MQTT -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mqtt_broker() -> Iterator[tuple[str, int]]:
    """A Mosquitto of the run's own (never one that happens to run here), else amqtt."""
    try:
        proc = embedded.start_mosquitto()
    except embedded.ServiceError:
        proc = embedded.start_amqtt()
    yield (proc.host, proc.port)
    proc.stop()


@pytest.fixture
def private_mosquitto() -> Iterator[embedded.Process]:
    """A Mosquitto of this test's own, which the test may stop and restart (outage tests)."""
    proc = embedded.start_mosquitto()
    yield proc
    proc.stop()


# --- Kafka protocol broker (Tansu) ----------------------------------------------------


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """One Tansu broker per test run; returns its bootstrap address host:port.

    Tests share it, so each uses topic and group names of its own (see `unique`).
    """
    proc = embedded.start_tansu()
    yield proc.address
    proc.stop()


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps topic and group names of one test apart from the others."""
    return uuid.uuid4().hex[:8]


# --- Apache Kafka ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[KafkaCluster]:
    """Apache Kafka itself (KAFKA_VERSION, one KRaft node), once per test run.

    Its group coordinator writes the `__consumer_offsets` records lagd reads; tests share
    it, so each uses topic and group names of its own (see `unique`).
    """
    cluster = start_kafka(1)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def mirror_clusters() -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    """Two Apache Kafka clusters of the module's own, a MirrorMaker 2 source and target: MM2's topics
    on them (heartbeats, checkpoints, offset syncs) hold that module's runs only."""
    source = start_kafka(1)
    try:
        target = start_kafka(1)
    except BaseException:
        source.stop()
        raise
    yield source, target
    source.stop()
    target.stop()


@pytest.fixture(scope="session")
def agreement(artifacts: Path) -> Iterator[list[dict[str, Any]]]:
    """Rows of lagd-against-kafka-consumer-groups checks, written to test-artifacts/kafka-agreement.md
    at the end of the run: Kafka version, offsets source, kind of group, partitions, time to agree."""
    rows: list[dict[str, Any]] = []
    yield rows
    if not rows:
        return
    lines = [
        "# lagd against kafka-consumer-groups --describe (tests/test_apache_kafka.py)",
        "",
        "| Kafka | offsets source | group | partitions | agreed | within |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        within = f"{r['seconds']} s" if r["agreed"] else r.get("detail", "")
        lines.append(
            f"| {r['kafka']} | {r['source']} | {r['group']} | {r.get('partitions', '')} | {'yes' if r['agreed'] else 'NO'} | {within} |"
        )
    (artifacts / "kafka-agreement.md").write_text("\n".join(lines) + "\n")


# --- Spark ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole run (local[2], few shuffle partitions)."""
    from lagd.jobs.spark import build_session

    session = build_session(master="local[2]", app_name="lagd-tests", shuffle_partitions=4)
    yield session
    session.stop()


# --- misc -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
async def settle() -> AsyncIterator[Any]:
    """Poll an async condition until true or a deadline passes (no fixed sleeps in tests)."""

    async def wait_for(predicate: Any, timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = predicate()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(interval)

    yield wait_for


os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
