"""The retention judgement (lagd.evaluate.retention): records lost, at risk, share of retention used."""

from __future__ import annotations

import io
import json
import random
import re
from array import array
from collections import Counter

import pytest
from structlog.testing import capture_logs

from lagd.core.config import Settings
from lagd.core.model import Commit, GroupStatus, LogEndSample, LogStartSample, TopicPolicy
from lagd.core.times import about
from lagd.evaluate.retention import (
    DEFAULT_HORIZON_MS,
    RetentionState,
    is_compacted,
    judge,
    moving,
    pace,
)
from lagd.evaluate.retention_view import (
    LOST_HOLD_MS,
    STATUS_OF,
    OutOfReach,
    group_retention,
    latch,
    note_of,
    retention_reason,
)
from lagd.evaluate.verdicts import Evaluator
from lagd.http import burrow_json, metrics
from lagd.http.burrow_v3 import group_status
from lagd.notify import eventlog
from lagd.notify.incidents import IncidentEngine, Rules
from lagd.notify.watch import group_change
from lagd.replay import parse_trace, replay
from lagd.runtime import compiled
from lagd.state.windows import State
from tests.http_state import build_context

MIN = 60_000
HOUR = 60 * MIN


def test_ok_when_far_ahead_of_the_log_start() -> None:
    r = judge(900, [(0, 800), (MIN, 900)], [(0, 0), (MIN, 0)], [(0, 900), (MIN, 1000)], MIN)
    assert r.state is RetentionState.OK
    assert r.retention_used == pytest.approx(100 / 1000)
    assert r.falls_off_in_ms is None  # the log start does not move


def test_records_lost_counts_and_dates_the_crossing() -> None:
    commits = [(0, 100), (10 * MIN, 100)]  # a stuck consumer at 100
    starts = [(0, 0), (2 * MIN, 50), (4 * MIN, 120), (6 * MIN, 180)]
    ends = [(0, 1000), (6 * MIN, 1600)]
    r = judge(100, commits, starts, ends, 6 * MIN)
    assert r.state is RetentionState.LOST
    assert r.lost == 80
    assert r.lost_since == 4 * MIN and r.since_exact
    assert r.reason == "records lost: 80 records deleted unread since 1970-01-01T00:04:00Z"
    assert r.retention_used == pytest.approx(1500 / 1420)


def test_records_lost_before_the_oldest_sample_says_before() -> None:
    r = judge(10, [(0, 10)], [(5 * MIN, 40), (6 * MIN, 50)], [(6 * MIN, 90)], 6 * MIN)
    assert r.state is RetentionState.LOST and r.lost == 40
    assert not r.since_exact and r.lost_since == 5 * MIN
    assert "since before 1970-01-01T00:05:00Z" in r.reason


def test_lost_since_follows_a_moving_consumer() -> None:
    # The consumer moved from 0 to 300; the log start passed its committed offset of the time
    # only at 3 min (at 2 min it was at 150 while the consumer had 200).
    commits = [(0, 0), (MIN, 100), (2 * MIN, 200), (3 * MIN, 300)]
    starts = [(0, 0), (MIN, 50), (2 * MIN, 150), (3 * MIN, 350), (4 * MIN, 400)]
    r = judge(300, commits, starts, [(4 * MIN, 1000)], 4 * MIN)
    assert r.state is RetentionState.LOST and r.lost == 100
    assert r.lost_since == 3 * MIN and r.since_exact


def test_at_risk_within_the_horizon_says_in_how_long() -> None:
    # Log start advances 10 records/s, the consumer 4/s, gap 3600 records: closes at 6/s, 600 s.
    starts = [(0, 0), (HOUR, 36_000)]
    commits = [(0, 25_200), (HOUR, 39_600)]
    r = judge(39_600, commits, starts, [(0, 40_000), (HOUR, 76_000)], HOUR)
    assert r.state is RetentionState.AT_RISK
    assert r.falls_off_in_ms == pytest.approx(600_000, abs=1)
    assert r.reason == "at risk: falls off the log in about 10 min"
    assert r.advance_per_s == pytest.approx(10) and r.consume_per_s == pytest.approx(4)
    assert r.produce_per_s == pytest.approx(10)


def test_at_risk_counts_the_time_since_the_newest_log_start_sample() -> None:
    starts = [(0, 0), (HOUR, 36_000)]
    commits = [(0, 39_600), (HOUR, 39_600)]  # stuck: gap 3600 at 10/s = 360 s after the sample
    r = judge(39_600, commits, starts, [(HOUR, 80_000)], HOUR + 60_000)
    assert r.falls_off_in_ms == pytest.approx(300_000, abs=1)


def test_beyond_the_horizon_is_ok_with_its_prediction() -> None:
    starts = [(0, 0), (HOUR, 3600)]  # 1 record/s
    r = judge(3600 + 5 * 3600, [(0, 3600 + 5 * 3600)], starts, [(HOUR, 40_000)], HOUR)
    assert r.state is RetentionState.OK
    assert r.falls_off_in_ms == 5 * HOUR > DEFAULT_HORIZON_MS
    r2 = judge(3600 + 5 * 3600, [(0, 3600 + 5 * 3600)], starts, [(HOUR, 40_000)], HOUR, horizon_ms=6 * HOUR)
    assert r2.state is RetentionState.AT_RISK


def test_a_consumer_faster_than_retention_is_never_at_risk() -> None:
    starts = [(0, 0), (HOUR, 3600)]
    commits = [(0, 100), (HOUR, 3700 + 7200)]
    r = judge(3700 + 7200, commits, starts, [(HOUR, 20_000)], HOUR)
    assert r.state is RetentionState.OK and r.falls_off_in_ms is None


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete, compact", "COMPACT"])
def test_compacted_topics_are_not_judged(policy: str) -> None:
    assert is_compacted(policy)
    r = judge(0, [(0, 0)], [(0, 500)], [(0, 900)], 0, compacted=is_compacted(policy))
    assert r.state is RetentionState.COMPACTED and r.lost == 0
    assert "not comparable" in r.reason and r.retention_used is None


def test_delete_policy_is_not_compacted() -> None:
    assert not is_compacted("delete") and not is_compacted(None) and not is_compacted("")


def test_unknown_without_samples() -> None:
    assert judge(5, [(0, 5)], [], [(0, 9)], 0).state is RetentionState.UNKNOWN
    assert judge(None, [], [(0, 0)], [(0, 9)], 0).state is RetentionState.UNKNOWN


def test_empty_log_and_caught_up_consumer() -> None:
    r = judge(50, [(0, 50)], [(0, 50)], [(0, 50)], 0)
    assert r.state is RetentionState.OK and r.retention_used == 0.0


def test_pace_and_words() -> None:
    assert pace([(0, 0)]) is None
    assert pace([(0, 0), (0, 10)]) is None
    assert pace([(0, 100), (1000, 50)]) == 0.0  # a recreated log never reads as negative
    assert pace([(0, 0), (2000, 10)]) == pytest.approx(0.005)
    assert about(40) == "under a minute"
    assert about(12 * MIN / 1000) == "about 12 min"
    assert about(3.5 * HOUR / 1000) == "about 3 h 30 min"
    assert about(50 * HOUR / 1000) == "about 2.1 d"


# --- composed with the window verdict (Evaluator) ----------------------------------------


def _healthy(state: State, start_at: list[int], sampled: bool = True, behind: int = 0) -> None:
    """A consumer the window rules find OK: it commits every 10 s for 10 min, caught up with a
    log end moving at 1 record/s (every other commit, from the first, `behind` records behind
    it); the log start stands at `start_at[k]` at the k-th minute."""
    for k in range(61):
        ts = k * 10_000
        end = 10_000 + k * 10
        state.apply(LogEndSample("k", "t", 0, end, ts))
        state.apply(Commit("k", "g", "t", 0, end - (behind if k % 2 == 0 else 0), k, ts, ts))
        if sampled and k % 6 == 0:
            state.apply(LogStartSample("k", "t", 0, start_at[k // 6], ts))


def test_records_lost_make_an_otherwise_ok_group_err_with_the_count_and_the_time() -> None:
    # The log start jumps past the consumer at 8 min (DeleteRecords, or a burst of retention).
    starts = [0] * 8 + [10_250, 10_280, 10_300]
    alone = State()
    _healthy(alone, starts, sampled=False, behind=500)
    assert Evaluator(alone, cache_ttl_ms=0).group("k", "g", 10 * MIN).status is GroupStatus.OK
    state = State()
    _healthy(state, starts, behind=500)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    v = evaluator.group("k", "g", 10 * MIN)
    assert v.status is GroupStatus.ERR
    [note] = v.retention
    # committed 10,100 at 10 min, log start 10,300: 200 lost; the start passed the committed
    # offset of its time (9,980) at 8 min
    assert (note.state, note.lost, note.lost_since) == (RetentionState.LOST, 200, 8 * MIN)
    assert note.retention_used == pytest.approx(500 / 300)  # lag 500 of the 300 records retained
    assert retention_reason(v.retention) == "t/0 records lost: 200 records deleted unread since 1970-01-01T00:08:00Z"
    snap = evaluator.snapshot("k", "g", 10 * MIN)
    assert snap.status is GroupStatus.ERR and snap.retention == v.retention


def test_at_risk_makes_an_otherwise_ok_group_warn_and_compaction_takes_it_back() -> None:
    # The log start advances 10 records/s (60 s apart: 600), the consumer 1/s: from 6,000 at
    # 10 min against the consumer's 10,600, 4,600 records close at 9/s: 511 s.
    starts = [600 * k for k in range(11)]
    state = State()
    _healthy(state, starts)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    v = evaluator.group("k", "g", 10 * MIN)
    assert v.status is GroupStatus.WARN
    assert [n.reason for n in v.retention] == ["at risk: falls off the log in about 9 min"]
    assert v.retention[0].falls_off_in_ms == pytest.approx(4_600 / 9 * 1000, abs=1)
    evaluator.retention_horizon_ms["k"] = 4 * MIN  # held at risk until twice the horizon: 8 min < 8.5
    v = evaluator.group("k", "g", 10 * MIN)
    assert v.status is GroupStatus.OK and v.retention[0].state is RetentionState.OK
    evaluator.retention_horizon_ms.clear()
    state.apply(TopicPolicy("k", "t", "compact"))
    v = evaluator.group("k", "g", 10 * MIN)
    assert v.status is GroupStatus.OK and v.retention[0].state is RetentionState.COMPACTED


def test_burrow_body_gains_retention_fields_and_status_lists_the_lost_partition() -> None:
    state = State()
    _healthy(state, [0] * 8 + [10_250, 10_280, 10_300], behind=500)
    v = Evaluator(state, cache_ttl_ms=0).group("k", "g", 10 * MIN)
    for only_bad in (False, True):
        text = compiled.pick(burrow_json).group_status_json(v, only_bad)
        assert json.loads(text) == group_status(v, only_bad)
        assert text == json.dumps(group_status(v, only_bad))
    body = group_status(v, True)
    [part] = body["partitions"]  # its window is OK: listed for its records lost
    assert part["status"] == "OK" and body["status"] == "ERR"
    assert part["records_lost"] == 200 and part["retention"] == "lost"
    assert part["retention_reason"].startswith("records lost: 200 records deleted unread since")
    assert part["retention_used"] == pytest.approx(500 / 300)
    assert set(body["partitions"][0]) - set(body["maxlag"]) == set()  # maxlag carries them too


def test_metrics_say_records_lost_and_the_share_of_retention_used() -> None:
    state = State()
    _healthy(state, [0] * 8 + [10_250, 10_280, 10_300], behind=500)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    out: list[str] = []
    for _ in metrics.render_steps(state, evaluator, build_context().health, 10 * MIN, "partition", out):
        pass
    text = "".join(out)
    group = 'cluster="k",consumer_group="g"'
    part = f'{group},topic="t",partition="0"'
    assert f"lagd_consumer_records_lost{{{group}}} 200\n" in text
    assert f"lagd_consumer_partition_records_lost{{{part}}} 200\n" in text
    used = re.search(rf"lagd_consumer_partition_retention_used\{{{re.escape(part)}\}} (\S+)\n", text)
    assert used is not None and float(used.group(1)) == pytest.approx(500 / 300)
    assert "burrow_kafka_consumer_status{" + group + "} 3\n" in text  # ERR


def test_the_reason_reaches_the_incident_and_the_status_line() -> None:
    state = State()
    _healthy(state, [0] * 8 + [10_250, 10_280, 10_300], behind=500)
    snap = Evaluator(state, cache_ttl_ms=0).snapshot("k", "g", 10 * MIN)
    change = group_change(snap, {}, 10 * MIN)
    assert change.status is GroupStatus.ERR
    assert change.reason == "t/0 records lost: 200 records deleted unread since 1970-01-01T00:08:00Z"
    engine = IncidentEngine(Rules(severity="WARN", correlation_window=120_000, hold_time=300_000))
    [opened] = engine.apply(change)
    assert opened.event == "opened" and opened.reason == f"group g: {change.reason}"
    assert change.reason in opened.summary
    with capture_logs() as logs:
        eventlog.group_status_changed(
            eventlog.LineBudget(), "k", "g", None, snap.status, [], 10 * MIN, True, change.reason
        )
    assert logs[0]["reason"] == change.reason  # the window finds every partition OK: not said beside it


def test_a_log_start_that_has_just_begun_to_move_is_paced_from_its_first_step() -> None:
    # Retention reached the topic only at 10 min: the 10 min it stood still are no pace.
    starts = [(0, 0), (5 * MIN, 0), (10 * MIN, 0), (11 * MIN, 600)]
    assert moving(starts) == starts[2:]
    r = judge(1200, [(10 * MIN, 900), (11 * MIN, 1200)], starts, [(11 * MIN, 3000)], 11 * MIN)
    assert r.advance_per_s == pytest.approx(10) and r.state is RetentionState.AT_RISK
    assert r.falls_off_in_ms == pytest.approx(600 / 5 * 1000, abs=1)


def test_replay_reads_log_start_records_and_warns_before_the_loss() -> None:
    """A trace with log-start samples, both as `log_start` lines and as the optional field of
    `log_end` lines: a consumer 1 record/s, retention eating 10 records/s from minute 5."""
    lines: list[str] = []
    truth_lost_at: int | None = None
    committed = 0  # the newest commit when each sample is taken: the one of the round before
    for k in range(0, 181):
        ts = k * 10_000
        end = 10_000 + k * 10
        start = min(end, max(0, (ts - 5 * MIN) // 100))
        if truth_lost_at is None and start > committed > 0:
            truth_lost_at = ts
        committed = end  # caught up at each commit, 1 record/s
        if k % 2:
            lines.append(json.dumps({"ts": ts, "type": "log_end", "cluster": "c", "topic": "t", "partition": 0,
                                     "offset": end, "log_start": start}))  # fmt: skip
        else:
            lines.append(json.dumps({"ts": ts, "type": "log_end", "cluster": "c", "topic": "t", "partition": 0,
                                     "offset": end}))  # fmt: skip
            lines.append(json.dumps({"ts": ts, "type": "log_start", "cluster": "c", "topic": "t", "partition": 0,
                                     "offset": start}))  # fmt: skip
        lines.append(json.dumps({"ts": ts + 1, "type": "commit", "cluster": "c", "group": "g", "topic": "t",
                                 "partition": 0, "offset": committed}))  # fmt: skip
    out = io.StringIO()
    replay(parse_trace([("trace", lines)]), Settings(), 10_000, out)
    changes = [json.loads(line) for line in out.getvalue().splitlines()]
    judged = [(c["ts"], c["status"], [r["retention"] for r in c.get("retention", [])]) for c in changes]
    at_risk = next(ts for ts, status, r in judged if r == ["at_risk"])
    lost = next(ts for ts, status, r in judged if r == ["lost"])
    assert truth_lost_at is not None
    assert at_risk < lost and lost - at_risk >= 10 * MIN  # warned well ahead
    assert lost == truth_lost_at  # raised at the tick of the first sample past the committed offset
    line = next(c for c in changes if c["ts"] == lost)
    assert line["status"] == "ERR"
    assert line["retention"][0]["reason"].startswith("records lost: ")


def test_records_lost_stay_said_after_the_consumer_jumps_past_the_log_start() -> None:
    lost = note_of("t", 0, judge(100, [(0, 100)], [(0, 0), (MIN, 180)], [(MIN, 1000)], MIN))
    ok = note_of("t", 0, judge(200, [(0, 100), (2 * MIN, 200)], [(0, 0), (2 * MIN, 180)], [(2 * MIN, 1000)], 2 * MIN))
    assert lost.state is RetentionState.LOST and ok.state is not RetentionState.LOST
    notes, latched = latch((lost,), {}, MIN)
    assert notes == (lost,) and latched == {("t", 0): (lost, MIN)}
    notes, latched = latch((ok,), latched, 2 * MIN)  # reset to past the log start: still lost
    assert notes == (lost,) and latched == {("t", 0): (lost, MIN)}
    notes, latched = latch((ok,), latched, MIN + LOST_HOLD_MS)  # the hold has passed
    assert notes == (ok,) and latched == {}


def _random_state(rng: random.Random, now: int) -> tuple[State, dict[str, dict[int, array[int]]]]:
    """One group on two topics of 40 partitions: log starts that stand, step once or step often,
    consumers near, far from or below their log start, some topics compacted."""
    state = State()
    for t in range(2):
        topic = f"t{t}"
        if rng.random() < 0.2:
            state.apply(TopicPolicy("c", topic, "compact"))
        for p in range(40):
            rate = rng.choice([0.0, 0.5, 5.0, 50.0])  # records/s produced (and deleted once full)
            retained = rng.choice([100, 5_000, 200_000, 10_000_000])
            segment = rng.choice([1, 100, 10_000])
            base = 20_000_000
            for i in range(20):
                at = now - 600_000 + 30_000 * i
                end = base + int(rate * (at - now + 600_000) / 1000)
                state.apply(LogEndSample("c", topic, p, end, at))
                start = max(0, (end - retained) // segment * segment)
                state.apply(LogStartSample("c", topic, p, start, at))
            end_now = base + int(rate * 600)
            behind = rng.choice([0, 50, retained // 2, retained - 10, retained + 500])
            speed = rng.choice([0.0, 0.5, 1.0, 1.5])
            for i in range(8):
                at = now - 8 * 15_000 + 15_000 * i
                offset = max(0, end_now - behind - int(rate * speed * (8 - i) * 15))
                state.apply(Commit("c", "g", topic, p, offset, t * 1000 + p * 10 + i, at, at))
    return state, state.group_windows("c", "g") or {}


@pytest.mark.parametrize("seed", range(40))
def test_partitions_out_of_reach_get_the_note_judging_them_would_give(seed: int) -> None:
    """OutOfReach lets the evaluator skip judging partitions far from their log start; the
    notes must be the ones judging every partition gives (the watch's subset: the lost and at
    risk ones, exactly)."""
    rng = random.Random(seed)
    now = 1_700_000_000_000
    state, windows = _random_state(rng, now)
    horizon = rng.choice([DEFAULT_HORIZON_MS, 60_000, 3_600_000])
    held = {("t0", p) for p in range(0, 40, 7)}
    latched = {("t1", p) for p in range(0, 40, 9)}
    judged = group_retention(state, "c", windows, now, horizon, held)
    reach = OutOfReach()
    for later in (0, 29_000):  # the same reach serves until valid_ms has passed
        assert group_retention(state, "c", windows, now + later, horizon, held, reach, latched) == group_retention(
            state, "c", windows, now + later, horizon, held
        )
    assert group_retention(state, "c", windows, now, horizon, held, reach, latched) == judged
    notable = group_retention(state, "c", windows, now, horizon, held, OutOfReach(), latched, notable_only=True)
    assert [n for n in notable if n.state in STATUS_OF] == [n for n in judged if n.state in STATUS_OF]


def test_the_random_states_hold_lost_at_risk_and_ok_partitions_near_their_log_start() -> None:
    """The draws above exercise every branch: lost, at risk, and OK partitions judged (near
    their log start, with a fall-off time) beside those out of reach."""
    now = 1_700_000_000_000
    seen: Counter[str] = Counter()
    for seed in range(40):
        state, windows = _random_state(random.Random(seed), now)
        for n in group_retention(state, "c", windows, now, DEFAULT_HORIZON_MS):
            seen[n.state] += 1
            seen["ok, near"] += n.state is RetentionState.OK and n.falls_off_in_ms is not None
    assert all(seen[k] > 0 for k in ("lost", "at_risk", "ok", "compacted", "ok, near")), seen
