"""`workers = N`: one `lagd run` starts N worker processes on this machine and keeps them running.

Each worker is a whole lagd (`lagd run` with the same settings file) that joins the consumer
group `scale.group-id` (default "lagd"); worker i listens on http.listen's port + i. Worker 0
migrates the database; the others wait for it like for any Postgres that is not there yet.
This process only supervises: it passes SIGTERM, SIGINT and SIGHUP on, starts a worker again
when one dies (its groups move to the others meanwhile), tells systemd it is ready and pets
its watchdog. A Python process uses one core; N processes use N.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass

from lagd.core.config import Settings
from lagd.runtime import logs, sdnotify
from lagd.scale import barrier

log = logs.get("lagd.workers")

RESTART_MIN_S = 1.0
RESTART_MAX_S = 30.0
STOP_WAIT_S = 25.0  # within the unit's TimeoutStopSec (30 s): each worker flushes and leaves the group


@dataclass
class _Worker:
    index: int
    listen: str
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0


def worker_listen(listen: str, index: int) -> str:
    """http.listen of worker `index`: the same host, the port plus the index."""
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + index}"


def worker_env(settings: Settings, index: int, base: dict[str, str], join: str = "") -> dict[str, str]:
    """The environment of worker `index`: the supervisor's, with the worker's own overrides
    (`join`: the barrier at which the workers wait for each other before they join the group)."""
    env = {k: v for k, v in base.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env["LAGD_HTTP_LISTEN"] = worker_listen(settings.http.listen, index)
    env["LAGD_SCALE_WORKERS"] = "1"
    env["LAGD_SCALE_GROUP_ID"] = settings.scale.group
    if join:
        env[barrier.ENV] = join
    return env


async def _start(w: _Worker, settings: Settings, config: str, migrate: bool, join: str) -> None:
    argv = [sys.executable, "-m", "lagd", "run", "--config", config]
    if not (migrate and w.index == 0):
        argv.append("--no-migrate")
    w.process = await asyncio.create_subprocess_exec(*argv, env=worker_env(settings, w.index, dict(os.environ), join))
    log.info("worker started", worker=w.index, pid=w.process.pid, listen=w.listen)


async def supervise(settings: Settings, config: str, migrate: bool = True) -> int:
    """Run `settings.scale.workers` workers until SIGTERM/SIGINT; returns the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    workers = [_Worker(i, worker_listen(settings.http.listen, i)) for i in range(settings.scale.workers)]

    def forward(sig: signal.Signals) -> None:
        for w in workers:
            if w.process is not None and w.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.process.send_signal(sig)

    asked: list[int] = []  # the signal that stopped lagd, passed on to the workers

    def on_stop(sig: signal.Signals) -> None:
        asked.append(sig)
        stop.set()
        forward(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, forward, signal.SIGHUP)
    joining = tempfile.mkdtemp(prefix="lagd-join-")
    join = barrier.value(joining, len(workers))
    for w in workers:
        await _start(w, settings, config, migrate, join)
    sdnotify.notify("READY=1")
    sdnotify.notify(f"STATUS={len(workers)} workers running")
    log.info("workers running", workers=len(workers), group_id=settings.scale.group)
    pet = asyncio.create_task(_pet_watchdog(stop))
    try:
        await asyncio.gather(*(_keep(w, settings, config, stop, join) for w in workers))
    finally:
        pet.cancel()
        shutil.rmtree(joining, ignore_errors=True)
        sdnotify.notify("STOPPING=1")
    # A worker still starting when the signal came (one started again after a crash, say) has no
    # handler for it yet and ends by the signal itself: that is the stop asked for, not a failure.
    stopped_by = {-s for s in asked}
    failed = [
        w.index
        for w in workers
        if w.process is not None and w.process.returncode not in (0, None) and w.process.returncode not in stopped_by
    ]
    log.info("workers stopped", failed=failed)
    return 1 if failed else 0


async def _keep(w: _Worker, settings: Settings, config: str, stop: asyncio.Event, join: str) -> None:
    """Wait for worker `w`; start it again while lagd runs, with a growing pause."""
    while True:
        assert w.process is not None
        waiter = asyncio.ensure_future(w.process.wait())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if stop.is_set():
            try:
                await asyncio.wait_for(waiter, STOP_WAIT_S)
            except TimeoutError:
                log.error("worker did not stop in time; killing it", worker=w.index, pid=w.process.pid)
                with contextlib.suppress(ProcessLookupError):
                    w.process.kill()
                await w.process.wait()
            return
        code = w.process.returncode
        w.restarts += 1
        delay = min(RESTART_MAX_S, RESTART_MIN_S * 2 ** min(w.restarts - 1, 5))
        log.error(
            "worker exited; starting it again",
            worker=w.index,
            code=code,
            restarts=w.restarts,
            retry_in_s=delay,
            hint="its groups move to the other workers meanwhile; the worker's own log lines above say why it stopped",
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return
        await _start(w, settings, config, migrate=False, join=join)


async def _pet_watchdog(stop: asyncio.Event) -> None:
    interval = sdnotify.watchdog_interval()
    if not interval:
        return
    while not stop.is_set():
        sdnotify.notify("WATCHDOG=1")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
