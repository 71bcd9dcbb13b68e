"""lagd's compiled trend fit (_trend.c): `lagd_fast._fit` in one call, exactly as the Python."""

from array import array

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
