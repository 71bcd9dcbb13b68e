"""Apache Kafka itself, from Maven Central, started in KRaft mode on 127.0.0.1 for tests and benchmarks.

The broker, its command-line tools and the Java clients are Maven artifacts
(`org.apache.kafka:kafka_2.13`, `kafka-tools`, `kafka-streams`); `fetch` copies them with
their dependencies into a cache folder once (`mvn dependency:copy-dependencies`, about 15 s),
and `start_kafka` runs one broker, or several with combined broker and controller roles, each
a JVM with a small heap. The tools (`kafka-consumer-groups` is `ConsumerGroupCommand`) run
from the same jars, so the ground truth a test compares lagd with is Kafka's own.

`python -m lagd.embedded.kafka fetch` fills the cache for the pinned versions and MirrorMaker 2
(make test does).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from lagd.embedded.services import ServiceError, free_low_port, port_open

# The current line, which most tests run on, and the older line kept runnable for compatibility.
KAFKA_VERSION = "4.4.0"
KAFKA_OLD_VERSION = "3.9.1"
VERSIONS = (KAFKA_VERSION, KAFKA_OLD_VERSION)

# Kafka 4 logs through log4j 2 and leaves the SLF4J binding to the application; 3.9 brings reload4j.
_LOG_BINDING = (
    "<dependency><groupId>org.apache.logging.log4j</groupId>"
    "<artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>"
)
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lagd.tests</groupId>
  <artifactId>apache-kafka-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    {dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = (
    "<dependency><groupId>org.apache.kafka</groupId><artifactId>{artifact}</artifactId>"
    "<version>{version}</version></dependency>"
)
_KAFKA_ARTIFACTS = ("kafka_2.13", "kafka-tools", "kafka-streams")

# MirrorMaker 2 (`connect-mirror`) is fetched on its own: Maven Central serves it up to 4.3.1 here
# (4.4.0 was refused on 2026-12-02), and it runs against brokers of any 3.x/4.x version.
MIRROR_MAKER_VERSION = "4.3.1"
_MIRROR_MAKER_ARTIFACTS = ("connect-mirror",)

# Quiet brokers: warnings and errors to the node's log file only.
_LOG4J2 = """Configuration:
  status: warn
  Appenders:
    File:
      name: file
      fileName: "${sys:kafka.logs.file}"
      PatternLayout: {pattern: "[%d] %p %m (%c)%n"}
  Loggers:
    Root: {level: warn, AppenderRef: [{ref: file}]}
    Logger:
      - {name: kafka.server.KafkaServer, level: info}
      - {name: org.apache.kafka.coordinator.group, level: info}
"""
_LOG4J1 = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.file}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def cache_dir() -> Path:
    """Where the jars are kept between runs (`LAGD_KAFKA_CACHE`, else ~/.cache/lagd/kafka)."""
    env = os.environ.get("LAGD_KAFKA_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lagd" / "kafka"


def libs(version: str = KAFKA_VERSION) -> Path:
    """The folder of Kafka `version`'s jars, fetched first if the cache lacks it."""
    folder = cache_dir() / version / "libs"
    if not (folder / ".complete").exists():
        fetch(version)
    return folder


def mirror_maker_libs(version: str = MIRROR_MAKER_VERSION) -> Path:
    """The folder of MirrorMaker 2's jars (`connect-mirror` and its dependencies), fetched first if missing."""
    folder = cache_dir() / f"mirror-maker-{version}" / "libs"
    if not (folder / ".complete").exists():
        fetch_mirror_maker(version)
    return folder


def fetch(version: str, out: TextIO | None = None) -> Path:
    """Copy Kafka `version` (broker, tools, Streams) and its dependencies from Maven Central into the cache."""
    return _fetch(f"Apache Kafka {version}", cache_dir() / version, version, _KAFKA_ARTIFACTS, out)


def fetch_mirror_maker(version: str = MIRROR_MAKER_VERSION, out: TextIO | None = None) -> Path:
    """Copy MirrorMaker 2 `version` (`connect-mirror`) and its dependencies into the cache."""
    return _fetch(
        f"MirrorMaker 2 {version}", cache_dir() / f"mirror-maker-{version}", version, _MIRROR_MAKER_ARTIFACTS, out
    )


def _fetch(name: str, target: Path, version: str, artifacts: tuple[str, ...], out: TextIO | None) -> Path:
    out = out or sys.stderr
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(f"Maven is needed to fetch {name}'s jars: apt-get install maven default-jdk-headless")
    folder = target / "libs"
    if (folder / ".complete").exists():
        return folder
    print(f"fetching {name} from Maven Central into {folder} (about 15 s) ...", file=out, flush=True)
    target.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    dependencies = [_DEPENDENCY.format(artifact=artifact, version=version) for artifact in artifacts]
    if not version.startswith(("2.", "3.")):
        dependencies.append(_LOG_BINDING)
    (target / "pom.xml").write_text(_POM.format(version=version, dependencies="\n    ".join(dependencies)))
    started = time.monotonic()
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(target / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={folder}", "-DincludeScope=runtime"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ServiceError(f"mvn could not fetch {name} (is Maven Central reachable? see ~/.m2/settings.xml):\n{tail}")
    (folder / ".complete").write_text(version)
    print(f"fetched {name} in {time.monotonic() - started:.0f} s", file=out, flush=True)
    return folder


def java() -> str:
    exe = shutil.which("java")
    if exe is None:
        raise ServiceError("Apache Kafka needs a Java runtime (17+): apt-get install default-jre-headless")
    return exe


def classpath(version: str = KAFKA_VERSION) -> str:
    return str(libs(version) / "*")


SCRAM_MECHANISM = "SCRAM-SHA-512"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"


@dataclass(frozen=True)
class SaslSslListener:
    """A SASL_SSL client listener (SCRAM-SHA-512) beside the PLAINTEXT one, which stays the
    brokers' own listener (between brokers, and to the controllers).

    `keystore` is one PEM file with the broker's private key (PKCS#8, unencrypted) and its
    certificate chain; `truststore` the PEM of the CA that signed it. `users` (name ->
    password) get SCRAM credentials when the storage is formatted, before a broker runs.
    """

    keystore: Path
    truststore: Path
    users: Mapping[str, str] = field(default_factory=dict)

    def properties(self) -> dict[str, str]:
        """The server properties of the listener (named SASL_SSL, as its protocol)."""
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": f"{_SCRAM_LOGIN};",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
        }

    def client_properties(self, user: str, path: Path) -> Path:
        """A Java client's properties for `user` on this listener (`--command-config` of Kafka's tools)."""
        jaas = f'{_SCRAM_LOGIN} username="{user}" password="{self.users[user]}";'
        path.write_text(
            f"security.protocol=SASL_SSL\nsasl.mechanism={SCRAM_MECHANISM}\nsasl.jaas.config={jaas}\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={self.truststore}\n"
        )
        return path

    def format_args(self) -> list[str]:
        """StorageTool's `--add-scram` for each user."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={password}]"]
        return args


@dataclass
class Node:
    """One broker-and-controller JVM of a cluster."""

    node_id: int
    port: int
    controller_port: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    sasl_ssl_port: int | None = None  # with a SaslSslListener

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class KafkaCluster:
    """A running Apache Kafka cluster on 127.0.0.1: one or more combined broker/controller nodes."""

    version: str
    nodes: list[Node]
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL listener's addresses (a cluster started with a SaslSslListener)."""
        if any(n.sasl_ssl_port is None for n in self.nodes):
            raise ServiceError("this cluster was started without a SASL_SSL listener (start_kafka(sasl_ssl=...))")
        return ",".join(f"127.0.0.1:{n.sasl_ssl_port}" for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def start_node(self, node: Node, timeout: float = 90.0) -> None:
        """Start (or restart, with its data) one node, and wait until it listens."""
        self._launch(node)
        self._wait_listening(node, time.monotonic() + timeout, timeout)

    def _launch(self, node: Node) -> None:
        """Start one node's JVM without waiting for it (a no-op while it runs)."""
        if node.proc is not None and node.proc.poll() is None:
            return
        cp = classpath(self.version)
        log_args = (
            [f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}"]
            if self.version.startswith(("2.", "3."))
            else [f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}"]
        )
        args = [
            java(), "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", f"-Dkafka.logs.file={node.log}", *log_args,
            "-cp", cp, "kafka.Kafka", str(node.config),
        ]  # fmt: skip
        with (node.log.parent / f"node-{node.node_id}.out").open("ab") as out:
            node.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_listening(self, node: Node, deadline: float, timeout: float) -> None:
        assert node.proc is not None, "launch the node first"
        while not port_open("127.0.0.1", node.port):
            if node.proc.poll() is not None:
                raise ServiceError(f"Kafka node {node.node_id} exited ({node.proc.returncode}):\n{self.log_tail(node)}")
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"Kafka node {node.node_id} not listening after {timeout:.0f}s:\n{self.log_tail(node)}"
                )
            time.sleep(0.1)

    def kill_node(self, node: Node, sig: int = signal.SIGKILL) -> None:
        """Stop one node: SIGKILL (a crash) by default, SIGTERM for a controlled shutdown."""
        if node.proc is None or node.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, sig)
        try:
            node.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait(10)

    def log_tail(self, node: Node, lines: int = 30) -> str:
        text = ""
        for path in (node.log, node.log.parent / f"node-{node.node_id}.out"):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for node in self.nodes:
            self.kill_node(node, signal.SIGKILL)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def java_command(self, main_class: str, *args: str, log: str = "tools.log", classes: str = "") -> list[str]:
        """The command line of a small client JVM of this cluster's version (a tool, a consumer, a
        Streams app): quiet logging into `log` in the cluster's folder, `classes` before the jars."""
        cp = f"{classes}:{classpath(self.version)}" if classes else classpath(self.version)
        return [
            java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            f"-Dkafka.logs.file={self.workdir / log}", f"-Djava.io.tmpdir={self.workdir}",
            "-cp", cp, main_class, *args,
        ]  # fmt: skip

    def tool(self, main_class: str, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        """Run one of Kafka's command-line tools (its Java main class) against this cluster; its stdout."""
        done = subprocess.run(
            self.java_command(main_class, *args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise ServiceError(f"{main_class} {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    def consumer_groups(self, *args: str, timeout: float = 120.0, command_config: Path | None = None) -> str:
        """`kafka-consumer-groups.sh --bootstrap-server <this cluster> ARGS`; with `command_config`
        (client properties: SASL and TLS) through the SASL_SSL listener."""
        return self._admin_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", args, timeout, command_config
        )

    def acls(self, *args: str, timeout: float = 120.0, command_config: Path | None = None) -> str:
        """`kafka-acls.sh --bootstrap-server <this cluster> ARGS` (a cluster with an authorizer)."""
        main = (
            "kafka.admin.AclCommand" if self.version.startswith(("2.", "3.")) else "org.apache.kafka.tools.AclCommand"
        )
        return self._admin_tool(main, args, timeout, command_config)

    def _admin_tool(self, main_class: str, args: tuple[str, ...], timeout: float, command_config: Path | None) -> str:
        if command_config is None:
            return self.tool(main_class, "--bootstrap-server", self.bootstrap, *args, timeout=timeout)
        return self.tool(
            main_class, "--bootstrap-server", self.sasl_ssl_bootstrap, "--command-config", str(command_config), *args,
            timeout=timeout,
        )  # fmt: skip


def start_kafka(
    nodes: int = 1,
    version: str = KAFKA_VERSION,
    offsets_partitions: int = 4,
    broker_properties: dict[str, str] | None = None,
    timeout: float = 120.0,
    sasl_ssl: SaslSslListener | None = None,
    client_ports: list[int] | None = None,
) -> KafkaCluster:
    """Apache Kafka `version` in KRaft mode: `nodes` combined broker/controller JVMs on free ports.

    The offsets topic gets `offsets_partitions` partitions (few, so a test's groups are easy to
    find) and a replication factor of min(3, nodes); `broker_properties` adds or overrides
    server properties (an authorizer, say). `sasl_ssl` adds a SASL_SSL client listener.
    `client_ports` picks each node's PLAINTEXT port (free ones otherwise): a proxy started
    before the cluster can then forward to it while `broker_properties` advertises the proxy.
    """
    if client_ports is not None and len(client_ports) != nodes:
        raise ServiceError(f"client_ports names {len(client_ports)} ports for {nodes} nodes: give one per node")
    cp_folder = libs(version)
    workdir = Path(tempfile.mkdtemp(prefix=f"lagd-kafka-{version}-"))
    (workdir / "log4j2.yaml").write_text(_LOG4J2)
    (workdir / "log4j.properties").write_text(_LOG4J1)
    per_node = 3 if sasl_ssl else 2
    picked = _distinct_ports(per_node * nodes)
    for i, port in enumerate(client_ports or []):
        picked[per_node * i] = port
    ports = [
        (picked[per_node * i], picked[per_node * i + 1], picked[per_node * i + 2] if sasl_ssl else None)
        for i in range(nodes)
    ]
    voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c, _) in enumerate(ports))
    rf = min(3, nodes)
    cluster_id = _cluster_id()
    members: list[Node] = []
    for i, (port, cport, sport) in enumerate(ports):
        node_id = i + 1
        data = workdir / f"node-{node_id}"
        client_listeners = f"PLAINTEXT://127.0.0.1:{port}" + (f",SASL_SSL://127.0.0.1:{sport}" if sport else "")
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"{client_listeners},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": client_listeners,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            + (",SASL_SSL:SASL_SSL" if sport else ""),
            "log.dirs": str(data),
            "num.partitions": "1",
            "offsets.topic.num.partitions": str(offsets_partitions),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "4",
            "default.replication.factor": str(rf),
            "min.insync.replicas": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.flush.interval.ms": "60000",
            "controlled.shutdown.enable": "true",
        }
        props.update(sasl_ssl.properties() if sasl_ssl else {})
        props.update(broker_properties or {})
        config = workdir / f"server-{node_id}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log = workdir / f"node-{node_id}.log"
        try:
            _format(version, cp_folder, config, cluster_id, log, sasl_ssl.format_args() if sasl_ssl else [])
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)  # no cluster to stop yet: its folder goes here
            raise
        members.append(
            Node(node_id=node_id, port=port, controller_port=cport, config=config, log=log, sasl_ssl_port=sport)
        )
    cluster = KafkaCluster(version=version, nodes=members, workdir=workdir)
    try:
        # All at once: a node's broker waits for a controller quorum (a majority of the nodes)
        # before it listens, and gives up after a minute, so starting them one by one never ends.
        for node in members:
            cluster._launch(node)
        deadline = time.monotonic() + timeout
        for node in members:
            cluster._wait_listening(node, deadline, timeout)
        _wait_ready(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _distinct_ports(count: int) -> list[int]:
    """`count` free ports, no two alike: each is free when picked, but nothing holds it, so the
    same one could be picked twice for two listeners of one cluster."""
    picked: list[int] = []
    while len(picked) < count:
        port = free_low_port()
        if port not in picked:
            picked.append(port)
    return picked


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding, as Kafka's own.

    Never one starting with "-", which the storage tool would read as an option (one id in 64
    did: "argument --cluster-id/-t: expected one argument"); Kafka's Uuid.randomUuid skips those too.
    """
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format(version: str, folder: Path, config: Path, cluster_id: str, log: Path, extra: list[str]) -> None:
    done = subprocess.run(
        [java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Dkafka.logs.file={log}",
         "-cp", str(folder / "*"), "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
         *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ServiceError(f"formatting Kafka storage failed ({config}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _wait_ready(cluster: KafkaCluster, timeout: float) -> None:
    """Until every broker is registered and a client sees all of them (a listening port comes first)."""
    import asyncio
    import concurrent.futures

    from aiokafka import AIOKafkaClient

    async def brokers() -> int:
        client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=5000)
        try:
            await client.bootstrap()
            await client.force_metadata_update()
            return len(client.cluster.brokers())
        finally:
            await client.close()

    deadline = time.monotonic() + timeout
    seen: object = 0
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callers may be inside an event loop
        while time.monotonic() < deadline:
            try:
                seen = pool.submit(asyncio.run, brokers()).result()
            except Exception as exc:  # not up yet: the next round asks again
                seen = exc
            if seen == len(cluster.nodes):
                return
            time.sleep(0.2)
    raise ServiceError(
        f"Kafka brokers not all ready after {timeout:.0f}s (last: {seen!r}):\n{cluster.log_tail(cluster.nodes[0])}"
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "fetch":
        print("usage: python -m lagd.embedded.kafka fetch [VERSION ...]", file=sys.stderr)
        return 2
    try:
        for version in args[1:] or VERSIONS:
            fetch(version)
        if not args[1:]:
            fetch_mirror_maker()
    except ServiceError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
