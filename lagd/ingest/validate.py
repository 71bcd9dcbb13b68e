"""Edge checks: a decoded offsets-topic record is range-checked before it becomes an event.

`__consumer_offsets` is written by every client allowed to commit, so any field may be
hostile. What state, the evaluator and Postgres cannot hold is rejected here, counted by
reason (a fixed set of labels, so no record can mint a new metric series), logged at most
once per reason per minute with its offsets-topic position, and skipped. Pure: the clock
is the fetch time the reader passes in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters
from lagd.runtime import logs

log = logs.get(__name__)

MAX_OFFSET = 2**63 - 1  # offsets lie in [0, MAX_OFFSET); Kafka's int64, minus its sentinel
NO_OFFSET = -1  # Kafka's "no offset"
# Partitions of a topic whose count the metadata does not tell (yet). Kafka has no hard limit,
# but a topic with more partitions than this is far beyond any practical deployment.
MAX_PARTITIONS = 100_000
MAX_TOPIC_BYTES = 249  # Kafka's limit on topic names
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
LOG_EVERY_MS = 60_000
DAY_MS = 86_400_000

# Why the codec refused a record (DecodeError.reason).
DECODE_REASONS = (
    "null_key",
    "truncated",
    "bad_length",
    "bad_varint",
    "bad_version",
    "bad_record_type",
    "unknown_value_version",
    "null_field",
    "corrupt",
    "decoder_bug",
)
# Counted in lagd_ingest_decode_errors_total beside DECODE_REASONS, though no record is rejected
# for them (lagd.ingest.records): a KIP-848 assignment naming a topic id not yet seen, and
# KIP-848 owners left as stored by a reader resumed without them. docs/hostile-input.md lists both.
DECODE_ERRORS_ONLY = ("unknown_topic_id", "kip848_owners_unseeded")
# Why a decoded record was refused.
CHECK_REASONS = (
    "offset_none",
    "offset_out_of_range",
    "partition_out_of_range",
    "partition_beyond_topic",
    "topic_name_invalid",
    "group_name_too_long",
    "group_name_invalid",
    "owner_invalid",
    "commit_time_too_old",
    "commit_time_in_future",
)
# An event the state could not apply (lagd.daemon.apply_events): a bug, isolated and skipped.
APPLY_REASONS = ("apply_failed",)
REASONS = (*DECODE_REASONS, *CHECK_REASONS, *APPLY_REASONS)
_KNOWN = frozenset(REASONS)
# Expected often and harmless: counted, logged at debug only.
_QUIET = frozenset({"offset_none"})


@dataclass
class EdgeLimits:
    """The limits of one cluster's records, and when each reason was last logged."""

    cluster: str = ""
    max_group_bytes: int = 1024
    max_commit_age_ms: int = 7 * DAY_MS
    max_commit_ahead_ms: int = DAY_MS
    # topic -> partition count, from the reader's metadata; topics not in it use MAX_PARTITIONS
    partition_counts: dict[str, int] = field(default_factory=dict)
    # set when a commit names a partition beyond the known count: partitions may have been
    # added since the last metadata refresh, so the reader refreshes early
    stale_counts: bool = False
    _logged: dict[str, int] = field(default_factory=dict)
    # topics whose name passed topic_problem (commit_problem's short path; _commits.c reads it too)
    topics_ok: set[str] = field(default_factory=set)

    @classmethod
    def for_cluster(cls, c: ClusterSettings) -> EdgeLimits:
        age = c.max_commit_age if c.max_commit_age > 0 else 7 * 86_400.0
        return cls(c.name, c.max_group_name, int(age * 1000), int(c.max_commit_ahead * 1000))

    def topic_problem(self, topic: str) -> str | None:
        if topic in self.topics_ok:
            return None
        if _TOPIC_NAME.fullmatch(topic) is None:
            return "topic_name_invalid"
        if len(self.topics_ok) >= 100_000:
            self.topics_ok.clear()
        self.topics_ok.add(topic)
        return None

    def group_problem(self, group: str) -> str | None:
        # A str char is at most 4 UTF-8 bytes: encode only names that may be too long.
        if len(group) * 4 > self.max_group_bytes and len(group.encode("utf-8", "surrogatepass")) > self.max_group_bytes:
            return "group_name_too_long"
        if "\x00" in group:
            return "group_name_invalid"  # Postgres text cannot hold NUL
        return None

    def partition_problem(self, topic: str, partition: int) -> str | None:
        count = self.partition_counts.get(topic)
        if not 0 <= partition < (MAX_PARTITIONS if count is None else count):
            if partition < 0 or count is None:
                return "partition_out_of_range"
            self.stale_counts = self.stale_counts or partition < MAX_PARTITIONS  # added partitions?
            return "partition_beyond_topic"
        return None

    def commit_problem(
        self, group: str, topic: str, partition: int, offset: int, timestamp: int, now_ms: int
    ) -> str | None:
        """Why a commit cannot be applied, or None when it can."""
        if not 0 <= offset < MAX_OFFSET:
            return "offset_none" if offset == NO_OFFSET else "offset_out_of_range"
        if timestamp < now_ms - self.max_commit_age_ms:
            return "commit_time_too_old"
        if timestamp > now_ms + self.max_commit_ahead_ms:
            return "commit_time_in_future"
        # The usual commit, answered without three calls (ingest asks this of every record): a
        # partition of a known topic already found valid, a group name short enough and no NUL.
        count = self.partition_counts.get(topic)
        if (
            count is not None
            and 0 <= partition < count
            and topic in self.topics_ok
            and len(group) * 4 <= self.max_group_bytes
            and "\x00" not in group
        ):
            return None
        return self.group_problem(group) or self.topic_problem(topic) or self.partition_problem(topic, partition)

    def tombstone_problem(self, group: str, topic: str, partition: int) -> str | None:
        return self.group_problem(group) or self.topic_problem(topic) or self.partition_problem(topic, partition)

    def reject(
        self, counters: IngestCounters, reason: str, partition: int | None, order: int, now_ms: int, detail: str = ""
    ) -> None:
        """Count a skipped record; log it once per reason per minute with its position."""
        reason = reason if reason in _KNOWN else "corrupt"
        counters.count_rejected(reason)
        last = self._logged.get(reason)
        if reason in _QUIET or (last is not None and 0 <= now_ms - last < LOG_EVERY_MS):
            log.debug("offsets-topic record skipped", cluster=self.cluster, reason=reason, order=order)
            return
        self._logged[reason] = now_ms
        log.warning(
            "offsets-topic record skipped",
            cluster=self.cluster,
            reason=reason,
            offsets_partition=partition,
            offset=order,
            detail=detail[:200],
            rejected_so_far=counters.rejected.get(reason, 0),
            hint="a client wrote a record lagd cannot use; lagd_ingest_rejected_total counts them. "
            "Further ones with this reason are logged at debug for a minute",
        )
