"""Requests first: background work leaves its turn of the loop to HTTP requests waiting for theirs.

asyncio runs the ready callbacks in the order they became ready. A request takes three turns
of the loop (its bytes read and parsed, its Request built, its handler run), and under load every
busy background task (the offsets readers, apply, the persister, the verdict watch, the notifier)
runs a slice of a few ms between two of them: a request waited behind two rounds of slices.
`Turns` counts the requests parsed but not yet handled (the server reports them as their bytes
are parsed, lagd.http.app.report_requests); a background task's `turn` hands the loop back and
then, while requests wait, waits for them, so their handlers run next. It waits at most
`max_wait_s` after the first of them arrived: background work (ingest most of all) still gets
its turns under any load, and a request that never reaches its handler (its connection lost)
cannot hold the rest back for longer. And only while that work keeps up: a reader with 10,000
records or more left to read (offsets_topic.BEHIND_RECORDS), apply with half its queue of
batches behind the one it applies (daemon.APPLY_BEHIND_BATCHES), and the persister with more than
five flushes' worth of changes waiting (persister.KEEPING_UP_FLUSHES) take their turns at once,
so a flood of requests cannot make verdicts go stale. Work that resumes from elsewhere (apply from
its queue, the verdict watch from a pause, the collector from its timer) takes its turn before its
first slice as well: a request parsed meanwhile goes first.

One slice, then the sockets. asyncio runs every callback that is ready when a turn of the loop
begins before it looks at its sockets again. With each busy task's next slice ready at once, a
request's bytes waited for a slice of every one of them, often twice over, before they were even
read. `turn` queues the slice, and the next queued slice goes only after the loop has read its
sockets once the last one ran (`_after_slice`, then `_release` from a timer due at once: timers
run after the sockets' callbacks of their turn), so a request's bytes wait for at most the slice
running. The queue is served in order, so each busy task still has one slice in every round of
them, as before (work that takes its turns at once, above, is not queued). At 1M group-partitions (bench_http --phases
large, 200 GET /lag/s, 20,000 commits/s; two runs each, the loop 80-84% of a core and waiting for
one 16-20% of the time): with every slice let go at once, a request's handler started 2.0 ms
after its bytes were read at the median, /lag p50 12.8-13.4 ms, p99 54.7-55.4 ms; with one slice
let go each turn of the loop (before its sockets were read) 0.4-0.6 ms, p50 6.4-7.6 ms, p99
33.3-36.0 ms; as now, p50 5.3-5.5 ms, p99 26.6-31.3 ms.

Measured in bench_http (1,000 groups x 100 partitions, 20,000 commits/s, /lag with the response
cache off), interleaved with the code before: at 200 requests/s p99 70-91 ms against 98-143 ms
(three pairs); at 400/s p99 138 ms against 245 ms, the last commit shown after 0.28 s against 2.8 s.
At 1M group-partitions (bench_http --phases large), reporting requests when parsed rather than
built took /lag p50 from 6.9 to 4.4-4.6 ms, and the reader's turns decided by records left
rather than by a full fetch took p99 from 32 ms to 19.9-22.0 ms in six of nine runs (the loop
68-83% of a core) and 25.3-31.7 ms in the other three (80-88%).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable

Turn = Callable[[], Awaitable[None]]  # what a background loop awaits between two slices of its work

MAX_WAIT_S = 0.02  # the longest background work waits for requests before its next slice


async def plain_turn() -> None:
    """The loop's turn, with no one going first: for callers without a `Turns` (tests, tools)."""
    await asyncio.sleep(0)


class Turns:
    """Requests waiting for their handler, and the turn background work takes after them (see the
    module doc). One per daemon: the HTTP server reports its requests (`arrived`, `started`),
    the background loops await `turn` between slices."""

    __slots__ = ("_clock", "_next", "_queue", "_since", "_waiting", "max_wait_s")

    def __init__(self, max_wait_s: float = MAX_WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._waiting = 0
        self._since = 0.0  # when the oldest waiting request arrived
        # the background slices waiting for their turn, in the order they asked for it
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._next: asyncio.Handle | None = None  # the pending `_release` or `_after_slice`, if any

    @property
    def waiting(self) -> int:
        """Requests built whose handler has not started yet."""
        return self._waiting

    def arrived(self) -> None:
        """A request was read and built; its handler runs at a later turn of the loop."""
        if not self._waiting:
            self._since = self._clock()
        self._waiting += 1

    def started(self) -> None:
        """A request's handler started: it holds the loop now, nobody needs to wait for it."""
        if self._waiting:
            self._waiting -= 1
            if not self._waiting and self._queue:
                self._release_soon()

    async def turn(self) -> None:
        """Hand the loop back until the background slices queued before this one had theirs (one
        at a time, the loop reading its sockets after each) and no request waits for its handler
        (at most `max_wait_s` after the oldest of them arrived)."""
        released_once = False
        while True:
            waiter = asyncio.get_running_loop().create_future()
            if released_once:
                self._queue.appendleft(waiter)  # it had its place: a request came in between
            else:
                self._queue.append(waiter)
            if self._next is None:
                self._release_soon()
            await waiter
            if not self._held():
                return
            released_once = True

    def _held(self) -> bool:
        """Do requests wait for their handler, and not yet for longer than `max_wait_s`?"""
        if not self._waiting:
            return False
        if self._clock() - self._since < self.max_wait_s:
            return True
        # They waited long enough, or one never reaches its handler (its connection was lost):
        # count them as gone, so background work goes on at its own pace.
        self._waiting = 0
        return False

    def _release_soon(self) -> None:
        """Release a slice at the next turn of the loop, once it has read its sockets: a timer
        due now runs after that turn's socket callbacks, a `call_soon` callback before them."""
        if self._next is not None:
            self._next.cancel()
        self._next = asyncio.get_running_loop().call_later(0.0, self._release)

    def _after_slice(self) -> None:
        """Runs just after the slice released last (scheduled behind its wakeup): the next one
        is released once the loop has read its sockets after it."""
        self._next = None
        self._release_soon()

    def _release(self) -> None:
        """Let the first waiting slice go, and the next one after the loop has read its sockets
        once that slice ran: where every waiting slice went at once, a request's bytes waited
        for all of them before they were even read."""
        self._next = None
        loop = asyncio.get_running_loop()
        if self._held():
            # `started` lets them go once the last request is handled, or this after max_wait_s
            self._next = loop.call_later(self._since + self.max_wait_s - self._clock(), self._release)
            return
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():  # not cancelled with its task
                waiter.set_result(None)
                break
        if self._queue:
            self._next = loop.call_soon(self._after_slice)
