"""Commit history rows waiting for Postgres, kept column by column.

Every commit applied becomes one history row, so during a catch-up hundreds of thousands wait
for the store at once. As tuples of eight Python objects they cost about 250 bytes each; here
a row is about 70 (five int64 columns, one int32, three references to the strings State
already holds), so the persister can let several times more wait in the same memory before
apply has to wait for Postgres (lagd.state.persister.backlog_full). Rows come back out as
the tuples COPY takes (CommitRow), a chunk at a time.

It behaves like the list of tuples it replaces (len, iteration, indexing, slicing,
`del rows[:n]`, `append`, `extend`, `+=`, equality with a list), so tests and tools that
build history by hand keep working.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, overload

from lagd.runtime import compiled

# Takes a list of str out of the collector's sight, compiled where built (_apply.c untrack_names):
# the name columns hold hundreds of thousands of references while rows wait for Postgres, and
# every full collection walked them.
_apply = (
    compiled.load("lagd.state._apply", Path(__file__).with_name("_apply.c"))
    # issue 52's spike: lagd.state.windows.APPLY_CODE ("python": none of _apply.c)
    if os.environ.get("SPIKE_APPLY", os.environ.get("LAGD_APPLY", "cython")) != "python"
    else None
)
_untrack_names: Callable[[list[str]], None] | None = getattr(_apply, "untrack_names", None)

# (ts, cluster, group, topic, partition, offset, lag, observed)
CommitRow = tuple[int, str, str, str, int, int, int | None, int]

NO_LAG = -(2**63)  # a null lag (the first commit of a window has none)


class CommitRows:
    """Commit history rows in columns (see the module doc)."""

    __slots__ = ("cluster", "group", "lag", "observed", "offset", "partition", "topic", "ts")

    def __init__(self, rows: Iterable[CommitRow] = ()) -> None:
        self.ts = array("q")
        self.cluster: list[str] = []
        self.group: list[str] = []
        self.topic: list[str] = []
        self.partition = array("i")
        self.offset = array("q")
        self.lag = array("q")
        self.observed = array("q")
        if _untrack_names is not None:
            for names in (self.cluster, self.group, self.topic):
                _untrack_names(names)
        self.extend(rows)

    def add(
        self, ts: int, cluster: str, group: str, topic: str, partition: int, offset: int, lag: int, observed: int
    ) -> None:
        """One row; `lag` is NO_LAG for none (State's flat-window convention)."""
        self.ts.append(ts)
        self.cluster.append(cluster)
        self.group.append(group)
        self.topic.append(topic)
        self.partition.append(partition)
        self.offset.append(offset)
        self.lag.append(lag)
        self.observed.append(observed)

    def append(self, row: CommitRow) -> None:
        ts, cluster, group, topic, partition, offset, lag, observed = row
        self.add(ts, cluster, group, topic, partition, offset, NO_LAG if lag is None else lag, observed)

    def extend(self, rows: Iterable[CommitRow]) -> None:
        if isinstance(rows, CommitRows):
            for name in self.__slots__:
                getattr(self, name).extend(getattr(rows, name))
            return
        for row in rows:
            self.append(row)

    def __iadd__(self, rows: Iterable[CommitRow]) -> CommitRows:
        self.extend(rows)
        return self

    def __len__(self) -> int:
        return len(self.ts)

    def __bool__(self) -> bool:
        return len(self.ts) > 0

    def row(self, i: int) -> CommitRow:
        lag = self.lag[i]
        return (
            self.ts[i],
            self.cluster[i],
            self.group[i],
            self.topic[i],
            self.partition[i],
            self.offset[i],
            None if lag == NO_LAG else lag,
            self.observed[i],
        )

    def rows(self, start: int = 0, stop: int | None = None) -> list[CommitRow]:
        """Rows [start, stop) as the tuples COPY takes."""
        stop = len(self.ts) if stop is None else min(stop, len(self.ts))
        lags = [None if lag == NO_LAG else lag for lag in self.lag[start:stop]]
        return list(
            zip(
                self.ts[start:stop],
                self.cluster[start:stop],
                self.group[start:stop],
                self.topic[start:stop],
                self.partition[start:stop],
                self.offset[start:stop],
                lags,
                self.observed[start:stop],
                strict=True,
            )
        )

    def __iter__(self) -> Iterator[CommitRow]:
        for i in range(len(self.ts)):
            yield self.row(i)

    @overload
    def __getitem__(self, i: int) -> CommitRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[CommitRow]: ...
    def __getitem__(self, i: int | slice) -> CommitRow | list[CommitRow]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self.ts))
            if step != 1:
                return self.rows()[i]
            return self.rows(start, stop)
        if i < 0:
            i += len(self.ts)
        if not 0 <= i < len(self.ts):
            raise IndexError("commit history row out of range")
        return self.row(i)

    def __delitem__(self, i: slice) -> None:
        """Only `del rows[:n]` (dropping the oldest) is needed and supported."""
        if not isinstance(i, slice) or i.start not in (None, 0) or i.step not in (None, 1):
            raise TypeError("CommitRows supports deleting a prefix only: del rows[:n]")
        for name in self.__slots__:
            del getattr(self, name)[: i.stop]

    def keep(self, wanted: Callable[[str, str], bool]) -> CommitRows:
        """The rows whose (cluster, group) `wanted` accepts."""
        out = CommitRows()
        for i in range(len(self.ts)):
            if wanted(self.cluster[i], self.group[i]):
                out.add(
                    self.ts[i],
                    self.cluster[i],
                    self.group[i],
                    self.topic[i],
                    self.partition[i],
                    self.offset[i],
                    self.lag[i],
                    self.observed[i],
                )
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CommitRows | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"CommitRows({list(self)!r})"


def as_commit_rows(rows: Any) -> CommitRows:
    """`rows` as CommitRows (a list of tuples, from tests and tools, is converted)."""
    return rows if isinstance(rows, CommitRows) else CommitRows(rows)
