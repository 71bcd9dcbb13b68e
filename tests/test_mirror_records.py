"""MirrorMaker 2's own records, as a real MM2 wrote them (tests/data/mirror-maker-*-records.json,
captured by `python -m tests.capture_mirror_records`), decoded without a broker."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagd.ingest.codec import DecodeError
from lagd.ingest.mirror_records import decode_checkpoint, decode_heartbeat, decode_offset_sync
from tests.capture_mirror_records import VECTORS
from tests.mirror_maker import check_capture

DECODERS: dict[str, Callable[[bytes | None, bytes | None], object]] = {
    "src:heartbeats": decode_heartbeat,
    "dst:heartbeats": decode_heartbeat,
    "dst:src.heartbeats": decode_heartbeat,
    "src:mm2-offset-syncs.dst.internal": decode_offset_sync,
    "dst:src.checkpoints.internal": decode_checkpoint,
}


@pytest.fixture(scope="module")
def capture() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(Path(VECTORS).read_text())
    return body


def test_every_record_mirror_maker_wrote_agrees_with_kafkas_tools(capture: dict[str, Any]) -> None:
    assert {name: len(rows) > 0 for name, rows in capture["records"].items()} == dict.fromkeys(DECODERS, True)
    assert check_capture(capture) == []


def test_a_checkpoint_that_disagrees_with_the_target_group_is_named(capture: dict[str, Any]) -> None:
    tampered = copy.deepcopy(capture)
    tampered["target_committed"] = {p: o + 1 for p, o in capture["target_committed"].items()}
    problems = check_capture(tampered)
    assert len(problems) == 2 and all("downstream" in p for p in problems)


def test_the_failover_gap_is_what_the_two_clusters_committed_offsets_differ_by(capture: dict[str, Any]) -> None:
    """MM2 translates conservatively: a group moved to the target re-reads, never skips."""
    for r in capture["records"]["dst:src.checkpoints.internal"]:
        checkpoint = decode_checkpoint(bytes.fromhex(r["key"]), bytes.fromhex(r["value"]))
        p = str(checkpoint.partition)
        gap = checkpoint.upstream_offset - checkpoint.downstream_offset
        assert gap == capture["source_committed"][p] - capture["target_committed"][p] >= 0


def _records(capture: dict[str, Any]) -> list[tuple[str, bytes, bytes]]:
    return [
        (name, bytes.fromhex(r["key"]), bytes.fromhex(r["value"]))
        for name, rows in capture["records"].items()
        for r in rows[:20]
    ]


def test_every_truncation_is_one_decode_error(capture: dict[str, Any]) -> None:
    for name, key, value in _records(capture):
        decode = DECODERS[name]
        for cut in range(len(key)):
            with pytest.raises(DecodeError):
                decode(key[:cut], value)
        # A value may carry fields a later version appends, so only cuts into its known fields fail.
        for cut in range(len(value)):
            with pytest.raises(DecodeError):
                decode(key, value[:cut])
        with pytest.raises(DecodeError):
            decode(key, None)
        with pytest.raises(DecodeError):
            decode(None, value)


def test_hostile_bytes_decode_or_raise_decode_error_only(capture: dict[str, Any]) -> None:
    rng = random.Random(54)
    for name, key, value in _records(capture):
        decode = DECODERS[name]
        for _ in range(200):
            k, v = bytearray(key), bytearray(value)
            target = k if rng.random() < 0.5 else v
            for _ in range(rng.randint(1, 3)):
                target[rng.randrange(len(target))] = rng.randrange(256)
            try:
                decode(bytes(k), bytes(v))
            except DecodeError as exc:
                assert exc.reason in {"truncated", "null_field", "bad_utf8", "bad_version", "bad_partition",
                                      "bad_offset", "trailing_bytes"}  # fmt: skip


def test_a_foreign_record_is_refused_not_misread() -> None:
    """An offset-sync key read as a checkpoint key has bytes left over, or too few."""
    with pytest.raises(DecodeError) as exc:
        decode_heartbeat(b"\x00\x03src\x00\x03dst\x00", b"\x00\x00" + bytes(8))
    assert exc.value.reason == "trailing_bytes"
    with pytest.raises(DecodeError) as exc:
        decode_offset_sync(b"\x00\x06orders\xff\xff\xff\xff", bytes(16))
    assert exc.value.reason == "bad_partition"
    with pytest.raises(DecodeError) as exc:
        decode_heartbeat(b"\x00\x03src\x00\x03dst", b"\xff\xff" + bytes(8))
    assert exc.value.reason == "bad_version"
