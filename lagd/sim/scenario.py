"""Workload scenarios: what producers write and what each consumer group commits, over time.

Pure and deterministic: `log_end(topic, partition, t)` and `committed(group, topic,
partition, t)` are functions of scenario time `t` (seconds since the scenario started), and
`step(scenario, t0, t1)` says what happens between two instants. The driver (driver.py)
turns steps into real records on a real broker; tests compare what lagd saw with these
numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Pattern = Literal["steady", "bursty", "idle"]
Behaviour = Literal["healthy", "draining", "lagging", "stalled", "stopped", "rewinding", "recovering", "deleted"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic and how fast it grows. Partition p writes `rate * (1 + 0.25 * (p % 4))` records/s,
    so partitions of one topic differ; "bursty" writes a burst's worth every `burst_every` s;
    "idle" holds `initial` records and never grows. `deleted_at`: the topic is deleted then."""

    name: str
    partitions: int = 8
    rate: float = 1.0
    pattern: Pattern = "steady"
    burst_every: float = 5.0
    initial: int = 0
    deleted_at: float | None = None


@dataclass(frozen=True)
class GroupSpec:
    """A consumer group and its behaviour (`at` is when the behaviour's change happens):

    - healthy: commits the log-end offset every tick;
    - draining: a consumer of bounded capacity, `speed` times the partition's average rate
      (> 1): on a bursty topic each burst is a backlog it works off before the next one, so
      lag spikes and falls back to 0 (a threshold alert fires, lagd rightly does not); on a
      steady topic it keeps up like a healthy one;
    - lagging: commits `speed` x the log-end offset (lag grows);
    - stalled: commits the offset it had at `at` again and again while the log grows;
    - stopped: healthy until `at`, then never commits again;
    - rewinding: healthy, at `at` goes back `rewind_by` records and stays that far behind;
      with `every` > 0 it is a crash loop instead: from `at` on it restarts every `every` s
      from the same checkpoint (`rewind_by` before the log end at `at`) and reprocesses at
      the produce rate, so every window holds an unrecovered backward step;
    - recovering: lagging until `at`, then catches up at twice the produce rate;
    - deleted: healthy until `at`, then the group is deleted.
    """

    name: str
    topics: tuple[str, ...]
    behaviour: Behaviour = "healthy"
    speed: float = 0.5
    at: float = 0.0
    rewind_by: int = 5
    every: float = 0.0


@dataclass(frozen=True)
class Scenario:
    topics: tuple[TopicSpec, ...]
    groups: tuple[GroupSpec, ...]
    tick: float = 1.0
    start_ms: int = 1_700_000_000_000
    _topics: dict[str, TopicSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_topics", {t.name: t for t in self.topics})
        for g in self.groups:
            for name in g.topics:
                if name not in self._topics:
                    raise ValueError(
                        f"group {g.name!r} consumes unknown topic {name!r}; add it to the scenario's topics"
                    )

    def topic(self, name: str) -> TopicSpec:
        return self._topics[name]

    def ts_ms(self, t: float) -> int:
        """Wall-clock milliseconds of scenario time `t` (commit timestamps in topic mode)."""
        return self.start_ms + round(t * 1000)


def partition_rate(topic: TopicSpec, partition: int) -> float:
    return topic.rate * (1 + 0.25 * (partition % 4))


def log_end(topic: TopicSpec, partition: int, t: float) -> int:
    """Records in the partition at time t (its log-end offset), frozen once the topic is deleted."""
    if topic.deleted_at is not None:
        t = min(t, topic.deleted_at)
    t = max(t, 0.0)
    if topic.pattern == "idle":
        return topic.initial
    rate = partition_rate(topic, partition)
    if topic.pattern == "bursty":
        bursts = math.floor(t / topic.burst_every + 1e-9)
        return topic.initial + math.floor(bursts * topic.burst_every * rate + 1e-9)
    return topic.initial + math.floor(t * rate + 1e-9)


def alive(group: GroupSpec, t: float) -> bool:
    return not (group.behaviour == "deleted" and t >= group.at)


def commits_at(group: GroupSpec, t: float) -> bool:
    """Does the group commit at time t? (stopped and deleted groups fall silent at `at`)."""
    return group.behaviour not in ("stopped", "deleted") or t < group.at


def committed(scenario: Scenario, group: GroupSpec, topic: str, partition: int, t: float) -> int:
    """The offset the group commits for the partition at time t (never above the log end)."""
    spec = scenario.topic(topic)
    end = log_end(spec, partition, t)
    b = group.behaviour
    if b == "lagging":
        off = math.floor(end * group.speed)
    elif b == "stalled":
        off = log_end(spec, partition, min(t, group.at))
    elif b == "rewinding" and group.every > 0 and t >= group.at:
        checkpoint = log_end(spec, partition, group.at) - group.rewind_by
        phase = (t - group.at) % group.every
        off = checkpoint + math.floor(partition_rate(spec, partition) * phase + 1e-9)
    elif b == "rewinding":
        off = end if t < group.at else max(end - group.rewind_by, 0)
    elif b == "draining" and spec.pattern == "bursty":
        # From the log end just before the latest burst, at `speed` x the rate: never backwards.
        last_burst = math.floor(t / spec.burst_every + 1e-9) * spec.burst_every
        before = log_end(spec, partition, last_burst - spec.burst_every)
        off = before + math.floor(group.speed * partition_rate(spec, partition) * (t - last_burst) + 1e-9)
    elif b == "recovering":
        behind = math.floor(log_end(spec, partition, min(t, group.at)) * group.speed)
        if t < group.at:
            off = math.floor(end * group.speed)
        else:
            off = behind + math.floor(2 * partition_rate(spec, partition) * (t - group.at) + 1e-9)
    else:
        off = end
    return max(0, min(off, end))


@dataclass(frozen=True)
class Step:
    """What happens in (t0, t1]: records to produce per (topic, partition), each live group's
    commits, and the groups and topics deleted in that interval."""

    t: float
    produce: dict[tuple[str, int], int]
    commits: dict[str, dict[tuple[str, int], int]]
    deleted_groups: tuple[str, ...]
    deleted_topics: tuple[str, ...]


def _topic_alive(topic: TopicSpec, t: float) -> bool:
    return topic.deleted_at is None or t < topic.deleted_at


def step(scenario: Scenario, t0: float, t1: float) -> Step:
    produce: dict[tuple[str, int], int] = {}
    for topic in scenario.topics:
        if not _topic_alive(topic, t1):
            continue
        for p in range(topic.partitions):
            n = log_end(topic, p, t1) - (log_end(topic, p, t0) if t0 >= 0 else 0)
            if n > 0:
                produce[(topic.name, p)] = n
    commits: dict[str, dict[tuple[str, int], int]] = {}
    for g in scenario.groups:
        if not (alive(g, t1) and commits_at(g, t1)):
            continue
        offsets = {
            (name, p): committed(scenario, g, name, p, t1)
            for name in g.topics
            if _topic_alive(scenario.topic(name), t1)
            for p in range(scenario.topic(name).partitions)
        }
        if offsets:
            commits[g.name] = offsets
    deleted_groups = tuple(g.name for g in scenario.groups if g.behaviour == "deleted" and t0 < g.at <= t1)
    deleted_topics = tuple(t.name for t in scenario.topics if t.deleted_at is not None and t0 < t.deleted_at <= t1)
    return Step(t1, produce, commits, deleted_groups, deleted_topics)


def standard(suffix: str, partitions: int = 8) -> Scenario:
    """The integration scenario: 3 topics x `partitions` and 5 groups of different behaviours."""
    a, b, c = f"orders-{suffix}", f"clicks-{suffix}", f"audit-{suffix}"
    return Scenario(
        topics=(
            TopicSpec(a, partitions, rate=1.0),
            TopicSpec(b, partitions, rate=1.0, pattern="bursty", burst_every=2.0),
            TopicSpec(c, partitions, pattern="idle", initial=3),
        ),
        groups=(
            GroupSpec(f"billing-{suffix}", (a,), "healthy"),
            GroupSpec(f"search-{suffix}", (b,), "lagging", speed=0.5),
            GroupSpec(f"fraud-{suffix}", (a, b), "stalled", at=2.0),
            GroupSpec(f"archive-{suffix}", (c,), "stopped", at=2.0),
            GroupSpec(f"replay-{suffix}", (a,), "rewinding", at=3.0, rewind_by=2),
        ),
    )
