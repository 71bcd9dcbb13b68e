"""Notification sinks beside MQTT: webhook, Slack, PagerDuty and Alertmanager, each drained from
its own outbox position against the real Postgres.

Alertmanager is the real one (Debian `prometheus-alertmanager`, started here on a free port).
The webhook, Slack and PagerDuty receivers are LABELLED STAND-INS: small local aiohttp servers
that accept what the real services accept (a POST with a JSON body, answered 2xx) and record
it, so a test can switch them to 503 or close their port for an outage. They do not check
Slack's or PagerDuty's full semantics; the message shapes are checked by the unit tests here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lagd.core.config import ConfigError, Secret, SinkSettings, async_database_url, parse
from lagd.core.model import GroupStatus, PartitionStatus
from lagd.embedded import services as embedded
from lagd.notify import delivery, outbox, sinks
from lagd.notify.incidents import GroupChange, IncidentEngine, IncidentEvent, Rules
from tests.clocks import ManualClock

T0 = 1_700_000_000_000
RULES = Rules(severity="WARN", correlation_window=60_000, hold_time=10_000, update_interval=1_000)
Settle = Callable[..., Any]


# --- pure parts ---------------------------------------------------------------------------


def _payload(event: str = "opened", severity: str = "ERR") -> dict[str, Any]:
    return {
        "event": event,
        "id": "prod-1-abc",
        "event_id": f"prod-1-abc:{ {'opened': 1, 'updated': 2, 'resolved': 3}[event] }",
        "cluster": "prod",
        "severity": severity,
        "peak_severity": "ERR",
        "opened_at": T0,
        "resolved_at": T0 + 60_000 if event == "resolved" else None,
        "at": T0 + 1000,
        "groups": {"billing": "ERR", "orders": "WARN"},
        "partitions": [],
        "reason": "same topic orders",
        "summary": 'ERR: 2 of 2 consumer group(s) lagging "on" cluster prod',
    }


def test_backoff_doubles_to_the_cap_with_jitter_between_half_and_all() -> None:
    assert delivery.backoff(1, 1.0, 300.0, 0.0) == 0.5
    assert delivery.backoff(1, 1.0, 300.0, 0.999) == pytest.approx(1.0, abs=0.001)
    assert delivery.backoff(4, 1.0, 300.0, 1.0) == 8.0
    assert delivery.backoff(30, 1.0, 300.0, 1.0) == 300.0
    assert delivery.backoff(10_000, 1.0, 300.0, 0.0) == 150.0


def test_webhook_json_body_headers_signature_and_templates() -> None:
    s = SinkSettings(
        name="w",
        url="http://h/hook/$cluster/$event",
        headers=["Authorization: Bearer t0k", "X-Team: data"],
        hmac_secret=Secret("s3cret"),
    )
    req = sinks.webhook(s, _payload(), "http://lagd/")
    assert req.url == "http://h/hook/prod/opened"
    assert json.loads(req.body)["event_id"] == "prod-1-abc:1"
    assert req.headers["Authorization"] == "Bearer t0k" and req.headers["X-Team"] == "data"
    assert req.headers["X-Lagd-Event-Id"] == "prod-1-abc:1"
    want = hmac.new(b"s3cret", req.body, hashlib.sha256).hexdigest()
    assert req.headers["X-Lagd-Signature"] == f"sha256={want}"
    templated = replace(s, body_template='{"msg": "$summary", "id": "$event_id", "groups": "$groups"}')
    body = json.loads(sinks.webhook(templated, _payload(), "").body)  # quotes in the summary are escaped
    assert body == {
        "msg": 'ERR: 2 of 2 consumer group(s) lagging "on" cluster prod',
        "id": "prod-1-abc:1",
        "groups": "billing, orders",
    }
    assert "X-Lagd-Signature" not in sinks.webhook(replace(s, hmac_secret=Secret("")), _payload(), "").headers


def test_slack_message_says_what_broke_which_groups_since_when_and_links_the_page() -> None:
    text = json.loads(sinks.slack(SinkSettings(url="http://s"), _payload(), "http://lagd:8000/").body)["text"]
    assert "*ERR* on cluster *prod*" in text
    assert "`billing` (ERR), `orders` (WARN)" in text
    assert "Since 2023-11-14T22:13:20.000Z" in text
    assert "<http://lagd:8000/|Status page>" in text
    resolved = sinks.slack_text(_payload("resolved", "WARN"), "")
    assert resolved.startswith(":white_check_mark: *Resolved*") and "peaked at ERR" in resolved


def test_pagerduty_triggers_and_resolves_with_the_incident_id_as_dedup_key() -> None:
    s = SinkSettings(kind="pagerduty", routing_key=Secret("R0UTING"))
    trig = sinks.pagerduty(s, _payload(), "http://lagd/")
    assert trig.url == "https://events.pagerduty.com/v2/enqueue"
    body = json.loads(trig.body)
    assert body["event_action"] == "trigger" and body["dedup_key"] == "prod-1-abc"
    assert body["routing_key"] == "R0UTING" and body["payload"]["severity"] == "critical"
    assert body["payload"]["source"] == "lagd/prod" and body["links"][0]["href"] == "http://lagd/"
    res = json.loads(sinks.pagerduty(s, _payload("resolved"), "").body)
    assert res == {"routing_key": "R0UTING", "dedup_key": "prod-1-abc", "event_action": "resolve"}


def test_alert_labels_name_the_incident_and_hold_still_while_severity_and_reason_change() -> None:
    a = sinks.alert(_payload(), T0 + 1000, 300_000, "http://lagd/", resolved=False)
    assert a["labels"] == {"alertname": "LagdIncident", "cluster": "prod", "incident_id": "prod-1-abc"}
    assert a["annotations"]["severity"] == "critical" and a["annotations"]["reason"] == "same topic orders"
    assert a["startsAt"] == sinks.iso(T0) and a["endsAt"] == sinks.iso(T0 + 301_000)
    assert sinks.alert(_payload(), T0 + 5000, 300_000, "", resolved=True)["endsAt"] == sinks.iso(T0 + 5000)
    # the incident grows (WARN, then ERR with another reason) and resolves: one label set throughout
    steps = [
        {**_payload("opened", "WARN"), "reason": "same topic orders"},
        {**_payload("updated", "ERR"), "reason": "same host broker-1"},
        _payload("resolved", "WARN"),
    ]
    posted = [sinks.alert(p, T0 + 9000, 300_000, "", resolved=p["event"] == "resolved") for p in steps]
    assert len({json.dumps(p["labels"], sort_keys=True) for p in posted}) == 1
    assert [p["annotations"]["severity"] for p in posted] == ["warning", "critical", "warning"]
    assert [p["annotations"]["reason"] for p in posted][:2] == ["same topic orders", "same host broker-1"]


HOSTILE = "<!channel> & <@U123> `x` *y*\n:white_check_mark: *Resolved*"


def test_slack_escapes_text_from_kafka_so_a_group_name_pings_nobody() -> None:
    """A group id is any string a client commits under (hostile input): Slack's `<!channel>`,
    `<@user>`, `&` entities, a backtick ending the code span or a line break faking a line of
    lagd's reach Slack as plain text; only lagd's own link stays markup."""
    payload = {**_payload(), "groups": {HOSTILE: "ERR"}, "summary": f"ERR: 1 of 1 ({HOSTILE})"}
    text = sinks.slack_text(payload, "http://lagd:8000/#incident-prod-1-abc")
    assert "<!" not in text and "<@" not in text and "\n:white_check_mark:" not in text
    assert "&lt;!channel&gt; &amp; &lt;@U123&gt;" in text
    assert "\\x0a" in text  # the line break shown, not taken
    assert "`&lt;!channel&gt; &amp; &lt;@U123&gt; \u02cbx\u02cb *y*\\x0a" in text  # one code span, not closed early
    assert [ln for ln in text.splitlines() if "<" in ln] == ["<http://lagd:8000/#incident-prod-1-abc|Status page>"]
    assert text.count("\n") == 3  # head, groups, timing, link: nothing from Kafka adds a line
    # the other sinks carry text as JSON strings, which need no more than JSON's own escaping
    for kind in ("webhook", "pagerduty"):
        s = SinkSettings(kind=kind, url="http://r", routing_key=Secret("k"))  # type: ignore[arg-type]
        assert HOSTILE in sinks.request_for(s, payload, T0, "").body.decode("unicode_escape")


def test_every_sink_links_the_incident_on_the_status_page() -> None:
    page = "https://lagd.example.com/"
    want = "https://lagd.example.com/#incident-prod-1-abc"
    assert sinks.incident_url(page, "prod-1-abc") == want
    assert sinks.incident_url("", "x") == ""
    for kind in ("webhook", "slack", "pagerduty", "alertmanager"):
        s = SinkSettings(
            kind=kind,  # type: ignore[arg-type]
            url="http://r",
            routing_key=Secret("k"),
            body_template='{"link": "$status_url"}',
        )
        assert want in sinks.request_for(s, _payload(), T0, page).body.decode(), kind


def test_sink_config_parses_from_toml_tables_and_env() -> None:
    raw: dict[str, Any] = {
        "clusters": {"prod": {"bootstrap-servers": ["k:9092"]}},
        "notify": {"status-page-url": "https://lagd.example.com/"},
        "sinks": {"pd": {"kind": "pagerduty"}, "hook": {"url": "https://tools/x/$cluster", "headers": ["A: b"]}},
    }
    s = parse(json.loads(json.dumps(raw)), env={"LAGD_SINKS_PD_ROUTING_KEY": "rk"})
    assert s.sinks["pd"].routing_key.reveal() == "rk" and s.sinks["pd"].dead_letter_after == 3600.0
    assert s.sinks["hook"].kind == "webhook" and s.sinks["hook"].headers == ["A: b"]
    with pytest.raises(ConfigError, match=r"sinks\.pd\.routing-key.*LAGD_SINKS_PD_ROUTING_KEY"):
        parse(raw, env={})
    with pytest.raises(ConfigError, match=r"sinks\.s\.url"):
        parse({**raw, "sinks": {"s": {"kind": "slack"}}}, env={})
    with pytest.raises(ConfigError, match=r"sinks\.h\.headers"):
        parse({**raw, "sinks": {"h": {"url": "http://x", "headers": ["no colon"]}}}, env={})


# --- stand-in receivers ------------------------------------------------------------------


@dataclass
class Receiver:
    """LABELLED STAND-IN for a webhook, Slack or PagerDuty endpoint: a local aiohttp server that
    answers 202 and records each request, or 503 while `failing`, or nothing while `close()`d."""

    port: int = field(default_factory=embedded.free_port)
    failing: bool = False
    refuse: bool = False  # answer 400: a request the receiver will never take
    got: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)  # (event id, body, headers)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.Response:
        if self.refuse:
            return web.Response(status=400, text="bad routing key")
        if self.failing:
            return web.Response(status=503, text="down for maintenance")
        body = await request.json()
        self.got.append((request.headers.get("X-Lagd-Event-Id", ""), body, dict(request.headers)))
        return web.json_response({"status": "success"}, status=202)

    async def open(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ids(self) -> list[str]:
        return [i for i, _, _ in self.got]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(async_database_url(database_url))
    yield eng
    await eng.dispose()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().open()
    yield r
    await r.close()


def scenario(cluster: str, groups: int, start: int) -> list[GroupChange]:
    """`groups` groups go bad together (the last one ERR), then all recover."""
    fail = [
        GroupChange(
            cluster,
            f"g{i}",
            GroupStatus.ERR if i == groups - 1 else GroupStatus.WARN,
            start + i * 2000,
            partitions=(("orders", i, PartitionStatus.STOP, "broker-1"),),
            topics=("orders",),
        )
        for i in range(groups)
    ]
    return fail + [GroupChange(cluster, f"g{i}", GroupStatus.OK, start + 60_000 + i * 500) for i in range(groups)]


async def record(eng: AsyncEngine, incidents: IncidentEngine, changes: list[GroupChange], until: int) -> list[str]:
    """Run the changes through the engine (ticking each fake second) and record every step; the
    retained group-status rows go into the outbox too (the sinks must step over them)."""
    ids: list[str] = []
    pending = list(changes)
    now = pending[0].at
    while now <= until:
        while pending and pending[0].at <= now:
            ch = pending.pop(0)
            events: list[IncidentEvent] = incidents.apply(ch)
            status = [outbox.status_row("lagd", ch)]
            await outbox.record(eng, ch.cluster, events, incidents.dump_cluster(ch.cluster), status)
            ids += [e.event_id for e in events]
        ticked = incidents.tick(now)
        if ticked:
            await outbox.record(eng, ticked[0].cluster, ticked, incidents.dump_cluster(ticked[0].cluster))
            ids += [e.event_id for e in ticked]
        now += 1000
    return ids


def start(
    eng: AsyncEngine, s: SinkSettings, **kw: Any
) -> tuple[asyncio.Task[None], asyncio.Event, delivery.SinkStatus]:
    stop, status = asyncio.Event(), delivery.SinkStatus(s.name, s.kind)
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("lease_retry", 0.1)
    task = asyncio.create_task(delivery.run_sink(eng, s, stop, status, status_url="http://lagd.test/", **kw))
    return task, stop, status


async def halt(task: asyncio.Task[None], stop: asyncio.Event | None = None, cancel: bool = False) -> None:
    if stop is not None:
        stop.set()
    if cancel:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


def fast(name: str, kind: str, url: str, **kw: Any) -> SinkSettings:
    base: dict[str, Any] = {"retry_initial": 0.05, "retry_max": 0.2, "timeout": 2.0}
    if kind == "pagerduty":
        base["routing_key"] = Secret("rk-test")
    return SinkSettings(name=name, kind=kind, url=url, **{**base, **kw})  # type: ignore[arg-type]


# --- end to end against the stand-ins ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["webhook", "slack", "pagerduty"])
async def test_every_event_arrives_across_a_receiver_outage_and_a_restart(
    engine: AsyncEngine, receiver: Receiver, settle: Settle, kind: str
) -> None:
    """Stand-in receiver (see the module doc). Events recorded before, during a 503 outage,
    while the port is closed, and across a cancelled-and-restarted delivery task all arrive;
    repeats only ever carry an id that already arrived."""
    s = fast(f"{kind}-1", kind, receiver.url)
    task, stop, status = start(engine, s)
    await settle(lambda: status.leader, what="the sink's lease")
    incidents = IncidentEngine(RULES)
    sent = await record(engine, incidents, scenario("c1", 3, T0)[:2], T0 + 3000)
    await settle(lambda: set(receiver.ids()) >= set(sent), what="the first events")
    receiver.failing = True  # outage 1: the receiver answers 503
    sent += await record(engine, incidents, scenario("c1", 3, T0)[2:4], T0 + 61_000)
    await settle(lambda: status.failures_total >= 3, what="retries during the 503 outage")
    await receiver.close()  # outage 2: the port is closed
    await settle(lambda: "ClientConnectorError" in status.last_error, what="connection refused")
    receiver.failing = False
    await receiver.open()
    await settle(lambda: set(receiver.ids()) >= set(sent), what="events held during the outages")
    await halt(task, cancel=True)  # a lagd restart: the task dies, a new one starts on the same database
    sent += await record(engine, incidents, scenario("c1", 3, T0)[4:], T0 + 80_000)
    task, stop, status = start(engine, s)
    await settle(lambda: set(receiver.ids()) >= set(sent), what="events recorded while lagd was down")
    await halt(task, stop)
    got = receiver.ids()
    assert len(sent) == len(set(sent)) >= 3  # opened, updated..., resolved
    assert set(got) == set(sent)  # none lost, nothing invented
    assert list(dict.fromkeys(got)) == sent  # in order; repeats only carry ids already delivered
    bodies = [b for _, b, _ in receiver.got]
    if kind == "webhook":
        assert [b["event_id"] for b in bodies] == got
        assert bodies[0]["event"] == "opened" and bodies[-1]["event"] == "resolved"
    elif kind == "pagerduty":
        assert {b["dedup_key"] for b in bodies} == {sent[0].rsplit(":", 1)[0]}
        assert bodies[-1]["event_action"] == "resolve" and bodies[0]["event_action"] == "trigger"
    else:
        assert all(sent[0].rsplit(":", 1)[0] in b["text"] for b in bodies)


@pytest.mark.slow
async def test_a_broken_sink_never_holds_up_another_and_gives_up_into_the_dead_letters(
    engine: AsyncEngine, receiver: Receiver, settle: Settle
) -> None:
    """Stand-in receivers (see the module doc): one healthy, one answering 503 for ever, one
    refusing with 400. The healthy one gets everything at once; the 503 one dead-letters each
    event after dead-letter-after, the 400 one at the first answer; positions move past them.

    Time is the sinks' injected clock: it stands still (the 503 sink retries, never giving up)
    until the test lets every read of it be an hour later, past the hour of dead-letter-after."""
    broken = await Receiver(failing=True).open()
    refusing = await Receiver(refuse=True).open()
    clock = ManualClock(T0 + 100_000)
    try:
        good_s = fast("good", "webhook", receiver.url)
        bad_s = fast("bad", "webhook", broken.url, dead_letter_after=3600.0)
        refused_s = fast("refused", "pagerduty", refusing.url)
        runs = [start(engine, s, clock=clock) for s in (good_s, bad_s, refused_s)]
        await settle(lambda: all(st.leader for _, _, st in runs), what="three leases")
        sent = await record(engine, IncidentEngine(RULES), scenario("c2", 2, T0), T0 + 75_000)
        await settle(lambda: set(receiver.ids()) == set(sent), timeout=5, what="the healthy sink")
        await settle(lambda: runs[1][2].failures_total >= 3, what="the 503 sink retrying")
        assert runs[1][2].dead_letters_total == 0  # retrying with the hour not over: it got nothing yet
        assert runs[1][2].retrying_since == T0 + 100_000
        clock.step = 3_600_000  # from now on, every read of the clock is an hour later
        await settle(lambda: runs[1][2].dead_letters_total == len(sent), what="the 503 sink's dead letters")
        await settle(lambda: runs[2][2].dead_letters_total == len(sent), what="the 400 sink's dead letters")
        for task, stop, _ in runs:
            await halt(task, stop)
        dead = await delivery.list_dead_letters(engine)
        by_sink = {(d["sink"], d["event_id"]): d for d in dead}
        assert {e for s, e in by_sink if s == "bad"} == set(sent) == {e for s, e in by_sink if s == "refused"}
        bad = by_sink[("bad", sent[0])]
        assert bad["attempts"] > 1 and "HTTP 503" in bad["error"] and bad["payload"]["event_id"] == sent[0]
        assert bad["first_attempt_at"] == T0 + 100_000  # stamped by the injected clock
        assert bad["dead_at"] - bad["first_attempt_at"] >= 3_600_000
        refused = by_sink[("refused", sent[0])]
        assert refused["attempts"] == 1 and "HTTP 400" in refused["error"] and "check the sink" in refused["error"]
        assert broken.got == [] and refusing.got == []
        for s in (bad_s, refused_s):
            head = await delivery.load_head(engine, s.name)
            assert head.retry_id is None and await delivery.backlog(engine, head.position) == 0
    finally:
        await broken.close()
        await refusing.close()


@pytest.mark.slow
async def test_only_the_lease_holder_delivers(engine: AsyncEngine, receiver: Receiver, settle: Settle) -> None:
    """Stand-in receiver (see the module doc). Two lagd instances run the same sink: one holds
    its lease and delivers; when it stops the other takes over from the stored position."""
    s = fast("shared", "webhook", receiver.url)
    a = start(engine, s)
    await settle(lambda: a[2].leader, what="the first instance's lease")
    b = start(engine, s)
    incidents = IncidentEngine(RULES)
    sent = await record(engine, incidents, scenario("c3", 2, T0)[:2], T0 + 3000)
    await settle(lambda: set(receiver.ids()) == set(sent), what="delivery by the leader")
    assert not b[2].leader and b[2].delivered_total == 0
    await halt(a[0], a[1])
    sent += await record(engine, incidents, scenario("c3", 2, T0)[2:], T0 + 75_000)
    await settle(lambda: set(receiver.ids()) == set(sent), what="delivery by the standby")
    await halt(b[0], b[1])
    assert receiver.ids() == sent and b[2].delivered_total == len(sent) - 2


# --- the real Alertmanager ---------------------------------------------------------------


@dataclass
class Alertmanager:
    proc: embedded.Process
    url: str


def start_alertmanager(
    config: str = "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n",
) -> Alertmanager:
    """A real Alertmanager (Debian prometheus-alertmanager) on a free port with its own storage
    and `config` (alertmanager.yml); stop it with `.proc.stop()`."""
    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if exe is None:
        raise embedded.ServiceError(
            "Alertmanager is not installed: run scripts/system-deps.sh (apt-get install prometheus-alertmanager)"
        )
    wd = Path(tempfile.mkdtemp(prefix="lagd-alertmanager-"))
    (wd / "alertmanager.yml").write_text(config)
    port = embedded.free_port()
    args = [
        exe,
        f"--config.file={wd / 'alertmanager.yml'}",
        f"--storage.path={wd / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip: a single instance
    ]
    proc = embedded._spawn(args, "alertmanager", port, wd)
    try:
        embedded.wait_port("127.0.0.1", port, 20, proc.proc)
    except embedded.ServiceError as exc:
        tail = proc.log_tail()
        proc.stop()
        raise embedded.ServiceError(f"Alertmanager did not start: {exc}\n{tail}") from None
    return Alertmanager(proc, f"http://127.0.0.1:{port}")


@pytest.fixture(scope="session")
def alertmanager() -> Iterator[Alertmanager]:
    """A real Alertmanager that routes every alert to nowhere (the tests read its API)."""
    am = start_alertmanager()
    yield am
    am.proc.stop()


async def am_alerts(am: Alertmanager, incident_id: str) -> list[dict[str, Any]]:
    """The alerts Alertmanager shows for the incident (it shows none once their endsAt passed)."""
    params = {"filter": f'incident_id="{incident_id}"'}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{am.url}/api/v2/alerts", params=params) as resp,
    ):
        assert resp.status == 200, await resp.text()
        found: list[dict[str, Any]] = await resp.json()
        return found


@pytest.mark.slow
async def test_alertmanager_gets_one_alert_per_incident_kept_alive_and_resolved(
    engine: AsyncEngine, alertmanager: Alertmanager, settle: Settle
) -> None:
    """The real Alertmanager behind a cuttable path: the alert fires with the incident's labels,
    is re-posted before its endsAt (alert-ttl 3 s, so about every second), survives a cut path
    and a restarted delivery task, and is resolved with endsAt = now by the resolve event (the
    restarted task posts with a 60 s alert-ttl, so the alert going within 15 s is the resolve)."""
    from tests.netcut import Cuttable

    host, port = alertmanager.url.removeprefix("http://").split(":")
    path = Cuttable(host, int(port))
    via = await path.start(embedded.free_port())
    s = fast("am", "alertmanager", f"http://127.0.0.1:{via}", alert_ttl=3.0)
    task, stop, status = start(engine, s)
    await settle(lambda: status.leader, what="the sink's lease")
    incidents = IncidentEngine(RULES)
    cluster = f"am{time.monotonic_ns()}"
    changes = scenario(cluster, 2, T0)
    sent = await record(engine, incidents, changes[:2], T0 + 3000)
    inc_id = sent[0].rsplit(":", 1)[0]

    async def firing() -> list[dict[str, Any]]:
        return await am_alerts(alertmanager, inc_id)

    async def critical() -> list[dict[str, Any]]:
        alerts = await firing()
        return alerts if [a["annotations"]["severity"] for a in alerts] == ["critical"] else []

    # opened WARN, then updated to ERR: the same alert (its labels name the incident), its
    # severity annotation changed
    alerts = await settle(critical, what="the incident's one alert, at its current severity")
    assert alerts[0]["labels"] == {"alertname": "LagdIncident", "cluster": cluster, "incident_id": inc_id}
    assert alerts[0]["annotations"]["reason"]
    first_end = alerts[0]["endsAt"]
    # kept alive: re-posted with a later endsAt before the first one passes
    await settle(lambda: _later(firing, first_end), timeout=10, what="a re-post with a later endsAt")
    path.cut()  # an outage of the path to Alertmanager, then a lagd restart
    await settle(lambda: status.failures_total >= 1 or status.backlog == 0, what="a failure or an idle sink")
    await halt(task, cancel=True)
    path.restore()
    # restarted with a long alert-ttl: the alert can only go within the test's time by being resolved
    task, stop, status = start(engine, replace(s, alert_ttl=60.0))
    assert len(await firing()) == 1  # still firing, still one alert
    sent += await record(engine, incidents, changes[2:], T0 + 75_000)

    async def resolved() -> bool:
        return not await firing()

    await settle(resolved, timeout=15, what="the alert resolved (endsAt = now)")
    await settle(lambda: status.backlog == 0 and status.position > 0, what="the sink caught up")
    head = await delivery.load_head(engine, "am")
    assert head.retry_id is None and await delivery.backlog(engine, head.position) == 0
    await halt(task, stop)
    await path.close()


async def _later(firing: Callable[[], Any], than: str) -> bool:
    alerts = await firing()
    return bool(alerts) and alerts[0]["endsAt"] > than


def test_the_example_config_documents_every_sink_key() -> None:
    text = (Path(__file__).resolve().parent.parent / "config" / "lagd.example.toml").read_text()
    for f in fields(SinkSettings):
        if f.name != "name":
            assert f"\n# {f.name.replace('_', '-')} =" in text, f"sinks.*.{f.name} is not documented in the example"
