"""The verdict feed: group verdict changes from the evaluator to the notifier, coalesced per group.

Why not a bounded queue: a full queue has to drop changes, and a dropped change is never
sent again (verdicts are only sent when they change), so an incident could stay open
forever. The feed keeps at most one waiting change per group, the newest, so it is bounded
by the number of groups and never loses the current status; a status that was replaced
before the notifier took it was already out of date.

It also keeps the latest change of every group, which the notifier replays as a snapshot
when it takes over leadership of a cluster: changes it dropped as a standby (and any the
previous leader never recorded) are then caught up. `snapshot` answers only once the
producer has reported a complete pass over every group (`mark_complete`), so that a group
not yet evaluated is not mistaken for a vanished one. With several producers (the group
evaluator and the mirror watcher), each named at construction, it waits for all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from lagd.core.model import GroupStatus
from lagd.notify.incidents import GroupChange


class VerdictFeed:
    """Latest-status-per-group map with the consuming side of an asyncio.Queue."""

    def __init__(self, producers: Collection[str] = ("groups",)) -> None:
        self._waiting: dict[tuple[str, str], GroupChange] = {}  # oldest change first
        self._latest: dict[tuple[str, str], GroupChange] = {}
        self._wake = asyncio.Event()
        self._incomplete = set(producers)  # producers yet to report a complete pass
        self.coalesced = 0  # waiting changes replaced by a newer one of the same group

    # --- producer -----------------------------------------------------------------------

    def put_nowait(self, change: GroupChange) -> None:
        """Offer a change; never blocks and never drops the newest status of a group."""
        key = (change.cluster, change.group)
        if self._waiting.pop(key, None) is not None:
            self.coalesced += 1
        self._waiting[key] = change  # (re)inserted last: the order follows the latest changes
        if change.status == GroupStatus.NOTFOUND:
            self._latest.pop(key, None)  # gone: it leaves the snapshot
        else:
            self._latest[key] = change
        self._wake.set()

    async def put(self, change: GroupChange) -> None:
        self.put_nowait(change)

    def mark_complete(self, producer: str = "groups") -> None:
        """`producer` has offered the status of every member it knows at least once."""
        self._incomplete.discard(producer)

    # --- consumer -----------------------------------------------------------------------

    def empty(self) -> bool:
        return not self._waiting

    def qsize(self) -> int:
        return len(self._waiting)

    def get_nowait(self) -> GroupChange:
        if not self._waiting:
            raise asyncio.QueueEmpty
        key = next(iter(self._waiting))
        return self._waiting.pop(key)

    async def get(self) -> GroupChange:
        """The oldest waiting change; waits for one. Cancelling it never loses a change."""
        while not self._waiting:
            self._wake.clear()
            await self._wake.wait()
        return self.get_nowait()

    def snapshot(self, cluster: str) -> list[GroupChange] | None:
        """The latest change of every known group of `cluster`, oldest first; None before a complete pass."""
        if self._incomplete:
            return None
        mine = [c for (cl, _), c in self._latest.items() if cl == cluster]
        return sorted(mine, key=lambda c: (c.at, c.group))
