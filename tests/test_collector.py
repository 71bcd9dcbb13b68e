"""The garbage collector on the loop's schedule (lagd.collector): which generation when, and
that cyclic garbage is collected by the pacer alone."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from lagd import collector


def test_tune_makes_young_collections_rarer_and_keeps_the_older_cadence() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        collector.tune()
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 10, 10)
        gc.set_threshold(700, 50, 500)  # an operator's own tuning of the older generations is kept
        collector.tune()
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 50, 500)
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
