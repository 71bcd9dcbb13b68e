# The compiled apply of the usual commit (_apply.c); lagd.state.windows uses it where built.
from typing import Any

SOURCE_SHA1: str
LAYOUT: tuple[int, int, int, int, int, int]

def apply_commits(
    state: Any,
    clusters: dict[str, Any],
    events: list[Any],
    start: int,
    commit: type,
    intervals: int,
    min_distance_ms: int,
    window_step_ms: int,
    record_history: bool,
) -> int: ...
def drain_windows(clusters: dict[str, Any], keys: list[Any], out: dict[Any, bytes | None], n: int) -> int: ...
def copy_windows(
    windows: dict[Any, bytes | None], pos: int, size: int, n: int, max_bytes: int, gone: list[Any]
) -> tuple[bytes, int, int, bool] | None: ...
def copy_history(
    ts: Any,
    cluster: list[str],
    group: list[str],
    topic: list[str],
    partition: Any,
    offset: Any,
    lag: Any,
    observed: Any,
    start: int,
    stop: int,
) -> bytes | None: ...
def history_days(ts: Any) -> tuple[int, int, set[int]] | None: ...
def untrack_names(column: list[str]) -> None: ...
