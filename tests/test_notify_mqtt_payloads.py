"""MQTT done properly, against the real Postgres and Mosquitto: every payload published matches
its shipped JSON Schema, a deleted group's retained status is cleared, and the availability
topic says online while lagd runs and offline (its last will) when the connection dies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import aiomqtt
import jsonschema
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd.core.config import NotifySettings, async_database_url
from lagd.core.model import GroupStatus, PartitionStatus
from lagd.embedded import services as embedded
from lagd.notify import outbox, schemas
from lagd.notify.incidents import GroupChange, IncidentEngine, Rules
from lagd.notify.mqtt import AvailabilityStatus, PublisherStatus, announce_availability, publish_outbox, wire_body
from tests.netcut import Cuttable

T0 = 1_700_000_000_000
RULES = Rules(severity="WARN", correlation_window=60_000, hold_time=10_000, update_interval=1_000)
Settle = Callable[..., Any]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(async_database_url(database_url))
    yield eng
    await eng.dispose()


class Raw:
    """Every message under a prefix as it arrived: (topic, raw bytes, retained)."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        self.host, self.port, self.topic = host, port, topic
        self.messages: list[tuple[str, bytes, bool]] = []
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client(self.host, self.port, identifier=f"raw-{uuid.uuid4().hex[:8]}") as client:
                await client.subscribe(self.topic, qos=1)
                self.ready.set()
                async for msg in client.messages:
                    assert isinstance(msg.payload, bytes)
                    self.messages.append((str(msg.topic), msg.payload, bool(msg.retain)))

    async def __aenter__(self) -> Raw:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = schemas.load(name)
    assert schema is not None, name
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_every_shipped_schema_is_valid_draft_2020_12() -> None:
    assert schemas.names() == ["availability", "group-status", "incident-event"]
    for name in schemas.names():
        assert validator(name).schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schemas.load("nope") is None


async def test_published_payloads_match_their_schemas_and_a_deleted_group_is_cleared(
    engine: AsyncEngine, mqtt_broker: tuple[str, int], settle: Settle
) -> None:
    host, port = mqtt_broker
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    settings = replace(NotifySettings(), mqtt_url=f"mqtt://{host}:{port}", topic_prefix=prefix, publish_interval=0.05)
    incidents = IncidentEngine(RULES)
    changes = [
        GroupChange("prod", "g0", GroupStatus.WARN, T0, partitions=(("orders", 0, PartitionStatus.STOP, "h1"),)),
        GroupChange("prod", "g1", GroupStatus.ERR, T0 + 2000, partitions=(("orders", 1, PartitionStatus.STALL, ""),)),
        GroupChange("prod", "g0", GroupStatus.OK, T0 + 20_000),
        GroupChange("prod", "g1", GroupStatus.NOTFOUND, T0 + 21_000),  # deleted (or expired)
    ]
    async with Raw(host, port, f"{prefix}/#") as live:
        now = T0
        pending = list(changes)
        while now <= T0 + 40_000:
            while pending and pending[0].at <= now:
                ch = pending.pop(0)
                events = incidents.apply(ch)
                status = [outbox.status_row(prefix, ch)]
                await outbox.record(engine, "prod", events, incidents.dump_cluster("prod"), status, prefix)
            ticked = incidents.tick(now)
            if ticked:
                await outbox.record(engine, "prod", ticked, incidents.dump_cluster("prod"), [], prefix)
            now += 1000
        stop, pub = asyncio.Event(), PublisherStatus()
        task = asyncio.create_task(publish_outbox(engine, settings, stop, pub, lease_retry=0.1))
        try:
            await settle(lambda: outbox_empty(engine), what="the outbox drained")
        finally:
            stop.set()
            await task
        await settle(lambda: any(t.endswith("/g1/status") and not b for t, b, _ in live.messages), what="the clear")
    incident_schema, status_schema = validator("incident-event"), validator("group-status")
    kinds = []
    for topic, body, _ in live.messages:
        if "/incidents/" in topic:
            payload = json.loads(body)
            incident_schema.validate(payload)
            kinds.append((payload["event"], payload["severity"], payload["peak_severity"]))
        elif body:
            status_schema.validate(json.loads(body))
    assert kinds[0] == ("opened", "WARN", "WARN") and kinds[-1][0] == "resolved" and kinds[-1][2] == "ERR"
    resolved = json.loads(next(b for t, b, _ in reversed(live.messages) if "/incidents/" in t))
    assert resolved["duration_ms"] == resolved["resolved_at"] - resolved["opened_at"] > 0
    g1 = [b for t, b, _ in live.messages if t.endswith("/g1/status")]
    assert json.loads(g1[0])["status"] == "ERR" and g1[-1] == b""
    # a dashboard subscribing now gets g0's retained status and nothing for the deleted g1
    async with Raw(host, port, f"{prefix}/prod/groups/+/status") as late:
        await settle(lambda: any(t.endswith("/g0/status") for t, _, _ in late.messages), what="g0's retained status")
    assert [t for t, _, r in late.messages if r] == [f"{prefix}/prod/groups/g0/status"]


async def outbox_empty(engine: AsyncEngine) -> bool:
    return await outbox.pending_count(engine) == 0


@pytest.mark.slow
async def test_availability_is_online_while_running_and_offline_by_last_will(
    engine: AsyncEngine, private_mosquitto: embedded.Process, settle: Settle
) -> None:
    """Through a cuttable path to a real Mosquitto: "online" (retained) per cluster; the path
    cut, the broker publishes the last will "offline"; back, "online"; a clean stop, "offline"."""
    path = Cuttable(private_mosquitto.host, private_mosquitto.port)
    via = await path.start(embedded.free_port())
    prefix = f"a-{uuid.uuid4().hex[:8]}"
    settings = replace(NotifySettings(), mqtt_url=f"mqtt://127.0.0.1:{via}", topic_prefix=prefix)
    state = validator("availability")
    stop, status = asyncio.Event(), AvailabilityStatus()
    async with Raw(private_mosquitto.host, private_mosquitto.port, f"{prefix}/+/status") as seen:

        def last(cluster: str) -> str | None:
            got = [b.decode() for t, b, _ in seen.messages if t == f"{prefix}/{cluster}/status"]
            return got[-1] if got else None

        task = asyncio.create_task(
            announce_availability(engine, settings, ["prod", "dr"], stop, status, lease_retry=0.1, keepalive=5)
        )
        try:
            await settle(lambda: last("prod") == "online" and last("dr") == "online", what="online")
            path.cut()  # the connection dies without a goodbye: the broker sends the will
            await settle(lambda: last("prod") == "offline" and last("dr") == "offline", what="the last will")
            path.restore()
            await settle(lambda: last("prod") == "online" and last("dr") == "online", timeout=30, what="online again")
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        await settle(lambda: last("prod") == "offline" and last("dr") == "offline", what="offline on a clean stop")
    for _, body, _ in seen.messages:
        state.validate(body.decode())
    # retained: a subscriber arriving now learns the state at once
    async with Raw(private_mosquitto.host, private_mosquitto.port, f"{prefix}/prod/status") as late:
        await settle(lambda: late.messages, what="the retained state")
    assert late.messages[0][1:] == (b"offline", True)
    await path.close()


def test_a_status_row_is_the_message_with_its_id_encoded_once() -> None:
    """The retained status row the notifier prepares when it takes a change: its payload is the
    message with its event id, and the id is the hash of topic and sorted compact body that
    lagd has always given it, so a status stored before this encoding and again after is still
    one row (the outbox's dedup)."""
    import hashlib

    change = GroupChange(
        "prod", 'g"1', GroupStatus.WARN, 1_700_000_000_000, (("orders", 3, PartitionStatus.STOP, "h1"),)
    )
    topic, message = outbox.group_status_message("lagd", change)
    row = outbox.status_row("lagd", change)
    body = json.dumps(message, sort_keys=True, separators=(",", ":"))
    assert row.event_id == "status:" + hashlib.sha256(f"{topic}\n{body}".encode()).hexdigest()[:32]
    assert row.topic == topic and json.loads(row.payload) == {**message, "event_id": row.event_id}
    assert json.loads(outbox.retained_row("t", {}).payload) == {"event_id": outbox.retained_row("t", {}).event_id}
    gone = outbox.status_row("lagd", replace(change, status=GroupStatus.NOTFOUND, partitions=()))
    assert json.loads(gone.payload)[outbox.CLEAR] is True and gone.event_id != row.event_id


ODD = ["", "plain", 'a "quoted" one', "back\\slash", "new\nline\t\x00\x1f\x7f", "ü é ß", "日本語", "😀", "lone \ud800"]


class Named(str):
    pass


def test_status_rows_are_written_as_json_dumps_writes_them() -> None:
    """status_row writes the body directly (not through a dict per partition): for random changes,
    odd strings and every status included, it is byte for byte the row of json.dumps' body, so the
    id, and with it the outbox's dedup, is what it always was."""
    import random

    rnd = random.Random(41)

    def text() -> str:
        return rnd.choice(ODD) if rnd.random() < 0.6 else "".join(rnd.choice('ab-._ü"\\\n😀') for _ in range(8))

    for _ in range(300):
        parts = tuple(
            (text(), rnd.choice([0, 7, 2**40, -1]), rnd.choice(list(PartitionStatus)), text())
            for _ in range(rnd.randrange(5))
        )
        status = rnd.choice(list(GroupStatus))
        cluster, group = (t if "\ud800" not in t else "g" for t in (text(), text()))  # topics are UTF-8
        change = GroupChange(cluster, group, status, rnd.choice([0, 1_700_000_000_000]), parts)
        assert outbox._status_body(change) is not None
        assert outbox.status_row("lagd", change) == outbox.retained_row(*outbox.group_status_message("lagd", change))


@pytest.mark.parametrize(
    "unusual",
    [
        GroupChange("prod", "g", GroupStatus.WARN, 1, (("t", True, PartitionStatus.STOP, "h"),)),
        GroupChange("prod", "g", GroupStatus.WARN, 1, ((Named("t"), 0, PartitionStatus.STOP, "h"),)),
        GroupChange("prod", Named("g"), GroupStatus.WARN, 1, ()),
        GroupChange("prod", "g", GroupStatus.WARN, 1.5, ()),  # type: ignore[arg-type]
    ],
)
def test_a_change_of_unusual_types_is_written_by_json_dumps(unusual: GroupChange) -> None:
    assert outbox._status_body(unusual) is None
    assert outbox.status_row("lagd", unusual) == outbox.retained_row(*outbox.group_status_message("lagd", unusual))


async def test_payloads_go_out_as_postgres_stores_them_and_only_a_retained_clear_goes_out_empty(
    engine: AsyncEngine,
) -> None:
    """The publisher sends each payload's stored JSON text as it is (no decode and encode again
    per message); a retained clear goes out empty, and a group merely named like the clear key
    does not."""
    named = GroupChange("prod", '"$clear": true', GroupStatus.WARN, T0)
    gone = GroupChange("prod", "g1", GroupStatus.NOTFOUND, T0)
    incidents = IncidentEngine(RULES)
    events = incidents.apply(named)
    rows = [outbox.status_row("p", named), outbox.status_row("p", gone)]
    await outbox.record(engine, "prod", events, incidents.dump_cluster("prod"), rows, "p")
    stored = await outbox.pending(engine, 10)
    assert [r.retain for r in stored] == [False, True, True]
    event, status, clear = stored
    assert wire_body(event) == event.payload.encode() and json.loads(event.payload)["event"] == "opened"
    assert json.loads(wire_body(status)) == json.loads(rows[0].payload)  # the named group's WARN
    assert wire_body(clear) == b""
