"""The transactional outbox: incident events and their state in one Postgres transaction.

Why: an event is only ever published after it is durably stored together with the engine
state that produced it, so neither an MQTT outage nor a daemon restart loses or invents one.
Rows carry a unique `event_id`; recording the same events twice is a no-op.

Why a fence: event ids are `<incident_id>:<seq>`, so two writers continuing from the same
stored state would issue the same ids for different events, and the second would be
discarded as a "duplicate". A writer that passes a `Fence` only records if the stored state
is still the one it continued from (its `saved_by` token), in the same transaction; so every
recorded state descends from the previous one and an event id is never reused for another
event. A writer that loses the race gets `StateConflict` and must reload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from sqlalchemy import Text, bindparam, cast, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from lagd.core.model import GroupStatus
from lagd.db.schema import incident_engine_state, incident_members, incidents, outbox
from lagd.notify.incidents import GroupChange, IncidentEvent, StateRows, with_members
from lagd.runtime.clock import Clock, wall_ms

SAVED_BY = "saved_by"  # key of the writer's token inside the stored engine state


class StateConflict(Exception):
    """The stored engine state is not the one the writer continued from: another writer saved since."""


@dataclass(frozen=True, slots=True)
class Fence:
    """The stored engine state a writer continues from: none (`exists` False) or the one saved with `token`."""

    exists: bool
    token: str | None = None

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> Fence:
        """The fence that matches a state as loaded (None: no row)."""
        if stored is None:
            return cls(False)
        token = stored.get(SAVED_BY)
        return cls(True, None if token is None else str(token))


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One message waiting for (or done with) MQTT delivery."""

    id: int
    event_id: str
    topic: str
    payload: str  # the message's JSON as Postgres writes its jsonb (keys in its order, ", " and ": ")
    retain: bool


def _topic_part(text: str) -> str:
    """A name made safe as one MQTT topic level ('/', '+', '#' and others percent-encoded)."""
    return quote(text, safe="-_.~@:=")


def incident_topic(prefix: str, cluster: str, incident_id: str) -> str:
    return f"{prefix}/{_topic_part(cluster)}/incidents/{_topic_part(incident_id)}"


def group_status_topic(prefix: str, cluster: str, group: str) -> str:
    return f"{prefix}/{_topic_part(cluster)}/groups/{_topic_part(group)}/status"


# A retained row carrying this key is published as an empty retained message, which makes the
# broker forget the topic's retained message (a deleted or expired group leaves no stale status).
CLEAR = "$clear"


def availability_topic(prefix: str, cluster: str) -> str:
    """`<prefix>/<cluster>/status`: "online" / "offline" (retained; the last will says offline)."""
    return f"{prefix}/{_topic_part(cluster)}/status"


def group_status_message(prefix: str, change: GroupChange) -> tuple[str, dict[str, Any]]:
    """The retained current-verdict message for dashboards; a group gone (NOTFOUND: deleted or
    expired) clears its topic instead."""
    topic, body = (
        group_status_topic(prefix, change.cluster, change.group),
        {
            "cluster": change.cluster,
            "group": change.group,
            "status": str(change.status),
            "at": change.at,
            "partitions": [
                {"topic": t, "partition": p, "status": str(s), "owner": h} for t, p, s, h in change.partitions
            ],
        },
    )
    if change.status == GroupStatus.NOTFOUND:
        body[CLEAR] = True
    return topic, body


@dataclass(frozen=True, slots=True)
class Retained:
    """A retained message as the outbox stores it: its id (a hash of topic and body, so the same
    status twice is one row) and its payload as JSON text, `event_id` included."""

    event_id: str
    topic: str
    payload: str


def retained_row(topic: str, payload: dict[str, Any]) -> Retained:
    """The row of a retained message, encoded once, when its change is taken: a burst of changes
    (every group of a cluster going bad at once) encoded together at a flush held the loop
    50-80 ms per 300 statuses of 100 partitions."""
    return _retained(topic, json.dumps(payload, sort_keys=True, separators=(",", ":")))


def _retained(topic: str, body: str) -> Retained:
    """The row of a retained message whose body is its compact JSON with sorted keys."""
    event_id = "status:" + hashlib.sha256(f"{topic}\n{body}".encode()).hexdigest()[:32]
    tail = f'"event_id":{json.dumps(event_id)}}}'
    return Retained(event_id, topic, f"{body[:-1]},{tail}" if body != "{}" else "{" + tail)


def status_row(prefix: str, change: GroupChange) -> Retained:
    """`group_status_message` as the row the outbox stores."""
    topic = group_status_topic(prefix, change.cluster, change.group)
    body = _status_body(change)
    if body is None:
        return retained_row(*group_status_message(prefix, change))
    return _retained(topic, body)


_string = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (ensure_ascii)


def _status_body(change: GroupChange) -> str | None:
    """`group_status_message`'s body as json.dumps writes it (compact, keys sorted), written
    directly: the row of a group of 100 bad partitions in 42 us, against 110 us through a dict per
    partition, sorted and encoded, where a large estate changes thousands of groups at each pass.
    None for a change of unusual types (an int subclass, a str subclass): json.dumps writes that one."""
    cluster, group, status, at = change.cluster, change.group, str(change.status), change.at
    if type(at) is not int or type(cluster) is not str or type(group) is not str:
        return None
    parts = []
    for topic, partition, part_status, owner in change.partitions:
        if type(partition) is not int or type(topic) is not str or type(owner) is not str:
            return None
        parts.append(
            f'{{"owner":{_string(owner)},"partition":{partition},"status":{_string(str(part_status))},'
            f'"topic":{_string(topic)}}}'
        )
    clear = f'"{CLEAR}":true,' if change.status == GroupStatus.NOTFOUND else ""
    return (
        f'{{{clear}"at":{at},"cluster":{_string(cluster)},"group":{_string(group)},'
        f'"partitions":[{",".join(parts)}],"status":{_string(status)}}}'
    )


# Rows per statement when a record stores many (executemany, in order): a takeover's reconcile of
# 10,000 groups stores 10,000 status rows of a few KB each, and one statement for all of them
# held the loop 41 ms while they were encoded (bench_http, 1M group-partitions, loop steps
# timed). Between statements the loop runs while Postgres answers.
ROWS_PER_STATEMENT = 500
# And characters of JSON text per statement: at 1M group-partitions about 500 groups of 100
# partitions change status a second, so a tick stores 500 status rows and as many incident members
# of 6.4 KB each; 500 of those a statement held the loop 10-15 ms while SQLAlchemy and asyncpg
# took them (bench_http --slow-steps). With 256 KiB (about 40 of them) a statement, the run after
# had no notifier step computing for 10 ms: its two over 10 ms of wall took 0.3 and 2.5 ms of CPU.
TEXT_PER_STATEMENT = 256 * 1024


async def _execute_many(conn: AsyncConnection, stmt: Any, rows: Sequence[dict[str, Any]], text: str = "") -> None:
    """`stmt` for every row, in order, a round trip per ROWS_PER_STATEMENT rows or, where the
    rows carry JSON text under the key `text`, per TEXT_PER_STATEMENT characters of it (at
    least one row a statement)."""
    start, n = 0, len(rows)
    while start < n:
        end = min(start + ROWS_PER_STATEMENT, n)
        if text:
            size = 0
            for i in range(start, end):
                size += len(rows[i][text])
                if size > TEXT_PER_STATEMENT:
                    end = max(i, start + 1)
                    break
        await conn.execute(stmt, rows[start:end])
        start = end


# An outbox row, its payload JSON text cast by Postgres (executemany, _execute_many: rows in order).
_OUTBOX_ROW = (
    insert(outbox)
    .values(
        event_id=bindparam("event_id"),
        topic=bindparam("topic"),
        payload=cast(bindparam("payload", type_=Text), JSONB),
        retain=bindparam("retain"),
        created_at=bindparam("created_at"),
    )
    .on_conflict_do_nothing(index_elements=[outbox.c.event_id])
)


async def record(
    engine: AsyncEngine,
    cluster: str,
    events: Sequence[IncidentEvent],
    engine_state: dict[str, Any] | StateRows,
    retained: Sequence[Retained] = (),
    prefix: str = "lagd",
    fence: Fence | None = None,
    *,
    clock: Clock = wall_ms,
) -> None:
    """Store incident rows, outbox rows and the engine state in one transaction.

    The engine state is JSON-ready data with every member inline (`dump_cluster`), or its header
    and the member rows to write (`IncidentEngine.save_rows`), whose JSON text Postgres casts.
    With a `fence`, nothing is stored (StateConflict) unless the stored state matches it.
    Outbox rows are stamped `created_at` with the time `clock` (lagd.runtime.clock) reads.
    """
    now = clock()
    latest: dict[str, IncidentEvent] = {}
    for ev in events:  # one upsert per incident: a statement may touch a row only once
        latest[ev.incident_id] = ev
    if isinstance(engine_state, StateRows):
        engine_state.encode()  # what the caller left unencoded (the notifier encodes in slices)
    async with engine.begin() as conn:
        state = _state_value(engine_state)
        if fence is not None:
            await _swap_state(conn, cluster, state, fence)
        await _write_members(conn, cluster, engine_state)
        if latest:
            stmt = insert(incidents)
            cols = ("cluster", "severity", "state", "reason", "opened_at", "updated_at", "resolved_at", "body")
            await _execute_many(
                conn,
                stmt.on_conflict_do_update(
                    index_elements=[incidents.c.id],
                    set_={k: stmt.excluded[k] for k in cols},
                    where=stmt.excluded.updated_at >= incidents.c.updated_at,
                ),
                [
                    {
                        "id": ev.incident_id,
                        "cluster": ev.cluster,
                        "severity": ev.severity,
                        "state": "resolved" if ev.event == "resolved" else "open",
                        "reason": ev.reason,
                        "opened_at": ev.opened_at,
                        "updated_at": ev.at,
                        "resolved_at": ev.resolved_at,
                        "body": ev.payload(),
                    }
                    for ev in latest.values()
                ],
            )
        rows = [
            {
                "event_id": ev.event_id,
                "topic": incident_topic(prefix, ev.cluster, ev.incident_id),
                "payload": json.dumps(ev.payload()),
                "retain": False,
                "created_at": now,
            }
            for ev in events
        ]
        rows += (
            {"event_id": r.event_id, "topic": r.topic, "payload": r.payload, "retain": True, "created_at": now}
            for r in retained
        )
        if rows:
            await _execute_many(conn, _OUTBOX_ROW, rows, "payload")
        if fence is None:
            st = insert(incident_engine_state).values(cluster=cluster, state=state)
            await conn.execute(
                st.on_conflict_do_update(
                    index_elements=[incident_engine_state.c.cluster], set_={"state": st.excluded.state}
                )
            )


def _state_value(state: dict[str, Any] | StateRows) -> Any:
    """The engine state's row as the value to store: JSON text is cast by Postgres, not encoded again."""
    return cast(literal(state.header, Text), JSONB) if isinstance(state, StateRows) else state


# A member row, its stored form as JSON text cast by Postgres (executemany, _execute_many).
_MEMBER_ROW = insert(incident_members).values(
    cluster=bindparam("cluster"),
    incident_id=bindparam("incident_id"),
    member=bindparam("member"),
    body=cast(bindparam("body", type_=Text), JSONB),
)


async def _write_members(conn: AsyncConnection, cluster: str, state: dict[str, Any] | StateRows) -> None:
    """The member rows of a save: all of them replaced (a full save, or a state with its members
    inline, which leaves none), or the changed ones upserted and a forgotten incident's deleted."""
    table = incident_members
    if not isinstance(state, StateRows) or state.full:
        await conn.execute(delete(table).where(table.c.cluster == cluster))
    elif state.gone:
        await conn.execute(delete(table).where(table.c.cluster == cluster, table.c.incident_id.in_(state.gone)))
    if not isinstance(state, StateRows) or not state.members:
        return
    stmt = _MEMBER_ROW
    if not state.full:
        stmt = stmt.on_conflict_do_update(
            index_elements=[table.c.cluster, table.c.incident_id, table.c.member],
            set_={"body": stmt.excluded.body},
        )
    await _execute_many(
        conn,
        stmt,
        [{"cluster": cluster, "incident_id": i, "member": m, "body": body} for i, m, body in state.members],
        "body",
    )


async def _swap_state(conn: AsyncConnection, cluster: str, state: Any, fence: Fence) -> None:
    """Replace the stored state only if it is the fenced one (the row lock orders racing writers)."""
    table = incident_engine_state
    if not fence.exists:
        stmt: Any = (
            insert(table)
            .values(cluster=cluster, state=state)
            .on_conflict_do_nothing(index_elements=[table.c.cluster])
            .returning(table.c.cluster)
        )
    else:
        stmt = (
            update(table)
            .where(table.c.cluster == cluster, table.c.state[SAVED_BY].astext.is_not_distinct_from(fence.token))
            .values(state=state)
            .returning(table.c.cluster)
        )
    if (await conn.execute(stmt)).first() is None:
        raise StateConflict(
            f"incident state of cluster {cluster!r} was saved by another writer since this one loaded it"
        )


async def pending(engine: AsyncEngine, limit: int = 500) -> list[OutboxRow]:
    """Undelivered messages, oldest first."""
    async with engine.connect() as conn:
        result = await conn.execute(
            # the payload as text: published as it is, never decoded and encoded again
            select(outbox.c.id, outbox.c.event_id, outbox.c.topic, cast(outbox.c.payload, Text), outbox.c.retain)
            .where(outbox.c.delivered_at.is_(None))
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return [OutboxRow(r[0], r[1], r[2], r[3], r[4]) for r in result]


async def pending_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        n = await conn.scalar(select(func.count()).select_from(outbox).where(outbox.c.delivered_at.is_(None)))
        return int(n or 0)


async def mark_delivered(engine: AsyncEngine, ids: Sequence[int], *, clock: Clock = wall_ms) -> None:
    """Stamp the rows `delivered_at` with the time `clock` (lagd.runtime.clock) reads."""
    if not ids:
        return
    async with engine.begin() as conn:
        await conn.execute(
            update(outbox)
            .where(outbox.c.id.in_(list(ids)), outbox.c.delivered_at.is_(None))
            .values(delivered_at=clock())
        )


async def purge_delivered(engine: AsyncEngine, older_than: int) -> int:
    """Delete rows delivered before `older_than` (ms); returns how many went."""
    async with engine.begin() as conn:
        result = await conn.execute(
            delete(outbox).where(outbox.c.delivered_at.is_not(None), outbox.c.delivered_at < older_than)
        )
        return int(result.rowcount or 0)


async def load_engine_state(engine: AsyncEngine, cluster: str) -> dict[str, Any] | None:
    """The cluster's stored state as `IncidentEngine.dump_cluster` has it (None: none stored),
    its header and member rows read as of one moment."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            state = await conn.scalar(
                select(incident_engine_state.c.state).where(incident_engine_state.c.cluster == cluster)
            )
            if state is None:
                return None
            table = incident_members
            rows = await conn.execute(
                select(table.c.incident_id, table.c.member, table.c.body).where(table.c.cluster == cluster)
            )
            return with_members(dict(state), ((r.incident_id, r.member, r.body) for r in rows))


async def engine_state_clusters(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        result = await conn.execute(select(incident_engine_state.c.cluster).order_by(incident_engine_state.c.cluster))
        return [str(r[0]) for r in result]


async def list_incidents(engine: AsyncEngine, state: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Incidents, newest first, for the HTTP API (`state`: "open", "resolved" or None for both)."""
    if state not in (None, "open", "resolved"):
        raise ValueError(f"unknown incident state {state!r}: use 'open', 'resolved' or leave it out")
    query = select(incidents).order_by(incidents.c.opened_at.desc(), incidents.c.id).limit(limit)
    if state is not None:
        query = query.where(incidents.c.state == state)
    async with engine.connect() as conn:
        result = await conn.execute(query)
        return [
            {
                "id": r.id,
                "cluster": r.cluster,
                "severity": r.severity,
                "state": r.state,
                "reason": r.reason,
                "opened_at": r.opened_at,
                "updated_at": r.updated_at,
                "resolved_at": r.resolved_at,
                "groups": r.body.get("groups", {}),
                "partitions": r.body.get("partitions", []),
                "summary": r.body.get("summary", ""),
            }
            for r in result
        ]
