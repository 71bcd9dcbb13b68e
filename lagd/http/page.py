"""The status page at `/`: one server-rendered HTML page, no scripts or external assets.

Clusters, their groups (status colour, lag, lag in seconds, a sparkline of the group's
total lag over its commit windows) and open incidents; refreshes itself every 10 s.
"""

from __future__ import annotations

import asyncio
from html import escape
from typing import Any

import sqlalchemy as sa
from aiohttp import web

from lagd.db import schema
from lagd.http.app import CTX, HttpContext
from lagd.http.metrics import verdicts
from lagd.state.windows import State

REFRESH_S = 10
COLOURS = {"OK": "#2e7d32", "WARN": "#f9a825", "ERR": "#c62828", "NOTFOUND": "#757575"}


def lag_history(state: State, cluster: str, group: str) -> list[int]:
    """Total lag per window slot (newest last): the sum over partitions of the frozen commit lags."""
    totals = [0] * state.intervals
    for topic, partitions in (state.group_topics(cluster, group) or {}).items():
        for partition in partitions:
            window = state.window(cluster, group, topic, partition)
            shift = state.intervals - len(window)
            for i, entry in enumerate(window):
                totals[shift + i] += entry.lag or 0
    return totals


def sparkline(values: list[int], width: int = 120, height: int = 24) -> str:
    """An inline SVG polyline of `values` scaled to the box."""
    if not values:
        return ""
    top = max(values) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="total lag history"><polyline fill="none" stroke="#1565c0" stroke-width="1.5" '
        f'points="{points}"/></svg>'
    )


async def _open_incidents(ctx: HttpContext) -> list[Any] | None:
    """Open incidents, or None when the database cannot be read right now."""
    if ctx.engine is None:
        return []
    t = schema.incidents
    engine = ctx.engine

    async def run() -> list[Any]:
        async with engine.connect() as conn:
            stmt = sa.select(t).where(t.c.state == "open").order_by(t.c.opened_at.desc()).limit(50)
            return list((await conn.execute(stmt)).mappings())

    try:
        return await asyncio.wait_for(run(), 2.0)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError):
        return None


def render(ctx: HttpContext, incidents: list[Any] | None) -> str:
    state = ctx.state
    rows: list[str] = []
    by_cluster: dict[str, list[str]] = {}
    for v in verdicts(state, ctx.evaluator, ctx.now_ms()):
        colour = COLOURS.get(v.status.value, "#757575")
        bad = sorted({p.status.value for p in v.partitions if p.status.value != "OK"})
        by_cluster.setdefault(v.cluster, []).append(
            f"<tr><td>{escape(v.group)}</td>"
            f'<td><span class="st" style="background:{colour}">{v.status.value}</span></td>'
            f"<td>{escape(', '.join(bad))}</td><td class=n>{v.partition_count}</td>"
            f"<td class=n>{v.totallag}</td><td class=n>{v.lag_seconds:.1f}</td>"
            f"<td>{sparkline(lag_history(state, v.cluster, v.group))}</td></tr>"
        )
    clusters = sorted(set(ctx.settings.clusters) | set(state.clusters()))
    for cluster in clusters:
        body = "".join(by_cluster.get(cluster, [])) or '<tr><td colspan="7">no groups yet</td></tr>'
        rows.append(
            f"<h2>{escape(cluster)}</h2><table><tr><th>group</th><th>status</th><th>partitions not OK</th>"
            f"<th>partitions</th><th>lag</th><th>lag (s)</th><th>lag history</th></tr>{body}</table>"
        )
    if incidents is None:
        inc = "<p>incidents unavailable: the database does not answer</p>"
    elif not incidents:
        inc = "<p>no open incidents</p>"
    else:
        inc = "<table><tr><th>id</th><th>cluster</th><th>severity</th><th>reason</th><th>opened (ms)</th></tr>"
        inc += "".join(
            f"<tr><td>{escape(str(r['id']))}</td><td>{escape(str(r['cluster']))}</td>"
            f"<td>{escape(str(r['severity']))}</td><td>{escape(str(r['reason']))}</td>"
            f"<td class=n>{r['opened_at']}</td></tr>"
            for r in incidents
        )
        inc += "</table>"
    ready = "ready" if ctx.ready() else "starting (catching up)"
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{REFRESH_S}"><title>lagd</title><style>'
        "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}"
        "td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}.n{text-align:right}"
        ".st{color:#fff;padding:1px 6px;border-radius:3px;font-size:90%}</style></head><body>"
        f"<h1>lagd</h1><p>{ready}; refreshes every {REFRESH_S} s. "
        '<a href="/metrics">metrics</a> · <a href="/v3/kafka">Burrow v3</a> · '
        '<a href="/lagd/v1/openapi.json">API</a></p>'
        f"{''.join(rows)}<h2>open incidents</h2>{inc}</body></html>"
    )


async def index(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    incidents = await _open_incidents(ctx)
    return web.Response(text=render(ctx, incidents), content_type="text/html")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
