"""The timestamp of the first unconsumed record: where lag in seconds is only a bound, a record's
timestamp becomes the partition's oldest log-end observation and the figure is exact."""

from __future__ import annotations

import pytest

from lagd.core.model import Commit, IngestCounters, LogEndSample, RecordTimestamp
from lagd.core.ruleset import BURROW, LAGD, RuleSet
from lagd.evaluate import Evaluator
from lagd.evaluate.lagtime import (
    BOUND,
    LOG_END_SAMPLES,
    RECORD_TIMESTAMP,
    lag_seconds_from,
    reached_in,
    record_clock,
)
from lagd.ingest.record_ts import FUTURE_TOLERANCE_MS, LOG_APPEND_TIME, RecordFetcher, marked_for, valid_records
from lagd.state.windows import COARSE_MAX, COARSE_STEP_MS, LogEnd, State
from tests.compiled_code import printed_without_extensions

C, G, T = "c", "g", "t"
NOW = 1_000_000


def restarted(rules: RuleSet = LAGD, committed: int = 400) -> State:
    """lagd's samples begin at 900 s with the log end at 1000 (the producer went idle before):
    the group committed `committed` at 100 s, so its lag in seconds is only a bound."""
    s = State(intervals=3, rules=rules)
    for i in range(3):
        s.apply(LogEndSample(C, T, 0, 1000, 900_000 + 10_000 * i))
    for i in range(3):
        at = 100_000 + 1000 * i
        s.apply(Commit(C, G, T, 0, committed, i, at, at + 5))
    return s


def test_a_bound_is_a_candidate_and_the_record_makes_it_exact() -> None:
    s = restarted()
    le = s.log_end_of(C, T, 0)
    assert le is not None
    assert reached_in(le, 400) == (900_000, True)  # before every sample: at least 100 s
    assert s.record_candidates(C, 50) == [(T, 0, 400)]
    assert s.record_candidates(C, 0) == []
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
    assert reached_in(le, 400) == (900_000, True)  # the history before it is not changed in place
    le = s.log_end_of(C, T, 0)
    assert le is not None
    assert reached_in(le, 400) == (60_000, False)
    assert lag_seconds_from(le, 400, 600, False) == RECORD_TIMESTAMP
    assert record_clock(le) == "LogAppendTime"
    assert s.record_candidates(C, 50) == []  # answered: not asked again
    # between the record and the oldest sample: interpolated as between any two samples
    assert reached_in(le, 700) == (60_000 + (900_000 - 60_000) * 300 / 600, False)
    assert lag_seconds_from(le, 700, 300, False) == LOG_END_SAMPLES
    # the store keeps it with the other samples, oldest first, and the mark that it is a record's
    assert s.drain_changes().log_end[(C, T, 0)] == (
        [400, 1000, 1000, 1000],
        [60_000, 900_000, 910_000, 920_000],
        [400, 400, 60_000, 0],
    )


def test_a_worker_keeps_a_record_of_another_workers_topic_without_storing_it() -> None:
    """Workers: the record of a topic another worker samples makes the figure exact here, but the
    stored samples of that topic are its sampler's, so it is not written (it would overwrite them)."""
    read = [RecordTimestamp(C, T, 0, 400, 400, 60_000), RecordTimestamp(C, "mine", 0, 7, 7, 50_000)]
    assert marked_for(read, None) == read  # one process samples every topic
    marked = marked_for(read, lambda topic: topic == "mine")
    assert [(r.topic, r.relayed) for r in marked] == [(T, True), ("mine", False)]
    s = restarted()
    s.drain_changes()
    s.apply(marked[0])
    le = s.log_end_of(C, T, 0)
    assert le is not None and reached_in(le, 400) == (60_000, False)
    assert lag_seconds_from(le, 400, 600, False) == RECORD_TIMESTAMP
    assert s.record_candidates(C, 50) == []
    assert (C, T, 0) not in s.drain_changes().log_end


@pytest.mark.parametrize("rules", [LAGD, BURROW], ids=["lagd", "burrow"])
def test_the_verdict_reads_the_record(rules: RuleSet) -> None:
    s = restarted(rules)
    before = Evaluator(s).group(C, G, NOW).partitions[0]
    assert (before.lag_seconds, before.lag_seconds_estimated) == ((NOW - 900_000) / 1000, True)
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
    after = Evaluator(s).group(C, G, NOW).partitions[0]
    assert (after.current_lag, after.lag_seconds, after.lag_seconds_estimated) == (600, (NOW - 60_000) / 1000, False)
    assert "at least" not in after.reason


def test_a_cached_verdict_sees_the_record() -> None:
    s = restarted()
    ev = Evaluator(s)
    assert ev.group(C, G, NOW).partitions[0].lag_seconds_estimated
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
    assert ev.group(C, G, NOW).partitions[0].lag_seconds == (NOW - 60_000) / 1000


def test_a_record_above_the_committed_offset_is_the_first_unconsumed() -> None:
    """Compaction or transaction markers: no record between 400 and 450."""
    s = restarted()
    s.apply(RecordTimestamp(C, T, 0, 400, 450, 70_000, log_append_time=False))
    le = s.log_end_of(C, T, 0)
    assert le is not None and record_clock(le) == "CreateTime"
    assert reached_in(le, 400) == (70_000, False)
    assert reached_in(le, 450) == (70_000, False)
    assert reached_in(le, 399) == (70_000, True)  # below what was read for: records may lie between
    assert lag_seconds_from(le, 399, 601, True) == BOUND


def test_what_is_not_older_than_every_sample_is_refused() -> None:
    s = restarted()
    le = s.log_end_of(C, T, 0)
    assert le is not None
    s.apply(RecordTimestamp(C, T, 0, 400, 1000, 60_000))  # at the oldest sample's offset: not older
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 950_000))  # stamped after the oldest sample (a producer clock)
    s.apply(RecordTimestamp("other", T, 0, 400, 400, 60_000))  # no samples there
    assert (list(le.coarse_offsets), le.record_from) == ([], -1)
    with pytest.raises(ValueError, match="below the committed offset"):
        s.apply(RecordTimestamp(C, T, 0, 400, 399, 60_000))
    # after a truncation the run is the whole past lag in seconds reads: nothing goes before it
    s.apply(LogEndSample(C, T, 0, 10, 930_000))
    assert le is s.log_end_of(C, T, 0) and le.run_start > 0
    assert not le.from_record(0, 5, 60_000)


def test_a_truncation_forgets_the_record() -> None:
    le = LogEnd()
    le.offsets.extend([1000, 1100])
    le.ts.extend([900_000, 910_000])
    assert le.from_record(400, 400, 60_000)
    s = State()
    s.apply(LogEndSample(C, T, 0, 1000, 900_000))
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
    s.apply(LogEndSample(C, T, 0, 5, 910_000))  # recreated
    got = s.log_end_of(C, T, 0)
    assert got is not None and (list(got.coarse_offsets), got.record_from) == ([], -1)


def test_thinning_keeps_the_record_in_front() -> None:
    le = LogEnd()
    le.offsets.append(10_000_000)
    le.ts.append(10**10)
    for i in range(COARSE_MAX):
        le.retire(1000 + i, 10**9 + i * COARSE_STEP_MS)
    assert le.from_record(500, 500, 10**8)
    assert len(le.coarse_ts) == COARSE_MAX
    assert (le.coarse_offsets[0], le.coarse_ts[0]) == (500, 10**8)
    assert list(le.coarse_ts) == sorted(le.coarse_ts)
    assert reached_in(le, 500) == (10**8, False)


def test_the_lowest_committed_offset_of_a_partition_is_asked_and_the_limit_holds() -> None:
    s = restarted()
    for i in range(3):
        s.apply(Commit(C, "g2", T, 0, 300, 10 + i, 100_000 + i, 100_005 + i))
    for p in (1, 2):
        s.apply(LogEndSample(C, T, p, 50, 900_000))
        s.apply(Commit(C, G, T, p, 10, 20 + p, 100_000, 100_005))
        s.apply(LogEndSample(C, T, p, 50, 910_000))
    assert s.record_candidates(C, 50) == [(T, 0, 300), (T, 1, 10), (T, 2, 10)]
    assert s.record_candidates(C, 2) == [(T, 0, 300), (T, 1, 10)]
    # bounded work: a call stops after `budget` windows, the next goes on from there
    assert s.record_candidates(C, 50, budget=1) == [(T, 0, 400), (T, 1, 10), (T, 2, 10)]  # g: 3 windows
    assert s.record_candidates(C, 50, budget=1) == [(T, 0, 300)]  # g2
    assert s.record_candidates(C, 50, budget=1) == [(T, 0, 400), (T, 1, 10), (T, 2, 10)]  # g again
    # a record read below a committed offset answers it (the first record at or above it is that one)
    s.apply(RecordTimestamp(C, T, 0, 300, 450, 60_000))
    assert s.record_candidates(C, 50) == [(T, 1, 10), (T, 2, 10)]


def test_hostile_answers_are_counted_and_skipped() -> None:
    counters = IngestCounters()
    wanted = [(T, p, 100) for p in range(6)]
    answers = {
        (T, 0): (100, 5000, LOG_APPEND_TIME),
        (T, 1): (120, 5000, 0),  # CreateTime: kept, and said so
        (T, 2): (99, 5000, LOG_APPEND_TIME),  # below what was asked
        (T, 3): (100, -1, 0),  # no timestamp
        (T, 4): (100, NOW + FUTURE_TOLERANCE_MS + 1, 0),  # from the future
    }  # (T, 5): no record
    got = valid_records(C, wanted, answers, NOW, counters)
    assert got == [
        RecordTimestamp(C, T, 0, 100, 100, 5000, True, NOW),
        RecordTimestamp(C, T, 1, 100, 120, 5000, False, NOW),
    ]
    assert counters.failures == {
        "record_ts_below_committed": 1,
        "record_ts_no_timestamp": 1,
        "record_ts_in_future": 1,
        "record_ts_no_record": 1,
    }
    assert counters.records_by_type == {"record_ts_log_append_time": 1, "record_ts_create_time": 1}


def test_a_candidate_is_not_asked_again_soon() -> None:
    from lagd.core.config import ClusterSettings
    from lagd.ingest.record_ts import RETRY_AFTER_MS

    f = RecordFetcher(ClusterSettings(name="k", bootstrap_servers=["localhost:1"]), IngestCounters())
    f._asked[(T, 0, 5)] = NOW
    assert f.due([(T, 0, 5), (T, 1, 5)], NOW + 1) == [(T, 1, 5)]
    assert f.due([(T, 0, 5)], NOW + RETRY_AFTER_MS) == [(T, 0, 5)]


async def test_an_answer_lost_by_state_is_given_again_from_memory() -> None:
    """A worker that let a group go and is given it back restores the topic's samples from the
    store (no mark of the record): the candidate comes back within RETRY_AFTER_MS, and the answer
    read before is given again, without reading, so the figure is exact again at once."""
    from lagd.core.config import ClusterSettings
    from lagd.ingest.record_ts import RETRY_AFTER_MS

    f = RecordFetcher(ClusterSettings(name="k", bootstrap_servers=["localhost:1"]), IngestCounters())
    read = RecordTimestamp(C, T, 0, 400, 400, 60_000, ts=NOW)
    f._asked[(T, 0, 400)] = f._asked[(T, 1, 9)] = NOW  # partition 1 had no record
    f._answered[(T, 0, 400)] = read
    s = restarted()
    s.apply(read)
    stored = s.drain_changes().log_end[(C, T, 0)]
    assert stored is not None
    back = State(intervals=3)
    back.restore_log_end((C, T, 0), stored[0], stored[1])  # as stored by a lagd that kept no mark
    for i in range(3):
        back.apply(Commit(C, G, T, 0, 400, i, 100_000 + i, 100_005 + i))
    assert back.record_candidates(C, 50) == [(T, 0, 400)]
    again = await f.fetch([*back.record_candidates(C, 50), (T, 1, 9)], NOW + 1000)  # no consumer: none read
    assert again == [read]
    for r in again:
        back.apply(r)
    le = back.log_end_of(C, T, 0)
    assert le is not None and reached_in(le, 400) == (60_000, False)
    assert back.record_candidates(C, 50) == []
    f.due([], NOW + RETRY_AFTER_MS)
    assert f.answered([(T, 0, 400)]) == []  # forgotten with the ask


@pytest.mark.parametrize("fine", [360, 2], ids=["all-fine", "some-coarse"])
def test_after_a_restart_the_stored_mark_makes_it_exact_at_once(fine: int) -> None:
    s = restarted()
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000, log_append_time=False))
    stored = s.drain_changes().log_end[(C, T, 0)]
    assert stored is not None and stored[2] == [400, 400, 60_000, 1]
    again = State(intervals=3, lag_samples=fine)
    again.restore_log_end((C, T, 0), *stored)
    for i in range(3):
        again.apply(Commit(C, G, T, 0, 400, i, 100_000 + i, 100_005 + i))
    le = again.log_end_of(C, T, 0)
    assert le is not None and reached_in(le, 400) == (60_000, False)
    assert lag_seconds_from(le, 400, 600, False) == RECORD_TIMESTAMP and record_clock(le) == "CreateTime"
    assert again.record_candidates(C, 50) == []  # nothing to read again
    assert le.history() == (stored[0], stored[1])
    assert le.stored() == stored


def test_a_mark_whose_record_is_not_the_oldest_sample_is_ignored() -> None:
    """A row written by a lagd that does not keep the mark (a worker of an earlier version) can
    pair new samples with an old row's mark: it counts only where the oldest sample is its record."""
    s = State(intervals=3)
    s.restore_log_end((C, T, 0), [1000, 1000, 1000], [900_000, 910_000, 920_000], [400, 400, 60_000, 0])
    le = s.log_end_of(C, T, 0)
    assert le is not None and le.record_from == -1 and reached_in(le, 400) == (900_000, True)
    assert le.history() == ([1000, 1000, 1000], [900_000, 910_000, 920_000])  # nothing inserted
    s.restore_log_end((C, T, 0), [400, 1000, 1000], [60_000, 900_000, 910_000], [400, 400, 60_000])  # malformed
    le = s.log_end_of(C, T, 0)
    assert le is not None and le.record_from == -1


@pytest.mark.parametrize("fine", [360, 2], ids=["all-fine", "some-coarse"])
def test_after_a_restart_a_record_stored_without_its_mark_is_marked_again(fine: int) -> None:
    s = restarted()
    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
    stored = s.drain_changes().log_end[(C, T, 0)]
    assert stored is not None
    again = State(intervals=3, lag_samples=fine)
    again.restore_log_end((C, T, 0), stored[0], stored[1])  # a row of a lagd that kept no mark
    for i in range(3):
        again.apply(Commit(C, G, T, 0, 400, i, 100_000 + i, 100_005 + i))
    le = again.log_end_of(C, T, 0)
    assert le is not None and reached_in(le, 400) == (60_000, True)  # a bound: the mark is not stored
    assert again.record_candidates(C, 50) == [(T, 0, 400)]
    again.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))  # read again: the same record
    le = again.log_end_of(C, T, 0)
    assert le is not None and reached_in(le, 400) == (60_000, False)
    assert again.record_candidates(C, 50) == []
    assert le.history() == (stored[0], stored[1])


def test_the_compiled_evaluator_answers_as_the_python_does() -> None:
    """_trend.c hands a read before the fine tier to the Python (reached_in): one definition."""
    code = (
        "from tests.test_record_ts import *\n"
        "for rules in (LAGD, BURROW):\n"
        "    s = restarted(rules)\n"
        "    s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))\n"
        "    p = Evaluator(s).group(C, G, NOW).partitions[0]\n"
        "    print(p.status.value, p.lag_seconds, p.lag_seconds_estimated, p.reason)\n"
    )
    here = []
    for rules in (LAGD, BURROW):
        s = restarted(rules)
        s.apply(RecordTimestamp(C, T, 0, 400, 400, 60_000))
        p = Evaluator(s).group(C, G, NOW).partitions[0]
        here.append(f"{p.status.value} {p.lag_seconds} {p.lag_seconds_estimated} {p.reason}")
    assert printed_without_extensions(code) == "\n".join(here)
