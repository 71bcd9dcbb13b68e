"""lagd's own JSON API under /lagd/v1: verdicts with reasons and lag in seconds, windows,
incidents, mirrors and trends. Documented by lagd.http.openapi (served at openapi.json).

Verdicts and windows come from memory; incidents, mirrors and trends from Postgres (the
notifier, mirror watcher and Spark jobs write them). A database outage answers 503 with
what to check, never a hang: queries are bounded by DB_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from aiohttp import web

from lagd.core.model import GroupStatus, PartitionStatus, WindowEntry
from lagd.db import schema
from lagd.evaluate import GroupVerdict, PartitionVerdict
from lagd.evaluate import rules as R
from lagd.evaluate.clearing import Clearing, state_clearings
from lagd.evaluate.lagtime import RECORD_TIMESTAMP, lag_seconds_from, record_clock
from lagd.evaluate.mirror_flow import FlowVerdict
from lagd.evaluate.snapshot import GroupSnapshot
from lagd.http.context import CTX, MAX_INT32, MAX_MS, HttpContext, envelope
from lagd.http.metrics import each_snapshot
from lagd.ingest.mirror_flows import mm2_alias
from lagd.ingest.share_groups import ShareGroup
from lagd.runtime import logs

log = logs.get(__name__)

DB_TIMEOUT_S = 5.0
TREND_STEPS = (60, 3600)
MAX_POINTS = 10_000
DAY_MS = 24 * 3600 * 1000

# PartitionVerdict carries the human reason; the API also names the rule that fired.
RULE_OF: dict[str, str] = {
    j.reason: j.rule
    for j in (
        R.J_EMPTY,
        R.J_CAUGHT_UP,
        R.J_INCOMPLETE,
        R.J_STOP,
        R.J_REWIND,
        R.J_RECENT_LOW_LAG,
        R.J_STALL,
        R.J_WARN,
        R.J_PROGRESSING,
    )
}


class BadRequest(ValueError):
    """A query parameter is out of range; the message says what is expected."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(data).encode(), content_type="application/json")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    return envelope(request, status, True, message, {})


def offset_view(e: WindowEntry | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"offset": e.offset, "order": e.order, "timestamp": e.timestamp, "observed": e.observed, "lag": e.lag}


def partition_view(
    p: PartitionVerdict,
    clearing: dict[str, Any] | None = None,
    lag_from: str | None = None,
    record_clock: str | None = None,
) -> dict[str, Any]:
    """A partition's verdict in the API. `lag_from`: how its lag in seconds was obtained
    (lagtime.lag_seconds_from; without the samples at hand: "bound" or "log_end_samples");
    `record_clock`: whose clock stamped the record it was read from (lagtime.record_clock)."""
    if lag_from is None:
        lag_from = lag_seconds_from(None, 0, p.current_lag, p.lag_seconds_estimated)
    return {
        "topic": p.topic,
        "partition": p.partition,
        "status": p.status.value,
        "rule": p.rule or RULE_OF.get(p.reason, ""),
        "reason": p.reason,
        "since": p.since,
        "current_lag": p.current_lag,
        "complete": p.complete,
        "lag_seconds": p.lag_seconds,
        "lag_seconds_estimated": p.lag_seconds_estimated,
        "lag_seconds_from": lag_from,
        "record_timestamp_type": record_clock,
        "owner": p.owner,
        "client_id": p.client_id,
        "start": offset_view(p.start),
        "end": offset_view(p.end),
        "clearing": clearing,
    }


def summary_view(v: GroupVerdict | GroupSnapshot) -> dict[str, Any]:
    return {
        "cluster": v.cluster,
        "group": v.group,
        "status": v.status.value,
        "complete": v.complete,
        "partition_count": v.partition_count,
        "totallag": v.totallag,
        "lag_seconds": v.lag_seconds,
        "not_ok": list(v.not_ok),
        "evaluated_at": v.evaluated_at,
    }


def reasons(v: GroupVerdict) -> list[dict[str, Any]]:
    """Non-OK partitions grouped by the rule that fired, each with since when."""
    found: dict[tuple[str, str], list[PartitionVerdict]] = {}
    for p in v.partitions:
        if p.status is not PartitionStatus.OK:
            found.setdefault((p.status.value, p.rule or RULE_OF.get(p.reason, "")), []).append(p)
    out = []
    for (status, rule), parts in found.items():
        sinces = [p.since for p in parts if p.since is not None]
        out.append(
            {
                "status": status,
                "rule": rule,
                "reason": parts[0].reason,
                "since": min(sinces) if sinces else None,
                "partitions": [{"topic": p.topic, "partition": p.partition, "since": p.since} for p in parts],
            }
        )
    return out


def verdict_clearings(ctx: HttpContext, v: GroupVerdict) -> tuple[Clearing | None, dict[tuple[str, int], Clearing]]:
    """When the group and each catching-up partition are expected to clear (lagd.evaluate.clearing)."""
    parts = ((p.topic, p.partition, p.status is PartitionStatus.OK, p.current_lag, p.lag_seconds) for p in v.partitions)
    return state_clearings(ctx.state, v.cluster, v.group, parts)


def group_view(v: GroupVerdict, ctx: HttpContext | None = None, now_ms: int = 0) -> dict[str, Any]:
    group_c, clear = verdict_clearings(ctx, v) if ctx is not None else (None, {})
    views = {k: c.view(now_ms) for k, c in clear.items()}
    body = summary_view(v)
    body["clearing"] = group_c.view(now_ms) if group_c is not None else None
    m = v.maxlag
    state = ctx.state if ctx is not None else None

    def view(p: PartitionVerdict) -> dict[str, Any]:
        lag_from = clock = None
        if state is not None and p.end is not None:
            le = state.log_end_of(v.cluster, p.topic, p.partition)
            lag_from = lag_seconds_from(le, p.end.offset, p.current_lag, p.lag_seconds_estimated)
            clock = record_clock(le) if lag_from == RECORD_TIMESTAMP else None
        return partition_view(p, views.get((p.topic, p.partition)), lag_from, clock)

    body["maxlag"] = view(m) if m is not None else None
    body["reasons"] = reasons(v)
    body["partitions"] = [view(p) for p in v.partitions]
    return body


def _ctx(request: web.Request) -> HttpContext:
    return request.app[CTX]


async def groups(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    only = request.query.get("cluster")
    out = [summary_view(v) async for v in each_snapshot(ctx, ctx.now_ms(), only)]
    return _json({"groups": out})


async def consumer(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    now = ctx.now_ms()
    v = ctx.evaluator.group(cluster, group, now)
    if v.status is GroupStatus.NOTFOUND:
        return _error(request, 404, "cluster or consumer not found")
    return _json(group_view(v, ctx, now))


def share_group_view(g: ShareGroup) -> dict[str, Any]:
    """A share group as Kafka's share coordinator reported it (null: Kafka does not know yet)."""
    return {
        "group": g.group,
        "state": g.state,
        "observed_ms": g.observed_ms,
        "error": g.error,
        "total_lag": g.total_lag,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "start_offset": p.start_offset,
                "lag": p.lag,
                "leader_epoch": p.leader_epoch,
                "error": p.error,
            }
            for p in g.partitions
        ],
    }


async def share_groups(request: web.Request) -> web.Response:
    """A cluster's share groups (KIP-932) with their lag per share-partition: shown, not judged."""
    ctx = _ctx(request)
    cluster = request.match_info["cluster"]
    if cluster not in ctx.settings.clusters:
        return _error(request, 404, "cluster not found")
    view = ctx.share_groups
    groups = [share_group_view(g) for _, g in sorted(view.of(cluster).items())]
    return _json({"cluster": cluster, "supported": view.supported.get(cluster), "groups": groups})


def flow_view(v: FlowVerdict) -> dict[str, Any]:
    gaps = [dataclasses.asdict(g) for g in v.gaps]
    return {
        "mirror": v.mirror,
        "status": v.status,
        "reason": v.reason,
        "observed_at": v.observed_ms,
        "newest_heartbeat_at": v.newest_heartbeat_ms,
        "heartbeat_age_s": v.heartbeat_age_s,
        "delay_s": v.delay_s,
        "delay_trend_s_per_min": v.delay_trend_s_per_min,
        "failover": gaps,
        "partitions": [dataclasses.asdict(p) for p in v.partitions],
        "missing": [dataclasses.asdict(m) for m in v.missing],
    }


async def mirror_flow(request: web.Request) -> web.Response:
    """A MirrorMaker 2 flow as read from its heartbeats and checkpoints on the target."""
    ctx = _ctx(request)
    name = request.match_info["mirror"]
    mirror = ctx.settings.mirrors.get(name)
    if mirror is None or not mm2_alias(mirror):
        return _error(request, 404, "no such mirror, or it has no MirrorMaker 2 alias (mirrors.<name>.mm2-alias)")
    found = ctx.mirror_flows.verdicts.get(name)
    if found is None:
        return _error(request, 503, "the mirror's MirrorMaker 2 topics have not been read yet; retry shortly")
    return _json(flow_view(found))


async def share_group(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    found = ctx.share_groups.of(cluster).get(group)
    if found is None:
        return _error(request, 404, "cluster or share group not found")
    return _json(share_group_view(found))


def _name_param(text: str, name: str) -> str:
    """A cluster or group name bound for a database query. Postgres text cannot hold NUL, so no
    name lagd stores has one: say so (400) instead of letting the query fail as an outage."""
    if "\x00" in text:
        raise BadRequest(f"{name} must not contain NUL characters")
    return text


def _int_param(text: str, name: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {text[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


async def window(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group, topic = (request.match_info[k] for k in ("cluster", "group", "topic"))
    try:
        partition = _int_param(request.match_info["partition"], "partition", 0, MAX_INT32)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    entries = ctx.state.window(cluster, group, topic, partition)
    if not entries:
        return _error(request, 404, "cluster, consumer, topic or partition not found")
    owner = ctx.state.owner(cluster, group, topic, partition)
    offsets, ts = ctx.state.log_end_samples(cluster, topic, partition)
    return _json(
        {
            "cluster": cluster,
            "group": group,
            "topic": topic,
            "partition": partition,
            "owner": owner.host if owner is not None else "",
            "client_id": owner.client_id if owner is not None else "",
            "window": [offset_view(e) for e in entries],
            "log_end": [{"offset": o, "ts": t} for o, t in zip(offsets, ts, strict=True)],
        }
    )


async def _query(ctx: HttpContext, stmt: Any) -> list[Any]:
    if ctx.engine is None:
        raise ConnectionError("no database configured")
    engine = ctx.engine

    async def run() -> list[Any]:
        async with engine.connect() as conn:
            return list((await conn.execute(stmt)).mappings())

    return await asyncio.wait_for(run(), DB_TIMEOUT_S)


async def _db_answer(request: web.Request, stmt: Any, key: str, view: Any) -> web.Response:
    try:
        rows = await _query(_ctx(request), stmt)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError) as exc:
        log.warning("database query for the API failed", path=request.path, error=f"{exc.__class__.__name__}: {exc}")
        return _error(request, 503, "database unavailable: check storage.database-url and that Postgres is up")
    return _json({key: [view(r) for r in rows]})


def _incident(r: Any) -> dict[str, Any]:
    return {
        "id": r["id"],
        "cluster": r["cluster"],
        "severity": r["severity"],
        "state": r["state"],
        "reason": r["reason"],
        "opened_at": r["opened_at"],
        "updated_at": r["updated_at"],
        "resolved_at": r["resolved_at"],
        "body": r["body"] if isinstance(r["body"], dict) else {},
    }


async def incidents(request: web.Request) -> web.Response:
    t = schema.incidents
    q = request.query
    stmt = sa.select(t).order_by(t.c.opened_at.desc(), t.c.id)
    try:
        state = q.get("state")
        if state is not None:
            if state not in ("open", "resolved"):
                raise BadRequest(f"state must be open or resolved, got {state[:40]!r}")
            stmt = stmt.where(t.c.state == state)
        if "cluster" in q:
            stmt = stmt.where(t.c.cluster == _name_param(q["cluster"], "cluster"))
        limit = _int_param(q.get("limit", "100"), "limit", 1, 1000)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    return await _db_answer(request, stmt.limit(limit), "incidents", _incident)


def _mirror(r: Any) -> dict[str, Any]:
    return {
        "mirror": r["mirror"],
        "topic": r["topic"],
        "target_topic": r["target_topic"],
        "verdict": r["verdict"],
        "completeness": r["completeness"],
        "delay_seconds": r["delay_seconds"],
        "source_rate": r["source_rate"],
        "target_rate": r["target_rate"],
        "evaluated_at": r["evaluated_at"],
        "details": r["details"] if isinstance(r["details"], dict) else {},
    }


async def mirrors(request: web.Request) -> web.Response:
    t = schema.mirror_status
    return await _db_answer(request, sa.select(t).order_by(t.c.mirror, t.c.topic), "mirrors", _mirror)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _trend_range(q: Mapping[str, str], now_ms: int) -> tuple[int, int, int]:
    """A trends request's bucket step (seconds) and range [from, to] in epoch ms: the last day at
    60 s by default. A from after to is an empty range (no points), not an error."""
    step = _int_param(q.get("step", "60"), "step", 60, 3600)
    if step not in TREND_STEPS:
        raise BadRequest(f"step must be 60 or 3600 seconds, got {step}")
    to = _int_param(q["to"], "to", 0, MAX_MS) if "to" in q else now_ms
    start = _int_param(q["from"], "from", 0, MAX_MS) if "from" in q else max(0, to - DAY_MS)
    return step, start, to


async def trend(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    q = request.query
    try:
        cluster, group = _name_param(cluster, "cluster"), _name_param(group, "group")
        step, start, to = _trend_range(q, ctx.now_ms())
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    t = schema.trends
    stmt = (
        sa.select(
            t.c.bucket,
            sa.func.sum(t.c.lag_max).label("lag_max"),
            sa.func.sum(t.c.lag_last).label("lag_last"),
            sa.func.max(t.c.lag_seconds_max).label("lag_seconds_max"),
            sa.func.sum(t.c.consume_rate).label("consume_rate"),
            sa.func.sum(t.c.produce_rate).label("produce_rate"),
        )
        .where(
            t.c.step == step,
            t.c.cluster == cluster,
            t.c.group_name == group,
            t.c.bucket >= start,
            t.c.bucket <= to,
        )
        .group_by(t.c.bucket)
        .order_by(t.c.bucket)
        .limit(MAX_POINTS)
    )
    try:
        rows = await _query(ctx, stmt)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError) as exc:
        log.warning("trend query failed", error=f"{exc.__class__.__name__}: {exc}")
        return _error(request, 503, "database unavailable: check storage.database-url and that Postgres is up")
    points = [
        {
            "bucket": int(r["bucket"]),
            "lag_max": _opt_int(r["lag_max"]),
            "lag_last": _opt_int(r["lag_last"]),
            "lag_seconds_max": _opt_float(r["lag_seconds_max"]),
            "consume_rate": _opt_float(r["consume_rate"]),
            "produce_rate": _opt_float(r["produce_rate"]),
        }
        for r in rows
    ]
    return _json({"cluster": cluster, "group": group, "step": step, "from": start, "to": to, "points": points})


async def mirror_trends(request: web.Request) -> web.Response:
    """A mirror's replication trend per topic and bucket, as `lagd jobs mirror-trends` stored it."""
    ctx = _ctx(request)
    q = request.query
    try:
        name = _name_param(request.match_info["mirror"], "mirror")
        topic = _name_param(q["topic"], "topic") if "topic" in q else None
        step, start, to = _trend_range(q, ctx.now_ms())
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    t = schema.mirror_trends
    stmt = sa.select(t).where(t.c.mirror == name, t.c.step == step, t.c.bucket >= start, t.c.bucket <= to)
    if topic is not None:
        stmt = stmt.where(t.c.topic == topic)
    stmt = stmt.order_by(t.c.topic, t.c.bucket).limit(MAX_POINTS)
    try:
        rows = await _query(ctx, stmt)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError) as exc:
        log.warning("mirror trends query failed", error=f"{exc.__class__.__name__}: {exc}")
        return _error(request, 503, "database unavailable: check storage.database-url and that Postgres is up")
    points = [
        {
            "topic": r["topic"],
            "target_topic": r["target_topic"],
            "bucket": int(r["bucket"]),
            "produced": int(r["produced"]),
            "replicated": _opt_int(r["replicated"]),
            "completeness": _opt_float(r["completeness"]),
            "completeness_cumulative": _opt_float(r["completeness_cumulative"]),
            "backlog": _opt_int(r["backlog"]),
            "delay_seconds": _opt_float(r["delay_seconds"]),
            "delay_beyond_history": bool(r["delay_beyond_history"]),
        }
        for r in rows
    ]
    return _json({"mirror": name, "step": step, "from": start, "to": to, "points": points})


HISTORY_MAX_POINTS = 500
HISTORY_DEFAULT_MS = 6 * 3600 * 1000
HISTORY_LOOKBACK_MS = 3600 * 1000  # log-end samples this far before `from` still date a commit's record
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

# Per bucket of `step` seconds from `from`: the group's total lag (each partition's last known
# commit lag carried forward, summed), the largest lag in seconds of a commit in the bucket and
# how many commits there were. A commit's lag in seconds is its time minus the first log-end
# sample at or beyond its offset (as the trends job computes it): the samples and commits of
# each partition in one pass, by offset descending, with a running minimum of sample times.
#
# The commits are reduced to one row per partition and bucket first (`pb`: hashed, no sort),
# and only that row's most-lagging commit is dated against the samples: the page's default 6 h
# of a 32-partition group committing every 5 s is 138k commits, and dating every one of them
# (a sort and a window over them and the samples together, then another sort to bucket them)
# made /group/{cluster}/{group} take 0.4-3 s (bench/bench_history.py, bench/HISTORY.md). The
# most-lagging commit (in records) of a partition's bucket is also its most-lagging in seconds
# while the partition is produced to at a steady rate over the bucket, up to the log-end
# samples' interval (a commit is dated by the first sample at or beyond its offset, so by up to
# that interval late): the bucket's value is then short of dating every commit by less than
# that interval (tests/test_http_history.py). Where the rate changes inside a bucket another
# of its commits may lag longer in seconds, which the chart then misses.
HISTORY_SQL = sa.text(
    """
WITH c AS (
    SELECT ts, topic, partition, "offset", lag FROM commit_history
    WHERE """
    + schema.history_of_group(":grp")
    + """ AND cluster = :cluster AND ts >= :t0 AND ts < :t1
), pb AS (
    SELECT (ts - :t0) / :step_ms AS b, topic, partition, count(*) AS n,
        max(ARRAY[ts, lag]) FILTER (WHERE lag IS NOT NULL) AS last_lag,
        max(ARRAY[lag, ts, "offset"]) FILTER (WHERE lag > 0) AS worst,
        bool_or(lag <= 0) AS caught_up
    FROM c GROUP BY 1, 2, 3
), tp AS (
    SELECT DISTINCT topic, partition FROM pb
), l AS (
    SELECT h.ts, h.topic, h.partition, h."offset" FROM log_end_history h
    JOIN tp ON tp.topic = h.topic AND tp.partition = h.partition
    WHERE h.cluster = :cluster AND h.ts >= :look0 AND h.ts < :t1
), marks AS (
    SELECT topic, partition, worst[3] AS "offset", 0 AS kind, NULL::bigint AS le_ts, worst[2] AS ts, b
    FROM pb WHERE worst IS NOT NULL
    UNION ALL
    SELECT topic, partition, "offset", 1, ts, NULL::bigint, NULL::bigint FROM l
), reached AS (
    SELECT kind, ts, b,
        min(le_ts) OVER (PARTITION BY topic, partition ORDER BY "offset" DESC, kind DESC
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS reach_ts
    FROM marks
), secs AS (
    SELECT b, max(greatest(ts - reach_ts, 0) / 1000.0) AS ls_max FROM reached WHERE kind = 0 GROUP BY b
), deltas AS (
    SELECT b, last_lag[2] - coalesce(lag(last_lag[2]) OVER (PARTITION BY topic, partition ORDER BY b), 0) AS delta
    FROM pb WHERE last_lag IS NOT NULL
), totals AS (
    SELECT b, sum(sum(delta)) OVER (ORDER BY b) AS lag FROM deltas GROUP BY b
), buckets AS (
    SELECT b, sum(n) AS commits, bool_or(caught_up) AS caught_up FROM pb GROUP BY b
)
SELECT buckets.b AS b, totals.lag AS lag,
    coalesce(secs.ls_max, CASE WHEN buckets.caught_up THEN 0.0 END) AS lag_seconds_max, buckets.commits AS commits
FROM buckets LEFT JOIN totals ON totals.b = buckets.b LEFT JOIN secs ON secs.b = buckets.b
ORDER BY buckets.b
"""
).bindparams(
    sa.bindparam("cluster", type_=sa.Text),
    sa.bindparam("grp", type_=sa.Text),
    sa.bindparam("t0", type_=sa.BigInteger),
    sa.bindparam("t1", type_=sa.BigInteger),
    sa.bindparam("look0", type_=sa.BigInteger),
    sa.bindparam("step_ms", type_=sa.BigInteger),
)


def history_step(span_ms: int) -> int:
    """The smallest round step (seconds) that splits `span_ms` into at most HISTORY_MAX_POINTS buckets."""
    for step in NICE_STEPS:
        if span_ms <= step * 1000 * HISTORY_MAX_POINTS:
            return step
    return -(-span_ms // (1000 * HISTORY_MAX_POINTS))


async def group_history(
    ctx: HttpContext, cluster: str, group: str, start: int, to: int, step: int
) -> list[dict[str, Any]]:
    """The group's lag and lag in seconds per bucket from the stored history, oldest first.

    Raises what the database raises (OSError, TimeoutError after DB_TIMEOUT_S, SQLAlchemyError)."""
    if to <= start:
        return []
    params = {
        "cluster": cluster,
        "grp": group,
        "t0": start,
        "t1": to,
        "look0": max(0, start - HISTORY_LOOKBACK_MS),
        "step_ms": step * 1000,
    }
    rows = await _query(ctx, HISTORY_SQL.bindparams(**params))
    return [
        {
            "bucket": start + int(r["b"]) * step * 1000,
            "lag": _opt_int(r["lag"]),
            "lag_seconds_max": _opt_float(r["lag_seconds_max"]),
            "commits": int(r["commits"]),
        }
        for r in rows
    ]


async def history(request: web.Request) -> web.Response:
    """GET /lagd/v1/consumer/{cluster}/{group}/history: hours of lag from commit_history and
    log_end_history, in at most HISTORY_MAX_POINTS buckets (no Spark job needed)."""
    ctx = _ctx(request)
    q = request.query
    try:
        cluster = _name_param(request.match_info["cluster"], "cluster")
        group = _name_param(request.match_info["group"], "group")
        to = _int_param(q["to"], "to", 0, MAX_MS) if "to" in q else ctx.now_ms()
        # from after to is an empty range (no points), not an error
        start = _int_param(q["from"], "from", 0, MAX_MS) if "from" in q else max(0, to - HISTORY_DEFAULT_MS)
        span = max(0, to - start)
        # a step too fine for the range is raised to keep at most HISTORY_MAX_POINTS (the answer says which)
        if "step" in q:
            step = max(_int_param(q["step"], "step", 1, 86400 * 7), -(-span // (1000 * HISTORY_MAX_POINTS)))
        else:
            step = history_step(span)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    try:
        points = await group_history(ctx, cluster, group, start, to, step)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError) as exc:
        log.warning("history query failed", error=f"{exc.__class__.__name__}: {exc}")
        return _error(request, 503, _DB_DOWN)
    return _json({"cluster": cluster, "group": group, "step": step, "from": start, "to": to, "points": points})


def _quarantined(r: Any) -> dict[str, Any]:
    return {
        "id": r["id"],
        "table": r["table_name"],
        "cluster": r["cluster"],
        "key": r["row_key"],
        "error": r["error"],
        "first_at": r["first_at"],
        "last_at": r["last_at"],
        "times": r["times"],
        "size": r["size"],
    }


async def quarantine(request: web.Request) -> web.Response:
    """Rows Postgres refused (newest first); the row itself stays in the table (row_data)."""
    t = schema.quarantine
    try:
        limit = _int_param(request.query.get("limit", "100"), "limit", 1, 1000)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    cols = [c for c in t.c if c.name != "row_data"]
    stmt = sa.select(*cols, sa.func.octet_length(t.c.row_data).label("size"))
    stmt = stmt.order_by(t.c.last_at.desc(), t.c.id.desc()).limit(limit)
    return await _db_answer(request, stmt, "quarantine", _quarantined)


SINK_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"


def _dead_letter(r: Any) -> dict[str, Any]:
    return {
        "id": r["id"],
        "sink": r["sink"],
        "event_id": r["event_id"],
        "outbox_id": r["outbox_id"],
        "error": r["error"],
        "attempts": r["attempts"],
        "first_attempt_at": r["first_attempt_at"],
        "dead_at": r["dead_at"],
        "payload": r["payload"] if isinstance(r["payload"], dict) else {},
    }


async def dead_letters(request: web.Request) -> web.Response:
    """Events a notification sink gave up on (newest first), with the error and the attempts."""
    t = schema.dead_letters
    try:
        limit = _int_param(request.query.get("limit", "100"), "limit", 1, 1000)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    stmt = sa.select(t).order_by(t.c.id.desc()).limit(limit)
    if "sink" in request.query:
        sink = request.query["sink"]
        if not re.fullmatch(SINK_NAME, sink) or len(sink) > 200:
            return _error(request, 400, "sink: expected a configured sink's name (letters, digits, '.', '_', '-')")
        stmt = stmt.where(t.c.sink == sink)
    return await _db_answer(request, stmt, "dead_letters", _dead_letter)


async def payload_schemas(request: web.Request) -> web.Response:
    """The names of the JSON Schemas of lagd's notification payloads."""
    from lagd.notify.schemas import names

    return _json({"schemas": names()})


async def payload_schema(request: web.Request) -> web.Response:
    """One JSON Schema (draft 2020-12) of a notification payload (MQTT and the webhook sink)."""
    from lagd.notify.schemas import load

    found = load(request.match_info["name"])
    if found is None:
        return _error(request, 404, "no such schema: GET /lagd/v1/schemas lists them")
    return _json(found)


async def _execute(request: web.Request, stmt: Any) -> int | None:
    """Rows a change touched, or None when the database is unavailable (logged)."""
    ctx = _ctx(request)
    if ctx.engine is None:
        return None
    engine = ctx.engine

    async def run() -> int:
        async with engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount)

    try:
        return await asyncio.wait_for(run(), DB_TIMEOUT_S)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError) as exc:
        log.warning("database change for the API failed", path=request.path, error=f"{exc.__class__.__name__}: {exc}")
        return None


_DB_DOWN = "database unavailable: check storage.database-url and that Postgres is up"


async def delete_quarantined(request: web.Request) -> web.Response:
    """Remove one quarantined row (admin token): the operator has understood it."""
    try:
        row_id = _int_param(request.match_info["id"], "id", 1, 2**63 - 1)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    removed = await _execute(request, sa.delete(schema.quarantine).where(schema.quarantine.c.id == row_id))
    if removed is None:
        return _error(request, 503, _DB_DOWN)
    if not removed:
        return _error(request, 404, "quarantined row not found")
    log.info("quarantined row removed over HTTP", id=row_id)
    return _json({"removed": removed})


async def clear_quarantine(request: web.Request) -> web.Response:
    """Remove every quarantined row (admin token)."""
    removed = await _execute(request, sa.delete(schema.quarantine))
    if removed is None:
        return _error(request, 503, _DB_DOWN)
    log.info("quarantine cleared over HTTP", removed=removed)
    return _json({"removed": removed})


async def openapi_doc(request: web.Request) -> web.Response:
    from lagd.http.openapi import document

    return _json(document())


async def clusters(request: web.Request) -> web.Response:
    """Each cluster and whether lagd sees it: a blind cluster's verdicts are held, not judged."""
    ctx = _ctx(request)
    out = []
    for name in sorted(ctx.settings.clusters):
        sight = ctx.health.sights.get(name)
        progress = ctx.health.progress.get(name)
        out.append(
            {
                "cluster": name,
                "degraded": bool(getattr(sight, "unreachable", False)),
                "reader_behind": bool(getattr(sight, "behind", False)),
                "blind_since": getattr(sight, "blind_since", None),
                "reason": getattr(sight, "reason", ""),
                "reader_caught_up": bool(getattr(progress, "caught_up", False)),
                # "topic" or "admin"; null until offsets-source "auto" has chosen
                "offsets_source": getattr(progress, "source", "") or None,
                "rules": ctx.settings.evaluator.rules,
            }
        )
    return _json({"clusters": out})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/lagd/v1/openapi.json", openapi_doc)
    r.add_get("/lagd/v1/groups", groups)
    r.add_get("/lagd/v1/clusters", clusters)
    r.add_get("/lagd/v1/incidents", incidents)
    r.add_get("/lagd/v1/mirrors", mirrors)
    r.add_get("/lagd/v1/mirrors/{mirror}/flow", mirror_flow)
    r.add_get("/lagd/v1/mirrors/{mirror}/trends", mirror_trends)
    r.add_get("/lagd/v1/quarantine", quarantine)
    r.add_get("/lagd/v1/dead-letters", dead_letters)
    r.add_get("/lagd/v1/schemas", payload_schemas)
    r.add_get("/lagd/v1/schemas/{name}", payload_schema)
    r.add_delete("/lagd/v1/quarantine", clear_quarantine)
    r.add_delete("/lagd/v1/quarantine/{id}", delete_quarantined)
    r.add_get("/lagd/v1/share/{cluster}", share_groups)
    r.add_get("/lagd/v1/share/{cluster}/{group}", share_group)
    r.add_get("/lagd/v1/consumer/{cluster}/{group}", consumer)
    r.add_get("/lagd/v1/consumer/{cluster}/{group}/trend", trend)
    r.add_get("/lagd/v1/consumer/{cluster}/{group}/history", history)
    r.add_get("/lagd/v1/consumer/{cluster}/{group}/window/{topic}/{partition}", window)
