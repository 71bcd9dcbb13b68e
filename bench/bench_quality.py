"""Scenario quality: lagd's window verdicts against fixed lag thresholds, on labelled traces.

A corpus of simulated incidents, each a pure trace of log-end offsets and commits per
second: true problems (stopped, stalled, falling behind) with a known onset, and false
alarms a threshold raises (bursts, a slow topic that keeps up, rebalances, a daemon
restart). Every trace goes through lagd's own State and Evaluator (no I/O) and through
"lag > N" rules, with and without a `for: 60s` hold as Prometheus alerts use. For each
scenario and detector: false alerts (alert episodes outside the true problem) and
detection delay (seconds from onset to the first alert). Pure and fast: run it with
`python -m bench.bench_quality`.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lagd.evaluate import Evaluator
from lagd.model import Commit, GroupStatus, LogEndSample
from lagd.state.windows import State

CLUSTER, GROUP, TOPIC = "quality", "consumer", "events"
PARTITIONS = 2
DURATION = 300  # seconds per trace
ONSET = 120  # seconds: when a true problem starts
COMMIT_EVERY = 2  # seconds between commits (and log-end samples)
INTERVALS = 10
START_MS = 1_700_000_000_000
THRESHOLDS = (100, 1_000, 10_000)
HOLD_S = 60  # the `for:` of a Prometheus-style threshold alert


@dataclass(frozen=True)
class Trace:
    """Per second t: each partition's log-end offset and the offset committed at t (None: no commit)."""

    name: str
    kind: str  # "problem" or "false alarm"
    description: str
    onset: int | None  # second the true problem starts; None for a false alarm
    log_end: Callable[[int, int], int]  # (partition, t) -> log-end offset
    commit: Callable[[int, int], int | None]  # (partition, t) -> committed offset or None
    restart: tuple[int, int] | None = None  # the daemon is down in [a, b) and restores its state


@dataclass
class Outcome:
    """How one detector did on one trace."""

    false_alerts: int = 0
    delay: float | None = None  # seconds from onset to the first alert; None: not detected
    alert_seconds: int = 0


@dataclass
class Row:
    scenario: str
    kind: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)


def _steady(rate: float) -> Callable[[int, int], int]:
    return lambda p, t: math.floor(rate * (1 + 0.5 * p) * t)


def corpus(seed: int = 7) -> list[Trace]:
    """The labelled scenarios; deterministic for a seed."""
    rng = random.Random(seed)
    every = COMMIT_EVERY

    def commits(f: Callable[[int, int], int | None]) -> Callable[[int, int], int | None]:
        """Commit every COMMIT_EVERY s; offsets never go backwards (a consumer's commits don't)."""
        table: dict[tuple[int, int], int | None] = {}
        for p in range(PARTITIONS):
            high = 0
            for t in range(DURATION + 1):
                off = f(p, t) if t % every == 0 else None
                if off is not None:
                    high = max(high, off)
                    off = high
                table[(p, t)] = off
        return lambda p, t: table[(p, t)]

    noise = {(p, t): rng.randint(0, 120) for p in range(PARTITIONS) for t in range(DURATION + 1)}

    def healthy(end: Callable[[int, int], int]) -> Callable[[int, int], int]:
        """A healthy consumer: 0-120 records behind the log end, varying commit to commit."""
        return lambda p, t: max(0, end(p, t) - noise[(p, t)])

    traces: list[Trace] = []

    end = _steady(200)
    ok = healthy(end)
    traces.append(
        Trace(
            "stopped",
            "problem",
            "consumer healthy, then never commits again while 200-300 msg/s arrive",
            ONSET,
            end,
            commits(lambda p, t: ok(p, t) if t < ONSET else None),
        )
    )
    traces.append(
        Trace(
            "stalled",
            "problem",
            "consumer keeps committing the same offset while the log grows",
            ONSET,
            end,
            commits(lambda p, t: ok(p, min(t, ONSET))),
        )
    )

    def behind(p: int, t: int) -> int:
        if t < ONSET:
            return ok(p, t)
        return ok(p, ONSET) + math.floor(0.9 * (end(p, t) - end(p, ONSET)))

    traces.append(
        Trace(
            "falling-behind",
            "problem",
            "from the onset the consumer handles 90% of the produce rate: lag grows slowly",
            ONSET,
            end,
            commits(behind),
        )
    )

    # Bursts: 20,000 records land at once every 90 s on a quiet topic; the consumer
    # drains 2,500/s and is caught up again within 10 s.
    def burst_end(p: int, t: int) -> int:
        return 10 * t + 20_000 * (1 + (t - 30) // 90 if t >= 30 else 0)

    def burst_commit(p: int, t: int) -> int:
        pos = 0
        for s in range(t + 1):
            pos = min(burst_end(p, s), pos + 2_500)
        return pos

    burst_pos = {(p, t): burst_commit(p, t) for p in range(PARTITIONS) for t in range(DURATION + 1)}
    traces.append(
        Trace(
            "burst",
            "false alarm",
            "20,000-record bursts every 90 s, drained within 10 s",
            None,
            burst_end,
            commits(lambda p, t: burst_pos[(p, t)]),
        )
    )

    # A slow topic: 1,000 msg/s, a consumer steadily 3-7 s behind (batching), never losing ground.
    slow_end = _steady(1_000)
    jitter = {(p, t): rng.randint(3_000, 7_000) for p in range(PARTITIONS) for t in range(DURATION + 1)}
    traces.append(
        Trace(
            "slow-but-keeping-up",
            "false alarm",
            "1,000-1,500 msg/s, the consumer steadily 3,000-7,000 records behind",
            None,
            slow_end,
            commits(lambda p, t: max(0, slow_end(p, t) - jitter[(p, t)])),
        )
    )

    # Rebalances: consumption and commits pause 8 s (shorter than the window), then catch up.
    reb_end = _steady(500)
    reb_ok = healthy(reb_end)
    pauses = ((100, 108), (200, 208))

    def reb_commit(p: int, t: int) -> int | None:
        for a, b in pauses:
            if a <= t < b:
                return None
            if b <= t < b + 6:  # catching up at ~3x
                done = (t - b + 1) / 6
                frozen = reb_end(p, a)
                return frozen + math.floor(done * (reb_end(p, t) - frozen))
        return reb_ok(p, t)

    traces.append(
        Trace(
            "rebalance",
            "false alarm",
            "500-750 msg/s; two rebalances pause the group for 8 s, it then catches up in 6 s",
            None,
            reb_end,
            commits(reb_commit),
        )
    )

    rs_end = _steady(300)
    rs_ok = healthy(rs_end)
    traces.append(
        Trace(
            "daemon-restart",
            "false alarm",
            "healthy group; lagd is down 30 s, restores its windows and re-reads the missed commits",
            None,
            rs_end,
            commits(rs_ok),
            restart=(150, 180),
        )
    )
    return traces


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


def _lagd_alerts(trace: Trace) -> list[bool]:
    """Per second: does lagd's group verdict say WARN or ERR?"""
    state = State(intervals=INTERVALS, lag_samples=360)
    evaluator = Evaluator(state, cache_ttl_ms=0)
    order = 0
    alerts: list[bool] = []
    missed: list[Commit] = []
    for t in range(DURATION + 1):
        ms = START_MS + t * 1000
        down = trace.restart is not None and trace.restart[0] <= t < trace.restart[1]
        if trace.restart is not None and t == trace.restart[1]:
            state = _restored(state)
            evaluator = Evaluator(state, cache_ttl_ms=0)
            state.apply_many(missed)  # the reader resumes where the stored position says
            missed.clear()
        for p in range(PARTITIONS):
            if t % COMMIT_EVERY == 0 and not down:
                state.apply(LogEndSample(CLUSTER, TOPIC, p, trace.log_end(p, t), ms))
            off = trace.commit(p, t)
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


def _threshold_alerts(trace: Trace, limit: int, hold: int) -> list[bool]:
    """Per second: is any partition's lag (last sample minus last commit) above `limit` for `hold` s?"""
    last: dict[int, int] = {}
    ends: dict[int, int] = {}
    above_since: int | None = None
    alerts: list[bool] = []
    for t in range(DURATION + 1):
        for p in range(PARTITIONS):
            if t % COMMIT_EVERY == 0:
                ends[p] = trace.log_end(p, t)
            off = trace.commit(p, t)
            if off is not None:
                last[p] = off
        lag = max((ends.get(p, 0) - last.get(p, 0) for p in range(PARTITIONS) if p in last), default=0)
        if lag <= limit:
            above_since = None
        elif above_since is None:
            above_since = t
        alerts.append(above_since is not None and t - above_since >= hold)
    return alerts


def score(trace: Trace, alerts: list[bool]) -> Outcome:
    """False alert episodes outside the problem, and the delay to the first alert after onset."""
    out = Outcome(alert_seconds=sum(alerts))
    prev = False
    for t, a in enumerate(alerts):
        if a and not prev and (trace.onset is None or t < trace.onset):
            out.false_alerts += 1
        if a and trace.onset is not None and t >= trace.onset and out.delay is None:
            out.delay = float(t - trace.onset)
        prev = a
    return out


def detectors() -> dict[str, Callable[[Trace], list[bool]]]:
    found: dict[str, Callable[[Trace], list[bool]]] = {"lagd": _lagd_alerts}
    for n in THRESHOLDS:
        found[f"lag>{n}"] = lambda tr, n=n: _threshold_alerts(tr, n, 0)  # type: ignore[misc]
        found[f"lag>{n} for {HOLD_S}s"] = lambda tr, n=n: _threshold_alerts(tr, n, HOLD_S)  # type: ignore[misc]
    return found


def run() -> dict[str, object]:
    """Every scenario through every detector; also totals per detector."""
    started = time.perf_counter()
    rows: list[Row] = []
    dets = detectors()
    for trace in corpus():
        row = Row(trace.name, trace.kind)
        for name, det in dets.items():
            row.outcomes[name] = score(trace, det(trace))
        rows.append(row)
    totals: dict[str, dict[str, object]] = {}
    for name in dets:
        outs = [r.outcomes[name] for r in rows]
        problems = [r.outcomes[name] for r in rows if r.kind == "problem"]
        delays = [o.delay for o in problems if o.delay is not None]
        totals[name] = {
            "false_alerts": sum(o.false_alerts for o in outs),
            "detected": f"{len(delays)}/{len(problems)}",
            "mean_delay_s": round(sum(delays) / len(delays), 1) if delays else None,
        }
    return {
        "rows": [
            {
                "scenario": r.scenario,
                "kind": r.kind,
                **{
                    name: {"false_alerts": o.false_alerts, "delay_s": o.delay, "alert_s": o.alert_seconds}
                    for name, o in r.outcomes.items()
                },
            }
            for r in rows
        ],
        "totals": totals,
        "seconds": round(time.perf_counter() - started, 2),
        "method": (
            f"{len(rows)} labelled traces, {DURATION} s each, {PARTITIONS} partitions, commits and log-end "
            f"samples every {COMMIT_EVERY} s, lagd with intervals={INTERVALS}, evaluated every second; "
            "an alert is a group status WARN or ERR (lagd) or max partition lag above N"
        ),
    }


def table(result: dict[str, object]) -> list[str]:
    """Markdown lines: per scenario, `false alerts / delay` per detector."""
    rows = result["rows"]
    assert isinstance(rows, list)
    names = list(detectors())
    lines = [
        "| scenario | kind | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in rows:
        cells = []
        for n in names:
            o = r[n]
            if r["kind"] == "problem":
                delay = "missed" if o["delay_s"] is None else f"{o['delay_s']:.0f} s"
                cells.append(f"{o['false_alerts']} FA, {delay}")
            else:
                cells.append(f"{o['false_alerts']} FA ({o['alert_s']} s)")
        lines.append(f"| {r['scenario']} | {r['kind']} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    result = run()
    for line in table(result):
        print(line)
    totals = result["totals"]
    assert isinstance(totals, dict)
    for name, tot in totals.items():
        print(
            f"quality {name}: false alerts {tot['false_alerts']}, detected {tot['detected']}, "
            f"mean detection delay {tot['mean_delay_s']} s"
        )
    print(f"quality: {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
