"""The event loop's long steps, each timed in wall time and in the loop thread's CPU time.

A stall the probe sees is either a step that computes for long (CPU close to wall) or a loop
thread waiting for a core, the GIL or a blocking call (CPU far below wall). py-spy shows where CPU goes, not which
steps hold the loop; this shows those steps, with the task that ran and where it suspended after
(the step ran from its previous suspension to that point). Used by bench_http --slow-steps.
It wraps `asyncio.events.Handle._run` for the bench process (the daemon runs in it) while installed.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Step:
    wall_ms: float
    cpu_ms: float
    what: str  # the task and where it suspended after the step, or the callback
    began: str = ""  # where the task was suspended before the step (it resumed there)


def suspended_at(coro: Any, depth: int = 3) -> str:
    """Where a coroutine chain waits now: its innermost `depth` frames as name:line."""
    frames: list[str] = []
    while coro is not None and len(frames) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return ">".join(frames[-depth:]) if frames else "done"


def describe(handle: asyncio.Handle) -> str:
    """The task a handle steps (its coroutine and where it suspended after), else the callback."""
    task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        return f"{getattr(coro, '__qualname__', '?')} [{suspended_at(coro)}]"
    return repr(handle)[:120]


def resumed_at(handle: asyncio.Handle) -> str:
    """Where the task a handle steps is suspended now, so where the step resumes it ("" for a
    plain callback): with `describe` after the step, the span of code the step ran."""
    task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
    return suspended_at(task.get_coro(), depth=4) if isinstance(task, asyncio.Task) else ""


@dataclass
class StepTimer:
    """Records every step longer than `threshold_s` while `measuring()` says so (see the module doc)."""

    measuring: Callable[[], bool]
    threshold_s: float = 0.010
    steps: list[Step] = field(default_factory=list)
    _original: Callable[[asyncio.Handle], None] | None = None

    def install(self) -> None:
        original = self._original = asyncio.events.Handle._run
        timer = self

        def _run(handle: asyncio.Handle) -> None:
            began = resumed_at(handle) if timer.measuring() else ""
            wall, cpu = time.perf_counter(), time.thread_time()
            original(handle)
            took = time.perf_counter() - wall
            if took > timer.threshold_s and timer.measuring():
                timer.steps.append(Step(took * 1000, (time.thread_time() - cpu) * 1000, describe(handle), began))

        asyncio.events.Handle._run = _run  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._original is not None:
            asyncio.events.Handle._run = self._original  # type: ignore[method-assign,assignment]
            self._original = None

    def report(self, n: int = 12) -> list[str]:
        """The `n` longest steps by wall time, then how many there were in all."""
        longest = sorted(self.steps, key=lambda s: -s.wall_ms)[:n]
        lines = [
            f"  wall {s.wall_ms:6.1f} ms, cpu {s.cpu_ms:6.1f} ms  {s.what}" + (f" from [{s.began}]" if s.began else "")
            for s in longest
        ]
        computing = sum(1 for s in self.steps if s.cpu_ms >= 0.8 * s.wall_ms)
        lines.append(
            f"  {len(self.steps)} steps over {self.threshold_s * 1000:.0f} ms, {computing} of them computing "
            "(CPU at least 80% of wall: the rest waited for a core, the GIL or a blocking call)"
        )
        return lines
