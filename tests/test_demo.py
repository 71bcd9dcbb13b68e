"""`lagd demo`: every simulated state shows, and nothing it started outlives it.

The end-to-end test runs the real command (`lagd demo --duration 75 --no-table`), reads
lagd's Burrow API on the port the demo prints, and after exit checks /proc for any process
the demo started and the file system for the directories those processes worked in.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import aiomqtt
import pytest

from lagd import demo

ROOT = Path(__file__).resolve().parent.parent

# --- the pure parts -------------------------------------------------------------------


def test_scenario_has_a_group_in_every_state() -> None:
    sc = demo.demo_scenario(1_800_000_000_000)
    behaviours = {g.behaviour for g in sc.groups}
    assert behaviours == {"healthy", "draining", "lagging", "stalled", "stopped", "rewinding", "recovering"}
    assert [g.name for g in sc.groups] == list(demo.EXPECTED)
    assert any(t.pattern == "bursty" for t in sc.topics)
    assert sc.ts_ms(2.0) == 1_800_000_002_000


def test_lag_seconds_by_group_takes_each_groups_highest() -> None:
    text = (
        "# HELP lagd_consumer_lag_seconds lag in seconds\n"
        'lagd_consumer_lag_seconds{cluster="demo",group="a",topic="t",partition="0"} 1.5\n'
        'lagd_consumer_lag_seconds{cluster="demo",group="a",topic="t",partition="1"} 4\n'
        'lagd_consumer_lag_seconds{cluster="demo",group="b",topic="t",partition="0"} NaN\n'
        'lagd_consumer_lag_seconds_other{cluster="demo",group="c"} 9\n'
    )
    assert demo.lag_seconds_by_group(text) == {"a": 4.0}


def test_render_shows_warm_up_then_rows() -> None:
    rows = [demo.Row("archive", "ERR", "STOP", 120, 33.25), demo.Row("billing")]
    warm = demo.render(rows, 3.4, 10, colour=False)
    assert warm[0].startswith("warming up: windows [###.......] 3/10")
    later = demo.render(rows, 30.0, 10, colour=False)
    assert later[0].startswith("simulated for 30 s")
    assert later[2].split() == ["archive", "stopped", "ERR", "STOP", "120", "33.2"]
    assert later[3].split() == ["billing", "healthy", "-", "-", "-"]


def test_settings_take_the_started_services_addresses(tmp_path: Path) -> None:
    class FakeProcess:  # only the address is read
        address = "127.0.0.1:39092"

    services = demo.Services(kafka=FakeProcess(), mqtt_address=("127.0.0.1", 31883))  # type: ignore[arg-type]
    services.database_url = "postgresql+asyncpg://postgres@127.0.0.1:5432/lagd_demo"
    settings = demo.demo_settings(ROOT / "config" / "demo.toml", services)
    assert settings.clusters["demo"].bootstrap_servers == ["127.0.0.1:39092"]
    assert settings.clusters["demo"].offset_refresh == 0.5  # faster than the simulated commits: see demo.toml
    assert settings.storage.database_url.reveal() == services.database_url
    assert settings.notify.mqtt_url == "mqtt://127.0.0.1:31883"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", settings.http.listen)
    assert demo.base_url(settings) == "http://" + settings.http.listen


def test_a_taken_port_is_said_and_another_one_used(tmp_path: Path) -> None:
    class FakeProcess:  # only the address is read
        address = "127.0.0.1:39092"

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "demo.toml"
        text = (ROOT / "config" / "demo.toml").read_text()
        config.write_text(re.sub(r'(?m)^listen = "[^"]*"', f'listen = "127.0.0.1:{port}"', text))
        assert f"127.0.0.1:{port}" in config.read_text()
        services = demo.Services(kafka=FakeProcess())  # type: ignore[arg-type]
        services.database_url = "postgresql+asyncpg://postgres@127.0.0.1:5432/lagd_demo"
        settings = demo.demo_settings(config, services)
    assert settings.http.listen != f"127.0.0.1:{port}"
    assert services.notes == [f"HTTP: port {port} is taken, so lagd listens on {settings.http.listen}"]


async def test_the_table_says_starting_until_lagd_answers() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with aiohttp.ClientSession() as session:
        rows = await demo.read_rows(session, f"http://127.0.0.1:{port}", ["billing"])
    assert [(r.group, r.status, r.detail) for r in rows] == [("billing", "-", "starting")]


async def test_clearing_retained_messages_clears_those_under_the_filter_only(mqtt_broker: tuple[str, int]) -> None:
    host, port = mqtt_broker
    prefix = f"lagd-test-{uuid.uuid4().hex[:8]}"
    async with aiomqtt.Client(host, port) as client:
        for topic in (f"{prefix}/demo/groups/a/status", f"{prefix}/demo/status", f"{prefix}/other/status"):
            await client.publish(topic, b'{"status": "OK"}', qos=1, retain=True)
    assert await demo.clear_retained(host, port, f"{prefix}/demo/#") == 2
    assert await demo.retained_topics(host, port, f"{prefix}/#", 1.0) == {f"{prefix}/other/status"}
    await demo.clear_retained(host, port, f"{prefix}/#")


# --- end to end -------------------------------------------------------------------------


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid` (by /proc parent links): pid -> command line."""
    parents: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        cmd[int(entry)] = cmdline.strip()
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                found[child] = cmd[child]
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_demo_shows_every_state_and_leaves_nothing_behind() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lagd", "demo", "--duration", "75", "--no-table"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    base: list[str] = []
    reader = threading.Thread(target=lambda: _read(proc, lines, base), daemon=True)
    reader.start()
    seen: dict[str, set[str]] = {g: set() for g in demo.EXPECTED}
    search: list[str] = []  # the lagging group's status at each look, in order
    children: dict[int, str] = {}
    workdirs: set[str] = set()
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:
            for pid, cmdline in descendants(proc.pid).items():
                children[pid] = cmdline
                try:
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                if "/lagd-" in cwd:
                    workdirs.add(cwd)
            if base:
                for group in demo.EXPECTED:
                    code, body = _get(f"{base[0]}/v3/kafka/demo/consumer/{group}/lag")
                    if code == 200 and body:
                        st = body["status"]
                        seen[group].add(st["status"])
                        if group == "search":
                            search.append(st["status"])
                        seen[group].update(str(p["status"]) for p in st["partitions"])
            time.sleep(1.0)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    output = "\n".join(lines)
    assert code == 0, f"lagd demo exited {code}:\n{output[-4000:]}"
    assert base, f"the demo printed no lagd URL:\n{output[-4000:]}"
    assert any("tansu" in c for c in children.values()), f"no Tansu broker among {children}"
    # every simulated state was shown by lagd
    assert "OK" in seen["billing"] and "ERR" not in seen["billing"], seen
    assert "OK" in seen["dashboards"] and "ERR" not in seen["dashboards"], seen
    assert "WARN" in seen["search"], seen
    # once its lag is judged growing, the lagging group stays WARN to the end: no flapping
    assert set(search[search.index("WARN") :]) == {"WARN"}, search
    assert {"ERR", "STALL"} <= seen["fraud"], seen
    assert {"ERR", "STOP"} <= seen["archive"], seen
    assert {"ERR", "REWIND"} <= seen["replay"], seen
    assert {"WARN", "OK"} <= seen["reports"], seen
    # nothing it started remains
    left = {pid: c for pid, c in children.items() if alive(pid)}
    assert not left, f"processes left behind: {left}"
    assert not [d for d in workdirs if Path(d).exists()], f"directories left behind: {workdirs}"
    # on a shared PostgreSQL the demo used a database of its own, and dropped it
    own = re.search(r"database (lagd_demo_\d+_[0-9a-f]+)", output)
    if "PostgreSQL: the local server" in output:
        assert own, output[-4000:]
        from lagd.embedded.services import system_postgres

        pg = system_postgres()
        assert pg is not None
        assert own.group(1) not in _databases(demo._admin_url(pg.url)[0])
    # on a shared MQTT broker, no retained message of the demo outlives it
    if "MQTT: the local broker on 127.0.0.1:1883" in output:
        import asyncio

        assert not asyncio.run(demo.retained_topics("127.0.0.1", 1883, "lagd/demo/#", 1.0))


def _read(proc: subprocess.Popen[str], lines: list[str], base: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        m = re.match(r"^lagd: (http://\S+?)/?$", line.strip())
        if m and not base:
            base.append(m.group(1))


# --- the demo's database ----------------------------------------------------------------


def _databases(admin_url: str) -> dict[str, int]:
    """Every database on the server and how many connections it has."""
    import psycopg2

    conn = psycopg2.connect(admin_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT d.datname, (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = d.datname) "
                "FROM pg_database d"
            )
            return {name: int(n) for name, n in cur.fetchall()}
    finally:
        conn.close()


def test_each_demo_run_has_a_database_of_its_own_and_never_drops_one_in_use(postgres: Any) -> None:
    import asyncio

    import psycopg2

    from lagd.embedded.services import Postgres

    pg: Postgres = postgres
    admin = demo._admin_url(pg.url)[0]
    # A demo that was killed (its pid is gone) left its database behind, nobody connected;
    # another demo's database is in use right now.
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    stale = f"lagd_demo_{dead_pid}_{uuid.uuid4().hex[:6]}"
    busy = f"lagd_demo_{dead_pid}_{uuid.uuid4().hex[:6]}"
    for name in (stale, busy):
        conn = psycopg2.connect(admin)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
    parts = urlsplit(admin)
    user = psycopg2.connect(urlunsplit((parts.scheme, parts.netloc, f"/{busy}", parts.query, "")))
    first = second = ""
    try:
        first, _ = asyncio.run(demo._fresh_database(pg.url))
        second, url = asyncio.run(demo._fresh_database(pg.url))
        assert first != second and first.startswith(f"lagd_demo_{os.getpid()}_")
        assert url.startswith("postgresql+asyncpg://") and url.split("?")[0].endswith(f"/{second}")
        now = _databases(admin)
        assert stale not in now  # the killed demo's leftover is cleaned up
        assert busy in now and {first, second} <= set(now)  # one in use, and live runs', are kept
        with user.cursor() as cur:  # the other user's connection was never cut
            cur.execute("SELECT 1")
        services = demo.Services(database=second, server_url=pg.url)
        services.stop()
        assert second not in _databases(admin) and first in _databases(admin)
    finally:
        user.close()
        for name in (first, second, busy, stale):
            if not name:
                continue
            conn = psycopg2.connect(admin)
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.close()
