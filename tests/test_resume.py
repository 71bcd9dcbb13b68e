"""A restarted lagd resumes the groups of open incidents from the incident engine's stored
state (lagd.daemon.resume_open_incidents), on a real Postgres: a WARN held by hysteresis
stays WARN, so the restart neither resolves its incident nor reports the group again, and the
notifier taking the cluster over finds the group in the verdicts it catches up with (issue 50:
missing there, it was taken for gone and its incident falsely resolved)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.core.config import NotifySettings
from lagd.core.model import GroupStatus
from lagd.daemon import resume_open_incidents
from lagd.db.schema import incident_engine_state
from lagd.notify.incidents import IncidentEngine, Rules, open_members
from lagd.notify.notifier import Notifier
from tests.test_watch import HELD_AT, C, held_warn, successor


def async_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


async def test_a_restart_resumes_the_groups_of_open_incidents(database_url: str) -> None:
    owner, change = held_warn()
    incidents = IncidentEngine(Rules(severity="WARN"))
    assert incidents.apply(change)  # the group's WARN opened an incident
    stored = incidents.dump_cluster(C)
    assert list(open_members(C, stored)) == ["g"]

    engine = create_async_engine(async_url(database_url))
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.insert(incident_engine_state).values(cluster=C, state=stored))
        restarted = successor(owner)
        await resume_open_incidents(engine, restarted)
        assert restarted.scan(HELD_AT) == 0  # WARN, as before the restart: nothing to report
        assert restarted.statuses[(C, "g")] is GroupStatus.WARN

        afresh = successor(owner)  # what the restart did before: OK, the incident resolved
        assert afresh.scan(HELD_AT) == 1 and afresh.statuses[(C, "g")] is GroupStatus.OK

        # the notifier of the restarted lagd takes the cluster over, catches up and ticks past
        # the hold time: the incident stays open, its group WARN, its retained status not cleared
        assert restarted.changes is not None
        now = [HELD_AT]
        notifier = Notifier(
            engine, NotifySettings(severity="WARN", hold_time=1.0), restarted.changes, clock=lambda: now[0]
        )
        assert await notifier.ensure_lease(C, retry=True)
        assert notifier.unreconciled == set()
        now[0] += 5_000
        await notifier.tick()
        assert notifier.incidents.members(C) == {"g": "WARN"}
        assert len(notifier.incidents.open_incidents(C)) == 1
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT retain, payload::text FROM outbox ORDER BY id"))).all()
        assert [r for r in rows if not r[0]] == []  # no incident event: neither resolved nor updated
        assert rows and all('"status":"WARN"' in r[1].replace(" ", "") for r in rows), rows  # nothing cleared
        await notifier.release_leases()
    finally:
        await engine.dispose()
