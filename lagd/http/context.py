"""What every HTTP handler shares: the context it reads (HttpContext, under CTX), the daemon's
live status (Health) and Burrow's answer envelope.

A module of its own so the application (app.py) and its route modules (burrow_v3, lagd_api,
metrics, page, routing) both import it, never each other.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import Settings
from lagd.core.model import IngestCounters
from lagd.evaluate import Evaluator
from lagd.evaluate.snapshot import Snapshots
from lagd.ingest.mirror_flows import MirrorFlows
from lagd.ingest.probe import Probes
from lagd.ingest.share_groups import ShareGroups
from lagd.runtime.clock import Clock
from lagd.runtime.turns import Turns
from lagd.scale.ownership import OwnerMap
from lagd.state.windows import State

HOST = socket.gethostname()
# The bounds of the API's numbers (path and query parameters), which its OpenAPI document states.
MAX_MS = 2**53 - 1  # a time in ms: the largest integer a JSON number holds exactly
MAX_INT32 = 2**31 - 1  # a partition


class ProgressLike(Protocol):
    """A reader's catch-up progress (lagd.ingest.progress.ReaderProgress fits)."""

    @property
    def caught_up(self) -> bool: ...
    @property
    def fraction(self) -> float: ...


class PersisterLike(Protocol):
    """The write-behind store's status (lagd.state.persister.PersisterStatus fits)."""

    pending: int
    healthy: bool
    write_seconds_last: float
    dropped_history: int


class PublisherLike(Protocol):
    """The MQTT outbox publisher's status."""

    connected: bool
    pending: int
    published_total: int


@dataclass
class Health:
    """Live status of the daemon's parts, read by /metrics (duck-typed, never copied)."""

    counters: Mapping[str, IngestCounters] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)
    persister: Any = None
    publisher: Any = None
    evaluation_seconds_last: float = 0.0
    metrics_partitions_omitted: int = 0  # group-partitions the last /metrics page left out (detail auto)
    sights: Mapping[str, Any] = field(default_factory=dict)  # cluster -> ClusterSight (degraded when blind)
    sinks: Mapping[str, Any] = field(default_factory=dict)  # sink name -> lagd.notify.delivery.SinkStatus
    loop_lag: Any = None  # lagd.runtime.loop_lag.LoopLag of the daemon's event loop
    watch: Any = None  # lagd.notify.watch.VerdictWatch (pass_seconds)
    # Workers (lagd.scale): (cluster, topic) -> is this worker the one that reports the topic's
    # log-end offsets in /metrics (so a Prometheus scraping every worker sums without duplicates)
    reports_topic: Callable[[str, str], bool] | None = None


@dataclass
class HttpContext:
    """Everything a handler may read; handlers hold no other state."""

    settings: Settings
    state: State
    evaluator: Evaluator
    now_ms: Clock  # the daemon's one clock (lagd.runtime.clock)
    ready: Callable[[], bool]
    health: Health
    engine: AsyncEngine | None = None
    on_delete: Callable[..., Any] | None = None
    owners: OwnerMap | None = None  # workers (lagd.scale): who owns each group; None: this instance holds all
    # the verdict watch's snapshot of every group it judged, read by the pages that list every
    # group; None (no watch): those pages judge every group themselves
    snapshots: Snapshots | None = None
    # requests first (lagd.runtime.turns): the server reports each request; background work, and the
    # long answers rendered in slices, wait for those waiting
    turns: Turns = field(default_factory=Turns)
    # share groups as last polled (lagd.ingest.share_groups): shown, not judged
    share_groups: ShareGroups = field(default_factory=ShareGroups)
    # MirrorMaker 2 flows as last read from their heartbeats and checkpoints (lagd.ingest.mirror_flows)
    mirror_flows: MirrorFlows = field(default_factory=MirrorFlows)
    probes: Probes = field(default_factory=Probes)  # the end-to-end probe's broker verdicts (lagd.ingest.probe)


CTX: web.AppKey[HttpContext] = web.AppKey("lagd_ctx", HttpContext)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def envelope(request: web.Request, status: int, error: bool, message: str, payload: Mapping[str, Any]) -> web.Response:
    """Burrow's envelope: error, message, payload fields in order, then request."""
    body: dict[str, Any] = {"error": error, "message": message}
    body.update(payload)
    body["request"] = {"url": request.path, "host": HOST}
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json")
