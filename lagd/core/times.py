"""Times as people give and read them: epoch milliseconds or ISO 8601 on the command line (one
reading for every command), and durations in words (one wording for every verdict and event)."""

from __future__ import annotations

from datetime import UTC, datetime


def epoch_ms(text: str) -> int:
    """Epoch milliseconds from epoch-ms digits or ISO 8601 (UTC unless it names a zone).

    Raises ValueError saying what to give instead.
    """
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither epoch milliseconds nor ISO 8601: give e.g. 2026-11-22T08:00Z or 1790000000000"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def about(seconds: float) -> str:
    """A duration as verdicts and incidents say it: "under a minute", "about 4 min", "about 2 h
    10 min", "about 3 h", "about 2.5 d" (from 48 h on)."""
    if seconds < 60:
        return "under a minute"
    mins = round(seconds / 60.0)
    if mins < 60:
        return f"about {mins} min"
    if mins < 48 * 60:
        h, m = divmod(mins, 60)
        return f"about {h} h {m:02d} min" if m else f"about {h} h"
    return f"about {seconds / 86400:.1f} d"
