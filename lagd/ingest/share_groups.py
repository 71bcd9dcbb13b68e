"""Share groups (KIP-932): their lag per share-partition, as Kafka's share coordinator reports it.

A share group commits no offsets: its members acknowledge records one by one, and the share
coordinator keeps, per share-partition, a start offset (below it every record is acknowledged
or archived) and, from Kafka 4.2 on, a lag (records from the start offset to the log end not
yet acknowledged). Nothing of this reaches `__consumer_offsets` but the group's membership
(codec.GROUP_RECORD_KINDS), so lagd asks the brokers, as `kafka-share-groups --describe` does:
every `offset-refresh` seconds ListGroups (v5, types "share") on every broker, then one
DescribeShareGroupOffsets (API key 90; v1 carries the lag) per group coordinator for its
groups. aiokafka knows neither request at those versions, so they are built here from its
protocol types, as log_end builds ListOffsets.

What it learns is shown (`ShareGroups`, read by /lagd/v1/share and /metrics), not judged: the
sliding-window rules judge committed offsets, which a share group does not have. Brokers
without the API (Kafka before 4.1) are noted once and asked again every `topic-refresh`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from aiokafka.errors import IncompatibleBrokerVersion, for_code
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import CompactArray, CompactString, Int16, Int32, Int64, Schema, TaggedFields

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client
from lagd.ingest.validate import MAX_PARTITIONS, EdgeLimits
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

GROUP_COORDINATOR = 0  # FindCoordinator key type of groups (share groups included)
UNKNOWN = -1  # Kafka's "no start offset / no lag" (a share-partition not initialised yet)
# What aiokafka raises, before sending, for a request the broker has no version of that lagd
# can build: ListGroups below v5, or no DescribeShareGroupOffsets at all (Kafka 3.x)
_UNSUPPORTED = (IncompatibleBrokerVersion, NotImplementedError)


# --- the wire: ListGroups v5 and DescribeShareGroupOffsets v0/v1 --------------------------


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka ships no types
    """16 raw bytes (Kafka's UUID type, which aiokafka lacks)."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding a uuid")
        return raw


_STR = CompactString("utf-8")


class ListGroupsResponse_v5(Response):  # type: ignore[misc]  # aiokafka ships no types
    API_KEY = 16
    API_VERSION = 5
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "groups",
            CompactArray(
                ("group_id", _STR),
                ("protocol_type", _STR),
                ("group_state", _STR),
                ("group_type", _STR),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ListGroupsRequest_v5(RequestStruct):  # type: ignore[misc]  # aiokafka ships no types
    FLEXIBLE_VERSION = True
    API_KEY = 16
    API_VERSION = 5
    RESPONSE_TYPE = ListGroupsResponse_v5
    SCHEMA = Schema(
        ("states_filter", CompactArray(_STR)),
        ("types_filter", CompactArray(_STR)),
        ("tags", TaggedFields),
    )


class ListShareGroups(Request[ListGroupsRequest_v5]):  # type: ignore[misc]  # aiokafka ships no types
    """ListGroups of one broker, share groups only (the types filter came with v5)."""

    API_KEY = 16

    def build(self, request_struct_class: type[ListGroupsRequest_v5]) -> ListGroupsRequest_v5:
        return request_struct_class([], ["share"], {})


def _offsets_response(version: int, lag: bool) -> type[Response]:
    partition: list[tuple[str, Any]] = [("partition_index", Int32), ("start_offset", Int64), ("leader_epoch", Int32)]
    if lag:
        partition.append(("lag", Int64))
    partition += [("error_code", Int16), ("error_message", _STR), ("tags", TaggedFields)]
    schema = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("group_id", _STR),
                (
                    "topics",
                    CompactArray(
                        ("topic_name", _STR),
                        ("topic_id", _Uuid),
                        ("partitions", CompactArray(*partition)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("error_code", Int16),
                ("error_message", _STR),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )
    return type(
        f"DescribeShareGroupOffsetsResponse_v{version}",
        (Response,),
        {"API_KEY": 90, "API_VERSION": version, "SCHEMA": schema},
    )


_OFFSETS_REQUEST_SCHEMA = Schema(
    (
        "groups",
        CompactArray(
            ("group_id", _STR),
            ("topics", CompactArray(("topic_name", _STR), ("partitions", CompactArray(Int32)), ("tags", TaggedFields))),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class DescribeShareGroupOffsetsRequest_v0(RequestStruct):  # type: ignore[misc]  # aiokafka ships no types
    FLEXIBLE_VERSION = True
    API_KEY = 90
    API_VERSION = 0
    RESPONSE_TYPE = _offsets_response(0, lag=False)
    SCHEMA = _OFFSETS_REQUEST_SCHEMA


class DescribeShareGroupOffsetsRequest_v1(RequestStruct):  # type: ignore[misc]  # aiokafka ships no types
    FLEXIBLE_VERSION = True
    API_KEY = 90
    API_VERSION = 1
    RESPONSE_TYPE = _offsets_response(1, lag=True)
    SCHEMA = _OFFSETS_REQUEST_SCHEMA


class DescribeShareGroupOffsets(Request[DescribeShareGroupOffsetsRequest_v0 | DescribeShareGroupOffsetsRequest_v1]):  # type: ignore[misc]
    """Every share-partition of `groups` (topics null: all the group has state for)."""

    API_KEY = 90

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = list(groups)

    def build(
        self,
        request_struct_class: type[DescribeShareGroupOffsetsRequest_v0 | DescribeShareGroupOffsetsRequest_v1],
    ) -> DescribeShareGroupOffsetsRequest_v0 | DescribeShareGroupOffsetsRequest_v1:
        return request_struct_class([(g, None, {}) for g in self.groups], {})


# --- what lagd keeps ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharePartition:
    """One share-partition as the share coordinator reports it; None where Kafka says unknown."""

    topic: str
    partition: int
    start_offset: int | None
    lag: int | None  # None too from brokers before 4.2 (DescribeShareGroupOffsets v0)
    leader_epoch: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShareGroup:
    """A share group at one moment: its state (ListGroups) and its share-partitions."""

    group: str
    state: str
    partitions: tuple[SharePartition, ...]
    observed_ms: int
    error: str | None = None

    @property
    def total_lag(self) -> int | None:
        """The sum of the known lags; None when no partition has one."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


@dataclass
class ShareGroups:
    """The share groups of every cluster, as last polled: cluster -> group -> ShareGroup.

    `supported` says per cluster whether its brokers have the share-group API (None until
    the first answer)."""

    groups: dict[str, dict[str, ShareGroup]] = field(default_factory=dict)
    supported: dict[str, bool | None] = field(default_factory=dict)

    def of(self, cluster: str) -> dict[str, ShareGroup]:
        return self.groups.get(cluster, {})


def _known(value: int) -> int | None:
    return None if value < 0 else value


def parse_share_groups(responses: Iterable[Any], limits: EdgeLimits) -> tuple[dict[str, str], list[str], int]:
    """ListGroups v5 answers -> (share group -> state, error names of the brokers that failed,
    how many groups were refused: names the offsets reader would refuse too, lagd.ingest.validate)."""
    states: dict[str, str] = {}
    errors: list[str] = []
    refused = 0
    for response in responses:
        if response.error_code != 0:
            errors.append(for_code(response.error_code).__name__)
            continue
        for group_id, _, state, group_type, _ in response.groups or ():
            if (group_type or "").lower() != "share":
                continue
            if not group_id or limits.group_problem(group_id) is not None:
                refused += 1
                continue
            states[group_id] = state or ""
    return states, errors, refused


def parse_share_offsets(
    response: Any, states: dict[str, str], observed_ms: int, limits: EdgeLimits
) -> tuple[list[ShareGroup], int]:
    """One DescribeShareGroupOffsets answer -> its groups, and how many entries were refused.

    Every field is checked at this edge: a group nobody listed, a topic name Kafka would not
    allow, a partition index out of range or named twice is refused (counted), never passed on."""
    lag_field = response.API_VERSION >= 1
    parts: dict[str, dict[tuple[str, int], SharePartition]] = {}
    errors: dict[str, str | None] = {}
    refused = 0
    for group in response.groups or ():
        group_id, topics, error_code, error_message = group[0], group[1], group[2], group[3]
        if not group_id or group_id not in states:
            refused += 1
            continue
        mine = parts.setdefault(group_id, {})  # a group named twice is one group
        if error_code:
            errors[group_id] = f"{for_code(error_code).__name__}: {error_message or ''}".rstrip(": ")
        for topic_name, _, partitions, _ in topics or ():
            for p in partitions or ():
                index, start, epoch = p[0], p[1], p[2]
                lag = p[3] if lag_field else UNKNOWN
                code = p[4] if lag_field else p[3]
                if (
                    not topic_name
                    or limits.topic_problem(topic_name) is not None
                    or not 0 <= index < MAX_PARTITIONS
                    or (topic_name, index) in mine
                ):
                    refused += 1
                    continue
                error = for_code(code).__name__ if code else None
                mine[(topic_name, index)] = SharePartition(
                    topic_name, index, _known(start), _known(lag), _known(epoch), error
                )
    out = [
        ShareGroup(g, states[g], tuple(ps[k] for k in sorted(ps)), observed_ms, errors.get(g))
        for g, ps in parts.items()
    ]
    return out, refused


# --- the poller --------------------------------------------------------------------------


async def poll_share_groups(
    cluster: ClusterSettings,
    view: ShareGroups,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    clock: Clock = wall_ms,
) -> None:
    """Poll `cluster`'s share groups into `view` every offset-refresh until `stop`, reconnecting
    after failures as every reader does."""
    await reconnecting(
        functools.partial(_session, cluster, view, counters, stop, clock),
        stop,
        counters,
        cluster=cluster,
        what="share-group poller",
        counter="share_groups",
        hint="check that the brokers are reachable and lagd may describe groups and topics",
    )


async def _session(
    cluster: ClusterSettings, view: ShareGroups, counters: IngestCounters, stop: asyncio.Event, clock: Clock
) -> None:
    client = await start_client(cluster)
    coordinators: dict[str, int] = {}
    limits = EdgeLimits.for_cluster(cluster)
    try:
        while not stop.is_set():
            supported = await poll_once(client, cluster, view, counters, limits, coordinators, clock=clock)
            if supported is False and view.supported.get(cluster.name) is not False:
                log.info(
                    "share groups: the brokers have no share-group API (DescribeShareGroupOffsets, Kafka 4); "
                    "asking again every topic-refresh",
                    cluster=cluster.name,
                )
            view.supported[cluster.name] = supported
            wait = cluster.offset_refresh if supported else cluster.topic_refresh
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
    finally:
        await close_quietly(client.close)


async def poll_once(
    client: Any,
    cluster: ClusterSettings,
    view: ShareGroups,
    counters: IngestCounters,
    limits: EdgeLimits,
    coordinators: dict[str, int] | None = None,
    *,
    clock: Clock = wall_ms,
) -> bool:
    """One round: list the share groups on every broker, describe their offsets per coordinator.

    Returns whether the brokers have the API. A broker that fails its ListGroups leaves the
    groups known before in place (no evidence that they are gone); a group whose describe
    fails keeps its last answer too, the failure counted. `coordinators` remembers each
    group's coordinator between rounds; a group whose coordinator fails is looked up again."""
    coordinators = {} if coordinators is None else coordinators
    nodes = sorted(b.nodeId for b in client.cluster.brokers())
    answers = await asyncio.gather(*(client.send(n, ListShareGroups()) for n in nodes), return_exceptions=True)
    listed: list[Any] = []
    complete = True
    for answer in answers:
        if isinstance(answer, _UNSUPPORTED):
            return False
        if isinstance(answer, BaseException):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            counters.count_failure(f"share_groups_list_{answer.__class__.__name__}")
            complete = False
            continue
        listed.append(answer)
    states, errors, refused_groups = parse_share_groups(listed, limits)
    for name in errors:
        counters.count_failure(f"share_groups_list_{name}")
    if refused_groups:
        counters.count_failure("share_groups_refused")
    complete = complete and not errors
    for group in [g for g in coordinators if g not in states]:
        del coordinators[group]
    by_coordinator: dict[int, list[str]] = {}
    for group in sorted(states):
        node = coordinators.get(group)
        if node is None:
            try:
                node = coordinators[group] = await client.coordinator_lookup(GROUP_COORDINATOR, group)
            except Exception as exc:
                counters.count_failure(f"share_groups_coordinator_{exc.__class__.__name__}")
                continue
        by_coordinator.setdefault(node, []).append(group)
    before = view.of(cluster.name)
    now: dict[str, ShareGroup] = {} if complete else dict(before)
    for group in states:
        if group in before:
            now[group] = before[group]
    if not by_coordinator and nodes:
        # no share group to describe: whether the brokers could is asked with an empty request
        # (aiokafka refuses it before sending when they cannot), so a cluster without the API
        # reads as unsupported, not as one without share groups
        try:
            await client.send(nodes[0], DescribeShareGroupOffsets([]))
        except _UNSUPPORTED:
            return False
        except Exception as exc:
            counters.count_failure(f"share_groups_describe_{exc.__class__.__name__}")
    for node, groups in sorted(by_coordinator.items()):
        try:
            answer = await client.send(node, DescribeShareGroupOffsets(groups))
        except _UNSUPPORTED:
            return False
        except Exception as exc:
            counters.count_failure(f"share_groups_describe_{exc.__class__.__name__}")
            for group in groups:
                coordinators.pop(group, None)
            continue
        described, refused = parse_share_offsets(answer, states, clock(), limits)
        if refused:
            counters.count_failure("share_groups_refused")
        for share_group in described:
            if share_group.error is not None:
                coordinators.pop(share_group.group, None)  # moved, loading, gone: ask again next round
                counters.count_failure(f"share_groups_describe_{share_group.error.split(':')[0]}")
                if share_group.group in now:
                    continue  # keep the last good answer
            now[share_group.group] = share_group
    view.groups[cluster.name] = now
    return True
