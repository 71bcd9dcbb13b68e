"""Burrow v3 compatibility: every path's JSON (values AND field order), status codes and
message strings, against a real server on a free port answering from a known State.

Bodies are compared as `json.dumps` of the parsed answer (no key sorting), so a field in
the wrong place, a missing field or an int where Burrow sends a float all fail.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import aiohttp
import pytest

from lagd.core.config import Secret
from lagd.evaluate.sight import ClusterSight
from lagd.http.burrow_v3 import RESTORING_MESSAGE
from lagd.runtime import logs
from tests.http_state import CLUSTER, NOW, TOKEN, build_context, build_settings, serve

HOST = socket.gethostname()


def off(offset: int, ts: int, lag: int | None) -> dict[str, Any]:
    return {"offset": offset, "timestamp": ts, "observedAt": ts + 5, "lag": lag}


def part(
    topic: str, partition: int, status: str, start: Any, end: Any, lag: int, owner: str = "", client: str = ""
) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "owner": owner,
        "client_id": client,
        "status": status,
        "start": start,
        "end": end,
        "current_lag": lag,
        "complete": 1.0,
    }


WARN_P0 = part("orders", 0, "OK", off(100, 10_000, 0), off(300, 30_000, 0), 0)
WARN_P1 = part("orders", 1, "WARN", off(500, 10_000, 500), off(1500, 30_000, 1500), 1500, "/10.0.0.7", "worker-7")


def env(path: str, message: str, error: bool = False, **payload: Any) -> dict[str, Any]:
    return {"error": error, "message": message, **payload, "request": {"url": path, "host": HOST}}


def same(body: Any, expected: Any) -> None:
    """Equal values in the same field order (and the same JSON number types)."""
    assert json.dumps(body) == json.dumps(expected)


async def fetch(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, str, Any]:
    async with session.request(method, url, **kw) as resp:
        text = await resp.text()
        body = json.loads(text) if resp.content_type == "application/json" else text
        return resp.status, resp.content_type, body


@pytest.fixture
async def api() -> Any:
    async with serve(build_context()) as base, aiohttp.ClientSession(base) as session:
        yield session


async def test_admin_and_readiness() -> None:
    for ready, code, text in ((True, 200, "READY"), (False, 503, "STARTING")):
        async with serve(build_context(ready=ready)) as base, aiohttp.ClientSession(base) as s:
            assert await fetch(s, "GET", "/burrow/admin") == (200, "text/plain", "GOOD")
            assert await fetch(s, "GET", "/burrow/admin/ready") == (code, "text/plain", text)


async def test_readiness_names_a_cluster_lagd_cannot_read_even_while_it_starts() -> None:
    """Brokers that never answer keep the reader from catching up, so lagd never becomes ready:
    readiness says which cluster it cannot read rather than STARTING for ever."""
    for ready in (True, False):
        ctx = build_context(ready=ready)
        ctx.health.sights = {"prod": ClusterSight("prod", NOW - 60_000, True, "no answer from the cluster's brokers")}
        async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
            assert await fetch(s, "GET", "/burrow/admin/ready") == (
                503,
                "text/plain",
                "DEGRADED: cannot read cluster(s) prod",
            )


async def test_answers_before_ready_say_the_brokers_are_unreachable_and_what_to_check() -> None:
    """While a cluster's brokers do not answer, lagd is not ready: its answers say that, with the
    reason met and what to check, not that it is restoring its state (it may never be)."""
    ctx = build_context(ready=False)
    ctx.health.sights = {CLUSTER: ClusterSight(CLUSTER, NOW - 60_000, True, "no answer from the cluster's brokers")}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serve(ctx) as base, aiohttp.ClientSession(base, headers=auth) as s:
        status, _, body = await fetch(s, "GET", f"/v3/kafka/{CLUSTER}/consumer/g-ok/lag")
    message = body["message"]
    assert status == 503
    assert message.startswith(f"lagd cannot reach the brokers of cluster(s) {CLUSTER} (bootstrap-servers kafka1:9092:")
    assert "no answer from the cluster's brokers" in message
    for what_to_check in ("brokers run", "reaches bootstrap-servers", "SASL and TLS settings"):
        assert what_to_check in message, message
    assert "restoring" not in message
    # a cluster seen again: the answer before ready is the restoring one
    ctx.health.sights = {CLUSTER: ClusterSight(CLUSTER, None, False, "")}
    async with serve(ctx) as base, aiohttp.ClientSession(base, headers=auth) as s:
        status, _, body = await fetch(s, "GET", f"/v3/kafka/{CLUSTER}/consumer/g-ok/lag")
    assert (status, body["message"]) == (503, RESTORING_MESSAGE)


async def test_v3_kafka_answers_503_while_restoring() -> None:
    """Before ready State is partial: a 503 saying so, not NOTFOUND or a partial list."""
    ctx = build_context(ready=False)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serve(ctx) as base, aiohttp.ClientSession(base, headers=auth) as s:
        for method, path in (
            ("GET", "/v3/kafka"),
            ("GET", "/v3/kafka/prod"),
            ("GET", "/v3/kafka/prod/topic"),
            ("GET", "/v3/kafka/prod/topic/events"),
            ("GET", "/v3/kafka/prod/topic/events/consumers"),
            ("GET", "/v3/kafka/prod/consumer"),
            ("GET", "/v3/kafka/prod/consumer/g-ok"),
            ("GET", "/v3/kafka/prod/consumer/g-ok/status"),
            ("GET", "/v3/kafka/prod/consumer/nope/lag"),
            ("DELETE", "/v3/kafka/prod/consumer/g-ok"),
            ("DELETE", "/v3/kafka/prod/consumer/g-ok/topic/orders"),
        ):
            async with s.request(method, path) as resp:
                assert (resp.status, resp.headers["Retry-After"]) == (503, "5"), path
                same(await resp.json(), env(path, RESTORING_MESSAGE, error=True))
        assert ctx.state.group_topics(CLUSTER, "g-ok") == {"orders": [0]}  # nothing was deleted
        # Liveness, readiness, config and log level do not read State: they answer at once.
        assert await fetch(s, "GET", "/burrow/admin") == (200, "text/plain", "GOOD")
        assert await fetch(s, "GET", "/burrow/admin/ready") == (503, "text/plain", "STARTING")
        for path in ("/v3/config", "/v3/config/cluster/prod", "/v3/admin/loglevel"):
            assert (await fetch(s, "GET", path))[0] == 200, path


async def test_cluster_topic_and_consumer_lists(api: aiohttp.ClientSession) -> None:
    cases = [
        ("/v3/kafka", env("/v3/kafka", "cluster list returned", clusters=["prod"])),
        ("/v3/kafka/prod/topic", env("/v3/kafka/prod/topic", "topic list returned", topics=["events", "orders"])),
        (
            "/v3/kafka/prod/topic/events",
            env("/v3/kafka/prod/topic/events", "topic offsets returned", offsets=[3000, 7000]),
        ),
        (
            "/v3/kafka/prod/topic/events/consumers",
            env(
                "/v3/kafka/prod/topic/events/consumers",
                "consumers of topic returned",
                consumers=["g-rewind", "g-stall", "g-stop"],
            ),
        ),
        (
            "/v3/kafka/prod/consumer",
            env(
                "/v3/kafka/prod/consumer",
                "consumer list returned",
                consumers=["g-ok", "g-rewind", "g-stall", "g-stop", "g-warn"],
            ),
        ),
    ]
    for path, expected in cases:
        code, ctype, body = await fetch(api, "GET", path + "?ignored=1")
        assert (code, ctype) == (200, "application/json"), path
        same(body, expected)


async def test_not_found_messages(api: aiohttp.ClientSession) -> None:
    cases = [
        ("/v3/kafka/nope/topic", "cluster not found"),
        ("/v3/kafka/nope/consumer", "cluster not found"),
        ("/v3/kafka/prod/topic/nope", "cluster or topic not found"),
        ("/v3/kafka/prod/topic/nope/consumers", "cluster or topic not found"),
        ("/v3/kafka/prod/consumer/nope", "cluster or consumer not found"),
    ]
    for path, message in cases:
        code, _, body = await fetch(api, "GET", path)
        assert code == 404, path
        same(body, env(path, message, error=True))


# Burrow's shapes, field by field: core/internal/httpserver/kafka.go (handleClusterDetail,
# getClientProfile) and structs.go (httpResponseConfigModuleCluster, httpResponseClientProfile).
PROD_PROFILE = {
    "name": "prod",
    "client-id": "lagd",
    "kafka-version": "auto",
    "tls": {"name": "prod", "noverify": False, "certfile": "", "keyfile": "", "cafile": ""},
    "sasl": {"name": "prod", "handshake-first": True, "username": "lagd"},
}
PROD_MODULE = {
    "class-name": "kafka",
    "servers": ["kafka1:9092"],
    "client-profile": PROD_PROFILE,
    "topic-refresh": 60,
    "offset-refresh": 10,
}


async def test_cluster_module_has_burrows_shape_and_no_secrets(api: aiohttp.ClientSession) -> None:
    for path in ("/v3/kafka/prod", "/v3/config/cluster/prod"):
        code, _, body = await fetch(api, "GET", path)
        assert code == 200, path
        same(body, env(path, "cluster module detail returned", module=PROD_MODULE))
        assert "hunter2" not in json.dumps(body)
    for path in ("/v3/kafka/nope", "/v3/config/cluster/nope"):
        code, _, body = await fetch(api, "GET", path)
        assert code == 404, path
        same(body, env(path, "cluster module not found", error=True))


def test_refresh_seconds_are_whole_as_burrows_and_a_fraction_stays_a_fraction() -> None:
    """Burrow's settings hold whole seconds, lagd's may hold half a second (the demo samples
    twice a second): that must not read as 0, which means off."""
    from lagd.http.burrow_v3 import _secs

    assert (_secs(10.0), type(_secs(10.0))) == (10, int)
    assert _secs(0.5) == 0.5 and _secs(2.25) == 2.25


async def test_consumer_detail_windows_nulls_first_and_current_lag_with_dash(api: aiohttp.ClientSession) -> None:
    code, _, body = await fetch(api, "GET", "/v3/kafka/prod/consumer/g-warn")
    assert code == 200
    expected_topics = {
        "orders": [
            {
                "offsets": [off(100, 10_000, 0), off(200, 20_000, 0), off(300, 30_000, 0)],
                "owner": "",
                "client_id": "",
                "current-lag": 0,
            },
            {
                "offsets": [off(500, 10_000, 500), off(1000, 20_000, 1000), off(1500, 30_000, 1500)],
                "owner": "/10.0.0.7",
                "client_id": "worker-7",
                "current-lag": 1500,
            },
        ]
    }
    same(body, env("/v3/kafka/prod/consumer/g-warn", "consumer detail returned", topics=expected_topics))
    # events has partitions 0 and 1; g-stall committed only to 0: partition 1 is an empty window
    code, _, body = await fetch(api, "GET", "/v3/kafka/prod/consumer/g-stall")
    rows = body["topics"]["events"]
    assert [r["current-lag"] for r in rows] == [2950, 0]
    assert rows[1] == {"offsets": [None, None, None], "owner": "", "client_id": "", "current-lag": 0}


async def test_lag_and_status_of_a_warn_group(api: aiohttp.ClientSession) -> None:
    def status(partitions: list[Any]) -> dict[str, Any]:
        return {
            "cluster": CLUSTER,
            "group": "g-warn",
            "status": "WARN",
            "complete": 1.0,
            "partitions": partitions,
            "partition_count": 2,
            "maxlag": WARN_P1,
            "totallag": 1500,
        }

    path = "/v3/kafka/prod/consumer/g-warn/lag"
    code, _, body = await fetch(api, "GET", path)
    assert code == 200
    same(body, env(path, "consumer status returned", status=status([WARN_P0, WARN_P1])))
    path = "/v3/kafka/prod/consumer/g-warn/status"  # only the partitions that are not OK
    code, _, body = await fetch(api, "GET", path)
    assert code == 200
    same(body, env(path, "consumer status returned", status=status([WARN_P1])))


# Each group committed to one partition of a two-partition topic: Burrow counts both, the
# one without commits OK with complete 0 (partition_count "counts every partition of every
# topic the group has committed to").
@pytest.mark.parametrize(
    ("group", "group_status", "statuses", "totallag"),
    [
        ("g-ok", "OK", ["OK", "OK"], 0),
        ("g-stall", "ERR", ["STALL", "OK"], 2950),
        ("g-rewind", "ERR", ["REWIND", "OK"], 2600),
        ("g-stop", "ERR", ["OK", "STOP"], 6700),
    ],
)
async def test_each_status(
    api: aiohttp.ClientSession, group: str, group_status: str, statuses: list[str], totallag: int
) -> None:
    code, _, body = await fetch(api, "GET", f"/v3/kafka/prod/consumer/{group}/lag")
    assert code == 200
    st = body["status"]
    assert list(st) == [
        "cluster", "group", "status", "complete", "partitions", "partition_count", "maxlag", "totallag"
    ]  # fmt: skip
    assert (st["status"], st["totallag"], st["partition_count"], st["complete"]) == (group_status, totallag, 2, 0.5)
    assert [p["status"] for p in st["partitions"]] == statuses
    padded = next(p for p in st["partitions"] if p["complete"] == 0.0)
    assert (padded["status"], padded["start"], padded["end"], padded["current_lag"]) == ("OK", None, None, 0)
    assert list(st["maxlag"]) == list(WARN_P0)
    assert list(st["maxlag"]["end"]) == ["offset", "timestamp", "observedAt", "lag"]
    code, _, body = await fetch(api, "GET", f"/v3/kafka/prod/consumer/{group}/status")
    assert [p["status"] for p in body["status"]["partitions"]] == [s for s in statuses if s != "OK"]


async def test_notfound_is_404_without_error(api: aiohttp.ClientSession) -> None:
    notfound = {
        "cluster": CLUSTER,
        "group": "nope",
        "status": "NOTFOUND",
        "complete": 1.0,
        "partitions": [],
        "partition_count": 0,
        "maxlag": None,
        "totallag": 0,
    }
    for suffix in ("lag", "status"):
        path = f"/v3/kafka/prod/consumer/nope/{suffix}"
        code, _, body = await fetch(api, "GET", path)
        assert code == 404
        same(body, env(path, "consumer status returned", status=notfound))


def config_env(path: str, message: str, **payload: Any) -> dict[str, Any]:
    """Burrow's config envelopes put `request` right after `message` (structs.go)."""
    return {"error": False, "message": message, "request": {"url": path, "host": HOST}, **payload}


# Burrow's shapes, field by field: core/internal/httpserver/config.go and structs.go
# (httpResponseConfigMain, httpResponseConfigModuleList, httpResponseConfigModule*).
async def test_config_paths_have_burrows_shapes_and_no_secrets(api: aiohttp.ClientSession) -> None:
    code, _, body = await fetch(api, "GET", "/v3/config")
    assert code == 200
    same(
        body,
        config_env(
            "/v3/config",
            "main config returned",
            general={"pidfile": "", "stdout-logfile": "", "access-control-allow-origin": ""},
            logging={
                "filename": "",
                "max-size": 0,
                "max-backups": 0,
                "max-age": 0,
                "use-local-time": False,
                "use-compression": False,
                "level": logs.current_level(),
            },
            zookeeper={"servers": [], "timeout": 0, "root-path": ""},
            httpserver={"default": {"address": "127.0.0.1:0", "tls": "", "timeout": 30}},
        ),
    )
    assert "hunter2" not in json.dumps(body) and TOKEN not in json.dumps(body)
    for kind, modules in (
        ("storage", ["default"]),
        ("evaluator", ["default"]),
        ("cluster", ["prod"]),
        ("consumer", ["prod"]),
        ("notifier", []),
    ):
        path = f"/v3/config/{kind}"
        code, _, body = await fetch(api, "GET", path)
        assert code == 200, path
        same(body, config_env(path, "module list returned", coordinator=kind, modules=modules))
    details = {
        "storage": {
            "class-name": "inmemory",
            "intervals": 10,
            "min-distance": 0,
            "group-allowlist": "",
            "expire-group": 604800,
        },
        "evaluator": {"class-name": "caching", "expire-cache": 5},
        "consumer": {
            "class-name": "kafka",
            "cluster": "prod",
            "servers": ["kafka1:9092"],
            "group-allowlist": ".*",
            "zookeeper-path": "",
            "zookeeper-timeout": 0,
            "client-profile": PROD_PROFILE,
            "offsets-topic": "__consumer_offsets",
            "start-latest": False,
        },
    }
    for kind, module in details.items():
        path = f"/v3/config/{kind}/{'prod' if kind == 'consumer' else 'default'}"
        code, _, body = await fetch(api, "GET", path)
        assert code == 200, path
        same(body, env(path, f"{kind} module detail returned", module=module))
    for path, message in (
        ("/v3/config/storage/x", "storage module not found"),
        ("/v3/config/consumer/x", "consumer module not found"),
        ("/v3/config/notifier/x", "notifier module not found"),
        ("/v3/config/nope", "config kind 'nope' not found: use one of storage, evaluator, cluster, consumer, notifier"),
    ):
        code, _, body = await fetch(api, "GET", path)
        assert code == 404, path
        same(body, env(path, message, error=True))


async def test_config_notifier_module_shows_no_sink_secrets() -> None:
    from lagd.core.config import SinkSettings

    settings = build_settings()
    settings.sinks["page"] = SinkSettings(name="page", kind="webhook", url="https://x.example/hook?key=hunter2")
    async with serve(build_context(settings)) as base, aiohttp.ClientSession(base) as s:
        _, _, body = await fetch(s, "GET", "/v3/config/notifier")
        assert body["modules"] == ["page"]
        path = "/v3/config/notifier/page"
        code, _, body = await fetch(s, "GET", path)
        assert code == 200
        module = {
            "class-name": "webhook",
            "group-allowlist": "",
            "interval": 30,
            "threshold": 2,
            "template-open": "",
            "template-close": "",
            "extra": {},
            "send-close": True,
        }
        same(body, env(path, "notifier module detail returned", module=module))


async def test_loglevel_get_and_post_with_token(api: aiohttp.ClientSession) -> None:
    before = logs.current_level()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        code, _, body = await fetch(api, "GET", "/v3/admin/loglevel")
        same(body, env("/v3/admin/loglevel", "log level returned", level=before))
        code, _, body = await fetch(api, "POST", "/v3/admin/loglevel", json={"level": "debug"})
        assert code == 401 and body["error"] is True and "Bearer" in body["message"]
        code, _, body = await fetch(
            api, "POST", "/v3/admin/loglevel", json={"level": "debug"}, headers={"Authorization": "Bearer wrong"}
        )
        assert code == 401
        code, _, body = await fetch(api, "POST", "/v3/admin/loglevel", json={"level": "debug"}, headers=auth)
        same(body, env("/v3/admin/loglevel", "set log level", level="debug"))
        assert logs.current_level() == "debug"
        code, _, body = await fetch(api, "POST", "/v3/admin/loglevel", json={"level": "loud"}, headers=auth)
        assert code == 400 and body["error"] is True and "unknown log level 'loud'" in body["message"]
        code, _, body = await fetch(api, "POST", "/v3/admin/loglevel", data=b"{not json", headers=auth)
        assert code == 400 and '{"level": "debug"}' in body["message"]
    finally:
        logs.set_level(before)


async def test_mutations_refused_without_a_configured_token() -> None:
    ctx = build_context(build_settings(auth_token=Secret("")))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        for method, path in (
            ("POST", "/v3/admin/loglevel"),
            ("DELETE", "/v3/kafka/prod/consumer/g-ok"),
            ("DELETE", "/v3/kafka/prod/consumer/g-ok/topic/orders"),
        ):
            code, _, body = await fetch(s, method, path, headers={"Authorization": "Bearer anything"})
            assert code == 403, path
            assert body["error"] is True and "set http.auth-token" in body["message"]
        assert ctx.state.group_topics(CLUSTER, "g-ok") == {"orders": [0]}


async def test_delete_group_and_topic() -> None:
    deleted: list[tuple[str, str]] = []
    ctx = build_context(on_delete=lambda c, g: deleted.append((c, g)))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serve(ctx) as base, aiohttp.ClientSession(base, headers=auth) as s:
        path = "/v3/kafka/prod/consumer/g-warn/topic/orders"
        code, _, body = await fetch(s, "DELETE", path)
        same(body, env(path, "consumer group topic removed"))
        assert ctx.state.group_topics(CLUSTER, "g-warn") == {}  # the group stays, without windows
        code, _, body = await fetch(s, "DELETE", "/v3/kafka/prod/consumer/g-stall/topic/orders")
        assert (code, body["message"]) == (404, "cluster or topic not found")
        path = "/v3/kafka/prod/consumer/g-stall"
        code, _, body = await fetch(s, "DELETE", path)
        assert code == 200
        same(body, env(path, "consumer group removed"))
        code, _, body = await fetch(s, "GET", path + "/lag")
        assert (code, body["status"]["status"]) == (404, "NOTFOUND")
        code, _, body = await fetch(s, "DELETE", path)
        assert (code, body["message"]) == (404, "cluster or consumer not found")
        assert deleted == [(CLUSTER, "g-warn"), (CLUSTER, "g-stall")]
        code, _, body = await fetch(s, "GET", "/v3/kafka/prod/consumer")
        assert body["consumers"] == ["g-ok", "g-rewind", "g-stop", "g-warn"]


async def test_auth_reads_and_cors() -> None:
    ctx = build_context(build_settings(auth_reads=True, cors_origin="https://dash.example"))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        code, _, body = await fetch(s, "GET", "/v3/kafka")
        assert code == 401 and body["error"] is True
        code, _, body = await fetch(s, "GET", "/v3/kafka", headers={"Authorization": f"Bearer {TOKEN}"})
        assert (code, body["clusters"]) == (200, ["prod"])
        assert (await fetch(s, "GET", "/burrow/admin"))[0] == 200  # probes stay open
        async with s.get("/burrow/admin/ready") as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "https://dash.example"
        async with s.options("/v3/kafka/prod/consumer/g-ok/lag") as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == "https://dash.example"
            assert "Authorization" in resp.headers["Access-Control-Allow-Headers"]


async def test_unknown_path_answers_the_envelope(api: aiohttp.ClientSession) -> None:
    code, _, body = await fetch(api, "GET", "/v3/nothing/here")
    assert code == 404 and body["error"] is True and body["request"]["url"] == "/v3/nothing/here"
    code, _, body = await fetch(api, "PUT", "/v3/kafka", headers={"Authorization": f"Bearer {TOKEN}"})
    assert code == 405 and body["error"] is True


async def test_unsupported_methods_answer_405_with_allow_not_403() -> None:
    """Without a token every change is refused (403), but a method no route takes is a 405."""
    ctx = build_context(build_settings(auth_token=Secret("")))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        for method, path, allow in (
            ("PUT", "/v3/kafka", "GET, HEAD"),
            ("POST", "/v3/kafka/prod/consumer/g-ok/lag", "GET, HEAD"),
            ("PATCH", "/v3/kafka/prod/consumer/g-ok", "DELETE, GET, HEAD"),
            ("DELETE", "/v3/admin/loglevel", "GET, HEAD, POST"),
        ):
            async with s.request(method, path) as resp:
                assert (resp.status, resp.headers["Allow"]) == (405, allow), (method, path)
                same(await resp.json(), env(path, f"method {method} not allowed here: use {allow}", error=True))
        assert (await fetch(s, "DELETE", "/v3/kafka/prod/consumer/g-ok"))[0] == 403  # a route: refused


async def test_status_bodies_are_at_most_cache_ttl_old() -> None:
    from lagd.core.model import Commit

    clock = [NOW]
    ctx = build_context()
    ctx.now_ms = lambda: clock[0]
    path = "/v3/kafka/prod/consumer/g-warn/lag"
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        assert (await fetch(s, "GET", path))[2]["status"]["totallag"] == 1500
        ctx.state.apply(Commit(CLUSTER, "g-warn", "orders", 1, 2900, 100, NOW, NOW))
        clock[0] = NOW + ctx.evaluator.cache_ttl_ms // 2 - 1  # every path keeps its body this long
        assert (await fetch(s, "GET", path))[2]["status"]["totallag"] == 1500  # cached answer
        clock[0] = NOW + ctx.evaluator.cache_ttl_ms
        assert (await fetch(s, "GET", path))[2]["status"]["totallag"] == 100  # 3000 - 2900


@pytest.fixture
def self_signed(tmp_path: Any) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 and its key (made by the openssl CLI)."""
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


async def test_tls_when_cert_and_key_are_set(self_signed: tuple[str, str]) -> None:
    import ssl

    cert, key = self_signed
    ctx = build_context(build_settings(tls_cert_file=str(cert), tls_key_file=str(key)))
    trust = ssl.create_default_context(cafile=str(cert))
    async with serve(ctx) as base:
        secure = base.replace("http://", "https://")
        async with aiohttp.ClientSession(secure) as s, s.get("/v3/kafka", ssl=trust) as resp:
            assert resp.status == 200
            assert (await resp.json())["clusters"] == ["prod"]
        async with aiohttp.ClientSession(base) as s:  # plain HTTP is not served on a TLS port
            with pytest.raises(aiohttp.ClientError):
                async with s.get("/v3/kafka") as resp:
                    await resp.read()


def test_direct_status_json_equals_the_dict_reference() -> None:
    from lagd.core.model import Commit, GroupMembers, PartitionOwner
    from lagd.evaluate import Evaluator
    from lagd.http import burrow_json
    from lagd.http.burrow_v3 import WRITER, group_status

    ctx = build_context()
    odd = 'ü "q" \\ \n\t'
    ctx.state.apply(Commit(CLUSTER, odd, odd, 3, 7, 1, 29_000, 29_001))
    ctx.state.apply(GroupMembers(CLUSTER, odd, 2, (PartitionOwner(odd, 3, odd, odd),)))
    ev = Evaluator(ctx.state)
    for group in ["g-ok", "g-warn", "g-stall", "g-rewind", "g-stop", odd, "nope"]:
        v = ev.group(CLUSTER, group, NOW)
        for only_bad in (False, True):
            for writer in (WRITER, burrow_json):  # compiled where built, and the Python it is compiled from
                assert writer.group_status_json(v, only_bad) == json.dumps(group_status(v, only_bad)), group
