"""The compiled rules code (lagd/evaluate/_trend.c: the trend fit, the lag moments and the
judgement from kept facts) answers exactly as the Python it stands in for, or declines (None)
where only the Python can: random windows and log-end samples, every rule setting that decides
whether the slope is fitted, random histories judged from kept facts, hand-built facts at the
edges. Judging through it is also compared with the reference rules in tests/test_lagd_fast.py.

Where a C compiler and Python's headers are on this machine the build must have compiled it: otherwise these tests
would pass on the Python alone and say nothing about the C.
"""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from array import array
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagd.core.model import Commit, GroupMembers, GroupStatus, LogEndSample, PartitionOwner, PartitionStatus
from lagd.core.ruleset import LAGD, lagd_rules, rule_set
from lagd.evaluate import Evaluator, PartitionVerdict, lagd_fast, native, verdicts
from lagd.evaluate.lagd_rules import LagdParams
from lagd.evaluate.snapshot import snapshot_of
from lagd.state.layout import FIELDS, OBSERVED, OFFSET, ORDER, TS
from lagd.state.pauses import PauseSettings
from lagd.state.windows import LogEnd, State
from tests.compiled_code import REINSTALL, can_compile, printed_without_extensions
from tests.test_lagd_fast import C, G, Op, play, random_ticks, traffic

T0 = 1_700_000_000_000
FIT = lagd_fast._compiled_fit
needs_fit = pytest.mark.skipif(FIT is None, reason="no C compiler here: lagd runs the Python fit only")


def test_the_compiled_fit_is_built_where_it_can_be() -> None:
    assert not can_compile() or FIT is not None, (
        f"a C compiler and Python's headers are here but lagd.evaluate._trend is not importable: {REINSTALL}"
    )


def test_lagd_no_extensions_runs_the_python() -> None:
    """With LAGD_NO_EXTENSIONS=1 a fresh process judges with the Python: lagd_fast binds
    none of the compiled functions, and says so."""
    code = (
        "from lagd.evaluate import lagd_fast, native; "
        "print(lagd_fast._compiled_fit is None, lagd_fast._compiled_moments is None, "
        "lagd_fast._compiled_standing is None, native.describe())"
    )
    assert printed_without_extensions(code) == "True True True Python (LAGD_NO_EXTENSIONS is set)"


@needs_fit
def test_a_build_of_another_source_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A compiled module left behind after _trend.c changed (an editable install not rebuilt)
    must not judge: its source hash no longer matches, and the Python runs instead."""
    changed = tmp_path / "_trend.c"
    changed.write_bytes(native.SOURCE.read_bytes() + b"/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", changed)
    assert native.status() == "stale"
    assert native.compiled() is None
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
    moments = lagd_fast._compiled_moments
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


def _judged_alike(
    compiled: Evaluator, python: Evaluator, now: int, snapshots: tuple[Evaluator, Evaluator] | None = None
) -> None:
    """Both evaluators give the same verdict, reasons to the type of every number, and re-check.
    With `snapshots` (a twin of each, judging the same groups at the same times only through
    Evaluator.snapshot): each twin's snapshot is the snapshot of its evaluator's verdict, and it
    keeps the same since-tracking, facts and re-check."""
    got, want = compiled.group(C, G, now), python.group(C, G, now)
    assert got == want
    assert [repr(p.why) for p in got.partitions] == [repr(p.why) for p in want.partitions]
    assert compiled._due.get((C, G)) == python._due.get((C, G))
    assert compiled._facts == python._facts  # the same facts kept, to the byte
    assert compiled._since == python._since  # and each partition's status since the same time
    for evaluator, verdict, twin in zip((compiled, python), (got, want), snapshots, strict=True) if snapshots else ():
        assert twin.snapshot(C, G, now) == snapshot_of(verdict)
        assert (twin._due.get((C, G)), twin._facts, twin._since) == (
            evaluator._due.get((C, G)),
            evaluator._facts,
            evaluator._since,
        )


def _drive(state: State, settings_: dict[str, Any], history: list[Op], rules: str = "lagd") -> None:
    """Apply `history` (test_lagd_fast's operations) to `state`, judging at each evaluation by
    two fast evaluators: one with the compiled code (the judgements `standing` and `fresh`, the
    pass over a topic's partitions), one without."""
    compiled, python, *twins = (
        Evaluator(state, rules=rule_set(rules), cache_ttl_ms=0, **settings_)  # type: ignore[arg-type]
        for _ in range(4)
    )
    assert compiled._judge._cparams is not None
    python._judge._cparams = twins[1]._judge._cparams = None  # the Python judges its kept facts
    for now in play(state, history):
        _judged_alike(compiled, python, now, (twins[0], twins[1]))


def _drive_all(rng: random.Random, rules: str = "lagd") -> None:
    """`_drive` over 150 seeded random histories under varied settings, then a consumer falling
    behind, held WARN, stopping, then catching up (test_lagd_fast's)."""
    for _ in range(150):
        state = State(intervals=6, lag_samples=rng.choice([4, 40]), rules=lagd_rules(rng.choice([0, 15_000])))
        settings_ = {
            "allowed_lag": rng.choice([0, 20]),
            "allowed_lag_seconds": rng.choice([0.0, 1.0, 5.0]),
            "min_history_ms": 20_000,
            "stop_after_ms": rng.choice([40_000, 10_002, 10_000, 4_000, 1_500]),
        }
        _drive(state, settings_, traffic(random_ticks(rng)), rules)
    if rules == "lagd":  # and 60 more with STOP limits per group from its pauses (lagd.state.pauses)
        draw = random.Random(rng.random())
        paused = 0
        for _ in range(60):
            stop = draw.choice([40_000, 10_002, 10_000, 4_000, 1_500])
            pauses = PauseSettings(
                floor_ms=stop,
                ceiling_ms=draw.choice([stop, 3 * stop, 60_000]),
                default_ms=draw.choice([stop, 2 * stop]),
                margin=draw.choice([1.0, 1.5]),
                learn_ms=draw.choice([0, 30_000, 10**9]),
                min_ms=10_000,
            )
            state = State(intervals=6, lag_samples=draw.choice([4, 40]), rules=lagd_rules(15_000), pauses=pauses)
            settings_ = {"allowed_lag_seconds": draw.choice([0.0, 5.0]), "stop_after_ms": stop, "pauses": pauses}
            _drive(state, settings_, traffic(random_ticks(draw)), rules)
            paused += len(state.group_pauses(C, G)) > 1
        assert paused >= 5, paused  # groups judged with a limit from pauses they made
    history: list[Op] = []
    for t in range(1800):
        if t % 2 == 0:
            history += [("sample", 0, 800, 0), ("eval", 0, 0, 0)]
        if t % 5 == 0 and not 900 <= t < 1100:
            history.append(("commit", 0, 100 if t < 700 else -150 if t >= 1100 else 0, 0))
        history.append(("eval", 0, 0, 1))
    _drive(State(intervals=10, lag_samples=200, rules=lagd_rules(15_000)), {}, history, rules)


def _said(p: PartitionVerdict) -> str:
    """A verdict's rule, and for a reason kept as numbers the kind of reason."""
    return p.rule if isinstance(p.why, str) else f"{p.rule}: {p.why[0]}"


def _recording_pass(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """Count what the compiled pass over a topic's partitions answers (by `_said`) and what it
    hands back to the Python (by what the Python then answers)."""
    real = verdicts.compiled_pass
    assert real is not None
    answered: Counter[str] = Counter()
    handed: Counter[str] = Counter()

    def recording(*args: Any) -> int:
        partitions: list[PartitionVerdict] = args[11]
        had = len(partitions)
        k = real(*args)
        answered.update(_said(p) for p in partitions[had:])
        if k < args[5]:
            handed["(pending)"] += 1
        return k

    real_python = verdicts.Evaluator._judge_partitions

    def python(self: Evaluator, tally: list[Any], topic: str, ids: Any, *rest: Any) -> None:
        partitions: list[PartitionVerdict] = rest[-3]
        had = len(partitions)
        real_python(self, tally, topic, ids, *rest)
        if isinstance(ids, tuple):  # one partition handed back
            handed.update(_said(p) for p in partitions[had:])

    monkeypatch.setattr(verdicts, "compiled_pass", recording)
    monkeypatch.setattr(verdicts.Evaluator, "_judge_partitions", python)
    return answered, handed


@needs_fit
def test_the_compiled_pass_judges_as_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator's loop over a topic's partitions, compiled (`_trend.judge_topic`), against
    the Python loop with the Python judgements, over the same seeded histories as below: the
    same verdicts, since-tracking, re-checks and kept facts, with every answer reached by the
    compiled pass itself and the partitions it hands back judged by the Python."""
    answered, handed = _recording_pass(monkeypatch)
    _drive_all(random.Random(11))
    rules = {
        "within-allowed-seconds",
        "catching-up",
        "keeping-up",
        "too-little-history",
        "rewind",
        "caught-up",
        "empty",
    }
    reasons = {"stop: stopped", "stall: stalled", "falling-behind: falling behind", "still-behind: still behind"}
    assert rules | reasons | {"still-behind: still behind, no trend"} <= set(answered), answered
    # handed back and judged by the Python: here reads of the coarse tier of samples (lag-samples 4)
    assert handed["(pending)"] > 0 and set(handed) - {"(pending)"}, handed


@needs_fit
def test_the_compiled_pass_judges_burrows_rules_as_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same histories under Burrow's rules (evaluator.rules = "burrow"): the compiled pass
    (rules.judge_flat, its STOP re-check and the lag in seconds, compiled) and the Python loop
    give the same verdicts, with every one of Burrow's judgements reached by the pass."""
    answered, handed = _recording_pass(monkeypatch)
    _drive_all(random.Random(12), "burrow")
    burrows = {"stop", "rewind", "recent-low-lag", "stall", "lag-not-decreasing", "progressing", "caught-up", "empty"}
    assert burrows <= set(answered), answered
    # handed back and judged by the Python: reads of the coarse tier of samples (lag-samples 4)
    assert handed["(pending)"] > 0 and set(handed) - {"(pending)"}, handed


@needs_fit
@pytest.mark.parametrize("rules", ["lagd", "burrow"])
def test_the_compiled_pass_hands_back_only_what_the_python_must_answer(
    monkeypatch: pytest.MonkeyPatch, rules: str
) -> None:
    """With samples enough that none leaves for the coarse tier and no allowed-lag (whose lags
    within it the Python puts in seconds), the compiled pass judges every partition itself:
    random histories, and groups of 1,000 partitions falling behind (judged first from scratch,
    then from the facts kept: held WARN) and caught up, each as the Python judges them."""
    answered, handed = _recording_pass(monkeypatch)
    rng = random.Random(5)
    for _ in range(40):
        state = State(intervals=6, lag_samples=2_000, rules=lagd_rules(rng.choice([0, 15_000])))
        settings_ = {"allowed_lag_seconds": rng.choice([0.0, 1.0, 5.0]), "min_history_ms": 20_000}
        _drive(state, settings_, traffic(random_ticks(rng)), rules)
    assert sum(answered.values()) > 1_000 and not handed, (answered, handed)
    if rules == "burrow":
        return
    state = State(intervals=10, lag_samples=60)
    for topic in ("a", "b"):
        for p in range(500):
            for k in range(60):
                state.apply(LogEndSample(C, topic, p, 10_000 + 100 * k, T0 + 10_000 * k))
            for r in range(10):  # falling behind: 100 records more behind at each commit
                state.apply(Commit(C, G, topic, p, 10_000 + 500 * r, 1 + r, T0 + 60_000 * r, T0 + 60_000 * r))
                caught = 10_000 + 100 * min(59, 6 * r + 5)  # the newest at the log end
                state.apply(Commit(C, "caught", topic, p, caught, 1 + r, T0 + 60_000 * r, T0 + 60_000 * r))
    compiled = Evaluator(state, rules=LAGD, cache_ttl_ms=0)
    python = Evaluator(state, rules=LAGD, cache_ttl_ms=0)
    python._judge._cparams = None
    answered.clear()
    for now in (T0 + 590_000, T0 + 595_000):
        _judged_alike(compiled, python, now)
        got = compiled.group(C, "caught", now)
        assert got == python.group(C, "caught", now) and got.status is GroupStatus.OK
    # falling behind, then held WARN (still behind)
    want = {"falling-behind: falling behind": 1_000, "still-behind: still behind": 1_000, "caught-up": 2 * 1_000}
    assert answered == want and not handed


@needs_fit
@pytest.mark.parametrize("rules", ["lagd", "burrow"])
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pass_judges_every_kind_of_partition_as_the_python(
    monkeypatch: pytest.MonkeyPatch, seed: int, rules: str
) -> None:
    """Beyond one topic's history: topics with partitions sampled but never committed (empty
    windows) and committed beyond the sampled count, a topic never sampled (its partitions
    listed sparsely: the Python judges it), owners, statuses taken over from another process
    (held WARN), a blind cluster (judged as of the moment it was last seen), minimum-complete,
    allowed-lag, and hostile log ends whose lags summed pass int64. The compiled pass
    and the Python judge all of it alike, the pass handing back what it must."""
    answered, handed = _recording_pass(monkeypatch)
    rng = random.Random(seed)
    state = State(intervals=6, lag_samples=50)
    settings_: dict[str, Any] = {
        "allowed_lag": rng.choice([0, 20]),
        "minimum_complete": rng.choice([0.0, 0.5]),
        "min_history_ms": 20_000,
        "stop_after_ms": rng.choice([40_000, 4_000]),
    }
    compiled, python, *twins = (Evaluator(state, rules=rule_set(rules), cache_ttl_ms=0, **settings_) for _ in range(4))
    python._judge._cparams = twins[1]._judge._cparams = None
    owners = tuple(
        PartitionOwner(topic, p, f"/10.0.0.{p}", f"consumer-{p}") for topic in ("a", "b") for p in range(0, 10, 3)
    )
    state.apply(GroupMembers(C, G, 1, owners))
    taken = [("a", 1, PartitionStatus.WARN), ("b", 2, PartitionStatus.STOP), ("a", 4, PartitionStatus.WARN)]
    for evaluator in (compiled, python, *twins):
        evaluator.take_over(C, G, taken, T0 - 60_000)
    head = {("a", p): 10_000 for p in range(8)} | {("b", p): 10_000 for p in range(5)}
    now = T0
    order = 0
    for step in range(120):
        now += rng.choice([1_000, 5_000, 15_000])
        for (topic, p), offset in head.items():
            head[topic, p] = min(2**63 - 1, offset + rng.choice([0, 50, 400]))
            if step == 60 and p < 2:  # hostile: log ends at int64's top, whose lags' sum passes it
                head[topic, p] = 2**63 - 1
            state.apply(LogEndSample(C, topic, p, head[topic, p], now))
        for _ in range(rng.randrange(6)):
            topic, p = rng.choice([("a", rng.randrange(10)), ("b", rng.choice([0, 2, 3])), ("c", rng.randrange(5))])
            order += 1
            offset = max(0, min(head.get((topic, p), 10_000), 2**62) - rng.choice([0, 10, 100, 2_000]))
            state.apply(Commit(C, G, topic, p, offset, order, now, now))
        blind = rng.random() < 0.2
        for evaluator in (compiled, python, *twins):
            evaluator.seen_through = (lambda cluster, at: at - 30_000) if blind else (lambda cluster, at: None)
        _judged_alike(compiled, python, now, (twins[0], twins[1]))
    assert {"empty", "caught-up"} <= set(answered), answered
    assert handed, "nothing handed back to the Python"


def _pass_args(n: int = 4) -> dict[str, Any]:
    """The arguments of a direct call of the compiled pass over `n` lagging partitions of one topic."""
    state = State(intervals=3, lag_samples=50)
    for p in range(n):
        for k in range(8):
            state.apply(LogEndSample(C, "t", p, 10_000 + 1000 * k, T0 + 10_000 * k))
        for r in range(4):
            state.apply(Commit(C, G, "t", p, 10_000 + 200 * r * (p % 2 + 1), r + 1, T0 + 20_000 * r, T0 + 20_000 * r))
    evaluator = Evaluator(state, rules=LAGD, cache_ttl_ms=0, min_history_ms=1)
    evaluator._judge.begin(None)
    evaluator._judge.topic("t")
    now = T0 + 100_000
    return {
        "context": evaluator._pass_context,
        "judge": evaluator._judge,
        "tally": [0, 0, -1, -1, 0, 0.0, 2**63 - 1, 0, 0],
        "topic": "t",
        "start": 0,
        "stop": n,
        "windows": {p: array("q", w) for p, w in (state.group_windows(C, G) or {})["t"].items()},
        "log_ends": dict(state.topic_log_ends(C, "t")),
        "owners": {},
        "before": array("q", bytes(8 * n)),
        "since": array("q", bytes(8 * n)),
        "partitions": [],
        "now_ms": now,
        "judged_at": now,
        "intervals": 3,
        "minimum_complete": 0.0,
        "lagd": True,
    }


@needs_fit
def test_the_compiled_pass_refuses_what_it_cannot_read() -> None:
    """Direct calls with what lagd never passes: a status code past the known ones is handed
    back with nothing done; a class that only borrows PartitionVerdict's slots is refused; a
    log end or an owner key that drops the windows and log ends while the pass reads them does
    not pull them from under it (it holds what it reads). Answers as such don't matter there."""
    judge_topic = verdicts.compiled_pass
    assert judge_topic is not None
    a = _pass_args()
    assert judge_topic(*a.values()) == 4 and len(a["partitions"]) == 4  # as lagd passes them: all judged
    a = _pass_args()
    a["before"][0] = (T0 << 8) | 7  # no status has code 7
    assert judge_topic(*a.values()) == 0 and a["partitions"] == [] and not any(a["since"])

    class Tiny:
        __slots__ = ()

    Tiny.__match_args__ = PartitionVerdict.__match_args__  # type: ignore[attr-defined]
    for name in PartitionVerdict.__match_args__:  # type: ignore[attr-defined]
        setattr(Tiny, name, PartitionVerdict.__dict__[name])
    a = _pass_args()
    a["context"] = (Tiny, *a["context"][1:])
    with pytest.raises(TypeError, match="PartitionVerdict"):
        judge_topic(*a.values())

    a = _pass_args()
    windows = a["windows"]

    class DroppingLogEnd:
        """A log end whose offsets, once read, drop every window (the only reference to them)."""

        def __init__(self, le: LogEnd) -> None:
            self.le = le

        @property
        def offsets(self) -> array[int]:
            windows.clear()
            return self.le.offsets

        ts = property(lambda self: self.le.ts)
        run_start = property(lambda self: self.le.run_start)
        coarse_ts = property(lambda self: self.le.coarse_ts)

    a["log_ends"] = {p: DroppingLogEnd(le) for p, le in a["log_ends"].items()}
    judge_topic(*a.values())
    a = _pass_args()
    a["log_ends"] = {
        p: LogEnd(array("q", le.offsets), array("q", le.ts), le.run_start) for p, le in a["log_ends"].items()
    }

    class DroppingKey:
        """An owner key whose comparison drops every log end and window."""

        def __init__(self, p: int) -> None:
            self.p = p

        def __hash__(self) -> int:
            return hash(("t", self.p))

        def __eq__(self, other: object) -> bool:
            a["log_ends"].clear()
            a["windows"].clear()
            return False

    a["owners"] = {DroppingKey(p): None for p in range(4)}
    judge_topic(*a.values())

    a = _pass_args()  # a LogEnd missing a field: read by name, which raises as the Python would
    del next(iter(a["log_ends"].values())).coarse_ts
    with pytest.raises(AttributeError, match="coarse_ts"):
        judge_topic(*a.values())

    a = _pass_args()  # rows: into bytearrays only, whole rows only
    for rows, seconds in ((b"", bytearray()), (bytearray(), array("d")), (bytearray(b"x"), bytearray())):
        with pytest.raises(TypeError, match="bytearrays"):
            judge_topic(*a.values(), rows, seconds, 0)
    with pytest.raises(TypeError, match="20 with rows"):
        judge_topic(*a.values(), bytearray())


@needs_fit
def test_the_compiled_pass_writes_rows_instead_of_verdicts() -> None:
    """With rows (Evaluator.snapshot's call) the pass appends each partition as a snapshot row and
    its lag in seconds, builds no PartitionVerdict, and keeps the same since-tracking, tally and
    facts as when it builds verdicts; the tally's last two say which statuses it saw and whether a
    lag in seconds is a bound."""
    judge_topic = verdicts.compiled_pass
    assert judge_topic is not None
    full, lean = _pass_args(), _pass_args()
    lean["windows"], lean["log_ends"] = full["windows"], full["log_ends"]  # kept facts name the windows they read
    rows, seconds = bytearray(), bytearray()
    assert judge_topic(*full.values()) == 4 and judge_topic(*lean.values(), rows, seconds, 3) == 4
    assert lean["partitions"] == [] and len(full["partitions"]) == 4
    assert lean["tally"] == full["tally"] and lean["since"] == full["since"]
    assert lean["judge"]._new == full["judge"]._new and lean["judge"]._new_ids == full["judge"]._new_ids
    want = snapshot_of(verdicts.GroupVerdict(C, G, GroupStatus.WARN, 1.0, full["partitions"], 4, None, 0, 0.0, 0))
    assert want.rows is not None and want.seconds is not None
    # the snapshot's topic index 0 is this pass's 3
    assert [(3, *r[1:]) for r in struct.iter_unpack("=5q", want.rows)] == list(struct.iter_unpack("=5q", rows))
    assert bytes(seconds) == want.seconds
    statuses = list(PartitionStatus)
    mask = lean["tally"][7]
    assert {statuses[k].value for k in range(len(statuses)) if mask >> k & 1} == {
        p.status.value for p in full["partitions"]
    }
    assert lean["tally"][8] == any(p.current_lag > 0 and p.lag_seconds_estimated for p in full["partitions"])


@needs_fit
def test_the_compiled_pass_fills_only_the_verdict_it_knows() -> None:
    """The compiled pass fills PartitionVerdict's fields in place; verdicts uses it only while the
    dataclass is the one it knows (the same fields in the same order, each set by __init__,
    nothing run after it): a changed verdict class falls back to the Python loop."""
    judge_topic = lagd_fast.compiled_pass
    assert judge_topic is not None and verdicts.compiled_pass is judge_topic
    assert verdicts._fills(PartitionVerdict, judge_topic) is judge_topic
    assert verdicts._fills(PartitionVerdict, None) is None
    known = [(f.name, f.type) for f in dataclasses.fields(PartitionVerdict)]
    variants = {
        "a field more": dataclasses.make_dataclass("V", [*known, ("extra", int, dataclasses.field(default=0))]),
        "one set after __init__": dataclasses.make_dataclass(
            "V", [*known[:-1], (known[-1][0], str, dataclasses.field(default="", init=False))]
        ),
        "one by keyword only": dataclasses.make_dataclass(
            "V", [*known[:-1], (known[-1][0], str, dataclasses.field(default="", kw_only=True))]
        ),
        "two swapped": dataclasses.make_dataclass("V", [known[1], known[0], *known[2:]]),
        "a __post_init__": dataclasses.make_dataclass("V", known, namespace={"__post_init__": lambda self: None}),
    }
    for what, cls in variants.items():
        assert verdicts._fills(cls, judge_topic) is None, what


@needs_fit
def test_the_compiled_judgements_answer_as_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fast evaluators over the same random histories (seeded), one judging by the compiled
    `_trend.standing` (kept facts that stand) and `_trend.fresh` (from the moments on), the other
    in Python: the same verdicts and the same facts kept, with every answer the compiled code
    gives reached (and the declines of `standing`: a trend to fit first), so that the comparison
    covers each of its branches. (tests/test_lagd_fast.py compares the fast path, compiled
    where built, with the reference rules.)"""
    real, real_fresh = lagd_fast._compiled_standing, lagd_fast._compiled_fresh
    assert real is not None and real_fresh is not None
    answered: Counter[str | None] = Counter()
    answered_fresh: Counter[str | None] = Counter()

    def said(got: lagd_fast.Answer | None) -> str | None:
        return None if got is None else got[1] if isinstance(got[2], str) else f"{got[1]}: {got[2][0]}"

    def recording(*args: object) -> lagd_fast.Answer | None:
        got = real(*args)
        answered[said(got)] += 1
        return got

    def recording_fresh(*args: object) -> tuple[lagd_fast.Answer, bytes] | None:
        got = real_fresh(*args)
        answered_fresh[said(got and got[0])] += 1
        return got

    monkeypatch.setattr(lagd_fast, "_compiled_standing", recording)
    monkeypatch.setattr(lagd_fast, "_compiled_fresh", recording_fresh)
    # the judgements as LagdJudge calls them, not through the compiled pass over a topic (below)
    monkeypatch.setattr(verdicts, "compiled_pass", None)
    _drive_all(random.Random(11))
    rules = {"within-allowed-seconds", "catching-up", "keeping-up", "too-little-history", "rewind"}
    reasons = {"stop: stopped", "stall: stalled", "falling-behind: falling behind", "still-behind: still behind"}
    # From kept facts: not caught-up (held WARN with the same facts, their trend said so the first
    # time; test_the_compiled_judgement_at_the_edges reaches it)
    assert rules | reasons | {"still-behind: still behind, no trend", None} <= set(answered), answered
    # From the moments on, where facts are derived and trends fitted: not still behind without a
    # trend, which these histories reach only from kept facts
    assert rules | reasons | {"caught-up"} <= set(answered_fresh), answered_fresh


def kept(arr: array[int], le: LogEnd, **change: object) -> tuple[object, ...]:
    """Facts kept for `arr` and `le` (a partition lagging, its trend kept without its slope, as
    after a fit its z decided), with the fields named in `change` changed."""
    fields = {
        "first": arr[ORDER],
        "newest_order": arr[-FIELDS + ORDER],
        "length": len(arr),
        "le_id": id(le),
        "newest": le.ts[-1],
        "used": le.ts[0],
        "passed": float(T0 + 55_000),
        "reached": float(T0 + 50_000),
        "estimated": False,
        "rewind": False,
        "limit": 60_000,
        "stuck_since": lagd_fast.NO_MS,
        "points": 6,
        "slope": math.nan,
        "z": 0.5,
        "rise": math.nan,
        "noise": math.nan,
        "last": 1.0,
    }
    fields.update(change)
    return tuple(fields.values())


def standing_both(
    facts: tuple[object, ...], arr: array[int], le: LogEnd, lag: int, at: int, behind: bool
) -> tuple[lagd_fast.Answer | None, object]:
    """The compiled judgement from kept `facts` (None: declined) and the Python's answer (the
    compiled judgement off; an exception's type where it raises)."""
    compiled = lagd_fast.LagdJudge(LagdParams())
    standing = lagd_fast._compiled_standing
    assert standing is not None and compiled._cparams is not None
    packed = lagd_fast._PACKED.pack(*facts)
    got = standing(packed, 0, arr, le, lag, at, behind, compiled._cparams, lagd_fast._C_SAID)
    judge = lagd_fast.LagdJudge(LagdParams())
    judge._cparams = None
    judge.begin({"t": array("q", [0]).tobytes() + packed})  # partition 0, then its facts
    judge.topic("t")
    try:
        want: object = judge.judge(0, arr, le, lag, at, PartitionStatus.WARN if behind else None)
    except (OverflowError, struct.error) as e:
        want = type(e)
    return got, want


@needs_fit
@pytest.mark.parametrize(
    ("change", "lag", "at", "behind", "declines"),
    [
        ({}, 500, 100_000, True, False),  # held WARN, its trend now caught up
        ({"points": lagd_fast.UNFITTED}, 500, 100_000, False, True),  # a trend to fit first
        ({"z": 3.0, "last": 9.0}, 500, 100_000, True, True),  # a slope left out, now needed
        ({"limit": 2**60}, 500, 100_000, False, True),  # a STOP limit past a double's exact range
        ({"limit": 2**53 - 1, "stuck_since": -(2**63) + 1}, 500, 2**52, False, True),  # stuck past int64
        ({"le_id": 1}, 500, 100_000, False, True),  # facts of other samples
        ({"first": 7}, 500, 100_000, False, True),  # facts of another window
        ({}, 2**64, 100_000, False, True),  # a lag past int64
        ({}, 500, 2**60, False, True),  # now past a double's exact range
        ({"limit": 2**53 - T0 - 80_001}, 500, 2**53 - T0, False, False),  # STOP, at the edge of exact
        ({"stuck_since": T0 + 20_000}, 500, 100_000, False, False),  # STALL
        ({"z": 3.0, "last": 9.0, "slope": 0.2, "rise": 9.0, "noise": 0.1}, 500, 100_000, False, False),  # falling
        ({"z": 3.0, "last": 9.0, "slope": 0.2, "rise": 9.0, "noise": 0.1}, 500, 100_000, True, False),  # still
        ({"rewind": True}, 500, 100_000, False, False),
        ({"last": 2.5, "slope": 0.01, "rise": 1.0, "noise": 0.1}, 500, 100_000, True, False),  # not quite caught up
        ({"newest": T0 + 80_000}, 500, 100_000, False, False),  # a sample added; the oldest read still kept
        ({"newest": T0 + 80_000, "used": T0 - 1}, 500, 100_000, False, True),  # ... no longer kept
    ],
)
def test_the_compiled_judgement_at_the_edges(
    change: dict[str, object], lag: int, at: int, behind: bool, declines: bool
) -> None:
    """Kept facts built by hand: the compiled judgement answers exactly as the Python, or
    declines (None) where only the Python can; where it declines is asserted."""
    arr = window([(1_000 + 100 * k, 10_000 * k) for k in range(8)])
    le = log_end([(1_000 + 100 * k, 10_000 * k) for k in range(10)], 0, False)
    got, want = standing_both(kept(arr, le, **change), arr, le, lag, T0 + at, behind)  # `at`: ms after T0
    assert (got is None) == declines, got
    if got is not None:
        assert got == want and repr(got) == repr(want)


@needs_fit
def test_the_compiled_judgement_refuses_what_it_cannot_read() -> None:
    """Arguments of the wrong kind are errors, facts past the end a decline, settings it cannot
    read as the Python does are not packed, and a build reading another layout is not used."""
    standing = lagd_fast._compiled_standing
    assert standing is not None
    judge = lagd_fast.LagdJudge(LagdParams())
    arr = window([(T0, 1_000)])
    le = log_end([(1_000, T0)], 0, False)
    args = [bytes(lagd_fast._PACKED.size), 0, arr, le, 0, T0, False, judge._cparams, lagd_fast._C_SAID]
    assert standing(*args) is None  # facts of another window
    assert standing(b"", *args[1:]) is None  # no facts at 0
    assert standing(args[0], 2**62, *args[2:]) is None  # nor at 2**62 (its bytes' place past int64)
    for at, bad in [(0, "facts"), (7, b"short"), (8, (1, 2)), (2, [1, 2])]:
        with pytest.raises(TypeError):
            standing(*args[:at], bad, *args[at + 1 :])
    with pytest.raises(TypeError):
        standing(*args[:-1])
    behind_start = log_end([(1_000, T0)], 0, False)
    behind_start.run_start = -1  # never lagd's: refused, as the fit and the moments refuse it
    with pytest.raises(ValueError, match="run start"):
        standing(args[0], 0, arr, behind_start, *args[4:])
    fresh = lagd_fast._compiled_fresh
    assert fresh is not None
    with pytest.raises(ValueError, match="run start"):
        fresh(arr, behind_start, 10, T0, True, float(T0), float(T0), False, T0, judge._cparams, lagd_fast._C_SAID)
    assert lagd_fast._c_params(LagdParams(stall_after_ms=1.5), 5_000) is None  # type: ignore[arg-type]
    assert lagd_fast._c_params(LagdParams(allowed_lag=2**64), 5_000) is None
    assert lagd_fast._c_params(LagdParams(min_slope=2**60 + 1), 5_000) is None
    assert lagd_fast._c_params(LagdParams(z_enter=10**400), 5_000) is None  # past a double's range
    trend = native.compiled()
    names = ("FACTS_FORMAT", "PARAMS_FORMAT", "standing", "fresh", "judge_topic")
    other = SimpleNamespace(**{k: getattr(trend, k) for k in names})
    assert lagd_fast._judgements(other) == (standing, fresh, trend.judge_topic)  # type: ignore[union-attr]
    other.FACTS_FORMAT += "d"  # a build reading another layout of the facts
    assert lagd_fast._judgements(other) == (None, None, None)


@needs_fit
@pytest.mark.parametrize("consumed", [239, 240, 241])
def test_the_compiled_judgement_tells_a_backlog_drained_as_the_python(consumed: int) -> None:
    """A partition falling behind by its trend while its newest commits consume `consumed`
    records in 20 s against production of 10 a second: working a backlog off (OK) above 12 a
    second (drain-margin 1.2), falling behind (WARN) at or below it, as the Python says."""
    offsets = [1_000 + 100 * k for k in range(6)] + [1_500 + consumed // 2, 1_500 + consumed]
    arr = window([(offset, 10_000 * k) for k, offset in enumerate(offsets)])
    le = log_end([(1_000 + 100 * k, 10_000 * k) for k in range(10)], 0, False)
    facts = kept(arr, le, z=3.0, last=9.0, slope=0.2, rise=9.0, noise=0.1)
    got, want = standing_both(facts, arr, le, 500, T0 + 100_000, False)
    assert got is not None and got == want
    assert got[1] == ("keeping-up" if consumed > 240 else "falling-behind")


@needs_fit
@pytest.mark.parametrize("tie_s", [0.0, 0.25, 2.0, 30.0])
@pytest.mark.parametrize("behind", [False, True])
def test_the_compiled_judgement_from_the_moments_reads_every_setting(tie_s: float, behind: bool) -> None:
    """Settings the evaluator leaves at their defaults (ties, points, slope, rise, noise): a
    partition judged afresh by the compiled code and by the Python, seeded windows whose lags
    rise, fall and scatter, gives the same answer and keeps the same facts."""
    p = LagdParams(tie_s=tie_s, min_points=4, min_slope=0.01, min_rise_s=1.0, noise_factor=2.0, z_enter=1.5)
    rng = random.Random(int(tie_s * 10) + behind)
    compiled, python = lagd_fast.LagdJudge(p), lagd_fast.LagdJudge(p)
    assert compiled._cparams is not None
    python._cparams = None
    seen = set()
    for _ in range(300):
        drift = rng.choice([-0.6, 0.0, 0.3, 0.8])
        offsets = [1_000 + int(10 * (10 * k - max(0.0, 20 + drift * 10 * k + rng.gauss(0, 2)))) for k in range(8)]
        arr = window([(offset, 10_000 * k) for k, offset in enumerate(offsets)])
        le = log_end([(1_000 + 100 * k, 10_000 * k) for k in range(100)], 0, False)
        answers = []
        for judge in (compiled, python):
            judge.begin(None)
            judge.topic("t")
            prior = PartitionStatus.WARN if behind else None
            answers.append((judge.judge(0, arr, le, 9_000, T0 + 75_000, prior), judge.kept()))
        assert answers[0] == answers[1] and repr(answers[0]) == repr(answers[1])
        seen.add(answers[0][0][1])
    assert len(seen) >= 2, seen
