"""The end-to-end probe's broker verdicts (lagd.ingest.probe) as incident-engine input.

A broker whose verdict changed becomes a GroupChange of its cluster, the member
`broker:<cluster>/<id>` of kind "broker", through the same VerdictFeed as groups: NOT_TAKING_WRITES
and NOT_SERVING_READS are ERR (whatever notify.severity), OK and SLOW are OK (SLOW is shown on
/metrics and the status page, and pages nobody). The change carries the probe's reason
("broker 2 of prod not taking writes: no ack within 5 s ..."), which an incident it opens keeps,
and, going bad, the partitions it led lately (lagd.ingest.log_end.Leadership): the groups and
mirrors bad on those join its incident (one incident per cause, lagd.notify.incidents).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

from lagd.core.model import GroupStatus
from lagd.evaluate.probe import BrokerVerdict
from lagd.ingest.log_end import Leadership
from lagd.ingest.probe import Probes
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange
from lagd.runtime.clock import Clock, wall_ms

PRODUCER = "probes"  # the feed's name for this producer (VerdictFeed.mark_complete)
BROKER_SEVERITY = {
    "OK": GroupStatus.OK,
    "SLOW": GroupStatus.OK,
    "NOT_TAKING_WRITES": GroupStatus.ERR,
    "NOT_SERVING_READS": GroupStatus.ERR,
}
SCAN_S = 0.25


def broker_member(cluster: str, broker: int) -> str:
    """The incident member name of a broker."""
    return f"broker:{cluster}/{broker}"


def offer_broker_changes(
    verdicts: Mapping[str, Mapping[int, BrokerVerdict]],
    last: dict[tuple[str, int], str],
    changes: VerdictFeed,
    now: int,
    leadership: Leadership | None = None,
) -> int:
    """Offer every broker whose severity changed since `last` (updated in place); a broker no longer
    judged is offered NOTFOUND. Returns how many changes were offered."""
    offered = 0
    seen: set[tuple[str, int]] = set()
    for cluster, brokers in sorted(verdicts.items()):
        for broker, v in sorted(brokers.items()):
            key = (cluster, broker)
            seen.add(key)
            status = BROKER_SEVERITY.get(v.status, GroupStatus.OK)
            if last.get(key) == status.value:
                continue
            last[key] = status.value
            member = broker_member(cluster, broker)
            led = leadership.led_by(cluster, broker, now) if leadership is not None and status.value == "ERR" else ()
            changes.put_nowait(GroupChange(cluster, member, status, now, kind="broker", reason=v.reason, led=led))
            offered += 1
    for key in [k for k in last if k not in seen]:
        del last[key]
        changes.put_nowait(GroupChange(key[0], broker_member(*key), GroupStatus.NOTFOUND, now, kind="broker"))
        offered += 1
    return offered


async def watch_brokers(
    probes: Probes,
    clusters: Collection[str],
    changes: VerdictFeed,
    grace_s: float,
    *,
    every_s: float = SCAN_S,
    clock: Clock = wall_ms,
    leadership: Leadership | None = None,
) -> None:
    """Feeds changed broker verdicts to the incident engine. The feed's snapshot waits for this
    producer until every canary broker of every probed cluster in `clusters` was judged once
    (`Probes.complete`), or `grace_s` has passed (a cluster lagd cannot reach yet), so a broker in
    an open incident at a restart is not taken for gone before its first verdict."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    complete = False
    last: dict[tuple[str, int], str] = {}
    while True:
        offer_broker_changes(probes.verdicts, last, changes, clock(), leadership)
        if not complete and (probes.complete >= set(clusters) or loop.time() - started >= grace_s):
            changes.mark_complete(PRODUCER)
            complete = True
        await asyncio.sleep(every_s)
