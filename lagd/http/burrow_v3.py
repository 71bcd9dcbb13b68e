"""Burrow's v3 HTTP API (shared/spec/burrow-http-api.md), answered from live state.

Field names, field order, message strings and status codes follow Burrow 1.9 so existing
dashboards and exporters work unchanged. Dicts are built in Burrow's order and serialised
without sorting.
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lagd.core.config import ClusterSettings, Settings
from lagd.core.model import GroupStatus, PartitionStatus, WindowEntry
from lagd.evaluate import GroupVerdict, PartitionVerdict
from lagd.evaluate.retention_view import RetentionNote
from lagd.http import burrow_json
from lagd.http.context import CTX, HOST, Handler, HttpContext, envelope
from lagd.runtime import compiled, logs

log = logs.get(__name__)

# A group's status as Burrow's JSON (the body of /status and /lag): lagd.http.burrow_json, compiled by
# Cython where the build could (lagd.runtime.compiled.pick; LAGD_NO_EXTENSIONS=1 runs the Python).
WRITER = compiled.pick(burrow_json)


def consumer_offset(entry: WindowEntry | None) -> dict[str, Any] | None:
    """Burrow's ConsumerOffset."""
    if entry is None:
        return None
    return {"offset": entry.offset, "timestamp": entry.timestamp, "observedAt": entry.observed, "lag": entry.lag}


def partition_status(p: PartitionVerdict, notes: dict[tuple[str, int], RetentionNote] | None = None) -> dict[str, Any]:
    """Burrow's PartitionStatus (current_lag with an underscore), and lagd's retention fields
    where `notes` has the partition's (burrow_json.retention_fields)."""
    out = {
        "topic": p.topic,
        "partition": p.partition,
        "owner": p.owner,
        "client_id": p.client_id,
        "status": p.status.value,
        "start": consumer_offset(p.start),
        "end": consumer_offset(p.end),
        "current_lag": p.current_lag,
        "complete": p.complete,
    }
    note = notes.get((p.topic, p.partition)) if notes else None
    if note is not None:
        out.update(burrow_json.retention_fields(note))
    return out


def group_status(v: GroupVerdict, only_bad: bool) -> dict[str, Any]:
    """Burrow's ConsumerGroupStatus; `/status` lists only the non-OK partitions."""
    notes = {(n.topic, n.partition): n for n in v.retention} if v.retention else None
    parts = (
        [p for p in v.partitions if p.status is not PartitionStatus.OK or burrow_json._bad(notes, p)]
        if only_bad
        else v.partitions
    )
    return {
        "cluster": v.cluster,
        "group": v.group,
        "status": v.status.value,
        "complete": v.complete,
        "partitions": [partition_status(p, notes) for p in parts],
        "partition_count": v.partition_count,
        "maxlag": partition_status(v.maxlag, notes) if v.maxlag is not None else None,
        "totallag": v.totallag,
    }


def _ctx(request: web.Request) -> HttpContext:
    return request.app[CTX]


def known_cluster(ctx: HttpContext, cluster: str) -> bool:
    """Does lagd watch the cluster, or hold groups of it?"""
    return cluster in ctx.settings.clusters or cluster in ctx.state.clusters()


def _ok(request: web.Request, message: str, **payload: Any) -> web.Response:
    return envelope(request, 200, False, message, payload)


def _not_found(request: web.Request, message: str) -> web.Response:
    return envelope(request, 404, True, message, {})


async def admin(request: web.Request) -> web.Response:
    return web.Response(text="GOOD")


async def ready(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    # a cluster lagd cannot read is named even while it starts: its brokers may never answer
    blind = sorted(name for name, sight in ctx.health.sights.items() if getattr(sight, "unreachable", False))
    if blind:
        return web.Response(status=503, text=f"DEGRADED: cannot read cluster(s) {', '.join(blind)}")
    if not ctx.ready():
        return web.Response(status=503, text="STARTING")
    return web.Response(text="READY")


async def clusters(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    names = sorted(set(ctx.settings.clusters) | set(ctx.state.clusters()))
    return _ok(request, "cluster list returned", clusters=names)


async def cluster_detail(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    name = request.match_info["cluster"]
    cs = ctx.settings.clusters.get(name)
    if cs is None:
        return _not_found(request, "cluster module not found")  # Burrow's kafka.go handleClusterDetail
    return _ok(request, "cluster module detail returned", module=cluster_module(cs))


async def topics(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster = request.match_info["cluster"]
    if not known_cluster(ctx, cluster):
        return _not_found(request, "cluster not found")
    return _ok(request, "topic list returned", topics=ctx.state.topics(cluster))


async def topic_detail(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, topic = request.match_info["cluster"], request.match_info["topic"]
    offsets = ctx.state.topic_offsets(cluster, topic)
    if offsets is None:
        return _not_found(request, "cluster or topic not found")
    return _ok(request, "topic offsets returned", offsets=offsets)


async def topic_consumers(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, topic = request.match_info["cluster"], request.match_info["topic"]
    consumers = ctx.state.topic_consumers(cluster, topic)
    if not consumers and ctx.state.topic_offsets(cluster, topic) is None:
        return _not_found(request, "cluster or topic not found")
    return _ok(request, "consumers of topic returned", consumers=consumers)


async def consumers(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster = request.match_info["cluster"]
    if not known_cluster(ctx, cluster):
        return _not_found(request, "cluster not found")
    return _ok(request, "consumer list returned", consumers=ctx.state.groups(cluster))


def _detail_topics(ctx: HttpContext, cluster: str, group: str, verdict: GroupVerdict) -> dict[str, Any]:
    """Per topic, a list indexed by partition: window (nulls first, as Burrow's ring), owner, lag."""
    state = ctx.state
    intervals = state.intervals
    lags = {(p.topic, p.partition): p.current_lag for p in verdict.partitions}
    out: dict[str, Any] = {}
    for topic, partitions in (state.group_topics(cluster, group) or {}).items():
        log_end = state.topic_offsets(cluster, topic)
        rows: list[dict[str, Any]] = []
        for partition in detail_partitions(partitions, len(log_end) if log_end is not None else 0):
            window = state.window(cluster, group, topic, partition)
            owner = state.owner(cluster, group, topic, partition)
            offsets: list[dict[str, Any] | None] = [None] * (intervals - len(window))
            offsets.extend(consumer_offset(e) for e in window)
            rows.append(
                {
                    "offsets": offsets,
                    "owner": owner.host if owner is not None else "",
                    "client_id": owner.client_id if owner is not None else "",
                    "current-lag": lags.get((topic, partition), 0),
                }
            )
        out[topic] = rows
    return out


# Empty rows the detail may pad with, so that list index = partition (Burrow's layout).
MAX_DETAIL_PADDING = 1024


def detail_partitions(committed: list[int], known: int) -> list[int]:
    """The partitions a topic's detail lists: 0 .. the topic's count (`known`, from the broker
    samples) and every committed one, padded so the list index is the partition number.

    A committed partition far beyond the rest (a hostile or stale record) is listed without
    padding up to it: padding would build a row for every number below it.
    """
    width = max(known, max(committed) + 1 if committed else 0)
    beyond = [p for p in committed if p >= known]
    if width - known - len(beyond) <= MAX_DETAIL_PADDING:
        return list(range(width))
    return list(range(known)) + sorted(beyond)


async def consumer_detail(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    verdict = ctx.evaluator.group(cluster, group, ctx.now_ms())
    if verdict.status is GroupStatus.NOTFOUND or ctx.state.group_topics(cluster, group) is None:
        return _not_found(request, "cluster or consumer not found")
    return _ok(request, "consumer detail returned", topics=_detail_topics(ctx, cluster, group, verdict))


@dataclass(slots=True)
class _Body:
    at: int
    verdict: GroupVerdict
    code: int
    body: bytes
    size: int


# What an entry costs besides its body and path: the entry, its key and the verdict it holds
# (the verdict is shared with the evaluator's cache, but may outlive it here).
_ENTRY_OVERHEAD = 512


class StatusBodies:
    """Status bodies by path, oldest first, bounded in bytes (`max_bytes`) and by age.

    A hit that is refreshed moves to the end, so the front is always the oldest: expired
    entries and, past the byte bound, the oldest live ones are dropped from there. Bodies of
    unknown groups (404) are never kept: any path can be asked for, only known groups are few.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._bodies: dict[str, _Body] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    def get(self, path: str) -> _Body | None:
        return self._bodies.get(path)

    def refresh(self, path: str, hit: _Body, now: int) -> None:
        hit.at = now
        self._bodies[path] = self._bodies.pop(path)

    def put(self, path: str, body: _Body, now: int, ttl: int) -> None:
        self.pop(path)
        self._bodies[path] = body
        self.bytes += body.size
        self.prune(now, ttl)

    def pop(self, path: str) -> None:
        old = self._bodies.pop(path, None)
        if old is not None:
            self.bytes -= old.size

    def prune(self, now: int, ttl: int) -> None:
        """Drop expired entries, then the oldest ones until within the byte bound."""
        bodies = self._bodies
        while bodies:
            path = next(iter(bodies))
            if self.bytes <= self.max_bytes and 0 <= now - bodies[path].at < ttl:
                break
            self.pop(path)


STATUS_BODIES: web.AppKey[StatusBodies] = web.AppKey("lagd_status_bodies", StatusBodies)


def _status_response(request: web.Request, only_bad: bool) -> web.Response:
    """Status bodies are cached per path for evaluator.cache-ttl: the hot path dashboards poll.

    While commits stream in, a group's version changes many times a second; judging and
    serialising it on every poll would let polling compete with ingest. An answer is at
    most cache-ttl old (the same bound the evaluator keeps for clock-driven STOP); a
    DELETE drops the group's cached bodies at once. Each path keeps its body for between
    half and all of cache-ttl (fixed per path), so groups first asked together do not all
    expire together and come back as one burst of judging. The cache is bounded (see
    StatusBodies): a flood of requests for groups that do not exist keeps nothing.
    """
    ctx = _ctx(request)
    bodies = request.app[STATUS_BODIES]
    now = ctx.now_ms()
    path = request.path
    hit = bodies.get(path)
    ttl = ctx.evaluator.cache_ttl_ms
    if hit is not None and 0 <= now - hit.at < ttl - zlib.crc32(path.encode()) % (ttl // 2 + 1):
        return web.Response(status=hit.code, body=hit.body, content_type="application/json")
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    verdict = ctx.evaluator.group(cluster, group, now)
    if hit is not None and hit.verdict is verdict:
        bodies.refresh(path, hit, now)
        return web.Response(status=hit.code, body=hit.body, content_type="application/json")
    code = 404 if verdict.status is GroupStatus.NOTFOUND else 200
    body = (
        f'{{"error": false, "message": "consumer status returned", "status": {WRITER.group_status_json(verdict, only_bad)}, '
        f'"request": {json.dumps({"url": path, "host": HOST})}}}'
    ).encode()
    if code == 200:
        bodies.put(path, _Body(now, verdict, code, body, len(body) + len(path) + _ENTRY_OVERHEAD), now, ttl)
    else:
        bodies.pop(path)
    return web.Response(status=code, body=body, content_type="application/json")


async def consumer_status(request: web.Request) -> web.Response:
    return _status_response(request, only_bad=True)


async def consumer_lag(request: web.Request) -> web.Response:
    return _status_response(request, only_bad=False)


def _deleted(request: web.Request, cluster: str, group: str) -> None:
    ctx = _ctx(request)
    ctx.evaluator.forget(cluster, group)
    prefix = f"/v3/kafka/{cluster}/consumer/{group}/"
    for path in (prefix + "lag", prefix + "status"):
        request.app[STATUS_BODIES].pop(path)
    if ctx.on_delete is not None:
        ctx.on_delete(cluster, group)


async def delete_group(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    if not ctx.state.remove_group(cluster, group):
        return _not_found(request, "cluster or consumer not found")
    _deleted(request, cluster, group)
    log.info("consumer group removed over HTTP", cluster=cluster, group=group)
    return _ok(request, "consumer group removed")


async def delete_group_topic(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group, topic = (request.match_info[k] for k in ("cluster", "group", "topic"))
    if ctx.state.group_topics(cluster, group) is None:
        return _not_found(request, "cluster or consumer not found")
    if not ctx.state.remove_group_topic(cluster, group, topic):
        return _not_found(request, "cluster or topic not found")
    _deleted(request, cluster, group)
    log.info("consumer group topic removed over HTTP", cluster=cluster, group=group, topic=topic)
    return _ok(request, "consumer group topic removed")


# The /v3/config* bodies and the cluster module take Burrow's shapes, field by field: see
# Burrow's core/internal/httpserver/config.go, kafka.go (getClientProfile, handleClusterDetail)
# and structs.go (httpResponseConfig*). lagd has no client profiles, ZooKeeper or Burrow
# module classes: each cluster's connection settings stand for its profile and consumer
# module, and "storage" and "evaluator" have one module each, "default". Burrow's durations
# are whole seconds.
_DEFAULT = "default"
_CONFIG_KINDS = ("storage", "evaluator", "cluster", "consumer", "notifier")


def _secs(value: float) -> int | float:
    """Seconds as Burrow gives them, a whole number; a fraction of a second (which Burrow's
    settings cannot hold, lagd's can) as it is, so half a second does not read as 0, off."""
    return int(value) if value == int(value) else value


def client_profile(cs: ClusterSettings) -> dict[str, Any]:
    """Burrow's httpResponseClientProfile (tls and sasl null when not used)."""
    tls = None
    if cs.security_protocol in ("SSL", "SASL_SSL"):
        tls = {
            "name": cs.name,
            "noverify": not cs.tls_check_hostname,
            "certfile": cs.tls_cert_file,
            "keyfile": cs.tls_key_file,
            "cafile": cs.tls_ca_file,
        }
    sasl = None
    if cs.security_protocol.startswith("SASL_"):
        sasl = {"name": cs.name, "handshake-first": True, "username": cs.sasl_username}
    # lagd negotiates the protocol version with the brokers: there is no configured one
    return {"name": cs.name, "client-id": cs.client_id, "kafka-version": "auto", "tls": tls, "sasl": sasl}


def cluster_module(cs: ClusterSettings) -> dict[str, Any]:
    """Burrow's httpResponseConfigModuleCluster."""
    return {
        "class-name": "kafka",
        "servers": list(cs.bootstrap_servers),
        "client-profile": client_profile(cs),
        "topic-refresh": _secs(cs.topic_refresh),
        "offset-refresh": _secs(cs.offset_refresh),
    }


def consumer_module(cs: ClusterSettings) -> dict[str, Any]:
    """Burrow's httpResponseConfigModuleConsumer: the reader of the cluster's commits."""
    return {
        "class-name": "kafka",
        "cluster": cs.name,
        "servers": list(cs.bootstrap_servers),
        "group-allowlist": cs.groups_allow,
        "zookeeper-path": "",
        "zookeeper-timeout": 0,
        "client-profile": client_profile(cs),
        "offsets-topic": cs.offsets_topic,
        "start-latest": False,
    }


def _module_detail(settings: Settings, kind: str, name: str) -> dict[str, Any] | None:
    if kind == "cluster" or kind == "consumer":
        cs = settings.clusters.get(name)
        if cs is None:
            return None
        return cluster_module(cs) if kind == "cluster" else consumer_module(cs)
    if kind == "notifier":
        sink = settings.sinks.get(name)
        if sink is None:
            return None
        # httpResponseConfigModuleNotifierNull: the fields every notifier class has. Sink URLs
        # and headers may carry credentials, so no class-specific fields are shown.
        return {
            "class-name": sink.kind,
            "group-allowlist": "",
            "interval": _secs(settings.notify.update_interval),
            "threshold": 2 if settings.notify.severity == "WARN" else 3,
            "template-open": "",
            "template-close": "",
            "extra": {},
            "send-close": True,
        }
    if name != _DEFAULT:
        return None
    if kind == "storage":
        st = settings.storage
        return {
            "class-name": "inmemory",
            "intervals": st.intervals,
            "min-distance": _secs(st.min_distance),
            "group-allowlist": "",
            "expire-group": _secs(st.expire_group),
        }
    if kind == "evaluator":
        return {"class-name": "caching", "expire-cache": _secs(settings.evaluator.cache_ttl)}
    return None


def _modules(settings: Settings, kind: str) -> list[str]:
    if kind in ("cluster", "consumer"):
        return sorted(settings.clusters)
    if kind == "notifier":
        return sorted(settings.sinks)
    return [_DEFAULT]


def _request_info(request: web.Request) -> dict[str, str]:
    return {"url": request.path, "host": HOST}


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json")


async def config_main(request: web.Request) -> web.Response:
    """Burrow's httpResponseConfigMain: `request` comes third, before the sections."""
    http = _ctx(request).settings.http
    body = {
        "error": False,
        "message": "main config returned",
        "request": _request_info(request),
        "general": {"pidfile": "", "stdout-logfile": "", "access-control-allow-origin": http.cors_origin},
        "logging": {
            "filename": "",
            "max-size": 0,
            "max-backups": 0,
            "max-age": 0,
            "use-local-time": False,
            "use-compression": False,
            "level": logs.current_level(),
        },
        "zookeeper": {"servers": [], "timeout": 0, "root-path": ""},
        "httpserver": {
            _DEFAULT: {
                "address": http.listen,
                "tls": _DEFAULT if http.tls_cert_file else "",
                "timeout": _secs(http.request_timeout),
            }
        },
    }
    return _json(200, body)


async def config_kind(request: web.Request) -> web.Response:
    """Burrow's httpResponseConfigModuleList: `request` before `coordinator` and `modules`."""
    kind = request.match_info["kind"]
    if kind not in _CONFIG_KINDS:
        return _not_found(request, f"config kind {kind!r} not found: use one of {', '.join(_CONFIG_KINDS)}")
    body = {
        "error": False,
        "message": "module list returned",
        "request": _request_info(request),
        "coordinator": kind,
        "modules": _modules(_ctx(request).settings, kind),
    }
    return _json(200, body)


async def config_module(request: web.Request) -> web.Response:
    kind, name = request.match_info["kind"], request.match_info["name"]
    if kind not in _CONFIG_KINDS:
        return _not_found(request, f"config kind {kind!r} not found: use one of {', '.join(_CONFIG_KINDS)}")
    module = _module_detail(_ctx(request).settings, kind, name)
    if module is None:
        return _not_found(request, f"{kind} module not found")
    return _ok(request, f"{kind} module detail returned", module=module)


async def get_loglevel(request: web.Request) -> web.Response:
    return _ok(request, "log level returned", level=logs.current_level())


async def set_loglevel(request: web.Request) -> web.Response:
    try:
        body = json.loads(await request.read() or b"null")
    except ValueError:
        body = None
    level = body.get("level") if isinstance(body, dict) else None
    try:
        if not isinstance(level, str):
            raise ValueError('expected a JSON body like {"level": "debug"}')
        logs.set_level(level.lower())
    except ValueError as exc:
        return envelope(request, 400, True, f"could not set log level: {exc}", {})
    log.info("log level changed over HTTP", level=level.lower())
    return _ok(request, "set log level", level=logs.current_level())


RESTORING_MESSAGE = (
    "lagd is restoring its state (stored windows, then the offsets read up to now): "
    "try again when /burrow/admin/ready answers READY"
)
RETRY_AFTER_S = 5


def not_ready_message(settings: Settings, sights: Mapping[str, Any]) -> str:
    """Why lagd gives no answer yet: the clusters whose brokers it cannot reach (what it met,
    and what to check), or, when it reaches them all, that it is restoring its state."""
    blind = sorted(name for name, sight in sights.items() if getattr(sight, "unreachable", False))
    if not blind:
        return RESTORING_MESSAGE
    clusters = []
    for name in blind:
        cs = settings.clusters.get(name)
        servers = ", ".join(cs.bootstrap_servers) if cs else "?"
        clusters.append(f"{name} (bootstrap-servers {servers}: {getattr(sights[name], 'reason', '')})")
    return (
        f"lagd cannot reach the brokers of cluster(s) {'; '.join(clusters)}. Check that the brokers run, "
        "that this host reaches bootstrap-servers (address, port, firewall), and the cluster's "
        "security-protocol, SASL and TLS settings against the listener; lagd keeps trying and answers "
        "once /burrow/admin/ready says READY"
    )


def until_ready(handler: Handler) -> Handler:
    """Answer 503 in Burrow's error envelope until lagd is ready.

    Before then State holds only part of the groups and windows, so a group would read
    NOTFOUND and a topic a partial partition list: wrong answers a dashboard would show as
    facts. /burrow/admin*, /v3/config* and /v3/admin/loglevel do not read State and answer
    at once.
    """

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        if not _ctx(request).ready():
            ctx = _ctx(request)
            resp = envelope(request, 503, True, not_ready_message(ctx.settings, ctx.health.sights), {})
            resp.headers["Retry-After"] = str(RETRY_AFTER_S)
            return resp
        return await handler(request)

    return guarded


def add_routes(app: web.Application) -> None:
    app[STATUS_BODIES] = StatusBodies(app[CTX].settings.http.status_cache_bytes)
    r = app.router
    r.add_get("/burrow/admin", admin)
    r.add_get("/burrow/admin/ready", ready)
    r.add_get("/v3/kafka", until_ready(clusters))
    r.add_get("/v3/kafka/{cluster}", until_ready(cluster_detail))
    r.add_get("/v3/kafka/{cluster}/topic", until_ready(topics))
    r.add_get("/v3/kafka/{cluster}/topic/{topic}", until_ready(topic_detail))
    r.add_get("/v3/kafka/{cluster}/topic/{topic}/consumers", until_ready(topic_consumers))
    r.add_get("/v3/kafka/{cluster}/consumer", until_ready(consumers))
    r.add_get("/v3/kafka/{cluster}/consumer/{group}", until_ready(consumer_detail))
    r.add_delete("/v3/kafka/{cluster}/consumer/{group}", until_ready(delete_group))
    r.add_get("/v3/kafka/{cluster}/consumer/{group}/status", until_ready(consumer_status))
    r.add_get("/v3/kafka/{cluster}/consumer/{group}/lag", until_ready(consumer_lag))
    r.add_delete("/v3/kafka/{cluster}/consumer/{group}/topic/{topic}", until_ready(delete_group_topic))
    r.add_get("/v3/config", config_main)
    r.add_get("/v3/config/{kind}", config_kind)
    r.add_get("/v3/config/{kind}/{name}", config_module)
    r.add_get("/v3/admin/loglevel", get_loglevel)
    r.add_post("/v3/admin/loglevel", set_loglevel)
