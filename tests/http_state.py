"""A known State for the HTTP tests: one group in each status, built from real events.

intervals = 3; samples at 10 s, 20 s, 30 s come just before the commits; the clock reads 30 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from lagd.core.config import ClusterSettings, HttpSettings, Secret, Settings
from lagd.core.model import Commit, GroupMembers, LogEndSample, PartitionOwner
from lagd.evaluate import Evaluator
from lagd.http.app import bound_port, start_http
from lagd.http.context import Health, HttpContext
from lagd.ingest.share_groups import ShareGroup, ShareGroups, SharePartition
from lagd.state.windows import State

CLUSTER = "prod"
NOW = 30_000
TOKEN = "s3cret-token"

# (group, topic, partition, committed offsets at 10/20/30 s, or at 1/2/3 s for g-stop)
COMMITS: list[tuple[str, str, int, tuple[int, int, int]]] = [
    ("g-ok", "orders", 0, (100, 200, 300)),
    ("g-warn", "orders", 0, (100, 200, 300)),
    ("g-warn", "orders", 1, (500, 1000, 1500)),
    ("g-stall", "events", 0, (50, 50, 50)),
    ("g-rewind", "events", 0, (500, 300, 400)),
    ("g-stop", "events", 1, (100, 200, 300)),
]
GROUPS = sorted({c[0] for c in COMMITS})
LOG_END: dict[tuple[str, int], tuple[int, int, int]] = {
    ("orders", 0): (100, 200, 300),
    ("orders", 1): (1000, 2000, 3000),
    ("events", 0): (1000, 2000, 3000),
    ("events", 1): (5000, 6000, 7000),
}


def build_state() -> State:
    s = State(intervals=3)
    order = 0
    for i in range(3):
        t = 10_000 * (i + 1)
        for (topic, partition), ends in LOG_END.items():
            s.apply(LogEndSample(CLUSTER, topic, partition, ends[i], t - 1))
        for group, topic, partition, offsets in COMMITS:
            ts = 1_000 * (i + 1) if group == "g-stop" else t
            order += 1
            s.apply(Commit(CLUSTER, group, topic, partition, offsets[i], order, ts, ts + 5))
    s.apply(
        GroupMembers(CLUSTER, "g-warn", 1000, (PartitionOwner("orders", 1, "/10.0.0.7", "worker-7", "m-1"),), "Stable")
    )
    return s


def build_settings(**http: Any) -> Settings:
    cluster = ClusterSettings(
        name=CLUSTER,
        bootstrap_servers=["kafka1:9092"],
        security_protocol="SASL_SSL",
        sasl_username="lagd",
        sasl_password=Secret("hunter2"),
    )
    defaults: dict[str, Any] = {"listen": "127.0.0.1:0", "auth_token": Secret(TOKEN)}
    defaults.update(http)
    return Settings(clusters={CLUSTER: cluster}, http=HttpSettings(**defaults))


def build_share_groups() -> ShareGroups:
    """One share group as Kafka 4.4 reports one: a share-partition initialised, one not yet."""
    view = ShareGroups(supported={CLUSTER: True})
    partitions = (SharePartition("orders", 0, 40, 12, 0), SharePartition("orders", 1, None, None, None))
    view.groups[CLUSTER] = {"s-share": ShareGroup("s-share", "Stable", partitions, NOW)}
    return view


def build_context(settings: Settings | None = None, *, ready: bool = True, **kw: Any) -> HttpContext:
    state = build_state()
    kw.setdefault("share_groups", build_share_groups())
    return HttpContext(
        settings=settings or build_settings(),
        state=state,
        evaluator=Evaluator(state),
        now_ms=lambda: NOW,
        ready=lambda: ready,
        health=Health(),
        **kw,
    )


@asynccontextmanager
async def serve(ctx: HttpContext) -> AsyncIterator[str]:
    """A real server on a free port; yields its base URL."""
    runner: web.AppRunner = await start_http(ctx)
    try:
        yield f"http://127.0.0.1:{bound_port(runner)}"
    finally:
        await runner.cleanup()
