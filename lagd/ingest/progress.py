"""How far a reader has caught up: readiness says "catching up" until it has."""

from __future__ import annotations

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
    # When the reader last stood at the end of what there was to read (ms): a fetch that
    # came back short, or a finished admin round. Lets lagd tell when it is blind.
    fresh_at_ms: int | None = None
    # Where the reader gets committed offsets: "topic" or "admin" ("" until "auto" has chosen).
    source: str = ""

    def mark_fresh(self, now_ms: int) -> None:
        self.fresh_at_ms = now_ms

    def measure(self, begin: dict[int, int], end: dict[int, int]) -> None:
        """Record the start and end offsets of partitions seen for the first time."""
        for p, off in end.items():
            if p not in self.end:
                self.end[p] = off
                self.begin[p] = begin.get(p, 0)
        self.measured = True
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
