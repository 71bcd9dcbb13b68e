"""Byte-exact `__consumer_offsets` records, as a Kafka group coordinator writes them.

The simulator writes these into a real broker's offsets topic so the reader is tested on
the bytes it meets in production; tests check them against the published vectors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagd.state.windows import offsets_partition

_h = struct.Struct(">h").pack
_i = struct.Struct(">i").pack
_q = struct.Struct(">q").pack


@dataclass(frozen=True)
class SimMember:
    """A classic group member; `assignment` maps topic -> partitions it owns."""

    member_id: str
    client_id: str
    client_host: str
    assignment: Mapping[str, Sequence[int]] = field(default_factory=dict)
    group_instance_id: str | None = None
    rebalance_timeout: int = 300_000
    session_timeout: int = 45_000
    subscription: bytes | None = None  # None: a v0 subscription of the assigned topics
    assignment_bytes: bytes | None = None  # None: a v0 assignment payload of `assignment`


def _str(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length; shorten it")
    return _h(len(raw)) + raw


def _bytes(b: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if b is None else _i(len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def _cbytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else _uvarint(len(b) + 1) + b


def _commit_key(group: str, topic: str, partition: int, key_version: int = 1) -> bytes:
    return _h(key_version) + _str(group) + _str(topic) + _i(partition)


def encode_offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    commit_timestamp: int,
    metadata: str = "",
    leader_epoch: int = -1,
    value_version: int = 3,
    expire_timestamp: int = -1,
    key_version: int = 1,
    topic_id: bytes | None = None,
) -> tuple[bytes, bytes]:
    """Key and value of an offset commit (value v0..v4, key type 0 or 1)."""
    key = _commit_key(group, topic, partition, key_version)
    v = value_version
    if v == 0 or v == 2:
        value = _h(v) + _q(offset) + _str(metadata) + _q(commit_timestamp)
    elif v == 1:
        value = _h(1) + _q(offset) + _str(metadata) + _q(commit_timestamp) + _q(expire_timestamp)
    elif v == 3:
        value = _h(3) + _q(offset) + _i(leader_epoch) + _str(metadata) + _q(commit_timestamp)
    elif v == 4:
        tags = b"\x00"
        if topic_id is not None and topic_id != bytes(16):
            if len(topic_id) != 16:
                raise ValueError("topic_id must be 16 bytes (a uuid)")
            tags = b"\x01\x00\x10" + topic_id
        value = _h(4) + _q(offset) + _i(leader_epoch) + _cstr(metadata) + _q(commit_timestamp) + tags
    else:
        raise ValueError(f"offset commit value version {v} does not exist; use 0..4")
    return key, value


def encode_offset_tombstone(group: str, topic: str, partition: int, key_version: int = 1) -> tuple[bytes, None]:
    """Key of an offset tombstone (the value is null)."""
    return _commit_key(group, topic, partition, key_version), None


def encode_assignment(
    assignment: Mapping[str, Sequence[int]], version: int = 0, user_data: bytes | None = None
) -> bytes:
    """A ConsumerProtocolAssignment payload."""
    out = [_h(version), _i(len(assignment))]
    for topic, parts in assignment.items():
        out.append(_str(topic) + _i(len(parts)) + b"".join(_i(p) for p in parts))
    out.append(_bytes(user_data))
    return b"".join(out)


def encode_subscription(topics: Iterable[str], version: int = 0, user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription v0 payload (v1+ add owned partitions we do not model)."""
    names = list(topics)
    return _h(version) + _i(len(names)) + b"".join(_str(t) for t in names) + _bytes(user_data)


def _member(m: Any) -> SimMember:
    if isinstance(m, SimMember):
        return m
    member_id, client_id, client_host, assignment = m
    return SimMember(member_id, client_id, client_host, assignment)


def encode_group_metadata(
    group: str,
    protocol_type: str = "consumer",
    generation: int = 1,
    protocol: str | None = "range",
    leader: str | None = "",
    members: Iterable[SimMember | tuple[str, str, str, Mapping[str, Sequence[int]]]] = (),
    value_version: int = 3,
    current_state_timestamp: int = -1,
) -> tuple[bytes, bytes]:
    """Key and value of classic group metadata (value v0..v4).

    Members are `SimMember`s or (member_id, client_id, client_host, {topic: partitions}).
    """
    v = value_version
    if not 0 <= v <= 4:
        raise ValueError(f"group metadata value version {v} does not exist; use 0..4")
    ms = [_member(m) for m in members]
    key = _h(2) + _str(group)
    flexible = v >= 4
    s = _cstr if flexible else _str
    b = _cbytes if flexible else _bytes
    out = [_h(v), s(protocol_type), _i(generation), s(protocol), s(leader)]
    if v >= 2:
        out.append(_q(current_state_timestamp))
    out.append(_uvarint(len(ms) + 1) if flexible else _i(len(ms)))
    for m in ms:
        subscription = m.subscription
        if subscription is None:
            subscription = encode_subscription(m.assignment.keys())
        out.append(s(m.member_id))
        if v >= 3:
            out.append(s(m.group_instance_id))
        out.append(s(m.client_id) + s(m.client_host))
        if v >= 1:
            out.append(_i(m.rebalance_timeout))
        out.append(_i(m.session_timeout))
        assignment = m.assignment_bytes
        if assignment is None:
            assignment = encode_assignment(m.assignment)
        out.append(b(subscription) + b(assignment))
        if flexible:
            out.append(b"\x00")
    if flexible:
        out.append(b"\x00")
    return key, b"".join(out)


def encode_group_tombstone(group: str) -> tuple[bytes, None]:
    """Key of a group tombstone (the value is null)."""
    return _h(2) + _str(group), None


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed int32."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_for(group: str, partitions: int = 50) -> int:
    """The offsets-topic partition of a group, as the coordinator computes it (the one
    definition lagd uses too: lagd.state.windows.offsets_partition)."""
    return offsets_partition(group, partitions)
