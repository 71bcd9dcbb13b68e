"""`lagd demo`: lagd judging real consumer groups on this machine, within a minute.

Starts what lagd talks to (an embedded Tansu broker; the local PostgreSQL or a private
one; the local Mosquitto or a private one, else an embedded amqtt), runs the real daemon in this process with
config/demo.toml, and drives groups in every state through the simulator. A live table
reads lagd's own HTTP API, as a dashboard would. Ctrl-C (or --duration) stops everything
and removes every process and temporary directory the demo started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import aiomqtt

from lagd.core.config import ConfigError, Settings, parse
from lagd.embedded.services import (
    Postgres,
    Process,
    ServiceError,
    free_port,
    port_open,
    start_amqtt,
    start_private_postgres,
    start_tansu,
    system_postgres,
)
from lagd.runtime import logs
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec

log = logs.get(__name__)

CLUSTER = "demo"
DATABASE = "lagd_demo"  # prefix: each run creates lagd_demo_<pid>_<random> and drops it at exit
REFRESH_S = 2.0

# What each simulated group is meant to show, in table order.
EXPECTED: dict[str, tuple[str, str]] = {
    "billing": ("healthy", "OK"),
    "dashboards": ("bursty producer", "OK"),
    "search": ("lagging", "WARN"),
    "fraud": ("stalled", "ERR/STALL"),
    "archive": ("stopped", "ERR/STOP"),
    "replay": ("rewinding", "ERR/REWIND"),
    "reports": ("recovering", "WARN, then OK"),
}


def demo_scenario(start_ms: int) -> Scenario:
    """Seven groups, one per state; times are seconds after the simulator starts.

    lagd's rules with the demo's time knobs (config/demo.toml): windows hold the last 10
    commits, one a second; a trend is judged from 8 s of history; STOP after 10 s of
    silence, STALL after 5 s of one offset. The stalled group goes bad at 10 s and reads ERR
    (STALL) about 5 s later, the stopped one about 10 s later (STOP); the rewinding group is
    a crash loop from 30 s (back to one checkpoint every 10 s, the window's length, so the
    offset it regains before the next rewind is never in the same window as the rewind:
    REWIND 9 s in 10); the lagging group handles a fifth of its input: WARN once its trend is
    judged, and it stays WARN; the bursty topic gets 150-260 records per partition every 15 s,
    which its consumer drains in 5 s: a lag spike a threshold alert fires on, and lagd
    rightly calls OK; the recovering group falls behind (WARN) and catches up from 50 s (OK).
    """
    return Scenario(
        topics=(
            TopicSpec("orders", 4, rate=5.0),
            TopicSpec("clicks", 4, rate=10.0, pattern="bursty", burst_every=15.0),
            TopicSpec("payments", 4, rate=3.0),
        ),
        groups=(
            GroupSpec("billing", ("orders",), "healthy"),
            GroupSpec("dashboards", ("clicks",), "draining", speed=3.0),
            GroupSpec("search", ("payments",), "lagging", speed=0.2),
            GroupSpec("fraud", ("orders",), "stalled", at=10.0),
            GroupSpec("archive", ("payments",), "stopped", at=10.0),
            GroupSpec("replay", ("orders",), "rewinding", at=30.0, rewind_by=200, every=10.0),
            GroupSpec("reports", ("payments",), "recovering", speed=0.5, at=50.0),
        ),
        tick=1.0,
        start_ms=start_ms,
    )


def default_config() -> Path:
    """config/demo.toml next to the package (a checkout), else in the working directory."""
    for base in (Path(__file__).resolve().parent.parent, Path.cwd()):
        candidate = base / "config" / "demo.toml"
        if candidate.exists():
            return candidate
    raise ConfigError("--config", "config/demo.toml not found; run from the repository or pass --config FILE")


@dataclass
class Services:
    """Everything the demo started, so it can all be stopped (in reverse order)."""

    kafka: Process | None = None
    postgres: Postgres | None = None
    mqtt: Process | None = None
    mqtt_address: tuple[str, int] = ("127.0.0.1", 1883)
    database_url: str = ""
    # this run's own database on a shared server (dropped at exit); "" with a private server
    database: str = ""
    server_url: str = ""
    # the demo's retained MQTT messages on a shared broker (an MQTT filter, cleared at exit); "" with amqtt
    retained: str = ""
    notes: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.database and self.server_url:
            with contextlib.suppress(Exception):
                asyncio.run(_drop_database(self.server_url, self.database))
            self.database = ""
        if self.retained:
            with contextlib.suppress(Exception):
                asyncio.run(clear_retained(*self.mqtt_address, self.retained))
            self.retained = ""
        for name in ("mqtt", "kafka"):
            proc = getattr(self, name)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop()
                setattr(self, name, None)
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
            self.postgres = None


async def retained_topics(host: str, port: int, topics: str, settle_s: float = 0.5) -> set[str]:
    """The topics under `topics` (an MQTT filter) holding a retained message: the broker sends
    them right after the subscription."""
    found: set[str] = set()
    async with aiomqtt.Client(host, port, timeout=5) as client:
        await client.subscribe(topics)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(settle_s):
                async for message in client.messages:
                    if message.retain and message.payload:
                        found.add(str(message.topic))
    return found


async def clear_retained(host: str, port: int, topics: str) -> int:
    """Clear the retained messages under `topics` on a shared broker: the demo's group statuses
    would outlive the database it drops. (A second demo running at once with the same prefix
    loses its retained statuses too, until each group's next change.)"""
    found = await retained_topics(host, port, topics)
    async with aiomqtt.Client(host, port, timeout=5) as client:
        for topic in sorted(found):
            await client.publish(topic, b"", qos=1, retain=True)
    return len(found)


def _admin_url(server_url: str) -> tuple[str, Any]:
    parts = urlsplit(server_url)
    # keep the query: a server reached by its socket has it (`?host=/tmp/...`)
    return urlunsplit(("postgresql", parts.netloc, "/postgres", parts.query, "")), parts


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _fresh_database(server_url: str) -> tuple[str, str]:
    """Create a database of this run's own, `lagd_demo_<pid>_<random>`; return (name, asyncpg URL).

    Never touches a database another process uses: earlier demos' databases are dropped only
    when the demo that made them is gone and nothing is connected to them (a demo killed
    before it could clean up).
    """
    import asyncpg

    admin, parts = _admin_url(server_url)
    name = f"{DATABASE}_{os.getpid()}_{secrets.token_hex(3)}"
    conn = await asyncpg.connect(admin, timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT d.datname, (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = d.datname) AS users "
            "FROM pg_database d WHERE d.datname LIKE $1",
            f"{DATABASE}\\_%",
        )
        for row in rows:
            m = re.fullmatch(rf"{DATABASE}_(\d+)_[0-9a-f]+", row["datname"])
            if m and row["users"] == 0 and not _pid_alive(int(m.group(1))):
                with contextlib.suppress(asyncpg.PostgresError):  # someone connected meanwhile: keep it
                    await conn.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name, urlunsplit(("postgresql+asyncpg", parts.netloc, f"/{name}", parts.query, ""))


async def _drop_database(server_url: str, name: str) -> None:
    """Drop this run's own database (lagd has stopped; nobody else knows its name)."""
    import asyncpg

    admin, _ = _admin_url(server_url)
    conn = await asyncpg.connect(admin, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def start_services(out: TextIO) -> Services:
    """Start (or find) Kafka, PostgreSQL and MQTT. On failure, stops what did start."""
    s = Services()
    try:
        print("starting the Tansu broker (Kafka protocol) ...", file=out, flush=True)
        s.kafka = start_tansu()
        pg = system_postgres()
        if pg is None:
            print("no PostgreSQL on 127.0.0.1:5432: starting a private one ...", file=out, flush=True)
            pg = start_private_postgres()
            s.postgres = pg
            s.notes.append(
                f"PostgreSQL: a private server on 127.0.0.1:{pg.proc.port if pg.proc else '?'} (removed on exit)"
            )
        name, s.database_url = asyncio.run(_fresh_database(pg.url))
        if s.postgres is None:
            s.database, s.server_url = name, pg.url
            s.notes.append(f"PostgreSQL: the local server, database {name} (this run's own, dropped on exit)")
        if port_open("127.0.0.1", 1883):
            s.notes.append("MQTT: the local broker on 127.0.0.1:1883")
        else:
            print("no MQTT broker on 127.0.0.1:1883: starting amqtt ...", file=out, flush=True)
            s.mqtt = start_amqtt()
            s.mqtt_address = ("127.0.0.1", s.mqtt.port)
            s.notes.append(f"MQTT: embedded amqtt on {s.mqtt.address}")
    except BaseException:
        s.stop()
        raise
    return s


def demo_settings(path: Path, services: Services) -> Settings:
    """config/demo.toml with the addresses of the services filled in."""
    with path.open("rb") as f:
        raw: dict[str, Any] = tomllib.load(f)
    assert services.kafka is not None
    clusters = raw.setdefault("clusters", {})
    cluster = clusters.setdefault(CLUSTER, {})
    cluster["bootstrap-servers"] = [services.kafka.address]
    raw.setdefault("storage", {})["database-url"] = services.database_url
    host, port = services.mqtt_address
    raw.setdefault("notify", {})["mqtt-url"] = f"mqtt://{host}:{port}"
    http = raw.setdefault("http", {})
    listen = str(http.get("listen", "127.0.0.1:8000"))
    lhost, _, lport = listen.rpartition(":")
    if port_open(lhost or "127.0.0.1", int(lport)):
        http["listen"] = f"{lhost or '127.0.0.1'}:{free_port()}"
        services.notes.append(f"HTTP: port {lport} is taken, so lagd listens on {http['listen']}")
    return parse(raw, env={})


def base_url(settings: Settings) -> str:
    host, _, port = settings.http.listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def urls(settings: Settings, services: Services) -> list[str]:
    base = base_url(settings)
    host, port = services.mqtt_address
    prefix = settings.notify.topic_prefix
    sub = f"mosquitto_sub -h {host} -p {port} -t '{prefix}/{CLUSTER}/#' -v"
    return [
        f"lagd: {base}/",
        f"  status page      {base}/",
        f"  Burrow v3 API    {base}/v3/kafka  (groups: {base}/v3/kafka/{CLUSTER}/consumer)",
        f"  Prometheus       {base}/metrics",
        f"  OpenAPI          {base}/lagd/v1/openapi.json",
        f"  MQTT incidents   topic {prefix}/{CLUSTER}/#  ({sub})",
        *(f"  {note}" for note in services.notes),
    ]


# --- the live view, read over HTTP as any dashboard would ------------------------------


@dataclass
class Row:
    group: str
    status: str = "-"
    detail: str = ""
    lag: int | None = None
    seconds: float | None = None


_SECONDS = re.compile(r"^lagd_consumer_lag_seconds\{([^}]*)\}\s+([0-9.eE+-]+|NaN)", re.M)
_GROUP = re.compile(r'group="([^"]*)"')


def lag_seconds_by_group(metrics: str) -> dict[str, float]:
    """The highest `lagd_consumer_lag_seconds` per group in a Prometheus text page."""
    found: dict[str, float] = {}
    for labels, value in _SECONDS.findall(metrics):
        g = _GROUP.search(labels)
        if g is None:
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        if v == v:  # not NaN
            found[g.group(1)] = max(v, found.get(g.group(1), 0.0))
    return found


async def read_rows(session: Any, base: str, groups: list[str]) -> list[Row]:
    """Each group's verdict from /v3 (Burrow's shape) and lag in seconds from /metrics."""
    rows = []
    seconds: dict[str, float] = {}
    with contextlib.suppress(Exception):
        async with session.get(f"{base}/metrics") as resp:
            if resp.status == 200:
                seconds = lag_seconds_by_group(await resp.text())
    for g in groups:
        row = Row(g)
        try:
            async with session.get(f"{base}/v3/kafka/{CLUSTER}/consumer/{g}/lag") as resp:
                body = await resp.json(content_type=None)
            st = body.get("status") or {}
            row.status = str(st.get("status", "-"))
            row.lag = st.get("totallag")
            bad = sorted({str(p.get("status")) for p in st.get("partitions", []) if p.get("status") != "OK"})
            row.detail = ",".join(bad)
        except aiohttp.ClientConnectionError:  # lagd's HTTP server not up yet
            row.status = "-"
            row.detail = "starting"
        except Exception as exc:  # an answer the table cannot read: say which
            row.status = "-"
            row.detail = exc.__class__.__name__
        row.seconds = seconds.get(g)
        rows.append(row)
    return rows


_COLOURS = {"OK": "\x1b[32m", "WARN": "\x1b[33m", "ERR": "\x1b[31m", "STOP": "\x1b[31m", "NOTFOUND": "\x1b[90m"}


def render(rows: list[Row], elapsed: float, intervals: int, colour: bool) -> list[str]:
    """The table's lines: a warm-up bar until windows can be full, then group, status, lags."""
    lines = []
    filled = min(intervals, int(elapsed))
    if filled < intervals:
        bar = "#" * filled + "." * (intervals - filled)
        lines.append(f"warming up: windows [{bar}] {filled}/{intervals} commits (verdicts settle once full)")
    else:
        lines.append(f"simulated for {elapsed:.0f} s; refreshed every {REFRESH_S:.0f} s; Ctrl-C stops")
    lines.append(f"{'GROUP':<12} {'SIMULATED':<16} {'STATUS':<8} {'PARTITIONS':<14} {'LAG':>8} {'LAG (s)':>8}")
    for r in rows:
        meant = EXPECTED.get(r.group, ("", ""))[0]
        status = f"{r.status:<8}"
        if colour and r.status in _COLOURS:
            status = f"{_COLOURS[r.status]}{status}\x1b[0m"
        lag = "-" if r.lag is None else str(r.lag)
        secs = "-" if r.seconds is None else f"{r.seconds:.1f}"
        lines.append(f"{r.group:<12} {meant:<16} {status} {r.detail[:14]:<14} {lag:>8} {secs:>8}")
    return lines


async def show(
    base: str,
    groups: list[str],
    started: float,
    intervals: int,
    stop: asyncio.Event,
    table: bool,
    out: TextIO,
    header: list[str] | None = None,
) -> None:
    """Redraw the table every REFRESH_S (or, without a table, print each status change)."""
    tty = table and out.isatty()
    seen: dict[str, str] = {}
    timeout = aiohttp.ClientTimeout(total=REFRESH_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            rows = await read_rows(session, base, groups)
            elapsed = time.monotonic() - started
            if table:
                lines = render(rows, elapsed, intervals, tty)
                if tty:  # the URLs stay on screen above the table
                    out.write("\x1b[H\x1b[J" + "\n".join([*(header or []), "", *lines]) + "\n")
                else:
                    out.write("\n".join(lines) + "\n\n")
            else:
                for r in rows:
                    shown = f"{r.status} {r.detail}".strip()
                    if r.status != "-" and seen.get(r.group) != shown:
                        seen[r.group] = shown
                        out.write(f"[{elapsed:5.1f}s] {r.group}: {shown} (lag {r.lag})\n")
            out.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH_S)


async def simulate(bootstrap: str, scenario: Scenario, stop: asyncio.Event, ready: asyncio.Event) -> None:
    """Drive the scenario on the broker in step with the wall clock (commit times stay current)."""
    from lagd.sim.driver import Driver

    driver = Driver(bootstrap, scenario, mode="topic")
    await driver.start()
    ready.set()
    t0 = time.monotonic() - (time.time() * 1000 - scenario.start_ms) / 1000
    try:
        await driver.advance(0.0)
        while not stop.is_set():
            now = time.monotonic() - t0
            t = float(int(now / scenario.tick) * scenario.tick)
            if t > driver.t:
                await driver.advance(t)
            wait = max(0.0, driver.t + scenario.tick - (time.monotonic() - t0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
    finally:
        await driver.close()


async def run_demo(settings: Settings, services: Services, duration: float, table: bool, out: TextIO) -> int:
    """The daemon, the simulator and the table under one loop, until stop, --duration or failure."""
    from lagd.daemon import run as run_daemon

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    assert services.kafka is not None
    scenario = demo_scenario(int(time.time() * 1000))
    sim_ready = asyncio.Event()
    sim = asyncio.create_task(simulate(services.kafka.address, scenario, stop, sim_ready), name="simulator")
    await asyncio.wait({sim, asyncio.create_task(sim_ready.wait())}, return_when=asyncio.FIRST_COMPLETED)
    if sim.done():
        return _failed("simulator", sim, out)
    daemon = asyncio.create_task(run_daemon(settings, migrate=True, stop=stop), name="daemon")
    started = time.monotonic()
    header = urls(settings, services)
    for line in header:
        print(line, file=out)
    out.flush()
    groups = [g.name for g in scenario.groups]
    view = asyncio.create_task(
        show(base_url(settings), groups, started, settings.storage.intervals, stop, table, out, header), name="table"
    )
    tasks = {sim, daemon, view}
    timer = asyncio.create_task(asyncio.sleep(duration)) if duration > 0 else None
    waiting = tasks | ({timer} if timer else set()) | {asyncio.create_task(stop.wait())}
    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    for task in tasks & done:
        if task.exception() is not None or task is daemon:
            status = _failed(task.get_name(), task, out)
    stop.set()
    try:
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
    except TimeoutError:
        print(
            "lagd demo: lagd or the simulator did not stop within 15 s; stopping the services anyway", file=sys.stderr
        )
        return 1
    for task, res in zip(tasks, results, strict=False):
        if isinstance(res, BaseException) and not isinstance(res, asyncio.CancelledError) and task not in done:
            print(f"lagd demo: {task.get_name()} failed while stopping: {res!r}", file=sys.stderr)
    if timer is not None:
        timer.cancel()
    return status


def _failed(name: str, task: asyncio.Task[Any], out: TextIO) -> int:
    exc = task.exception()
    if exc is None:
        print(f"lagd demo: the {name} stopped early (exit status {task.result()!r})", file=sys.stderr)
    else:
        print(f"lagd demo: the {name} failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    return 1


# Ctrl-C, `kill` and a closed terminal all stop the demo the same way: everything it
# started is stopped and its directories removed.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(args: Any) -> int:
    """Entry point of `lagd demo`; returns the exit status."""
    out = sys.stdout
    for sig in _STOP_SIGNALS:  # while services start, before the event loop takes these over
        signal.signal(sig, signal.default_int_handler)
    try:
        path = Path(args.config) if getattr(args, "config", None) else default_config()
        with path.open("rb") as f:
            level = tomllib.load(f).get("log", {})
    except (ConfigError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"lagd demo: {exc}", file=sys.stderr)
        return 2
    logs.configure(level.get("level", "warning"), level.get("format", "console"))
    services = Services()
    try:
        services = start_services(out)
        settings = demo_settings(path, services)
        if services.mqtt is None:  # the local broker: clear what the demo leaves retained there
            services.retained = f"{settings.notify.topic_prefix}/{CLUSTER}/#"
        return asyncio.run(
            run_demo(
                settings, services, float(getattr(args, "duration", 0.0) or 0.0), getattr(args, "table", True), out
            )
        )
    except ConfigError as exc:
        print(f"lagd demo: {exc}", file=sys.stderr)
        return 2
    except ServiceError as exc:
        print(f"lagd demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            print(
                "stopping: what the demo started, its database and its retained MQTT messages ...", file=out, flush=True
            )
        services.stop()
