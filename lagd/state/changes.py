"""What the in-memory state changed since the last flush: the unit of write-behind persistence.

State produces a Changes with `drain_changes()`; the store writes it in one transaction. While
Postgres is away, newer Changes are merged into the pending one (latest value per key wins,
history rows append), so the buffer is bounded by the number of live keys plus history rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lagd.core.model import GroupMembers
from lagd.state.history import CommitRow, CommitRows, as_commit_rows

WindowKey = tuple[str, str, str, int]  # cluster, group, topic, partition
GroupKey = tuple[str, str]  # cluster, group
PartitionKey = tuple[str, str, int]  # cluster, topic, partition

__all__ = ["Changes", "CommitRow", "CommitRows", "GroupKey", "LogEndRow", "PartitionKey", "StatusRow", "WindowKey"]
# (ts, cluster, topic, partition, offset)
LogEndRow = tuple[int, str, str, int, int]
# (ts, cluster, group, status)
StatusRow = tuple[int, str, str, str]


@dataclass
class Changes:
    # Full current window per changed key as the store keeps it (lagd.state.windows.window_bytes:
    # the flat window's ints as big-endian int64, oldest entry first, NO_LAG for a null lag);
    # None = the window was removed. Bytes, not a copy of the array: the collector tracks every
    # array, and hundreds of thousands of them waiting for Postgres made its passes long.
    windows: dict[WindowKey, bytes | None] = field(default_factory=dict)
    # Latest membership per changed group; None = removed.
    members: dict[GroupKey, GroupMembers | None] = field(default_factory=dict)
    # History of pauses per changed group (lagd.state.pauses: since, end, length, ...); None = removed.
    pauses: dict[GroupKey, tuple[int, ...] | None] = field(default_factory=dict)
    # Group tombstones seen: group -> order of the tombstone.
    tombstones: dict[GroupKey, int] = field(default_factory=dict)
    # Kept log-end samples per changed partition (offsets, ts), oldest first, and the mark that the
    # oldest is a record's (LogEnd.stored); None = topic deleted.
    log_end: dict[PartitionKey, tuple[list[int], list[int], list[int] | None] | None] = field(default_factory=dict)
    # Offsets-topic reader positions: (cluster, offsets partition) -> next offset to read.
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    commit_history: CommitRows = field(default_factory=CommitRows)  # columns: ~70 B a row (lagd.state.history)
    log_end_history: list[LogEndRow] = field(default_factory=list)
    status_history: list[StatusRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.commit_history = as_commit_rows(self.commit_history)

    def merge(self, newer: Changes) -> None:
        """Fold `newer` into self: keyed state takes the newer value, history appends."""
        self.windows.update(newer.windows)
        self.members.update(newer.members)
        self.pauses.update(newer.pauses)
        self.tombstones.update(newer.tombstones)
        self.log_end.update(newer.log_end)
        self.positions.update(newer.positions)
        self.commit_history.extend(newer.commit_history)
        self.log_end_history.extend(newer.log_end_history)
        self.status_history.extend(newer.status_history)

    def size(self) -> int:
        return (
            len(self.windows)
            + len(self.members)
            + len(self.pauses)
            + len(self.tombstones)
            + len(self.log_end)
            + len(self.positions)
            + len(self.commit_history)
            + len(self.log_end_history)
            + len(self.status_history)
        )

    def __bool__(self) -> bool:
        return self.size() > 0


def forget_groups(ch: Changes, cluster: str, groups: set[str], partitions: set[int]) -> None:
    """Drop from `ch` everything of `groups` of `cluster` and the reader positions of the
    offsets `partitions`: a worker let them go (lagd.scale), and written later these would
    overwrite, or duplicate in the history, what their new owner writes."""
    if not groups and not partitions:
        return
    for wkey in [k for k in ch.windows if k[0] == cluster and k[1] in groups]:
        del ch.windows[wkey]
    for group in groups:
        ch.members.pop((cluster, group), None)
        ch.pauses.pop((cluster, group), None)
        ch.tombstones.pop((cluster, group), None)
    for p in partitions:
        ch.positions.pop((cluster, p), None)
    if ch.commit_history:
        ch.commit_history = as_commit_rows(ch.commit_history).keep(lambda c, g: c != cluster or g not in groups)
    if ch.status_history:
        ch.status_history = [r for r in ch.status_history if r[1] != cluster or r[2] not in groups]
