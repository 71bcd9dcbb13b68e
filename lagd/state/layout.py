"""The flat window layout, the one definition every reader uses (State, the compiled apply, the
rules): FIELDS ints per entry, oldest first; arr[i * FIELDS + TS] is entry i's timestamp,
arr[LAST + TS] the newest entry's. Kept apart so the compiled code needs nothing else of State."""

from __future__ import annotations

FIELDS = 5
OFFSET, ORDER, TS, OBSERVED, LAG = range(FIELDS)
LAST = -FIELDS  # the newest entry's base index
PREV = -2 * FIELDS  # the second newest entry's
