# The compiled reader of the usual offsets-topic record (_commits.c); offsets_topic uses it where built.
from collections.abc import Callable
from typing import Any

SOURCE_SHA1: str

def read_commits(
    records: list[Any],
    start: int,
    out: list[Any],
    keys: dict[bytes, tuple[str, str, int, int]],
    keys_max: int,
    allowed: dict[str, bool],
    allows: Callable[[str], bool],
    partition_counts: dict[str, int],
    topics_ok: set[str],
    max_group_bytes: int,
    max_offset: int,
    oldest_ts: int,
    newest_ts: int,
    cluster: str,
    observed: int,
    commit: type,
    tally: list[int],
    topic_names: dict[bytes, str] | None,
) -> int: ...
