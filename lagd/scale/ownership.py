"""Who owns which offsets partition: published by each worker, read by every instance.

The consumer group's assignment decides ownership (lagd.scale.worker); this module only
writes what a worker was given into `offsets_owners` and reads it back, so an instance that
does not own a group knows whom to ask. A row is written on assignment and deleted on
revocation; a worker killed without revoking leaves its rows until the partitions' new owner
overwrites them, which the group protocol brings within the session timeout.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import and_, delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.db.schema import offsets_owners
from lagd.runtime.clock import Clock, wall_ms
from lagd.state.windows import offsets_partition

REFRESH_S = 1.0  # an ownership map is read again at most this often


@dataclass(frozen=True, slots=True)
class Owner:
    worker: str
    url: str


@dataclass(frozen=True, slots=True)
class Me:
    """This worker: its name in the owners table and where its HTTP answers."""

    worker: str
    url: str

    @classmethod
    def of(cls, listen: str, advertise_host: str = "", *, scheme: str = "http") -> Me:
        """This process's identity from the HTTP address it listens on (`host:port`, already bound)."""
        host, _, port = listen.rpartition(":")
        host = advertise_host or host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        shown = f"[{host}]" if ":" in host else host
        return cls(worker=f"{socket.gethostname()}:{port}", url=f"{scheme}://{shown}:{port}")


async def publish(
    engine: AsyncEngine, cluster: str, me: Me, assigned: Iterable[int], partitions: int, clock: Clock = wall_ms
) -> None:
    """Record that `me` owns the `assigned` offsets partitions of `cluster` (of `partitions` in all)."""
    rows = [
        {
            "cluster": cluster,
            "partition": p,
            "worker": me.worker,
            "url": me.url,
            "partitions": partitions,
            "updated_at": clock(),
        }
        for p in sorted(set(assigned))
    ]
    if not rows:
        return
    stmt = insert(offsets_owners).values(rows)
    stmt = stmt.on_conflict_do_update(
        index_elements=["cluster", "partition"],
        set_={c: stmt.excluded[c] for c in ("worker", "url", "partitions", "updated_at")},
    )
    async with engine.begin() as conn:
        await conn.execute(stmt)


async def release(engine: AsyncEngine, cluster: str, me: Me, revoked: Iterable[int]) -> None:
    """Remove `me`'s rows for the `revoked` partitions (rows another worker took over stay)."""
    parts = sorted(set(revoked))
    if not parts:
        return
    async with engine.begin() as conn:
        await conn.execute(
            delete(offsets_owners).where(
                and_(
                    offsets_owners.c.cluster == cluster,
                    offsets_owners.c.worker == me.worker,
                    offsets_owners.c.partition.in_(parts),
                )
            )
        )


@dataclass
class Held:
    """The offsets partitions this worker holds now, per cluster: from when their groups are
    restored (just before its ownership rows are written) until it starts letting them go
    (before the rows are deleted). The rows, read at most every REFRESH_S, lag behind both: a
    group whose row says "this worker" but whose partition is not held is in transit."""

    partitions: dict[str, tuple[int, frozenset[int]]] = field(default_factory=dict)  # cluster -> (count, held)

    def take(self, cluster: str, partitions: Iterable[int], count: int) -> None:
        _, held = self.partitions.get(cluster, (count, frozenset()))
        self.partitions[cluster] = (count, held | frozenset(partitions))

    def drop(self, cluster: str, partitions: Iterable[int]) -> None:
        count, held = self.partitions.get(cluster, (0, frozenset()))
        self.partitions[cluster] = (count, held - frozenset(partitions))

    def holds(self, cluster: str, group: str) -> bool:
        count, held = self.partitions.get(cluster, (0, frozenset()))
        return bool(count) and offsets_partition(group, count) in held


@dataclass
class OwnerMap:
    """A cached read of `offsets_owners`: the owner of a group, and every instance of a cluster.

    Read again at most every REFRESH_S (or at once with `refresh(force=True)`), so a request
    for a group this instance does not own costs no query most of the time.
    """

    engine: AsyncEngine
    me: Me
    refresh_s: float = REFRESH_S
    held: Held = field(default_factory=Held)  # kept by this worker's handover (lagd.scale.handover)
    _owners: dict[tuple[str, int], Owner] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)
    _read_at: float = -1e9
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self, force: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if not force and loop.time() - self._read_at < self.refresh_s:
            return
        async with self._lock:
            if not force and loop.time() - self._read_at < self.refresh_s:
                return
            async with self.engine.connect() as conn:
                rows = (await conn.execute(select(offsets_owners))).all()
            owners: dict[tuple[str, int], Owner] = {}
            counts: dict[str, int] = {}
            for r in rows:
                owners[(r.cluster, r.partition)] = Owner(r.worker, r.url)
                counts[r.cluster] = max(counts.get(r.cluster, 0), r.partitions)
            self._owners, self._counts, self._read_at = owners, counts, loop.time()

    async def owner(self, cluster: str, group: str) -> Owner | None:
        """The worker that owns `group` of `cluster` as last published, or None if nobody does (yet)."""
        await self.refresh()
        n = self._counts.get(cluster)
        if not n:
            return None
        return self._owners.get((cluster, offsets_partition(group, n)))

    async def instances(self, cluster: str | None = None) -> list[Owner]:
        """Every worker that owns something (of `cluster`), this one included, by name."""
        await self.refresh()
        seen: dict[str, Owner] = {}
        for (c, _), o in self._owners.items():
            if cluster is None or c == cluster:
                seen.setdefault(o.worker, o)
        return [seen[k] for k in sorted(seen)]

    async def any_owner(self, cluster: str) -> bool:
        """Has any worker published ownership of `cluster`'s partitions (have the workers joined)?"""
        await self.refresh()
        return self._counts.get(cluster, 0) > 0

    def is_me(self, owner: Owner | None) -> bool:
        return owner is not None and owner.worker == self.me.worker
