"""The status pages: server-rendered HTML with inline SVG charts, no scripts or external assets.

`/`: lagd's own health per cluster (degraded, offsets reader caught up, log-end sampler fresh,
store and MQTT), every group (status, why, lag, lag in seconds, a sparkline of its commit
windows, a link to its page), ERR first, then WARN, then the rest, filtered by status and a
part of the name (`?status=bad|ERR|WARN|OK&q=...`, a plain form), and the incidents of the
last day with their timeline in human time.
`/group/{cluster}/{group}`: the group's partitions (status, rule and reason, lag, lag in
seconds, owner, last commit) and charts of its lag and lag in seconds over hours, from the
stored history (GET /lagd/v1/consumer/{cluster}/{group}/history computes the same points).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from aiohttp import web

from lagd.core.model import GroupStatus
from lagd.core.times import about
from lagd.db import schema
from lagd.evaluate.clearing import Clearing, snapshot_clearing
from lagd.evaluate.lagtime import RECORD_TIMESTAMP, lag_seconds_from, record_clock
from lagd.evaluate.retention import RetentionState
from lagd.evaluate.retention_view import RetentionNote, retention_reason
from lagd.evaluate.sight import STALE_FACTOR, STALE_SLACK_MS
from lagd.evaluate.snapshot import GroupSnapshot, group_reason
from lagd.http.burrow_v3 import known_cluster
from lagd.http.context import CTX, HttpContext
from lagd.http.lagd_api import DB_TIMEOUT_S, RULE_OF, group_history, history_step, verdict_clearings
from lagd.http.metrics import each_snapshot
from lagd.http.routing import peer_groups
from lagd.ingest.probe import Probes
from lagd.state.layout import FIELDS, LAG
from lagd.state.windows import NO_LAG, State

REFRESH_S = 10
GROUP_REFRESH_S = 30
COLOURS = {
    "OK": "#2e7d32",
    "WARN": "#f9a825",
    "ERR": "#c62828",
    "NOTFOUND": "#757575",
    "STOP": "#c62828",
    "STALL": "#c62828",
    "REWIND": "#c62828",
    "LAGGING": "#f9a825",
    "STALLED": "#c62828",
}
HOURS = (1, 6, 24)
INCIDENT_DAYS = 1
HOUR_MS = 3600 * 1000


def lag_history(state: State, cluster: str, group: str) -> list[int]:
    """Total lag per window slot (newest last): the sum over partitions of the frozen commit lags."""
    totals = [0] * state.intervals
    for partitions in (state.group_windows(cluster, group) or {}).values():
        for arr in partitions.values():
            lags = arr[LAG::FIELDS]  # the flat windows as they are, no entry objects
            for i, lag in enumerate(lags, state.intervals - len(lags)):
                if lag != NO_LAG:
                    totals[i] += lag
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


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin-bottom:1em}"
    "td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}th{white-space:nowrap}.n{text-align:right}"
    ".st{color:#fff;padding:1px 6px;border-radius:3px;font-size:90%;white-space:nowrap}"
    ".muted{color:#666;font-size:90%}a{color:#1565c0}.charts{display:flex;flex-wrap:wrap;gap:1.5em}"
    ".chart text{font-size:11px;fill:#555}.chart .line{fill:none;stroke-width:2}"
    ".health td:first-child{font-weight:600}.warn{color:#c62828}"
)


def _badge(status: str) -> str:
    colour = COLOURS.get(status, "#757575")
    return f'<span class="st" style="background:{colour}">{escape(status)}</span>'


def _ago(ms: int) -> str:
    s = max(0, ms) // 1000
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 48 * 3600:
        return f"{s // 3600} h {s % 3600 // 60} min ago"
    return f"{s // 86400} days ago"


def _duration(ms: int) -> str:
    s = max(0, ms) // 1000
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def when(ms: int | None, now_ms: int) -> str:
    """A time for people: UTC date and time and how long ago, in a <time> element."""
    if ms is None:
        return "—"
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return (
        f'<time datetime="{at.isoformat(timespec="seconds")}">{at:%Y-%m-%d %H:%M:%S} UTC</time> '
        f'<span class="muted">({_ago(now_ms - ms)})</span>'
    )


def _nice_top(value: float) -> float:
    """A round axis maximum at or above `value`."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** (len(str(int(value))) - 1)
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= m * magnitude:
            return m * magnitude
    return 10 * magnitude


def _fmt(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if v >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def chart(points: list[tuple[int, float]], start: int, end: int, title: str, unit: str, colour: str, ident: str) -> str:
    """An inline SVG line chart of (time ms, value) points over [start, end], with axes."""
    w, h, left, right, top, bottom = 560, 200, 56, 12, 24, 28
    pw, ph = w - left - right, h - top - bottom
    span = max(end - start, 1)
    ymax = _nice_top(max((v for _, v in points), default=0.0))
    parts = [
        f'<svg class="chart" id="{ident}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{escape(title)}"><text x="{left}" y="15" style="font-size:13px;fill:#222">{escape(title)}</text>'
    ]
    for i in range(5):
        y = top + ph - ph * i / 4
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#e0e0e0"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(ymax * i / 4)}</text>'
        )
    fmt = "%H:%M:%S" if span <= 20 * 60 * 1000 else "%H:%M"
    for i in range(5):
        t = start + span * i // 4
        x = left + pw * i / 4
        label = datetime.fromtimestamp(t / 1000, tz=UTC).strftime(fmt)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#999"/>'
            f'<text x="{x:.1f}" y="{h - 8}" text-anchor="{anchor}">{label}</text>'
        )
    parts.append(f'<text x="{w - right}" y="15" text-anchor="end">{escape(unit)}, UTC</text>')
    if points:
        coords = [(left + pw * (t - start) / span, top + ph - ph * v / ymax) for t, v in points]
        d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        parts.append(f'<path class="line" stroke="{colour}" d="{d}"/>')
        if len(coords) == 1:
            x, y = coords[0]
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
    else:
        parts.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no history in this range</text>'
        )
    parts.append(f'<line x1="{left}" y1="{top + ph}" x2="{w - right}" y2="{top + ph}" stroke="#999"/></svg>')
    return "".join(parts)


async def _rows(ctx: HttpContext, stmt: Any) -> list[Any] | None:
    """The rows of a bounded query, or None when the database cannot answer right now."""
    if ctx.engine is None:
        return []
    engine = ctx.engine

    async def run() -> list[Any]:
        async with engine.connect() as conn:
            return list((await conn.execute(stmt)).mappings())

    try:
        return await asyncio.wait_for(run(), DB_TIMEOUT_S)
    except (OSError, TimeoutError, sa.exc.SQLAlchemyError):
        return None


async def _incidents(ctx: HttpContext, now_ms: int) -> list[Any] | None:
    """Open incidents and those resolved in the last INCIDENT_DAYS, newest first."""
    t = schema.incidents
    recent = sa.or_(t.c.state == "open", t.c.resolved_at >= now_ms - INCIDENT_DAYS * 24 * HOUR_MS)
    return await _rows(ctx, sa.select(t).where(recent).order_by(t.c.opened_at.desc()).limit(50))


def _group_link(cluster: str, group: str) -> str:
    return f'<a href="/group/{quote(cluster, safe="")}/{quote(group, safe="")}">{escape(group)}</a>'


def _incident_groups(body: Any) -> str:
    groups = body.get("groups", {}) if isinstance(body, dict) else {}
    if isinstance(groups, dict):
        return ", ".join(f"{escape(str(g))} ({escape(str(s))})" for g, s in sorted(groups.items()))
    if isinstance(groups, list):
        return ", ".join(escape(str(g)) for g in groups)
    return ""


def render_incidents(incidents: list[Any] | None, now_ms: int) -> str:
    if incidents is None:
        return "<p>incidents unavailable: the database does not answer</p>"
    if not incidents:
        return f"<p>no incidents open or resolved in the last {INCIDENT_DAYS * 24} h</p>"
    rows = []
    for r in incidents:
        body = r["body"] if isinstance(r["body"], dict) else {}
        resolved = r["resolved_at"]
        lasted = (resolved if resolved is not None else now_ms) - r["opened_at"]
        timeline = (
            f"opened {when(r['opened_at'], now_ms)}<br>updated {when(r['updated_at'], now_ms)}<br>"
            + (f"resolved {when(resolved, now_ms)}" if resolved is not None else "<b>still open</b>")
            + f'<br><span class="muted">{"lasted" if resolved is not None else "open for"} {_duration(lasted)}</span>'
        )
        peak = body.get("peak_severity")
        severity = _badge(str(r["severity"])) + (
            f' <span class="muted">peak {escape(str(peak))}</span>' if peak else ""
        )
        rows.append(
            f'<tr class="incident" id="incident-{quote(str(r["id"]), safe="")}"><td>{escape(str(r["state"]))}</td><td>{severity}</td>'
            f"<td>{escape(str(r['cluster']))}</td><td>{escape(str(r['reason']))}"
            f'<br><span class="muted">{escape(str(body.get("summary", "")))}</span></td>'
            f"<td>{_incident_groups(body)}</td><td>{timeline}</td></tr>"
        )
    return (
        "<table><tr><th>state</th><th>severity</th><th>cluster</th><th>reason</th>"
        f"<th>groups (status at the last update)</th><th>timeline</th></tr>{''.join(rows)}</table>"
    )


def _yes(ok: bool, good: str, bad: str) -> str:
    return _badge("OK") + f" {escape(good)}" if ok else _badge("ERR") + f" {escape(bad)}"


def render_health(ctx: HttpContext, now_ms: int) -> str:
    """lagd's own view of each cluster and of its store and MQTT link (what /metrics exports)."""
    health = ctx.health
    rows = []
    for name in sorted(set(ctx.settings.clusters) | set(ctx.state.clusters())):
        sight = health.sights.get(name)
        progress = health.progress.get(name)
        degraded = bool(getattr(sight, "unreachable", False))
        reason = str(getattr(sight, "reason", "") or "")
        caught_up = bool(getattr(progress, "caught_up", False))
        fraction = float(getattr(progress, "fraction", 0.0) or 0.0)
        source = str(getattr(progress, "source", "") or "not chosen yet")
        _, newest_sample = ctx.state.newest_times(name)
        cluster_settings = ctx.settings.clusters.get(name)
        refresh_ms = int((cluster_settings.offset_refresh if cluster_settings else 10.0) * 1000)
        fresh = newest_sample is not None and now_ms - newest_sample <= STALE_FACTOR * refresh_ms + STALE_SLACK_MS
        sample = f"last log-end sample {_ago(now_ms - newest_sample)}" if newest_sample is not None else "no sample yet"
        rows.append(
            f'<tr class="cluster-health"><td>{escape(name)}</td>'
            f"<td>{_yes(not degraded, 'sees the cluster', 'degraded: verdicts held')}"
            f"{'<br><span class=muted>' + escape(reason) + '</span>' if reason else ''}</td>"
            f"<td>{_yes(caught_up, 'reader caught up', f'reader catching up ({fraction:.0%})')}"
            f'<br><span class="muted">offsets from {escape(source)}</span></td>'
            f'<td>{_yes(fresh, "sampler fresh", "sampler stale")}<br><span class="muted">{escape(sample)}</span></td></tr>'
        )
    table = (
        '<table class="health"><tr><th>cluster</th><th>sight</th><th>offsets reader</th><th>log-end sampler</th></tr>'
        + ("".join(rows) or '<tr><td colspan="4">no clusters configured</td></tr>')
        + "</table>"
    )
    parts = []
    st = health.persister
    if st is not None:
        ok = bool(getattr(st, "healthy", False))
        parts.append(
            _yes(ok, "store healthy", "store failing: Postgres does not answer lagd or refuses it (see lagd's log)")
            + f' <span class="muted">({int(getattr(st, "pending", 0))} changes pending, last write '
            f"{float(getattr(st, 'write_seconds_last', 0.0)) * 1000:.0f} ms)</span>"
        )
    pub = health.publisher
    if pub is not None:
        parts.append(
            _yes(bool(getattr(pub, "connected", False)), "MQTT connected", "MQTT not connected")
            + f' <span class="muted">({int(getattr(pub, "pending", 0))} messages waiting)</span>'
        )
    elif not ctx.settings.notify.enabled:
        parts.append('<span class="muted">notifications off ([notify] enabled = false)</span>')
    elif not ctx.settings.notify.mqtt_enabled:
        parts.append('<span class="muted">MQTT off (notify.mqtt-enabled = false); incidents go to the sinks</span>')
    extra = f'<p class="store-health">{" · ".join(parts)}</p>' if parts else ""
    return table + extra


def render_probes(probes: Probes, badge: Callable[[str], str]) -> str:
    """The status page's table of probed brokers (empty while no cluster is probed)."""
    if not probes.verdicts and not probes.problems:
        return ""
    rows = []
    for cluster, brokers in sorted(probes.verdicts.items()):
        for broker, v in sorted(brokers.items()):
            ack = "-" if v.ack_s is None else f"{v.ack_s:.3f}"
            e2e = "-" if v.e2e_s is None else f"{v.e2e_s:.3f}"
            rows.append(
                f'<tr class="probe is-{v.status.lower()}"><td>{escape(cluster)}</td><td class=n>{broker}</td>'
                f"<td>{badge(v.status)}</td>"
                f"<td>{escape(v.reason)}</td><td class=n>{ack}</td><td class=n>{e2e}</td>"
                f"<td class=n>{v.sent}</td><td class=n>{v.failed}</td><td class=n>{v.lost}</td></tr>"
            )
    problems = "".join(
        f'<p class="warn">probe of {escape(c)}: {escape(p)}</p>' for c, p in sorted(probes.problems.items())
    )
    return (
        "<h2>brokers (end-to-end probe)</h2>" + problems + "<table><tr><th>cluster</th><th>broker</th>"
        "<th>status</th><th>why</th><th>ack (s)</th><th>end-to-end (s)</th><th>sent</th><th>failed</th>"
        "<th>lost</th></tr>" + "".join(rows) + "</table>"
    )


def render_mirror_flows(ctx: HttpContext) -> str:
    """MirrorMaker 2 flows (lagd.ingest.mirror_flows): each one's status and why, how far the
    target is behind, and per mirrored group how many records a failover to the target would read again."""
    verdicts = ctx.mirror_flows.verdicts
    if not verdicts:
        return ""
    rows = []
    for name, v in sorted(verdicts.items()):
        per_group: dict[str, int] = {}
        for g in v.gaps:
            per_group[g.group] = per_group.get(g.group, 0) + g.records
        gaps = ", ".join(f"{escape(group)}: {records}" for group, records in sorted(per_group.items())) or "none"
        delay = "-" if v.delay_s is None else f"{v.delay_s:.1f}"
        rows.append(
            f'<tr class="mirror-flow is-{v.status.lower()}"><td>{escape(name)}</td><td>{_badge(v.status)}</td>'
            f"<td>{escape(v.reason)}</td><td class=n>{delay}</td><td>{gaps}</td></tr>"
        )
    return (
        "<h2>mirrors (MirrorMaker 2)</h2><table><tr><th>mirror</th><th>status</th><th>why</th>"
        "<th>behind (s)</th><th>records a failover re-reads, per group</th></tr>" + "".join(rows) + "</table>"
    )


def _page(title: str, refresh_s: int, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{refresh_s}"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


# The overview's order: what needs a look first (ERR, then WARN), then the rest by name.
_TRIAGE = {GroupStatus.ERR: 0, GroupStatus.WARN: 1, GroupStatus.NOTFOUND: 2, GroupStatus.OK: 3}
# ?status= of the overview: which groups it lists ("" or anything else: all)
STATUS_FILTERS = {"bad": "not OK", "ERR": "ERR", "WARN": "WARN", "OK": "OK"}
MAX_SEARCH = 200


@dataclass(frozen=True, slots=True)
class GroupFilter:
    """The overview's filter, from its query (hostile input: only known statuses, a bounded search)."""

    status: str = ""  # a key of STATUS_FILTERS, or "" for every group
    search: str = ""  # a part of the group's name, any case

    @classmethod
    def of(cls, query: Mapping[str, str]) -> GroupFilter:
        status = query.get("status", "")
        return cls(status if status in STATUS_FILTERS else "", query.get("q", "")[:MAX_SEARCH].strip())

    def keeps(self, v: GroupSnapshot) -> bool:
        if self.search and self.search.casefold() not in v.group.casefold():
            return False
        if self.status == "bad":
            return v.status in (GroupStatus.ERR, GroupStatus.WARN)
        return not self.status or v.status.value == self.status

    def form(self) -> str:
        """The filter as a form (a GET of this page: no scripts)."""
        options = "".join(
            f'<option value="{k}"{" selected" if k == self.status else ""}>{escape(label)}</option>'
            for k, label in (("", "every status"), *STATUS_FILTERS.items())
        )
        return (
            '<form class="filter" method="get" action="/">'
            f'<label>status <select name="status">{options}</select></label> '
            f'<label>group <input type="search" name="q" value="{escape(self.search)}" '
            f'maxlength="{MAX_SEARCH}" placeholder="part of its name"></label> '
            '<button type="submit">filter</button>'
            + (' <a href="/">clear</a>' if self.status or self.search else "")
            + "</form>"
        )


def render(
    ctx: HttpContext,
    incidents: list[Any] | None,
    groups: list[GroupSnapshot],
    now: int,
    histories: dict[tuple[str, str], list[int]],
    missing: list[str],
    shown: GroupFilter = GroupFilter(),
) -> str:
    """The index page of `groups`' snapshots (see lagd.evaluate.snapshot) that `shown` keeps,
    ERR first, then WARN, then the rest, each bad one with why; each with its lag history from
    `histories` (none for another worker's group), and a note naming the workers in `missing`,
    whose groups could not be listed."""
    state = ctx.state
    rows: list[str] = []
    by_cluster: dict[str, list[str]] = {}
    bad: dict[str, int] = {}
    for v in sorted(groups, key=lambda v: (v.cluster, _TRIAGE.get(v.status, 2), v.group)):
        if v.status in (GroupStatus.ERR, GroupStatus.WARN):
            bad[v.cluster] = bad.get(v.cluster, 0) + 1
        if not shown.keeps(v):
            by_cluster.setdefault(v.cluster, [])
            continue
        history = histories.get((v.cluster, v.group), [])
        why = group_reason(v.status, *v.partition_statuses()) if v.not_ok or v.status is not GroupStatus.OK else ""
        if v.retention:  # records lost or at risk: the worst thing that can happen to a consumer, said first
            why = retention_reason(v.retention) + (f"; {why}" if v.not_ok else "")
        clearing = snapshot_clearing(state, v) if v.totallag > 0 else None
        if clearing is not None:
            why = f"{why}; {clears_words(clearing, now)}" if why else clears_words(clearing, now)
        by_cluster.setdefault(v.cluster, []).append(
            f'<tr class="group is-{v.status.value.lower()}"><td>{_group_link(v.cluster, v.group)}</td>'
            f"<td>{_badge(v.status.value)}</td>"
            f"<td>{escape(why)}</td><td class=n>{v.partition_count}</td>"
            f"<td class=n>{v.totallag}</td><td class=n>{v.lag_seconds:.1f}</td>"
            f"<td>{sparkline(history)}</td></tr>"
        )
    clusters = sorted(set(ctx.settings.clusters) | set(state.clusters()) | set(by_cluster))
    for cluster in clusters:
        listed = by_cluster.get(cluster)
        empty = "no groups yet" if listed is None else "no group matches the filter"
        body = "".join(listed or []) or f'<tr><td colspan="7">{empty}</td></tr>'
        count = f' <span class="muted">{bad.get(cluster, 0)} not OK</span>' if cluster in by_cluster else ""
        rows.append(
            f"<h2>{escape(cluster)}{count}</h2><table><tr><th>group</th><th>status</th><th>why</th>"
            f"<th>partitions</th><th>lag</th><th>lag (s)</th><th>lag history</th></tr>{body}</table>"
        )
    rows.insert(0, shown.form())
    if missing:
        rows.insert(
            0,
            f'<p class="warn">workers not answering: {escape(", ".join(missing))}; their groups are missing '
            "here until they answer or their groups move to another worker (within scale.session-timeout)</p>",
        )
    ready = "ready" if ctx.ready() else "starting (catching up)"
    return _page(
        "lagd",
        REFRESH_S,
        f"<h1>lagd</h1><p>{ready}; refreshes every {REFRESH_S} s. "
        '<a href="/metrics">metrics</a> · <a href="/v3/kafka">Burrow v3</a> · '
        '<a href="/lagd/v1/openapi.json">API</a></p>'
        f"<h2>lagd's health</h2>{render_health(ctx, now)}"
        f"{''.join(rows)}{render_mirror_flows(ctx)}{render_probes(ctx.probes, _badge)}<h2>incidents</h2>{render_incidents(incidents, now)}",
    )


def clears_words(c: Clearing, now_ms: int, interval: bool = False) -> str:
    """'clears in about 4 min' (with `interval`: '(2-6 min at 95 %)', from the drain rate's interval)."""
    text = f"clears in {about(c.clears_in(now_ms))}"
    if interval:
        early = max(0.0, (c.clear_at_early - now_ms) / 1000.0)
        late = c.clear_at_late
        late_text = "no bound" if late is None else f"{max(0.0, (late - now_ms) / 60_000.0):.0f} min"
        text += f" ({early / 60.0:.0f} min to {late_text} at 95 %; draining {c.drain_rate:.0f} records/s)"
    return text


def _listed(summary: dict[str, Any]) -> GroupSnapshot | None:
    """Another worker's group, from its /lagd/v1/groups summary (None if it is not one)."""
    try:
        return GroupSnapshot(
            str(summary["cluster"]),
            str(summary["group"]),
            GroupStatus(summary["status"]),
            float(summary["complete"]),
            int(summary["partition_count"]),
            int(summary["totallag"]),
            float(summary["lag_seconds"]),
            False,
            int(summary["evaluated_at"]),
            tuple(str(s) for s in summary.get("not_ok", ())),
            (),
            None,
            None,
        )
    except (KeyError, TypeError, ValueError):
        return None


async def index(request: web.Request) -> web.Response:
    """Every group: this instance's from the verdict watch's snapshots, each lag history
    computed as the listing goes (both in slices: no long hold of the loop on a large estate),
    and with workers every other worker's from its /lagd/v1/groups."""
    ctx = request.app[CTX]
    now = ctx.now_ms()
    incidents = await _incidents(ctx, now)
    shown = GroupFilter.of(request.query)
    groups: list[GroupSnapshot] = []
    histories: dict[tuple[str, str], list[int]] = {}
    mine: set[tuple[str, str]] = set()
    async for v in each_snapshot(ctx, now):
        groups.append(v)
        mine.add((v.cluster, v.group))
        if shown.keeps(v):  # the histories of groups not shown are not computed
            histories[(v.cluster, v.group)] = lag_history(ctx.state, v.cluster, v.group)
    listed, missing = await peer_groups(request)
    groups += [g for g in map(_listed, listed) if g is not None and (g.cluster, g.group) not in mine]
    page = render(ctx, incidents, groups, now, histories, missing, shown)
    return web.Response(text=page, content_type="text/html")


def first_commit_query(cluster: str, group: str, since: int) -> sa.Select[tuple[int | None]]:
    """The group's first stored commit at or after `since`, found through the history's index
    (a hash of the group's name: lagd.db.schema)."""
    t = schema.commit_history
    return sa.select(sa.func.min(t.c.ts).label("first")).where(
        sa.text(schema.history_of_group(":grp")).bindparams(grp=group), t.c.cluster == cluster, t.c.ts >= since
    )


async def _first_commit(ctx: HttpContext, cluster: str, group: str, since: int) -> tuple[bool, int | None]:
    """Whether the database answered, and the group's first stored commit at or after `since`."""
    rows = await _rows(ctx, first_commit_query(cluster, group, since))
    if rows is None:
        return False, None
    return True, None if not rows or rows[0]["first"] is None else int(rows[0]["first"])


async def group_page(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    cluster, group = request.match_info["cluster"], request.match_info["group"]
    if "\x00" in cluster or "\x00" in group:
        raise web.HTTPBadRequest(text="names never contain NUL characters")
    try:
        hours = int(request.query.get("hours", "6"))
    except ValueError:
        hours = 6
    hours = hours if hours in HOURS else 6
    now = ctx.now_ms()
    v = ctx.evaluator.group(cluster, group, now)
    links = " · ".join(f"<b>{h} h</b>" if h == hours else f'<a href="?hours={h}">{h} h</a>' for h in HOURS)
    head = (
        f'<p><a href="/">← all groups</a></p><h1>{escape(group)} {_badge(v.status.value)}</h1>'
        f'<p class="muted">cluster {escape(cluster)}; evaluated {when(v.evaluated_at, now)}; '
        f"refreshes every {GROUP_REFRESH_S} s. "
        f'JSON: <a href="/lagd/v1/consumer/{quote(cluster, safe="")}/{quote(group, safe="")}">verdict</a>, '
        f'<a href="/lagd/v1/consumer/{quote(cluster, safe="")}/{quote(group, safe="")}/history">history</a></p>'
    )
    # the charts start at the group's first stored commit in the range, so a young group fills them
    since = now - hours * HOUR_MS
    answered, first = await _first_commit(ctx, cluster, group, since)
    if not answered:
        charts = "<p>history unavailable: the database does not answer</p>"
    else:
        start = since if first is None else max(since, first)
        start = min(start, now - 60_000)
        step = history_step(now - start)
        try:
            points = await group_history(ctx, cluster, group, start, now, step)
        except (OSError, TimeoutError, sa.exc.SQLAlchemyError):
            points = None
        if points is None:
            charts = "<p>history unavailable: the database does not answer</p>"
        else:
            lag = [(p["bucket"], float(p["lag"])) for p in points if p["lag"] is not None]
            secs = [(p["bucket"], float(p["lag_seconds_max"])) for p in points if p["lag_seconds_max"] is not None]
            charts = (
                f'<p>over the last {links} (buckets of {step} s)</p><div class="charts">'
                + chart(lag, start, now, "total lag", "messages", "#1565c0", "chart-lag")
                + chart(secs, start, now, "lag in seconds (worst partition)", "seconds", "#6a1b9a", "chart-lag-seconds")
                + "</div>"
            )
    if v.status is GroupStatus.NOTFOUND and not known_cluster(ctx, cluster):
        watched = ", ".join(escape(name) for name in sorted(ctx.settings.clusters)) or "none"
        parts = f"<p>lagd watches no cluster named {escape(cluster)} (it watches: {watched}).</p>"
    elif v.status is GroupStatus.NOTFOUND:
        parts = "<p>lagd does not know this group now (never seen, deleted or expired).</p>"
    else:
        group_c, clear = verdict_clearings(ctx, v)
        prow = []
        notes = {(n.topic, n.partition): n for n in v.retention}
        for p in v.partitions:
            note = notes.get((p.topic, p.partition))
            pc = clear.get((p.topic, p.partition))
            pclear = f"<br><span class=muted>{escape(clears_words(pc, now))}</span>" if pc is not None else ""
            rule = p.rule or RULE_OF.get(p.reason, "")
            last = p.end
            commit = f"{when(last.timestamp, now)}<br><span class=muted>offset {last.offset}</span>" if last else "—"
            secs_text = f"{'≥ ' if p.lag_seconds_estimated else ''}{p.lag_seconds:.1f}"
            le = ctx.state.log_end_of(cluster, p.topic, p.partition) if last else None
            if last and lag_seconds_from(le, last.offset, p.current_lag, p.lag_seconds_estimated) == RECORD_TIMESTAMP:
                clock = "the producer's clock" if record_clock(le) == "CreateTime" else "the broker's clock"
                secs_text += f"<br><span class=muted>from the record's timestamp ({clock})</span>"
            prow.append(
                f'<tr class="partition"><td>{escape(p.topic)}</td><td class=n>{p.partition}</td>'
                f"<td>{_badge(p.status.value)}</td><td>{escape(rule)}<br><span class=muted>{escape(p.reason)}</span>"
                f"{'<br><span class=muted>since ' + when(p.since, now) + '</span>' if p.since is not None else ''}"
                f"{_retention_cell(note)}</td>"
                f"<td class=n>{p.current_lag}{pclear}</td><td class=n>{secs_text}</td>"
                f"<td>{escape(p.owner or '—')}<br><span class=muted>{escape(p.client_id)}</span></td>"
                f"<td>{commit}</td></tr>"
            )
        parts = (
            f"<p>{v.partition_count} partitions; total lag {v.totallag}; lag in seconds {v.lag_seconds:.1f}"
            f"{'; ' + escape(clears_words(group_c, now, True)) if group_c is not None else ''}</p>"
            "<table><tr><th>topic</th><th>partition</th><th>status</th><th>rule and reason</th><th>lag</th>"
            f"<th>lag (s)</th><th>owner</th><th>last commit</th></tr>{''.join(prow)}</table>"
        )
    html = _page(f"lagd: {group}", GROUP_REFRESH_S, f"{head}{charts}<h2>partitions</h2>{parts}")
    return web.Response(text=html, content_type="text/html", status=404 if v.status is GroupStatus.NOTFOUND else 200)


def _retention_cell(note: RetentionNote | None) -> str:
    """A partition's retention judgement under its reason: its share of retention used, and
    records lost or at risk in words (lagd.evaluate.retention)."""
    if note is None:
        return ""
    used = f"retention used {note.retention_used:.0%}" if note.retention_used is not None else ""
    said = " · ".join(x for x in (used, note.reason) if x)
    if not said:
        return ""
    bad = (
        " is-err" if note.state is RetentionState.LOST else (" is-warn" if note.state is RetentionState.AT_RISK else "")
    )
    return f'<br><span class="retention{bad}">{escape(said)}</span>'


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/group/{cluster}/{group}", group_page)
