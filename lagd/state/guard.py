"""Applying events so that one poison event cannot stop lagd.

The edge checks (lagd.ingest.validate) keep known-bad records out; this is the net behind
them for whatever they miss (a bug in State, a new kind of hostile value). A batch that
raises is applied again event by event: applying an event twice changes nothing (commit
order decides), so the events before the poison one are harmless to repeat. The poison
event is counted (`lagd_ingest_rejected_total{reason="apply_failed"}`), logged at most once
a minute, and skipped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lagd.core.model import Event, IngestCounters
from lagd.runtime import logs
from lagd.state.windows import State

log = logs.get(__name__)

LOG_EVERY_S = 60.0


@dataclass
class PoisonLog:
    """When a poison event was last logged (at most one warning a minute)."""

    last_logged: float | None = None
    skipped: int = 0


def apply_guarded(
    state: State, batch: Sequence[Event], counters: Mapping[str, IngestCounters], poison: PoisonLog
) -> int:
    """Apply `batch`; an event that raises is skipped and counted. Returns how many were skipped."""
    try:
        state.apply_many(batch)
        return 0
    except Exception:
        pass
    skipped = 0
    for event in batch:
        try:
            state.apply(event)
        except Exception as exc:
            skipped += 1
            _skip(event, exc, counters, poison)
    return skipped


def _skip(event: Event, exc: Exception, counters: Mapping[str, IngestCounters], poison: PoisonLog) -> None:
    poison.skipped += 1
    c = counters.get(getattr(event, "cluster", ""))
    if c is not None:
        c.count_rejected("apply_failed")
    now = time.monotonic()
    if poison.last_logged is not None and now - poison.last_logged < LOG_EVERY_S:
        log.debug("event skipped: the state could not apply it", skipped_event=repr(event)[:300], error=repr(exc)[:300])
        return
    poison.last_logged = now
    log.warning(
        "event skipped: the state could not apply it",
        skipped_event=repr(event)[:300],
        error=f"{exc.__class__.__name__}: {str(exc)[:300]}",
        skipped_so_far=poison.skipped,
        hint="lagd keeps running without it; please report this with the log. "
        "Further ones are logged at debug for a minute",
    )
