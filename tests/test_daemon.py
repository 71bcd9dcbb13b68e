"""`lagd run`: starts against real services, tells systemd READY, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagd import daemon
from lagd.core.config import parse
from lagd.core.model import Commit
from lagd.embedded import services as embedded
from tests.clocks import ManualClock

ROOT = Path(__file__).resolve().parent.parent


def _start(
    tmp_path: Path,
    kafka: str,
    database_url: str,
    mqtt: tuple[str, int],
    port: int,
    *extra: str,
    settings: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """`lagd run` on the example settings with these services (and `settings`: more LAGD_*
    variables), its systemd notifications to a socket of the test's."""
    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(0.2)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NOTIFY_SOCKET": str(notify),
        "WATCHDOG_USEC": "2000000",
        "LAGD_CLUSTERS_LOCAL_BOOTSTRAP_SERVERS": kafka,
        "LAGD_STORAGE_DATABASE_URL": database_url,
        "LAGD_HTTP_LISTEN": f"127.0.0.1:{port}",
        "LAGD_NOTIFY_MQTT_URL": f"mqtt://{mqtt[0]}:{mqtt[1]}",
        "LAGD_LOG_FORMAT": "json",
        **(settings or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "lagd", "run", "--config", str(ROOT / "config" / "lagd.example.toml"), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "lagd.log", "wb"),  # noqa: SIM115
    )
    return proc, sock


def _messages(sock: socket.socket, until: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got.extend(sock.recv(4096).decode().splitlines())
        except TimeoutError:
            pass
        if until in got:
            return got
        if proc.poll() is not None:
            break
    raise AssertionError(
        f"no {until} within {timeout}s; got {got}; exit {proc.poll()}; log:\n{log.read_text()[-3000:]}"
    )


def test_run_reports_ready_and_stops_within_5s(
    tmp_path: Path, kafka: str, database_url: str, mqtt_broker: tuple[str, int]
) -> None:
    port = embedded.free_port()
    proc, sock = _start(tmp_path, kafka, database_url, mqtt_broker, port)
    log = tmp_path / "lagd.log"
    try:
        got = _messages(sock, "READY=1", 60, proc, log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/burrow/admin", timeout=5) as answer:
            assert answer.read() == b"GOOD"
        # The watchdog is petted while the loop runs (WATCHDOG_USEC=2s: every second).
        got += _messages(sock, "WATCHDOG=1", 5, proc, log)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(timeout=10)
        elapsed = time.monotonic() - started
        assert code == 0, log.read_text()[-3000:]
        assert elapsed < 5.0, f"took {elapsed:.1f}s to stop"
        rest = []
        while True:
            try:
                rest.extend(sock.recv(4096).decode().splitlines())
            except (TimeoutError, OSError):
                break
        assert "STOPPING=1" in got + rest
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


def test_brokers_that_never_answer_make_lagd_degraded_rather_than_starting_for_ever(
    tmp_path: Path, database_url: str, mqtt_broker: tuple[str, int]
) -> None:
    """A wrong broker address (nothing listens there): the reader never catches up, and within
    three offset-refreshes and 10 s readiness, /lagd/v1/clusters and /metrics say lagd cannot
    read the cluster, and why."""
    port = embedded.free_port()
    nowhere = f"127.0.0.1:{embedded.free_port()}"
    limit = {"LAGD_CLUSTERS_LOCAL_OFFSET_REFRESH": "1"}  # 3 x 1 s + 10 s
    proc, sock = _start(tmp_path, nowhere, database_url, mqtt_broker, port, settings=limit)
    log = tmp_path / "lagd.log"
    base = f"http://127.0.0.1:{port}"

    def ready() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{base}/burrow/admin/ready", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()
        except OSError:
            return 0, "not listening yet"

    try:
        seen: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            seen.append(ready())
            if seen[-1][1].startswith("DEGRADED"):
                break
            time.sleep(0.5)  # polling a daemon in another process, as a load balancer does
        assert seen and seen[-1] == (503, "DEGRADED: cannot read cluster(s) local"), (
            seen[-3:],
            log.read_text()[-3000:],
        )
        assert (503, "STARTING") in seen  # starting until the limit, then degraded
        with urllib.request.urlopen(f"{base}/lagd/v1/clusters", timeout=5) as answer:
            (cluster,) = json.loads(answer.read())["clusters"]
        assert cluster["degraded"] is True, cluster
        assert cluster["reason"].startswith("no answer from the cluster's brokers"), cluster
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:
            assert 'lagd_cluster_degraded{cluster="local"} 1' in answer.read().decode()
        # the API's answers say the brokers are unreachable and what to check, not "restoring"
        try:
            urllib.request.urlopen(f"{base}/v3/kafka/local/consumer/g/lag", timeout=5)
            raise AssertionError("answered before ready")
        except urllib.error.HTTPError as refused:
            message = json.loads(refused.read())["message"]
        assert message.startswith(f"lagd cannot reach the brokers of cluster(s) local (bootstrap-servers {nowhere}"), (
            message
        )
        # the database migration is told: here a schema already at the newest revision
        assert "database schema up to date (revision " in log.read_text(), log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


def test_run_with_bad_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[clusters.x]\nbootstrap-servers = ["a:1"]\n[evaluator]\nallowed-lag = -1\n')
    r = subprocess.run(
        [sys.executable, "-m", "lagd", "run", "--config", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "evaluator.allowed-lag" in r.stderr


@contextlib.contextmanager
def _hung_database() -> Iterator[tuple[int, list[socket.socket]]]:
    """A stand-in for a hung Postgres: a plain TCP listener on 127.0.0.1 that accepts every
    connection and never answers (no real database server is involved). Yields its port and
    the accepted connections, which stay open until the block ends."""
    hung = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    hung.settimeout(0.2)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept_forever() -> None:
        while not done.is_set():
            try:
                conn, _ = hung.accept()
            except OSError:  # the 0.2 s timeout included
                continue
            accepted.append(conn)  # held open, never read or answered

    acceptor = threading.Thread(target=accept_forever, daemon=True)
    acceptor.start()
    try:
        yield hung.getsockname()[1], accepted
    finally:
        done.set()
        acceptor.join(2)
        for conn in accepted:
            conn.close()
        hung.close()


@pytest.mark.parametrize("step", ["migration", "restore"])
def test_sigterm_while_the_database_hangs_stops_within_5s(tmp_path: Path, step: str) -> None:
    """SIGTERM during the database steps at start (migration, restore, retries) exits promptly.

    The database is `_hung_database`: a TCP listener that accepts and never answers, standing
    in for a Postgres that hangs. Kafka and MQTT are never reached: lagd does not get past
    restoring state. "migration" runs Alembic (psycopg2, in a thread); "restore" skips it
    (--no-migrate) and hangs in asyncpg.
    """
    with _hung_database() as (db_port, accepted):
        port = embedded.free_port()
        proc, sock = _start(
            tmp_path,
            "127.0.0.1:1",
            f"postgresql+asyncpg://lagd:db-secret-pw@127.0.0.1:{db_port}/lagd",
            ("127.0.0.1", 1),
            port,
            *(["--no-migrate"] if step == "restore" else []),
        )
        log = tmp_path / "lagd.log"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not accepted:  # lagd is inside a database step
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            assert accepted, "lagd never connected to the hung database"
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still running 15 s after SIGTERM; log:\n{log.read_text()[-3000:]}") from None
            elapsed = time.monotonic() - started
            assert elapsed < 5.0, f"took {elapsed:.1f}s to stop; log:\n{log.read_text()[-3000:]}"
            assert code == 0, log.read_text()[-3000:]
            assert "db-secret-pw" not in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
            sock.close()


def test_migration_against_a_hung_database_times_out() -> None:
    """Alembic (psycopg2) gives up on a database that never answers instead of blocking forever.

    `_hung_database` stands in for the hung Postgres (a TCP listener that never answers)."""
    from lagd.db.migrate import upgrade

    with _hung_database() as (db_port, _):
        started = time.monotonic()
        with pytest.raises(Exception, match="timeout"):
            upgrade(f"postgresql://lagd@127.0.0.1:{db_port}/lagd")
        assert time.monotonic() - started < 15


def test_http_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        proc, sock = _start(tmp_path, "127.0.0.1:1", "postgresql://lagd@127.0.0.1:1/lagd", ("127.0.0.1", 1), port)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            sock.close()
        stderr = (tmp_path / "lagd.log").read_text()
        assert code == 1, stderr
        assert "Traceback" not in stderr, stderr
        lines = stderr.strip().splitlines()
        events = [json.loads(line) for line in lines]  # JSON logs: the failure is a JSON line too
        assert (events[-1]["level"], events[-1]["event"]) == (
            "error",
            f"http.listen 127.0.0.1:{port} is in use: stop the other process or set http.listen to a free host:port",
        ), stderr
    finally:
        busy.close()


@pytest.mark.parametrize("ending", ["returns", "raises", "cancelled"])
async def test_a_part_that_ends_before_stop_is_a_failure(ending: str) -> None:
    """A long-running part that ends on its own must fail lagd (exit 1), never exit 0 quietly."""

    async def part() -> None:
        await asyncio.sleep(0.01)
        if ending == "raises":
            raise RuntimeError("boom")

    rt = daemon.build_runtime(parse({"clusters": {"a": {"bootstrap-servers": ["h:1"]}}}, env={}), asyncio.Event())
    task = asyncio.create_task(part() if ending != "cancelled" else asyncio.sleep(10), name="part")
    if ending == "cancelled":
        asyncio.get_running_loop().call_later(0.01, task.cancel)
    with pytest.raises(SystemExit) as info:
        await daemon._supervise(rt, [task])
    assert info.value.code == 1


async def test_parts_that_end_with_a_requested_stop_are_fine() -> None:
    rt = daemon.build_runtime(parse({"clusters": {"a": {"bootstrap-servers": ["h:1"]}}}, env={}), asyncio.Event())

    async def part() -> None:
        await rt.stop.wait()

    task = asyncio.create_task(part(), name="part")
    asyncio.get_running_loop().call_later(0.01, rt.stop.set)
    await daemon._supervise(rt, [task])  # no SystemExit


async def test_group_expiry_reads_the_daemons_one_clock(settle: Any) -> None:
    """The runtime carries the one injected clock (lagd.runtime.clock) and expiry reads it, not the wall
    clock: a group committed years ago by the wall clock is young by this one, and goes once
    the test moves the clock past expire-group (a week) instead of waiting for it."""
    t0 = 1_700_000_000_000
    clock = ManualClock(t0 + 1_000)
    settings = parse({"clusters": {"a": {"bootstrap-servers": ["h:1"]}}}, env={})
    rt = daemon.build_runtime(settings, asyncio.Event(), clock=clock)
    assert rt.clock is clock
    rt.state.apply_many([Commit("a", "g", "t", 0, 10, 1, t0, t0)])
    expiry = asyncio.create_task(daemon.expire_groups(rt, every_s=0.01))
    try:
        for _ in range(5):  # several passes at the clock's time: nothing expires
            await asyncio.sleep(0.01)
        assert rt.state.groups("a") == ["g"]
        clock.advance(int(settings.storage.expire_group * 1000))
        await settle(lambda: rt.state.groups("a") == [], timeout=5, interval=0.01, what="the group expired")
    finally:
        expiry.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await expiry


async def test_unless_stopped_cancels_a_hung_step() -> None:
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def hung() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()

    asyncio.get_running_loop().call_later(0.05, stop.set)
    started = time.monotonic()
    with pytest.raises(daemon._Stopped):
        await daemon._unless_stopped(hung(), stop)
    assert time.monotonic() - started < 1 and cancelled.is_set()
    assert await daemon._unless_stopped(asyncio.sleep(0, result=7), asyncio.Event()) == 7
