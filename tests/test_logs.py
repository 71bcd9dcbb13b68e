"""Every line lagd writes is one log event: JSON off a terminal (level, event, timestamp on each),
one console line on a terminal; libraries' records (aiokafka, aiohttp, asyncio, warnings) and
exceptions included. The real daemon is run as a process against a broker that refuses
connections for a while, then answers; and at debug level through outages of Postgres, the
broker and MQTT and through malformed and bad HTTP requests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lagd.embedded import services as embedded
from lagd.evaluate import native
from tests.netcut import Cuttable

ROOT = Path(__file__).resolve().parent.parent
Settle = Callable[..., Awaitable[Any]]

# Logs through every path lagd's process has: structlog with an exception, a library's record
# with a multi-line message and a traceback, a Python warning, an unretrieved task exception.
EMITTER = textwrap.dedent(
    """
    import asyncio, gc, logging, sys, warnings
    from lagd.runtime import logs
    logs.configure("info", sys.argv[1])
    log = logs.get("lagd.test")
    log.info("plain", n=1)
    try:
        raise ValueError("bad\\nvalue")
    except ValueError:
        log.error("lagd failed", exc_info=True)
        logging.getLogger("aiohttp.server").error("Error handling request\\nsecond line", exc_info=True)
    logging.getLogger("aiokafka.conn").error("Unable connect to node with id 0")  # quiet unless debug
    from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
    for bad in (BadHttpMessage("Invalid header:\\n\\n  b'x'\\n  ^"), LineTooLong("Got more than 8190 bytes")):
        try:
            raise bad
        except Exception as exc:  # a client's malformed request, as aiohttp logs it
            logging.getLogger("aiohttp.server").exception("Error handling request from %s", "10.1.2.3", exc_info=exc)
    logging.getLogger("sqlalchemy.pool").warning("pool warning")
    warnings.warn("something deprecated", DeprecationWarning, stacklevel=1)

    async def main():
        async def boom():
            raise RuntimeError("never retrieved")
        t = asyncio.ensure_future(boom())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del t
        gc.collect()

    asyncio.run(main())
    """
)


def emit(fmt: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-W", "always", "-c", EMITTER, fmt],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    return r.stderr.splitlines()


def parse_all(lines: list[str]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(ev, dict) and {"level", "event", "timestamp"} <= ev.keys(), line
        events.append(ev)
    return events


def test_every_path_logs_one_json_object_a_line() -> None:
    events = parse_all(emit("json"))
    by_event = {e["event"]: e for e in events}
    assert by_event["plain"]["n"] == 1
    assert "ValueError: bad" in by_event["lagd failed"]["exception"]
    lib = by_event["Error handling request | second line"]
    assert lib["logger"] == "aiohttp.server" and lib["level"] == "error" and "Traceback" in lib["exception"]
    assert by_event["pool warning"]["logger"] == "sqlalchemy.pool"
    assert any("something deprecated" in e["event"] and e["logger"] == "py.warnings" for e in events)
    assert any(e.get("logger") == "asyncio" and "never retrieved" in e.get("exception", "") for e in events)
    assert not any("Unable connect" in e["event"] for e in events)
    # A client's malformed request: a warning without traceback, at most one a minute.
    malformed = [e for e in events if e["event"].startswith("malformed HTTP request")]
    assert malformed == [
        {
            "event": "malformed HTTP request from 10.1.2.3 answered 400: Invalid header",
            "level": "warning",
            "logger": "aiohttp.server",
            "timestamp": malformed[0]["timestamp"],
        }
    ], malformed


def test_console_format_is_one_line_per_event() -> None:
    lines = emit("console")
    assert len([ln for ln in lines if "plain" in ln]) == 1
    failed = [ln for ln in lines if "lagd failed" in ln]
    assert len(failed) == 1 and "exc='ValueError: bad value (<string>:" in failed[0]
    assert not any(ln.startswith(("Traceback", "  File", " ")) for ln in lines), lines
    assert len(lines) == 7, lines


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/burrow/admin/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def failures(port: int) -> float:
    """Failed reader attempts so far, from /metrics (lagd_ingest_failures_total)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return 0.0
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith("lagd_ingest_failures_total{"))


def logged(out: Path, needle: str) -> bool:
    """Has the daemon written `needle` to its log file yet?"""
    return needle in out.read_text(errors="replace")


def start_lagd(env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    """`lagd run` with the example settings and `env`'s overrides; stdout and stderr to `out`."""
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "lagd", "run", "--config", str(ROOT / "config" / "lagd.example.toml")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


async def test_daemon_logs_only_json_while_the_broker_refuses_and_after(
    database_url: str, tmp_path: Path, settle: Settle
) -> None:
    broker_port, http_port = embedded.free_port(), embedded.free_port()
    env = {
        **os.environ,
        "LAGD_CLUSTERS_LOCAL_BOOTSTRAP_SERVERS": f"127.0.0.1:{broker_port}",
        "LAGD_CLUSTERS_LOCAL_OFFSET_REFRESH": "0.5",
        "LAGD_CLUSTERS_LOCAL_REQUEST_TIMEOUT": "2",
        "LAGD_STORAGE_DATABASE_URL": database_url,
        "LAGD_HTTP_LISTEN": f"127.0.0.1:{http_port}",
        "LAGD_NOTIFY_ENABLED": "false",
        "LAGD_LOG_FORMAT": "json",
        "LAGD_LOG_LEVEL": "info",
    }
    out = tmp_path / "lagd.log"
    proc = start_lagd(env, out)
    broker = None
    try:
        await settle(lambda: logged(out, "failed; reconnecting"), timeout=30, what="a reconnect warning")
        await settle(lambda: proc.poll() is not None or failures(http_port) >= 6, timeout=30, what="more attempts")
        assert proc.poll() is None
        broker = embedded.start_tansu(port=broker_port)  # the address answers from now on
        await settle(lambda: _ready(http_port), timeout=60, what="lagd ready once the broker answers")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            if broker is not None:
                broker.stop()
    assert proc.returncode == 0, out.read_text()
    events = parse_all(out.read_text().splitlines())
    names = [e["event"] for e in events]
    assert "lagd starting" in names and "lagd stopped" in names
    # A fresh broker has no __consumer_offsets: "auto" polls, and says so.
    assert "offsets source: admin polling, the offsets topic cannot be read" in names
    warnings = [e for e in events if e["level"] == "warning" and e["event"].endswith("failed; reconnecting")]
    assert warnings and all(e["attempt"] == 1 for e in warnings), warnings  # once per reader, not per attempt
    assert not any("KafkaConnectionError: KafkaConnectionError" in e.get("error", "") for e in events)
    assert not any(e.get("logger", "").startswith("aiokafka") for e in events)


def _raw_http(port: int, request: bytes) -> bytes:
    """Send bytes that are not a well-formed HTTP request; the status line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.recv(4096).split(b"\r\n", 1)[0]


def _status(port: int, method: str, path: str, body: bytes | None = None, timeout: float = 30) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=body)
    request.add_header("Authorization", "Bearer t0ken")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def test_daemon_at_debug_logs_only_json_through_outages_and_bad_requests(
    database_url: str, tmp_path: Path, settle: Settle
) -> None:
    """Every line `lagd run` writes is one JSON event at log level debug (the libraries' records
    shown too) while Postgres is unreachable at start and again later, the broker and the MQTT
    broker refuse, and clients send malformed HTTP and bad requests; exceptions are fields."""
    db = urlsplit(database_url)
    postgres = Cuttable(db.hostname or "127.0.0.1", db.port or 5432)
    db_port = await postgres.start()
    postgres.cut()  # unreachable when lagd starts
    broker_port, http_port, mqtt_port = embedded.free_port(), embedded.free_port(), embedded.free_port()
    env = {
        **os.environ,
        "LAGD_CLUSTERS_LOCAL_BOOTSTRAP_SERVERS": f"127.0.0.1:{broker_port}",
        "LAGD_CLUSTERS_LOCAL_OFFSET_REFRESH": "0.5",
        "LAGD_CLUSTERS_LOCAL_REQUEST_TIMEOUT": "2",
        "LAGD_STORAGE_DATABASE_URL": db._replace(netloc=f"{db.username}@127.0.0.1:{db_port}").geturl(),
        "LAGD_HTTP_LISTEN": f"127.0.0.1:{http_port}",
        "LAGD_HTTP_AUTH_TOKEN": "t0ken",
        "LAGD_NOTIFY_MQTT_URL": f"mqtt://127.0.0.1:{mqtt_port}",  # nothing listens there
        "LAGD_LOG_FORMAT": "json",
        "LAGD_LOG_LEVEL": "debug",
    }
    out = tmp_path / "lagd.log"
    proc = start_lagd(env, out)
    broker = None
    try:
        await settle(
            lambda: logged(out, "restoring state from Postgres failed"), timeout=30, what="the Postgres failure"
        )
        postgres.restore()
        await settle(lambda: logged(out, '"lagd running"'), timeout=60, what="lagd running once Postgres answers")
        await settle(lambda: logged(out, '"logger": "aiokafka'), timeout=30, what="aiokafka's own records (debug)")
        await settle(lambda: logged(out, "notify delivery interrupted"), timeout=30, what="the MQTT failure")
        # Malformed HTTP: aiohttp answers 400 and logs the parser's exception.
        assert await asyncio.to_thread(_raw_http, http_port, b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n") == (
            b"HTTP/1.0 400 Bad Request"
        )
        assert await asyncio.to_thread(_raw_http, http_port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n") == (
            b"HTTP/1.0 400 Bad Request"
        )
        await settle(lambda: logged(out, '"logger": "aiohttp.server"'), timeout=10, what="aiohttp's record")
        # Bad requests lagd answers itself.
        for method, path, body, code in (
            ("POST", "/v3/admin/loglevel", b"{not json", 400),
            ("PUT", "/v3/kafka", None, 405),
            ("GET", "/no/such/path", None, 404),
            ("GET", "/lagd/v1/incidents?limit=many", None, 400),
        ):
            assert await asyncio.to_thread(_status, http_port, method, path, body) == code, (method, path)
        postgres.cut()  # Postgres goes away while lagd runs: the API says 503 and logs why
        assert await asyncio.to_thread(_status, http_port, "GET", "/lagd/v1/incidents") == 503
        await settle(lambda: logged(out, "database query for the API failed"), timeout=10, what="the API's DB failure")
        postgres.restore()
        broker = embedded.start_tansu(port=broker_port)
        await settle(lambda: _ready(http_port), timeout=60, what="lagd ready once the broker answers")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            if broker is not None:
                broker.stop()
            await postgres.close()
    assert proc.returncode == 0, out.read_text()
    events = parse_all(out.read_text().splitlines())
    loggers = {e.get("logger", "") for e in events}
    assert "aiokafka" in loggers and "aiohttp.server" in loggers, loggers  # aiokafka: only at debug
    # the two malformed requests: one warning naming the client and what was wrong, no traceback
    (malformed,) = [e for e in events if e.get("logger") == "aiohttp.server"]
    assert malformed["level"] == "warning" and "exception" not in malformed, malformed
    assert (
        malformed["event"] == "malformed HTTP request from 127.0.0.1 answered 400: Invalid character in Content-Length"
    )
    assert any(e["event"] == "restoring state from Postgres failed; retrying" for e in events)
    assert {"lagd starting", "lagd running", "lagd stopped"} <= {e["event"] for e in events}
    (starting,) = [e for e in events if e["event"] == "lagd starting"]
    assert starting["rules_code"] == native.describe()  # which code judges: compiled or Python
