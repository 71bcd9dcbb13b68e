"""lagd's compiled trend fit, lag moments, judgement from kept facts (_trend.c) and the evaluator's
pass over a topic's partitions: exactly as the Python in lagd_fast and verdicts."""

from array import array
from typing import Any

SOURCE_SHA1: str  # of the _trend.c it was built from
FACTS_FORMAT: str  # the struct layout of kept facts it reads (lagd_fast._PACKED's)
PARAMS_FORMAT: str  # and of the settings (lagd_fast._C_PARAMS's)

def fit(
    arr: array[int],
    fields: int,
    offset_at: int,
    ts_at: int,
    offsets: array[int],
    ts: array[int],
    run_start: int,
    has_coarse: bool,
    used: int,
    tie_s: float,
    min_points: int,
    z_enter: float,
    z_leave: float,
    allowed_lag_seconds: float,
    was_behind: bool,
    /,
) -> tuple[tuple[int, float, float, float, float, float] | None, int] | None: ...
def moments(
    arr: array[int],
    fields: int,
    offset_at: int,
    offsets: array[int],
    ts: array[int],
    run_start: int,
    has_coarse: bool,
    current_lag: int,
    at_ms: int,
    within: bool,
    allowed_lag_seconds: float,
    allowed_ms: int,
    /,
) -> tuple[float, float, bool, int, int | None] | None: ...
def standing(
    facts: bytes,
    i: int,
    arr: array[int],
    log_end: Any,
    current_lag: int,
    at_ms: int,
    was_behind: bool,
    params: bytes,
    said: tuple[Any, ...],
    /,
) -> tuple[Any, ...] | None: ...
def fresh(
    arr: array[int],
    log_end: Any,
    current_lag: int,
    at_ms: int,
    was_behind: bool,
    passed: float,
    reached: float,
    estimated: bool,
    used: int,
    params: bytes,
    said: tuple[Any, ...],
    /,
) -> tuple[tuple[Any, ...], bytes] | None: ...
def judge_topic(
    context: tuple[Any, ...],
    judge: Any,
    tally: list[Any],
    topic: str,
    start: int,
    stop: int,
    windows: dict[int, array[int]],
    log_ends: dict[int, Any],
    owners: dict[tuple[str, int], Any],
    since_before: array[int],
    since: array[int],
    partitions: list[Any],
    now_ms: int,
    judged_at: int,
    intervals: int,
    minimum_complete: float,
    lagd: bool,
    rows: bytearray | None = None,  # given: each partition a snapshot row (snapshot.ROW), not a verdict
    seconds: bytearray | None = None,  # with rows: each partition's lag in seconds, a native double
    topic_index: int = 0,  # with rows: the topic's index in the snapshot's topics
    /,
) -> int: ...
def snapshot_rows(
    parts: list[Any],
    verdict_type: type,
    statuses: tuple[Any, ...],
    array_type: type,
    end_at: int,
    with_rows: bool,
    /,
) -> tuple[bytes, bytes, tuple[str, ...], bool, int] | None: ...
