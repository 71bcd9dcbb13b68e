"""The resolve estimate of an incident whose group catches up: the verdict watch offers each
bad (or recovering) group's clear time, the incident engine says it ("clears in about 4 min")."""

from __future__ import annotations

import jsonschema

from lagd.core.model import Commit, GroupStatus, LogEndSample
from lagd.notify import schemas
from lagd.notify.incidents import GroupChange, IncidentEngine, Rules
from tests.test_watch import T0, C, Clock, T, drain, healthy_progress, watch_of

RULES = Rules(severity="WARN", correlation_window=120_000, hold_time=300_000, update_interval=30_000)


def test_an_open_incident_says_when_its_group_clears_and_a_resolved_one_does_not() -> None:
    engine = IncidentEngine(RULES)
    bad = ((T, 0, "STOP", "h1"),)
    [opened] = engine.apply(GroupChange(C, "g", GroupStatus.ERR, T0, bad, (T,), ("h1",)))
    assert opened.clears_at is None and "clears in" not in opened.summary
    # back to OK, still working its backlog off: no news until its clear time is known ...
    assert engine.apply(GroupChange(C, "g", GroupStatus.OK, T0 + 60_000)) == []
    # ... which is told at once (the last event is older than the update interval)
    [updated] = engine.apply(GroupChange(C, "g", GroupStatus.OK, T0 + 70_000, clear_at=T0 + 310_000))
    assert updated.event == "updated" and updated.clears_at == T0 + 310_000
    assert updated.summary.endswith("; clears in about 4 min"), updated.summary
    # a moved estimate within the update interval waits for the tick that flushes it
    assert engine.apply(GroupChange(C, "g", GroupStatus.OK, T0 + 80_000, clear_at=T0 + 280_000)) == []
    [moved] = engine.tick(T0 + 100_000)
    assert moved.clears_at == T0 + 280_000 and moved.summary.endswith("clears in about 3 min")
    body = updated.payload()
    assert body["clears_at"] == T0 + 310_000
    schema = schemas.load("incident-event")
    assert schema is not None
    jsonschema.Draft202012Validator(schema).validate(body)
    # the estimate survives a restart of the notifier (stored with the member)
    again = IncidentEngine.load(RULES, engine.dump())
    assert again.dump() == engine.dump()
    [resolved] = engine.tick(T0 + 60_000 + RULES.hold_time)
    assert resolved.event == "resolved" and resolved.clears_at is None and "clears in" not in resolved.summary


def test_no_estimate_while_a_bad_member_does_not_clear() -> None:
    engine = IncidentEngine(RULES)
    engine.apply(GroupChange(C, "a", GroupStatus.WARN, T0, ((T, 0, "WARN", ""),), (T,)))
    engine.apply(GroupChange(C, "b", GroupStatus.WARN, T0 + 1_000, ((T, 1, "WARN", ""),), (T,)))
    engine.apply(GroupChange(C, "a", GroupStatus.WARN, T0 + 2_000, ((T, 0, "WARN", ""),), (T,), clear_at=T0 + 100_000))
    [updated] = engine.tick(T0 + 40_000)
    assert updated.clears_at is None  # b is falling behind: the incident does not clear at a known time
    engine.apply(GroupChange(C, "b", GroupStatus.WARN, T0 + 41_000, ((T, 1, "WARN", ""),), (T,), clear_at=T0 + 200_000))
    [updated] = engine.tick(T0 + 80_000)
    assert updated.clears_at == T0 + 200_000  # the slower of the two
    assert updated.summary.endswith("clears in about 2 min")


def test_the_watch_offers_a_recovering_groups_clear_time_once_its_drain_is_significant() -> None:
    """A consumer stops for 2 min while 1,000 records/s arrive, then reads 1,500 records/s: its
    120,000-record backlog falls 500 records/s and is gone 240 s after it resumed."""
    clock = Clock(T0)
    watch, feed = watch_of(healthy_progress(T0), clock)
    offset, order = 0, 0
    offered: list[tuple[int, GroupStatus, int | None]] = []
    cleared = None
    for t in range(500):
        ms = T0 + t * 1000
        clock.at = ms
        if t % 2 == 0:
            watch.state.apply(LogEndSample(C, T, 0, 1000 * t, ms))
            watch.progress[C].mark_fresh(ms)
        if t < 60 or t >= 180:
            offset = 1000 * t if t < 60 else min(1000 * t, offset + 1500)
            order += 1
            watch.state.apply(Commit(C, "g", T, 0, offset, order, ms, ms))
            if cleared is None and t >= 180 and offset == 1000 * t:
                cleared = ms
        watch.scan(ms)
        offered += [(t, ch.status, ch.clear_at) for ch in drain(feed) if ch.group == "g"]
    assert cleared is not None
    statuses = [(t, s) for t, s, _ in offered]
    assert statuses[:3] == [(0, GroupStatus.OK), (120, GroupStatus.ERR), (180, GroupStatus.OK)]
    estimates = [(t, c) for t, _, c in offered if c is not None]
    assert estimates, offered
    first_t, first = estimates[0]
    assert first_t <= 180 + 90  # within 90 s of resuming (5 commits 15 s apart, offered at most every 30 s)
    assert abs(first - cleared) <= 0.2 * (cleared - (T0 + 180_000)), (first - T0, cleared - T0)
