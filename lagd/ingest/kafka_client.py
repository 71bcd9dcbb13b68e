"""aiokafka clients built from a cluster's settings (their keywords: lagd.ingest.kafka_options),
started, reconnected and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters
from lagd.ingest.diagnose import diagnose
from lagd.ingest.kafka_options import client_options
from lagd.ingest.progress import ReaderProgress
from lagd.runtime import logs
from lagd.runtime.backoff import Backoff, describe_error

log = logs.get(__name__)


async def start_admin(cluster: ClusterSettings) -> Any:
    """A started AIOKafkaAdminClient; the caller closes it."""
    admin = AIOKafkaAdminClient(**client_options(cluster))
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def start_client(cluster: ClusterSettings, metadata_max_age_s: float | None = None) -> Any:
    """A bootstrapped low-level AIOKafkaClient (metadata and raw requests); the caller closes it."""
    opts = client_options(cluster)
    if metadata_max_age_s is not None:
        opts["metadata_max_age_ms"] = int(metadata_max_age_s * 1000)
    client = AIOKafkaClient(**opts)
    try:
        await client.bootstrap()
    except BaseException:
        await client.close()
        raise
    return client


async def start_consumer(cluster: ClusterSettings, **extra: Any) -> Any:
    """A started AIOKafkaConsumer without a group (lagd never joins or commits).

    Its default reset is "earliest": every reader positions its partitions itself (seek,
    seek_to_beginning), and aiokafka resets a newly assigned partition by the default strategy
    while a seek_to_beginning's reset may still be pending; an in-flight "latest" answer is then
    applied to the partition awaiting "earliest", and what was written meanwhile is skipped
    (reproduced on real Kafka: MM2 checkpoints topics created at random moments, 14 of 75 never
    read; 0 of 20 with "earliest")."""
    options = {"auto_offset_reset": "earliest", **extra}
    consumer = AIOKafkaConsumer(**client_options(cluster), group_id=None, enable_auto_commit=False, **options)
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def close_quietly(close: Callable[[], Awaitable[Any]]) -> None:
    """Close a client after a failure without letting its teardown end the reader.

    aiokafka's consumer can raise CancelledError from its own fetch task while stopping after
    a broker outage; only a cancellation of the calling task itself is passed on.
    """
    try:
        await close()
    except asyncio.CancelledError:
        if cancelled_here():
            raise
    except Exception as exc:
        log.debug("closing a Kafka client failed", error=f"{exc.__class__.__name__}: {exc}")


def cancelled_here() -> bool:
    """True when the running task itself is being cancelled (not a CancelledError leaking out of
    a client's internal task, which readers treat as one more failure)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def reconnecting(
    session: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    counters: IngestCounters,
    *,
    cluster: ClusterSettings,
    what: str,
    counter: str,
    hint: str,
    progress: ReaderProgress | None = None,
    backoff: Backoff | None = None,
) -> None:
    """Run `session` until `stop` is set; after a failure, count it and retry with capped,
    jittered backoff (lagd.runtime.backoff), reset by a session that ends cleanly or ran a while. The
    first failure of an outage is logged at once, then one line every 30 s or so with the
    attempt count. Every reader of a cluster (offsets topic, admin polling, log-end sampler)
    survives broker outages this way.

    A failure lagd can explain (lagd.ingest.diagnose: a refused password, an untrusted
    certificate, nothing listening) is logged with the listener and what to fix instead of
    `hint`, once for all the cluster's readers that meet it, and kept in `progress` for the
    cluster's status. One that is a setting to change (a refused password, an untrusted
    certificate: Problem.settings) is one warning for as long as it lasts, the retries (still
    backing off: the cluster's users or certificates may be mended) at debug; once a reader
    gets in, it would be told again. `backoff`: the policy (tests shorten it)."""
    backoff = backoff or Backoff()
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        started = loop.time()
        try:
            await session()
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and cancelled_here():
                raise
            if loop.time() - started >= backoff.cap:
                backoff.succeeded()  # it worked for a while: this is a new outage
                counters.answered()
            counters.count_failure(f"{counter}_{exc.__class__.__name__}")
            problem = await diagnose(cluster, exc) if not isinstance(exc, asyncio.CancelledError) else None
            delay, log_now = backoff.failed()
            if progress is not None:
                progress.problem = str(problem) if problem else describe_error(exc)
            fields: dict[str, Any] = {"error": describe_error(exc), "hint": hint}
            if problem is not None:
                if problem.settings:
                    log_now = counters.tell(str(problem), loop.time(), None)
                else:
                    log_now = log_now and counters.tell(str(problem), loop.time(), backoff.log_every)
                fields = {"listener": problem.listener, "error": problem.error, "hint": problem.fix}
            (log.warning if log_now else log.debug)(
                f"{what} failed; reconnecting",
                cluster=cluster.name,
                **fields,
                attempt=backoff.attempts,
                waiting_s=backoff.waiting_s,
                retry_in_s=round(delay, 1),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        else:
            backoff.succeeded()
            counters.answered()
