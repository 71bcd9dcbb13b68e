"""The garbage collector on the loop's schedule (lagd.runtime.collector): which generation when, and
that cyclic garbage is collected by the pacer alone."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from lagd.runtime import collector
from lagd.runtime.turns import Turns


def test_tune_makes_young_collections_rarer_and_leaves_full_ones_to_the_pacer() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        collector.tune()
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 10, collector.OLD_THRESHOLD)
        gc.set_threshold(700, 50, 500)  # an operator's own tuning of the middle generation is kept
        collector.tune()
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 50, collector.OLD_THRESHOLD)
    finally:
        gc.set_threshold(*before)


def test_after_a_freeze_the_pacers_middle_collections_bring_no_automatic_full_one() -> None:
    """With the heap frozen (lagd.daemon.freeze_when_caught_up) and collected whole once since
    (the pacer's full pass: the collector then weighs survivors against the unfrozen heap
    alone), thirty seconds of the pacer's middle collection while objects survive and others
    come and go: Python's own thresholds start a full collection every eleven or so; tuned,
    none (the pacer runs them, every FULL_EVERY_S)."""
    before = gc.get_threshold()

    def full_collections() -> int:
        fulls = 0

        def hook(phase: str, info: dict[str, Any]) -> None:
            nonlocal fulls
            fulls += phase == "start" and info["generation"] == 2

        gc.callbacks.append(hook)
        kept: list[Any] = []
        try:
            for _ in range(30):
                kept.append([[j] for j in range(20_000)])  # middle-aged objects, as verdicts are
                gc.collect(1)  # the pacer's middle collection, once a second
                garbage = [[j] for j in range(30_000)]  # enough for automatic young collections
                del garbage
        finally:
            gc.callbacks.remove(hook)
            gc.unfreeze()
        return fulls

    try:
        gc.set_threshold(collector.YOUNG_THRESHOLD, 10, 10)
        gc.freeze()
        gc.collect()
        assert full_collections() >= 2  # Python's own old-generation threshold
        collector.tune()
        gc.freeze()
        gc.collect()
        assert full_collections() == 0
    finally:
        gc.set_threshold(*before)


def test_the_due_generation() -> None:
    assert collector.due_generation(0.5, middle_at=1.0, full_at=300.0) == 0
    assert collector.due_generation(1.0, middle_at=1.0, full_at=300.0) == 1
    assert collector.due_generation(300.0, middle_at=301.0, full_at=300.0) == 2


class Collections:
    """The generations collected while a test runs (a gc.callbacks hook)."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.more = asyncio.Event()

    def note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            self.seen.append(info["generation"])
            self.more.set()

    async def wait_for(self, n: int) -> list[int]:
        while len(self.seen) < n:
            self.more.clear()
            await asyncio.wait_for(self.more.wait(), 10)
        return self.seen


@pytest.fixture
def collections() -> Iterator[Collections]:
    """The collections while the test runs, the automatic collector off."""
    seen = Collections()
    note = seen.note

    enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        if enabled:
            gc.enable()


async def test_pace_collects_young_then_middle_then_all_on_its_clock(collections: Collections) -> None:
    ticks = itertools.count(0.0, 0.5)  # the clock at start, then at each wake-up: 0.5 s later each time

    def clock() -> float:
        return next(ticks)

    task = asyncio.create_task(collector.pace(0.0, middle_every_s=1.0, full_every_s=3.0, clock=clock))
    seen = await collections.wait_for(7)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # 0.5 young; 1.0 middle (next at 2.0); 1.5 young; 2.0 middle; 2.5 young; 3.0 all; 3.5 young
    assert seen[:7] == [0, 1, 0, 1, 0, 2, 0]


async def test_pace_frees_cyclic_garbage_with_the_automatic_collector_off(collections: Collections) -> None:
    class Node:
        other: Any = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None  # reference counting alone never frees a cycle
    task = asyncio.create_task(collector.pace(0.001))
    seen = await collections.wait_for(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone() is None and seen[0] == 0


async def test_pace_lets_a_waiting_request_go_before_it_collects(collections: Collections) -> None:
    turns = Turns(max_wait_s=60.0)
    turns.arrived()  # a request parsed, its handler not started
    task = asyncio.create_task(collector.pace(0.0, turn=turns.turn))
    for _ in range(50):
        await asyncio.sleep(0)
    assert collections.seen == []  # it waits for the request's handler before collecting
    turns.started()
    seen = await collections.wait_for(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[0] == 0
