"""Times given on the command line: epoch milliseconds or ISO 8601, one reading for every command."""

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
