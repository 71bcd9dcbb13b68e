"""Describing groups for admin polling: who owns which partition, for classic and KIP-848 groups.

Two Kafka requests, because Kafka 4 answers each kind of group through its own:
- ConsumerGroupDescribe (API 69, Kafka 3.7+) for KIP-848 groups (`group.protocol=consumer`).
  DescribeGroups answers those as "Dead" with no members. Its answer names each assigned
  topic, so no topic id needs resolving.
- DescribeGroups (API 15) for classic groups. aiokafka 0.14 reads its v3 answer with the v2
  layout (no per-group `authorized_operations`), which misreads every group after the first
  of a batch (a "buffer underrun" that closes the connection): the request classes here pair
  each version with its own answer.
Both answers are turned into `GroupView`s by pure functions; the async part only sends them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.admin import (
    DescribeGroupsRequest_v1,
    DescribeGroupsRequest_v2,
    DescribeGroupsRequest_v3,
    DescribeGroupsResponse_v3,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from lagd.core.model import PartitionOwner

# ConsumerGroupDescribe's error for a group that is not a KIP-848 group (GROUP_ID_NOT_FOUND).
GROUP_ID_NOT_FOUND = 69


@dataclass(frozen=True)
class GroupView:
    """What the broker said about one group's members."""

    group: str
    state: str
    owners: tuple[PartitionOwner, ...]
    subscribed: frozenset[str]

    @property
    def has_members(self) -> bool:
        return bool(self.owners) or self.state in (
            "Stable",
            "PreparingRebalance",
            "CompletingRebalance",
            "Reconciling",
            "Assigning",
        )


# --- DescribeGroups, each version read with its own layout ---------------------------------


class _DescribeGroupsRequestV3(RequestStruct):  # type: ignore[misc]
    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = DescribeGroupsRequest_v3.SCHEMA


_DescribeGroupsStruct: TypeAlias = DescribeGroupsRequest_v1 | DescribeGroupsRequest_v2 | _DescribeGroupsRequestV3


class DescribeGroups(Request[_DescribeGroupsStruct]):  # type: ignore[misc]
    """DescribeGroups v1-v3 (Kafka 4 no longer answers v0), each answer read as its version writes it."""

    API_KEY = 15

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    def build(self, request_struct_class: type[_DescribeGroupsStruct]) -> _DescribeGroupsStruct:
        if request_struct_class.API_VERSION >= 3:
            return request_struct_class(self.groups, False)
        return request_struct_class(self.groups)


# --- ConsumerGroupDescribe (KIP-848) ---------------------------------------------------------


class _Uuid:
    """A 16-byte uuid field (aiokafka has no type for it)."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: Any) -> bytes:
        raw = bytes(data.read(16))
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding uuid")
        return raw

    @classmethod
    def repr(cls, value: bytes) -> str:
        return value.hex()


_ASSIGNMENT = Schema(
    (
        "topic_partitions",
        CompactArray(
            ("topic_id", _Uuid),
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(Int32)),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class ConsumerGroupDescribeResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 69
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("group_id", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", CompactString("utf-8")),
                (
                    "members",
                    CompactArray(
                        ("member_id", CompactString("utf-8")),
                        ("instance_id", CompactString("utf-8")),
                        ("rack_id", CompactString("utf-8")),
                        ("member_epoch", Int32),
                        ("client_id", CompactString("utf-8")),
                        ("client_host", CompactString("utf-8")),
                        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
                        ("subscribed_topic_regex", CompactString("utf-8")),
                        ("assignment", _ASSIGNMENT),
                        ("target_assignment", _ASSIGNMENT),
                        ("tags", TaggedFields),
                    ),
                ),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribeRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 69
    API_VERSION = 0
    RESPONSE_TYPE = ConsumerGroupDescribeResponse_v0
    SCHEMA = Schema(
        ("group_ids", CompactArray(CompactString("utf-8"))),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribe(Request[ConsumerGroupDescribeRequest_v0]):  # type: ignore[misc]
    API_KEY = 69

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    def build(self, request_struct_class: type[ConsumerGroupDescribeRequest_v0]) -> ConsumerGroupDescribeRequest_v0:
        return request_struct_class(self.groups, False, {})


# --- answers -> views (pure) -----------------------------------------------------------------


def consumer_group_views(responses: Iterable[Any]) -> tuple[dict[str, GroupView], set[str]]:
    """KIP-848 groups' views from ConsumerGroupDescribe answers, and the groups it says are not
    KIP-848 groups (to ask DescribeGroups about)."""
    views: dict[str, GroupView] = {}
    others: set[str] = set()
    for response in responses:
        for g in response.groups:
            error_code, group, state, members = g[0], g[2], g[3], g[7]
            if error_code == GROUP_ID_NOT_FOUND:
                others.add(group)
                continue
            if error_code:
                continue
            owners: list[PartitionOwner] = []
            subscribed: set[str] = set()
            for m in members:
                member_id, client_id, client_host, topics, assignment = m[0], m[4], m[5], m[6], m[8]
                subscribed |= set(topics or ())
                for tp in assignment[0] or ():
                    name = tp[1]
                    owners.extend(
                        PartitionOwner(name, p, client_host or "", client_id or "", member_id or "")
                        for p in tp[2] or ()
                    )
            owners.sort(key=lambda o: (o.topic, o.partition))
            views[group] = GroupView(group, state or "", tuple(owners), frozenset(subscribed))
    return views, others


# --- sending -----------------------------------------------------------------------------------


async def describe_consumer_groups(client: Any, by_node: dict[int, list[str]]) -> tuple[list[Any], bool]:
    """ConsumerGroupDescribe answers, node by node; False when the brokers do not know the request
    (Kafka before 3.7: every group is classic there)."""
    answers = []
    for node, groups in by_node.items():
        try:
            answers.append(await client.send(node, ConsumerGroupDescribe(groups)))
        except (IncompatibleBrokerVersion, NotImplementedError):
            return answers, False
    return answers, True


async def describe_classic_groups(client: Any, by_node: dict[int, list[str]]) -> list[Any]:
    """DescribeGroups answers, node by node."""
    return [await client.send(node, DescribeGroups(groups)) for node, groups in by_node.items()]
