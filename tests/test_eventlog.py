"""The incident and group-status lines of lagd's log (lagd.notify.eventlog): their fields, and
the budget that keeps a whole cluster flipping at once from burying the log. The daemon's own
JSON lines are checked end to end in tests/test_notify_without_mqtt.py."""

from __future__ import annotations

from structlog.testing import capture_logs

from lagd.core.model import GroupStatus
from lagd.evaluate.snapshot import group_reason
from lagd.notify import eventlog
from lagd.notify.incidents import GroupChange, IncidentEngine, Rules

T0 = 1_700_000_000_000


def test_the_budget_lets_a_burst_through_per_cluster_and_counts_the_rest() -> None:
    budget = eventlog.LineBudget(burst=3, every_ms=1000)
    assert [budget.allow("a", T0) for _ in range(10)] == [True] * 3 + [False] * 7
    assert budget.allow("b", T0)  # another cluster has a budget of its own
    assert budget.overdue(T0 + 999) == []
    assert budget.overdue(T0 + 1000) == [("a", 7)]  # b logged all it had: nothing to say
    assert budget.overdue(T0 + 5000) == []  # said once
    assert budget.allow("a", T0 + 5000)  # a new window


def test_a_whole_cluster_flipping_is_twenty_lines_and_one_count() -> None:
    budget = eventlog.LineBudget()
    with capture_logs() as lines:
        for i in range(1000):
            eventlog.group_status_changed(budget, "prod", f"g{i}", GroupStatus.OK, GroupStatus.ERR, ("STOP",), T0)
        eventlog.held_back(budget, T0 + 30_000)  # the window is not over: nothing yet
        eventlog.held_back(budget, T0 + 60_000)
    changed = [ln for ln in lines if ln["event"] == "group status changed"]
    assert len(changed) == eventlog.GROUP_LINES_BURST == 20
    assert changed[0] == {
        "event": "group status changed",
        "log_level": "info",
        "cluster": "prod",
        "group": "g0",
        "status": "ERR",
        "previous": "OK",
        "reason": "1 partition STOP",
    }
    held = [ln for ln in lines if ln["event"].startswith("group status changes not logged")]
    assert [(h["cluster"], h["not_logged"]) for h in held] == [("prod", 980)]


def test_a_group_first_seen_ok_is_no_change_and_a_reason_says_which_partitions() -> None:
    budget = eventlog.LineBudget()
    with capture_logs() as lines:
        eventlog.group_status_changed(budget, "c", "new", None, GroupStatus.OK, (), T0)
    assert lines == []
    assert group_reason(GroupStatus.ERR, ("WARN", "STOP", "STOP")) == "2 partitions STOP, 1 partition WARN"
    assert group_reason(GroupStatus.OK, ()) == "every partition OK"
    assert group_reason(GroupStatus.NOTFOUND, ()) == "group gone (deleted or expired)"


def test_every_incident_event_is_one_line_with_its_ids_status_and_reason() -> None:
    engine = IncidentEngine(Rules(severity="WARN", correlation_window=60_000, hold_time=1000, update_interval=0))
    evs = engine.apply(GroupChange("prod", "billing", GroupStatus.WARN, T0, topics=("orders",)))
    evs += engine.apply(GroupChange("prod", "orders-x", GroupStatus.ERR, T0 + 1000, topics=("orders",)))
    evs += engine.apply(GroupChange("prod", "billing", GroupStatus.OK, T0 + 2000))
    evs += engine.apply(GroupChange("prod", "orders-x", GroupStatus.OK, T0 + 3000))
    evs += engine.tick(T0 + 10_000)
    with capture_logs() as lines:
        for ev in evs:
            eventlog.incident_event(ev)
    assert [ln["event"] for ln in lines] == [f"incident {ev.event}" for ev in evs]
    assert lines[0]["event"] == "incident opened" and lines[-1]["event"] == "incident resolved"
    for ln, ev in zip(lines, evs, strict=True):
        assert ln["log_level"] == "info" and ln["cluster"] == "prod"
        assert (ln["incident_id"], ln["event_id"], ln["status"], ln["reason"]) == (
            ev.incident_id,
            ev.event_id,
            ev.severity,
            ev.reason,
        )
    assert lines[0]["group"] == "billing" and lines[1]["groups"] == {"billing": "WARN", "orders-x": "ERR"}
    assert lines[-1]["peak_status"] == "ERR"
