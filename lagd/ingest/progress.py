"""How far a reader has caught up: readiness says "catching up" until it has."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class ReaderProgress:
    """How far a reader has caught up, for readiness ("catching up") and /metrics.

    The offsets-topic reader compares its positions with the end offsets taken at start;
    admin polling is caught up after its first full round. Once caught up it stays so:
    later lag of the reader is not a reason to become unready.
    """

    begin: dict[int, int] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=dict)
    position: dict[int, int] = field(default_factory=dict)
    measured: bool = False
    done: bool = False
    # How current what the reader has read is (ms): every record there was before it has been
    # read (the reader stood at the end then: a fetch that came back short, a finished admin
    # round; or, while it works through a backlog, the time of the records it reached). And
    # when it last moved (read records, or stood at the end). Lets lagd tell blind from behind.
    fresh_at_ms: int | None = None
    moving_at_ms: int | None = None
    # The same per partition of the offsets topic (the topic reader), of which those are the
    # oldest: a partition that stops moving holds the whole view back, however busy the rest.
    read_through: dict[int, int] = field(default_factory=dict)
    moved_at: dict[int, int] = field(default_factory=dict)
    # Where the reader gets committed offsets: "topic" or "admin" ("" until "auto" has chosen).
    source: str = ""
    # When the reader started (ms; None: not told), so that a cluster whose brokers never
    # answer is told apart from one still being caught up with (lagd.evaluate.sight).
    started_at_ms: int | None = None
    # Why the reader's latest attempt failed ("" once the cluster answers it again), explained
    # where lagd can (lagd.ingest.diagnose): what a cluster lagd cannot read is reported with.
    problem: str = ""

    def mark_fresh(self, now_ms: int) -> None:
        """Everything there was to read at `now_ms` has been read (admin polling's round, a
        reader with nothing assigned)."""
        self.fresh_at_ms = self.moving_at_ms = now_ms
        self.problem = ""

    def reached_end(self, polled: Mapping[int, int]) -> None:
        """Partitions the reader stands at the end of, as of the broker's answer at each time (ms)."""
        for p, at in polled.items():
            self.read_through[p] = max(at, self.read_through.get(p, at))
            self.moved_at[p] = max(at, self.moved_at.get(p, at))
        self._settle()

    def read_records(self, newest: Mapping[int, int], observed_ms: int) -> None:
        """Partitions records were read from at `observed_ms`, with the time of the newest record
        read of each (ms; a record's time past `observed_ms` counts as `observed_ms`): every
        record before it has been read, though the partition holds more. A partition moved
        has its place in `moved_at` at once; in `read_through` once a record tells a time."""
        for p, at in newest.items():
            at = min(at, observed_ms)
            if at > self.read_through.get(p, 0):  # a record without a time (-1) moved it, no more
                self.read_through[p] = at
            self.moved_at[p] = max(observed_ms, self.moved_at.get(p, observed_ms))
        self._settle()

    def track(self, partitions: Iterable[int], now_ms: int) -> None:
        """Partitions the reader is assigned: one that has not moved yet (no answer from its
        leader, no record) counts as moved at `now_ms`, so it stops the reader's moving once it
        stays silent. How current it is stays unknown until it answers."""
        new = False
        for p in partitions:
            if p not in self.moved_at:
                self.moved_at[p] = now_ms
                new = True
        if new:
            self._settle()

    def moved_all(self, now_ms: int) -> None:
        """The reader has just read every partition to where it ended at start (caught up): each
        moved now, whatever it did last."""
        for p in self.moved_at:
            self.moved_at[p] = max(now_ms, self.moved_at[p])
        self._settle()

    def _settle(self) -> None:
        self.problem = ""  # the cluster answered
        if self.read_through:
            self.fresh_at_ms = min(self.read_through.values())
        if self.moved_at:
            self.moving_at_ms = min(self.moved_at.values())

    def measure(self, begin: dict[int, int], end: dict[int, int]) -> None:
        """Record the start and end offsets of partitions seen for the first time."""
        for p, off in end.items():
            if p not in self.end:
                self.end[p] = off
                self.begin[p] = begin.get(p, 0)
        self.measured = True
        self.problem = ""
        self._check()

    def advance(self, partition: int, offset: int) -> None:
        self.position[partition] = max(offset, self.position.get(partition, 0))
        self._check()

    def forget(self, partitions: set[int]) -> None:
        """Partitions this reader no longer reads (a worker's revoked share, lagd.scale)."""
        for p in partitions:
            self.begin.pop(p, None)
            self.end.pop(p, None)
            self.position.pop(p, None)
            self.read_through.pop(p, None)
            self.moved_at.pop(p, None)
        self._settle()

    def reopen(self, *, measured: bool = False) -> None:
        """Catching up again: a worker was given partitions (lagd.scale). Not caught up until
        `measure` has their end offsets and the positions reach them (or `mark_caught_up`)."""
        self.done = False
        self.measured = measured

    def mark_caught_up(self) -> None:
        self.measured = True
        self.done = True

    def _check(self) -> None:
        if not self.done and self.measured:
            self.done = all(self.position.get(p, self.begin.get(p, 0)) >= e for p, e in self.end.items())

    @property
    def caught_up(self) -> bool:
        return self.done

    @property
    def answered(self) -> bool:
        """Has the cluster answered the reader at all since it started: partitions assigned,
        end offsets taken, records read or a round finished?"""
        return self.measured or bool(self.moved_at) or self.fresh_at_ms is not None

    @property
    def fraction(self) -> float:
        """Share of the records between start and end-at-start already read (1.0 when caught up)."""
        if self.done:
            return 1.0
        total = read = 0
        for p, e in self.end.items():
            b = self.begin.get(p, 0)
            total += max(e - b, 0)
            read += max(min(self.position.get(p, b), e) - b, 0)
        return read / total if total else 0.0
