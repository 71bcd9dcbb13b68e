"""The OpenAPI 3 document for /lagd/v1 and Burrow's v3 API (served at /lagd/v1/openapi.json).

Written by hand next to lagd_api so every field the handlers emit is described exactly;
the schemathesis test checks live answers against it.
"""

from __future__ import annotations

from typing import Any

from lagd.http.context import MAX_INT32, MAX_MS

INT = {"type": "integer"}
NUM = {"type": "number"}
STR = {"type": "string"}
# A cluster, group or topic name: Postgres text cannot hold NUL, so a name with one is a 400.
NAME = {"type": "string", "pattern": "^[^\\u0000]*$"}
BOOL = {"type": "boolean"}


def _nullable(s: dict[str, Any]) -> dict[str, Any]:
    return {**s, "type": [s["type"], "null"]}


def _ref_or_null(name: str) -> dict[str, Any]:
    return {"anyOf": [_ref(name), {"type": "null"}]}


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


_STATUS = {"type": "string", "enum": ["NOTFOUND", "OK", "WARN", "ERR"]}
_PSTATUS = {"type": "string", "enum": ["OK", "WARN", "STOP", "STALL", "REWIND"]}

SCHEMAS: dict[str, Any] = {
    "ShareGroup": _obj(
        {
            "group": STR,
            "state": STR,
            "observed_ms": INT,
            "error": _nullable(STR),
            "total_lag": _nullable(INT),
            "partitions": {
                "type": "array",
                "items": _obj(
                    {
                        "topic": STR,
                        "partition": INT,
                        "start_offset": _nullable(INT),
                        "lag": _nullable(INT),
                        "leader_epoch": _nullable(INT),
                        "error": _nullable(STR),
                    }
                ),
            },
        }
    ),
    "Error": _obj({"error": BOOL, "message": STR, "request": _obj({"url": STR, "host": STR})}),
    "Offset": _obj(
        {
            "offset": INT,
            "order": INT,
            "timestamp": INT,
            "observed": INT,
            "lag": _nullable(INT),
        }
    ),
    "Partition": _obj(
        {
            "topic": STR,
            "partition": INT,
            "status": _PSTATUS,
            "rule": STR,
            "reason": STR,
            "since": _nullable(INT),
            "current_lag": INT,
            "complete": NUM,
            "lag_seconds": NUM,
            "lag_seconds_estimated": BOOL,
            "lag_seconds_from": {"type": "string", "enum": ["log_end_samples", "record_timestamp", "bound"]},
            "record_timestamp_type": _nullable({"type": "string", "enum": ["LogAppendTime", "CreateTime"]}),
            "owner": STR,
            "client_id": STR,
            "start": _ref_or_null("Offset"),
            "end": _ref_or_null("Offset"),
        }
    ),
    "GroupSummary": _obj(
        {
            "cluster": STR,
            "group": STR,
            "status": _STATUS,
            "complete": NUM,
            "partition_count": INT,
            "totallag": INT,
            "lag_seconds": NUM,
            "not_ok": {"type": "array", "items": _PSTATUS},
            "evaluated_at": INT,
        }
    ),
    "Reason": _obj(
        {
            "status": _PSTATUS,
            "rule": STR,
            "reason": STR,
            "since": _nullable(INT),
            "partitions": {
                "type": "array",
                "items": _obj({"topic": STR, "partition": INT, "since": _nullable(INT)}),
            },
        }
    ),
    "Window": _obj(
        {
            "cluster": STR,
            "group": STR,
            "topic": STR,
            "partition": INT,
            "owner": STR,
            "client_id": STR,
            "window": {"type": "array", "items": _ref("Offset")},
            "log_end": {"type": "array", "items": _obj({"offset": INT, "ts": INT})},
        }
    ),
    "Incident": _obj(
        {
            "id": STR,
            "cluster": STR,
            "severity": STR,
            "state": {"type": "string", "enum": ["open", "resolved"]},
            "reason": STR,
            "opened_at": INT,
            "updated_at": INT,
            "resolved_at": _nullable(INT),
            "body": {"type": "object", "description": "The full incident: groups, partitions, statuses."},
        }
    ),
    "MirrorFlow": _obj(
        {
            "mirror": STR,
            "status": {"type": "string", "enum": ["OK", "LAGGING", "STALLED", "INCOMPLETE", "NO_HEARTBEATS"]},
            "reason": STR,
            "observed_at": INT,
            "newest_heartbeat_at": _nullable(INT),
            "heartbeat_age_s": _nullable(NUM),
            "delay_s": _nullable(NUM),
            "delay_trend_s_per_min": _nullable(NUM),
            "failover": {
                "type": "array",
                "items": _obj(
                    {
                        "group": STR,
                        "topic": STR,
                        "partition": INT,
                        "upstream_offset": INT,
                        "downstream_offset": INT,
                        "records": INT,
                        "seconds": _nullable(NUM),
                        "estimated": BOOL,
                    }
                ),
            },
            "partitions": {
                "type": "array",
                "items": _obj(
                    {
                        "topic": STR,
                        "partition": INT,
                        "records": INT,
                        "seconds": NUM,
                        "estimated": BOOL,
                        "synced": BOOL,
                        "as_of_ms": INT,
                    }
                ),
            },
            "missing": {
                "type": "array",
                "description": "Covered source topics whose copy the target has lacked for topic-missing-after "
                "(INCOMPLETE); partitions: the source's partitions without a copy.",
                "items": _obj(
                    {
                        "topic": STR,
                        "partitions": {"type": "array", "items": INT},
                        "since_ms": INT,
                        "topic_missing": BOOL,
                    }
                ),
            },
        }
    ),
    "Mirror": _obj(
        {
            "mirror": STR,
            "topic": STR,
            "target_topic": STR,
            "verdict": {
                "type": "string",
                "enum": ["OK", "LAGGING", "STALLED", "INCOMPLETE", "MISSING", "NOT_ENOUGH_DATA"],
            },
            "completeness": _nullable(NUM),
            "delay_seconds": _nullable(NUM),
            "source_rate": _nullable(NUM),
            "target_rate": _nullable(NUM),
            "evaluated_at": INT,
            "details": {"type": "object"},
        }
    ),
    "Quarantined": _obj(
        {
            "id": INT,
            "table": STR,
            "cluster": STR,
            "key": STR,
            "error": STR,
            "first_at": INT,
            "last_at": INT,
            "times": INT,
            "size": INT,
        }
    ),
    "DeadLetter": _obj(
        {
            "id": INT,
            "sink": STR,
            "event_id": STR,
            "outbox_id": INT,
            "error": STR,
            "attempts": INT,
            "first_attempt_at": INT,
            "dead_at": INT,
            "payload": {"type": "object"},
        }
    ),
    "TrendPoint": _obj(
        {
            "bucket": INT,
            "lag_max": _nullable(INT),
            "lag_last": _nullable(INT),
            "lag_seconds_max": _nullable(NUM),
            "consume_rate": _nullable(NUM),
            "produce_rate": _nullable(NUM),
        }
    ),
}

# One bucket of a mirrored topic (lagd jobs mirror-trends; lagd.evaluate.mirror_trends).
SCHEMAS["MirrorTrendPoint"] = _obj(
    {
        "topic": STR,
        "target_topic": STR,
        "bucket": INT,
        "produced": INT,
        "replicated": _nullable(INT),
        "completeness": _nullable(NUM),
        "completeness_cumulative": _nullable(NUM),
        "backlog": _nullable(INT),
        "delay_seconds": _nullable(NUM),
        "delay_beyond_history": BOOL,
    }
)

SCHEMAS["HistoryPoint"] = _obj(
    {"bucket": INT, "lag": _nullable(INT), "lag_seconds_max": _nullable(NUM), "commits": INT}
)

# When a catching-up group or partition is expected to clear (lagd.evaluate.clearing); null
# unless its lag falls significantly, and for a group while a partition not OK is not draining.
SCHEMAS["Clearing"] = _obj(
    {
        "clear_at": INT,
        "clears_in_seconds": NUM,
        "clear_at_early": INT,
        "clear_at_late": _nullable(INT),
        "drain_rate": NUM,
        "drain_rate_se": NUM,
        "z": NUM,
        "points": INT,
    }
)
SCHEMAS["Partition"]["properties"]["clearing"] = _ref_or_null("Clearing")
SCHEMAS["Partition"]["required"].append("clearing")
_group_detail = dict(SCHEMAS["GroupSummary"]["properties"])
_group_detail["clearing"] = _ref_or_null("Clearing")
_group_detail["maxlag"] = _ref_or_null("Partition")
_group_detail["reasons"] = {"type": "array", "items": _ref("Reason")}
_group_detail["partitions"] = {"type": "array", "items": _ref("Partition")}
SCHEMAS["Group"] = _obj(_group_detail)


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _err(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _path_param(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema or {**NAME, "minLength": 1}}


def _query_param(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_GROUP_PARAMS = [_path_param("cluster"), _path_param("group")]
_AUTH = {"401": _err("A bearer token is required (http.auth-reads) and was missing or wrong.")}


def _get(summary: str, params: list[dict[str, Any]], responses: dict[str, Any], tag: str = "lagd") -> dict[str, Any]:
    return {"get": {"summary": summary, "tags": [tag], "parameters": params, "responses": {**responses, **_AUTH}}}


def _delete(summary: str, params: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A change: needs the admin token (http.auth-token) as a bearer token."""
    return {
        "summary": summary,
        "tags": ["lagd"],
        "parameters": params,
        "security": [{"bearer": []}],
        "responses": {
            "200": _json(_obj({"removed": INT}), "How many rows were removed."),
            "401": _err("The bearer token was missing or wrong."),
            "403": _err("Changes are disabled: http.auth-token is not set."),
            **(extra or {}),
            **_DB,
        },
    }


_DB = {"503": _err("Postgres is unavailable; the answer says what to check.")}
_BAD = {"400": _err("A parameter is out of range or malformed; the message says what is expected.")}


# --- Burrow's v3 API (lagd.http.burrow_v3; shared/spec/burrow-http-api.md) ---------------
#
# The bodies follow Burrow 1.x field by field; JSON Schema does not fix the order of fields,
# but the descriptions say where Burrow's order matters (and lagd keeps it).

# The names Burrow's paths take. A cluster is named in lagd's configuration (lagd.core.config's
# name rule). A topic name is what Kafka allows: letters, digits, '.', '_' and '-', at most 249,
# not '.' or '..'. A group id may be any string in Kafka, but a path segment cannot be empty,
# '.' or '..' (URLs resolve them away), hold '{' or '}' (the router's placeholders) or '/'
# (Burrow's router takes none; lagd would need it sent as %2F), and Postgres text cannot hold
# NUL: such a group is not reachable by these paths.
V3_CLUSTER = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"}
V3_TOPIC = {
    "type": "string",
    "pattern": "^([A-Za-z0-9._-]*[A-Za-z0-9_-][A-Za-z0-9._-]*|[.]{3,})$",
    "maxLength": 249,
}
V3_GROUP = {"type": "string", "pattern": "^([^/{}\\u0000]*[^./{}\\u0000][^/{}\\u0000]*|[.]{3,})$"}
CONFIG_KINDS = ["storage", "evaluator", "cluster", "consumer", "notifier"]
LOG_LEVELS = ["debug", "info", "warning", "error"]

_REQUEST = _obj({"url": STR, "host": STR})


def _const(value: Any) -> dict[str, Any]:
    return {"const": value}


def _v3(message: str | dict[str, Any], payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Burrow's envelope of a success: error, message, the payload's fields, then request."""
    msg = _const(message) if isinstance(message, str) else message
    return _obj({"error": _const(False), "message": msg, **(payload or {}), "request": _REQUEST})


SCHEMAS.update(
    {
        "ConsumerOffset": _obj({"offset": INT, "timestamp": INT, "observedAt": INT, "lag": _nullable(INT)}),
        "PartitionStatus": _obj(
            {
                "topic": STR,
                "partition": INT,
                "owner": STR,
                "client_id": STR,
                "status": _PSTATUS,
                "start": _ref_or_null("ConsumerOffset"),
                "end": _ref_or_null("ConsumerOffset"),
                "current_lag": INT,
                "complete": NUM,
            }
        ),
        "ConsumerGroupStatus": _obj(
            {
                "cluster": STR,
                "group": STR,
                "status": {"type": "string", "enum": ["OK", "WARN", "ERR"]},
                "complete": NUM,
                "partitions": {"type": "array", "items": _ref("PartitionStatus")},
                "partition_count": INT,
                "maxlag": _ref_or_null("PartitionStatus"),
                "totallag": INT,
            }
        ),
        # Burrow answers an unknown or expired group with a full status object (and HTTP 404).
        "ConsumerGroupNotFound": _obj(
            {
                "cluster": STR,
                "group": STR,
                "status": _const("NOTFOUND"),
                "complete": _const(1),
                "partitions": {"type": "array", "maxItems": 0},
                "partition_count": _const(0),
                "maxlag": {"type": "null"},
                "totallag": _const(0),
            }
        ),
        "ConsumerPartitionDetail": _obj(
            {
                "offsets": {
                    "type": "array",
                    "items": _ref_or_null("ConsumerOffset"),
                    "description": "The window, oldest first, padded in front with null to storage.intervals.",
                },
                "owner": STR,
                "client_id": STR,
                "current-lag": INT,
            }
        ),
        "ClientProfile": _obj(
            {
                "name": STR,
                "client-id": STR,
                "kafka-version": STR,
                "tls": {
                    "anyOf": [
                        _obj({"name": STR, "noverify": BOOL, "certfile": STR, "keyfile": STR, "cafile": STR}),
                        {"type": "null"},
                    ]
                },
                "sasl": {"anyOf": [_obj({"name": STR, "handshake-first": BOOL, "username": STR}), {"type": "null"}]},
            }
        ),
        "ClusterModule": _obj(
            {
                "class-name": _const("kafka"),
                "servers": {"type": "array", "items": STR},
                "client-profile": _ref("ClientProfile"),
                # whole seconds as Burrow's; a fraction only where lagd's settings give one
                "topic-refresh": NUM,
                "offset-refresh": NUM,
            }
        ),
        "ConsumerModule": _obj(
            {
                "class-name": _const("kafka"),
                "cluster": STR,
                "servers": {"type": "array", "items": STR},
                "group-allowlist": STR,
                "zookeeper-path": STR,
                "zookeeper-timeout": INT,
                "client-profile": _ref("ClientProfile"),
                "offsets-topic": STR,
                "start-latest": BOOL,
            }
        ),
        "NotifierModule": _obj(
            {
                "class-name": STR,
                "group-allowlist": STR,
                "interval": INT,
                "threshold": INT,
                "template-open": STR,
                "template-close": STR,
                "extra": {"type": "object"},
                "send-close": BOOL,
            }
        ),
        "StorageModule": _obj(
            {
                "class-name": _const("inmemory"),
                "intervals": INT,
                "min-distance": INT,
                "group-allowlist": STR,
                "expire-group": INT,
            }
        ),
        "EvaluatorModule": _obj({"class-name": _const("caching"), "expire-cache": INT}),
    }
)

_RESTORING = {
    "503": {
        **_err("lagd is still restoring its state: a partial answer would be wrong, so none is given."),
        "headers": {"Retry-After": {"required": True, "schema": {"type": "string", "pattern": "^[0-9]+$"}}},
    }
}
_CHANGE = {
    "401": _err("The bearer token was missing or wrong."),
    "403": _err("Changes are disabled: http.auth-token is not set."),
}


def _v3_get(
    summary: str, params: list[dict[str, Any]], responses: dict[str, Any], restoring: bool = True
) -> dict[str, Any]:
    """A read of Burrow's API; the /v3/kafka* reads answer 503 until the state is restored."""
    return _get(summary, params, {**responses, **(_RESTORING if restoring else {})}, tag="burrow")


def _v3_change(summary: str, params: list[dict[str, Any]], responses: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "tags": ["burrow"],
        "parameters": params,
        "security": [{"bearer": []}],
        "responses": {**responses, **_CHANGE},
    }


def _text(pattern: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string", "pattern": pattern}}}}


def burrow_paths() -> dict[str, Any]:
    """Burrow's v3 paths as lagd answers them (GET unless noted; HEAD wherever GET is)."""
    cluster = _path_param("cluster", V3_CLUSTER)
    topic = _path_param("topic", V3_TOPIC)
    group = _path_param("group", V3_GROUP)
    not_found = _err("No such cluster, topic or group (the message says which, in Burrow's words).")
    names = {"type": "array", "items": STR}
    status_params = [cluster, group]
    status_404 = _json(
        _v3("consumer status returned", {"status": _ref("ConsumerGroupNotFound")}),
        "Unknown or expired group: Burrow's NOTFOUND status, with error false.",
    )
    return {
        "/burrow/admin": {
            "get": {
                "summary": "Liveness: GOOD while the process serves (never needs a token).",
                "tags": ["burrow"],
                "responses": {"200": _text("^GOOD$", "Alive.")},
            }
        },
        "/burrow/admin/ready": {
            "get": {
                "summary": "Readiness: READY once the state is restored and every cluster's reader has caught up "
                "(never needs a token).",
                "tags": ["burrow"],
                "responses": {
                    "200": _text("^READY$", "Ready."),
                    "503": _text(
                        "^(STARTING|DEGRADED: .+)$",
                        "STARTING while restoring or catching up; DEGRADED naming the clusters lagd cannot read.",
                    ),
                },
            }
        },
        "/v3/kafka": _v3_get(
            "The clusters lagd watches.",
            [],
            {"200": _json(_v3("cluster list returned", {"clusters": names}), "Cluster names, sorted.")},
        ),
        "/v3/kafka/{cluster}": _v3_get(
            "A cluster's settings as Burrow's cluster module (no secrets).",
            [cluster],
            {
                "200": _json(_v3("cluster module detail returned", {"module": _ref("ClusterModule")}), "The module."),
                "404": not_found,
            },
        ),
        "/v3/kafka/{cluster}/topic": _v3_get(
            "Every topic of the cluster the log-end sampler sees.",
            [cluster],
            {"200": _json(_v3("topic list returned", {"topics": names}), "Topic names, sorted."), "404": not_found},
        ),
        "/v3/kafka/{cluster}/topic/{topic}": _v3_get(
            "The newest log-end offset of each partition of a topic (index = partition).",
            [cluster, topic],
            {
                "200": _json(_v3("topic offsets returned", {"offsets": {"type": "array", "items": INT}}), "Offsets."),
                "404": not_found,
            },
        ),
        "/v3/kafka/{cluster}/topic/{topic}/consumers": _v3_get(
            "The groups that commit offsets for a topic.",
            [cluster, topic],
            {
                "200": _json(_v3("consumers of topic returned", {"consumers": names}), "Group names, sorted."),
                "404": not_found,
            },
        ),
        "/v3/kafka/{cluster}/consumer": _v3_get(
            "Every group of the cluster.",
            [cluster],
            {
                "200": _json(_v3("consumer list returned", {"consumers": names}), "Group names, sorted."),
                "404": not_found,
            },
        ),
        "/v3/kafka/{cluster}/consumer/{group}": {
            **_v3_get(
                "A group's commit windows: per topic a list indexed by partition ('current-lag' with a dash, "
                "as in Burrow).",
                status_params,
                {
                    "200": _json(
                        _v3(
                            "consumer detail returned",
                            {
                                "topics": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "type": "array",
                                        "items": _ref("ConsumerPartitionDetail"),
                                    },
                                }
                            },
                        ),
                        "The windows.",
                    ),
                    "404": not_found,
                },
            ),
            "delete": _v3_change(
                "Forget a group until it commits again (admin token).",
                status_params,
                {
                    "200": _json(_v3("consumer group removed"), "Removed."),
                    "404": not_found,
                    **_RESTORING,
                },
            ),
        },
        "/v3/kafka/{cluster}/consumer/{group}/status": _v3_get(
            "A group's status with only its non-OK partitions (cached for evaluator.cache-ttl).",
            status_params,
            {
                "200": _json(_v3("consumer status returned", {"status": _ref("ConsumerGroupStatus")}), "The status."),
                "404": status_404,
            },
        ),
        "/v3/kafka/{cluster}/consumer/{group}/lag": _v3_get(
            "A group's status with all its partitions (cached for evaluator.cache-ttl).",
            status_params,
            {
                "200": _json(_v3("consumer status returned", {"status": _ref("ConsumerGroupStatus")}), "The status."),
                "404": status_404,
            },
        ),
        "/v3/kafka/{cluster}/consumer/{group}/topic/{topic}": {
            "delete": _v3_change(
                "Forget one topic of a group until the group commits for it again (admin token).",
                [cluster, group, topic],
                {
                    "200": _json(_v3("consumer group topic removed"), "Removed."),
                    "404": not_found,
                    **_RESTORING,
                },
            )
        },
        "/v3/config": _v3_get(
            "lagd's settings in the shape of Burrow's main config ('request' comes third, as in Burrow).",
            [],
            {
                "200": _json(
                    _obj(
                        {
                            "error": _const(False),
                            "message": _const("main config returned"),
                            "request": _REQUEST,
                            "general": _obj(
                                {"pidfile": STR, "stdout-logfile": STR, "access-control-allow-origin": STR}
                            ),
                            "logging": _obj(
                                {
                                    "filename": STR,
                                    "max-size": INT,
                                    "max-backups": INT,
                                    "max-age": INT,
                                    "use-local-time": BOOL,
                                    "use-compression": BOOL,
                                    "level": {"type": "string", "enum": LOG_LEVELS},
                                }
                            ),
                            "zookeeper": _obj({"servers": names, "timeout": INT, "root-path": STR}),
                            "httpserver": _obj({"default": _obj({"address": STR, "tls": STR, "timeout": INT})}),
                        }
                    ),
                    "The main config.",
                )
            },
            restoring=False,
        ),
        "/v3/config/{kind}": _v3_get(
            "The modules of one kind: clusters and consumers per cluster, notifiers per sink, storage and "
            "evaluator one each ('default').",
            [_path_param("kind", {"type": "string", "enum": CONFIG_KINDS})],
            {
                "200": _json(
                    _obj(
                        {
                            "error": _const(False),
                            "message": _const("module list returned"),
                            "request": _REQUEST,
                            "coordinator": {"type": "string", "enum": CONFIG_KINDS},
                            "modules": names,
                        }
                    ),
                    "Module names ('request' comes third, as in Burrow).",
                ),
                "404": _err("No such kind."),
            },
            restoring=False,
        ),
        "/v3/config/{kind}/{name}": _v3_get(
            "One module's settings in Burrow's shape of its kind (no secrets, no sink URLs).",
            [
                _path_param("kind", {"type": "string", "enum": CONFIG_KINDS}),
                _path_param("name", V3_CLUSTER),
            ],
            {
                "200": _json(
                    _v3(
                        {"type": "string", "pattern": f"^({'|'.join(CONFIG_KINDS)}) module detail returned$"},
                        {
                            "module": {
                                "anyOf": [
                                    _ref(name)
                                    for name in (
                                        "ClusterModule",
                                        "ConsumerModule",
                                        "NotifierModule",
                                        "StorageModule",
                                        "EvaluatorModule",
                                    )
                                ]
                            }
                        },
                    ),
                    "The module.",
                ),
                "404": _err("No such kind or module."),
            },
            restoring=False,
        ),
        "/v3/admin/loglevel": {
            **_v3_get(
                "The log level.",
                [],
                {
                    "200": _json(
                        _v3("log level returned", {"level": {"type": "string", "enum": LOG_LEVELS}}), "The level."
                    )
                },
                restoring=False,
            ),
            "post": {
                **_v3_change(
                    "Change the log level of the running process (admin token).",
                    [],
                    {
                        "200": _json(
                            _v3("set log level", {"level": {"type": "string", "enum": LOG_LEVELS}}), "The new level."
                        ),
                        "400": _err("The body is not a JSON object with a known level."),
                    },
                ),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "level": {
                                        "type": "string",
                                        "enum": LOG_LEVELS,
                                        "description": "Case does not matter.",
                                    }
                                },
                                "required": ["level"],
                            }
                        }
                    },
                },
            },
        },
    }


METHOD_NOT_ALLOWED = {
    "description": "A method the path does not list (HEAD goes wherever GET does): the Error envelope, "
    "with the methods it takes in Allow; never 401 or 403.",
    "headers": {"Allow": {"required": True, "schema": STR}},
    "content": {"application/json": {"schema": _ref("Error")}},
}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (JSON Schema types, so nulls are exact)."""
    paths = {
        "/lagd/v1/groups": _get(
            "Every known group's verdict summary.",
            [_query_param("cluster", NAME, "Only groups of this cluster.")],
            {"200": _json(_obj({"groups": {"type": "array", "items": _ref("GroupSummary")}}), "Group summaries.")},
        ),
        "/lagd/v1/clusters": _get(
            "Each configured cluster and whether lagd sees it; a degraded cluster's verdicts are held.",
            [],
            {
                "200": _json(
                    _obj(
                        {
                            "clusters": {
                                "type": "array",
                                "items": _obj(
                                    {
                                        "cluster": STR,
                                        "degraded": {"type": "boolean"},
                                        # the reader reads but runs behind: verdicts held, not degraded
                                        "reader_behind": {"type": "boolean"},
                                        "blind_since": {"type": ["integer", "null"]},
                                        "reason": STR,
                                        "reader_caught_up": {"type": "boolean"},
                                        "offsets_source": {
                                            "type": ["string", "null"],
                                            "enum": ["topic", "admin", None],
                                        },
                                        "rules": {"type": "string", "enum": ["lagd", "burrow"]},
                                    }
                                ),
                            }
                        }
                    ),
                    "Clusters.",
                )
            },
        ),
        "/lagd/v1/share/{cluster}": _get(
            "The cluster's share groups (KIP-932), their lag per share-partition as Kafka reports it: shown, not judged.",
            [_path_param("cluster")],
            {
                "200": _json(
                    _obj(
                        {
                            "cluster": STR,
                            # null until the first answer; false: the brokers have no share-group API
                            "supported": _nullable(BOOL),
                            "groups": {"type": "array", "items": _ref("ShareGroup")},
                        }
                    ),
                    "Share groups.",
                ),
                "404": _err("Unknown cluster."),
            },
        ),
        "/lagd/v1/mirrors/{mirror}/flow": _get(
            "A MirrorMaker 2 flow judged from the heartbeats and checkpoints MM2 keeps on the target: OK, "
            "LAGGING, STALLED, INCOMPLETE or NO_HEARTBEATS, the heartbeat age, and per mirrored group and partition where "
            "it would resume after a failover.",
            [_path_param("mirror")],
            {
                "200": _json(_ref("MirrorFlow"), "The flow."),
                "404": _err("Unknown mirror, or one without a MirrorMaker 2 alias."),
                "503": _err("Not read yet."),
            },
        ),
        "/lagd/v1/mirrors/{mirror}/trends": _get(
            "A mirror's replication trend, as a Kafka audit counts it (`lagd jobs mirror-trends` writes it): per "
            "source topic and bucket of `step` seconds, the records produced on the source and replicated to the "
            "target, completeness (replicated / produced) in the bucket and from the UTC day's start, the backlog "
            "(source log end minus target log end) and the replication delay at the bucket end. Ordered by topic, "
            "then bucket; at most 10,000 points.",
            [
                _path_param("mirror"),
                _query_param("topic", NAME, "Only this source topic."),
                _query_param(
                    "from", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "Start (ms); default to - 1 day."
                ),
                _query_param(
                    "to", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "End (ms), inclusive; default now."
                ),
                _query_param("step", {"type": "integer", "enum": [60, 3600]}, "Bucket size in seconds."),
            ],
            {
                "200": _json(
                    _obj(
                        {
                            "mirror": STR,
                            "step": INT,
                            "from": INT,
                            "to": INT,
                            "points": {"type": "array", "items": _ref("MirrorTrendPoint")},
                        }
                    ),
                    "Trend points by topic, oldest first.",
                ),
                **_BAD,
                **_DB,
            },
        ),
        "/lagd/v1/share/{cluster}/{group}": _get(
            "One share group (KIP-932) as last polled from its coordinator.",
            _GROUP_PARAMS,
            {"200": _json(_ref("ShareGroup"), "The share group."), "404": _err("Unknown cluster or share group.")},
        ),
        "/lagd/v1/consumer/{cluster}/{group}": _get(
            "A group's verdict: statuses, lag, lag in seconds, and which rule fired on which partitions since when.",
            _GROUP_PARAMS,
            {"200": _json(_ref("Group"), "The verdict."), "404": _err("Unknown or expired group.")},
        ),
        "/lagd/v1/consumer/{cluster}/{group}/window/{topic}/{partition}": _get(
            "The commit window of one partition, oldest first, with the kept log-end samples.",
            [
                *_GROUP_PARAMS,
                _path_param("topic"),
                _path_param("partition", {"type": "integer", "minimum": 0, "maximum": MAX_INT32}),
            ],
            {
                "200": _json(_ref("Window"), "The window."),
                "404": _err("No window for this group-partition."),
                **_BAD,
            },
        ),
        "/lagd/v1/consumer/{cluster}/{group}/trend": _get(
            "Rolled-up lag of the group per bucket (sums over partitions; the trends job writes them).",
            [
                *_GROUP_PARAMS,
                _query_param("from", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "Start (ms)."),
                _query_param("to", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "End (ms), inclusive."),
                _query_param("step", {"type": "integer", "enum": [60, 3600]}, "Bucket size in seconds."),
            ],
            {
                "200": _json(
                    _obj(
                        {
                            "cluster": STR,
                            "group": STR,
                            "step": INT,
                            "from": INT,
                            "to": INT,
                            "points": {"type": "array", "items": _ref("TrendPoint")},
                        }
                    ),
                    "Trend points, oldest first.",
                ),
                **_BAD,
                **_DB,
            },
        ),
        "/lagd/v1/incidents": _get(
            "Incidents, newest first, each as of its last event: a member's change that leaves the "
            "incident's severity as it was waits for the next event (flap suppression, at most one update per "
            "update-interval), so a group's own status (/v3/.../status) can be newer.",
            [
                _query_param("state", {"type": "string", "enum": ["open", "resolved"]}, "Only this state."),
                _query_param("cluster", NAME, "Only this cluster."),
                _query_param("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most this many."),
            ],
            {
                "200": _json(_obj({"incidents": {"type": "array", "items": _ref("Incident")}}), "Incidents."),
                **_BAD,
                **_DB,
            },
        ),
        "/lagd/v1/mirrors": _get(
            "The latest verdict of each mirrored topic.",
            [],
            {"200": _json(_obj({"mirrors": {"type": "array", "items": _ref("Mirror")}}), "Mirrors."), **_DB},
        ),
    }
    paths["/lagd/v1/consumer/{cluster}/{group}/history"] = _get(
        "The group's lag and lag in seconds over time, from the stored commit and log-end history "
        "(no Spark job needed): at most 500 buckets of `step` seconds from `from`. `lag` is the sum over "
        "partitions of each one's last commit lag so far in the range (carried forward); `lag_seconds_max` "
        "the largest lag in seconds of a commit in the bucket (its time minus the first log-end sample at or "
        "beyond its offset; a lower bound beyond an hour before `from`).",
        [
            *_GROUP_PARAMS,
            _query_param("from", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "Start (ms); default to - 6 h."),
            _query_param(
                "to", {"type": "integer", "minimum": 0, "maximum": MAX_MS}, "End (ms), exclusive; default now."
            ),
            _query_param(
                "step",
                {"type": "integer", "minimum": 1, "maximum": 604800},
                "Bucket size in seconds, raised when the range would need more than 500 buckets (the answer has the step used); default the smallest round step giving at most 500 buckets.",
            ),
        ],
        {
            "200": _json(
                _obj(
                    {
                        "cluster": STR,
                        "group": STR,
                        "step": INT,
                        "from": INT,
                        "to": INT,
                        "points": {"type": "array", "items": _ref("HistoryPoint")},
                    }
                ),
                "Buckets with at least one commit, oldest first.",
            ),
            **_BAD,
            **_DB,
        },
    )
    paths["/lagd/v1/quarantine"] = {
        **_get(
            "Rows Postgres refused to store (newest first), kept aside so the rest was written.",
            [_query_param("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most this many.")],
            {
                "200": _json(_obj({"quarantine": {"type": "array", "items": _ref("Quarantined")}}), "Rows."),
                **_BAD,
                **_DB,
            },
        ),
        "delete": _delete("Remove every quarantined row.", []),
    }
    paths["/lagd/v1/dead-letters"] = _get(
        "Incident events a notification sink gave up on (newest first): retried for the sink's "
        "dead-letter-after, or refused by the receiver.",
        [
            _query_param(
                "sink",
                {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$", "maxLength": 200},
                "Only this sink.",
            ),
            _query_param("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most this many."),
        ],
        {
            "200": _json(_obj({"dead_letters": {"type": "array", "items": _ref("DeadLetter")}}), "Dead letters."),
            **_BAD,
            **_DB,
        },
    )
    paths["/lagd/v1/schemas"] = _get(
        "Names of the JSON Schemas (draft 2020-12) of lagd's notification payloads.",
        [],
        {"200": _json(_obj({"schemas": {"type": "array", "items": STR}}), "Schema names.")},
    )
    paths["/lagd/v1/schemas/{name}"] = _get(
        "One notification payload's JSON Schema (MQTT topics and the webhook sink's default body).",
        [_path_param("name", STR)],
        {"200": _json({"type": "object"}, "A JSON Schema."), "404": _err("No schema of this name.")},
    )
    paths["/lagd/v1/quarantine/{id}"] = {
        "delete": _delete(
            "Remove one quarantined row.",
            [_path_param("id", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1})],
            {"404": _err("No quarantined row with this id."), **_BAD},
        )
    }
    paths.update(burrow_paths())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lagd",
            "version": "1",
            "description": "lagd's own API (/lagd/v1): verdicts with reasons and lag in seconds, windows, "
            "incidents, mirrors and trends; and Burrow's v3 API (/v3, /burrow/admin) with Burrow 1.x's bodies, "
            "so Burrow's clients work unchanged. Every path answers a method it does not list with 405, the "
            "Allow header and the Error envelope (components/responses/MethodNotAllowed).",
        },
        "tags": [
            {"name": "lagd", "description": "lagd's own API."},
            {"name": "burrow", "description": "Burrow's v3 API, with Burrow 1.x's paths, bodies and messages."},
        ],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "responses": {"MethodNotAllowed": METHOD_NOT_ALLOWED},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
