"""Admin-polling mode: for clusters whose offsets topic lagd cannot read (managed services, ACLs).

Every `offset-refresh` seconds: list groups, describe the allowed ones (members and owners),
and fetch each group's committed offsets. Commits get the observed time as both order and
timestamp. An unchanged offset is emitted again while the group has members: that repeated
commit is how the window sees a consumer that stopped moving. Without members an unchanged
offset is not repeated (nothing is committing).

Which partitions to ask for. OffsetFetch is always sent for named partitions, never for
"all partitions" (topics = null): some brokers answer that form badly, and naming them keeps
the cost known. The names come from, in this order:
  1. the members' assignments and subscriptions (DescribeGroups, consumer protocol);
  2. topics the group committed to in earlier rounds, and topics the daemon already knows
     the group consumes (`known_topics`, e.g. restored from the store);
  3. a probe of every topic in the metadata (except `topics-deny`) when a group is first
     seen and again every `topic-refresh` seconds, so a group whose assignment is not
     visible (no members, or a broker that leaves assignments empty) is still found and a
     group that starts on a new topic is noticed.
Each name is expanded to all of the topic's partitions from the metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.structs import TopicPartition

from lagd import logs
from lagd.config import ClusterSettings
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import cancelled_here, close_quietly, start_admin
from lagd.ingest.progress import ReaderProgress
from lagd.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    IngestCounters,
    OffsetDeleted,
    PartitionOwner,
)

log = logs.get(__name__)

Emit = Callable[[list[Event]], Awaitable[None]]
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class GroupView:
    """What DescribeGroups said about one group."""

    group: str
    state: str
    owners: tuple[PartitionOwner, ...]
    subscribed: frozenset[str]

    @property
    def has_members(self) -> bool:
        return bool(self.owners) or self.state in ("Stable", "PreparingRebalance", "CompletingRebalance")


@dataclass
class PollMemory:
    """What earlier rounds saw, so a round can emit only what changed (and deletions)."""

    groups: set[str] = field(default_factory=set)
    committed: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    topics: dict[str, set[str]] = field(default_factory=dict)
    owners: dict[str, tuple[tuple[PartitionOwner, ...], str]] = field(default_factory=dict)
    probed_at: dict[str, float] = field(default_factory=dict)
    last_order: int = 0

    def next_order(self, now: int) -> int:
        """Observed time in ms, strictly increasing so two rounds never share an order."""
        self.last_order = max(now, self.last_order + 1)
        return self.last_order


def parse_member(member: Any) -> tuple[list[PartitionOwner], set[str]]:
    """Owners from a member's assignment and topics from its subscription (consumer protocol)."""
    member_id, client_id, client_host, metadata, assignment = member[0], member[1], member[2], member[3], member[4]
    owners: list[PartitionOwner] = []
    topics: set[str] = set()
    if assignment:
        with contextlib.suppress(Exception):
            decoded = ConsumerProtocolMemberAssignment.decode(assignment)
            for topic, partitions in decoded.assignment:
                topics.add(topic)
                owners.extend(PartitionOwner(topic, p, client_host, client_id, member_id) for p in partitions)
    if metadata:
        with contextlib.suppress(Exception):
            topics.update(ConsumerProtocolMemberMetadata.decode(metadata).subscription)
    return owners, topics


def parse_describe(responses: Iterable[Any]) -> dict[str, GroupView]:
    views: dict[str, GroupView] = {}
    for response in responses:
        for g in response.groups:
            error_code, group, state, protocol_type, _protocol, members = g[0], g[1], g[2], g[3], g[4], g[5]
            if error_code:
                continue
            owners: list[PartitionOwner] = []
            topics: set[str] = set()
            if protocol_type in ("consumer", ""):
                for m in members:
                    o, t = parse_member(m)
                    owners.extend(o)
                    topics |= t
            views[group] = GroupView(group, state, tuple(sorted(owners, key=_owner_key)), frozenset(topics))
    return views


def _owner_key(o: PartitionOwner) -> tuple[str, int]:
    return (o.topic, o.partition)


def partitions_to_fetch(
    group: str,
    view: GroupView | None,
    memory: PollMemory,
    layout: dict[str, set[int]],
    known: Iterable[str],
    probe: bool,
    topics_deny: re.Pattern[str] | None,
) -> list[TopicPartition]:
    """The named partitions to ask the group's committed offsets for (see the module docstring)."""
    topics: set[str] = set(known) | memory.topics.get(group, set())
    if view is not None:
        topics |= view.subscribed | {o.topic for o in view.owners}
    if probe:
        topics |= set(layout)
    if topics_deny is not None:
        topics = {t for t in topics if not topics_deny.search(t)}
    # Partitions committed before are asked for too (an answer without an offset becomes
    # OffsetDeleted), but only while the metadata has them: brokers reject unknown ones.
    wanted = {(t, p) for t in topics for p in layout.get(t, ())}
    wanted |= {(t, p) for t, p in memory.committed.get(group, {}) if t in topics and p in layout.get(t, ())}
    return [TopicPartition(t, p) for t, p in sorted(wanted)]


def round_events(
    cluster: str,
    group: str,
    view: GroupView | None,
    offsets: dict[tuple[str, int], int],
    asked: Iterable[tuple[str, int]],
    memory: PollMemory,
    observed: int,
) -> list[Event]:
    """Events of one group for one round; updates `memory`. Pure apart from that memory."""
    order = memory.next_order(observed)
    out: list[Event] = []
    members = view is not None and view.has_members
    if view is not None:
        current = (view.owners, view.state)
        if memory.owners.get(group) != current:
            memory.owners[group] = current
            out.append(GroupMembers(cluster, group, order, view.owners, view.state))
    before = memory.committed.get(group, {})
    now_committed: dict[tuple[str, int], int] = {}
    for tp in sorted(offsets):
        off = offsets[tp]
        if off < 0:
            continue
        now_committed[tp] = off
        if members or before.get(tp) != off:
            # The order doubles as the commit time: observed, nudged to stay strictly increasing.
            out.append(Commit(cluster, group, tp[0], tp[1], off, order, order, observed))
    for tp in sorted(set(asked) & set(before)):
        if tp not in now_committed:
            out.append(OffsetDeleted(cluster, group, tp[0], tp[1], order))
    memory.committed[group] = now_committed
    memory.topics.setdefault(group, set()).update(t for t, _ in now_committed)
    return out


async def poll_admin(
    cluster: ClusterSettings,
    emit: Emit | asyncio.Queue[list[Event]],
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    groups: GroupFilter | None = None,
    known_topics: Callable[[str], Iterable[str]] | None = None,
) -> None:
    """Poll committed offsets until `stop` is set; reconnect with backoff on outages."""
    put: Emit = emit.put if isinstance(emit, asyncio.Queue) else emit
    groups = groups or GroupFilter.for_cluster(cluster)
    memory = PollMemory()
    delay = BACKOFF_MIN_S
    while not stop.is_set():
        try:
            await _session(cluster, put, progress, counters, stop, groups, known_topics, memory)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and cancelled_here():
                raise
            counters.count_failure(f"admin_poll_{exc.__class__.__name__}")
            log.warning(
                "admin polling failed; reconnecting",
                cluster=cluster.name,
                error=f"{exc.__class__.__name__}: {exc}",
                retry_in_s=delay,
                hint="check that the brokers are reachable and lagd may describe groups and fetch their offsets",
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
        else:
            delay = BACKOFF_MIN_S


async def _session(
    cluster: ClusterSettings,
    put: Emit,
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    groups: GroupFilter,
    known_topics: Callable[[str], Iterable[str]] | None,
    memory: PollMemory,
) -> None:
    admin = await start_admin(cluster)
    try:
        loop = asyncio.get_running_loop()
        layout: dict[str, set[int]] = {}
        layout_at = -1e18
        while not stop.is_set():
            started = loop.time()
            if started - layout_at >= cluster.topic_refresh or not layout:
                layout = _layout(await admin.describe_topics())
                layout_at = started
            await poll_round(admin, cluster, put, counters, groups, known_topics, memory, layout, started)
            progress.mark_caught_up()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(cluster.offset_refresh - (loop.time() - started), 0.0))
    finally:
        await close_quietly(admin.close)


def groups_gone(cluster: str, listed: Iterable[str], memory: PollMemory, observed: int) -> list[GroupDeleted]:
    """GroupDeleted for every group an earlier round listed and this one does not; forgets them."""
    current = set(listed)
    gone = sorted(memory.groups - current)
    order = memory.next_order(observed) if gone else 0
    for g in gone:
        memory.committed.pop(g, None)
        memory.topics.pop(g, None)
        memory.owners.pop(g, None)
        memory.probed_at.pop(g, None)
    memory.groups = current
    return [GroupDeleted(cluster, g, order) for g in gone]


def _layout(topics: Iterable[Any]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for t in topics:
        if t.get("error_code", 0):
            continue
        out[t["topic"]] = {p["partition"] for p in t.get("partitions", [])}
    return out


async def describe_groups(admin: Any, groups: list[str], counters: IngestCounters) -> dict[str, GroupView]:
    """Describe the groups in one go; when that fails, one by one, so a group whose description
    cannot be read (or a broker that answers a batched request badly) blinds only that group.
    A group without a view is still polled, just without owners."""
    if not groups:
        return {}
    try:
        return parse_describe(await admin.describe_consumer_groups(groups))
    except Exception as exc:
        counters.count_failure(f"admin_poll_describe_{exc.__class__.__name__}")
        log.debug("describing groups together failed; describing one by one", error=str(exc))
    views: dict[str, GroupView] = {}
    for group in groups:
        try:
            views.update(parse_describe(await admin.describe_consumer_groups([group])))
        except Exception as exc:
            counters.count_failure(f"admin_poll_describe_{exc.__class__.__name__}")
            log.warning("describing a group failed; polled without owners", group=group, error=str(exc))
    return views


async def poll_round(
    admin: Any,
    cluster: ClusterSettings,
    put: Emit,
    counters: IngestCounters,
    groups: GroupFilter,
    known_topics: Callable[[str], Iterable[str]] | None,
    memory: PollMemory,
    layout: dict[str, set[int]],
    now: float,
) -> None:
    """One full round over every allowed group."""
    listed = [g[0] for g in await admin.list_consumer_groups()]
    allowed = sorted({g for g in listed if groups.allows(g)})
    counters.filtered_groups += len(set(listed)) - len(allowed)
    views = await describe_groups(admin, allowed, counters)
    topics_deny = re.compile(cluster.topics_deny) if cluster.topics_deny else None
    for group in allowed:
        view = views.get(group)
        probe = now - memory.probed_at.get(group, -1e18) >= cluster.topic_refresh
        known = known_topics(group) if known_topics else ()
        asked = partitions_to_fetch(group, view, memory, layout, known, probe, topics_deny)
        if probe:
            memory.probed_at[group] = now
        try:
            fetched = await admin.list_consumer_group_offsets(group, partitions=asked) if asked else {}
        except Exception as exc:
            counters.count_failure(f"admin_poll_offset_fetch_{exc.__class__.__name__}")
            log.warning("fetching committed offsets failed; retrying next round", group=group, error=str(exc))
            continue
        offsets = {(tp.topic, tp.partition): meta.offset for tp, meta in fetched.items()}
        # Committed partitions the metadata no longer has are gone as well (topic deleted).
        vanished = [tp for tp in memory.committed.get(group, {}) if tp[1] not in layout.get(tp[0], ())]
        covered = [(tp.topic, tp.partition) for tp in asked] + vanished
        events = round_events(cluster.name, group, view, offsets, covered, memory, now_ms())
        if events:
            await put(events)
    deleted = groups_gone(cluster.name, allowed, memory, now_ms())
    if deleted:
        await put(list(deleted))
