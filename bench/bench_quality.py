"""Scenario quality: lagd's window verdicts against fixed lag-threshold alerts, on labelled traces.

Corpus. Simulated consumer groups of 2 partitions, each a pure per-second trace of log-end
offsets and commits. Seven scenarios: three true problems with an onset at 600 s (stopped:
no commit from the onset; stalled: the same offset committed again and again; falling
behind: the consumer handles 85-95% of the produce rate, so lag grows slowly) and four
situations a lag threshold tends to flag although nothing needs fixing (bursts of 10,000-
50,000 records on a quiet topic, drained within seconds; a busy topic, 800-1,500 msg/s,
whose consumer is steadily 3-6 s behind; 2-4 rebalances pausing the group 5-30 s each, then catching up at 3x; a 15-120 s
restart of the monitor on a healthy group). Each scenario runs with 5 seeds; a seed draws
the produce rate (200-600 msg/s on one partition, 1.5x that on the other, +-30% from
second to second), the commit interval (1, 2 or 5 s; 5 s is Kafka's auto-commit default)
and the scenario's sizes; every trace's drawn parameters are printed. A healthy consumer
commits what it has processed, which trails the log end by a batch of up to 1 s of
records. Traces last 1,800 s, so even the slowest falling-behind trace (lag growing
>= 15 records/s) crosses 10,000 records, plus a 5-minute hold, well before the end: a
threshold's delay, not the trace length, is what is compared.

Detectors see the same data at the same 10 s resolution. lagd: its own State and
Evaluator (no I/O), intervals=10, allowed-lag 0, log-end offsets sampled every 10 s (the
default offset-refresh), each commit applied when it happens, the group verdict evaluated
every second; an alert is a group status WARN or ERR. A second lagd run with
offset-refresh 1 s is reported for sensitivity only; the targets use
the default. Threshold rules: an exporter scrapes every 10 s and reports each partition's
log end minus its committed offset; the rule alerts when the highest partition lag is above
N (1,000, 5,000 or 10,000 records), at once or held `for: 60s` / `for: 5m` as a
Prometheus alert would. The monitor restart applies to both: while down nothing is
evaluated and nothing alerts; afterwards lagd restores its windows and log-end samples as
its store would and re-reads the commits it missed, while the exporter scrapes at once and
its series went stale meanwhile, so a `for:` hold starts over.

Scoring, the same for every detector. The first 60 s of each trace are a warm-up
(windows fill from empty) and not scored; alert episodes there are printed separately
(lagd judges a one-commit window with lag as STALL, so a cold start raises a brief ERR).
A false alert is an alert episode (off to on) that starts before the onset, or anywhere in
a trace without a problem; detection delay is the time from the onset to the first second
the detector alerts (an alert already on at the onset counts as delay 0). Totals are sums
over all seeds. The summary names the threshold rule with the fewest false alerts among
those that detect every problem (ties: shorter mean delay), compares lagd with it, and
compares delays only over the problem traces both detect.

Limits. The traces are synthetic and their parameter ranges are this benchmark's choices,
not measured production traffic; real groups have more and uneven partitions. Results
depend on offset-refresh against the commit interval: lagd freezes each commit's lag
against the newest log-end sample, so with samples rarer than commits the window's lags
form a sawtooth and the lag-never-decreased rule (WARN) cannot fire (hence the 1 s
sensitivity run); batching noise in the committed offsets works against that rule too. Only record-count thresholds with one
global N are compared: a threshold tuned per group, or a lag-in-seconds rule
(kafka-lag-exporter style), would avoid the slow-topic false alarm and is not measured.
Notification routing, grouping and re-alerting are not modelled. Pure and fast: run it
with `python -m bench.bench_quality`.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import target
from lagd.evaluate import Evaluator
from lagd.model import Commit, GroupStatus, LogEndSample
from lagd.state.windows import State

CLUSTER, GROUP, TOPIC = "quality", "consumer", "events"
PARTITIONS = 2
DURATION = 1_800  # seconds per trace
ONSET = 600  # seconds: when a true problem starts
WARMUP = 60  # seconds at the start of every trace that are not scored (windows fill from empty: 10 commits of 5 s)
SEEDS = (1, 2, 3, 4, 5)
OFFSET_REFRESH = 10  # seconds between log-end samples (lagd's default offset-refresh)
FAST_REFRESH = 1  # a second lagd run, for sensitivity only: offset-refresh 1 s
SCRAPE_EVERY = 10  # seconds between exporter scrapes for the threshold rules (the same resolution)
COMMIT_EVERY = (1, 2, 5)  # a seed picks one: seconds between a consumer's commits
BATCH_S = 1.0  # a healthy consumer's committed offset trails the log end by up to this many seconds of records
INTERVALS = 10
START_MS = 1_700_000_000_000
THRESHOLDS = (1_000, 5_000, 10_000)
HOLDS = (0, 60, 300)  # the `for:` of a Prometheus-style threshold alert, in seconds

PROBLEM, FALSE_ALARM = "problem", "false alarm"


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


@dataclass
class Outcome:
    """How one detector did on one trace."""

    false_alerts: int = 0
    delay: float | None = None  # seconds from onset to the first alert; None: not detected
    alert_seconds: int = 0
    warmup_alerts: int = 0  # alert episodes starting during the warm-up (reported, not scored)


@dataclass
class Row:
    scenario: str
    kind: str
    seed: int
    outcomes: dict[str, Outcome] = field(default_factory=dict)


# --- the corpus ----------------------------------------------------------------------


def _produce(rng: random.Random, rate: float, extra: Callable[[int], int] | None = None) -> list[int]:
    """Log-end offsets per second: `rate` msg/s +-30% from second to second, plus `extra(t)` records at t."""
    end = rng.randrange(1_000_000, 100_000_000)
    out = [end]
    for t in range(1, DURATION + 1):
        end += round(rate * rng.uniform(0.7, 1.3)) + (extra(t) if extra else 0)
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


def _healthy_position(rng: random.Random, ends: list[int], rate: float) -> list[int]:
    """A healthy consumer: processed up to the log end minus a batch, never backwards."""
    pos: list[int] = []
    high = 0
    for end in ends:
        high = max(high, end - _batch(rng, rate))
        pos.append(high)
    return pos


def _rates(rng: random.Random, low: float = 200, high: float = 600) -> list[float]:
    base = rng.uniform(low, high)
    return [base * (1 + 0.5 * p) for p in range(PARTITIONS)]


def scenario_stopped(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits = [
        _commits(rng, every, _healthy_position(rng, e, r), lambda t: t >= ONSET)
        for e, r in zip(ends, rates, strict=True)
    ]
    return Trace(
        "stopped",
        PROBLEM,
        seed,
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; no commit at all from the onset",
        ONSET,
        ends,
        commits,
    )


def scenario_stalled(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits: list[list[int | None]] = []
    for e, r in zip(ends, rates, strict=True):
        pos = _healthy_position(rng, e, r)
        frozen = pos[ONSET]
        commits.append(_commits(rng, every, [p if t < ONSET else frozen for t, p in enumerate(pos)]))
    return Trace(
        "stalled",
        PROBLEM,
        seed,
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; from the onset the same offset again and again",
        ONSET,
        ends,
        commits,
    )


def scenario_falling_behind(rng: random.Random, seed: int) -> Trace:
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    share = rng.uniform(0.85, 0.95)
    ends = [_produce(rng, r) for r in rates]
    commits: list[list[int | None]] = []
    for e, r in zip(ends, rates, strict=True):
        pos = _healthy_position(rng, e, r)
        start = pos[ONSET]
        for t in range(ONSET, DURATION + 1):
            pos[t] = max(pos[t - 1], start + round(share * (e[t] - e[ONSET])) - _batch(rng, r))
        commits.append(_commits(rng, every, pos))
    return Trace(
        "falling-behind",
        PROBLEM,
        seed,
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; from the onset the consumer handles "
        f"{share:.0%} of the produce rate (lag grows {(1 - share) * rates[0]:.0f}-{(1 - share) * rates[-1]:.0f}/s)",
        ONSET,
        ends,
        commits,
    )


def scenario_burst(rng: random.Random, seed: int) -> Trace:
    """A quiet topic that a batch job floods now and then; the consumer drains each burst in seconds."""
    every = rng.choice(COMMIT_EVERY)
    rate = rng.uniform(5, 20)
    size = rng.randrange(10_000, 50_000)  # records per partition per burst
    period = rng.randrange(120, 300)
    drain = rng.uniform(2_000, 5_000)  # records/s the consumer processes when behind
    first = rng.randrange(30, period)
    ends, commits = [], []
    for _ in range(PARTITIONS):
        e = _produce(rng, rate, lambda t: size if t >= first and (t - first) % period == 0 else 0)
        pos: list[int] = []
        high = 0
        for t, end in enumerate(e):
            high = max(high, min(end - _batch(rng, rate), (pos[t - 1] if t else end) + round(drain)))
            pos.append(high)
        ends.append(e)
        commits.append(_commits(rng, every, pos))
    return Trace(
        "burst",
        FALSE_ALARM,
        seed,
        f"{rate:.0f} msg/s plus {size:,} records per partition every {period} s, drained at {drain:,.0f}/s "
        f"(within {size / drain:.0f} s), commits every {every} s",
        None,
        ends,
        commits,
    )


def scenario_slow(rng: random.Random, seed: int) -> Trace:
    """A busy topic whose consumer works in big batches: steadily seconds behind, never losing ground."""
    every = rng.choice(COMMIT_EVERY)
    rates = _rates(rng, 800, 1_500)
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
    return Trace(
        "slow-but-keeping-up",
        FALSE_ALARM,
        seed,
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, the consumer steadily {behind:.1f} s (+-1.5 s) behind, "
        f"commits every {every} s",
        None,
        ends,
        commits,
    )


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
    return Trace(
        "rebalance",
        FALSE_ALARM,
        seed,
        f"{rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; {count} rebalances pause the group "
        f"{', '.join(f'{b - a} s' for a, b in pauses)}, then it catches up at 3x",
        None,
        ends,
        commits,
    )


def scenario_restart(rng: random.Random, seed: int) -> Trace:
    """A healthy group while the monitor (lagd, or the exporter behind the threshold rule) restarts."""
    rates, every = _rates(rng), rng.choice(COMMIT_EVERY)
    ends = [_produce(rng, r) for r in rates]
    commits = [_commits(rng, every, _healthy_position(rng, e, r)) for e, r in zip(ends, rates, strict=True)]
    a = rng.randrange(300, DURATION - 300)
    down = (a, a + rng.randint(15, 120))
    return Trace(
        "monitor-restart",
        FALSE_ALARM,
        seed,
        f"healthy, {rates[0]:.0f}-{rates[-1]:.0f} msg/s, commits every {every} s; the monitor is down "
        f"{down[1] - down[0]} s",
        None,
        ends,
        commits,
        down=down,
    )


SCENARIOS: tuple[Callable[[random.Random, int], Trace], ...] = (
    scenario_stopped,
    scenario_stalled,
    scenario_falling_behind,
    scenario_burst,
    scenario_slow,
    scenario_rebalance,
    scenario_restart,
)


def corpus(seeds: tuple[int, ...] = SEEDS) -> list[Trace]:
    """Every scenario with every seed; deterministic (each trace has its own string-seeded generator)."""
    return [make(random.Random(f"{make.__name__}/{seed}"), seed) for seed in seeds for make in SCENARIOS]


# --- detectors -----------------------------------------------------------------------


def _restored(old: State) -> State:
    """A new State holding what the store would give back after a restart."""
    new = State(intervals=old.intervals, lag_samples=old.lag_samples)
    for cluster in old.clusters():
        for group in old.groups(cluster):
            for topic, parts in (old.group_topics(cluster, group) or {}).items():
                for p in parts:
                    new.restore_window((cluster, group, topic, p), old.window(cluster, group, topic, p))
        for topic in old.topics(cluster):
            for p in range(PARTITIONS):
                offsets, ts = old.log_end_samples(cluster, topic, p)
                if offsets:
                    new.restore_log_end((cluster, topic, p), list(offsets), list(ts))
    return new


def _is_down(trace: Trace, t: int) -> bool:
    return trace.down is not None and trace.down[0] <= t < trace.down[1]


def _lagd_alerts(trace: Trace, refresh: int = OFFSET_REFRESH) -> list[bool]:
    """Per second: does lagd's group verdict say WARN or ERR? Log-end samples every `refresh` s."""
    state = State(intervals=INTERVALS, lag_samples=360)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    order = 0
    alerts: list[bool] = []
    missed: list[Commit] = []
    for t in range(DURATION + 1):
        ms = START_MS + t * 1000
        down = _is_down(trace, t)
        back = trace.down is not None and t == trace.down[1]
        if back:
            state = _restored(state)
            evaluator = Evaluator(state, cache_ttl_ms=0)
            state.apply_many(missed)  # the reader resumes where the stored position says
            missed.clear()
        for p in range(PARTITIONS):
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
            alerts.append(False)  # nothing is evaluated while lagd is down
            continue
        verdict = evaluator.group(CLUSTER, GROUP, ms)
        alerts.append(verdict.status in (GroupStatus.WARN, GroupStatus.ERR))
    return alerts


def exporter_lag(trace: Trace) -> list[int | None]:
    """Per second: the highest partition lag the exporter last scraped (None: exporter down).

    A scrape reads each partition's log end and committed offset at the same moment; the
    value holds until the next scrape. After a restart the exporter scrapes at once.
    """
    out: list[int | None] = []
    committed: list[int | None] = [None] * PARTITIONS
    value: int | None = None
    for t in range(DURATION + 1):
        for p in range(PARTITIONS):
            off = trace.commits[p][t]
            if off is not None:
                committed[p] = off
        if _is_down(trace, t):
            value = None
            out.append(None)
            continue
        if t % SCRAPE_EVERY == 0 or value is None:
            lags = [trace.log_end[p][t] - c for p, c in enumerate(committed) if c is not None]
            value = max(0, *lags) if lags else 0
        out.append(value)
    return out


def threshold_alerts(lag: list[int | None], limit: int, hold: int) -> list[bool]:
    """Per second: has the lag been above `limit` for `hold` s? No data (exporter down) resets the hold."""
    above_since: int | None = None
    alerts: list[bool] = []
    for t, value in enumerate(lag):
        if value is None or value <= limit:
            above_since = None
        elif above_since is None:
            above_since = t
        alerts.append(above_since is not None and t - above_since >= hold)
    return alerts


def rule_name(limit: int, hold: int) -> str:
    if not hold:
        return f"lag>{limit}"
    return f"lag>{limit} for {hold // 60}m" if hold % 60 == 0 and hold >= 300 else f"lag>{limit} for {hold}s"


LAGD, LAGD_FAST = "lagd", f"lagd (offset-refresh {FAST_REFRESH}s)"


def detector_names() -> list[str]:
    return [LAGD, LAGD_FAST, *(rule_name(n, h) for n in THRESHOLDS for h in HOLDS)]


def alerts_of(trace: Trace) -> dict[str, list[bool]]:
    """Every detector's per-second alerts on one trace."""
    found = {LAGD: _lagd_alerts(trace), LAGD_FAST: _lagd_alerts(trace, FAST_REFRESH)}
    lag = exporter_lag(trace)
    for n in THRESHOLDS:
        for h in HOLDS:
            found[rule_name(n, h)] = threshold_alerts(lag, n, h)
    return found


# --- scoring -------------------------------------------------------------------------


def score(trace: Trace, alerts: list[bool]) -> Outcome:
    """False alert episodes outside the problem, and the delay to the first alert after onset.

    The warm-up is not scored: its alert episodes are only counted in `warmup_alerts`; one
    still on when the warm-up ends counts as a scored episode too.
    """
    out = Outcome(alert_seconds=sum(alerts[WARMUP:]))
    prev = False
    for t, a in enumerate(alerts):
        if t < WARMUP:
            out.warmup_alerts += a and not prev
            prev = a
            continue
        if t == WARMUP:
            prev = False
        if a and not prev and (trace.onset is None or t < trace.onset):
            out.false_alerts += 1
        if a and trace.onset is not None and t >= trace.onset and out.delay is None:
            out.delay = float(t - trace.onset)
        prev = a
    return out


@dataclass(frozen=True)
class Summary:
    """One detector's outcomes summed over some traces."""

    false_alerts: int
    warmup_alerts: int
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
        warmup_alerts=sum(o.warmup_alerts for _, o in outcomes),
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

    rules = [n for n in totals if not n.startswith(LAGD)]
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
    paired: int  # problem traces both lagd and the best rule detect ...
    paired_lagd_s: float | None  # ... and their mean delays over those traces
    paired_best_s: float | None
    traces: list[str]  # each trace's drawn parameters
    seconds: float


def run() -> Result:
    """Every trace through every detector; totals per scenario and detector, and per detector."""
    started = time.perf_counter()
    names = detector_names()
    rows: list[Row] = []
    traces = corpus()
    for trace in traces:
        row = Row(trace.name, trace.kind, trace.seed)
        for name, alerts in alerts_of(trace).items():
            row.outcomes[name] = score(trace, alerts)
        rows.append(row)
    scenarios = {r.scenario: r.kind for r in rows}
    per_scenario = {
        s: {n: summarise([(r.kind, r.outcomes[n]) for r in rows if r.scenario == s]) for n in names} for s in scenarios
    }
    totals = {n: summarise([(r.kind, r.outcomes[n]) for r in rows]) for n in names}
    best, complete = best_threshold(totals)
    both = [
        (a, b)
        for r in rows
        if r.kind == PROBLEM and (a := r.outcomes[LAGD].delay) is not None and (b := r.outcomes[best].delay) is not None
    ]
    return Result(
        scenarios=scenarios,
        per_scenario=per_scenario,
        totals=totals,
        best=best,
        best_detects_all=complete,
        paired=len(both),
        paired_lagd_s=round(sum(a for a, _ in both) / len(both), 1) if both else None,
        paired_best_s=round(sum(b for _, b in both) / len(both), 1) if both else None,
        traces=[f"{t.name} seed {t.seed}: {t.description}" for t in traces],
        seconds=round(time.perf_counter() - started, 2),
    )


METHOD = (
    f"{len(SCENARIOS)} scenarios x {len(SEEDS)} seeds, {DURATION} s each (problem onset at {ONSET} s, first "
    f"{WARMUP} s not scored), {PARTITIONS} partitions, log-end samples and exporter scrapes every {OFFSET_REFRESH} s, "
    f"lagd intervals={INTERVALS} evaluated every second; an alert is a group status WARN or ERR (lagd) or the "
    "highest partition lag above N (held for the rule's `for:`)"
)


# --- report --------------------------------------------------------------------------


def _cell(kind: str, s: Summary) -> str:
    if kind == PROBLEM:
        delay = "" if s.mean_delay_s is None else f", {s.mean_delay_s:.0f} s"
        return f"{s.detected}/{s.problems}{delay}, {s.false_alerts} FA"
    return f"{s.false_alerts} FA ({s.alert_s} s)"


def table(result: Result) -> list[str]:
    """Markdown lines: a row per detector, a column per scenario (totals over the seeds).

    Problem cells: detected/total, mean delay, false alerts before the onset. Other cells:
    false alerts (seconds alerting).
    """
    head = [f"{s} ({k})" for s, k in result.scenarios.items()]
    lines = [
        "| detector | " + " | ".join(head) + " | false alerts | detected | mean / max delay |",
        "|---|" + "---|" * (len(head) + 3),
    ]
    for name in detector_names():
        t = result.totals[name]
        delay = "-" if t.mean_delay_s is None else f"{t.mean_delay_s:.0f} / {t.max_delay_s:.0f} s"
        cells = [_cell(k, result.per_scenario[s][name]) for s, k in result.scenarios.items()]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {t.false_alerts} | {t.detected}/{t.problems} | {delay} |"
        )
    return lines


def _where(result: Result, name: str, missed: bool) -> str:
    """Per scenario, a detector's misses (missed=True) or false alerts."""
    parts = []
    for s, row in result.per_scenario.items():
        x = row[name]
        n = x.problems - x.detected if missed else x.false_alerts
        if n:
            parts.append(f"{s} {n}")
    return ", ".join(parts) or "none"


def main() -> int:
    result = run()
    for line in table(result):
        print(line)
    totals = result.totals
    for name, tot in totals.items():
        warm = f", {tot.warmup_alerts} more in the unscored warm-up" if tot.warmup_alerts else ""
        sensitivity = " [sensitivity run, not in the targets]" if name == LAGD_FAST else ""
        print(
            f"quality {name}: detected {tot.detected}/{tot.problems}, false alerts {tot.false_alerts} "
            f"({tot.alert_s} s alerting on false-alarm traces{warm}), {tot.delay()}{sensitivity}"
        )
    best, rules = result.best, len(THRESHOLDS) * len(HOLDS)
    b, lagd = totals[best], totals[LAGD]
    if result.best_detects_all:
        print(
            f"quality best threshold rule (fewest false alerts among the {rules} rules, "
            f"of those detecting every problem): {best}"
        )
    else:
        print(
            f"quality best threshold rule: none of the {rules} threshold rules detects every problem; "
            f"compared instead with the one detecting most, then fewest false alerts: {best}"
        )
    print(
        f"quality lagd vs {best}: detected {lagd.detected}/{lagd.problems} vs {b.detected}/{b.problems} "
        f"(lagd missed: {_where(result, LAGD, True)}; {best} missed: {_where(result, best, True)}); "
        f"false alerts {lagd.false_alerts} vs {b.false_alerts} (lagd: {_where(result, LAGD, False)}; "
        f"{best}: {_where(result, best, False)})"
    )
    if result.paired:
        print(
            f"quality lagd vs {best}: mean detection delay over the {result.paired} problem traces both detect: "
            f"{result.paired_lagd_s} s vs {result.paired_best_s} s"
        )
    else:
        print(f"quality lagd vs {best}: no problem trace is detected by both, so no delay comparison")
    for line in result.traces:
        print(f"quality trace {line}")
    print(f"quality: {METHOD}; {result.seconds} s")
    target("lagd true problems detected (share)", lagd.detected / lagd.problems if lagd.problems else 0.0, ">=", 1.0)
    target("lagd false alerts", lagd.false_alerts, "<=", 0)
    versus = "the best threshold rule detecting every problem" if result.best_detects_all else "the best threshold rule"
    target(f"lagd false alerts vs {versus} ({best})", lagd.false_alerts, "<=", b.false_alerts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
