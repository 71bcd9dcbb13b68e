"""A group's history of pauses and the STOP limit it earns (lagd.state.pauses), and the STOP
reason that says which limit applied and why."""

from __future__ import annotations

import dataclasses

from lagd.core.config import EvaluatorSettings, Settings
from lagd.core.model import Commit, GroupStatus, LogEndSample
from lagd.evaluate.build import build_core
from lagd.evaluate.lagd_rules import STOPPED, words
from lagd.state.pauses import (
    EARNED,
    MAX_PAUSES,
    NO_HISTORY,
    PauseSettings,
    add_pause,
    forget_old,
    is_pause,
    longest,
    stop_floor,
)

S = PauseSettings()  # floor 60 s, ceiling 120 s, default 120 s, margin 1.5, memory 7 d, learn 1 h, min 20 s
T0 = 1_700_000_000_000
DAY = 24 * 3600 * 1000


def test_a_pause_is_a_long_silence_the_group_came_back_from_before_the_ceiling() -> None:
    assert is_pause(20_000, 1_000, S)
    assert not is_pause(19_999, 1_000, S)  # shorter than pause-min
    assert not is_pause(60_000, 30_000, S)  # two intervals of a consumer committing every 30 s
    assert is_pause(91_000, 30_000, S)  # more than three
    assert is_pause(120_000, 5_000, S)
    assert not is_pause(120_001, 5_000, S)  # past the ceiling: it was STOP, an outage
    assert not is_pause(60_000, 0, S)  # the partition's second commit: its cadence unknown


def test_adding_a_pause_is_idempotent_and_bounded() -> None:
    h = add_pause((T0,), T0 + 100_000, 40_000)
    assert h == (T0, T0 + 100_000, 40_000)
    assert add_pause(h, T0 + 100_000, 40_000) == h  # the same commit applied again
    assert add_pause(h, T0 + 90_000, 30_000) == h  # an older one (a replay)
    h = add_pause(h, T0 + 300_000, 75_000)
    assert h == (T0, T0 + 100_000, 40_000, T0 + 300_000, 75_000)
    for k in range(40):
        h = add_pause(h, T0 + 10**6 * (k + 1), 20_000 + k)
    assert len(h) == 1 + 2 * MAX_PAUSES and h[0] == T0 and h[-1] == 20_039  # the newest kept
    assert add_pause((), T0 + 50_000, 30_000) == (T0 + 20_000, T0 + 50_000, 30_000)  # watched since the pause began


def test_old_pauses_are_forgotten() -> None:
    h = (T0, T0 + 1_000, 90_000, T0 + 3 * DAY, 30_000)
    assert forget_old(h, T0 + 7 * DAY, 7 * DAY) == h
    assert forget_old(h, T0 + 8 * DAY, 7 * DAY) == (T0, T0 + 3 * DAY, 30_000)
    assert forget_old(h, T0 + 11 * DAY, 7 * DAY) == (T0,)
    assert longest(h, T0 + 7 * DAY, 7 * DAY) == 90_000
    assert longest(h, T0 + 8 * DAY, 7 * DAY) == 30_000  # the 90 s one is past the memory


def test_the_limit_is_the_longest_pause_times_the_margin_within_floor_and_ceiling() -> None:
    now = T0 + 2 * 3600_000
    assert stop_floor((T0, T0 + 1_000, 60_000), now, S) == (90_000, 60_000.0)
    assert stop_floor((T0, T0 + 1_000, 30_000), now, S) == (60_000, 30_000.0)  # the floor: stop-after
    assert stop_floor((T0, T0 + 1_000, 100_000), now, S) == (120_000, 100_000.0)  # the ceiling
    # no pause: the default while the group is new to lagd, stop-after once watched pause-learn without one
    assert stop_floor((T0,), T0 + 59 * 60_000, S) == (120_000, NO_HISTORY)
    assert stop_floor((T0,), T0 + 60 * 60_000, S) == (60_000, EARNED)
    assert stop_floor((), now, S) == (120_000, NO_HISTORY)
    # a pause forgotten: as if none (watched long enough)
    assert stop_floor((T0, T0 + 1_000, 60_000), T0 + 8 * DAY, S) == (60_000, EARNED)


def test_the_stop_reason_says_which_limit_applied_and_why() -> None:
    def said(limit: int, pause: float, floor: int) -> str:
        return words((STOPPED, 131_000, limit, pause, float(floor), 140.0))

    assert said(132_000, 88_000.0, 132_000) == (
        "silent 131 s (limit 132 s: this group's pauses have lasted up to 88 s) while records wait 140 s"
    )
    assert (
        said(120_000, NO_HISTORY, 120_000)
        == "silent 131 s (no pause history: default limit 120 s) while records wait 140 s"
    )
    assert (
        said(60_000, EARNED, 60_000)
        == "silent 131 s (limit 60 s: no pause seen while watched) while records wait 140 s"
    )
    assert said(90_000, 88_000.0, 60_000) == "silent 131 s (limit 90 s: 3 commit intervals) while records wait 140 s"
    assert said(60_000, -1.0, 60_000) == "silent 131 s (limit 60 s) while records wait 140 s"


def _judged(pauses_s: list[int], silence_s: int) -> tuple[GroupStatus, str]:
    """A group committing every second with deploys of `pauses_s` (one every 5 minutes), then
    silent for `silence_s`, judged by the evaluator the daemon builds (default settings)."""
    state, evaluator = build_core(Settings(evaluator=dataclasses.replace(EvaluatorSettings(), cache_ttl=0.0)))
    t, offset = 0, 0
    silent_from: list[tuple[int, int]] = []
    at = 60
    for p in pauses_s:
        silent_from.append((at, at + p))
        at += 300
    end = at
    while t < end:
        if not any(a <= t < b for a, b in silent_from):
            state.apply(Commit("c", "g", "t", 0, offset, t, T0 + 1000 * t, T0 + 1000 * t))
        if t % 10 == 0:
            state.apply(LogEndSample("c", "t", 0, 100 * t + 100, T0 + 1000 * t))
        offset = 100 * t
        t += 1
    for s in range(10, silence_s + 1, 10):
        state.apply(LogEndSample("c", "t", 0, 100 * (end + s) + 100, T0 + 1000 * (end + s)))
    verdict = evaluator.group("c", "g", T0 + 1000 * (end + silence_s))
    return verdict.status, next((str(p.reason) for p in verdict.partitions if p.rule == "stop"), "")


def test_a_group_is_judged_against_its_own_pauses() -> None:
    # deploys of up to 70 s: 75 s of silence is one more deploy, 110 s is STOP
    assert _judged([60, 70], 75)[0] is GroupStatus.OK
    status, reason = _judged([60, 70], 110)
    assert status is GroupStatus.ERR
    assert "this group's pauses have lasted up to 7" in reason, reason
    # a group new to lagd: a 90 s silence is not STOP, 125 s is
    assert _judged([], 90)[0] is GroupStatus.OK
    status, reason = _judged([], 125)
    assert status is GroupStatus.ERR and "no pause history: default limit 120 s" in reason, reason
