"""`lagd decode` as an operator runs it: JSON lines in, one JSON object per line out."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from lagd.ingest.decode_cmd import run
from lagd.sim.encode import encode_group_metadata, encode_offset_commit, encode_offset_tombstone

ROOT = Path(__file__).resolve().parent.parent


def test_decode_command_decodes_lines_and_reports_bad_ones() -> None:
    key, value = encode_offset_commit("orders-svc", "orders", 4, 1200, 1_700_000_000_000, metadata="m")
    gkey, gvalue = encode_group_metadata(
        "orders-svc", leader="m1", members=[("m1", "c1", "/10.0.0.1", {"orders": [4]})]
    )
    tkey, _ = encode_offset_tombstone("orders-svc", "orders", 4)
    lines = [
        json.dumps({"key": key.hex(), "value": value.hex()}),
        "this is not json",
        json.dumps({"key": tkey.hex(), "value": None}),
        json.dumps({"key": key.hex(), "value": value.hex()[:20]}),
        json.dumps({"key": "zz", "value": None}),
        "",
        json.dumps({"key": gkey.hex(), "value": gvalue.hex()}),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "lagd", "decode"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(out) == 6  # the blank line is skipped, every other line answers
    assert out[0] == {
        "type": "OffsetCommit",
        "group": "orders-svc",
        "topic": "orders",
        "partition": 4,
        "offset": 1200,
        "leader_epoch": -1,
        "metadata": "m",
        "commit_timestamp": 1_700_000_000_000,
        "expire_timestamp": -1,
        "key_version": 1,
        "value_version": 3,
        "topic_id": None,
    }
    assert out[1]["error"].startswith("not JSON")
    assert out[2] == {
        "type": "OffsetTombstone",
        "group": "orders-svc",
        "topic": "orders",
        "partition": 4,
        "key_version": 1,
    }
    assert out[3]["reason"] == "truncated" and out[3]["error"].startswith("cannot decode record")
    assert out[4]["error"].startswith("key or value is not hex")
    group = out[5]
    assert (group["type"], group["group"], group["leader"], group["value_version"]) == (
        "GroupMetadata",
        "orders-svc",
        "m1",
        3,
    )
    (member,) = group["members"]
    assert (member["member_id"], member["client_id"], member["client_host"]) == ("m1", "c1", "/10.0.0.1")
    assert member["assignment"] == {"version": 0, "partitions": {"orders": [4]}, "user_data": None}


def test_kip848_record_prints_topic_ids_as_kafka_does() -> None:
    line = json.dumps(
        {
            "key": "00080002673100026d31",
            "value": "0000000000010000000000020102030405060708090a0b0c0d0e0f10020000000501000502000000090100",
        }
    )
    out = io.StringIO()
    assert run(io.StringIO(line + "\n" + '{"key": 5}\n'), out) == 0
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["type"] == "ConsumerGroupCurrentMemberAssignment"
    assert first["assigned_partitions"] == [
        {"topic_id": "AQIDBAUGBwgJCgsMDQ4PEA", "partitions": [5], "assignment_epochs": [9]}
    ]
    assert "error" in second and "hex string 'key'" in second["error"]


class _BrokenRaw(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: object) -> int:
        raise OSError("input/output error")


def test_unreadable_stdin_exits_1() -> None:
    assert run(io.TextIOWrapper(io.BufferedReader(_BrokenRaw())), io.StringIO()) == 1
