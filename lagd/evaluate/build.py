"""The pure core built from settings: State and Evaluator, one way for every caller.

The daemon, `lagd replay` and the benchmarks build them here, so they all run the same
rules with the same knobs.
"""

from __future__ import annotations

from lagd.core.config import Settings
from lagd.core.ruleset import RuleSet, rule_set
from lagd.evaluate.verdicts import Evaluator
from lagd.state.pauses import HANDBACK_GAP_MS, PauseSettings
from lagd.state.windows import State


def build_rules(settings: Settings) -> RuleSet:
    """The rule set the settings choose (evaluator.rules, with its window step)."""
    ev = settings.evaluator
    return rule_set(ev.rules, int(ev.window_step * 1000))


def build_state(settings: Settings) -> State:
    st = settings.storage
    return State(
        intervals=st.intervals,
        min_distance_ms=int(st.min_distance * 1000),
        expire_group_ms=int(st.expire_group * 1000),
        lag_samples=st.lag_samples,
        rules=build_rules(settings),
        pauses=build_pauses(settings),
    )


def build_pauses(settings: Settings) -> PauseSettings | None:
    """The pause limits the settings choose (lagd.state.pauses), or None under Burrow's rules."""
    ev = settings.evaluator
    if ev.rules != "lagd":
        return None
    floor = int(ev.stop_after * 1000)
    ceiling = int(ev.pause_ceiling * 1000) or 2 * floor
    return PauseSettings(
        floor_ms=floor,
        ceiling_ms=max(floor, ceiling),
        default_ms=int(ev.pause_default * 1000) or ceiling,
        margin=ev.pause_margin,
        memory_ms=int(ev.pause_memory * 1000),
        learn_ms=int(ev.pause_learn * 1000),
        min_ms=max(HANDBACK_GAP_MS, int(ev.pause_min * 1000)),
    )


def build_evaluator(settings: Settings, state: State) -> Evaluator:
    ev = settings.evaluator
    evaluator = Evaluator(
        state,
        rules=state.rules,
        allowed_lag=ev.allowed_lag,
        allowed_lag_seconds=ev.allowed_lag_seconds,
        minimum_complete=ev.minimum_complete,
        cache_ttl_ms=int(ev.cache_ttl * 1000),
        min_history_ms=int(ev.min_history * 1000),
        stop_after_ms=int(ev.stop_after * 1000),
        pauses=state.pause_settings,
    )
    evaluator.retention_horizon_ms = {n: int(c.retention_horizon * 1000) for n, c in settings.clusters.items()}
    return evaluator


def build_core(settings: Settings) -> tuple[State, Evaluator]:
    state = build_state(settings)
    return state, build_evaluator(settings, state)
