"""Decoder for the records MirrorMaker 2 writes about its own progress.

Pure and synchronous, like `lagd.ingest.codec`: bytes in, one record dataclass out, or
`DecodeError` with a short reason for counters. MM2 (`org.apache.kafka.connect.mirror`) writes
three internal topics, each with Kafka's classic protocol types (int16/32/64 big-endian; a
STRING is an int16 length then UTF-8):

- `heartbeats` on the source, replicated to `<source>.heartbeats` on the target: key
  (sourceClusterAlias, targetClusterAlias), value an int16 version (0) then the timestamp in ms
  at which the heartbeat was emitted. Its arrival time on the target minus that timestamp is
  the replication latency of the flow.
- `mm2-offset-syncs.<target>.internal` (on the source by default): key (topic, partition),
  value (upstreamOffset, offset): the record at `upstreamOffset` on the source was copied to
  `offset` on the target. No version header.
- `<source>.checkpoints.internal` on the target: key (group, topic, partition), value an int16
  version (0) then (upstreamOffset, offset, metadata): the group's committed offset on the
  source and where it would resume on the target.

Every length is checked against the bytes that remain, so a hostile record is one counted
error; trailing bytes after a version-0 value are tolerated (a later version may append
fields, as Kafka's own readers allow), a version below 0 is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from lagd.ingest.codec import DecodeError, Reader

__all__ = [
    "Checkpoint",
    "Heartbeat",
    "OffsetSync",
    "decode_checkpoint",
    "decode_heartbeat",
    "decode_offset_sync",
]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat MM2 emitted for the flow `source` -> `target` at `timestamp_ms` (source clock)."""

    source: str
    target: str
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """Offset `upstream_offset` of `topic`/`partition` on the source was copied to `downstream_offset`."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Group `group`'s committed offset on the source (`upstream_offset`) and its translation on the
    target (`downstream_offset`) for the source topic `topic` (named as on the source)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str


class _Fields(Reader):
    """A `Reader` that names what it reads (a heartbeat key, a checkpoint value) in its errors,
    and holds MM2's fields to its rules: strings must be UTF-8, partitions and offsets not negative."""

    __slots__ = ("what",)

    def __init__(self, buf: bytes, what: str) -> None:
        super().__init__(buf)
        self.what = what

    def _need(self, n: int) -> int:
        p = self.pos
        if p + n > self.end:
            raise DecodeError("truncated", f"{self.what}: need {n} bytes at {p}, {self.end - p} left")
        self.pos = p + n
        return p

    def string(self, field: str) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null_field", f"{self.what}: {field} is null or has length {n}")
        p = self._need(n)
        try:
            return self.buf[p : p + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError("bad_utf8", f"{self.what}: {field} is not UTF-8 ({exc.reason})") from None

    def partition(self) -> int:
        v = self.int32()
        if v < 0:
            raise DecodeError("bad_partition", f"{self.what}: partition {v}")
        return v

    def offset(self, field: str) -> int:
        v = self.int64()
        if v < 0:
            raise DecodeError("bad_offset", f"{self.what}: {field} {v}")
        return v

    def version(self) -> int:
        v = self.int16()
        if v < 0:
            raise DecodeError("bad_version", f"{self.what}: version {v}")
        return v

    def done(self) -> None:
        """A key must be read whole: its bytes name the record, so extra ones mean a foreign record."""
        if self.pos != len(self.buf):
            raise DecodeError("trailing_bytes", f"{self.what}: {len(self.buf) - self.pos} bytes after the fields")


def _present(data: bytes | None, what: str) -> bytes:
    if data is None:
        raise DecodeError("null_field", f"{what} is null")
    return data


def decode_heartbeat(key: bytes | None, value: bytes | None) -> Heartbeat:
    """A record of `heartbeats` or `<alias>.heartbeats`."""
    k = _Fields(_present(key, "heartbeat key"), "heartbeat key")
    source = k.string("sourceClusterAlias")
    target = k.string("targetClusterAlias")
    k.done()
    v = _Fields(_present(value, "heartbeat value"), "heartbeat value")
    v.version()
    return Heartbeat(source, target, v.int64())


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    """A record of `mm2-offset-syncs.<alias>.internal`."""
    k = _Fields(_present(key, "offset-sync key"), "offset-sync key")
    topic = k.string("topic")
    partition = k.partition()
    k.done()
    v = _Fields(_present(value, "offset-sync value"), "offset-sync value")
    upstream = v.offset("upstreamOffset")
    downstream = v.offset("offset")
    return OffsetSync(topic, partition, upstream, downstream)


def decode_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    """A record of `<alias>.checkpoints.internal`."""
    k = _Fields(_present(key, "checkpoint key"), "checkpoint key")
    group = k.string("group")
    topic = k.string("topic")
    partition = k.partition()
    k.done()
    v = _Fields(_present(value, "checkpoint value"), "checkpoint value")
    v.version()
    upstream = v.offset("upstreamOffset")
    downstream = v.offset("offset")
    metadata = v.string("metadata")
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)
