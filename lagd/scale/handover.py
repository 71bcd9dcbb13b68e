"""What a worker does when the consumer group gives it offsets partitions or takes them away.

Given partitions: restore their groups' windows, members and tombstones from Postgres, take
the statuses their last owner published (so a first judgement that agrees is no change), and
publish the new ownership. Losing them: apply what the reader queued, flush it, publish the
verdicts held, let the groups go from memory, and withdraw the ownership rows. The reader
(lagd.ingest.offsets_group) hands nothing of revoked partitions on while this runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.model import Event, GroupMembers
from lagd.db.schema import group_verdicts
from lagd.evaluate import Evaluator
from lagd.notify.incidents import GroupChange
from lagd.notify.shared_verdicts import decode_change
from lagd.notify.watch import VerdictWatch
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.scale import ownership
from lagd.scale.ownership import Held, Me
from lagd.state import persister
from lagd.state.changes import forget_groups
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from lagd.state.windows import State, offsets_partition

log = logs.get(__name__)

REVOKE_FLUSH_S = 5.0  # the longest a revocation waits for Postgres before letting go unflushed


@dataclass
class WorkerHandover:
    """The daemon's side of a rebalance (lagd.ingest.offsets_group.Handover)."""

    state: State
    evaluator: Evaluator
    events: asyncio.Queue[list[Event]]
    wb: WriteBehind
    store: Store
    engine: AsyncEngine
    me: Me
    clock: Clock = wall_ms
    watch: VerdictWatch | None = None  # set once the daemon has built it
    publish_verdicts: Callable[[], Awaitable[None]] | None = None  # pushes held verdict changes out
    held: Held | None = None  # the partitions held now, which the API routes by (OwnerMap.held)

    async def assigned(
        self, cluster: str, partitions: set[int], count: int
    ) -> tuple[dict[int, int], list[GroupMembers]]:
        started = time.monotonic()
        sampled = self.state.consumed_topics(cluster)
        positions = await self.store.restore_owned(self.state, cluster, partitions, count)
        # Topics only the new groups consume, which this worker has not been sampling: start
        # from the samples their last sampler stored, so lag in time is known at once.
        unsampled = self.state.consumed_topics(cluster) - sampled
        await self.store.restore_log_ends(self.state, cluster, unsampled)
        mine = [m for m in self.state.group_members(cluster) if offsets_partition(m.group, count) in partitions]
        if self.watch is not None:
            self.watch.take_over(cluster, await self._published(cluster, partitions, count))
        if self.held is not None:
            self.held.take(cluster, partitions, count)
        await ownership.publish(self.engine, cluster, self.me, partitions, count, self.clock)
        log.info(
            "groups restored for assigned partitions",
            cluster=cluster,
            partitions=len(partitions),
            group_partitions=self.state.partitions_tracked(),
            seconds=round(time.monotonic() - started, 2),
        )
        return positions, mine

    async def revoked(self, cluster: str, partitions: set[int], count: int) -> None:
        if self.held is not None:
            self.held.drop(cluster, partitions)  # in transit from now: the API answers 503, not 404
        await self.events.join()  # everything the reader queued is applied (it queues nothing more meanwhile)
        flushed = False
        try:
            flushed = await asyncio.wait_for(persister.flush(self.wb), REVOKE_FLUSH_S)
        except TimeoutError:
            pass
        if self.publish_verdicts is not None:
            try:
                await asyncio.wait_for(self.publish_verdicts(), REVOKE_FLUSH_S)
            except (TimeoutError, Exception) as exc:  # the new owner judges them again anyway
                log.warning("verdicts not published before letting groups go", cluster=cluster, error=repr(exc))
        gone = self.state.let_go(cluster, partitions, count)
        log.info("groups let go", cluster=cluster, groups=len(gone), group_partitions=self.state.partitions_tracked())
        if not flushed:
            # Written later, these would overwrite (or duplicate in the history) what the new
            # owner writes; it reads the partitions again from the last positions written instead.
            forget_groups(self.wb.pending, cluster, set(gone), partitions)
            log.warning(
                "let groups go without writing their last changes",
                cluster=cluster,
                groups=len(gone),
                hint="Postgres did not take the write in time; the new owner reads those records again, "
                "nothing is lost",
            )
        if self.watch is not None:
            self.watch.let_go(cluster, gone)
        else:
            for group in gone:
                self.evaluator.forget(cluster, group)
        try:
            await ownership.release(self.engine, cluster, self.me, partitions)
        except Exception as exc:  # the new owner overwrites the rows anyway
            log.warning("ownership rows not withdrawn", cluster=cluster, error=repr(exc))

    async def _published(self, cluster: str, partitions: set[int], count: int) -> dict[str, GroupChange]:
        """The verdicts last published for the groups of `partitions` (lagd.notify.shared_verdicts)."""
        t = group_verdicts.c
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(t.group_name, t.status, t.at, t.body).where(t.cluster == cluster))).all()
        out: dict[str, GroupChange] = {}
        for group, status, at, body in rows:
            if offsets_partition(group, count) not in partitions:
                continue
            try:
                out[group] = decode_change(cluster, group, status, at, body)
            except (ValueError, KeyError, TypeError) as exc:  # a row from another lagd version: judged afresh
                log.warning("published verdict not readable; the group is judged afresh", group=group, error=repr(exc))
        return out
