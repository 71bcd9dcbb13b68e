# A group's partitions as Burrow's v3 JSON, compiled (_json.c); lagd.http.burrow_v3 uses it where built.
from collections.abc import Callable
from typing import Any

SOURCE_SHA1: str
LAYOUT: tuple[int, int, int, int, int]

def partitions_json(
    parts: list[Any], verdict_type: type, statuses: tuple[tuple[Any, str], ...], dumps: Callable[[Any], str]
) -> str | None: ...
