"""Leadership: one lagd instance per cluster notifies, decided by a Postgres advisory lock.

Why an advisory lock: it lives exactly as long as the session holding it, so a crashed or
partitioned leader loses it with its connection and a standby takes over on its next try,
with nothing else to configure. Running two instances for availability never doubles
notifications: each cluster's incidents are recorded by the holder of its lock, and the
outbox (one table for all clusters) is drained to MQTT by the holder of `PUBLISH_KEY`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from lagd.runtime import logs

log = logs.get(__name__)

_TRY = text("SELECT pg_try_advisory_lock(hashtext(:key))")
_UNLOCK = text("SELECT pg_advisory_unlock(hashtext(:key))")


def lock_key(cluster: str) -> str:
    return f"lagd-notify:{cluster}"


# The outbox is one table for every cluster: one publisher drains it, whoever holds this.
PUBLISH_KEY = "lagd-publish:outbox"
# The availability topics (<prefix>/<cluster>/status with a last will): announced by whoever holds this.
AVAILABILITY_KEY = "lagd-publish:availability"


class Lease:
    """A try-lock on one cluster's notifications (or on `key`), held on a dedicated connection.

    `await lease.refresh()` (re)tries the lock or checks it is still held; `is_leader` says
    the outcome. Call it periodically: a standby becomes leader when the holder goes away.
    """

    def __init__(self, engine: AsyncEngine, cluster: str, key: str | None = None, *, sink: str = "") -> None:
        self.engine = engine
        self.cluster = cluster
        self.key = key or lock_key(cluster)
        # what the log names the lease by: the sink's name for a sink's lease, else the cluster
        self.names = {"sink": sink} if sink else {"cluster": cluster}
        self.is_leader = False
        # held until Postgres went away (its session lost with the database, not taken by
        # another instance): nobody can lead meanwhile, so the holder goes on judging incidents
        # and keeps what it cannot record (lagd.notify.notifier), until Postgres answers again
        self.lost_to_outage = False
        self.tried_at = 0.0  # time.monotonic() of the last refresh
        self._conn: AsyncConnection | None = None

    async def refresh(self) -> bool:
        self.tried_at = time.monotonic()
        try:
            if self._conn is None:
                self._conn = await self.engine.connect()
            if self.is_leader:
                await self._conn.execute(text("SELECT 1"))  # the lock lives as long as this session
            else:
                got = await self._conn.scalar(_TRY, {"key": self.key})
                if got:
                    log.info("notify leadership acquired", **self.names, lock=self.key)
                self.is_leader = bool(got)
            await self._conn.commit()
            self.lost_to_outage = False
        except (SQLAlchemyError, OSError) as exc:
            if self.is_leader:
                self.lost_to_outage = True
                log.warning(
                    "notify leadership lost with its database session",
                    **self.names,
                    lock=self.key,
                    error=str(exc),
                )
            self.is_leader = False
            await self._drop()
        return self.is_leader

    async def release(self) -> None:
        if self._conn is not None and self.is_leader:
            with contextlib.suppress(SQLAlchemyError, OSError):
                await self._conn.scalar(_UNLOCK, {"key": self.key})
                await self._conn.commit()
        self.is_leader = self.lost_to_outage = False
        await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError, OSError):
                await conn.invalidate()  # never back to the pool: a lock might ride along
            with contextlib.suppress(SQLAlchemyError, OSError):
                await conn.close()


@contextlib.asynccontextmanager
async def leadership(engine: AsyncEngine, cluster: str) -> AsyncIterator[Lease]:
    """A lease tried once on entry and released (lock and connection) on exit."""
    lease = Lease(engine, cluster)
    try:
        await lease.refresh()
        yield lease
    finally:
        await lease.release()
