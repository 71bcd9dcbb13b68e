"""Decoder for `__consumer_offsets` records (spec: shared/spec/consumer-offsets-format.md).

Pure and synchronous: bytes in, one record dataclass out, or `DecodeError`. Every length
is checked against the bytes that remain before anything is sliced or allocated, so a
corrupt record costs one counted error, never a crash, a hang or a huge allocation.

Offset commits are by far the most frequent record, so their path is written flat (a few
precompiled `struct` reads, no per-field calls); everything else goes through `Reader`.

Share groups (KIP-932, types 9..15) and streams groups (KIP-1071, types 17..23) are named
by their key (`GroupRecord`: kind, group, member) and their values left unread: lagd takes
neither lag nor owners from them (share-group lag comes from the admin API, see
`lagd.ingest.share_groups`; a streams application's commits are ordinary type 1 records).

KIP-848 groups name topics by topic id (a uuid) in their assignment records (types 7, 8).
The decoder returns the raw ids; mapping them to names needs other records of the topic
(type 4 partition metadata, written by 3.7-4.0 brokers, or the topic id tag of a v4
commit), which is state, so it is left to callers (see `lagd.ingest.records`).
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroupCurrentMemberAssignment",
    "ConsumerGroupMemberMetadata",
    "ConsumerGroupMetadata",
    "ConsumerGroupPartitionMetadata",
    "ConsumerGroupTargetAssignmentMember",
    "ConsumerGroupTargetAssignmentMetadata",
    "ConsumerGroupTombstone",
    "ControlRecord",
    "DecodeError",
    "GroupMetadata",
    "GroupRecord",
    "GroupTombstone",
    "Member",
    "OffsetCommit",
    "OffsetTombstone",
    "Record",
    "SkippedRecord",
    "Subscription",
    "TopicAssignment",
    "TopicMetadata",
    "decode",
    "decode_assignment",
    "decode_control_record",
    "decode_subscription",
    "decode_value",
    "uuid_str",
]

_H = struct.Struct(">h")
_HH = struct.Struct(">hh")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V3HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V1HEAD = struct.Struct(">hqh")  # version, offset, metadata length (v0, v1, v2)
_QQ = struct.Struct(">qq")

UUID_ZERO = bytes(16)
T = TypeVar("T")


class DecodeError(ValueError):
    """A record that cannot be decoded; `reason` is a short label for counters."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


# --- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """An offset commit (key type 0 or 1, value v0..v4)."""

    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    key_version: int
    value_version: int
    topic_id: bytes | None = None  # v4 tag 0; None when absent


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    """An offset key with a null value: the committed offset is gone."""

    group: str
    topic: str
    partition: int
    key_version: int = 1


@dataclass(frozen=True, slots=True)
class Assignment:
    """A consumer-protocol assignment: topic -> partitions, plus opaque user data."""

    version: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None


@dataclass(frozen=True, slots=True)
class Subscription:
    """A consumer-protocol subscription (fields of later versions get their defaults)."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Member:
    """A classic-protocol group member. `assignment` is None when the payload is not a
    consumer-protocol assignment (other protocol types, or bytes that do not parse)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: Assignment | None
    assignment_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Classic group metadata (key type 2, value v0..v4)."""

    group: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[Member, ...]
    value_version: int


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    """A group key with a null value: the group was deleted."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """KIP-848 type 3: the group epoch."""

    group: str
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic of a type 4 record: the id -> name map KIP-848 assignments need."""

    topic_id: bytes
    topic_name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadata:
    """KIP-848 type 4 (brokers 3.7-4.0): metadata of the subscribed topics."""

    group: str
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A classic-protocol member inside a KIP-848 group (tag 0 of type 5)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadata:
    """KIP-848 type 5: who a member is (host, client id) and what it subscribes to."""

    group: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadata:
    """KIP-848 type 6: the epoch of the target assignment."""

    group: str
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """Partitions of one topic, named by topic id (KIP-848 records)."""

    topic_id: bytes
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMember:
    """KIP-848 type 7: what the assignor wants a member to own."""

    group: str
    member_id: str
    topic_partitions: tuple[TopicAssignment, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignment:
    """KIP-848 type 8: what a member owns now (its partition owners)."""

    group: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicAssignment, ...]
    partitions_pending_revocation: tuple[TopicAssignment, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupTombstone:
    """A KIP-848 record (types 3..8, 16) with a null value: that one record is deleted."""

    record_type: int
    group: str
    member_id: str | None = None


# Share-group (KIP-932) and streams-group (KIP-1071) record types: their kind (the label they
# are counted under) and whether the key names a member after the group. Kafka's own names
# (CoordinatorRecordType); 9 and 18 were written by 4.0 and 4.0-4.1 only (partition metadata,
# replaced by a hash of it in the group's metadata record).
GROUP_RECORD_KINDS: dict[int, tuple[str, bool]] = {
    9: ("share_group_partition_metadata", False),
    10: ("share_group_member_metadata", True),
    11: ("share_group_metadata", False),
    12: ("share_group_target_assignment_metadata", False),
    13: ("share_group_target_assignment_member", True),
    14: ("share_group_current_member_assignment", True),
    15: ("share_group_state_partition_metadata", False),
    17: ("streams_group_metadata", False),
    18: ("streams_group_partition_metadata", False),
    19: ("streams_group_member_metadata", True),
    20: ("streams_group_target_assignment_metadata", False),
    21: ("streams_group_target_assignment_member", True),
    22: ("streams_group_current_member_assignment", True),
    23: ("streams_group_topology", False),
}


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A share-group or streams-group record (GROUP_RECORD_KINDS), named by its key.

    lagd uses neither their lag nor their members, so the value is only checked for its
    version; `value_version` is None for a tombstone (that one record deleted)."""

    record_type: int
    kind: str
    group: str
    member_id: str | None
    value_version: int | None


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A record of a type lagd does not know (or a newer value version of a KIP-848 type)."""

    record_type: int
    group: str | None


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A transaction marker (only meaningful when the batch's control bit is set)."""

    control_type: str  # "ABORT", "COMMIT" or "UNKNOWN(n)"
    key_version: int
    value_version: int
    coordinator_epoch: int


Record = (
    OffsetCommit
    | OffsetTombstone
    | GroupMetadata
    | GroupTombstone
    | ConsumerGroupMetadata
    | ConsumerGroupPartitionMetadata
    | ConsumerGroupMemberMetadata
    | ConsumerGroupTargetAssignmentMetadata
    | ConsumerGroupTargetAssignmentMember
    | ConsumerGroupCurrentMemberAssignment
    | ConsumerGroupTombstone
    | GroupRecord
    | SkippedRecord
)


def uuid_str(raw: bytes) -> str:
    """Kafka's text form of a uuid (url-safe base64 without padding), as its tools print it."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """A positional constructor for a frozen, slotted dataclass that sets the slots directly.

    A frozen dataclass's `__init__` goes through `object.__setattr__` per field, which costs
    more than decoding the field; ingest builds millions of these. The result takes every
    field positionally, in declaration order, and builds an equal object. Classes that are
    not slotted dataclasses get their own constructor back.
    """
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        return cls
    names = [f.name for f in dataclasses.fields(cls)]
    if not all(n.isidentifier() and n in cls.__dict__ for n in names):
        return cls
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for i, n in enumerate(names):
        ns[f"_s{i}"] = cls.__dict__[n].__set__
    body = "".join(f"    _s{i}(o, {n})\n" for i, n in enumerate(names))
    exec(f"def make({', '.join(names)}):\n    o = _new(_cls)\n{body}    return o\n", ns)
    make: Callable[..., T] = ns["make"]
    return make


_new_commit = fast_constructor(OffsetCommit)
_new_member = fast_constructor(Member)
_new_assignment = fast_constructor(Assignment)
_new_group = fast_constructor(GroupMetadata)


# --- a bounds-checked reader for everything but the commit fast path -------------------


def _truncated(need: int, pos: int, have: int) -> DecodeError:
    return DecodeError("truncated", f"need {need} byte(s) at {pos}, have {have}")


class Reader:
    """A cursor over one record's key or value; every read is bounds-checked and raises DecodeError.

    The `__consumer_offsets` decoders here and MirrorMaker 2's (`mirror_records`) share it."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def _need(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise _truncated(n, p, self.end - p)
        self.pos = p + n
        return p

    def int8(self) -> int:
        p = self._need(1)
        v = self.buf[p]
        return v - 256 if v > 127 else v

    def int16(self) -> int:
        v: int = _H.unpack_from(self.buf, self._need(2))[0]
        return v

    def int32(self) -> int:
        v: int = _I.unpack_from(self.buf, self._need(4))[0]
        return v

    def int64(self) -> int:
        v: int = _Q.unpack_from(self.buf, self._need(8))[0]
        return v

    def raw(self, n: int) -> bytes:
        p = self._need(n)
        return self.buf[p : p + n]

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            p = self._need(1)
            b = self.buf[p]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 28:
                raise DecodeError("bad_varint", f"varint longer than 5 bytes at {p}")

    def _text(self, n: int) -> str:
        p = self._need(n)
        return self.buf[p : p + n].decode("utf-8", "replace")

    # classic encoding
    def string(self, what: str) -> str:
        s = self.nullable_string()
        if s is None:
            raise DecodeError("null_field", f"{what} is null but must not be")
        return s

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            if n != -1:
                raise DecodeError("bad_length", f"string length {n} at {self.pos - 2}")
            return None
        return self._text(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            if n != -1:
                raise DecodeError("bad_length", f"bytes length {n} at {self.pos - 4}")
            return None
        return self.raw(n)

    def count(self, min_size: int) -> int:
        """An int32 array count, checked against what remains (elements take >= min_size)."""
        n = self.int32()
        if n < 0:
            if n != -1:
                raise DecodeError("bad_length", f"array count {n} at {self.pos - 4}")
            return 0
        if n * min_size > self.end - self.pos:
            raise DecodeError(
                "bad_length", f"array of {n} at {self.pos - 4} exceeds the {self.end - self.pos} bytes left"
            )
        return n

    # flexible (compact) encoding
    def compact_len(self) -> int:
        """Length from an unsigned varint of length+1; -1 means null."""
        return self.uvarint() - 1

    def compact_nullable_string(self) -> str | None:
        n = self.compact_len()
        return None if n < 0 else self._text(n)

    def compact_string(self, what: str) -> str:
        s = self.compact_nullable_string()
        if s is None:
            raise DecodeError("null_field", f"{what} is null but must not be")
        return s

    def compact_bytes(self) -> bytes | None:
        n = self.compact_len()
        return None if n < 0 else self.raw(n)

    def compact_count(self, min_size: int) -> int:
        n = self.compact_len()
        if n < 0:
            return -1
        if n * min_size > self.end - self.pos:
            raise DecodeError("bad_length", f"array of {n} exceeds the {self.end - self.pos} bytes left")
        return n

    def compact_int32s(self) -> tuple[int, ...] | None:
        n = self.compact_count(4)
        if n < 0:
            return None
        p = self._need(4 * n)
        return struct.unpack_from(f">{n}i", self.buf, p)

    def tags(self) -> dict[int, bytes]:
        """A tagged-field section: tag -> payload. Callers pick the tags they know."""
        n = self.uvarint()
        if n == 0:
            return {}
        if n > self.end - self.pos:
            raise DecodeError("bad_length", f"{n} tagged fields exceed the {self.end - self.pos} bytes left")
        out: dict[int, bytes] = {}
        for _ in range(n):
            tag = self.uvarint()
            size = self.uvarint()
            out[tag] = self.raw(size)
        return out


# --- offset commits (hot path) ----------------------------------------------------------


COMMIT_KEYS_MAX = 1 << 18
_V3EMPTY = struct.Struct(">hqihq")
KeyFields = tuple[str, str, int, int]  # (group, topic, partition, key type) of an offset key


class CommitKeys:
    """The (group, topic, partition, key type) of the offset keys one reader has read, at most
    `max_keys` of them: the same few keys (one per group-partition) recur in every commit, and
    the strings they share are interned. Each reader owns one; the compiled reader of the usual
    record (offsets_topic, `_commits.c`) reads and fills `known` too."""

    __slots__ = ("known", "max_keys")

    def __init__(self, max_keys: int = COMMIT_KEYS_MAX) -> None:
        self.known: dict[bytes, KeyFields] = {}
        self.max_keys = max_keys

    def fields(self, key: bytes) -> KeyFields:
        """The fields of `key`, read once and then remembered."""
        k = self.known.get(key)
        if k is None:
            k = _commit_key(key)
            if len(self.known) >= self.max_keys:
                _evict_oldest(self.known, self.max_keys)
            self.known[bytes(key)] = k
        return k


def _evict_oldest(keys: dict[bytes, KeyFields], keys_max: int) -> None:
    """Drop the oldest 64th of a full key cache (a dict keeps its insertion order). Cleared whole
    when full, the cache held the loop 15-17 ms at a time at 1M group-partitions (bench_http),
    where its 262,144 keys are a quarter of those in use; the compiled reader does the same."""
    for key in list(itertools.islice(keys, keys_max // 64 + 1)):
        del keys[key]


def _commit_key(key: bytes) -> KeyFields:
    """(group, topic, partition, key type) of an offset key, its strings interned."""
    n = len(key)
    if n < 4:
        raise _truncated(4, 0, n)
    rtype, glen = _HH.unpack_from(key, 0)
    if glen < 0:
        raise DecodeError("bad_length", f"group length {glen}")
    p = 4 + glen
    if p + 2 > n:
        raise _truncated(glen + 2, 4, n - 4)
    group = key[4:p].decode("utf-8", "replace")
    tlen = _H.unpack_from(key, p)[0]
    if tlen < 0:
        raise DecodeError("bad_length", f"topic length {tlen}")
    q = p + 2 + tlen
    if q + 4 > n:
        raise _truncated(tlen + 4, p + 2, n - p - 2)
    topic = key[p + 2 : q].decode("utf-8", "replace")
    partition: int = _I.unpack_from(key, q)[0]
    return (sys.intern(group), sys.intern(topic), partition, rtype)


CommitFields = tuple[str, str, int, int, int, str, int, int, int, int, "bytes | None"]


def commit_fields(key: bytes, value: bytes, keys: CommitKeys | None = None) -> CommitFields:
    """The fields of an offset commit (key type 0 or 1, non-null value) as a plain tuple:
    (group, topic, partition, offset, leader_epoch, metadata, commit_timestamp,
    expire_timestamp, key_version, value_version, topic_id). `keys` remembers the keys read.

    The hot path of ingest: flat code and precompiled structs, no object per field.
    """
    k = _commit_key(key) if keys is None else keys.fields(key)
    group, topic, partition, rtype = k
    n = len(value)
    if n < 2:
        raise _truncated(2, 0, n)
    version = _H.unpack_from(value, 0)[0]
    if version == 3:
        if n == 24:  # the usual record: empty metadata, one read
            _, offset, epoch, mlen, ts = _V3EMPTY.unpack(value)
            if mlen == 0:
                return (group, topic, partition, offset, epoch, "", ts, -1, rtype, 3, None)
        if n < 16:
            raise _truncated(16, 0, n)
        _, offset, epoch, mlen = _V3HEAD.unpack_from(value, 0)
        if mlen < 0:
            raise DecodeError("null_field", "metadata is null but must not be")
        end = 16 + mlen
        if end + 8 > n:
            raise _truncated(mlen + 8, 16, n - 16)
        meta = value[16:end].decode("utf-8", "replace") if mlen else ""
        return (group, topic, partition, offset, epoch, meta, _Q.unpack_from(value, end)[0], -1, rtype, 3, None)
    if 0 <= version <= 2:
        if n < 12:
            raise _truncated(12, 0, n)
        _, offset, mlen = _V1HEAD.unpack_from(value, 0)
        if mlen < 0:
            raise DecodeError("null_field", "metadata is null but must not be")
        end = 12 + mlen
        if version == 1:
            if end + 16 > n:
                raise _truncated(mlen + 16, 12, n - 12)
            ts, expire = _QQ.unpack_from(value, end)
        else:
            if end + 8 > n:
                raise _truncated(mlen + 8, 12, n - 12)
            ts = _Q.unpack_from(value, end)[0]
            expire = -1
        meta = value[12:end].decode("utf-8", "replace") if mlen else ""
        return (group, topic, partition, offset, -1, meta, ts, expire, rtype, version, None)
    if version == 4:
        r = Reader(value, 2)
        offset = r.int64()
        epoch = r.int32()
        meta = r.compact_string("metadata")
        ts = r.int64()
        topic_id = None
        tagged = r.tags()
        if 0 in tagged:
            if len(tagged[0]) != 16:
                raise DecodeError("bad_length", f"topic id tag of {len(tagged[0])} bytes, expected 16")
            topic_id = tagged[0]
        return (group, topic, partition, offset, epoch, meta, ts, -1, rtype, 4, topic_id)
    if version < 0:
        raise DecodeError("bad_version", f"offset commit value version {version}")
    raise DecodeError("unknown_value_version", f"offset commit value version {version} (lagd knows 0..4)")


# --- classic group metadata -----------------------------------------------------------


_II = struct.Struct(">ii")
_INTS = [struct.Struct(f">{n}i") for n in range(256)]


def _nstr(buf: bytes, p: int, end: int) -> tuple[str | None, int]:
    """A classic nullable string at `p`, and the position after it."""
    if p + 2 > end:
        raise _truncated(2, p, end - p)
    n = _H.unpack_from(buf, p)[0]
    p += 2
    if n < 0:
        if n != -1:
            raise DecodeError("bad_length", f"string length {n} at {p - 2}")
        return None, p
    q = p + n
    if q > end:
        raise _truncated(n, p, end - p)
    return buf[p:q].decode("utf-8", "replace"), q


def _str(buf: bytes, p: int, end: int, what: str) -> tuple[str, int]:
    s, p = _nstr(buf, p, end)
    if s is None:
        raise DecodeError("null_field", f"{what} is null but must not be")
    return s, p


def _nbytes(buf: bytes, p: int, end: int) -> tuple[bytes | None, int]:
    if p + 4 > end:
        raise _truncated(4, p, end - p)
    n = _I.unpack_from(buf, p)[0]
    p += 4
    if n < 0:
        if n != -1:
            raise DecodeError("bad_length", f"bytes length {n} at {p - 4}")
        return None, p
    q = p + n
    if q > end:
        raise _truncated(n, p, end - p)
    return buf[p:q], q


def _count(buf: bytes, p: int, end: int, min_size: int) -> int:
    """An int32 array count at `p` (null = empty), checked against the bytes that remain."""
    if p + 4 > end:
        raise _truncated(4, p, end - p)
    n: int = _I.unpack_from(buf, p)[0]
    if n < 0:
        if n != -1:
            raise DecodeError("bad_length", f"array count {n} at {p}")
        return 0
    if n * min_size > end - p - 4:
        raise DecodeError("bad_length", f"array of {n} at {p} exceeds the {end - p - 4} bytes left")
    return n


def _group_value(group: str, value: bytes) -> GroupMetadata:
    end = len(value)
    if end < 2:
        raise _truncated(2, 0, end)
    version = _H.unpack_from(value, 0)[0]
    if version < 0:
        raise DecodeError("bad_version", f"group metadata value version {version}")
    if version > 4:
        raise DecodeError("unknown_value_version", f"group metadata value version {version} (lagd knows 0..4)")
    if version == 4:
        return _group_value_flexible(group, value)
    protocol_type, p = _str(value, 2, end, "protocol_type")
    if p + 4 > end:
        raise _truncated(4, p, end - p)
    generation = _I.unpack_from(value, p)[0]
    protocol, p = _nstr(value, p + 4, end)
    leader, p = _nstr(value, p, end)
    cst = -1
    if version >= 2:
        if p + 8 > end:
            raise _truncated(8, p, end - p)
        cst = _Q.unpack_from(value, p)[0]
        p += 8
    count = _count(value, p, end, 18)
    p += 4
    consumer = protocol_type == "consumer"
    members = []
    for _ in range(count):
        member_id, p = _str(value, p, end, "member_id")
        instance_id = None
        if version >= 3:
            instance_id, p = _nstr(value, p, end)
        client_id, p = _str(value, p, end, "client_id")
        client_host, p = _str(value, p, end, "client_host")
        if version >= 1:
            if p + 8 > end:
                raise _truncated(8, p, end - p)
            rebalance_timeout, session_timeout = _II.unpack_from(value, p)
            p += 8
        else:
            if p + 4 > end:
                raise _truncated(4, p, end - p)
            rebalance_timeout = -1
            session_timeout = _I.unpack_from(value, p)[0]
            p += 4
        subscription, p = _nbytes(value, p, end)
        assignment_bytes, p = _nbytes(value, p, end)
        members.append(
            _member(
                consumer,
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription or b"",
                assignment_bytes or b"",
            )
        )
    return _new_group(group, protocol_type, generation, protocol, leader, cst, tuple(members), version)


def _member(
    consumer: bool,
    member_id: str,
    instance_id: str | None,
    client_id: str,
    client_host: str,
    rebalance_timeout: int,
    session_timeout: int,
    subscription: bytes,
    assignment_bytes: bytes,
) -> Member:
    assignment = None
    if consumer and assignment_bytes:
        try:
            assignment = decode_assignment(assignment_bytes)
        except DecodeError:
            assignment = None  # opaque bytes: the member stays, without owners
    return _new_member(
        member_id,
        instance_id,
        client_id,
        client_host,
        rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
        assignment_bytes,
    )


def _group_value_flexible(group: str, value: bytes) -> GroupMetadata:
    r = Reader(value, 2)
    protocol_type = r.compact_string("protocol_type")
    generation = r.int32()
    protocol = r.compact_nullable_string()
    leader = r.compact_nullable_string()
    cst = r.int64()
    consumer = protocol_type == "consumer"
    members = []
    for _ in range(max(r.compact_count(15), 0)):
        member_id = r.compact_string("member_id")
        instance_id = r.compact_nullable_string()
        client_id = r.compact_string("client_id")
        client_host = r.compact_string("client_host")
        rebalance_timeout = r.int32()
        session_timeout = r.int32()
        subscription = r.compact_bytes() or b""
        assignment_bytes = r.compact_bytes() or b""
        r.tags()
        members.append(
            _member(
                consumer,
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment_bytes,
            )
        )
    r.tags()
    return GroupMetadata(group, protocol_type, generation, protocol, leader, cst, tuple(members), 4)


def _topic_partitions(buf: bytes, p: int, end: int) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int]:
    """[topic string, int32 partitions[]] at `p`, and the position after it."""
    count = _count(buf, p, end, 6)
    p += 4
    out = []
    for _ in range(count):
        topic, p = _str(buf, p, end, "topic")
        n = _count(buf, p, end, 4)
        p += 4
        q = p + 4 * n
        out.append((topic, (_INTS[n] if n < 256 else struct.Struct(f">{n}i")).unpack_from(buf, p)))
        p = q
    return tuple(out), p


def decode_assignment(payload: bytes) -> Assignment:
    """A ConsumerProtocolAssignment (same layout v0..v3; newer versions read the same way,
    trailing bytes ignored)."""
    end = len(payload)
    if end < 2:
        raise _truncated(2, 0, end)
    version = _H.unpack_from(payload, 0)[0]
    if version < 0:
        raise DecodeError("bad_version", f"assignment version {version}")
    partitions, p = _topic_partitions(payload, 2, end)
    user_data, _ = _nbytes(payload, p, end)
    return _new_assignment(version, partitions, user_data)


def decode_subscription(payload: bytes) -> Subscription:
    """A ConsumerProtocolSubscription v0..v3 (newer versions read with the v3 layout)."""
    r = Reader(payload)
    version = r.int16()
    if version < 0:
        raise DecodeError("bad_version", f"subscription version {version}")
    topics = tuple(r.string("topic") for _ in range(r.count(2)))
    user_data = r.nullable_bytes()
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id = -1
    rack_id = None
    if version >= 1:
        owned, r.pos = _topic_partitions(payload, r.pos, r.end)
    if version >= 2:
        generation_id = r.int32()
    if version >= 3:
        rack_id = r.nullable_string()
    return Subscription(version, topics, user_data, owned, generation_id, rack_id)


# --- KIP-848 consumer-group records ---------------------------------------------------


def _uuid(r: Reader) -> bytes:
    return r.raw(16)


def _topic_assignments(r: Reader) -> tuple[TopicAssignment, ...]:
    out = []
    for _ in range(max(r.compact_count(18), 0)):
        topic_id = _uuid(r)
        partitions = r.compact_int32s() or ()
        epochs: tuple[int, ...] | None = ()
        tagged = r.tags()
        if 0 in tagged:
            epochs = Reader(tagged[0]).compact_int32s()
        out.append(TopicAssignment(topic_id, partitions, epochs))
    return tuple(out)


def _strings(r: Reader, what: str) -> tuple[str, ...]:
    return tuple(r.compact_string(what) for _ in range(max(r.compact_count(1), 0)))


def _classic_member(payload: bytes) -> ClassicMemberMetadata | None:
    r = Reader(payload)
    if r.int8() <= 0:  # null marker
        return None
    session_timeout = r.int32()
    protocols = []
    for _ in range(max(r.compact_count(3), 0)):
        name = r.compact_string("protocol name")
        metadata = r.compact_bytes() or b""
        r.tags()
        protocols.append((name, metadata))
    r.tags()
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _kip848_value(rtype: int, group: str, member_id: str | None, value: bytes) -> Record:
    r = Reader(value)
    version = r.int16()
    if version < 0:
        raise DecodeError("bad_version", f"record type {rtype} value version {version}")
    if version > 0:
        # Only v0 exists today; a newer layout is unknown, so the record is skipped, not guessed.
        return SkippedRecord(rtype, group)
    mid = member_id or ""
    rec: Record
    if rtype == 3:
        epoch = r.int32()
        tagged = r.tags()
        mhash = _Q.unpack(tagged[0])[0] if len(tagged.get(0, b"")) == 8 else 0
        rec = ConsumerGroupMetadata(group, epoch, mhash)
    elif rtype == 4:
        topics = []
        for _ in range(max(r.compact_count(23), 0)):
            topic_id = _uuid(r)
            name = r.compact_string("topic_name")
            num = r.int32()
            racks = []
            for _ in range(max(r.compact_count(6), 0)):
                part = r.int32()
                racks.append((part, _strings(r, "rack")))
                r.tags()
            r.tags()
            topics.append(TopicMetadata(topic_id, name, num, tuple(racks)))
        r.tags()
        rec = ConsumerGroupPartitionMetadata(group, tuple(topics))
    elif rtype == 5:
        instance_id = r.compact_nullable_string()
        rack_id = r.compact_nullable_string()
        client_id = r.compact_string("client_id")
        client_host = r.compact_string("client_host")
        topic_names = _strings(r, "subscribed topic")
        regex = r.compact_nullable_string()
        rebalance_timeout = r.int32()
        assignor = r.compact_nullable_string()
        tagged = r.tags()
        classic = _classic_member(tagged[0]) if 0 in tagged else None
        rec = ConsumerGroupMemberMetadata(
            group,
            mid,
            instance_id,
            rack_id,
            client_id,
            client_host,
            topic_names,
            regex,
            rebalance_timeout,
            assignor,
            classic,
        )
    elif rtype == 6:
        epoch = r.int32()
        r.tags()
        rec = ConsumerGroupTargetAssignmentMetadata(group, epoch)
    elif rtype == 7:
        parts = _topic_assignments(r)
        r.tags()
        rec = ConsumerGroupTargetAssignmentMember(group, mid, parts)
    elif rtype == 8:
        epoch = r.int32()
        previous = r.int32()
        state = r.int8()
        assigned = _topic_assignments(r)
        pending = _topic_assignments(r)
        r.tags()
        rec = ConsumerGroupCurrentMemberAssignment(group, mid, epoch, previous, state, assigned, pending)
    else:
        rec = SkippedRecord(rtype, group)
    return rec


# --- entry points ---------------------------------------------------------------------

_MEMBER_KEYED = frozenset({5, 7, 8})
_KIP848 = frozenset({3, 4, 5, 6, 7, 8, 16})


def decode(key: bytes, value: bytes | None, keys: CommitKeys | None = None) -> Record:
    """Decode one `__consumer_offsets` record; raises only `DecodeError`. `keys` remembers the
    offset keys read (a reader's own; see `CommitKeys`)."""
    if key is None:
        raise DecodeError("null_key", "record has no key (corrupt offsets-topic record)")
    if type(key) is not bytes:
        key = bytes(key)
    if value is not None and type(value) is not bytes:
        value = bytes(value)
    n = len(key)
    if n < 2:
        raise _truncated(2, 0, n)
    rtype = _H.unpack_from(key, 0)[0]
    try:
        if rtype == 1 or rtype == 0:
            if value is not None:
                return _new_commit(*commit_fields(key, value, keys))
            r = Reader(key, 2)
            group = r.string("group")
            topic = r.string("topic")
            return OffsetTombstone(group, topic, r.int32(), rtype)
        if rtype == 2:
            r = Reader(key, 2)
            group = r.string("group")
            if value is None:
                return GroupTombstone(group)
            return _group_value(group, value)
        if rtype < 0:
            raise DecodeError("bad_record_type", f"negative record type {rtype}")
        if rtype in _KIP848:
            r = Reader(key, 2)
            group = r.string("group")
            member_id = r.string("member_id") if rtype in _MEMBER_KEYED else None
            if value is None:
                return ConsumerGroupTombstone(rtype, group, member_id)
            return _kip848_value(rtype, group, member_id, value)
        if rtype in GROUP_RECORD_KINDS:
            return _group_record(rtype, key, value)
        # Types this lagd does not know: skipped, but the group is reported when the key
        # starts with one (every known type does).
        try:
            skipped_group: str | None = Reader(key, 2).string("group")
        except DecodeError:
            skipped_group = None
        return SkippedRecord(rtype, skipped_group)
    except (struct.error, IndexError, OverflowError, MemoryError) as exc:  # belt and braces
        raise DecodeError("corrupt", f"{exc.__class__.__name__}: {exc}") from None


def _group_record(rtype: int, key: bytes, value: bytes | None) -> GroupRecord:
    """A share- or streams-group record: the key's group (and member), the value's version."""
    kind, member_keyed = GROUP_RECORD_KINDS[rtype]
    r = Reader(key, 2)
    group = r.string("group")
    member_id = r.string("member_id") if member_keyed else None
    return GroupRecord(rtype, kind, group, member_id, None if value is None else _value_version(rtype, value))


def _value_version(rtype: int, value: bytes) -> int:
    version = Reader(value).int16()
    if version < 0:
        raise DecodeError("bad_version", f"record type {rtype} value version {version}")
    return version


def decode_value(record_type: int, value: bytes, group: str = "", member_id: str | None = None) -> Record:
    """Decode a value alone (for payloads captured without their key)."""
    try:
        if record_type in (0, 1):
            fake_key = _HH.pack(record_type, 0) + b"\x00\x00\xff\xff\xff\xff"  # group "", topic "", partition -1
            return dataclasses.replace(OffsetCommit(*commit_fields(fake_key, value)), group=group)
        if record_type == 2:
            return _group_value(group, value)
        if record_type in _KIP848:
            return _kip848_value(record_type, group, member_id, value)
        if record_type in GROUP_RECORD_KINDS:
            return GroupRecord(
                record_type, GROUP_RECORD_KINDS[record_type][0], group, member_id, _value_version(record_type, value)
            )
        return SkippedRecord(record_type, group or None)
    except (struct.error, IndexError, OverflowError, MemoryError) as exc:
        raise DecodeError("corrupt", f"{exc.__class__.__name__}: {exc}") from None


def decode_control_record(key: bytes, value: bytes) -> ControlRecord:
    """A transaction marker. Only call it for records of a control batch: by its bytes alone
    a marker key (00000000) cannot be told from a coordinator key."""
    k = Reader(key)
    key_version = k.int16()
    ctype = k.int16()
    v = Reader(value)
    value_version = v.int16()
    epoch = v.int32()
    name = {0: "ABORT", 1: "COMMIT"}.get(ctype, f"UNKNOWN({ctype})")
    return ControlRecord(name, key_version, value_version, epoch)
