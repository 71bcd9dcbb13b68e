"""Retention verdicts: a consumer sliding towards retention, warned ahead and raised as lost.

Corpus (pure, per-second traces of one partition; 5 seeds each):
- sliding: a topic keeping `retention` (30, 60 or 120 min) of records in segments of 5 min
  (time-based retention as Kafka applies it: a segment goes once its newest record is older
  than the retention, checked every 5 min as log.retention.check.interval.ms does by default);
  production 200-600 records/s (+-30% from second to second); the consumer, caught up at the
  start, reads 60-85% of the nominal rate, commits every 5 s, and so falls off the log some
  hours in. Truth: the first second the log start is above the committed offset.
- compacted: the same slide on a topic whose cleanup.policy is compact: no lost or at-risk
  verdict may be raised (offsets have gaps there).
- keeping-up: a consumer reading as fast as production on a 10 or 30 min retention: nothing may
  be raised.

lagd: its own State and Evaluator (lagd.evaluate.build, default settings, cache off), log ends
sampled every 10 s (offset-refresh), log starts every 30 s (log-start-refresh), the cleanup
policy once, each commit applied when it happens, the group judged every 10 s. Measured per
trace: the warning lead (truth minus the first "at risk" verdict; target >= 30 min), the delay
of "records lost" after the truth (target: within one log-start-refresh and one judgement, 40 s),
whether the count it says then equals the truth (log start - committed, at lagd's samples),
every retention alert on compacted and keeping-up traces (target 0), and flaps: alert
episodes (at risk or lost, off to on) beyond one per sliding trace (target 0).

Limits: synthetic traces; one partition; a consumer at a constant share of the nominal rate.
Pure and fast: `python -m bench.bench_retention`.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass

from bench import target
from lagd.core.config import EvaluatorSettings, Settings
from lagd.core.model import Commit, LogEndSample, LogStartSample, TopicPolicy
from lagd.evaluate.build import build_core
from lagd.evaluate.retention import RetentionState

CLUSTER, GROUP, TOPIC = "retention", "consumer", "events"
SEEDS = (1, 2, 3, 4, 5)
START_MS = 1_700_000_000_000
SEGMENT_S = 300
CHECK_S = 300  # log.retention.check.interval.ms's default
OFFSET_REFRESH, LOG_START_REFRESH, JUDGE_EVERY, COMMIT_EVERY = 10, 30, 10, 5


@dataclass
class Trace:
    name: str
    seed: int
    ends: list[int]  # per second
    starts: list[int]  # per second
    committed: list[int]  # per second (the newest commit)
    compacted: bool
    truth_lost: int | None  # second
    params: str


def _trace(kind: str, seed: int) -> Trace:
    rng = random.Random(f"{kind}-{seed}")
    rate = rng.uniform(200, 600)
    retention = rng.choice((1800, 3600, 7200)) if kind != "keeping-up" else rng.choice((600, 1800))
    share = rng.uniform(0.60, 0.85) if kind != "keeping-up" else 1.0
    duration = int(retention / (1 - share) * 1.3) + 3600 if share < 1 else 4 * 3600
    ends = [0]
    for _ in range(duration):
        ends.append(ends[-1] + max(0, round(rate * rng.uniform(0.7, 1.3))))
    starts, committed = [], []
    deleted = 0  # segments deleted
    position, commit, truth = 0, 0, None
    for t in range(duration + 1):
        if t % CHECK_S == 0:
            while (deleted + 1) * SEGMENT_S <= t - retention:
                deleted += 1
        start = ends[min(deleted * SEGMENT_S, t)]
        position = min(ends[t], position + share * rate) if share < 1 else ends[t]
        if t % COMMIT_EVERY == 0:
            commit = int(position)
        starts.append(start)
        committed.append(commit)
        if truth is None and start > commit:
            truth = t
    params = f"rate {rate:.0f}/s, retention {retention // 60} min, consumer {share:.0%}, {duration // 60} min"
    return Trace(kind, seed, ends, starts, committed, kind == "compacted", truth if kind == "sliding" else None, params)


def replay(trace: Trace) -> tuple[int | None, int | None, int | None, int, int]:
    """lagd over the trace: first at-risk second, first lost second, the count said then, and
    the retention alerts raised (episodes of at risk or lost) and how many of them while the
    truth was not lost."""
    settings = Settings(evaluator=EvaluatorSettings(cache_ttl=0.0))
    state, evaluator = build_core(settings)
    if trace.compacted:
        state.apply(TopicPolicy(CLUSTER, TOPIC, "compact"))
    first_risk = first_lost = said = None
    alerts = false = 0
    alerting = False
    for t in range(len(trace.ends)):
        ms = START_MS + t * 1000
        if t % OFFSET_REFRESH == 0:
            state.apply(LogEndSample(CLUSTER, TOPIC, 0, trace.ends[t], ms))
        if t % LOG_START_REFRESH == 0:
            state.apply(LogStartSample(CLUSTER, TOPIC, 0, trace.starts[t], ms))
        if t % COMMIT_EVERY == 0:
            state.apply(Commit(CLUSTER, GROUP, TOPIC, 0, trace.committed[t], t, ms, ms))
        if t % JUDGE_EVERY:
            continue
        notes = evaluator.group(CLUSTER, GROUP, ms).retention
        states = {n.state for n in notes}
        now_alert = bool(states & {RetentionState.AT_RISK, RetentionState.LOST})
        if now_alert and not alerting:
            alerts += 1
            if trace.truth_lost is None:
                false += 1
        alerting = now_alert
        if RetentionState.AT_RISK in states and first_risk is None:
            first_risk = t
        if RetentionState.LOST in states and first_lost is None:
            first_lost = t
            said = next(n.lost for n in notes if n.state is RetentionState.LOST)
    return first_risk, first_lost, said, alerts, false


def main() -> int:
    started = time.process_time()
    leads: list[float] = []
    delays: list[float] = []
    wrong_counts = missed = false_total = flaps = 0
    for kind in ("sliding", "compacted", "keeping-up"):
        for seed in SEEDS:
            trace = _trace(kind, seed)
            risk, lost, said, alerts, false = replay(trace)
            false_total += false
            line = f"{kind} seed {seed} ({trace.params}):"
            if kind == "sliding":
                assert trace.truth_lost is not None
                if lost is None or risk is None:
                    missed += 1
                    print(f"{line} truth lost at {trace.truth_lost} s; lagd at risk {risk}, lost {lost}: MISSED")
                    continue
                lead, delay = (trace.truth_lost - risk) / 60, lost - trace.truth_lost
                s_at = lost - lost % LOG_START_REFRESH  # the log-start sample lagd judged from
                c_at = lost - lost % COMMIT_EVERY
                truth_count = trace.starts[s_at] - trace.committed[c_at]
                wrong_counts += said != truth_count
                leads.append(lead)
                delays.append(delay)
                flaps += alerts - 1
                print(
                    f"{line} truth lost at {trace.truth_lost} s; at risk from {risk} s ({lead:.0f} min ahead), "
                    f"lost raised at {lost} s (+{delay} s), {said} records (truth at its samples {truth_count}); "
                    f"{alerts} alert episode(s)"
                )
            else:
                print(f"{line} {alerts} retention alert episode(s)")
    print(f"sliding: {len(leads)} of {len(SEEDS)} warned and raised; lead min {min(leads, default=0):.0f} min")
    print(f"cpu seconds: {time.process_time() - started:.1f}")
    ok = target("sliding: least warning lead before the first lost record", min(leads, default=0), ">=", 30, "min")
    ok &= target("sliding: most delay of records lost after the truth", max(delays, default=1e9), "<=", 40, "s")
    ok &= target("sliding: traces missed or counted wrong", missed + wrong_counts, "<=", 0)
    ok &= target("compacted and keeping-up: retention alerts", false_total, "<=", 0)
    ok &= target("sliding: flaps (alert episodes beyond one a trace)", flaps, "<=", 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
