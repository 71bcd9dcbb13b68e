"""A restarted lagd resumes the groups of open incidents from the incident engine's stored
state (lagd.daemon.resume_open_incidents), on a real Postgres: a WARN held by hysteresis
stays WARN, so the restart neither resolves its incident nor reports the group again."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from lagd.daemon import resume_open_incidents
from lagd.db.schema import incident_engine_state
from lagd.model import GroupStatus
from lagd.notify.incidents import IncidentEngine, Rules, open_members
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
    finally:
        await engine.dispose()
