"""Scenario quality: lagd's verdicts against fixed lag-threshold alerts, on labelled traces.

Corpus. Simulated consumer groups, each a pure per-second trace of every partition's log-end
offset and commits, 1,800 s long. Problems start at an onset of 600 s:
- stopped: no commit at all from the onset;
- stalled: the same offset committed again and again;
- falling-behind: the consumer handles 85-95% of the produce rate, so lag grows slowly;
- hot-partition-behind: 8 partitions with skewed rates (the hottest 8x the coldest); only the
  hottest falls behind (85-95%);
- quiet-topic-stopped: one record every 2-6 s; the consumer stops at the onset;
- checkpoint-falling-behind: commits every 10, 30 or 60 s; the consumer handles 85-95%.
Situations a lag threshold tends to flag although nothing needs fixing:
- burst: bursts of 10,000-50,000 records on a quiet topic, drained within seconds;
- slow-but-keeping-up: a busy topic (800-1,500 msg/s) whose consumer is steadily 3-6 s
  (+-1.5 s) behind;
- rebalance: 2-4 rebalances pause the group 5-30 s each, then it catches up at 3x;
- deploy-pauses: 3-4 rolling deploys pause the group about as long each (20-90 s drawn per
  trace, +-15%), then it catches up at 3x: from the second on it has a history of pauses;
- first-deploy-pause: one deploy pause of 20-90 s, the group's first, from 2 min in;
- monitor-restart: the monitor (lagd, or the exporter) is down 15-120 s on a healthy group;
- diurnal: traffic rises from the base rate to 4x and back over the trace (a compressed day);
  the consumer follows it;
- new-group-backlog: a new group starts 2-10 minutes of records behind and catches up at
  2-3x the produce rate;
- idle: a topic with no traffic; the group commits its caught-up offset every few seconds,
  or once and never again;
- checkpoint-healthy: a healthy consumer committing every 10, 30 or 60 s.
Each scenario runs with 5 seeds; a seed draws the produce rate (200-600 msg/s unless said
otherwise, +-30% from second to second), the commit interval (1, 2 or 5 s unless said
otherwise) and the scenario's sizes; every trace's drawn parameters are printed. A healthy
consumer commits what it has processed, which trails the log end by up to 1 s of records.

Detectors see the same data at the same 10 s resolution. lagd: its own State and Evaluator,
built by `lagd.evaluate.build` from the default settings (`evaluator.rules = "lagd"`, log-end offsets
sampled every 10 s, the default offset-refresh), each commit applied when it happens, every
group judged every second as the daemon's verdict scan does; an alert is a group status
WARN or ERR. Three more lagd runs are reported and not in the targets: Burrow's rules
(`evaluator.rules = "burrow"`), lagd with 1 s log-end sampling, and lagd with `pause-learn`
600 s (a group watched that long without a pause judged at stop-after, not at the no-history
default: how the traces' stopped groups fare then, and its first deploys). Threshold rules: an
exporter scrapes every 10 s and reports each partition's lag in records (log end minus
committed offset) and in seconds (kafka-lag-exporter style: how long ago the log end stood
at the committed offset, interpolated between its own 10 s samples); a rule alerts when the
highest partition's value is above N records or S seconds, at once or held `for:` 30 s, 60 s
or 5 min as a Prometheus alert would. The monitor restart applies to all: while down nothing
is evaluated and nothing alerts; afterwards lagd restores its windows, pauses and log-end samples as
its store would (its verdict history is not restored) and re-reads the commits it missed,
while the exporter scrapes at once and its series went stale meanwhile, so a `for:` hold
starts over.

Scoring, the same for every detector, from the first second of each trace (no warm-up).
A false alert is an alert episode (off to on) that starts before the onset, or anywhere in a
trace without a problem. Detection delay is the time from the onset to the first second the
detector alerts (an alert already on at the onset counts as delay 0). A flap is any change
of the alert state after the first detection of a problem (for lagd also a change between
WARN and ERR): one problem episode should be one status change. Totals are sums over all
seeds. The summary names the threshold rule with the fewest false alerts among those that
detect every problem (ties: shorter mean delay) and compares lagd with it.

Limits. The traces are synthetic and their parameter ranges are this benchmark's choices,
not measured production traffic. Only one global threshold per rule is compared: a threshold
tuned per group could do better than any row here. Notification routing and re-alerting are
not modelled. Pure and fast: run it with `python -m bench.bench_quality`.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import target
from lagd.core.config import EvaluatorSettings, Settings
from lagd.core.model import Commit, GroupStatus, LogEndSample, PartitionStatus
from lagd.evaluate import Evaluator
from lagd.evaluate.build import build_core, build_evaluator, build_state
from lagd.evaluate.clearing import state_clearings
from lagd.state.windows import State

CLUSTER, GROUP, TOPIC = "quality", "consumer", "events"
DURATION = 1_800  # seconds per trace
ONSET = 600  # seconds: when a true problem starts
SEEDS = (1, 2, 3, 4, 5)
OFFSET_REFRESH = 10  # seconds between log-end samples (lagd's default offset-refresh)
FAST_REFRESH = 1  # a lagd run with 1 s sampling, for sensitivity only
SCRAPE_EVERY = 10  # seconds between exporter scrapes for the threshold rules (the same resolution)
COMMIT_EVERY = (1, 2, 5)  # a seed picks one: seconds between a consumer's commits
CHECKPOINT_EVERY = (10, 30, 60)  # the checkpoint scenarios' commit intervals
BATCH_S = 1.0  # a healthy consumer's committed offset trails the log end by up to this many seconds of records
START_MS = 1_700_000_000_000
RECORD_THRESHOLDS = (1_000, 10_000, 50_000)
SECOND_THRESHOLDS = (30, 60, 120, 300)
HOLDS = (0, 30, 60, 300)  # the `for:` of a Prometheus-style threshold alert, in seconds

PROBLEM, FALSE_ALARM = "problem", "false alarm"
OK, ALERT = "OK", "ALERT"


@dataclass(frozen=True)
class Trace:
    """Per partition and second: the log-end offset and the offset committed then (None: no commit)."""

    name: str
    kind: str  # PROBLEM or FALSE_ALARM
    seed: int
    description: str  # with the parameters this seed drew
    onset: int | None  # second the true problem starts; None for a false alarm
    log_end: list[list[int]]  # [partition][second]
    commits: list[list[int | None]]  # [partition][second]
    down: tuple[int, int] | None = None  # the monitor (lagd or the exporter) is down in [a, b)
    clears_at: int | None = None  # backlog-clearing: the second the group's backlog is gone (its slowest partition's)


@dataclass
class Outcome:
    """How one detector did on one trace."""

    false_alerts: int = 0
    delay: float | None = None  # seconds from onset to the first alert; None: not detected
    alert_seconds: int = 0
    flaps: int = 0


@dataclass
class Row:
    scenario: str
    kind: str
    seed: int
    outcomes: dict[str, Outcome] = field(default_factory=dict)


# --- the corpus ----------------------------------------------------------------------


def _produce(
    rng: random.Random, rate: float | Callable[[int], float], extra: Callable[[int], int] | None = None
) -> list[int]:
    """Log-end offsets per second: `rate` msg/s (or rate(t)) +-30% from second to second, plus `extra(t)` at t."""
    end = rng.randrange(1_000_000, 100_000_000)
    out = [end]
    for t in range(1, DURATION + 1):
        r = rate(t) if callable(rate) else rate
        end += round(r * rng.uniform(0.7, 1.3)) + (extra(t) if extra else 0)
        out.append(end)
    return out


def _produce_sparse(rng: random.Random, gap: tuple[float, float]) -> list[int]:
    """A quiet topic: one record every `gap` seconds (drawn per record)."""
    end = rng.randrange(1_000, 1_000_000)
    next_at = rng.uniform(*gap)
    out = [end]
    for t in range(1, DURATION + 1):
        while next_at <= t:
            end += 1
            next_at += rng.uniform(*gap)
        out.append(end)
    return out


def _batch(rng: random.Random, rate: float) -> int:
    """Records fetched but not yet processed when a healthy consumer commits."""
    return round(rate * rng.uniform(0.0, BATCH_S))


def _commits(
    rng: random.Random, every: int, position: list[int], skip: Callable[[int], bool] = lambda t: False
) -> list[int | None]:
    """Commit the processed position every `every` s (phase random), except when `skip(t)`.

    Offsets never go backwards (a consumer's commits don't).
    """
    phase = rng.randrange(every)
    out: list[int | None] = []
    high = 0
    for t in range(DURATION + 1):
        if (t - phase) % every or skip(t):
            out.append(None)
            continue
        high = max(high, position[t])
        out.append(high)
    return out


def _healthy_position(rng: random.Random, ends: list[int], rate: float | Callable[[int], float]) -> list[int]:
    """A healthy consumer: processed up to the log end minus a batch, never backwards."""
    pos: list[int] = []
    high = 0
    for t, end in enumerate(ends):
        high = max(high, end - _batch(rng, rate(t) if callable(rate) else rate))
        pos.append(high)
    return pos


def _rates(rng: random.Random, partitions: int = 2, low: float = 200, high: float = 600) -> list[float]:
    base = rng.uniform(low, high)
    return [base * (1 + 0.5 * p) for p in range(partitions)]


def _skewed_rates(rng: random.Random, partitions: int = 8) -> list[float]:
    """Skewed partitions: the hottest (partition 0) about 8x the coldest."""
    base = rng.uniform(100, 300)
    return [base * 8 / (1 + p) for p in range(partitions)]


def _falling_behind(rng: random.Random, ends: list[int], rate: float, share: float) -> list[int]:
    pos = _healthy_position(rng, ends, rate)
    start = pos[ONSET]
    for t in range(ONSET, DURATION + 1):
        pos[t] = max(pos[t - 1], start + round(share * (ends[t] - ends[ONSET])) - _batch(rng, rate))
    return pos


def scenario_stopped(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits = [
        _commits(rng, every, _healthy_position(rng, e, r), lambda t: t >= ONSET)
        for e, r in zip(ends, rates, strict=True)
    ]
    desc = f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; no commit at all from the onset"
    return Trace("stopped", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_stalled(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits: list[list[int | None]] = []
    for e, r in zip(ends, rates, strict=True):
        pos = _healthy_position(rng, e, r)
        frozen = pos[ONSET]
        commits.append(_commits(rng, every, [p if t < ONSET else frozen for t, p in enumerate(pos)]))
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; from the onset the same offset again and again"
    )
    return Trace("stalled", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_falling_behind(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    share = rng.uniform(0.85, 0.95)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _falling_behind(rng, e, r, share)) for e, r in zip(ends, rates, strict=True)]
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; from the onset the consumer handles "
        f"{share:.0%} of the produce rate (lag grows {(1 - share) * rates[0]:.0f}-{(1 - share) * rates[-1]:.0f}/s)"
    )
    return Trace("falling-behind", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_hot_partition(rng: random.Random, seed: int) -> Trace:
    rates, every = _skewed_rates(rng), rng.choice(COMMIT_EVERY)
    share = rng.uniform(0.85, 0.95)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _falling_behind(rng, ends[0], rates[0], share))]
    commits += [_commits(rng, every, _healthy_position(rng, e, r)) for e, r in zip(ends[1:], rates[1:], strict=True)]
    desc = (
        f"8 partitions, {rates[-1]:.0f}-{rates[0]:.0f} msg/s, commits every {every} s; from the onset the hottest "
        f"partition's consumer handles {share:.0%} of its produce rate, the others keep up"
    )
    return Trace("hot-partition-behind", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_quiet_stopped(rng: random.Random, seed: int) -> Trace:
    every = rng.choice(COMMIT_EVERY)
    ends = [_produce_sparse(rng, (2.0, 6.0)) for _ in range(2)]
    commits = [_commits(rng, every, e, lambda t: t >= ONSET) for e in ends]
    desc = f"one record every 2-6 s, commits every {every} s; the consumer stops at the onset"
    return Trace("quiet-topic-stopped", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_checkpoint_behind(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(CHECKPOINT_EVERY)
    share = rng.uniform(0.85, 0.95)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _falling_behind(rng, e, r, share)) for e, r in zip(ends, rates, strict=True)]
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, checkpoints every {every} s; from the onset {share:.0%} of production"
    )
    return Trace("checkpoint-falling-behind", PROBLEM, seed, desc, ONSET, ends, commits)


def scenario_burst(rng: random.Random, seed: int) -> Trace:
    """A quiet topic that a batch job floods now and then; the consumer drains each burst in seconds."""
    every = rng.choice(COMMIT_EVERY)
    rate = rng.uniform(5, 20)
    size = rng.randrange(10_000, 50_000)  # records per partition per burst
    period = rng.randrange(120, 300)
    drain = rng.uniform(2_000, 5_000)  # records/s the consumer processes when behind
    first = rng.randrange(30, period)
    ends, commits = [], []
    for _ in range(2):
        e = _produce(rng, rate, lambda t: size if t >= first and (t - first) % period == 0 else 0)
        pos: list[int] = []
        high = 0
        for t, end in enumerate(e):
            high = max(high, min(end - _batch(rng, rate), (pos[t - 1] if t else end) + round(drain)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos))
    desc = (
        f"{rate:.0f} msg/s plus {size:,} records per partition every {period} s, drained at {drain:,.0f}/s "
        f"(within {size / drain:.0f} s), commits every {every} s"
    )
    return Trace("burst", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_slow(rng: random.Random, seed: int) -> Trace:
    """A busy topic whose consumer works in big batches: steadily seconds behind, never losing ground."""
    every = rng.choice(COMMIT_EVERY)
    rates = _rates(rng, 2, 800, 1_500)
    behind = rng.uniform(3.0, 6.0)
    ends, commits = [], []
    for r in rates:
        e = _produce(rng, r)
        pos: list[int] = []
        high = 0
        for end in e:
            high = max(high, end - round(r * max(0.0, behind + rng.uniform(-1.5, 1.5))))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos))
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, the consumer steadily {behind:.1f} s (+-1.5 s) behind, "
        f"commits every {every} s"
    )
    return Trace("slow-but-keeping-up", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_rebalance(rng: random.Random, seed: int) -> Trace:
    """Rebalances stop consumption and commits for a while; the group then catches up at 3x the rate."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    count = rng.randint(2, 4)
    starts = sorted(rng.sample(range(60, DURATION - 120, 60), count))
    pauses = [(a, a + rng.randint(5, 30)) for a in starts]

    def paused(t: int) -> bool:
        return any(a <= t < b for a, b in pauses)

    ends, commits = [], []
    for r in rates:
        e = _produce(rng, r)
        pos: list[int] = []
        high = 0
        for t, end in enumerate(e):
            if t and paused(t):
                pos.append(pos[-1])
                continue
            high = max(high, min(end - _batch(rng, r), (pos[-1] if t else end) + round(3 * r)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos, paused))
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; {count} rebalances pause the group "
        f"{', '.join(f'{b - a} s' for a, b in pauses)}, then it catches up at 3x"
    )
    return Trace("rebalance", FALSE_ALARM, seed, desc, None, ends, commits)


def _paused(
    rng: random.Random, rates: list[float], every: int, pauses: list[tuple[int, int]]
) -> tuple[list[list[int]], list[list[int | None]]]:
    """Log ends and commits of a healthy group that neither consumes nor commits during
    `pauses` ([a, b) seconds) and then catches up at 3x the produce rate."""

    def paused(t: int) -> bool:
        return any(a <= t < b for a, b in pauses)

    ends, commits = [], []
    for r in rates:
        e = _produce(rng, r)
        pos: list[int] = []
        high = 0
        for t, end in enumerate(e):
            if t and paused(t):
                pos.append(pos[-1])
                continue
            high = max(high, min(end - _batch(rng, r), (pos[-1] if t else end) + round(3 * r)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos, paused))
    return ends, commits


def scenario_deploys(rng: random.Random, seed: int) -> Trace:
    """Rolling deploys of a stateful JVM service: 3-4 pauses of about the same length (a
    length of 20-90 s drawn per trace, +-15% per deploy), each followed by a catch-up at 3x.
    From the second on, the group has a history of pauses."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    length = rng.uniform(20, 90)
    count = rng.randint(3, 4)
    starts = sorted(rng.sample(range(120, DURATION - 200, 150), count))
    pauses = [(a, a + round(min(90.0, max(20.0, length * rng.uniform(0.85, 1.15))))) for a in starts]
    ends, commits = _paused(rng, rates, every, pauses)
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; {count} deploys pause the group "
        f"{', '.join(f'{b - a} s' for a, b in pauses)} (at {', '.join(f'{a} s' for a, _ in pauses)}), "
        "then it catches up at 3x"
    )
    return Trace("deploy-pauses", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_first_deploy(rng: random.Random, seed: int) -> Trace:
    """One deploy pause of 20-90 s, the group's first (no earlier pause in the trace), anywhere
    from 2 min in; then a catch-up at 3x."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    a = rng.randrange(120, DURATION - 200)
    pause = (a, a + rng.randint(20, 90))
    ends, commits = _paused(rng, rates, every, [pause])
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; one deploy pauses the group "
        f"{pause[1] - pause[0]} s at {a} s (its first), then it catches up at 3x"
    )
    return Trace("first-deploy-pause", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_restart(rng: random.Random, seed: int) -> Trace:
    """A healthy group while the monitor (lagd, or the exporter behind the threshold rule) restarts."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _healthy_position(rng, e, r)) for e, r in zip(ends, rates, strict=True)]
    a = rng.randrange(300, DURATION - 300)
    down = (a, a + rng.randint(15, 120))
    desc = (
        f"healthy, {rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; the monitor is down "
        f"{down[1] - down[0]} s"
    )
    return Trace("monitor-restart", FALSE_ALARM, seed, desc, None, ends, commits, down=down)


def scenario_diurnal(rng: random.Random, seed: int) -> Trace:
    """Traffic rises to 4x and falls back over the trace; the consumer follows it."""
    every = rng.choice(COMMIT_EVERY)
    base = rng.uniform(200, 600)

    def rate(t: int) -> float:
        return base * (1 + 1.5 * (1 - math.cos(2 * math.pi * t / DURATION)))

    ends = [_produce(rng, rate) for _ in range(2)]
    commits = [_commits(rng, every, _healthy_position(rng, e, rate)) for e in ends]
    desc = f"{base:.0f} msg/s rising to {4 * base:.0f} and back, commits every {every} s; the consumer follows"
    return Trace("diurnal", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_backlog(rng: random.Random, seed: int) -> Trace:
    """A new group starts minutes of records behind and works the backlog off."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    behind_s = rng.randrange(120, 600)
    speed = rng.uniform(2.0, 3.0)
    ends, commits = [], []
    for r in rates:
        e = _produce(rng, r)
        pos: list[int] = []
        high = e[0] - round(behind_s * r)
        for end in e:
            high = max(high, min(end - _batch(rng, r), high + round(speed * r)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos))
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; a new group starts {behind_s} s of records "
        f"behind and consumes at {speed:.1f}x until caught up"
    )
    return Trace("new-group-backlog", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_idle(rng: random.Random, seed: int) -> Trace:
    """No traffic at all; the group commits its caught-up offset now and then, or once."""
    every = rng.choice(COMMIT_EVERY)
    once = rng.random() < 0.5
    ends, commits = [], []
    for _ in range(2):
        end = rng.randrange(1_000, 1_000_000)
        ends.append([end] * (DURATION + 1))
        c = _commits(rng, every, [end] * (DURATION + 1))
        if once:
            first = next(t for t, o in enumerate(c) if o is not None)
            c = [o if t == first else None for t, o in enumerate(c)]
        commits.append(c)
    desc = "no traffic; " + ("one commit, then none" if once else f"caught-up commits every {every} s")
    return Trace("idle", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_checkpoint_healthy(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(CHECKPOINT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _healthy_position(rng, e, r)) for e, r in zip(ends, rates, strict=True)]
    desc = f"healthy, {rates[0]:.0f}-{rates[-1]:.0f} msg/s, checkpoints every {every} s"
    return Trace("checkpoint-healthy", FALSE_ALARM, seed, desc, None, ends, commits)


def scenario_backlog_clearing(rng: random.Random, seed: int, every_from: tuple[int, ...] = COMMIT_EVERY) -> Trace:
    """A group minutes of records behind works the backlog off at a steady capacity of its own per
    partition (a known drain rate): healthy, and the trace of the clear-time prediction (see
    `clearing_run`). The true clear time is the first second the slowest partition's consumer is
    no longer held by its capacity (it commits what it processed, a batch behind the log end)."""
    rates, every = _rates(rng), rng.choice(every_from)
    behind_s = rng.randrange(200, 600)
    speeds = [rng.uniform(1.5, 3.0) for _ in rates]
    ends, commits, clears = [], [], []
    for r, speed in zip(rates, speeds, strict=True):
        e = _produce(rng, r)
        pos: list[int] = []
        high = e[0] - round(behind_s * r)
        clear: int | None = None
        for t, end in enumerate(e):
            caught = end - _batch(rng, r)
            if clear is None and caught <= high + round(speed * r):
                clear = t
            high = max(high, min(caught, high + round(speed * r)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos))
        clears.append(clear if clear is not None else DURATION)
    desc = (
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; starts {behind_s} s of records behind, "
        f"consumes at {', '.join(f'{x:.2f}x' for x in speeds)} (lag falls "
        f"{', '.join(f'{(x - 1) * r:.0f}' for x, r in zip(speeds, rates, strict=True))} records/s); clear at {max(clears)} s"
    )
    name = "backlog-clearing" if every_from == COMMIT_EVERY else "backlog-clearing-checkpoint"
    return Trace(name, FALSE_ALARM, seed, desc, None, ends, commits, clears_at=max(clears))


def scenario_backlog_clearing_checkpoint(rng: random.Random, seed: int) -> Trace:
    """`scenario_backlog_clearing` committing every 10, 30 or 60 s (checkpointing consumers)."""
    return scenario_backlog_clearing(rng, seed, CHECKPOINT_EVERY)


SCENARIOS: tuple[Callable[[random.Random, int], Trace], ...] = (
    scenario_stopped,
    scenario_stalled,
    scenario_falling_behind,
    scenario_hot_partition,
    scenario_quiet_stopped,
    scenario_checkpoint_behind,
    scenario_burst,
    scenario_slow,
    scenario_rebalance,
    scenario_deploys,
    scenario_first_deploy,
    scenario_restart,
    scenario_diurnal,
    scenario_backlog,
    scenario_idle,
    scenario_checkpoint_healthy,
    scenario_backlog_clearing,
    scenario_backlog_clearing_checkpoint,
)


def corpus(seeds: tuple[int, ...] = SEEDS) -> list[Trace]:
    """Every scenario with every seed; deterministic (each trace has its own string-seeded generator)."""
    return [make(random.Random(f"{make.__name__}/{seed}"), seed) for seed in seeds for make in SCENARIOS]


# --- detectors -----------------------------------------------------------------------


def _settings(rules: str, pause_learn: float | None = None) -> Settings:
    """The default settings, with the evaluator's cache off (every second is judged afresh);
    `pause_learn`: evaluator.pause-learn instead of its default."""
    ev = dataclasses.replace(EvaluatorSettings(), rules=rules, cache_ttl=0.0)  # type: ignore[arg-type]
    if pause_learn is not None:
        ev = dataclasses.replace(ev, pause_learn=pause_learn)
    return Settings(evaluator=ev)


def _restored(old: State, settings: Settings) -> State:
    """A new State holding what the store would give back after a restart."""
    new = build_state(settings)
    for cluster in old.clusters():
        for group in old.groups(cluster):
            for topic, parts in (old.group_topics(cluster, group) or {}).items():
                for p in parts:
                    new.restore_window((cluster, group, topic, p), old.window(cluster, group, topic, p))
            new.restore_pauses(cluster, group, old.group_pauses(cluster, group))  # group_pauses
        for topic in old.topics(cluster):
            for p, le in old.topic_log_ends(cluster, topic).items():
                new.restore_log_end((cluster, topic, p), *le.history())  # fine and coarse tiers, as stored
    return new


def _is_down(trace: Trace, t: int) -> bool:
    return trace.down is not None and trace.down[0] <= t < trace.down[1]


def lagd_statuses(
    trace: Trace, rules: str = "lagd", refresh: int = OFFSET_REFRESH, pause_learn: float | None = None
) -> list[str]:
    """Per second: lagd's group status (OK, WARN or ERR; OK while lagd is down)."""
    settings = _settings(rules, pause_learn)
    state, evaluator = build_core(settings)
    order = 0
    out: list[str] = []
    missed: list[Commit] = []
    partitions = len(trace.log_end)
    for t in range(DURATION + 1):
        ms = START_MS + t * 1000
        down = _is_down(trace, t)
        back = trace.down is not None and t == trace.down[1]
        if back:
            state = _restored(state, settings)
            evaluator = build_evaluator(settings, state)
            state.apply_many(missed)  # the reader resumes where the stored position says
            missed.clear()
        for p in range(partitions):
            if not down and (t % refresh == 0 or back):
                state.apply(LogEndSample(CLUSTER, TOPIC, p, trace.log_end[p][t], ms))
            off = trace.commits[p][t]
            if off is not None:
                order += 1
                ev = Commit(CLUSTER, GROUP, TOPIC, p, off, order, ms, ms)
                if down:
                    missed.append(ev)
                else:
                    state.apply(ev)
        if down:
            out.append(OK)  # nothing is evaluated while lagd is down
            continue
        status = _judge(evaluator, ms)
        out.append(status)
    return out


def _judge(evaluator: Evaluator, ms: int) -> str:
    status = evaluator.group(CLUSTER, GROUP, ms).status
    return OK if status in (GroupStatus.OK, GroupStatus.NOTFOUND) else status.value


def exporter_lags(trace: Trace) -> tuple[list[int | None], list[float | None]]:
    """Per second: the highest partition lag in records and in seconds the exporter last scraped.

    None while the exporter is down. A scrape reads each partition's log end and committed
    offset at the same moment; lag in seconds interpolates the committed offset in the
    exporter's own log-end samples (one per scrape, kafka-lag-exporter's lookup table): how
    long ago the log end stood there; beyond its oldest sample, the age of that sample.
    The values hold until the next scrape. After a restart the exporter scrapes at once and
    its lookup table starts empty.
    """
    records: list[int | None] = []
    seconds: list[float | None] = []
    partitions = len(trace.log_end)
    committed: list[int | None] = [None] * partitions
    table: list[list[tuple[int, int]]] = [[] for _ in range(partitions)]  # (log end, t) per scrape
    value: int | None = None
    secs: float | None = None
    for t in range(DURATION + 1):
        for p in range(partitions):
            off = trace.commits[p][t]
            if off is not None:
                committed[p] = off
        if _is_down(trace, t):
            value = secs = None
            table = [[] for _ in range(partitions)]
            records.append(None)
            seconds.append(None)
            continue
        if t % SCRAPE_EVERY == 0 or value is None:
            worst, worst_s = 0, 0.0
            for p in range(partitions):
                table[p].append((trace.log_end[p][t], t))
                c = committed[p]
                if c is None:
                    continue
                worst = max(worst, trace.log_end[p][t] - c)
                worst_s = max(worst_s, _seconds_behind(table[p], c, t))
            value, secs = worst, worst_s
        records.append(value)
        seconds.append(secs)
    return records, seconds


def _seconds_behind(table: list[tuple[int, int]], committed: int, now: int) -> float:
    if committed >= table[-1][0]:
        return 0.0
    for i in range(len(table) - 1, 0, -1):
        o0, t0 = table[i - 1]
        o1, t1 = table[i]
        if o0 <= committed < o1:
            reached = t0 + (t1 - t0) * (committed - o0) / (o1 - o0)
            return now - reached
    return float(now - table[0][1])


def threshold_statuses(values: list[int | None] | list[float | None], limit: float, hold: int) -> list[str]:
    """Per second: has the value been above `limit` for `hold` s? No data (exporter down) resets the hold."""
    above_since: int | None = None
    out: list[str] = []
    for t, value in enumerate(values):
        if value is None or value <= limit:
            above_since = None
        elif above_since is None:
            above_since = t
        out.append(ALERT if above_since is not None and t - above_since >= hold else OK)
    return out


def _hold(hold: int) -> str:
    if not hold:
        return ""
    return f" for {hold // 60}m" if hold % 60 == 0 and hold >= 300 else f" for {hold}s"


def rule_name(limit: int, hold: int, unit: str = "") -> str:
    return f"lag{unit}>{limit}{_hold(hold)}"


LAGD, LAGD_BURROW, LAGD_FAST = "lagd", "lagd, burrow rules", f"lagd (offset-refresh {FAST_REFRESH}s)"
# a group watched this long without a pause is judged at stop-after (the default: an hour, past
# every trace): the traces watch each group this long before a problem's onset
QUICK_LEARN = float(ONSET)
LAGD_LEARN = f"lagd (pause-learn {QUICK_LEARN:.0f}s)"
LAGD_RUNS = (LAGD, LAGD_BURROW, LAGD_FAST, LAGD_LEARN)


def threshold_names() -> list[str]:
    return [rule_name(n, h) for n in RECORD_THRESHOLDS for h in HOLDS] + [
        rule_name(s, h, "_s") for s in SECOND_THRESHOLDS for h in HOLDS
    ]


def detector_names() -> list[str]:
    return [*LAGD_RUNS, *threshold_names()]


def statuses_of(trace: Trace) -> dict[str, list[str]]:
    """Every detector's per-second status on one trace."""
    found = {
        LAGD: lagd_statuses(trace),
        LAGD_BURROW: lagd_statuses(trace, "burrow"),
        LAGD_FAST: lagd_statuses(trace, refresh=FAST_REFRESH),
        LAGD_LEARN: lagd_statuses(trace, pause_learn=QUICK_LEARN),
    }
    records, seconds = exporter_lags(trace)
    for h in HOLDS:
        for n in RECORD_THRESHOLDS:
            found[rule_name(n, h)] = threshold_statuses(records, n, h)
        for s in SECOND_THRESHOLDS:
            found[rule_name(s, h, "_s")] = threshold_statuses(seconds, s, h)
    return found


# --- scoring -------------------------------------------------------------------------


def score(trace: Trace, statuses: list[str]) -> Outcome:
    """False alert episodes outside the problem, the delay to the first alert after onset, and flaps.

    Scored from the first second. A flap is a status change after the problem was first
    detected.
    """
    out = Outcome()
    prev = OK
    for t, status in enumerate(statuses):
        alert = status != OK
        if alert and trace.onset is None:
            out.alert_seconds += 1
        if alert and prev == OK and (trace.onset is None or t < trace.onset):
            out.false_alerts += 1
        if trace.onset is not None and t >= trace.onset:
            if out.delay is not None and status != prev:
                out.flaps += 1
            if alert and out.delay is None:
                out.delay = float(t - trace.onset)
        prev = status
    return out


@dataclass(frozen=True)
class Summary:
    """One detector's outcomes summed over some traces."""

    false_alerts: int
    flaps: int
    alert_s: int  # seconds alerting on traces without a problem
    detected: int
    problems: int
    mean_delay_s: float | None
    max_delay_s: float | None

    @property
    def detects_all(self) -> bool:
        return self.detected == self.problems

    def delay(self) -> str:
        if self.mean_delay_s is None:
            return "no detection"
        return f"mean detection delay {self.mean_delay_s} s (max {self.max_delay_s:.0f} s)"


def summarise(outcomes: list[tuple[str, Outcome]]) -> Summary:
    """Sum (kind, outcome) pairs."""
    delays = [o.delay for k, o in outcomes if k == PROBLEM and o.delay is not None]
    return Summary(
        false_alerts=sum(o.false_alerts for _, o in outcomes),
        flaps=sum(o.flaps for _, o in outcomes),
        alert_s=sum(o.alert_seconds for k, o in outcomes if k == FALSE_ALARM),
        detected=len(delays),
        problems=sum(k == PROBLEM for k, _ in outcomes),
        mean_delay_s=round(sum(delays) / len(delays), 1) if delays else None,
        max_delay_s=max(delays) if delays else None,
    )


def best_threshold(totals: dict[str, Summary]) -> tuple[str, bool]:
    """The threshold rule with the fewest false alerts among those detecting every problem (ties: shorter delay).

    Second value False when no rule detects every problem: then the one detecting the most
    (then fewest false alerts, then shorter delay).
    """

    def key(n: str) -> tuple[float, float, float]:
        t = totals[n]
        return (-t.detected, t.false_alerts, t.mean_delay_s if t.mean_delay_s is not None else float("inf"))

    rules = [n for n in totals if n not in LAGD_RUNS]
    complete = [n for n in rules if totals[n].detects_all]
    if complete:
        return min(complete, key=key), True
    return min(rules, key=key), False


@dataclass
class Result:
    scenarios: dict[str, str]  # scenario -> kind, in corpus order
    per_scenario: dict[str, dict[str, Summary]]  # scenario -> detector -> summary over the seeds
    totals: dict[str, Summary]  # detector -> summary over every trace
    best: str  # the threshold rule lagd is compared with
    best_detects_all: bool
    traces: list[str]  # each trace's drawn parameters
    seconds: float


def run() -> Result:
    """Every trace through every detector; totals per scenario and detector, and per detector."""
    started = time.perf_counter()
    names = detector_names()
    rows: list[Row] = []
    traces = corpus()
    for i, trace in enumerate(traces, 1):
        row = Row(trace.name, trace.kind, trace.seed)
        for name, statuses in statuses_of(trace).items():
            row.outcomes[name] = score(trace, statuses)
        rows.append(row)
        print(f"quality progress: {i}/{len(traces)} traces", file=sys.stderr, flush=True)
    scenarios = {r.scenario: r.kind for r in rows}
    per_scenario = {
        s: {n: summarise([(r.kind, r.outcomes[n]) for r in rows if r.scenario == s]) for n in names} for s in scenarios
    }
    totals = {n: summarise([(r.kind, r.outcomes[n]) for r in rows]) for n in names}
    best, complete = best_threshold(totals)
    return Result(
        scenarios=scenarios,
        per_scenario=per_scenario,
        totals=totals,
        best=best,
        best_detects_all=complete,
        traces=[f"{t.name} seed {t.seed}: {t.description}" for t in traces],
        seconds=round(time.perf_counter() - started, 2),
    )


# --- when will it clear? ---------------------------------------------------------------

CLEAR_TOLERANCE = 0.2  # a prediction must be within this share of the drain's whole length of the truth


@dataclass(frozen=True)
class ClearingOutcome:
    """lagd's clear-time predictions on one backlog-clearing trace, asked every 10 s as the API
    answers them (lagd.evaluate.clearing over the group's verdict and windows)."""

    trace: str
    true_clear_s: int
    first_s: int | None  # when the first prediction came (the drain became significant)
    first_error_s: float | None  # its error (predicted - true clear time)
    predictions: int  # predictions made before the true clear time
    within: int  # of those, within CLEAR_TOLERANCE of the drain's length of the truth
    worst_error_share: float  # the largest |error| over the drain's length


def clearing_run(trace: Trace) -> ClearingOutcome:
    """Drive lagd at its defaults through the trace (as `lagd_statuses`) and, every 10 s until the
    true clear time, ask the group's predicted clear time; score each against the truth."""
    assert trace.clears_at is not None
    settings = _settings("lagd")
    state, evaluator = build_core(settings)
    order = 0
    truth = trace.clears_at
    first_s: int | None = None
    first_error: float | None = None
    made = within = 0
    worst = 0.0
    for t in range(truth + 1):
        ms = START_MS + t * 1000
        for p in range(len(trace.log_end)):
            if t % OFFSET_REFRESH == 0:
                state.apply(LogEndSample(CLUSTER, TOPIC, p, trace.log_end[p][t], ms))
            off = trace.commits[p][t]
            if off is not None:
                order += 1
                state.apply(Commit(CLUSTER, GROUP, TOPIC, p, off, order, ms, ms))
        if t % OFFSET_REFRESH or t >= truth:
            continue
        v = evaluator.group(CLUSTER, GROUP, ms)
        parts = (
            (x.topic, x.partition, x.status is PartitionStatus.OK, x.current_lag, x.lag_seconds) for x in v.partitions
        )
        predicted = state_clearings(state, CLUSTER, GROUP, parts)[0]
        if predicted is None:
            continue
        error_s = (predicted.clear_at - START_MS) / 1000.0 - truth
        share = abs(error_s) / truth  # the drain runs from the trace's start to the truth
        if first_s is None:
            first_s, first_error = t, error_s
        made += 1
        within += share <= CLEAR_TOLERANCE
        worst = max(worst, share)
    return ClearingOutcome(f"{trace.name} seed {trace.seed}", truth, first_s, first_error, made, within, worst)


def clearing_report(traces: list[Trace]) -> list[ClearingOutcome]:
    """The clear-time predictions on every backlog-clearing trace, printed a line each."""
    out = []
    for trace in traces:
        if trace.clears_at is None:
            continue
        o = clearing_run(trace)
        out.append(o)
        first = (
            "never"
            if o.first_s is None or o.first_error_s is None
            else f"from {o.first_s} s (first off by {o.first_error_s:+.0f} s, "
            f"{abs(o.first_error_s) / (o.true_clear_s - o.first_s):.0%} of the time then left)"
        )
        print(
            f"quality clearing {o.trace}: true clear at {o.true_clear_s} s; predicted {first}; "
            f"{o.within}/{o.predictions} predictions within {CLEAR_TOLERANCE:.0%} of the drain's length; "
            f"worst {o.worst_error_share:.1%}",
            flush=True,
        )
    return out


METHOD = (
    f"{len(SCENARIOS)} scenarios x {len(SEEDS)} seeds, {DURATION} s each (problem onset at {ONSET} s, scored from "
    f"the first second), log-end samples and exporter scrapes every {OFFSET_REFRESH} s, lagd at its default "
    "settings judged every second; an alert is a group status WARN or ERR (lagd) or the highest partition lag "
    "above N records or S seconds (held for the rule's `for:`)"
)


# --- report --------------------------------------------------------------------------


def _cell(kind: str, s: Summary) -> str:
    if kind == PROBLEM:
        delay = "" if s.mean_delay_s is None else f", {s.mean_delay_s:.0f} s"
        flaps = f", {s.flaps} flaps" if s.flaps else ""
        return f"{s.detected}/{s.problems}{delay}, {s.false_alerts} FA{flaps}"
    return f"{s.false_alerts} FA ({s.alert_s} s)"


def table(result: Result) -> list[str]:
    """Markdown lines: a row per detector, a column per scenario (totals over the seeds).

    Problem cells: detected/total, mean delay, false alerts before the onset, flaps. Other
    cells: false alerts (seconds alerting).
    """
    head = [f"{s} ({k})" for s, k in result.scenarios.items()]
    lines = [
        "| detector | " + " | ".join(head) + " | false alerts | flaps | detected | mean / max delay |",
        "|---|" + "---|" * (len(head) + 4),
    ]
    for name in detector_names():
        t = result.totals[name]
        delay = "-" if t.mean_delay_s is None else f"{t.mean_delay_s:.0f} / {t.max_delay_s:.0f} s"
        cells = [_cell(k, result.per_scenario[s][name]) for s, k in result.scenarios.items()]
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {t.false_alerts} | {t.flaps} | {t.detected}/{t.problems} | {delay} |"
        )
    return lines


def _where(result: Result, name: str, what: str) -> str:
    """Per scenario, a detector's misses, false alerts or flaps."""
    parts = []
    for s, row in result.per_scenario.items():
        x = row[name]
        n = {"missed": x.problems - x.detected, "false": x.false_alerts, "flaps": x.flaps}[what]
        if n:
            parts.append(f"{s} {n}")
    return ", ".join(parts) or "none"


def main() -> int:
    result = run()
    for line in table(result):
        print(line)
    totals = result.totals
    for name in LAGD_RUNS:
        tot = totals[name]
        extra = "" if name == LAGD else " [for reference, not in the targets]"
        print(
            f"quality {name}: detected {tot.detected}/{tot.problems}, false alerts {tot.false_alerts} "
            f"({tot.alert_s} s alerting on false-alarm traces), flaps {tot.flaps}, {tot.delay()}{extra}"
        )
    best, rules = result.best, len(threshold_names())
    b, lagd = totals[best], totals[LAGD]
    if result.best_detects_all:
        print(
            f"quality best threshold rule (fewest false alerts among the {rules} rules, "
            f"of those detecting every problem): {best}: false alerts {b.false_alerts}, {b.delay()}"
        )
    else:
        print(
            f"quality best threshold rule: none of the {rules} threshold rules detects every problem; "
            f"compared instead with the one detecting most, then fewest false alerts: {best}"
        )
    print(
        f"quality lagd vs {best}: detected {lagd.detected}/{lagd.problems} vs {b.detected}/{b.problems} "
        f"(lagd missed: {_where(result, LAGD, 'missed')}; {best} missed: {_where(result, best, 'missed')}); "
        f"false alerts {lagd.false_alerts} vs {b.false_alerts} (lagd: {_where(result, LAGD, 'false')}; "
        f"{best}: {_where(result, best, 'false')}); lagd flaps: {_where(result, LAGD, 'flaps')}"
    )
    for line in result.traces:
        print(f"quality trace {line}")
    print(f"quality: {METHOD}; {result.seconds} s")
    target("lagd true problems detected (share)", lagd.detected / lagd.problems if lagd.problems else 0.0, ">=", 1.0)
    target("lagd false alerts", lagd.false_alerts, "<=", 0)
    target("lagd flaps", lagd.flaps, "<=", 0)
    best_delay = b.mean_delay_s if b.mean_delay_s is not None else 0.0
    lagd_delay = lagd.mean_delay_s if lagd.mean_delay_s is not None else float("inf")
    versus = "the best threshold rule detecting every problem" if result.best_detects_all else "the best threshold rule"
    target(f"lagd mean detection delay vs {versus} ({best}, {best_delay} s)", lagd_delay, "<=", best_delay, "s")
    clearing_summary(clearing_report(corpus()))
    return 0


def clearing_summary(found: list[ClearingOutcome]) -> None:
    made = sum(o.predictions for o in found)
    good = sum(o.within for o in found)
    late = [o.first_s / o.true_clear_s for o in found if o.first_s is not None]
    never = [o.trace for o in found if o.first_s is None]
    print(
        f"quality clearing: {len(found)} traces, {made} predictions (every 10 s once the drain is significant), "
        f"{good} within {CLEAR_TOLERANCE:.0%} of the drain's length of the true clear time; first prediction at "
        f"{min(late, default=0):.0%}-{max(late, default=0):.0%} of the drain; predicted before it cleared: "
        f"{len(late)}/{len(found)} traces (never: {', '.join(never) or 'none'}; a prediction needs 6 commits "
        "from the peak, window-step apart at least)"
    )
    target(
        f"clear-time predictions within {CLEAR_TOLERANCE:.0%} of the truth (share)",
        good / made if made else 0.0,
        ">=",
        1.0,
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["clearing"]:  # the clear-time predictions alone (a minute, not the whole corpus)
        clearing_summary(clearing_report(corpus()))
        sys.exit(0)
    sys.exit(main())
