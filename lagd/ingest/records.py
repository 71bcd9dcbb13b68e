"""Offsets-topic records -> domain events. Never raises: bad records are counted and skipped.

Classic groups need no state: each group-metadata record carries every member and its
partitions. KIP-848 groups (types 3..8) spread that over one record per member, name topics
by topic id, and GroupMembers replaces the whole group's owners, so building their owners
needs state: pass a `ConsumerGroupOwners` (one per cluster) to fold types 4, 5 and 8 (and
the topic id of v4 commits) into GroupMembers. Without one, KIP-848 records are only
counted. Commits of KIP-848 groups are ordinary type 1 records and are always handled.

The fold is complete when it has seen every member's latest records, i.e. when the offsets
partition is read from its beginning (compaction keeps them). Resumed mid-partition it sees
only the members written since, so it must start from the owners already known: `seed` it
with the stored GroupMembers, and a member's record then changes only that member's
partitions, the others' stay as stored until their own records (or tombstones) come. Topic
ids learnt before the resume point are not stored: until a type 4 record or a v4 commit names
an id again, a member whose new assignment names it keeps its stored partitions of the
topics no known id names (stale rather than dropped; see `ConsumerGroupOwners.owners`). A fold
built for a resumed reader without the stored owners (`resumed=True`, never seeded) emits
nothing for KIP-848 groups rather than replacing their owners with a partial set; that is
counted (`kip848_owners_unseeded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from operator import attrgetter, itemgetter

from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    IngestCounters,
    OffsetDeleted,
    PartitionOwner,
)
from lagd.ingest.codec import (
    CommitKeys,
    ConsumerGroupCurrentMemberAssignment,
    ConsumerGroupMemberMetadata,
    ConsumerGroupPartitionMetadata,
    ConsumerGroupTombstone,
    DecodeError,
    GroupMetadata,
    GroupRecord,
    GroupTombstone,
    Member,
    OffsetCommit,
    OffsetTombstone,
    Record,
    SkippedRecord,
    TopicAssignment,
    commit_fields,
    decode,
    fast_constructor,
)
from lagd.ingest.validate import EdgeLimits
from lagd.runtime import logs

log = logs.get(__name__)

_KINDS = {
    "ConsumerGroupMetadata": "consumer_group_metadata",
    "ConsumerGroupPartitionMetadata": "consumer_group_partition_metadata",
    "ConsumerGroupMemberMetadata": "consumer_group_member_metadata",
    "ConsumerGroupTargetAssignmentMetadata": "consumer_group_target_assignment_metadata",
    "ConsumerGroupTargetAssignmentMember": "consumer_group_target_assignment_member",
    "ConsumerGroupCurrentMemberAssignment": "consumer_group_current_member_assignment",
}


_COMMIT_TYPES = (b"\x00\x01", b"\x00\x00")
_tuple_new = tuple.__new__  # a Commit (a named tuple) from its fields, without the per-call checks
# Events are built by the million: skip the frozen dataclasses' per-field __setattr__.
_new_owner = fast_constructor(PartitionOwner)


_NO_GROUPS: frozenset[str] = frozenset()  # learn_topic's usual answer
_Owned = tuple[tuple[str, int, PartitionOwner], ...]
_MEMBER_OWNERS: dict[tuple[str, str, str, bytes], _Owned] = {}
_MEMBER_OWNERS_MAX = 1 << 16
_BY_PARTITION = itemgetter(0, 1)
_OWNER_ORDER = attrgetter("topic", "partition", "member_id")


def _member_owners(m: Member) -> _Owned:
    """(topic, partition, owner) per partition a member owns, remembered by its assignment:
    rebalances rewrite the same member with the same partitions over and over."""
    k = (m.member_id, m.client_id, m.client_host, m.assignment_bytes)
    got = _MEMBER_OWNERS.get(k)
    if got is None:
        if m.assignment is None:
            got = ()
        else:
            host, client_id, member_id = m.client_host, m.client_id, m.member_id
            got = tuple(
                [
                    (topic, partition, _new_owner(topic, partition, host, client_id, member_id))
                    for topic, partitions in m.assignment.partitions
                    for partition in partitions
                ]
            )
        if len(_MEMBER_OWNERS) >= _MEMBER_OWNERS_MAX:
            _MEMBER_OWNERS.clear()
        _MEMBER_OWNERS[k] = got
    return got


def _members_event(cluster: str, rec: GroupMetadata, order: int) -> GroupMembers:
    members = rec.members
    if len(members) == 1:
        owned = sorted(_member_owners(members[0]), key=_BY_PARTITION)
    else:
        owned = sorted([o for m in members for o in _member_owners(m)], key=_BY_PARTITION)
    return GroupMembers(cluster, rec.group, order, tuple([o[2] for o in owned]), "Stable" if members else "Empty")


class ConsumerGroupOwners:
    """Partition owners of KIP-848 groups, folded from their per-member records.

    `resumed`: the records start mid-partition, so the fold alone is incomplete; it emits
    owners only once `seed` has given it the stored owners (a group not among them has none
    stored and starts empty), see the module docstring.
    """

    def __init__(self, *, resumed: bool = False) -> None:
        self.topic_names: dict[bytes, str] = {}
        self.members: dict[str, dict[str, tuple[str, str]]] = {}  # group -> member -> (host, client id)
        self.assigned: dict[str, dict[str, tuple[TopicAssignment, ...]]] = {}  # group -> member -> partitions
        # group -> member -> owners known before the first record read (the stored owners); in
        # use until that member's own assignment is read (see `owners`), dropped when it leaves
        self.seeded: dict[str, dict[str, tuple[PartitionOwner, ...]]] = {}
        self.resumed = resumed
        self.has_seed = False
        self._warned = False
        # topic id -> groups whose owners left out partitions of that id, unnamed as yet: Kafka 4
        # no longer writes type 4 records, so a new group's assignment often comes before the
        # first commit naming its topic; learning the name re-emits those groups' owners
        self.unnamed: dict[bytes, set[str]] = {}
        self.last_order: dict[str, int] = {}  # group -> order of its newest owners, for re-emits

    def seed(self, stored: Iterable[GroupMembers]) -> None:
        """Start from the owners known where reading resumes (the store's GroupMembers)."""
        self.has_seed = True
        for gm in stored:
            by_member: dict[str, list[PartitionOwner]] = {}
            for o in gm.owners:
                by_member.setdefault(o.member_id, []).append(o)
            self.seeded[gm.group] = {m: tuple(os) for m, os in by_member.items()}

    def learn_topic(self, topic_id: bytes, name: str) -> AbstractSet[str]:
        """Name `topic_id` (from a v4 commit); the groups whose owners that name completes."""
        if self.topic_names.get(topic_id) == name:
            return _NO_GROUPS
        self.topic_names[topic_id] = name
        return self.unnamed.pop(topic_id, _NO_GROUPS)

    def named(self, cluster: str, groups: AbstractSet[str], counters: IngestCounters) -> list[Event]:
        """The owners of `groups` again, now that a topic id they assign is named (`learn_topic`).

        Each carries the order of the group's newest owners: no newer record of the group
        has been read, so it replaces that event's owners and nothing newer.
        """
        if self.resumed and not self.has_seed:
            return []
        return [self.owners(cluster, g, self.last_order[g], counters) for g in sorted(groups) if g in self.last_order]

    def forget_seed(self, group: str) -> None:
        """A classic record (group metadata or its tombstone) superseded the stored owners."""
        self.seeded.pop(group, None)

    def apply(self, cluster: str, rec: Record, order: int, counters: IngestCounters) -> list[Event]:
        """Fold one KIP-848 record; the group's owners when they may have changed."""
        if isinstance(rec, ConsumerGroupPartitionMetadata):
            for t in rec.topics:
                self.topic_names[t.topic_id] = t.topic_name
        elif isinstance(rec, ConsumerGroupMemberMetadata):
            self.members.setdefault(rec.group, {})[rec.member_id] = (rec.client_host, rec.client_id)
        elif isinstance(rec, ConsumerGroupCurrentMemberAssignment):
            self.assigned.setdefault(rec.group, {})[rec.member_id] = rec.assigned_partitions
        elif isinstance(rec, ConsumerGroupTombstone) and rec.record_type in (5, 8) and rec.member_id is not None:
            self.members.get(rec.group, {}).pop(rec.member_id, None)
            self.assigned.get(rec.group, {}).pop(rec.member_id, None)
            self.seeded.get(rec.group, {}).pop(rec.member_id, None)
        elif isinstance(rec, ConsumerGroupTombstone) and rec.record_type == 3:
            self.members.pop(rec.group, None)
            self.assigned.pop(rec.group, None)
            self.seeded.pop(rec.group, None)
            self.last_order.pop(rec.group, None)
            return []
        else:
            return []
        if self.resumed and not self.has_seed:
            # Only the members written since the resume point are known: a GroupMembers now
            # would drop every other member's partitions. Keep the stored owners instead.
            counters.count_error("kip848_owners_unseeded")
            if not self._warned:
                self._warned = True
                log.warning(
                    "owners of KIP-848 groups are not updated: the reader resumed without the stored owners",
                    cluster=cluster,
                    group=rec.group,
                    hint="pass the stored GroupMembers to read_offsets_topic(members=...)",
                )
            return []
        self.last_order[rec.group] = order
        return [self.owners(cluster, rec.group, order, counters)]

    def owners(self, cluster: str, group: str, order: int, counters: IngestCounters) -> GroupMembers:
        """The group's owners as far as known; partitions of unknown topic ids are counted.

        A stored (seeded) member keeps its stored partitions until its own assignment is read.
        If that assignment names a topic id the fold cannot name yet (its type 4 record or a v4
        commit came before the resume point), the member also keeps its stored partitions of
        every topic no known id names: better stale for a while than dropped.
        """
        members = self.members.get(group, {})
        assigned = self.assigned.get(group, {})
        seeded = self.seeded.get(group, {})
        owners: list[PartitionOwner] = []
        named: set[str] | None = None
        for member_id, parts in assigned.items():
            stored = seeded.get(member_id)
            who = members.get(member_id)
            if who is None and stored:  # its metadata record came before the resume point
                who = (stored[0].host, stored[0].client_id)
            host, client_id = who or ("", "")
            unnamed = False
            for ta in parts:
                name = self.topic_names.get(ta.topic_id)
                if name is None:
                    counters.count_error("unknown_topic_id")
                    self.unnamed.setdefault(ta.topic_id, set()).add(group)
                    unnamed = True
                    continue
                owners.extend(_new_owner(name, p, host, client_id, member_id) for p in ta.partitions)
            if unnamed and stored:
                named = set(self.topic_names.values()) if named is None else named
                owners.extend(self._restamp(o, members.get(member_id)) for o in stored if o.topic not in named)
        for member_id, stored in seeded.items():
            if member_id not in assigned:
                owners.extend(self._restamp(o, members.get(member_id)) for o in stored)
        owners.sort(key=_OWNER_ORDER)
        live = bool(members) or bool(assigned) or any(seeded.values())
        return GroupMembers(cluster, group, order, tuple(owners), "Stable" if live else "Empty")

    @staticmethod
    def _restamp(o: PartitionOwner, who: tuple[str, str] | None) -> PartitionOwner:
        """A stored owner, with the host and client id of member metadata read since, if any."""
        return o if who is None else _new_owner(o.topic, o.partition, who[0], who[1], o.member_id)


def events_from_record(
    cluster: str,
    key: bytes | None,
    value: bytes | None,
    order: int,
    observed: int,
    counters: IngestCounters,
    *,
    kip848: ConsumerGroupOwners | None = None,
    limits: EdgeLimits | None = None,
    source: int | None = None,
    keys: CommitKeys | None = None,
) -> list[Event]:
    """The events of one `__consumer_offsets` record at offset `order` of its partition.

    `kip848` folds KIP-848 membership into GroupMembers (see the module docstring). `limits`
    range-checks every field (lagd.ingest.validate; the reader always passes its cluster's):
    a record that fails is counted, logged with its position (`source` partition, `order`)
    and skipped. Without limits records are only decoded (tests, `lagd decode`). `keys` is the
    reader's memory of the offset keys it has read (`codec.CommitKeys`).
    """
    if key is None:
        _skip(counters, limits, "null_key", source, order, observed, "record without a key")
        counters.count_error("null_key")
        return []
    try:
        if value is not None and type(key) is bytes and key[:2] in _COMMIT_TYPES:  # the hot path: no record object
            f = commit_fields(key, value, keys)
            by_type = counters.records_by_type  # count_record, inlined
            by_type["offset_commit"] = by_type.get("offset_commit", 0) + 1
            if limits is not None:
                problem = limits.commit_problem(f[0], f[1], f[2], f[3], f[6], observed)
                if problem is not None:
                    _skip(counters, limits, problem, source, order, observed, _commit_detail(f))
                    return []
            commit = _tuple_new(Commit, (cluster, f[0], f[1], f[2], f[3], order, f[6], observed))
            if kip848 is not None and f[10] is not None:
                waiting = kip848.learn_topic(f[10], f[1])
                if waiting:
                    return [commit, *kip848.named(cluster, waiting, counters)]
            return [commit]
        rec = decode(key, value, keys)
    except DecodeError as exc:
        counters.count_error(exc.reason)
        _skip(counters, limits, exc.reason, source, order, observed, str(exc))
        return []
    except Exception as exc:  # a decoder bug must not stop ingest; the counter shows it
        counters.count_error("decoder_bug")
        _skip(counters, limits, "decoder_bug", source, order, observed, repr(exc))
        log.warning("decoder failed unexpectedly; record skipped", cluster=cluster, order=order, error=repr(exc))
        return []
    if limits is not None:
        problem = _record_problem(rec, limits, observed)
        if problem is not None:
            counters.count_record(_kind(rec))
            _skip(counters, limits, problem, source, order, observed, _record_detail(rec))
            return []
    return _record_events(cluster, rec, order, observed, counters, kip848)


def _record_events(
    cluster: str,
    rec: Record,
    order: int,
    observed: int,
    counters: IngestCounters,
    kip848: ConsumerGroupOwners | None,
) -> list[Event]:
    """The events of one decoded (and checked) record."""
    if isinstance(rec, OffsetCommit):
        counters.count_record("offset_commit")
        commit = Commit(cluster, rec.group, rec.topic, rec.partition, rec.offset, order, rec.commit_timestamp, observed)
        if kip848 is not None and rec.topic_id is not None:
            waiting = kip848.learn_topic(rec.topic_id, rec.topic)
            if waiting:
                return [commit, *kip848.named(cluster, waiting, counters)]
        return [commit]
    if isinstance(rec, GroupMetadata):
        counters.count_record("group_metadata")
        if kip848 is not None:
            kip848.forget_seed(rec.group)  # a classic record states every owner: the stored ones are past
        return [_members_event(cluster, rec, order)]
    if isinstance(rec, OffsetTombstone):
        counters.count_record("offset_tombstone")
        return [OffsetDeleted(cluster, rec.group, rec.topic, rec.partition, order)]
    if isinstance(rec, GroupTombstone):
        counters.count_record("group_tombstone")
        if kip848 is not None:
            kip848.forget_seed(rec.group)
        return [GroupDeleted(cluster, rec.group, order)]
    counters.count_record(_kind(rec))
    if isinstance(rec, (SkippedRecord, GroupRecord)):
        return []
    return [] if kip848 is None else kip848.apply(cluster, rec, order, counters)


def _kind(rec: Record) -> str:
    """The record's label in lagd_ingest_records_total: a fixed set, whatever the record says.

    Types this lagd does not know (and newer versions of known ones) are all "unknown", so
    a stream of made-up types cannot mint a metric series each; share- and streams-group
    records go by their kind (codec.GROUP_RECORD_KINDS), tombstones apart.
    """
    if isinstance(rec, SkippedRecord):
        return "unknown"
    if isinstance(rec, GroupRecord):
        return rec.kind if rec.value_version is not None else f"{rec.kind}_tombstone"
    if isinstance(rec, ConsumerGroupTombstone):
        return f"consumer_group_tombstone_type_{rec.record_type}" if rec.record_type in _KIP848_TYPES else "unknown"
    return _RECORD_KINDS.get(rec.__class__.__name__, "unknown")


_KIP848_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})
_RECORD_KINDS = {
    "OffsetCommit": "offset_commit",
    "GroupMetadata": "group_metadata",
    "OffsetTombstone": "offset_tombstone",
    "GroupTombstone": "group_tombstone",
    **_KINDS,
}


def _record_problem(rec: Record, limits: EdgeLimits, now_ms: int) -> str | None:
    """Why a decoded record (other than a hot-path commit) cannot be used, or None."""
    if isinstance(rec, OffsetCommit):
        return limits.commit_problem(rec.group, rec.topic, rec.partition, rec.offset, rec.commit_timestamp, now_ms)
    if isinstance(rec, OffsetTombstone):
        return limits.tombstone_problem(rec.group, rec.topic, rec.partition)
    if isinstance(rec, GroupMetadata):
        problem = limits.group_problem(rec.group)
        if problem is None:
            for m in rec.members:
                if "\x00" in m.member_id or "\x00" in m.client_id or "\x00" in m.client_host:
                    return "owner_invalid"
                for topic, _ in m.assignment.partitions if m.assignment is not None else ():
                    if "\x00" in topic:
                        return "owner_invalid"
        return problem
    group = getattr(rec, "group", None)
    problem = limits.group_problem(group) if isinstance(group, str) else None
    if problem is None and isinstance(rec, ConsumerGroupPartitionMetadata):
        problem = next((p for t in rec.topics if (p := limits.topic_problem(t.topic_name))), None)
    if problem is None and any("\x00" in (getattr(rec, a, None) or "") for a in _MEMBER_FIELDS):
        problem = "owner_invalid"  # becomes an owner, stored as JSONB, which cannot hold NUL
    return problem


_MEMBER_FIELDS = ("member_id", "client_id", "client_host")


def _skip(
    counters: IngestCounters,
    limits: EdgeLimits | None,
    reason: str,
    source: int | None,
    order: int,
    now_ms: int,
    detail: str,
) -> None:
    if limits is None:
        log.debug("offsets-topic record skipped", reason=reason, order=order, detail=detail[:200])
        return
    limits.reject(counters, reason, source, order, now_ms, detail)


def _commit_detail(f: tuple[object, ...]) -> str:
    group = str(f[0])
    shown = group if len(group) <= 64 else f"{group[:64]}... ({len(group)} chars)"
    return f"group={shown!r} topic={str(f[1])[:64]!r} partition={f[2]} offset={f[3]} commit_timestamp={f[6]}"


def _record_detail(rec: Record) -> str:
    group = getattr(rec, "group", None)
    if isinstance(group, str) and len(group) > 64:
        group = f"{group[:64]}... ({len(group)} chars)"
    return f"{rec.__class__.__name__} group={group!r}"
