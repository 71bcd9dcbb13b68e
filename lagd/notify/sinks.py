"""What each notification sink sends: an incident event in, an HTTP request out (pure, no I/O).

The delivery loop (`lagd.notify.delivery`) sends these requests and decides about retries;
here only the shape of each receiver's message is decided, so it is tested without a network.

Every request carries the event's stable id (`X-Lagd-Event-Id`, and inside the body where the
receiver has a place for it), so a receiver that gets an event twice (at-least-once delivery)
can drop the repeat: PagerDuty and Alertmanager do so by themselves (dedup key, alert labels).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import string
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from lagd.core.config import PAGERDUTY_EVENTS_URL, SinkSettings

EVENT_ID_HEADER = "X-Lagd-Event-Id"
ALERTNAME = "LagdIncident"


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request to a receiver."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"


def iso(ms: int | None) -> str:
    """RFC 3339 UTC time of epoch milliseconds ("" for None)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fields(payload: dict[str, Any], status_url: str) -> dict[str, str]:
    """The event's fields as text, for templates (`$cluster`, `$summary`, ...)."""
    out = {k: "" if v is None else str(v) for k, v in payload.items() if not isinstance(v, dict | list)}
    groups = payload.get("groups", {})
    out["groups"] = ", ".join(sorted(groups))
    out["group_statuses"] = ", ".join(f"{g}={s}" for g, s in sorted(groups.items()))
    out["opened_at_iso"] = iso(payload.get("opened_at"))
    out["at_iso"] = iso(payload.get("at"))
    out["resolved_at_iso"] = iso(payload.get("resolved_at"))
    out["status_url"] = status_url
    return out


def _json_text(value: str) -> str:
    """`value` escaped for use inside a JSON string (the template supplies the quotes)."""
    return json.dumps(value)[1:-1]


def _headers(settings: SinkSettings, payload: dict[str, Any]) -> dict[str, str]:
    out = {"Content-Type": "application/json", EVENT_ID_HEADER: str(payload.get("event_id", ""))}
    for line in settings.headers:
        name, _, value = line.partition(":")
        out[name.strip()] = value.strip()
    return out


def webhook(settings: SinkSettings, payload: dict[str, Any], status_url: str) -> Request:
    """The event as JSON (or the body template filled in), to the URL template filled in.

    Templates use `string.Template` ($name or ${name}); unknown names stay as written. In the
    body, values are escaped for a JSON string; in the URL, they are percent-encoded.
    """
    f = fields(payload, status_url)
    url = string.Template(settings.url).safe_substitute({k: quote(v, safe="") for k, v in f.items()})
    if settings.body_template:
        text = string.Template(settings.body_template).safe_substitute({k: _json_text(v) for k, v in f.items()})
        body = text.encode()
    else:
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = _headers(settings, payload)
    if settings.hmac_secret:
        digest = hmac.new(settings.hmac_secret.reveal().encode(), body, hashlib.sha256).hexdigest()
        headers[settings.signature_header] = f"sha256={digest}"
    return Request(url, body, headers)


_ICON = {"WARN": ":warning:", "ERR": ":red_circle:"}
_SLACK_CONTROL = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def slack_escape(value: object) -> str:
    """Text from Kafka (group names, owner hosts, summaries naming them) made inert in a Slack
    message. Slack reads `<...>` as a mention or link and `&` as an entity, so a group named
    `<!channel>` would ping the whole channel: `& < >` become `&amp; &lt; &gt;`, Slack's only
    escapes. Line breaks and other control characters are shown as `\\xNN`, so a name cannot
    start a line of its own that passes for lagd's (a fake "Resolved")."""
    text = str(value).translate(_SLACK_CONTROL)
    return "".join(f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" else c for c in text)


def _slack_code(value: object) -> str:
    """`value` as a Slack code span: escaped, its backticks (which would end the span) shown as U+02CB."""
    return "`" + slack_escape(value).replace("`", "\u02cb") + "`"


def slack_text(payload: dict[str, Any], status_url: str) -> str:
    """A readable Slack message: what broke, which groups, since when, and the status page.
    Every value from the event is escaped (`slack_escape`); only lagd's own markup is live."""
    groups = payload.get("groups", {})
    shown = sorted(groups.items(), key=lambda kv: (kv[1] == "OK", kv[0]))
    listed = ", ".join(f"{_slack_code(g)} ({slack_escape(s)})" for g, s in shown[:20])
    if len(shown) > 20:
        listed += f" and {len(shown) - 20} more"
    since = iso(payload.get("opened_at"))
    cluster = slack_escape(payload.get("cluster"))
    if payload.get("event") == "resolved":
        head = f":white_check_mark: *Resolved* on cluster *{cluster}*"
        peak = slack_escape(payload.get("peak_severity") or "")
        timing = f"Open from {since} to {iso(payload.get('resolved_at'))}" + (f", peaked at {peak}" if peak else "")
    else:
        sev = str(payload.get("severity", ""))
        head = f"{_ICON.get(sev, ':warning:')} *{slack_escape(sev)}* on cluster *{cluster}*"
        timing = f"Since {since}"
    incident, event_id = _slack_code(payload.get("id")), _slack_code(payload.get("event_id"))
    lines = [
        f"{head}: {slack_escape(payload.get('summary', ''))}",
        f"Groups: {listed}" if listed else "",
        f"{timing} · incident {incident} · event {event_id}",
        f"<{status_url}|Status page>" if status_url else "",
    ]
    return "\n".join(line for line in lines if line)


def slack(settings: SinkSettings, payload: dict[str, Any], status_url: str) -> Request:
    body = json.dumps({"text": slack_text(payload, status_url)}, separators=(",", ":")).encode()
    return Request(settings.url, body, _headers(settings, payload))


_PD_SEVERITY = {"WARN": "warning", "ERR": "critical"}


def pagerduty(settings: SinkSettings, payload: dict[str, Any], status_url: str) -> Request:
    """Events API v2: trigger on opened/updated, resolve on resolved; dedup_key = incident id."""
    message: dict[str, Any] = {
        "routing_key": settings.routing_key.reveal(),
        "dedup_key": payload["id"],
        "event_action": "resolve" if payload.get("event") == "resolved" else "trigger",
    }
    if message["event_action"] == "trigger":
        message["payload"] = {
            "summary": str(payload.get("summary", ""))[:1024],
            "source": f"lagd/{payload.get('cluster')}",
            "severity": _PD_SEVERITY.get(str(payload.get("severity")), "warning"),
            "timestamp": iso(payload.get("at")),
            "component": str(payload.get("cluster", "")),
            "group": ", ".join(sorted(payload.get("groups", {})))[:255],
            "class": "consumer lag",
            "custom_details": payload,
        }
        if status_url:
            message["links"] = [{"href": status_url, "text": "lagd status page"}]
    body = json.dumps(message, separators=(",", ":")).encode()
    return Request(settings.url or PAGERDUTY_EVENTS_URL, body, _headers(settings, payload))


_AM_SEVERITY = {"WARN": "warning", "ERR": "critical"}


def alert_labels(incident: dict[str, Any]) -> dict[str, str]:
    """The labels of an incident's alert: its identity in Alertmanager, fixed for the incident's
    life. A label that changed (severity, reason) would make a new alert and resolve the old one
    at the receivers while the incident is still open, so what changes goes in the annotations."""
    return {
        "alertname": ALERTNAME,
        "cluster": str(incident.get("cluster", "")),
        "incident_id": str(incident.get("id", "")),
    }


def alert(incident: dict[str, Any], now: int, ttl_ms: int, status_url: str, resolved: bool) -> dict[str, Any]:
    """One Alertmanager v2 alert: firing until now + ttl, or resolved (endsAt = now)."""
    severity = str(incident.get("severity", ""))
    out: dict[str, Any] = {
        "labels": alert_labels(incident),
        "annotations": {
            "severity": _AM_SEVERITY.get(severity, "warning"),
            "status": severity,
            "peak_severity": str(incident.get("peak_severity") or severity),
            "reason": str(incident.get("reason", "")),
            "summary": str(incident.get("summary", "")),
            "groups": ", ".join(sorted(incident.get("groups", {}))),
            "event_id": str(incident.get("event_id", "")),
        },
        "startsAt": iso(int(incident.get("opened_at") or now)),
        "endsAt": iso(now if resolved else now + ttl_ms),
    }
    if status_url:
        out["generatorURL"] = status_url
    return out


def alertmanager(alerts: list[dict[str, Any]], settings: SinkSettings, event_id: str = "") -> Request:
    """POST /api/v2/alerts with `alerts` (Alertmanager merges repeats of the same labels)."""
    url = settings.url.rstrip("/") + "/api/v2/alerts"
    headers = _headers(settings, {"event_id": event_id})
    return Request(url, json.dumps(alerts, separators=(",", ":")).encode(), headers)


def incident_url(status_page: str, incident_id: str) -> str:
    """The incident's own row on the status page (its timeline and groups), or "" without a page."""
    if not status_page:
        return ""
    return f"{status_page.split('#', 1)[0]}#incident-{quote(incident_id, safe='')}"


def request_for(settings: SinkSettings, payload: dict[str, Any], now: int, status_page: str) -> Request:
    """The request that delivers one incident event to the sink, linking the incident's own page."""
    status_url = incident_url(status_page, str(payload.get("id", "")))
    if settings.kind == "webhook":
        return webhook(settings, payload, status_url)
    if settings.kind == "slack":
        return slack(settings, payload, status_url)
    if settings.kind == "pagerduty":
        return pagerduty(settings, payload, status_url)
    resolved = payload.get("event") == "resolved"
    ttl_ms = int(settings.alert_ttl * 1000)
    return alertmanager([alert(payload, now, ttl_ms, status_url, resolved)], settings, str(payload.get("event_id")))


def status_page_url(configured: str, listen: str) -> str:
    """notify.status-page-url, else the status page at http.listen (an any-address shown as
    127.0.0.1: check-config refuses sinks then, see lagd.core.config.public_listen)."""
    if configured:
        return configured
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/"
