"""The end-to-end probe's pure core (lagd.evaluate.probe): observations in, per-broker verdicts out."""

from __future__ import annotations

import asyncio

from lagd.core.model import GroupStatus
from lagd.evaluate.probe import (
    NO_LEADER,
    ProbeLimits,
    ProbeLog,
    canary_assignment,
    partition_of_broker,
)
from lagd.http.metrics import probe_series
from lagd.http.page import render_probes
from lagd.ingest.log_end import LED_RECENTLY_MS, Leadership
from lagd.ingest.probe import Probes, decode, encode
from lagd.notify.broker_verdicts import PRODUCER, broker_member, offer_broker_changes, watch_brokers
from lagd.notify.feed import VerdictFeed
from lagd.notify.incidents import GroupChange, IncidentEngine, Rules

LIMITS = ProbeLimits(timeout_ms=2_000, slow_after_ms=500, window_ms=60_000)
LEADERS = {1: (0, 1), 2: (1, 2), 3: (2, 3)}


def healthy(log: ProbeLog, seq: int, broker: int, at: int, ack: int = 10, read: int = 20) -> None:
    log.sent(seq, broker, broker - 1, at)
    log.acked(seq, at + ack)
    log.received(seq, at + read)


def test_nothing_settled_yet_gives_no_verdict_then_ok_with_the_figures() -> None:
    log = ProbeLog(LIMITS)
    log.sent(1, 1, 0, 1_000)
    assert log.judge("c", 1_500, LEADERS) == {}
    log.acked(1, 1_012)
    log.received(1, 1_030)
    v = log.judge("c", 1_500, LEADERS)[1]
    assert (v.status, v.ack_s, v.e2e_s, v.sent, v.failed, v.lost) == ("OK", 0.012, 0.03, 1, 0, 0)
    assert v.last_ack_ms == 1_012 and v.last_read_ms == 1_030 and v.loss_ratio == 0.0


def test_a_probe_without_ack_within_the_timeout_makes_the_broker_not_taking_writes() -> None:
    log = ProbeLog(LIMITS)
    for i, broker in enumerate((1, 2, 3)):
        healthy(log, i + 1, broker, 1_000)
    log.sent(10, 2, 1, 3_000)
    healthy(log, 11, 1, 3_000)
    assert log.judge("c", 4_999, LEADERS)[2].status == "OK"  # not settled yet: the older probe stands
    verdicts = log.judge("c", 5_000, LEADERS)
    assert verdicts[2].status == "NOT_TAKING_WRITES"
    assert verdicts[2].reason.startswith("broker 2 of c not taking writes: no ack within 2 s")
    assert verdicts[1].status == "OK" and verdicts[3].status == "OK"
    # back: the next probe is acknowledged and read
    healthy(log, 12, 2, 6_000)
    assert log.judge("c", 6_100, LEADERS)[2].status == "OK"


def test_a_failed_send_names_its_error_and_a_late_ack_changes_nothing() -> None:
    log = ProbeLog(LIMITS)
    log.sent(1, 1, 0, 1_000)
    log.failed(1, "KafkaTimeoutError: expired")
    log.acked(1, 1_100)
    v = log.judge("c", 1_200, LEADERS)[1]
    assert v.status == "NOT_TAKING_WRITES" and "KafkaTimeoutError: expired" in v.reason and v.failed == 1


def test_a_partition_without_leader_or_led_elsewhere_is_not_taking_writes() -> None:
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000)
    healthy(log, 2, 2, 1_000)
    v = log.judge("c", 1_100, {1: (0, NO_LEADER), 2: (1, 3)})
    assert v[1].status == "NOT_TAKING_WRITES" and "has no leader" in v[1].reason
    assert v[2].status == "NOT_TAKING_WRITES" and "is led by broker 3" in v[2].reason


def test_acked_but_not_read_back_within_the_timeout_is_lost_and_not_serving_reads() -> None:
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000)
    log.sent(2, 1, 0, 2_000)
    log.acked(2, 2_010)
    assert log.judge("c", 3_999, LEADERS)[1].status == "OK"
    # lost, but no later write settled yet: a broker that stopped altogether looks the same so far
    assert log.judge("c", 4_000, LEADERS)[1].status == "OK"
    log.sent(3, 1, 0, 4_000)
    log.acked(3, 4_010)
    v = log.judge("c", 4_020, LEADERS)[1]
    assert (v.status, v.lost, v.sent) == ("NOT_SERVING_READS", 1, 3)
    assert v.loss_ratio == 1 / 3
    # read back later than the timeout: still lost
    log.received(2, 4_500)
    assert log.judge("c", 4_600, LEADERS)[1].lost == 1


def test_a_stopped_broker_is_not_taking_writes_not_serving_reads() -> None:
    log = ProbeLog(LIMITS)
    log.sent(1, 1, 0, 1_000)
    log.acked(1, 1_010)  # acknowledged just before the broker died, never read back
    log.sent(2, 1, 0, 3_000)  # never acknowledged
    assert log.judge("c", 3_500, LEADERS)[1].status == "OK"
    assert log.judge("c", 5_000, LEADERS)[1].status == "NOT_TAKING_WRITES"


def test_slow_acks_or_reads_make_the_broker_slow() -> None:
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000, ack=700, read=800)
    v = log.judge("c", 2_000, LEADERS)[1]
    assert v.status == "SLOW" and "ack 0.70 s" in v.reason and v.ack_max_s == 0.7
    healthy(log, 2, 1, 3_000, ack=10, read=600)
    assert log.judge("c", 4_000, LEADERS)[1].status == "SLOW"
    healthy(log, 3, 1, 5_000)
    assert log.judge("c", 6_000, LEADERS)[1].status == "OK"


def test_read_before_its_ack_counts_as_written() -> None:
    log = ProbeLog(LIMITS)
    log.sent(1, 1, 0, 1_000)
    log.received(1, 1_050)
    assert log.judge("c", 1_100, LEADERS)[1].status == "OK"


def test_memory_is_bounded_by_count_and_window() -> None:
    log = ProbeLog(LIMITS, max_probes=5)
    for seq in range(1, 101):
        healthy(log, seq, 1, seq * 100)
    assert len(log.probes[1]) == 5 and len(log.by_seq) == 5
    log.judge("c", 100 * 100 + LIMITS.window_ms + 1, LEADERS)
    assert len(log.probes[1]) == 0 and not log.by_seq
    log.received(3, 5)  # a probe long forgotten (or of an earlier run): ignored
    assert not log.by_seq


def test_canary_assignment_pins_one_partition_to_each_broker_missing_one() -> None:
    assert canary_assignment([3, 1, 2], {}) == {0: [1], 1: [2], 2: [3]}
    assert canary_assignment([1, 2, 3, 4], {0: [1], 1: [2], 2: [3]}) == {3: [4]}
    assert canary_assignment([1, 2], {0: [1], 1: [2]}) == {}
    assert partition_of_broker({0: [1], 1: [2], 2: [3], 3: [2]}) == {1: 0, 2: 1, 3: 2}


def test_probe_records_name_their_run() -> None:
    value = encode("abc", 42, 1_000)
    assert decode(value, "abc") == 42
    assert decode(value, "other") is None
    assert decode(b"not a probe", "abc") is None
    assert decode(None, "abc") is None


def test_a_failing_broker_is_offered_once_as_an_err_member_with_its_reason_and_opens_an_incident() -> None:
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000)
    healthy(log, 2, 2, 1_000)
    feed = VerdictFeed(producers=(PRODUCER,))
    last: dict[tuple[str, int], str] = {}
    assert offer_broker_changes({"prod": log.judge("prod", 1_100, LEADERS)}, last, feed, 1_100) == 2
    assert {feed.get_nowait().status for _ in range(2)} == {GroupStatus.OK}
    log.sent(3, 2, 1, 2_000)  # never acknowledged
    verdicts = {"prod": log.judge("prod", 4_000, LEADERS)}
    assert offer_broker_changes(verdicts, last, feed, 4_000) == 1
    assert offer_broker_changes(verdicts, last, feed, 4_100) == 0  # no change, nothing offered
    change = feed.get_nowait()
    assert (change.group, change.status, change.kind) == (broker_member("prod", 2), GroupStatus.ERR, "broker")
    engine = IncidentEngine(Rules(severity="ERR"))
    (opened,) = engine.apply(change)
    assert opened.event == "opened" and opened.groups == {"broker:prod/2": "ERR"}
    assert opened.reason.startswith("broker 2 of prod not taking writes: no ack within 2 s")
    assert "broker(s)" in opened.summary and "failing" in opened.summary
    # a broker no longer judged is offered NOTFOUND
    assert offer_broker_changes({"prod": {1: verdicts["prod"][1]}}, last, feed, 5_000) == 1
    assert feed.get_nowait().status == GroupStatus.NOTFOUND


def test_a_failing_broker_carries_the_partitions_it_led_lately_and_a_group_on_them_joins_its_incident() -> None:
    """Leadership moves off a killed broker at the sampler's next metadata refresh, usually
    before the probe judges it: the broker's change still names what it led minutes ago."""
    leadership = Leadership()
    leadership.record("prod", {"orders": {0: 2, 1: 1, 2: 2}, "pay": {0: 3}}, 1_000)
    leadership.record("prod", {"orders": {0: 1, 1: 1, 2: None}, "pay": {0: 3}}, 3_000)  # after the kill
    assert leadership.led_by("prod", 2, 3_500) == (("orders", 0), ("orders", 2))
    assert leadership.led_by("prod", 2, 1_000 + LED_RECENTLY_MS + 1) == ()  # forgotten after a while
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000)
    healthy(log, 2, 2, 1_000)
    feed = VerdictFeed(producers=(PRODUCER,))
    last: dict[tuple[str, int], str] = {}
    offer_broker_changes({"prod": log.judge("prod", 1_100, LEADERS)}, last, feed, 1_100, leadership)
    assert [feed.get_nowait().led for _ in range(2)] == [(), ()]  # healthy: nothing to carry
    log.sent(3, 2, 1, 2_000)  # never acknowledged
    offer_broker_changes({"prod": log.judge("prod", 4_000, LEADERS)}, last, feed, 4_000, leadership)
    change = feed.get_nowait()
    assert change.status == GroupStatus.ERR and change.led == (("orders", 0), ("orders", 2))
    engine = IncidentEngine(Rules(severity="ERR"))
    engine.apply(change)
    part = ("orders", 2, "STOP", "")
    assert engine.apply(GroupChange("prod", "g1", GroupStatus.ERR, 5_000, (part,))) == []  # coalesced
    (joined,) = engine.tick(4_000 + engine.rules.update_interval)
    assert joined.groups == {"broker:prod/2": "ERR", "g1": "ERR"}
    assert joined.summary == "ERR: broker 2 of prod not taking writes: 1 consumer group affected"


def test_metrics_and_the_status_page_show_each_broker() -> None:
    log = ProbeLog(LIMITS)
    healthy(log, 1, 1, 1_000)
    log.sent(2, 2, 1, 1_000)
    probes = Probes(verdicts={"prod": log.judge("prod", 4_000, LEADERS)}, problems={"prod": "x while reading"})
    out: list[str] = []
    probe_series(out, probes)
    text = "".join(out)
    assert 'lagd_probe_broker_status{cluster="prod",broker="1",status="OK"} 1\n' in text
    assert 'lagd_probe_broker_status{cluster="prod",broker="2",status="NOT_TAKING_WRITES"} 1\n' in text
    assert 'lagd_probe_ack_seconds{cluster="prod",broker="1"} 0.01\n' in text
    assert 'lagd_probe_failed{cluster="prod",broker="2"} 1\n' in text
    html = render_probes(probes, lambda s: f"[{s}]")
    assert "[NOT_TAKING_WRITES]" in html and "broker 2 of prod not taking writes" in html and "x while reading" in html
    empty: list[str] = []
    probe_series(empty, Probes())
    assert empty == [] and render_probes(Probes(), str) == ""


async def test_the_feed_waits_for_every_canary_broker_judged_once_before_its_snapshot() -> None:
    """At a restart a broker in an open incident must not be taken for gone: the feed's snapshot
    (replayed into the incident engine, which reports members it lacks NOTFOUND) waits until every
    broker with a canary partition has a verdict, not merely some broker of the cluster."""
    probes = Probes()
    feed = VerdictFeed(producers=(PRODUCER,))
    watcher = asyncio.create_task(watch_brokers(probes, ["prod"], feed, grace_s=60, every_s=0.01))
    try:
        log = ProbeLog(LIMITS)
        healthy(log, 1, 1, 1_000)
        log.sent(2, 2, 1, 1_000)  # the broker that is down: not settled yet
        probes.verdicts["prod"] = log.judge("prod", 1_100, LEADERS)
        for _ in range(100):  # until a pass has offered broker 1 (it checks completion right after)
            if feed.qsize() == 1:
                break
            await asyncio.sleep(0.01)
        assert feed.qsize() == 1 and feed.snapshot("prod") is None
        probes.complete.add("prod")  # what the adapter sets once every canary broker is judged
        probes.verdicts["prod"] = log.judge("prod", 3_500, LEADERS)
        for _ in range(100):
            if feed.snapshot("prod") is not None:
                break
            await asyncio.sleep(0.01)
        snap = feed.snapshot("prod")
        assert snap is not None
        assert {c.group: c.status for c in snap} == {"broker:prod/1": GroupStatus.OK, "broker:prod/2": GroupStatus.ERR}
    finally:
        watcher.cancel()
