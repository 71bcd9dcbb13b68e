"""The OpenAPI 3 document for /lagd/v1 (served at /lagd/v1/openapi.json).

Written by hand next to lagd_api so every field the handlers emit is described exactly;
the schemathesis test checks live answers against it.
"""

from __future__ import annotations

from typing import Any

from lagd.http.lagd_api import MAX_INT32, MAX_MS

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

SCHEMAS["HistoryPoint"] = _obj(
    {"bucket": INT, "lag": _nullable(INT), "lag_seconds_max": _nullable(NUM), "commits": INT}
)

_group_detail = dict(SCHEMAS["GroupSummary"]["properties"])
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


def _get(summary: str, params: list[dict[str, Any]], responses: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": params, "responses": {**responses, **_AUTH}}}


def _delete(summary: str, params: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A change: needs the admin token (http.auth-token) as a bearer token."""
    return {
        "summary": summary,
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
            "Incidents, newest first.",
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
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lagd",
            "version": "1",
            "description": "lagd's own API: verdicts with reasons and lag in seconds, windows, incidents, "
            "mirrors and trends. Burrow's v3 API is served alongside under /v3.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
