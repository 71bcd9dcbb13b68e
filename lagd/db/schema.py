"""The Postgres schema: one SQLAlchemy MetaData that the code and Alembic both use.

Times are bigint milliseconds since the epoch, like everywhere else in lagd. The two history
tables are range-partitioned by time (one partition a day, created and dropped by the store),
so retention is a cheap DROP and the Spark jobs read one day at a time in parallel.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# --- live state (restored at start) ------------------------------------------------

# One row per group-partition: the sliding window in its flat layout (lagd.state.windows:
# offset, order, timestamp, observed, lag per entry, oldest first, a null lag as -2**63), each
# int a big-endian int64 (int8send order), so a write is one bytea per row.
windows = Table(
    "windows",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("entries", LargeBinary, nullable=False),
    # lagd.state.windows.group_hash of group_name: its offsets partition is group_hash % n,
    # which workers restore by (null in rows written before migration 0006, until rewritten)
    Column("group_hash", Integer, nullable=True),
    postgresql_with={"fillfactor": "50"},  # rewritten at every flush: room for in-place (HOT) updates
)

# A single daemon writes windows as a log instead (migration 0009, lagd.state.store): each flush
# appends its changed windows, an empty `entries` marking a removed one, and the persister copies
# every window of State into a new generation now and then, after which the older generations
# are dropped. At 1M group-partitions and 20,000 changed windows a second, appending them and
# copying as many again cost Postgres 0.13-0.21 of a core, 24 MB/s of WAL and 125-128 whole pages
# a second, against 0.35-0.36, 38-39 MB/s and 7,718-8,342 for the keyed upsert (bench_store
# --sustained 60, two runs on one box, 2026-11-28). The newest row of a key (highest seq) in the generations from the last
# complete one on is its window. `windows` above then stays empty; workers, which share a
# cluster's windows, keep writing it.
window_log = Table(
    "window_log",
    metadata,
    Column("generation", BigInteger, nullable=False),  # each partition window_log_<n> has it as its default
    # write order: the newest row of a key wins (from the sequence window_log_seq, uncached, so
    # the order holds across connections)
    Column("seq", BigInteger, server_default=text("nextval('window_log_seq')"), nullable=False),
    Column("cluster", Text, nullable=False),
    Column("group_name", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("entries", LargeBinary, nullable=False),  # as in windows; empty: the window was removed
    Column("group_hash", Integer, nullable=True),
    postgresql_partition_by="LIST (generation)",
)

# The generations of window_log: complete once every window of State was copied into it.
window_generations = Table(
    "window_generations",
    metadata,
    Column("generation", BigInteger, primary_key=True, autoincrement=False),
    Column("started_at", BigInteger, nullable=False),
    Column("completed_at", BigInteger, nullable=True),
)

# --- workers (lagd.scale) ------------------------------------------------------------

# Which worker owns each offsets-topic partition (so every group of it), as the consumer
# group's assignment gave it: any instance finds a group's owner here and asks it.
offsets_owners = Table(
    "offsets_owners",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("worker", Text, nullable=False),  # the owner's name (host:pid)
    Column("url", Text, nullable=False),  # where the owner's HTTP answers (http://host:port)
    Column("partitions", Integer, nullable=False),  # the offsets topic's partition count, as the owner saw it
    Column("updated_at", BigInteger, nullable=False),
)

# The current status of every group, written by whichever worker judges it: the notifier's
# input when workers share a cluster, so incidents group failures across workers.
group_verdicts = Table(
    "group_verdicts",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("status", Text, nullable=False),
    Column("at", BigInteger, nullable=False),  # when the status was judged (ms)
    Column("body", JSONB, nullable=False),  # the rest of the change: kind, partitions, topics, hosts
    Column("worker", Text, nullable=False),
    Column("version", BigInteger, nullable=False),  # from group_verdicts_version: readers follow it
    Index("ix_group_verdicts_version", "version"),
)

# Owners of a group's partitions, from the latest group metadata.
group_members = Table(
    "group_members",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("member_order", BigInteger, nullable=False),
    Column("state", Text, nullable=False, server_default=""),
    Column("owners", JSONB, nullable=False),  # [[topic, partition, host, client_id, member_id], ...]
    Column("group_hash", Integer, nullable=True),  # as in windows
)

# Each group's history of pauses (lagd.state.pauses): when lagd began watching it, then the end
# and length (ms) of each recent pause, oldest first; rewritten whole when it changes.
group_pauses = Table(
    "group_pauses",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("history", ARRAY(BigInteger), nullable=False),  # [since, end1, length1, end2, length2, ...]
    Column("group_hash", Integer, nullable=True),  # as in windows
)

# Deleted groups and the order of their tombstone, so a replayed older commit is refused.
group_tombstones = Table(
    "group_tombstones",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("tombstone_order", BigInteger, nullable=False),
    Column("group_hash", Integer, nullable=True),  # as in windows
)

# The last N broker log-end samples per partition, oldest first.
log_end = Table(
    "log_end",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offsets", ARRAY(BigInteger), nullable=False),
    Column("ts", ARRAY(BigInteger), nullable=False),
    # the oldest sample is a record's (lagd.ingest.record_ts): [committed, offset, ts, create time 0/1]
    Column("record", ARRAY(BigInteger), nullable=True),
)

# Where the offsets-topic reader resumes: next offset to read per offsets partition.
reader_positions = Table(
    "reader_positions",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("next_offset", BigInteger, nullable=False),
)

# Rows Postgres refused to store (a name too long to index, a NUL in text, ...): kept aside so
# the rest of their batch is written, shown at GET /lagd/v1/quarantine, removed with DELETE.
# One row per (table, key): a poison key written again only updates last_at and times.
quarantine = Table(
    "quarantine",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("table_name", Text, nullable=False),  # the table the row was meant for
    Column("cluster", Text, nullable=False),
    Column("row_key", Text, nullable=False),  # the row's key, escaped and shortened for display
    Column("key_hash", Text, nullable=False),  # sha256 of the full key
    Column("error", Text, nullable=False),
    Column("row_data", LargeBinary, nullable=False),  # the whole row, escaped (bytes: no NUL problem)
    Column("first_at", BigInteger, nullable=False),
    Column("last_at", BigInteger, nullable=False),
    Column("times", BigInteger, nullable=False, server_default="1"),
    UniqueConstraint("table_name", "key_hash", name="uq_quarantine_table_name_key_hash"),
)

# --- history (for the Spark jobs; partitioned by day on ts) -----------------------

commit_history = Table(
    "commit_history",
    metadata,
    Column("ts", BigInteger, nullable=False),  # commit timestamp (ms)
    Column("cluster", Text, nullable=False),
    Column("group_name", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("lag", BigInteger, nullable=True),
    Column("observed", BigInteger, nullable=False),
    postgresql_partition_by="RANGE (ts)",
)
# A group's history is found by a hash of its name (queries add `hashtext(group_name) =
# hashtext(:group)` and compare the name itself): an int key costs Postgres 80 ms of CPU per
# 20,000 rows COPYed into a day of 3M rows, where (cluster, group_name, ts) cost 190 ms (median of
# eight COPYs each, 2026-11-28; migration 0008). At 20,000 commits/s that is a tenth of a core.
Index("ix_commit_history_group", func.hashtext(commit_history.c.group_name), commit_history.c.ts)


def history_of_group(param: str) -> str:
    """SQL selecting one group's commit_history rows through ix_commit_history_group: the hash
    of the name for the index, the name itself so two names of one hash never mix. `param` is
    the group's placeholder in the caller's paramstyle (":grp", "%(group)s")."""
    return f"hashtext(group_name) = hashtext({param}) AND group_name = {param}"


log_end_history = Table(
    "log_end_history",
    metadata,
    Column("ts", BigInteger, nullable=False),
    Column("cluster", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    postgresql_partition_by="RANGE (ts)",
)
Index("ix_log_end_history_key", log_end_history.c.cluster, log_end_history.c.topic, log_end_history.c.ts)

# Group verdict changes (one row per change), for "time spent in each verdict".
status_history = Table(
    "status_history",
    metadata,
    Column("ts", BigInteger, nullable=False),
    Column("cluster", Text, nullable=False),
    Column("group_name", Text, nullable=False),
    Column("status", Text, nullable=False),
)
Index("ix_status_history_key", status_history.c.cluster, status_history.c.group_name, status_history.c.ts)

# --- incidents and their delivery ---------------------------------------------------

incidents = Table(
    "incidents",
    metadata,
    Column("id", Text, primary_key=True),
    Column("cluster", Text, nullable=False),
    Column("severity", Text, nullable=False),
    Column("state", Text, nullable=False),  # open | resolved
    Column("reason", Text, nullable=False),
    Column("opened_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("resolved_at", BigInteger, nullable=True),
    Column("body", JSONB, nullable=False),  # full incident (groups, partitions, statuses)
)
Index("ix_incidents_state", incidents.c.state, incidents.c.opened_at)

# Transactional outbox: written with the incident state, drained to MQTT in id order.
outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("event_id", Text, nullable=False, unique=True),
    Column("topic", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("retain", Boolean, nullable=False, server_default="false"),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger, nullable=True),
)
Index("ix_outbox_pending", outbox.c.id, postgresql_where=outbox.c.delivered_at.is_(None))

# Each notification sink's own position in the outbox (the last row it delivered or gave up
# on) and the retry state of the row after it, so backoff and dead-lettering survive restarts.
sink_positions = Table(
    "sink_positions",
    metadata,
    Column("sink", Text, primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("retry_id", BigInteger, nullable=True),  # the outbox row being retried, if any
    Column("retry_since", BigInteger, nullable=True),  # its first failed attempt (ms)
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text, nullable=False, server_default=""),
    Column("updated_at", BigInteger, nullable=False),
)

# Events a sink gave up on (after notify sink dead-letter-after, or refused outright).
dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("sink", Text, nullable=False),
    Column("outbox_id", BigInteger, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_attempt_at", BigInteger, nullable=False),
    Column("dead_at", BigInteger, nullable=False),
    Column("payload", JSONB, nullable=False),
    UniqueConstraint("sink", "event_id", name="uq_dead_letters_sink_event_id"),
)

# Persistent state of the incident engine: one row per cluster (JSON: its incidents without
# their members, the fence token), and each incident member's state in a row of its own,
# written only when it changes (a cluster-wide incident holds every group of the cluster).
incident_engine_state = Table(
    "incident_engine_state",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("state", JSONB, nullable=False),
)

incident_members = Table(
    "incident_members",
    metadata,
    Column("cluster", Text, primary_key=True),
    Column("incident_id", Text, primary_key=True),
    Column("member", Text, primary_key=True),
    Column("body", JSONB, nullable=False),
)

# --- Spark job output -----------------------------------------------------------------

trends = Table(
    "trends",
    metadata,
    Column("step", Integer, primary_key=True),  # bucket size in seconds: 60 or 3600
    Column("bucket", BigInteger, primary_key=True),  # bucket start (ms)
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("lag_min", BigInteger, nullable=True),
    Column("lag_mean", Float, nullable=True),
    Column("lag_max", BigInteger, nullable=True),
    Column("lag_last", BigInteger, nullable=True),
    Column("lag_seconds_max", Float, nullable=True),
    Column("consume_rate", Float, nullable=True),  # messages/s
    Column("produce_rate", Float, nullable=True),  # messages/s
)

trend_status = Table(
    "trend_status",
    metadata,
    Column("step", Integer, primary_key=True),
    Column("bucket", BigInteger, primary_key=True),
    Column("cluster", Text, primary_key=True),
    Column("group_name", Text, primary_key=True),
    Column("status", Text, primary_key=True),
    Column("seconds", Float, nullable=False),
)

job_watermarks = Table(
    "job_watermarks",
    metadata,
    Column("job", Text, primary_key=True),
    Column("watermark", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

mirror_status = Table(
    "mirror_status",
    metadata,
    Column("mirror", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("target_topic", Text, nullable=False),
    Column("verdict", Text, nullable=False),  # OK | LAGGING | STALLED | INCOMPLETE | MISSING | NOT_ENOUGH_DATA
    Column("completeness", Float, nullable=True),
    Column("delay_seconds", Float, nullable=True),
    Column("source_rate", Float, nullable=True),
    Column("target_rate", Float, nullable=True),
    Column("evaluated_at", BigInteger, nullable=False),
    Column("details", JSONB, nullable=False),
)

# Records produced against records replicated per bucket, per mirror and source topic (the
# mirror-trends job, lagd.jobs.mirror_trends; definitions in lagd.evaluate.mirror_trends).
mirror_trends = Table(
    "mirror_trends",
    metadata,
    Column("mirror", Text, primary_key=True),
    Column("topic", Text, primary_key=True),  # on the source
    Column("step", Integer, primary_key=True),  # bucket size in seconds: 60 or 3600
    Column("bucket", BigInteger, primary_key=True),  # bucket start (ms)
    Column("target_topic", Text, nullable=False),
    Column("produced", BigInteger, nullable=False),  # records appended to the source topic in the bucket
    Column("replicated", BigInteger, nullable=True),  # to the target topic; null: the target not sampled yet
    Column("completeness", Float, nullable=True),  # replicated / produced; null when nothing was produced
    Column("completeness_cumulative", Float, nullable=True),  # the same summed from the UTC day's start
    Column("backlog", BigInteger, nullable=True),  # source log end minus target log end at the bucket end
    Column("delay_seconds", Float, nullable=True),  # the mirror rules' delay at the bucket end
    Column("delay_beyond_history", Boolean, nullable=False, server_default="false"),  # delay: a lower bound
)
