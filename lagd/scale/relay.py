"""Log-end samples a worker does not take itself: read from the store, where their sampler keeps them.

With workers, each topic is sampled by one worker: the one that owns the offsets partition the
topic's name hashes to (lagd.ingest.offsets_group.Assignment.owns), so no partition is asked
of the brokers by every worker. A worker whose groups consume a topic of another worker's
share gets its samples from the `log_end` table, which that worker writes at every flush:
every `offset-refresh` the newest stored sample of each such partition is applied as a
relayed LogEndSample (evaluated like any, neither stored nor recorded in the history again).
Samples so arrive at most a flush and a refresh later than at their sampler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from lagd.core.model import Event, LogEndSample
from lagd.runtime import logs
from lagd.runtime.backoff import Backoff, describe_error
from lagd.state.store import Store
from lagd.state.windows import State

log = logs.get(__name__)


def relayed_samples(state: State, cluster: str, stored: list[tuple[str, int, int, int]]) -> list[LogEndSample]:
    """The stored samples newer than what `state` holds, as relayed events (pure)."""
    out: list[LogEndSample] = []
    for topic, partition, offset, ts in stored:
        _, times = state.log_end_samples(cluster, topic, partition)
        if not times or ts > times[-1]:
            out.append(LogEndSample(cluster, topic, partition, offset, ts, relayed=True))
    return out


async def relay_log_ends(
    store: Store,
    state: State,
    cluster: str,
    mine: Callable[[str], bool],
    events: asyncio.Queue[list[Event]],
    stop: asyncio.Event,
    every_s: float,
) -> None:
    """Until `stop`: every `every_s`, queue the stored samples of the topics this worker's groups
    consume but another worker samples (`mine` says which topics are this worker's)."""
    backoff = Backoff()
    while not stop.is_set():
        wait = every_s
        wanted = {t for t in state.consumed_topics(cluster) if not mine(t)}
        try:
            batch = relayed_samples(state, cluster, await store.latest_log_ends(cluster, wanted))
        except Exception as exc:
            delay, log_now = backoff.failed()
            wait = max(wait, delay)
            if log_now:
                log.warning(
                    "cannot read other workers' log-end samples; lag of their topics is not updated",
                    cluster=cluster,
                    error=describe_error(exc),
                    hint="check that Postgres is up; lagd retries",
                )
        else:
            backoff.succeeded()
            if batch:
                await events.put(list(batch))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
