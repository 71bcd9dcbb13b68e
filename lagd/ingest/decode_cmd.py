"""`lagd decode`: an operator's view of an offsets-topic dump, one JSON object per record.

Input lines are `{"key": "<hex>", "value": "<hex>" | null}`; each output line carries the
record's `"type"` and its fields (bytes as hex, topic ids in Kafka's text form), or
`"error"` for a line that is not valid input or a record that cannot be decoded. A bad line
never stops the rest.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, TextIO

from lagd.ingest.codec import DecodeError, Member, Record, decode, uuid_str

_UUID_FIELDS = frozenset({"topic_id"})


def _plain(obj: Any, name: str = "") -> Any:
    """JSON-ready form of a decoded record: bytes as hex, uuids as Kafka prints them."""
    if isinstance(obj, bytes):
        return uuid_str(obj) if name in _UUID_FIELDS else obj.hex()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(obj, Member) and f.name == "assignment" and value is not None:
                out[f.name] = {
                    "version": value.version,
                    "partitions": {topic: list(parts) for topic, parts in value.partitions},
                    "user_data": None if value.user_data is None else value.user_data.hex(),
                }
                continue
            out[f.name] = _plain(value, f.name)
        return out
    if isinstance(obj, tuple):
        return [_plain(x, name) for x in obj]
    return obj


def record_json(record: Record) -> dict[str, Any]:
    """The output object of one decoded record."""
    out: dict[str, Any] = {"type": record.__class__.__name__}
    out.update(_plain(record))
    return out


def _line(text: str) -> dict[str, Any]:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"error": f"not JSON ({exc.msg} at column {exc.colno}); expected {{'key': hex, 'value': hex|null}}"}
    if not isinstance(item, dict) or not isinstance(item.get("key"), str):
        return {"error": "expected an object with a hex string 'key' and a hex string or null 'value'"}
    raw_value = item.get("value")
    if raw_value is not None and not isinstance(raw_value, str):
        return {"error": "'value' must be a hex string or null"}
    try:
        key = bytes.fromhex(item["key"])
        value = None if raw_value is None else bytes.fromhex(raw_value)
    except ValueError as exc:
        return {"error": f"key or value is not hex: {exc}"}
    try:
        return record_json(decode(key, value))
    except DecodeError as exc:
        return {"error": f"cannot decode record: {exc}", "reason": exc.reason}


def run(stdin: TextIO, stdout: TextIO) -> int:
    """Decode every line of `stdin` to `stdout`; exit 0, or 1 when stdin cannot be read."""
    try:
        for text in stdin:
            if not text.strip():
                continue
            stdout.write(json.dumps(_line(text), ensure_ascii=False) + "\n")
    except (OSError, UnicodeDecodeError) as exc:
        stdout.flush()
        print(f"lagd decode: cannot read stdin: {exc}; pass JSON lines as UTF-8 text", file=sys.stderr)
        return 1
    stdout.flush()
    return 0
