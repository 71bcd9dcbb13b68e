# The store's binary COPY encoders and history helpers, compiled (_apply.c); lagd.state.store and
# lagd.state.history use them where built.
from typing import Any

SOURCE_SHA1: str
LAYOUT: tuple[int, int, int, int, int, int]

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
