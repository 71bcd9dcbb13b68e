"""Mirror verdicts (written by `lagd jobs mirrors` to mirror_status) as incident-engine input.

The daemon runs `watch_mirrors`; a mirrored topic whose verdict changed becomes a
GroupChange on the mirror's target cluster, through the same VerdictFeed as groups. So does a
MirrorMaker 2 flow whose verdict (lagd.ingest.mirror_flows, read from MM2's heartbeats) changed,
as the member `mirror:<mirror>`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from lagd.core.config import MirrorSettings
from lagd.core.model import GroupStatus
from lagd.db import schema
from lagd.evaluate.mirror_flow import FlowVerdict
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.runtime import logs
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

MIRROR_SCAN_S = 5.0  # the mirror job writes every 2 minutes; a few seconds' delay is nothing
MIRROR_READ_TIMEOUT_S = 10.0

# A mirrored topic's verdict (lagd.evaluate.mirrors) as the status the incident engine rates.
MIRROR_SEVERITY = {
    "OK": GroupStatus.OK,
    "LAGGING": GroupStatus.WARN,
    "STALLED": GroupStatus.ERR,
    "INCOMPLETE": GroupStatus.ERR,
    "MISSING": GroupStatus.ERR,
    "NOT_ENOUGH_DATA": GroupStatus.OK,  # a young mirror: nothing to say yet, nothing to alert on
    "NO_HEARTBEATS": GroupStatus.OK,  # an MM2 flow not started yet: nothing to alert on
}
FLOW = ""  # the `topic` under which an MM2 flow's verdict is remembered (no topic has an empty name)


def mirror_member(mirror: str, topic: str) -> str:
    """The incident member name of a mirrored topic (on the mirror's target cluster)."""
    return f"mirror:{mirror}/{topic}" if topic != FLOW else f"mirror:{mirror}"


async def read_mirror_verdicts(
    engine: AsyncEngine,
    mirrors: Mapping[str, MirrorSettings],
    last: dict[tuple[str, str], str],
    changes: VerdictFeed,
    now: int,
    flows: Mapping[str, FlowVerdict] | None = None,
) -> int:
    """One pass over mirror_status: a mirrored topic whose verdict changed becomes a GroupChange.

    The member lives on the mirror's target cluster (where the copy is missing or late), so
    the topics of one broken mirror correlate into one incident like groups of one cluster;
    its topic is the target's name, which target-side consumer groups share. `last` holds
    the verdict last offered per (mirror, topic); rows of mirrors no longer configured are
    ignored, and a topic whose row is gone is offered NOTFOUND (resolving its incidents).
    `flows`, the MM2 flows' verdicts, are offered the same way, as the member `mirror:<mirror>`.
    Returns the number of changes offered.
    """
    t = schema.mirror_status
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(t.c.mirror, t.c.topic, t.c.target_topic, t.c.verdict))).all()
    offered = 0
    seen: set[tuple[str, str]] = set()
    flow_rows = [(name, FLOW, "", v.status) for name, v in sorted((flows or {}).items())]
    for mirror, topic, target_topic, verdict in [*rows, *flow_rows]:
        m = mirrors.get(mirror)
        status = MIRROR_SEVERITY.get(verdict)
        if m is None or status is None:
            continue  # a mirror removed from the config, or a verdict this version does not know
        key = (mirror, topic)
        seen.add(key)
        if last.get(key) == verdict:
            continue
        last[key] = verdict
        changes.put_nowait(
            GroupChange(
                m.target,
                mirror_member(mirror, topic),
                status,
                now,
                topics=(target_topic,) if target_topic else (),
                kind="mirror",
            )
        )
        offered += 1
    for key in [k for k in last if k not in seen]:
        del last[key]
        mirror, topic = key
        gone = GroupChange(
            mirrors[mirror].target, mirror_member(mirror, topic), GroupStatus.NOTFOUND, now, kind="mirror"
        )
        changes.put_nowait(gone)
        offered += 1
    changes.mark_complete("mirrors")
    return offered


async def watch_mirrors(
    engine: AsyncEngine,
    mirrors: Mapping[str, MirrorSettings],
    changes: VerdictFeed,
    every_s: float = MIRROR_SCAN_S,
    *,
    clock: Clock = wall_ms,
    flows: Mapping[str, FlowVerdict] | None = None,
) -> None:
    """Feeds changed mirror verdicts (written by `lagd jobs mirrors`, and the MM2 flows' in
    `flows`, which the flow readers keep current) to the incident engine,
    each change at the time `clock` (lagd.runtime.clock) reads when its pass starts.

    A database error or hang is logged and the read retried on the next round; never fatal.
    """
    last: dict[tuple[str, str], str] = {}
    failures = 0
    while True:
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            async with asyncio.timeout(MIRROR_READ_TIMEOUT_S):
                await read_mirror_verdicts(engine, mirrors, last, changes, clock(), flows)
        except Exception as exc:
            failures += 1
            if failures == 1 or failures % 10 == 0:
                log.warning(
                    "reading mirror verdicts failed; retrying",
                    error=f"{exc.__class__.__name__}: {exc}",
                    attempt=failures,
                    hint="mirror incidents wait until Postgres answers",
                )
        else:
            if failures:
                log.info("reading mirror verdicts works again", failed_attempts=failures)
            failures = 0
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # a library's wait_for swallowed it (Python 3.11): honour it
        await asyncio.sleep(every_s)
