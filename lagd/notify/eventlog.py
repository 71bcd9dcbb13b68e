"""What on-call reads in the log about incidents and group statuses (one JSON line each).

Why here: the outbox and the sinks carry incidents to receivers, but the log is what an
operator greps after the fact (`journalctl -u lagd -o cat | jq`). Every incident event and
every group status change is one line with the same field names (cluster, group or groups,
incident_id, event_id, status, reason), so one `jq` filter follows an incident from its
first bad group to its resolve.

Why a budget: a broker outage flips every group of a cluster in one pass; a line per group
would bury the rest of the log. Each cluster may log `burst` group lines per `every_ms`; the
changes beyond that are counted and said in one line when the window ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lagd.core.model import GroupStatus
from lagd.evaluate.snapshot import group_reason
from lagd.notify.incidents import IncidentEvent
from lagd.runtime import logs

log = logs.get(__name__)

GROUP_LINES_BURST = 20
GROUP_LINES_EVERY_MS = 60_000


@dataclass(slots=True)
class LineBudget:
    """At most `burst` lines per key per `every_ms` window; the rest are counted (pure: the
    caller passes the time)."""

    burst: int = GROUP_LINES_BURST
    every_ms: int = GROUP_LINES_EVERY_MS
    _windows: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # key: (start, logged, held back)

    def allow(self, key: str, now: int) -> bool:
        start, logged, held = self._windows.get(key, (now, 0, 0))
        if now - start >= self.every_ms:
            start, logged = now, 0  # `held` is carried on, said by the next `overdue`: never lost
        if logged < self.burst:
            self._windows[key] = (start, logged + 1, held)
            return True
        self._windows[key] = (start, logged, held + 1)
        return False

    def overdue(self, now: int) -> list[tuple[str, int]]:
        """Keys whose window ended with lines held back, and how many; their count restarts."""
        out: list[tuple[str, int]] = []
        for key, (start, _logged, held) in list(self._windows.items()):
            if now - start < self.every_ms:
                continue
            if held:
                out.append((key, held))
            del self._windows[key]
        return out


def group_status_changed(
    budget: LineBudget,
    cluster: str,
    group: str,
    before: GroupStatus | None,
    status: GroupStatus,
    not_ok: Iterable[str],
    at: int,
    counted: bool = True,
    retention: str = "",
) -> None:
    """One line for a group's new status, saying why (`group_reason` of its partitions not OK,
    after `retention`: its partitions with records lost or at risk in words); none for a group
    first seen OK (nothing changed), none past the cluster's budget."""
    if before is None and status in (GroupStatus.OK, GroupStatus.NOTFOUND):
        return
    if not budget.allow(cluster, at):
        return
    not_ok = list(not_ok)
    log.info(
        "group status changed",
        cluster=cluster,
        group=group,
        status=status.value,
        previous=before.value if before is not None else None,
        reason=_with_retention(retention, group_reason(status, not_ok, counted) if not retention or not_ok else ""),
    )


def _with_retention(retention: str, reason: str) -> str:
    return "; ".join(x for x in (retention, reason) if x)


def held_back(budget: LineBudget, now: int) -> None:
    """Say how many group status changes a cluster did not log in its last window."""
    for cluster, n in budget.overdue(now):
        log.info(
            "group status changes not logged one by one: too many at once",
            cluster=cluster,
            not_logged=n,
            hint="the incident lines name every group; GET /v3/kafka/<cluster>/consumer lists their statuses",
        )


def incident_event(ev: IncidentEvent) -> None:
    """One line per incident event recorded (opened, updated, resolved)."""
    fields: dict[str, Any] = {
        "cluster": ev.cluster,
        "incident_id": ev.incident_id,
        "event_id": ev.event_id,
        "status": ev.severity,
        "reason": ev.reason,
        "groups": _few(ev.groups),
        "group_count": len(ev.groups),
        "summary": ev.summary,
    }
    if len(ev.groups) == 1:
        fields["group"] = next(iter(ev.groups))
    if ev.event == "resolved":
        fields["peak_status"] = ev.peak_severity or ev.severity
    log.info(f"incident {ev.event}", **fields)


def _few(groups: dict[str, str], limit: int = 20) -> dict[str, str]:
    """The first `limit` groups with their statuses (an event of a whole cluster has thousands)."""
    return {g: groups[g] for g in sorted(groups)[:limit]}
