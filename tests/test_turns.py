"""Requests first (lagd.runtime.turns): background slices wait while a request waits for its handler."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import pytest
from aiohttp import web

from lagd import daemon
from lagd.core.config import Settings
from lagd.core.model import Commit
from lagd.http import app
from lagd.runtime.slices import Slices
from lagd.runtime.turns import Turns
from lagd.state import persister
from lagd.state.persister import WriteBehind
from lagd.state.store import Store
from lagd.state.windows import State
from tests.http_state import build_context, serve
from tests.test_http_bounds import pipelined_gets, port_of

NOV22 = 1_795_305_600_000


class Recorded(Turns):
    """Turns that also writes what the server reports into a shared log."""

    def __init__(self, log: list[str], max_wait_s: float) -> None:
        super().__init__(max_wait_s)
        self.log = log

    def arrived(self) -> None:
        self.log.append("arrived")
        super().arrived()

    def started(self) -> None:
        self.log.append("started")
        super().started()


async def loop_turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_background_loop_waits_until_the_waiting_request_started() -> None:
    turns = Turns(max_wait_s=60.0)
    slices: list[int] = []

    async def background() -> None:
        for i in range(1_000):
            slices.append(i)
            await turns.turn()

    turns.arrived()
    task = asyncio.create_task(background())
    await loop_turns(50)
    assert slices == [0] and turns.waiting == 1  # its first slice, then it waits for the request
    turns.arrived()
    turns.started()
    await loop_turns(50)
    assert slices == [0]  # one request still waits
    turns.started()
    await loop_turns(50)
    assert len(slices) > 10 and turns.waiting == 0
    task.cancel()


async def test_the_loop_reads_its_sockets_between_any_two_background_slices() -> None:
    """Five busy background loops: bytes that reach a socket during one's slice are read before
    the next slice, not after a slice of every one of them twice over (asyncio runs all the
    callbacks ready when a turn of the loop starts before it looks at its sockets again)."""
    turns = Turns(max_wait_s=60.0)
    log: list[str] = []
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    loop = asyncio.get_running_loop()

    def read() -> None:
        log.append("read")
        reader.recv(16)

    loop.add_reader(reader, read)

    async def background(name: str) -> None:
        for i in range(10):
            log.append(f"{name}{i}")
            if name == "a" and i == 3:
                writer.send(b"GET")  # a request's bytes land while this slice runs
            await turns.turn()

    try:
        await asyncio.wait_for(asyncio.gather(*(background(n) for n in "abcde")), 5.0)
    finally:
        loop.remove_reader(reader)
        reader.close()
        writer.close()
    after = log[log.index("a3") + 1 : log.index("read")]
    assert after == [], after
    assert sorted(e for e in log if e != "read") == sorted(f"{n}{i}" for n in "abcde" for i in range(10))


async def test_requests_that_never_start_hold_background_work_back_at_most_max_wait() -> None:
    now = [0.0]
    turns = Turns(max_wait_s=0.02, clock=lambda: now[0])
    turns.arrived()  # its connection is lost before its handler runs: `started` never comes
    now[0] = 0.021
    await asyncio.wait_for(turns.turn(), 5.0)  # past max_wait: at once, without the request
    assert turns.waiting == 0
    # on the real clock: the wait ends by itself
    real = Turns(max_wait_s=0.05)
    real.arrived()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(real.turn(), 5.0)
    assert asyncio.get_running_loop().time() - started >= 0.04 and real.waiting == 0


async def test_slices_take_their_turns_through_the_given_turn() -> None:
    turns = Turns(max_wait_s=60.0)
    slices = Slices(0.0, turns.turn)  # every call is a turn
    turns.arrived()
    waiting = asyncio.create_task(slices.turn())
    await loop_turns(20)
    assert not waiting.done()
    turns.started()
    await asyncio.wait_for(waiting, 5.0)


async def test_the_server_reports_each_request_and_background_slices_run_only_between_them() -> None:
    """A real server (start_http) answering 300 pipelined requests while a background loop takes
    its turns through the context's Turns: no slice runs while a request the server read waits
    for its handler, and slices do run between requests."""
    log: list[str] = []
    ctx = build_context(turns=Recorded(log, max_wait_s=60.0))
    done = asyncio.Event()

    async def background() -> None:
        while not done.is_set():
            log.append("slice")
            await ctx.turns.turn()

    async with serve(ctx) as base:
        task = asyncio.create_task(background())
        statuses = await pipelined_gets(port_of(base), ["/burrow/admin"] * 300, depth=30)
        done.set()
        await asyncio.wait_for(task, 5.0)
    assert statuses == {200: 300}
    assert log.count("arrived") == log.count("started") == 300 and ctx.turns.waiting == 0
    waiting = 0
    slices_between = 0
    for e in log:
        if e == "arrived":
            waiting += 1
        elif e == "started":
            assert waiting > 0, "a handler started that was never reported"
            waiting -= 1
        else:
            assert not waiting, "a background slice ran while a request waited for its handler"
            slices_between += 1
    assert slices_between > 5  # the background loop kept running between the batches of requests


async def requests_logged(counts: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, int], list[str]]:
    """Three GETs, one after another, to a real server whose Turns and request factory log:
    the statuses, and the log. `counts`: whether the connections count the requests they parse."""
    if not counts:
        monkeypatch.setattr(app._ParsedRequests, "counts", staticmethod(lambda handler: False))
    log: list[str] = []
    ctx = build_context(turns=Recorded(log, max_wait_s=60.0))
    runner = await app.start_http(ctx)
    assert runner.server is not None
    build = runner.server.request_factory

    def built(*args: Any) -> web.BaseRequest:
        log.append("built")
        return build(*args)

    runner.server.request_factory = built
    try:
        statuses = await pipelined_gets(app.bound_port(runner), ["/burrow/admin"] * 3, depth=1)
    finally:
        await runner.cleanup()
    return statuses, log


async def test_a_request_is_reported_once_its_bytes_are_read_before_its_request_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reported when parsed, a request has background slices wait for it in the turn of the loop
    between its bytes read and its Request built (aiohttp takes one for each)."""
    statuses, log = await requests_logged(True, monkeypatch)
    assert statuses == {200: 3}
    assert log == ["arrived", "built", "started"] * 3


async def test_where_the_server_does_not_count_parsed_requests_they_are_reported_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    statuses, log = await requests_logged(False, monkeypatch)
    assert statuses == {200: 3}
    assert log == ["built", "arrived", "started"] * 3


async def collect_while_a_request_waits(flush_max_changes: int) -> tuple[bool, int]:
    """Collect a State of 2,005 changed windows (three drain slices) while a request waits for
    its handler and never starts: did the collect finish without waiting for it, and how many
    windows did it take meanwhile?"""
    state = State()
    partitions = persister.DRAIN_SLICE * 2 + 5
    state.apply_many([Commit("c", "g", "t", p, 7, p + 1, NOV22, NOV22) for p in range(partitions)])
    turns = Turns(max_wait_s=60.0)
    store = Store.from_url("postgresql://postgres@127.0.0.1:1/nowhere")  # a collect does not write
    wb = WriteBehind(store=store, state=state, flush_max_changes=flush_max_changes, turn=turns.turn)
    turns.arrived()
    task = asyncio.create_task(persister.collect(wb))
    await loop_turns(50)
    finished = task.done()
    turns.started()
    await asyncio.wait_for(task, 5.0)
    await store.close()
    return finished, len(wb.pending.windows)


async def test_the_persister_waits_for_requests_while_it_keeps_up_and_not_once_it_is_behind() -> None:
    # keeping up: the changes are within KEEPING_UP_FLUSHES flushes' worth, so its slices wait
    finished, taken = await collect_while_a_request_waits(flush_max_changes=20_000)
    assert not finished and taken == persister.DRAIN_SLICE * 2 + 5
    # behind: more than that waits (2,005 changes, 5 x 300), so it takes its turns at once
    assert persister.KEEPING_UP_FLUSHES * 300 < persister.DRAIN_SLICE * 2 + 5
    finished, taken = await collect_while_a_request_waits(flush_max_changes=300)
    assert finished and taken == persister.DRAIN_SLICE * 2 + 5


async def apply_while_a_request_waits(batches: int) -> int:
    """Queue `batches` batches of two apply slices each, then let apply run while a request waits
    for its handler and never starts: how many events has it applied after 50 turns of the loop?"""
    rt = daemon.build_runtime(Settings(), asyncio.Event())
    per = daemon.APPLY_SLICE * 2
    for b in range(batches):
        rt.events.put_nowait([Commit("c", "g", "t", b * per + i, 7, i + 1, NOV22, NOV22) for i in range(per)])
    rt.turns = Turns(max_wait_s=60.0)
    rt.turns.arrived()
    task = asyncio.create_task(daemon.apply_events(rt))
    await loop_turns(50)
    applied = rt.state.partitions_tracked()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return applied


async def test_apply_waits_for_requests_while_it_keeps_up_and_not_with_batches_queued_behind() -> None:
    # one batch: the request goes first, before its first slice
    assert await apply_while_a_request_waits(1) == 0
    # APPLY_BEHIND_BATCHES or more queued behind the one applied: apply has fallen behind and
    # takes its turns at once (the first two whole); with fewer behind, the request goes first again
    behind = daemon.APPLY_BEHIND_BATCHES
    assert await apply_while_a_request_waits(behind + 2) == 2 * 2 * daemon.APPLY_SLICE
    assert await apply_while_a_request_waits(behind) == 0
