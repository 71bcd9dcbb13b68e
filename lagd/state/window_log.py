"""Where the copy of every window into a new generation of the window log stands (pure).

A single daemon appends each flush's changed windows to the store's log (lagd.state.store),
which would grow without end. So now and then the persister opens a new generation and copies
every window of State into it, a slice after each flush; once that copy is complete, the
generations before it hold nothing the restore needs and are dropped. A slice is taken only
right after a write, with nothing drained waiting: an older value written after a newer copy
would win at restore.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lagd.state.changes import GroupKey, WindowKey
from lagd.state.windows import State

# Windows copied per slice at least (about 5 ms to build, 5 ms of Postgres' CPU); a slice is as
# large as the flush before it beyond that, so the copy keeps pace with what the log receives.
MIN_SLICE = 5_000
# ... and at most this many: during a catch-up a flush writes hundreds of thousands of windows,
# and a copy as large would double the write that apply may be waiting for.
MAX_SLICE = 20_000
# A new copy begins once the log received as many windows as State holds (and at least this
# many) since the last one began. A slice is as large as the flush before it, so a copy takes
# about as long as that: the log holds at most two generations of a copy and as many changed
# windows each, about four times the windows State holds.
MIN_APPENDED = 100_000


@dataclass
class WindowCopy:
    """The persister's copy of every window into a generation of the log."""

    copied: int | None = None  # the generation whose copy completed last (None: none since start)
    generation: int | None = None  # the generation being copied into (None: no copy running)
    groups: list[GroupKey] = field(default_factory=list)  # groups left to copy, last first
    appended: int = 0  # changed windows appended since the last copy began
    min_slice: int = MIN_SLICE
    max_slice: int = MAX_SLICE
    min_appended: int = MIN_APPENDED

    def due(self, appending_to: int | None, windows: int) -> bool:
        """Begin a copy? When none runs and either no copy since start covers the generation
        flushes append to, or the log received as many windows as State holds since the last
        copy began."""
        if self.generation is not None:
            return False
        if self.copied is None or self.copied != appending_to:
            return True
        return self.appended >= max(windows, self.min_appended)

    def begin(self, generation: int, groups: list[GroupKey]) -> None:
        self.generation, self.groups, self.appended = generation, groups, 0

    def slice_size(self, appended: int) -> int:
        """Windows to copy after a flush that appended `appended`."""
        return min(max(self.min_slice, appended), self.max_slice)

    def next_keys(self, state: State, n: int) -> list[WindowKey]:
        """The keys of the next groups to copy, at least `n` of them (or all that are left);
        a group's windows are taken as it then stands."""
        keys: list[WindowKey] = []
        while self.groups and len(keys) < n:
            keys.extend(state.window_keys(*self.groups.pop()))
        return keys

    @property
    def complete(self) -> bool:
        return self.generation is not None and not self.groups

    def finish(self) -> None:
        self.copied, self.generation = self.generation, None

    def abandon(self) -> None:
        """A slice failed: the next copy starts afresh (into the same generation: every window
        it holds was written after it began, so a copy taken later still covers the older ones)."""
        self.generation, self.groups = None, []
