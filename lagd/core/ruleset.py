"""Which rules judge partitions, chosen once from `evaluator.rules`.

lagd's rules (the default) and Burrow's differ in what State keeps and in how the Evaluator
judges: lagd's windows keep their entries older than the newest two at least `window-step`
apart, and its judge (LagdJudge) reads lag in time and judges the time-driven rules as of
the moment lagd last saw the cluster whole; Burrow's windows are the last `intervals`
commits, judged as Burrow 1.x does, as of now. A `RuleSet` carries both; `rule_set` builds
it from the setting, the only place the setting's name is compared. State takes its
window step from it, the Evaluator its judge, config the fewest intervals it needs.

Plain data, no imports from lagd: every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMES = ("lagd", "burrow")  # the values evaluator.rules takes
MIN_INTERVALS_LAGD = 6  # a Mann-Kendall trend over fewer commits can never reach significance


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules lagd runs: what State and the Evaluator need of them."""

    name: str  # evaluator.rules' value, as the API reports it
    # State: entries older than the newest two are kept at least this far apart (ms), so a
    # window of `intervals` commits spans minutes whatever the commit cadence; 0: the last
    # `intervals` commits (Burrow's ring).
    window_step_ms: int
    # Evaluator: True, lagd's judge (LagdJudge: exact lag in time, trend, hysteresis, judged as
    # of lagd's sight of the cluster); False, Burrow's (rules.judge_flat, as of now).
    lagd_judge: bool
    min_intervals: int  # the fewest storage.intervals the judge can work with


BURROW = RuleSet("burrow", window_step_ms=0, lagd_judge=False, min_intervals=1)


def lagd_rules(window_step_ms: int = 0) -> RuleSet:
    """lagd's rules, windows spaced `window_step_ms` apart (0: every commit kept, as Burrow's)."""
    return RuleSet("lagd", window_step_ms=window_step_ms, lagd_judge=True, min_intervals=MIN_INTERVALS_LAGD)


LAGD = lagd_rules()  # lagd's judge over Burrow's window of the last `intervals` commits (tests, benchmarks)


def rule_set(name: str, window_step_ms: int = 0) -> RuleSet:
    """The rule set `evaluator.rules = name` chooses; `window_step_ms` applies to lagd's only."""
    if name == "lagd":
        return lagd_rules(window_step_ms)
    if name == "burrow":
        return BURROW
    raise ValueError(f"evaluator.rules must be one of {', '.join(NAMES)}, got {name!r}: check evaluator.rules")
