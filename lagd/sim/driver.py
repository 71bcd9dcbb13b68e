"""Drive a real broker through a scenario: real topics, real records, real commits.

Two modes, matching lagd's two ways in:
- "topic": commits and group metadata are written, byte-exact (lagd.sim.encode), into the
  broker's offsets topic, as a group coordinator would; the key picks the partition.
- "admin": one real aiokafka consumer per group joins the group and commits through the
  broker (OffsetCommit), for lagd's admin-polling mode.
- "produce": topics and records only, no group commits (log-end sampling on its own).

Everything the driver did is recorded (`produced`, `commits`, `orders`), so tests compare
what lagd saw with what really happened. `run` sleeps `tick / speed` between steps; tests
call `advance` directly and need no sleeping at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from lagd.runtime import logs
from lagd.sim.encode import (
    encode_group_metadata,
    encode_group_tombstone,
    encode_offset_commit,
    encode_offset_tombstone,
    offsets_partition_for,
)
from lagd.sim.scenario import GroupSpec, Scenario, Step, step

log = logs.get(__name__)

Mode = Literal["topic", "admin", "produce"]
GPKey = tuple[str, str, int]  # (group, topic, partition)


@dataclass
class Driver:
    """A scenario running on a real broker. Create, `await start()`, `advance`/`run`, `await close()`."""

    bootstrap: str
    scenario: Scenario
    mode: Mode = "topic"
    offsets_topic: str = "__consumer_offsets"
    offsets_partitions: int = 50
    speed: float = 1.0
    host: str = "/10.0.0.7"
    t: float = -1.0
    produced: dict[tuple[str, int], int] = field(default_factory=dict)
    commits: dict[GPKey, list[int]] = field(default_factory=dict)
    # topic mode: the (offsets partition, record offset) each commit record landed at.
    orders: dict[GPKey, list[tuple[int, int]]] = field(default_factory=dict)
    deleted_groups: set[str] = field(default_factory=set)
    deleted_topics: set[str] = field(default_factory=set)
    _admin: Any = None
    _producer: Any = None
    _consumers: dict[str, Any] = field(default_factory=dict)
    _announced: set[str] = field(default_factory=set)

    @property
    def last_commits(self) -> dict[GPKey, int]:
        """The newest committed offset of every group-partition that still exists."""
        return {
            k: v[-1]
            for k, v in self.commits.items()
            if v[-1] >= 0 and k[0] not in self.deleted_groups and k[1] not in self.deleted_topics
        }

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await self._admin.start()
        existing = set(await self._admin.list_topics())
        new = [NewTopic(t.name, t.partitions, 1) for t in self.scenario.topics if t.name not in existing]
        if self.mode == "topic" and self.offsets_topic not in existing:
            new.append(NewTopic(self.offsets_topic, self.offsets_partitions, 1))
        if new:
            await self._admin.create_topics(new)
        if self.mode == "topic" and self.offsets_topic in existing:
            meta = await self._admin.describe_topics([self.offsets_topic])
            self.offsets_partitions = len(meta[0]["partitions"])
        # linger 0 and one send_and_wait at a time: one record per batch. Tansu answers
        # ListOffsets LATEST with "base offset of the newest batch + 1", exact only then.
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0, acks=1)
        await self._producer.start()
        if self.mode == "admin":
            live = list(self.scenario.groups)
            consumers = await asyncio.gather(*(self._join(g) for g in live))
            self._consumers = {g.name: c for g, c in zip(live, consumers, strict=True)}

    async def _join(self, group: GroupSpec) -> Any:
        # Tansu needs about half the session timeout to complete a join: keep it short.
        consumer = AIOKafkaConsumer(
            *group.topics,
            bootstrap_servers=self.bootstrap,
            group_id=group.name,
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            client_id=f"sim-{group.name}",
        )
        await consumer.start()
        want = {TopicPartition(t, p) for t in group.topics for p in range(self.scenario.topic(t).partitions)}
        for _ in range(400):
            if set(consumer.assignment()) >= want:
                break
            await asyncio.sleep(0.05)
        else:
            await consumer.stop()
            raise RuntimeError(f"group {group.name} was not assigned {sorted(want)} within 20 s")
        return consumer

    async def close(self) -> None:
        for c in self._consumers.values():
            with contextlib.suppress(Exception):
                await c.stop()
        self._consumers.clear()
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            await self._admin.close()

    async def run(self, until: float, stop: asyncio.Event | None = None) -> None:
        """Advance tick by tick until scenario time `until`, sleeping tick/speed in between."""
        while self.t < until and not (stop and stop.is_set()):
            await self.advance(max(self.t, 0.0) + self.scenario.tick if self.t >= 0 else 0.0)
            if stop is None:
                await asyncio.sleep(self.scenario.tick / self.speed)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.scenario.tick / self.speed)

    async def advance(self, t: float) -> Step:
        """Do everything the scenario says happens in (self.t, t]."""
        s = step(self.scenario, self.t, t)
        for (topic, partition), n in sorted(s.produce.items()):
            for _ in range(n):
                await self._producer.send_and_wait(topic, b"sim", partition=partition)
            self.produced[(topic, partition)] = self.produced.get((topic, partition), 0) + n
        for group, offsets in sorted(s.commits.items()):
            await self._commit(group, offsets, self.scenario.ts_ms(t))
        for group in s.deleted_groups:
            await self._delete_group(group)
        if s.deleted_topics:
            await self._delete_topics(s.deleted_topics)
        for g in self.scenario.groups:
            # A stopped group falls silent; its consumer leaves (admin mode) or the coordinator
            # writes an empty group (topic mode).
            if g.behaviour == "stopped" and self.t < g.at <= t:
                await self._stop_group(g)
        self.t = t
        return s

    async def _commit(self, group: str, offsets: dict[tuple[str, int], int], ts: int) -> None:
        if self.mode == "produce":
            return
        if self.mode == "admin":
            consumer = self._consumers[group]
            await consumer.commit({TopicPartition(t, p): off for (t, p), off in offsets.items()})
            for (t, p), off in offsets.items():
                self.commits.setdefault((group, t, p), []).append(off)
            return
        if group not in self._announced:
            self._announced.add(group)
            await self._write_members(group, live=True)
        for (topic, p), off in sorted(offsets.items()):
            key, value = encode_offset_commit(group, topic, p, off, ts)
            await self._write(group, key, value, (group, topic, p))
            self.commits.setdefault((group, topic, p), []).append(off)

    async def _write(self, group: str, key: bytes, value: bytes | None, gp: GPKey | None = None) -> None:
        part = offsets_partition_for(group, self.offsets_partitions)
        meta = await self._producer.send_and_wait(self.offsets_topic, value, key=key, partition=part)
        if gp is not None:
            self.orders.setdefault(gp, []).append((part, meta.offset))

    async def _write_members(self, group: str, live: bool) -> None:
        spec = next(g for g in self.scenario.groups if g.name == group)
        assignment = {t: list(range(self.scenario.topic(t).partitions)) for t in spec.topics}
        members: Iterable[tuple[str, str, str, dict[str, list[int]]]] = (
            [(f"sim-{group}-1", f"sim-{group}", self.host, assignment)] if live else []
        )
        key, value = encode_group_metadata(group, leader=f"sim-{group}-1" if live else "", members=tuple(members))
        await self._write(group, key, value)

    async def _stop_group(self, group: GroupSpec) -> None:
        if self.mode == "produce":
            return
        if self.mode == "admin":
            consumer = self._consumers.pop(group.name, None)
            if consumer is not None:
                await consumer.stop()
        else:
            await self._write_members(group.name, live=False)

    async def _delete_group(self, group: str) -> None:
        self.deleted_groups.add(group)
        if self.mode == "produce":
            return
        if self.mode == "admin":
            # Tansu answers DeleteGroups with success and keeps the group: the consumer only leaves.
            consumer = self._consumers.pop(group, None)
            if consumer is not None:
                await consumer.stop()
            return
        for g, topic, p in sorted(k for k in self.commits if k[0] == group):
            key, value = encode_offset_tombstone(g, topic, p)
            await self._write(group, key, value, (g, topic, p))
        key, value = encode_group_tombstone(group)
        await self._write(group, key, value)

    async def _delete_topics(self, topics: Iterable[str]) -> None:
        names = sorted(topics)
        self.deleted_topics.update(names)
        await self._admin.delete_topics(names)
        if self.mode == "topic":
            # The coordinator removes the committed offsets of a deleted topic with tombstones.
            for g, topic, p in sorted(k for k in self.commits if k[1] in names and k[0] not in self.deleted_groups):
                key, value = encode_offset_tombstone(g, topic, p)
                await self._write(g, key, value, (g, topic, p))
