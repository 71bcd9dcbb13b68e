"""The workers of one `lagd run` join the consumer group together.

Apache Kafka gives a new group's first member everything once `group.initial.rebalance.delay.ms`
(3 s by default) has passed without another joining. Workers started at once by the supervisor
(lagd.scale.processes) still reach the group seconds apart when they compete for the cores
while they start: measured on a busy 2-core machine (bench_workers --broker kafka), the first
was assigned all 50 offsets partitions, read three quarters of the records alone, then let
half of its groups go at the second's join, which restored them from Postgres: two workers
cost 1.28-1.59x the CPU per record of one, and the first kept the peak RSS of a single process.

So each worker, before it joins, says it is ready (a file named by its pid in a directory the
supervisor made, `LAGD_JOIN_BARRIER=<dir>:<workers>`) and waits until every worker has, or
`JOIN_WAIT_S` has passed. A worker started again after a crash finds the others' files and
joins at once. Instances on other machines (no supervisor, no variable) join as they start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from lagd.runtime import logs

ENV = "LAGD_JOIN_BARRIER"
JOIN_WAIT_S = 20.0  # a worker that cannot start at all holds the others back no longer than this
POLL_S = 0.05

log = logs.get("lagd.workers")
_passed: set[str] = set()  # barriers this process has passed (a session that reconnects does not wait again)


def value(directory: str, workers: int) -> str:
    """The variable's value the supervisor gives each worker."""
    return f"{directory}:{workers}"


def parse(text: str) -> tuple[Path, int] | None:
    """(directory, workers) from the variable's value; None when it is unset or malformed."""
    directory, _, count = text.rpartition(":")
    if not directory or not count.isdigit():
        return None
    return Path(directory), int(count)


async def arrive(text: str | None, stop: asyncio.Event, timeout: float = JOIN_WAIT_S) -> bool:
    """Say this process is ready to join and wait for the other workers (see the module's
    docstring). True when all were there (or there is no barrier), False after `timeout` or `stop`."""
    barrier = parse(text or "")
    if barrier is None or text in _passed:
        return True
    directory, workers = barrier
    with contextlib.suppress(OSError):
        (directory / str(os.getpid())).touch()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            ready = sum(1 for _ in directory.iterdir())
        except OSError:
            ready = workers  # the supervisor's directory is gone: nothing to wait for
        if ready >= workers:
            _passed.add(text or "")
            log.info(
                "every worker ready: joining the consumer group",
                workers=workers,
                waited_s=round(timeout - (deadline - loop.time()), 2),
            )
            return True
        if loop.time() >= deadline or stop.is_set():
            log.warning(
                "joining the consumer group before every worker is ready",
                ready=ready,
                workers=workers,
                waited_s=timeout,
                hint="a worker is slow to start or failing: its own log lines say why; the group rebalances when it joins",
            )
            _passed.add(text or "")
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_S)
