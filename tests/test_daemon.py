"""`lagd run`: starts against real services, tells systemd READY, stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from lagd import embedded

ROOT = Path(__file__).resolve().parent.parent


def _start(
    tmp_path: Path, kafka: str, database_url: str, mqtt: tuple[str, int], port: int
) -> tuple[subprocess.Popen[bytes], socket.socket]:
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
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "lagd", "run", "--config", str(ROOT / "config" / "lagd.example.toml")],
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


def test_run_with_bad_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[clusters.x]\nbootstrap-servers = ["a:1"]\n[evaluator]\nallowed-lag = -1\n')
    r = subprocess.run(
        [sys.executable, "-m", "lagd", "run", "--config", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "evaluator.allowed-lag" in r.stderr
