"""The incident engine: group verdict changes in, incident events out (pure, no I/O, no clock).

Why incidents: when a broker dies, hundreds of groups go bad in the same minute; operators
need one incident that grows and resolves, not one message per group.

Rules (times are ms, passed in by the caller):
- A group whose status reaches the configured severity (WARN or ERR; NOTFOUND counts as OK)
  is *bad*. A bad group that is in no open incident joins an open incident of its cluster
  whose last join is at most `correlation_window` old, preferring one that shares a topic,
  then one that shares an owner host, then the most recent; otherwise it opens a new one.
- One incident per cause: a bad broker member carries the partitions it led when it went bad
  (`GroupChange.led`, frozen, at most MAX_LED). A group or mirror going bad with a bad partition
  among them joins that broker's incident (within `cause_window`), before any rule above;
  one without never joins such an incident, and such a broker joins only another broker's
  incident. Its reason is the probe's (kept while it is a member), its summary
  "<broker's headline>: N consumer groups and M mirrored topics affected".
- `opened` goes out at once. A join or a change of the incident's severity (the worst
  current status of its groups) marks the incident dirty; at most one `updated` goes out per
  `update_interval` (the first immediately if the interval since the last event has passed,
  the rest coalesced and flushed by `tick`). A member's status changing without changing the
  severity is carried by the next event but causes none by itself (flap suppression).
- An incident resolves (on `tick`) when all its groups have been OK for `hold_time`;
  `resolved_at` is when the last group recovered. A member flapping bad-OK-bad within the
  hold time just keeps its incident open: no resolve and reopen.
- A group that goes bad again within `hold_time` after its incident resolved does not open
  a new incident: it reopens that one (same id, the sequence goes on) with an immediate
  `updated` event whose summary says so, and the incident must again hold OK for
  `hold_time` to resolve. A group that flaps with a period longer than the hold time thus
  keeps one incident id instead of opening a new incident every cycle. Only resolved
  incidents younger than `hold_time` can reopen; later failures open new incidents.
- A change that repeats the status the engine already knows for a group (for example a
  snapshot of current verdicts fed after a leadership takeover) causes no event; only its
  partition details are refreshed for the next event.

Ids are deterministic: incident `<cluster>-<opened_at>-<hash of first group>` (with a
`-<n>` suffix in the unlikely case that id is still remembered), event
`<incident_id>:<seq>`, so replaying the same input yields the same ids (outbox dedup).
A member is a consumer group or, with `kind="mirror"`, a mirrored topic judged by the mirror
job (the daemon names it `mirror:<mirror>/<topic>` on the mirror's target cluster); the rules
are the same for both, only the summary words differ. With `kind="broker"` the member is a broker
the end-to-end probe finds not taking writes or not serving reads (`broker:<cluster>/<id>`), the
incident's first reason the probe's. With `kind="cluster"` the member is lagd's
own view of a cluster (`cluster:<name>`): ERR while lagd cannot read it, so a broker outage is
one "cluster unreachable" incident while the groups' verdicts are held.

The engine state serialises to JSON per cluster (`dump_cluster`/`load_cluster`); the notifier
stores it as a header and a row per incident member, written when it changes (`save_rows`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lagd.core.model import GroupStatus, PartitionStatus
from lagd.core.times import about

EventKind = Literal["opened", "updated", "resolved"]
MemberKind = Literal["group", "mirror", "cluster", "broker"]
# (topic, partition, status, owner host) of a group's non-OK partitions, the status as its plain
# str (PartitionStatus.X.value): a tuple of atomic values, which the collector stops tracking at
# its first look. The feed keeps every group's latest change; with the enum members in them, at
# 1M group-partitions 666k such tuples made each full collection (every 5 minutes,
# lagd.runtime.collector) hold the loop 366 ms (bench_http, a probe of the collector).
PartitionInfo = tuple[str, int, str, str]

_RANK = {GroupStatus.NOTFOUND: 0, GroupStatus.OK: 0, GroupStatus.WARN: 1, GroupStatus.ERR: 2}


@dataclass(frozen=True, slots=True)
class GroupChange:
    """A group's verdict changed at `at` (one per change, from the evaluator)."""

    cluster: str
    group: str
    status: GroupStatus
    at: int
    partitions: tuple[PartitionInfo, ...] = ()
    topics: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    kind: MemberKind = "group"  # "mirror": a mirrored topic's verdict; "cluster": lagd cannot read the cluster
    # The member's own reason in words: a broker's, the end-to-end probe's verdict
    # (lagd.notify.broker_verdicts); a group's, its partitions with records lost or at risk
    # (lagd.evaluate.retention_view.retention_reason)
    reason: str = ""
    clear_at: int | None = None  # when the group's lag is expected to reach zero (lagd.evaluate.clearing)
    # "broker" going bad: the (topic, partition)s it led then (frozen: after a kill leadership
    # moves), at most MAX_LED of them; a group bad on one of them joins the broker's incident
    led: tuple[tuple[str, int], ...] = ()


# The partitions an incident event lists (the first groups' by name; `partitions_total` counts
# them all). A broker outage puts every group of a cluster in one incident: at a million
# group-partitions, listing each made one event about 100 MB.
MAX_EVENT_PARTITIONS = 1_000
# The partitions a broker member keeps as the ones it led (GroupChange.led), so that its stored
# state stays bounded: 20,000 pairs are about 0.5 MB of JSON.
MAX_LED = 20_000


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    """One message about an incident; `event_id` is unique and stable across replays."""

    event: EventKind
    event_id: str
    incident_id: str
    cluster: str
    severity: str
    opened_at: int
    resolved_at: int | None
    at: int
    groups: dict[str, str]
    partitions: tuple[dict[str, Any], ...]  # at most MAX_EVENT_PARTITIONS of them
    partitions_total: int  # how many partitions are not OK in all, listed or not
    reason: str
    summary: str
    peak_severity: str = ""  # the worst severity the incident reached so far ("" : that of `severity`)
    clears_at: int | None = None  # when every member not OK is expected to have caught up (open incidents)

    def payload(self) -> dict[str, Any]:
        """The JSON body published over MQTT and stored in the outbox (schema: incident-event)."""
        return {
            "event": self.event,
            "id": self.incident_id,
            "event_id": self.event_id,
            "cluster": self.cluster,
            "severity": self.severity,
            "opened_at": self.opened_at,
            "resolved_at": self.resolved_at,
            "at": self.at,
            "groups": dict(self.groups),
            "partitions": [dict(p) for p in self.partitions],
            "partitions_total": self.partitions_total,
            "reason": self.reason,
            "summary": self.summary,
            "peak_severity": self.peak_severity or self.severity,
            # how long the incident was open (resolved events only)
            "duration_ms": None if self.resolved_at is None else self.resolved_at - self.opened_at,
            "clears_at": self.clears_at,
        }


@dataclass(frozen=True, slots=True)
class Rules:
    """The engine's knobs, in ms (see NotifySettings)."""

    severity: Literal["WARN", "ERR"] = "WARN"
    correlation_window: int = 120_000
    hold_time: int = 300_000
    update_interval: int = 30_000
    # A group bad on a partition a bad broker led joins that broker's incident this long after its
    # last join: longer than correlation_window, because a group that stopped with the broker is
    # judged STOP only after its own silence limit (up to evaluator.pause-ceiling, 120 s, plus commit
    # intervals), well after the groups that STALL at once.
    cause_window: int = 300_000

    @classmethod
    def from_settings(cls, settings: Any) -> Rules:
        """From a NotifySettings (seconds) to Rules (ms)."""
        return cls(
            severity=settings.severity,
            correlation_window=int(settings.correlation_window * 1000),
            hold_time=int(settings.hold_time * 1000),
            update_interval=int(settings.update_interval * 1000),
            cause_window=int(settings.cause_window * 1000),
        )


@dataclass(slots=True)
class _Member:
    status: str
    ok_since: int | None
    # (topic, partition, status, owner) of each partition not OK: tuples of a str, an int and two
    # strs, in tuples, which the collector stops tracking at its first looks (a list each kept
    # every one of a large incident's partitions in its middle and full passes: 60k lists in a
    # middle collection of 87k objects at 1M group-partitions in bench_http; and in lists, a full
    # collection still visited each of them: 143 ms a pass at 1M with lists, 366 ms before that
    # with the statuses as enum members).
    partitions: tuple[tuple[str, int, str, str], ...] = ()
    topics: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    kind: str = "group"
    clear_at: int | None = None
    led: tuple[tuple[str, int], ...] = ()  # a broker's: the partitions it led when it went bad
    reason: str = ""  # a broker's: the probe's reason


@dataclass(slots=True)
class _Incident:
    id: str
    cluster: str
    opened_at: int
    last_join: int
    severity: str
    first_reason: str
    seq: int = 0
    last_event_at: int = 0
    dirty: bool = False
    members: dict[str, _Member] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    closed_at: int | None = None  # when it resolved (tick time), while it may still reopen
    peak: str = ""  # the worst severity it reached ("": not tracked yet, as in state saved before)
    # Derived from `members` and kept as they change (`put`), not stored: members by status, by
    # topic and by host, and how many are not healthy. A change then costs the same however
    # many groups the incident holds (a broker outage puts every group of a cluster in one),
    # where counting over the members made a reconcile of N groups take N^2 steps.
    statuses: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    topics: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    hosts: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    bad: int = field(default=0, init=False, repr=False)
    # the partitions bad broker members led -> how many such brokers; members by kind
    led: dict[tuple[str, int], int] = field(default_factory=dict, init=False, repr=False)
    kinds: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    # The members changed since the state was last saved: each member is its own row, written
    # when it changes (IncidentEngine.save_rows). A broker outage puts every group of a cluster
    # in one incident; storing every member at each flush was 37 MB at 10,000 groups of 100 bad
    # partitions, and encoding them all each time held the loop 0.3-1.1 s.
    unsaved: set[str] = field(default_factory=set, init=False, repr=False)

    def put(self, group: str, member: _Member) -> None:
        """Make `member` the group's entry (a new member, or its new state)."""
        old = self.members.get(group)
        if old is not None:
            self._count(old, -1)
        self.members[group] = member
        self.unsaved.add(group)
        self._count(member, 1)

    def _count(self, m: _Member, step: int) -> None:
        _bump(self.statuses, m.status, step)
        for topic in m.topics:
            _bump(self.topics, topic, step)
        for host in m.hosts:
            _bump(self.hosts, host, step)
        _bump(self.kinds, m.kind, step)
        if m.ok_since is None:
            self.bad += step
            for tp in m.led:
                _bump(self.led, tp, step)

    def cause(self) -> str:
        """The reason of the broker members that led partitions when they went bad ("": none)."""
        if "broker" not in self.kinds:
            return ""
        causes = sorted((g, m.reason) for g, m in self.members.items() if m.led)
        return _few([reason or g for g, reason in causes], limit=2)


def _bump(counts: dict[Any, int], key: Any, step: int) -> None:
    n = counts.get(key, 0) + step
    if n:
        counts[key] = n
    else:
        del counts[key]


@dataclass(slots=True)
class _Cluster:
    open: dict[str, _Incident] = field(default_factory=dict)
    # incidents resolved within hold_time, which a recurring member reopens
    closed: dict[str, _Incident] = field(default_factory=dict)
    # group -> [incident id, time of the resolve] for groups whose incident resolved within hold_time
    recent: dict[str, list[Any]] = field(default_factory=dict)
    # Saving (`save_rows`): the incidents forgotten since the last save, whose member rows go,
    # and whether the next save writes every member (a new state, one loaded with its members
    # inline, a failed save).
    gone: set[str] = field(default_factory=set)
    full: bool = True

    def incidents(self) -> list[_Incident]:
        """Every incident the state holds: the open ones, then the recently resolved."""
        return [*self.open.values(), *self.closed.values()]


@dataclass(slots=True)
class StateRows:
    """A cluster's state as the notifier stores it: `header`, JSON text of `dump_cluster` with
    every incident's members left out, and member rows (incident id, member, JSON text of its
    stored form). With `full`, `members` is every member and replaces all the cluster's rows;
    else it is the members changed since the last save, and `gone` the incidents whose rows go.

    The member rows are encoded by `encode`, a few at a time: a full save of a cluster-wide
    incident (after a failed one) is thousands of groups of many partitions each, hundreds of
    ms of encoding that the caller hands the loop back between. Until then `members` holds
    only those encoded so far; the engine must not change in between (the notifier's one task
    owns it)."""

    header: str
    members: list[tuple[str, str, str]]
    gone: list[str]
    full: bool
    unencoded: list[tuple[str, str, _Member]] = field(default_factory=list)
    _next: int = 0  # where in `unencoded` the next step starts (emptied once all are encoded)

    def encode(self, limit: int | None = None) -> bool:
        """Encode up to `limit` more member rows (all: None); True while some remain."""
        todo, start = self.unencoded, self._next
        end = len(todo) if limit is None else min(start + limit, len(todo))
        dumps = json.dumps
        self.members += [(i, group, dumps(_member_fields(m))) for i, group, m in todo[start:end]]
        if end == len(todo):
            todo.clear()
            self._next = 0
            return False
        self._next = end
        return True


def with_members(header: dict[str, Any], rows: Iterable[tuple[str, str, Any]]) -> dict[str, Any]:
    """The state as `dump_cluster` has it, from a `StateRows` header and its member rows
    (incident id, member, stored form) as read back; incidents stored with their members
    inline (state saved before member rows) keep those."""
    by_incident: dict[str, dict[str, Any]] = {}
    for incident_id, member, body in rows:
        by_incident.setdefault(incident_id, {})[member] = body
    out = dict(header)
    for key in ("open", "closed"):
        if key in out:
            out[key] = [
                raw if "members" in raw else {**raw, "members": by_incident.get(raw["id"], {})} for raw in out[key]
            ]
    return out


def _bad(status: str, rules: Rules) -> bool:
    return _RANK[GroupStatus(status)] >= _RANK[GroupStatus(rules.severity)]


def _worst(statuses: list[str]) -> str | None:
    bad = [s for s in statuses if _RANK[GroupStatus(s)] > 0]
    return max(bad, key=lambda s: _RANK[GroupStatus(s)]) if bad else None


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


class IncidentEngine:
    """The state machine; `apply` and `tick` return the events to record, oldest first."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self._clusters: dict[str, _Cluster] = {}

    # --- input ------------------------------------------------------------------------

    def apply(self, change: GroupChange) -> list[IncidentEvent]:
        """Feed one verdict change; returns `opened` or immediate `updated` events."""
        cl = self._clusters.setdefault(change.cluster, _Cluster())
        status = str(GroupStatus(change.status))
        member = _Member(
            status=status,
            ok_since=None if _bad(status, self.rules) else change.at,
            partitions=tuple((t, p, str(s), h) for t, p, s, h in change.partitions),
            topics=tuple(sorted(set(change.topics) | {t for t, _, _, _ in change.partitions})),
            hosts=tuple(sorted(set(change.hosts) | {h for _, _, _, h in change.partitions if h})),
            kind=change.kind,
            clear_at=change.clear_at,
            led=tuple((str(t), int(p)) for t, p in change.led[:MAX_LED]) if change.kind == "broker" else (),
            reason=change.reason if change.kind == "broker" else "",
        )
        current = next((inc for inc in cl.open.values() if change.group in inc.members), None)
        if current is not None:
            old = current.members[change.group]
            if member.ok_since is not None and old.ok_since is not None:
                member.ok_since = old.ok_since  # still healthy: keep when it recovered
            if old.led:  # a broker keeps what it led when it went bad, and why, while in the incident
                member.led, member.reason = old.led, old.reason
            current.put(change.group, member)
            if old.status == status:
                if old.clear_at != member.clear_at:
                    current.dirty = True  # a new resolve estimate: told in the next update
                    return self._maybe_update(current, change.at)
                return []  # the status it already had: no news
            self._restate(current)
            return self._maybe_update(current, change.at)
        if member.ok_since is not None:
            return []  # healthy and in no incident: nothing to say
        recurrence = ""
        prior = cl.recent.get(change.group)
        if prior is not None and change.at - int(prior[1]) <= self.rules.hold_time:
            closed = cl.closed.get(str(prior[0]))
            if closed is not None:
                return [self._reopen(cl, closed, change.group, member, change.at)]
            recurrence = f"recurrence of {prior[0]}"  # state from before incidents could reopen
        target, reason = self._correlate(cl, change.at, member)
        if target is None:
            first = _first_reason(change) + (f", {recurrence}" if recurrence else "")
            inc = _Incident(
                id=self._new_id(cl, f"{change.cluster}-{change.at}-{_short_hash(change.group)}"),
                cluster=change.cluster,
                opened_at=change.at,
                last_join=change.at,
                severity=status,
                first_reason=first,
            )
            inc.put(change.group, member)
            cl.open[inc.id] = inc
            return [self._emit(inc, "opened", change.at)]
        target.put(change.group, member)
        target.last_join = change.at
        key = reason + (f", {recurrence}" if recurrence else "")
        target.reasons[key] = target.reasons.get(key, 0) + 1
        target.dirty = True
        self._restate(target)
        return self._maybe_update(target, change.at)

    def tick(self, now: int, clusters: Collection[str] | None = None) -> list[IncidentEvent]:
        """Flush coalesced updates and resolve incidents whose groups held OK long enough.

        `clusters` limits the tick to those clusters (the ones this instance leads); the
        others are left exactly as they are.
        """
        out: list[IncidentEvent] = []
        for name, cl in self._clusters.items():
            if clusters is not None and name not in clusters:
                continue
            for inc in sorted(cl.open.values(), key=lambda i: (i.opened_at, i.id)):
                if not inc.bad:  # every member healthy again: since when?
                    last = max(int(m.ok_since or 0) for m in inc.members.values())
                    if now - last >= self.rules.hold_time:
                        out.append(self._emit(inc, "resolved", now, resolved_at=last))
                        del cl.open[inc.id]
                        inc.closed_at = now
                        cl.closed[inc.id] = inc
                        for group in inc.members:
                            cl.recent[group] = [inc.id, now]
                        continue
                out.extend(self._maybe_update(inc, now))
            for group, (_, resolved_at) in list(cl.recent.items()):
                if now - int(resolved_at) > self.rules.hold_time:
                    del cl.recent[group]
            for inc_id, inc in list(cl.closed.items()):
                if inc.closed_at is None or now - inc.closed_at > self.rules.hold_time:
                    del cl.closed[inc_id]
                    cl.gone.add(inc_id)
        return out

    # --- views ------------------------------------------------------------------------

    def open_incidents(self, cluster: str) -> list[str]:
        """Ids of the cluster's open incidents, oldest first."""
        cl = self._clusters.get(cluster)
        return [] if cl is None else sorted(cl.open, key=lambda i: (cl.open[i].opened_at, i))

    def clusters(self) -> list[str]:
        return sorted(self._clusters)

    def members(self, cluster: str) -> dict[str, str]:
        """The groups of the cluster's open incidents and the status the engine knows for each."""
        cl = self._clusters.get(cluster)
        if cl is None:
            return {}
        return {g: m.status for inc in cl.open.values() for g, m in inc.members.items()}

    def drop_cluster(self, cluster: str) -> None:
        """Forget everything about `cluster` (before loading another writer's state)."""
        self._clusters.pop(cluster, None)

    # --- persistence ------------------------------------------------------------------

    def save_rows(self, cluster: str, extra: Mapping[str, str]) -> StateRows:
        """The cluster's state to store now, `extra`'s keys added to the header: every member
        the first time (and after `save_failed`), later only those changed since, to encode
        (`StateRows.encode`) before the engine changes again. The engine takes it as saved: call
        `save_failed` if storing it fails."""
        cl = self._clusters.get(cluster, _Cluster())
        incidents = cl.incidents()
        unencoded = [
            (i.id, group, i.members[group]) for i in incidents for group in (i.members if cl.full else i.unsaved)
        ]
        for i in incidents:
            i.unsaved = set()
        header = {
            "version": 1,
            "members": "rows",  # the members are rows of their own (`with_members` puts them back)
            "open": [_dump_incident(i, members=False) for i in cl.open.values()],
            "closed": [_dump_incident(i, members=False) for i in cl.closed.values()],
            "recent": {g: list(v) for g, v in cl.recent.items()},
            **extra,
        }
        rows = StateRows(json.dumps(header), [], sorted(cl.gone), cl.full, unencoded)
        cl.gone = set()
        cl.full = False
        return rows

    def save_failed(self, cluster: str) -> None:
        """The last `save_rows` was not stored: the next one writes every member again."""
        cl = self._clusters.get(cluster)
        if cl is not None:
            cl.full = True

    def dump_cluster(self, cluster: str) -> dict[str, Any]:
        """The cluster's state as JSON-ready data (stored in incident_engine_state)."""
        cl = self._clusters.get(cluster, _Cluster())
        return {
            "version": 1,
            "open": [_dump_incident(i) for i in cl.open.values()],
            "closed": [_dump_incident(i) for i in cl.closed.values()],
            "recent": {g: list(v) for g, v in cl.recent.items()},
        }

    def load_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        """Restore what `dump_cluster` produced; raises ValueError on a foreign shape."""
        if data.get("version") != 1:
            raise ValueError(
                f"incident engine state for cluster {cluster!r} has version {data.get('version')!r}, expected 1; "
                "delete its row in incident_engine_state to start afresh"
            )
        cl = _Cluster()
        for raw in data["open"]:
            inc = _load_incident(raw)
            cl.open[inc.id] = inc
        for raw in data.get("closed", []):  # absent in state saved before incidents could reopen
            inc = _load_incident(raw)
            cl.closed[inc.id] = inc
        cl.recent = {str(g): list(v) for g, v in data["recent"].items()}
        if data.get("members") == "rows":  # a save_rows header with its member rows: as stored, none unsaved
            cl.full = False
            for inc in cl.incidents():
                inc.unsaved = set()
        self._clusters[cluster] = cl

    def dump(self) -> dict[str, Any]:
        """Every cluster's state (for tests and snapshots)."""
        return {c: self.dump_cluster(c) for c in self.clusters()}

    @classmethod
    def load(cls, rules: Rules, data: dict[str, Any]) -> IncidentEngine:
        engine = cls(rules)
        for cluster, state in data.items():
            engine.load_cluster(cluster, state)
        return engine

    # --- internals ----------------------------------------------------------------------

    @staticmethod
    def _new_id(cl: _Cluster, base: str) -> str:
        """`base`, or `base-<n>` if an incident the engine still remembers already has it."""
        taken = cl.open.keys() | cl.closed.keys() | {str(v[0]) for v in cl.recent.values()}
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def _reopen(self, cl: _Cluster, inc: _Incident, group: str, member: _Member, at: int) -> IncidentEvent:
        """A member of a recently resolved incident went bad again: the incident reopens."""
        del cl.closed[inc.id]
        for g, (inc_id, _) in list(cl.recent.items()):
            if inc_id == inc.id:
                del cl.recent[g]
        inc.closed_at = None
        inc.put(group, member)
        inc.last_join = at
        self._restate(inc)
        cl.open[inc.id] = inc
        return self._emit(inc, "updated", at, note="reopened within the hold time")

    def _correlate(self, cl: _Cluster, at: int, member: _Member) -> tuple[_Incident | None, str]:
        """The open incident a newly bad group joins, and why (None: open a new one)."""
        fresh = [i for i in cl.open.values() if at - i.last_join <= self.rules.correlation_window]
        if member.kind in ("group", "mirror"):
            # A broker's incident is the cause of a member bad on a partition that broker led, and
            # of no other: unrelated trouble in the same minutes goes by the rules below.
            causes = [i for i in cl.open.values() if i.led and at - i.last_join <= self.rules.cause_window]
            led = [(i, sorted({(t, p) for t, p, _, _ in member.partitions if (t, p) in i.led})) for i in causes]
            led = [(i, hit) for i, hit in led if hit]
            if led:
                inc, hit = max(led, key=lambda h: (h[0].last_join, h[0].id))
                return inc, f"partition {hit[0][0]}/{hit[0][1]} led by a broker that went bad"
            fresh = [i for i in fresh if not i.led]
        elif member.led:  # a broker that led partitions: its own incident, or another broker's
            fresh = [i for i in fresh if "broker" in i.kinds]
        if not fresh:
            return None, ""

        def shared(inc: _Incident, attr: str) -> list[str]:
            counts: dict[str, int] = getattr(inc, attr)  # the incident's members by topic / host
            return sorted(counts.keys() & set(getattr(member, attr)))

        for attr, label in (("topics", "topic"), ("hosts", "host")):
            hits = [(i, shared(i, attr)) for i in fresh]
            hits = [(i, s) for i, s in hits if s]
            if hits:
                inc, common = max(hits, key=lambda h: (h[0].last_join, h[0].id))
                return inc, f"same {label} {common[0]}"
        inc = max(fresh, key=lambda i: (i.last_join, i.id))
        return inc, TOGETHER

    def _restate(self, inc: _Incident) -> None:
        worst = _worst(list(inc.statuses))
        if worst is not None and worst != inc.severity:
            inc.severity = worst
            inc.dirty = True
        inc.peak = _peak(inc.peak, inc.severity)

    def _maybe_update(self, inc: _Incident, now: int) -> list[IncidentEvent]:
        if inc.dirty and now - inc.last_event_at >= self.rules.update_interval:
            return [self._emit(inc, "updated", now)]
        return []

    def _emit(
        self, inc: _Incident, kind: EventKind, at: int, resolved_at: int | None = None, note: str = ""
    ) -> IncidentEvent:
        # An incident's events never go back in time: a change judged before a tick resolved the
        # incident, taken after it, reopens it with the resolve's time, not its own older one.
        at = max(at, inc.last_event_at)
        inc.seq += 1
        inc.peak = _peak(inc.peak, inc.severity)
        inc.last_event_at = at
        inc.dirty = False
        names = sorted(inc.members)
        groups = {g: inc.members[g].status for g in names}
        listed: list[dict[str, Any]] = []
        total = 0
        for g in names:
            parts = inc.members[g].partitions
            total += len(parts)
            room = MAX_EVENT_PARTITIONS - len(listed)
            if room > 0:
                listed.extend(
                    {"group": g, "topic": p[0], "partition": p[1], "status": p[2], "owner": p[3]} for p in parts[:room]
                )
        reason = self._reason(inc)
        bad = inc.bad
        what = _members_noun(set(inc.kinds))
        cause = inc.cause() if inc.kinds.get("group") or inc.kinds.get("mirror") else ""
        if cause:
            # one incident per cause: "broker 2 of prod not taking writes: 14 consumer groups and
            # 1 mirrored topic affected"; resolved, the same words, not the broker counted among
            # the groups ("2 consumer group(s)" for a broker and a group)
            affected = " and ".join(
                f"{n} {noun}{'' if n == 1 else 's'}"
                for n, noun in (
                    (inc.kinds.get("group", 0), "consumer group"),
                    (inc.kinds.get("mirror", 0), "mirrored topic"),
                )
                if n
            )
            headline = cause.split(": ", 1)[0]
            if kind == "resolved":
                mins = ((resolved_at or at) - inc.opened_at) // 1000
                summary = (
                    f"resolved: {headline}: {affected} healthy again after {mins // 60}m{mins % 60:02d}s, "
                    f"peaked at {inc.peak}"
                )
            else:
                summary = f"{inc.severity}: {headline}: {affected} affected"
            if note:
                summary = f"{note}: {summary}"
        elif what == "view(s) of lagd":
            if kind == "resolved":
                mins = ((resolved_at or at) - inc.opened_at) // 1000
                summary = f"resolved: lagd reads cluster {inc.cluster} again after {mins // 60}m{mins % 60:02d}s"
            else:
                summary = f"{inc.severity}: lagd cannot read cluster {inc.cluster}; group verdicts are held ({reason})"
        elif kind == "resolved":
            mins = ((resolved_at or at) - inc.opened_at) // 1000
            summary = (
                f"resolved: {len(groups)} {what} on cluster {inc.cluster} healthy again "
                f"after {mins // 60}m{mins % 60:02d}s, peaked at {inc.peak} ({reason})"
            )
        else:
            summary = (
                f"{inc.severity}: {bad} of the {len(groups)} {what} in this incident "
                f"{'failing' if what == 'broker(s)' else 'lagging'} "
                f"on cluster {inc.cluster} ({reason})"
            )
            if note:
                summary = f"{note}: {summary}"
        # when every lagging member is expected to have caught up (open incidents of groups only)
        clears_at = _clears_at(inc) if kind != "resolved" and what != "view(s) of lagd" else None
        if clears_at is not None:
            summary += f"; clears in {about(max(0.0, (clears_at - at) / 1000.0))}"
        return IncidentEvent(
            event=kind,
            event_id=f"{inc.id}:{inc.seq}",
            incident_id=inc.id,
            cluster=inc.cluster,
            severity=inc.severity,
            opened_at=inc.opened_at,
            resolved_at=resolved_at,
            at=at,
            groups=groups,
            partitions=tuple(listed),
            partitions_total=total,
            reason=reason,
            summary=summary,
            peak_severity=inc.peak,
            clears_at=clears_at,
        )

    @staticmethod
    def _reason(inc: _Incident) -> str:
        """What every member shares, recomputed from the members as they join: the topics all
        of them consume, else the hosts all of them run on, else only the cluster. An incident
        of one member keeps the reason it opened with."""
        if len(inc.members) < 2:
            return inc.first_reason
        cause = inc.cause()
        if cause:
            return cause
        for attr, label in (("topics", "topic"), ("hosts", "host")):
            common = _shared(getattr(m, attr) for m in inc.members.values())
            if common:
                return f"same {label}{'s' if len(common) > 1 else ''} {_few(sorted(common))}"
        return TOGETHER


def _shared(each: Iterator[tuple[str, ...]]) -> set[str]:
    """What every one of `each` holds; stops at the first member that leaves nothing shared, so
    an incident of a whole cluster's groups on different topics is not walked whole at each
    event (6,400 members: 3.3 ms of the 5-11 ms an event took)."""
    common = set(next(each, ()))
    for names in each:
        if not common:
            break
        common.intersection_update(names)
    return common


def _few(names: list[str], limit: int = 3) -> str:
    """`a, b, c and 2 more`: a reason stays one short line however much is shared."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def _peak(peak: str, severity: str) -> str:
    """The worse of the peak so far and `severity`."""
    if not peak or _RANK[GroupStatus(severity)] > _RANK[GroupStatus(peak)]:
        return severity
    return peak


# The reason of members that share no topic and no owner host: they only went bad at the same time.
TOGETHER = "went bad together, no topic or host in common"


def _clears_at(inc: _Incident) -> int | None:
    """When the incident's members are expected to have caught up: the latest of their clear
    times (those of members back to OK that still work a backlog off included), None unless
    each member not OK has one (a group falling behind or stopped does not clear)."""
    latest: int | None = None
    for m in inc.members.values():
        if m.clear_at is None:
            if m.ok_since is None:
                return None
            continue
        latest = m.clear_at if latest is None else max(latest, m.clear_at)
    return latest


def _first_reason(change: GroupChange) -> str:
    if change.kind == "broker":
        return change.reason or f"broker {change.group}"
    if change.kind == "cluster":
        return f"cluster {change.cluster} unreachable"
    what = f"{'mirrored topic' if change.kind == 'mirror' else 'group'} {change.group}"
    return f"{what}: {change.reason}" if change.reason else what


def _members_noun(kinds: set[str]) -> str:
    if kinds == {"cluster"}:
        return "view(s) of lagd"
    if kinds == {"mirror"}:
        return "mirrored topic(s)"
    if kinds == {"broker"}:
        return "broker(s)"
    if "mirror" in kinds:
        return "consumer group(s) and mirrored topic(s)"
    return "consumer group(s)"


def _member_fields(m: _Member) -> dict[str, Any]:
    """A member as stored, its tuples as they are, to be written as JSON text (which writes a
    tuple as a list, so the text is the same): a list per partition was 100 objects a member
    for the young collections to count while a save of thousands of members is encoded."""
    out: dict[str, Any] = {
        "status": m.status,
        "ok_since": m.ok_since,
        "partitions": m.partitions,
        "topics": m.topics,
        "hosts": m.hosts,
    }
    if m.kind != "group":
        out["kind"] = m.kind  # absent for groups: state saved before mirrors had none
    if m.clear_at is not None:
        out["clear_at"] = m.clear_at  # absent unless predicted (and in state saved before)
    if m.led:
        out["led"] = m.led  # a broker's, at most MAX_LED pairs
    if m.reason:
        out["reason"] = m.reason
    return out


def _dump_member(m: _Member) -> dict[str, Any]:
    """A member as JSON-ready data, as it reads back."""
    out = _member_fields(m)
    out["partitions"] = [list(p) for p in m.partitions]
    out["topics"] = list(m.topics)
    out["hosts"] = list(m.hosts)
    if m.led:
        out["led"] = [list(tp) for tp in m.led]
    return out


def _dump_incident(i: _Incident, members: bool = True) -> dict[str, Any]:
    """The incident as stored; without its members (`members=False`) for `save_rows`, which
    stores them as rows of their own."""
    out: dict[str, Any] = {
        "id": i.id,
        "cluster": i.cluster,
        "opened_at": i.opened_at,
        "last_join": i.last_join,
        "severity": i.severity,
        "first_reason": i.first_reason,
        "seq": i.seq,
        "last_event_at": i.last_event_at,
        "dirty": i.dirty,
        "reasons": dict(i.reasons),
    }
    if members:
        out["members"] = {g: _dump_member(m) for g, m in i.members.items()}
    if i.closed_at is not None:
        out["closed_at"] = i.closed_at
    if i.peak:
        out["peak"] = i.peak
    return out


def open_members(cluster: str, data: dict[str, Any]) -> dict[str, GroupChange]:
    """The groups not OK in the cluster's open incidents, from its stored engine state (see
    IncidentEngine.dump_cluster), each as the change that put it there: its status and its
    partitions that were not OK, as of the incident's opening at the latest. A restarted lagd
    starts judging them from these (VerdictWatch.take_over): a partition held WARN by
    hysteresis stays WARN instead of resolving the incident it is in."""
    out: dict[str, GroupChange] = {}
    for raw in data.get("open", ()):
        inc = _load_incident(raw)
        for group, m in inc.members.items():
            if m.kind != "group" or m.status in ("OK", "NOTFOUND"):
                continue
            out[group] = GroupChange(
                cluster,
                group,
                GroupStatus(m.status),
                inc.opened_at,
                tuple((str(t), int(p), PartitionStatus(st).value, str(h)) for t, p, st, h in m.partitions),
                tuple(m.topics),
                tuple(m.hosts),
            )
    return out


def in_open_incident(data: dict[str, Any], member: str) -> bool:
    """Is `member` in one of the open incidents of a cluster's stored engine state (whatever its
    status there)?"""
    return any(member in raw.get("members", {}) for raw in data.get("open", ()))


def _load_incident(raw: dict[str, Any]) -> _Incident:
    inc = _Incident(
        id=raw["id"],
        cluster=raw["cluster"],
        opened_at=int(raw["opened_at"]),
        last_join=int(raw["last_join"]),
        severity=raw["severity"],
        first_reason=raw["first_reason"],
        seq=int(raw["seq"]),
        last_event_at=int(raw["last_event_at"]),
        dirty=bool(raw["dirty"]),
        reasons={str(k): int(v) for k, v in raw["reasons"].items()},
        closed_at=None if raw.get("closed_at") is None else int(raw["closed_at"]),
        peak=str(raw.get("peak", "")),
    )
    for g, m in raw["members"].items():
        inc.put(
            g,
            _Member(
                status=m["status"],
                ok_since=None if m["ok_since"] is None else int(m["ok_since"]),
                partitions=tuple(tuple(p) for p in m["partitions"]),
                topics=tuple(m["topics"]),
                hosts=tuple(m["hosts"]),
                kind=str(m.get("kind", "group")),
                clear_at=None if m.get("clear_at") is None else int(m["clear_at"]),
                led=tuple((str(t), int(p)) for t, p in m.get("led", ())),
                reason=str(m.get("reason", "")),
            ),
        )
    return inc
