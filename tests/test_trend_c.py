"""The compiled trend fit (lagd/evaluate/_trend.c) answers exactly as the Python it stands in
for (lagd_fast.fit_python), or declines (None) where only the Python can: random windows and
log-end samples, every rule setting that decides whether the slope is fitted. Judging through
it is also compared with the reference rules in tests/test_lagd_fast.py.

Where a C compiler and Python's headers are on this machine the build must have compiled it: otherwise these tests
would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import sysconfig
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagd.evaluate import lagd_fast, native
from lagd.evaluate.lagd_rules import LagdParams
from lagd.state.windows import FIELDS, OBSERVED, OFFSET, ORDER, TS, LogEnd

T0 = 1_700_000_000_000
FIT = native.compiled_fit()
needs_fit = pytest.mark.skipif(FIT is None, reason="no C compiler here: lagd runs the Python fit only")


def _can_compile() -> bool:
    """Is there what hatch_build.py needs: a compiler (hatch_build.link_command's, in its order)
    and Python's headers?"""
    ldshared = str(sysconfig.get_config_var("LDSHARED") or "")
    if not (ldshared and shutil.which(shlex.split(ldshared)[0])):
        ldshared = "cc"
    link = os.environ.get("LDSHARED") or os.environ.get("CC") or ldshared
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(shlex.split(link)[0]) is not None and headers.exists()


def test_the_compiled_fit_is_built_where_it_can_be() -> None:
    assert not _can_compile() or FIT is not None, (
        "a C compiler and Python's headers are here but lagd.evaluate._trend is not importable: "
        "reinstall lagd (.venv/bin/pip install --no-deps -e .) and read the build's warning"
    )


def test_lagd_no_extensions_runs_the_python() -> None:
    """With LAGD_NO_EXTENSIONS=1 a fresh process judges with the Python: lagd_fast binds
    neither compiled function, and says so."""
    code = (
        "from lagd.evaluate import lagd_fast, native; "
        "print(lagd_fast._compiled_fit is None, lagd_fast._compiled_moments is None, native.describe())"
    )
    env = {**os.environ, "LAGD_NO_EXTENSIONS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True True Python (LAGD_NO_EXTENSIONS is set)"


@needs_fit
def test_a_build_of_another_source_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A compiled module left behind after _trend.c changed (an editable install not rebuilt)
    must not judge: its source hash no longer matches, and the Python runs instead."""
    changed = tmp_path / "_trend.c"
    changed.write_bytes(native.SOURCE.read_bytes() + b"/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", changed)
    assert native.status() == "stale"
    assert native.compiled_fit() is None and native.compiled_moments() is None
    assert "reinstall lagd" in native.describe()


@needs_fit
def test_a_build_from_before_builds_carried_their_source_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module built before the source hash was passed in has none: it is stale, not "not built"
    (which would send the user to install a compiler they have)."""
    from lagd.evaluate import _trend

    monkeypatch.delattr(_trend, "SOURCE_SHA1")
    assert native.status() == "stale"


def window(entries: list[tuple[int, int]]) -> array[int]:
    """A flat window of (offset, ms after T0) entries."""
    arr = array("q")
    for order, (offset, at) in enumerate(entries):
        entry = [0] * FIELDS
        entry[OFFSET], entry[ORDER], entry[TS], entry[OBSERVED] = offset, order, T0 + at, T0 + at
        arr.extend(entry)
    return arr


def log_end(samples: list[tuple[int, int]], run_start: int, coarse: bool) -> LogEnd:
    le = LogEnd()
    for offset, at in samples:
        le.offsets.append(offset)
        le.ts.append(T0 + at)
    newest_run = len(samples) and max(i for i in range(len(samples)) if i == 0 or samples[i][0] < samples[i - 1][0])
    le.run_start = min(max(run_start, newest_run), max(0, len(samples) - 1))  # from where offsets never fall
    if coarse:
        le.coarse_offsets.append(0)
        le.coarse_ts.append(T0 - 3_600_000)
    return le


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (a slope left out)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def fit_both(arr: array[int], le: LogEnd, used: int, p: LagdParams, was_behind: bool) -> tuple[object, object]:
    """The compiled fit's answer (None: declined) and the Python's."""
    return lagd_fast.fit_compiled(arr, le, used, p, was_behind), lagd_fast.fit_python(arr, le, used, p, was_behind)


def moments_of(
    arr: array[int], le: LogEnd, current_lag: int, at_ms: int, within: bool, judge: lagd_fast.LagdJudge
) -> tuple[float, float, bool, int, int | None] | None:
    """`_trend.moments` as LagdJudge.judge calls it."""
    moments = native.compiled_moments()
    assert moments is not None
    p = judge.p
    return moments(
        arr,
        FIELDS,
        OFFSET,
        le.offsets,
        le.ts,
        le.run_start,
        bool(le.coarse_ts),
        current_lag,
        at_ms,
        within,
        p.allowed_lag_seconds,
        judge._allowed_ms,
    )


def history(
    sample_steps: list[tuple[int, int]], entries: list[tuple[int, int]], run_start: int, coarse: bool
) -> tuple[array[int], LogEnd]:
    """A window of commits (offset after 1,000, ms after T0; taken in time order) and log-end
    samples growing from offset 1,000 by the given (records, ms) steps."""
    samples: list[tuple[int, int]] = []
    offset, at = 1_000, 0
    for step, gap in sample_steps:
        offset, at = offset + step, at + gap
        samples.append((offset, at))
    entries.sort(key=lambda e: e[1])
    return window([(max(0, 1_000 + o), ms) for o, ms in entries]), log_end(samples, run_start, coarse)


# Log ends growing by steps (a negative step truncates: the newest run starts there), commits
# trailing them by random distances at random times, a few of them the same offset again.
steps = st.lists(st.tuples(st.integers(-50, 900), st.integers(1, 20_000)), min_size=0, max_size=40)
commits = st.lists(st.tuples(st.integers(-300, 8_000), st.integers(0, 400_000)), min_size=1, max_size=30)
params = st.builds(
    LagdParams,
    allowed_lag_seconds=st.sampled_from([0.0, 0.5, 5.0, 30.0]),
    min_points=st.integers(3, 8),
    z_enter=st.sampled_from([0.5, 2.5]),
    z_leave=st.sampled_from([0.0, 2.0]),
    tie_s=st.sampled_from([0.0, 0.25, 3.0]),
)


@needs_fit
@settings(max_examples=600, deadline=None)
@given(steps, commits, params, st.booleans(), st.booleans(), st.integers(0, 10), st.sampled_from([0, 2**62, -(2**63)]))
def test_the_compiled_fit_answers_as_the_python(
    sample_steps: list[tuple[int, int]],
    entries: list[tuple[int, int]],
    p: LagdParams,
    was_behind: bool,
    coarse: bool,
    run_start: int,
    used_cap: int,
) -> None:
    arr, le = history(sample_steps, entries, run_start, coarse)
    used = T0 + used_cap if used_cap >= 0 else used_cap
    compiled, python = fit_both(arr, le, min(used, 2**63 - 1), p, was_behind)
    if compiled is None:
        # declined: only where the Python reads the coarse tier (an offset at or below the run's
        # oldest sample, the run starting at the first sample)
        assert coarse and le.run_start == 0
        return
    assert same(compiled, python), (compiled, python)


@needs_fit
def test_a_falling_behind_window_gets_its_whole_trend() -> None:
    """Ten commits a minute apart, each further behind a log end growing 100 records a second:
    the slope is needed (falling behind), so every field is fitted, as in Python."""
    le = log_end([(10_000 + 100 * s, 1000 * s) for s in range(0, 700, 10)], 0, False)
    arr = window([(10_000 + 100 * (60 * k) - 50 * k * k, 60_000 * k) for k in range(1, 11)])
    compiled, python = fit_both(arr, le, 2**62, LagdParams(), False)
    assert same(compiled, python)
    assert compiled is not None
    trend, _ = compiled  # type: ignore[misc]
    assert trend is not None and trend[0] == 10 and trend[1] > 0 and not math.isnan(trend[3])


@needs_fit
def test_it_declines_what_a_double_does_not_hold_exactly() -> None:
    """Offsets and times far apart enough that their product passes 2**53: Python's integer
    division is exact there, a double's is not, so the compiled fit leaves it to the Python."""
    far = 2**40
    le = log_end([(0, 0), (far, far)], 0, False)
    arr = window([(far // 3 + k, far // 2 + k) for k in range(5)])
    compiled, python = fit_both(arr, le, 2**62, LagdParams(), False)
    assert compiled is None and python is not None
    assert same(lagd_fast._fit(arr, le, 2**62, LagdParams(), False), python)


@needs_fit
def test_it_refuses_what_is_not_a_window() -> None:
    assert FIT is not None
    le = log_end([(0, 0), (10, 10)], 0, False)
    args = (FIELDS, OFFSET, TS, le.offsets, le.ts, 0, False, 0, 0.25, 5, 2.5, 2.0, 5.0, False)
    with pytest.raises(TypeError, match=r"array\('q'\)"):
        FIT(array("d", [1.0] * FIELDS), *args)
    with pytest.raises(ValueError, match="layout"):
        FIT(window([(1, 1)]), 0, *args[1:])
    with pytest.raises(ValueError, match="length"):
        FIT(window([(1, 1)]), FIELDS, OFFSET, TS, le.offsets, array("q", [T0]), *args[5:])
    with pytest.raises(TypeError, match="15 arguments"):
        FIT(window([(1, 1)]))


@needs_fit
@settings(max_examples=600, deadline=None)
@given(
    steps,
    commits,
    st.sampled_from([0.0, 0.5, 5.0, 30.0]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 10),
    st.integers(-5_000, 500_000),
)
def test_the_compiled_moments_answer_as_the_python(
    sample_steps: list[tuple[int, int]],
    entries: list[tuple[int, int]],
    allowed_s: float,
    within: bool,
    coarse: bool,
    run_start: int,
    at: int,
) -> None:
    """`_moments` and `_within_seconds` (the answer of a partition judged within allowed-lag-
    seconds: its re-check and shown lag) against `_trend.moments`, for partitions behind, caught
    up, before every sample, without samples, rewound or not."""
    arr, le = history(sample_steps, entries, run_start, coarse)
    committed = arr[len(arr) - FIELDS + OFFSET]
    current_lag = max(0, le.offsets[-1] - committed) if le.offsets else 0
    p = LagdParams(allowed_lag_seconds=allowed_s)
    judge = lagd_fast.LagdJudge(p)
    at_ms = T0 + at
    got = moments_of(arr, le, current_lag, at_ms, within, judge)
    want = lagd_fast._moments(arr, le, current_lag)
    if got is None:
        # declined: only where the Python reads the coarse tier
        assert coarse and le.run_start == 0
        return
    assert got[:4] == want and [type(x) for x in got[2:4]] == [type(x) for x in want[2:4]], (got, want)
    answer = judge._within_seconds(arr, want, at_ms) if within else None
    if answer is None:
        assert got[4] is None
    else:
        assert (got[4], float(answer[4]), got[2]) == (answer[3], answer[4], answer[5])


@needs_fit
@pytest.mark.parametrize(
    ("offsets", "behind_at", "idle"),
    [
        ([1_010, 900, 1_010], 0, False),  # rewound by 110 and recovered exactly: not a REWIND
        ([1_010, 900, 1_005], 0, False),  # rewound and not recovered
        ([980, 990, 1_000], 0, False),  # the committed offset exactly at the oldest sample: read from it
        ([980, 990, 1_000], 0, True),  # ... which the next sample repeats (an idle log end)
        ([980, 990, 1_100], 60_000, False),  # the committed offset exactly at a sample, within the run
    ],
)
def test_the_compiled_moments_at_the_edges(offsets: list[int], behind_at: int, idle: bool) -> None:
    """Edges random windows seldom hit, each compared with the Python."""
    le = log_end([(1_000, 0), (1_000 if idle else 1_100, 10_000), (1_300, 20_000)], 0, False)
    arr = window([(o, 1_000 * k) for k, o in enumerate(offsets)])
    current_lag = le.offsets[-1] - offsets[-1]
    p = LagdParams(allowed_lag_seconds=30.0)
    judge = lagd_fast.LagdJudge(p)
    at_ms = T0 + 25_000 + behind_at
    got = moments_of(arr, le, current_lag, at_ms, True, judge)
    want = lagd_fast._moments(arr, le, current_lag)
    answer = judge._within_seconds(arr, want, at_ms)
    assert got is not None and got[:4] == want
    assert got[4] == (answer[3] if answer is not None else None)


@needs_fit
def test_trends_up_and_down_get_the_same_fit() -> None:
    """Windows trailing a log end that grows at a steady rate by distances that grow, shrink or
    wander, with as many entries as storage.intervals allows (past the 64 fitted on the stack):
    the slope fits and both signs of the Mann-Kendall S are reached, and every answer is the
    Python's."""
    rng = random.Random(13)
    fitted = rising = falling = long = 0
    for _ in range(400):
        rate = rng.choice([1, 10, 100, 1000])  # records a second
        le = log_end([(1_000 + rate * s, 1000 * s) for s in range(0, 3_600, 10)], 0, False)
        entries = rng.choice([5, 10, 30, 80, 100])
        drift = rng.choice([-1, 0, 1]) * rng.uniform(0, 0.3)  # seconds of lag gained a second
        arr = window(
            [
                (
                    1_000 + max(0, int(rate * (s - max(0.0, 200 + drift * s + rng.gauss(0, 5))))),
                    1000 * s,
                )
                for s in range(600, 600 + 30 * entries, 30)
            ]
        )
        p = LagdParams(allowed_lag_seconds=rng.choice([0.5, 5.0]))
        compiled, python = fit_both(arr, le, 2**62, p, rng.random() < 0.3)
        assert compiled is not None and same(compiled, python), (compiled, python)
        trend = compiled[0]  # type: ignore[index]
        if trend is not None and not math.isnan(trend[1]):
            fitted += 1
            rising += trend[2] > 0
            falling += trend[2] < 0
            long += trend[0] > 64
    assert fitted >= 100 and rising >= 30 and falling >= 30 and long >= 20, (fitted, rising, falling, long)


@needs_fit
@pytest.mark.parametrize(
    ("samples", "offsets", "at"),
    [
        ([(2**63 - 1_000, 0), (2**63 - 1, 10_000)], [2**63 - 500, 2**63 - 1], 20_000),  # offsets at int64's end
        ([(0, 0), (2**62, 2**54)], [2**61, 2**61 + 1], 2**54),  # times past 2**53
        ([(0, -(2**62)), (10, 2**62)], [5, 6], 0),  # a span of times past int64
        ([(1_000, 0), (1_010, 10_000)], [1_005, 1_005], 2**62),  # now far beyond the samples
    ],
)
def test_hostile_numbers_get_the_pythons_answer(samples: list[tuple[int, int]], offsets: list[int], at: int) -> None:
    """Numbers near int64's limits: the compiled code answers exactly as the Python or leaves
    it to the Python (None); it never overflows into a wrong answer."""
    le = LogEnd()
    for offset, ms in samples:
        le.offsets.append(offset)
        le.ts.append(ms)
    arr = array("q")
    for order, offset in enumerate(offsets):
        entry = [0] * FIELDS
        entry[OFFSET], entry[ORDER], entry[TS] = offset, order, samples[0][1] + order
        arr.extend(entry)
    current_lag = max(0, le.offsets[-1] - offsets[-1])
    judge = lagd_fast.LagdJudge(LagdParams())
    got = moments_of(arr, le, current_lag, at, True, judge)
    try:
        want: object = lagd_fast._moments(arr, le, current_lag)
    except IndexError as e:
        want = e
    assert got is None or got[:4] == want, (got, want)
    compiled, python = fit_both(arr, le, 2**62, LagdParams(), False)
    assert compiled is None or same(compiled, python), (compiled, python)
