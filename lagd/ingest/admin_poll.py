"""Admin-polling mode: for clusters whose offsets topic lagd cannot read (managed services, ACLs).

Every `offset-refresh` seconds: list groups, describe the allowed ones (members and owners),
and fetch each group's committed offsets. Commits get the observed time as both order and
timestamp. An unchanged offset is emitted again while the group has members: that repeated
commit is how the window sees a consumer that stopped moving. Without members an unchanged
offset is not repeated (nothing is committing).

Which partitions to ask for. OffsetFetch always names its partitions, never "all partitions"
(topics = null): that form needs OffsetFetch v2 (Kafka 0.10.2), older brokers lagd supports
lack it, and naming them keeps the cost of a round known. A group's partitions are those of:
  1. the topics of its members' assignments and subscriptions (DescribeGroups, consumer
     protocol; some brokers leave assignments out, and groups without members have none);
  2. the topics it committed to in earlier rounds, and those the daemon already knows it
     consumes (`known_topics`, e.g. restored from the store);
  3. a probe, because a group without visible assignments can start committing anywhere:
     every topic in the metadata (except `topics-deny`) when the group is first seen; each
     topic created later, once per group; and, as a safety net for a group without visible
     assignments that starts on a topic that already existed, every topic again every
     `FULL_PROBE_EVERY_REFRESHES` metadata refreshes. So the all-topics request is made per
     group on first sight and then once every FULL_PROBE_EVERY_REFRESHES x topic-refresh
     (10 minutes by default), instead of every topic-refresh; in between a round costs what
     the group consumes.
Each topic is asked for with all its partitions in the metadata (a partition committed to
before is thus asked again while the metadata has it). Deletions need evidence (see `log_end.confirm_absent`): a
partition is OffsetDeleted when the broker answers without an offset for it, or when it has
been missing from `ABSENT_REFRESHES_BEFORE_DELETE` successful metadata refreshes in a row; a
group is GroupDeleted when ListGroups has left it out that many rounds in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import (
    Commit,
    Event,
    GroupDeleted,
    GroupMembers,
    IngestCounters,
    OffsetDeleted,
    PartitionOwner,
)
from lagd.ingest.group_describe import (
    GroupView,
    consumer_group_views,
    describe_classic_groups,
    describe_consumer_groups,
)
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_admin
from lagd.ingest.log_end import confirm_absent
from lagd.ingest.progress import ReaderProgress
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

Emit = Callable[[list[Event]], Awaitable[None]]
# Every this many metadata refreshes each group is probed on every topic again (see above).
FULL_PROBE_EVERY_REFRESHES = 10
# A topic-level error code that does mean "no such topic"; any other error names a topic that
# exists but is unavailable right now (LEADER_NOT_AVAILABLE, TOPIC_AUTHORIZATION_FAILED, ...).
UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass
class PollMemory:
    """What earlier rounds saw, so a round can emit only what changed (and deletions)."""

    groups: set[str] = field(default_factory=set)
    committed: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    topics: dict[str, set[str]] = field(default_factory=dict)
    owners: dict[str, tuple[tuple[PartitionOwner, ...], str]] = field(default_factory=dict)
    last_order: int = 0
    # Metadata refreshes so far, and the topics the latest one named (None before the first).
    refreshes: int = 0
    topics_seen: set[str] | None = None
    # Per group: the refresh of its last full probe, and topics created since, still to probe.
    full_probe_at: dict[str, int] = field(default_factory=dict)
    pending_probe: dict[str, set[str]] = field(default_factory=dict)
    # Evidence for deletions: how many refreshes (rounds) in a row a committed partition (a
    # listed group) has been missing, and the partitions the latest refresh confirmed gone.
    absent_partitions: dict[tuple[str, int], int] = field(default_factory=dict)
    absent_groups: dict[str, int] = field(default_factory=dict)
    gone_partitions: set[tuple[str, int]] = field(default_factory=set)

    def next_order(self, now: int) -> int:
        """Observed time in ms, strictly increasing so two rounds never share an order."""
        self.last_order = max(now, self.last_order + 1)
        return self.last_order


# lagd_ingest_records_total{type=...} of the committed offsets an admin polling round reads.
POLLED_OFFSET = "polled_offset"


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
    probe: Iterable[str],
    topics_deny: re.Pattern[str] | None,
) -> list[TopicPartition]:
    """The named partitions to ask the group's committed offsets for (see the module docstring);
    `probe` are the topics to try beyond the group's own."""
    topics: set[str] = set(known) | memory.topics.get(group, set())
    if view is not None:
        topics |= view.subscribed | {o.topic for o in view.owners}
    topics |= set(probe)
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
    """Events of one group for one round; updates `memory`. Pure apart from that memory.

    `asked` are the partitions this round has an answer for: one of them without an offset is
    deleted. What the group committed elsewhere was not looked at and is remembered as it was.
    """
    order = memory.next_order(observed)
    out: list[Event] = []
    members = view is not None and view.has_members
    if view is not None:
        current = (view.owners, view.state)
        if memory.owners.get(group) != current:
            memory.owners[group] = current
            out.append(GroupMembers(cluster, group, order, view.owners, view.state))
    before = memory.committed.get(group, {})
    asked = set(asked)
    now_committed: dict[tuple[str, int], int] = {tp: off for tp, off in before.items() if tp not in asked}
    for tp in sorted(offsets):
        off = offsets[tp]
        if off < 0:
            continue
        now_committed[tp] = off
        if members or before.get(tp) != off:
            # The order doubles as the commit time: observed, nudged to stay strictly increasing.
            out.append(Commit(cluster, group, tp[0], tp[1], off, order, order, observed))
    for tp in sorted(asked & set(before)):
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
    clock: Clock = wall_ms,
    before_round: Callable[[AIOKafkaAdminClient], Awaitable[bool]] | None = None,
) -> None:
    """Poll committed offsets until `stop` is set; reconnect with backoff on outages.

    `clock` (lagd.runtime.clock) gives each round's commits their observed time. `before_round`, given
    the session's admin client, is asked before each round whether to end the session instead
    (lagd.ingest.source: the offsets topic has appeared); it ends polling only with `stop` set.
    """
    put: Emit = emit.put if isinstance(emit, asyncio.Queue) else emit
    groups = groups or GroupFilter.for_cluster(cluster)
    memory = PollMemory()
    await reconnecting(
        lambda: _session(
            cluster, put, progress, counters, stop, groups, known_topics, memory, clock=clock, before_round=before_round
        ),
        stop,
        counters,
        cluster=cluster,
        what="admin polling",
        counter="admin_poll",
        hint="check that the brokers are reachable and lagd may describe groups and fetch their offsets",
        progress=progress,
    )


async def _session(
    cluster: ClusterSettings,
    put: Emit,
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    groups: GroupFilter,
    known_topics: Callable[[str], Iterable[str]] | None,
    memory: PollMemory,
    *,
    clock: Clock = wall_ms,
    before_round: Callable[[AIOKafkaAdminClient], Awaitable[bool]] | None = None,
) -> None:
    admin = await start_admin(cluster)
    try:
        loop = asyncio.get_running_loop()
        layout: dict[str, set[int]] = {}
        layout_at = -1e18
        while not stop.is_set():
            if before_round is not None and await before_round(admin):
                return
            started = loop.time()
            if started - layout_at >= cluster.topic_refresh or not layout:
                # A failed refresh raises here: no deletion is decided without an answer.
                layout = refresh_layout(memory, await admin.describe_topics())
                layout_at = started
                if memory.absent_partitions and len(memory.gone_partitions) < len(memory.absent_partitions):
                    layout_at = -1e18  # missing once: confirm next round, not a topic-refresh later
            await poll_round(admin, cluster, put, counters, groups, known_topics, memory, layout, clock=clock)
            progress.mark_caught_up()
            progress.mark_fresh(clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(cluster.offset_refresh - (loop.time() - started), 0.0))
    finally:
        await close_quietly(admin.close)


def groups_gone(cluster: str, listed: Iterable[str], memory: PollMemory, observed: int) -> list[GroupDeleted]:
    """GroupDeleted for every group earlier rounds listed and the last
    `ABSENT_REFRESHES_BEFORE_DELETE` rounds in a row did not; forgets them."""
    current = set(listed)
    gone, memory.absent_groups = confirm_absent(sorted(memory.groups), current, memory.absent_groups)
    order = memory.next_order(observed) if gone else 0
    for g in gone:
        memory.committed.pop(g, None)
        memory.topics.pop(g, None)
        memory.owners.pop(g, None)
        memory.full_probe_at.pop(g, None)
        memory.pending_probe.pop(g, None)
    memory.groups = (current | set(memory.absent_groups)) - set(gone)
    return [GroupDeleted(cluster, g, order) for g in gone]


def _layout(topics: Iterable[Any]) -> tuple[dict[str, set[int]], set[str]]:
    """Partitions of each topic the answer gave without error, and the topics it named with an
    error other than "unknown topic" (they exist; their partitions are not known now)."""
    out: dict[str, set[int]] = {}
    errored: set[str] = set()
    for t in topics:
        code = t.get("error_code", 0)
        if code:
            if code != UNKNOWN_TOPIC_OR_PARTITION:
                errored.add(t["topic"])
            continue
        out[t["topic"]] = {p["partition"] for p in t.get("partitions", [])}
    return out, errored


def refresh_layout(memory: PollMemory, topics: Iterable[Any]) -> dict[str, set[int]]:
    """Take in one successful metadata answer: the layout to poll with. Updates `memory`: the
    committed partitions confirmed gone, and the topics created since the last answer (each
    to be probed once for every known group)."""
    layout, errored = _layout(topics)
    tracked = sorted({tp for committed in memory.committed.values() for tp in committed})
    present = {tp for tp in tracked if tp[0] in errored or tp[1] in layout.get(tp[0], ())}
    gone, memory.absent_partitions = confirm_absent(tracked, present, memory.absent_partitions)
    memory.gone_partitions = set(gone)
    named = set(layout) | errored
    if memory.topics_seen is not None:
        created = named - memory.topics_seen
        if created:
            for group in memory.groups:
                memory.pending_probe.setdefault(group, set()).update(created)
    memory.topics_seen = named
    memory.refreshes += 1
    return layout


async def describe_groups(admin: Any, groups: list[str], counters: IngestCounters) -> dict[str, GroupView]:
    """Every group's members: KIP-848 groups through ConsumerGroupDescribe, classic ones through
    DescribeGroups (lagd.ingest.group_describe), each batched per coordinator. When a batch
    fails, its groups are described one by one, so a group whose description cannot be read
    (or a broker that answers a batch badly) blinds only that group. A group without a view is
    still polled, just without owners."""
    if not groups:
        return {}
    client = admin._client  # aiokafka's admin keeps its client private; the raw requests need it
    by_node: dict[int, list[str]] = {}
    for group in groups:
        try:
            by_node.setdefault(await admin.find_coordinator(group), []).append(group)
        except Exception as exc:
            counters.count_failure(f"admin_poll_coordinator_{exc.__class__.__name__}")
            log.warning("finding a group's coordinator failed; polled without owners", group=group, error=str(exc))
    views: dict[str, GroupView] = {}
    classic = set(groups)
    try:
        answers, known = await describe_consumer_groups(client, by_node)
        if known:
            views, classic = consumer_group_views(answers)
    except Exception as exc:
        counters.count_failure(f"admin_poll_describe_{exc.__class__.__name__}")
        log.debug("describing KIP-848 groups failed; describing them as classic groups", error=str(exc))
    classic_by_node = {n: [g for g in gs if g in classic] for n, gs in by_node.items()}
    classic_by_node = {n: gs for n, gs in classic_by_node.items() if gs}
    try:
        views.update(parse_describe(await describe_classic_groups(client, classic_by_node)))
        return views
    except Exception as exc:
        counters.count_failure(f"admin_poll_describe_{exc.__class__.__name__}")
        log.debug("describing groups together failed; describing one by one", error=str(exc))
    for node, gs in classic_by_node.items():
        for group in gs:
            try:
                views.update(parse_describe(await describe_classic_groups(client, {node: [group]})))
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
    *,
    clock: Clock = wall_ms,
) -> None:
    """One full round over every allowed group."""
    listed = [g[0] for g in await admin.list_consumer_groups()]
    allowed = sorted({g for g in listed if groups.allows(g)})
    counters.filtered_groups += len(set(listed)) - len(allowed)
    views = await describe_groups(admin, allowed, counters)
    topics_deny = re.compile(cluster.topics_deny) if cluster.topics_deny else None
    for group in allowed:
        view = views.get(group)
        last_full = memory.full_probe_at.get(group)
        full = last_full is None or memory.refreshes - last_full >= FULL_PROBE_EVERY_REFRESHES
        probe = set(layout) if full else memory.pending_probe.get(group, set())
        known = known_topics(group) if known_topics else ()
        asked = partitions_to_fetch(group, view, memory, layout, known, probe, topics_deny)
        try:
            fetched = await admin.list_consumer_group_offsets(group, partitions=asked) if asked else {}
        except Exception as exc:
            counters.count_failure(f"admin_poll_offset_fetch_{exc.__class__.__name__}")
            log.warning("fetching committed offsets failed; retrying next round", group=group, error=str(exc))
            continue
        if full:
            memory.full_probe_at[group] = memory.refreshes
        memory.pending_probe.pop(group, None)
        offsets = {(tp.topic, tp.partition): meta.offset for tp, meta in fetched.items()}
        # what admin polling ingests: a committed offset read, where the topic reader counts records
        counters.count_record(POLLED_OFFSET, len(offsets))
        # Committed partitions confirmed missing from the metadata are gone as well (topic deleted).
        vanished = [tp for tp in memory.committed.get(group, {}) if tp in memory.gone_partitions]
        covered = [(tp.topic, tp.partition) for tp in asked] + vanished
        events = round_events(cluster.name, group, view, offsets, covered, memory, clock())
        if events:
            await put(events)
    deleted = groups_gone(cluster.name, allowed, memory, clock())
    if deleted:
        await put(list(deleted))
