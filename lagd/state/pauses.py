"""A group's history of pauses, and the STOP limit it earns. Pure: numbers in, numbers out.

A pause is a silence of the whole group (no commit from any of its partitions) longer than a
few commit intervals that the group came back from on its own: a rolling deploy, a rebalance.
lagd keeps per group when its recent pauses ended and how long they lasted (beside its windows,
lagd.state.windows; persisted in `group_pauses`), forgets them after `memory_ms`, and judges a
silence against them (lagd_rules.stop_limit reads the result as the partition's stop floor):

- pauses seen: the longest recent one times `margin`, within [stop-after, ceiling];
- none, and the group watched for less than `learn_ms`: `default_ms` (so a deploy of a group
  lagd has only just met does not page);
- none, and watched for `learn_ms` or longer without one: stop-after (a group that never
  paused is caught at the floor; its first deploy after that pages once, and is learned).

History: a flat tuple (since, end1, length1, end2, length2, ...) in ms, pauses oldest first;
`since` is when lagd began watching the group. At most MAX_PAUSES pauses are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

Pauses = tuple[int, ...]
MAX_PAUSES = 16
# The shortest pause-min: the compiled commit apply (lagd/state/_apply.c) hands each commit ending
# a group silence of pause-min (and more than `cadences` commit intervals) to the Python.
HANDBACK_GAP_MS = 10_000

# What the limit rests on (LagdParams.pause_ms, shown in the STOP reason): the longest recent
# pause (ms, > 0), or one of these.
NO_HISTORY = 0.0  # no pause seen, the group watched for less than learn: the default limit
EARNED = -2.0  # no pause seen over learn or longer: stop-after
FIXED = -1.0  # pause limits off: stop-after as always


@dataclass(frozen=True, slots=True)
class PauseSettings:
    """The [evaluator] pause-* settings, in ms (see lagd.core.config)."""

    floor_ms: int = 60_000  # stop-after
    ceiling_ms: int = 120_000
    default_ms: int = 120_000
    margin: float = 1.5
    memory_ms: int = 7 * 24 * 3600 * 1000
    learn_ms: int = 3600 * 1000
    min_ms: int = 20_000
    cadences: int = 3


def is_pause(gap_ms: int, cadence_ms: int, s: PauseSettings) -> bool:
    """Is a group silence of `gap_ms`, ended by a commit of a partition whose newest commit
    interval was `cadence_ms` (0: unknown, a single commit before: no pause), a pause: at least
    pause-min, longer than `cadences` commit intervals, and not past the ceiling (a longer
    silence was an outage: it went STOP at the ceiling at the latest)?"""
    return cadence_ms > 0 and gap_ms >= s.min_ms and gap_ms > s.cadences * cadence_ms and gap_ms <= s.ceiling_ms


def add_pause(history: Pauses, end_ms: int, length_ms: int) -> Pauses:
    """`history` with the pause that ended at `end_ms` after `length_ms`. Idempotent: a pause
    ending at or before the newest kept end (the same commit applied again, a replay) adds
    nothing. The oldest pauses leave beyond MAX_PAUSES."""
    since = history[0] if history else end_ms - length_ms
    pairs = history[1:]
    if pairs and end_ms <= pairs[-2]:
        return history
    pairs = (*pairs, end_ms, length_ms)[-2 * MAX_PAUSES :]
    return (since, *pairs)


def forget_old(history: Pauses, now_ms: int, memory_ms: int) -> Pauses:
    """`history` without the pauses that ended more than `memory_ms` before `now_ms`."""
    pairs = history[1:]
    k = 0
    while k < len(pairs) and pairs[k] < now_ms - memory_ms:
        k += 2
    return history if k == 0 else (history[0], *pairs[k:])


def longest(history: Pauses, now_ms: int, memory_ms: int) -> int:
    """The longest pause that ended within `memory_ms` before `now_ms` (0: none)."""
    pairs = history[1:]
    return max((pairs[i + 1] for i in range(0, len(pairs), 2) if pairs[i] >= now_ms - memory_ms), default=0)


def stop_floor(history: Pauses, now_ms: int, s: PauseSettings) -> tuple[int, float]:
    """(the group's stop floor in ms, what it rests on: the longest recent pause in ms, or
    NO_HISTORY or EARNED). lagd_rules.stop_limit still raises it to `cadences` commit intervals."""
    top = longest(history, now_ms, s.memory_ms)
    if top > 0:
        return max(s.floor_ms, min(s.ceiling_ms, round(top * s.margin))), float(top)
    if history and now_ms - history[0] >= s.learn_ms:
        return s.floor_ms, EARNED
    return max(s.floor_ms, s.default_ms), NO_HISTORY
