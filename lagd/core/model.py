"""Domain types shared by every part of lagd.

Ingest turns Kafka bytes into the events below; state applies them to windows; the
evaluator turns windows into verdicts. Everything here is plain data: no I/O, no clocks.
All times are integer milliseconds since the Unix epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class PartitionStatus(StrEnum):
    """Verdict for one group-partition (Burrow's partition status names)."""

    OK = "OK"
    WARN = "WARN"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"


class GroupStatus(StrEnum):
    """Verdict for one consumer group (Burrow's group status names)."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"


@dataclass(slots=True)
class WindowEntry:
    """One commit kept in a group-partition's sliding window.

    `order` is the commit record's offset inside its `__consumer_offsets` partition (or the
    observed time in admin-polling mode); it orders commits and makes replays harmless.
    `lag` is frozen when the commit is applied: None when no log-end offset was known or the
    commit arrived out of order.
    """

    offset: int
    order: int
    timestamp: int
    observed: int
    lag: int | None


# --- events: what ingest emits and state applies -------------------------------------


class Commit(NamedTuple):
    """A consumer group committed `offset` for one partition.

    A named tuple, where the other events are frozen dataclasses: ingest builds one for every
    record it reads, and a tuple is built in about a third of the time.
    """

    cluster: str
    group: str
    topic: str
    partition: int
    offset: int
    order: int
    timestamp: int
    observed: int


@dataclass(frozen=True, slots=True)
class OffsetDeleted:
    """An offset tombstone: the group no longer has a committed offset for the partition."""

    cluster: str
    group: str
    topic: str
    partition: int
    order: int


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """Which member of a group owns a partition (for Burrow's `owner` and `client_id`)."""

    topic: str
    partition: int
    host: str
    client_id: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class GroupMembers:
    """The group's current assignment; replaces every owner the group had before."""

    cluster: str
    group: str
    order: int
    owners: tuple[PartitionOwner, ...] = ()
    state: str = ""


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    """A group tombstone: the group and all its windows are gone."""

    cluster: str
    group: str
    order: int


@dataclass(frozen=True, slots=True)
class LogEndSample:
    """The broker's log-end offset (high watermark) of a partition at time `ts`.

    `relayed`: sampled by another worker and read from the store (lagd.scale.relay): kept for
    evaluation, but neither stored nor recorded in the history again.
    """

    cluster: str
    topic: str
    partition: int
    offset: int
    ts: int
    relayed: bool = False


@dataclass(frozen=True, slots=True)
class LogStartSample:
    """The broker's log-start offset (ListOffsets EARLIEST) of a partition at time `ts`: records
    below it were deleted by retention (or by DeleteRecords)."""

    cluster: str
    topic: str
    partition: int
    offset: int
    ts: int


@dataclass(frozen=True, slots=True)
class RecordTimestamp:
    """The timestamp (ms) of the record at `offset`, read from the topic: the first record at or
    above `committed` (a group's committed offset; above it where compaction or transaction
    markers left a gap). The log end passed `offset` at `record_ts`, an observation older than
    the kept log-end samples, so lag in seconds is exact from `committed` to `offset`.
    `log_append_time`: the broker stamped it (False: the producer's clock, CreateTime).
    `ts`: when lagd read it (ms; what a replay orders it by).
    `relayed`: read by a worker whose groups consume the topic but which does not sample it
    (lagd.scale): kept for evaluation, not stored (the row in `log_end` is its sampler's)."""

    cluster: str
    topic: str
    partition: int
    committed: int
    offset: int
    record_ts: int
    log_append_time: bool = True
    ts: int = 0
    relayed: bool = False


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """A topic's cleanup.policy as the broker describes it ("delete", "compact", "compact,delete")."""

    cluster: str
    topic: str
    cleanup_policy: str


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    """The topic no longer exists on the cluster: every group leaves it."""

    cluster: str
    topic: str


@dataclass(frozen=True, slots=True)
class ReaderPosition:
    """The offsets-topic reader has applied everything before `offset` in `partition`.

    Emitted after the events of a fetched batch, so a position is only stored together with
    (or after) the changes it covers, and a restart resumes exactly there.
    """

    cluster: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetsPartitionReset:
    """Partition `partition` of the offsets topic (of `partitions`) is read again from its start:
    the topic was recreated or truncated. Its new records' orders (their offsets) may be lower
    than the orders kept for its groups, which would make every new commit look like a replay."""

    cluster: str
    partition: int
    partitions: int


Event = (
    Commit
    | OffsetDeleted
    | GroupMembers
    | GroupDeleted
    | LogEndSample
    | LogStartSample
    | RecordTimestamp
    | TopicPolicy
    | TopicDeleted
    | ReaderPosition
    | OffsetsPartitionReset
)


@dataclass(slots=True)
class IngestCounters:
    """What ingest saw and skipped; exposed at /metrics. Keys are free-form labels."""

    records_by_type: dict[str, int] = field(default_factory=dict)
    decode_errors: dict[str, int] = field(default_factory=dict)
    filtered_groups: int = 0

    def count_record(self, kind: str, n: int = 1) -> None:
        self.records_by_type[kind] = self.records_by_type.get(kind, 0) + n

    def count_error(self, reason: str) -> None:
        self.decode_errors[reason] = self.decode_errors.get(reason, 0) + 1

    # Broker-side trouble (connection lost, request failed), by "<reader>_<error class>".
    failures: dict[str, int] = field(default_factory=dict)

    def count_failure(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1

    # The explained failure (lagd.ingest.diagnose) last logged by any reader of the cluster,
    # and when (monotonic s): a wrong password fails every reader, and is told once between them.
    told: tuple[str, float] | None = None

    def tell(self, problem: str, now: float, every: float | None) -> bool:
        """Whether `problem` is to be logged now: not when a reader logged it less than `every` s
        ago, nor ever again while it lasts when `every` is None (a setting to change: one warning).
        `answered` forgets it: the cluster let a reader in."""
        if self.told is not None and self.told[0] == problem and (every is None or now - self.told[1] < every):
            return False
        self.told = (problem, now)
        return True

    def answered(self) -> None:
        """A reader of the cluster got in: a problem met again later is news, told again."""
        self.told = None

    # Records skipped as invalid, by a reason of lagd.ingest.validate.REASONS (a fixed set).
    rejected: dict[str, int] = field(default_factory=dict)

    def count_rejected(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    # Times the offsets-topic reader found its stored positions outside a partition's range
    # (topic recreated or truncated) and read that partition again from its start.
    offsets_topic_rereads: int = 0
