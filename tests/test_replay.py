"""`lagd replay` against shared/spec/replay-format.md: input checks, output shape, trace time only.

Traces are built here as JSON lines; the verdicts come from the real State and Evaluator
(default settings unless a test passes a config), and `--from-db` reads a real, migrated
PostgreSQL written through lagd's own Store.
"""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagd import cli
from lagd.core.config import ConfigError, Settings, load
from lagd.core.model import Commit, LogEndSample
from lagd.replay import TS_TOLERANCE_MS, Replay, parse_trace
from lagd.state.store import Store
from lagd.state.windows import State

T0 = 1_790_000_000_000
LAGD = str(Path(sys.executable).parent / "lagd")
RATE = 100  # records a second on every partition
HEALTHY_S = 180  # the consumer keeps up this long...
STOPPED_S = 300  # ...then commits nothing while the log end keeps growing


def commit(ts: int, offset: int, group: str = "g", topic: str = "t", partition: int = 0) -> dict[str, Any]:
    return {
        "ts": ts,
        "type": "commit",
        "cluster": "c",
        "group": group,
        "topic": topic,
        "partition": partition,
        "offset": offset,
    }


def log_end(ts: int, offset: int, topic: str = "t", partition: int = 0) -> dict[str, Any]:
    return {"ts": ts, "type": "log_end", "cluster": "c", "topic": topic, "partition": partition, "offset": offset}


def text(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def stopping_group(group: str = "g", topic: str = "t") -> list[dict[str, Any]]:
    """Two partitions fully consumed for HEALTHY_S; then partition 0's consumer stops committing
    while its log end grows, and partition 1 keeps up to the end."""
    records = []
    for second in range(HEALTHY_S + STOPPED_S):
        ts = T0 + second * 1000
        end = (second + 1) * RATE
        records += [log_end(ts, end, topic, 0), log_end(ts, end, topic, 1)]
        if second < HEALTHY_S:
            records.append(commit(ts + 1, end, group, topic, 0))
        records.append(commit(ts + 2, end, group, topic, 1))
    return records


def replay_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    """`lagd replay ARGS` in this process: exit status, stdout lines, stderr lines."""
    code = cli.main(["replay", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def replay_process(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([LAGD, "replay", *args], input=stdin, capture_output=True, timeout=120, check=False)


@pytest.fixture
def stopping_trace(tmp_path: Path) -> Path:
    path = tmp_path / "stopping.jsonl"
    path.write_text(text(stopping_group()))
    return path


# --- malformed input --------------------------------------------------------------------------

GOOD = [json.dumps(log_end(T0, 100)), "", "# a comment", json.dumps(commit(T0 + 1, 100))]
MALFORMED = [
    ("not json at all", "not JSON"),
    ('{"type": "commit", "ts": 1', "not JSON (Expecting ',' delimiter at column 27)"),
    (json.dumps(commit(T0 + 2, 100)) + " {}", "not JSON (Extra data at column"),
    ('{"type": "commit"} ]', "not JSON (Extra data at column 20)"),
    ("[1, 2]", "a JSON list, not an object"),
    (json.dumps({k: v for k, v in commit(T0 + 2, 100).items() if k != "type"}), "missing field 'type'"),
    (json.dumps({**commit(T0 + 2, 100), "type": "offsets"}), "field 'type' is \"offsets\""),
    (json.dumps({k: v for k, v in commit(T0 + 2, 100).items() if k != "group"}), "missing field 'group'"),
    (json.dumps({k: v for k, v in log_end(T0 + 2, 100).items() if k != "offset"}), "missing field 'offset'"),
    (json.dumps({**commit(T0 + 2, 100), "offset": "120"}), "field 'offset' is \"120\", expected a whole number"),
    (json.dumps({**commit(T0 + 2, 100), "offset": -1}), "field 'offset' is -1, expected a whole number"),
    (json.dumps({**commit(T0 + 2, 100), "partition": True}), "field 'partition' is true"),
    (json.dumps({**log_end(T0 + 2, 100), "ts": 1790000000002.5}), "field 'ts' is 1790000000002.5"),
    (json.dumps({**commit(T0 + 2, 100), "cluster": ""}), "field 'cluster' is \"\", expected a non-empty string"),
    (json.dumps({**commit(T0 + 2, 100), "group": None}), "field 'group' is null"),
    (json.dumps(commit(T0 + 1 - TS_TOLERANCE_MS - 1, 100)), f"is {TS_TOLERANCE_MS + 1} ms before ts {T0 + 1}"),
]


@pytest.mark.parametrize(("line", "problem"), MALFORMED, ids=[p for _, p in MALFORMED])
def test_a_malformed_line_exits_2_naming_its_line_and_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, problem: str
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text("\n".join([*GOOD, line, json.dumps(commit(T0 + 5000, 200))]) + "\n")
    code, out, err = replay_cli(capsys, str(trace))
    assert code == 2
    assert len(err) == 1
    assert err[0].startswith(f"lagd replay: {trace}:5: ")
    assert problem in err[0]
    assert out == []  # nothing for the bad line, nor for anything after it


def test_a_line_not_utf8_is_malformed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(json.dumps(log_end(T0, 1)).encode() + b'\n{"ts": "\xff"}\n')
    code, _, err = replay_cli(capsys, str(trace))
    assert code == 2
    assert err == [f"lagd replay: {trace}:2: not UTF-8 text (invalid start byte at byte 8): write the trace as UTF-8"]


def test_the_ts_check_names_where_the_newer_line_was(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(text([log_end(T0, 1), log_end(T0 + 60_000, 2)]))
    second.write_text(text([log_end(T0 + 1000, 3)]))
    code, _, err = replay_cli(capsys, str(first), str(second))
    assert code == 2
    assert err[0].startswith(
        f"lagd replay: {second}:1: ts {T0 + 1000} is 59000 ms before ts {T0 + 60_000} at {first}:2"
    )
    assert "give several files oldest first" in err[0]


def test_output_before_a_malformed_line_stays_and_nothing_follows_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    records = stopping_group()
    bad_at = len(records) // 2
    trace = tmp_path / "half.jsonl"
    trace.write_text(text(records[:bad_at]) + "{oops\n" + text(records[bad_at:]))
    code, out, err = replay_cli(capsys, str(trace))
    assert code == 2
    assert err[0].startswith(f"lagd replay: {trace}:{bad_at + 1}: not JSON")
    assert out  # the first judgement, long before the bad line
    assert all(json.loads(line)["ts"] <= records[bad_at - 1]["ts"] for line in out)


def test_lines_up_to_the_tolerance_out_of_order_are_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "jitter.jsonl"
    trace.write_text(text([log_end(T0, 10), commit(T0 + 3000, 10), commit(T0 + 3000 - TS_TOLERANCE_MS, 10, "g2")]))
    code, out, err = replay_cli(capsys, str(trace))
    assert (code, err) == (0, [])
    assert [json.loads(line)["group"] for line in out] == ["g2", "g"]


# --- output ---------------------------------------------------------------------------------------


def test_output_lines_have_the_spec_shape_and_only_status_changes(
    capsys: pytest.CaptureFixture[str], stopping_trace: Path
) -> None:
    code, out, err = replay_cli(capsys, str(stopping_trace))
    assert (code, err) == (0, [])
    changes = [json.loads(line) for line in out]
    assert changes
    for change in changes:
        assert list(change) == ["ts", "cluster", "group", "status", "partitions"]
        assert change["ts"] % 1000 == 0  # a tick of --every 1
        assert (change["cluster"], change["group"]) == ("c", "g")
        assert change["status"] in ("OK", "WARN", "ERR")
        for p in change["partitions"]:
            assert list(p) == ["topic", "partition", "status", "rule"]
            assert p["status"] in ("WARN", "STOP", "STALL", "REWIND")
            assert isinstance(p["rule"], str) and p["rule"]
        assert (change["status"] == "OK") == (change["partitions"] == [])
    # the first judgement comes at the first tick at or after the group's first commit
    assert changes[0]["ts"] == T0 + 1000 and changes[0]["status"] == "OK"
    statuses = [c["status"] for c in changes]
    assert all(a != b for a, b in itertools.pairwise(statuses))


def test_a_group_that_stops_committing_while_its_log_end_grows_goes_err(
    capsys: pytest.CaptureFixture[str], stopping_trace: Path
) -> None:
    _, out, _ = replay_cli(capsys, str(stopping_trace))
    changes = [json.loads(line) for line in out]
    stopped_at = T0 + HEALTHY_S * 1000
    err = [c for c in changes if c["status"] == "ERR"]
    assert err, f"never ERR: {changes}"
    assert stopped_at < err[0]["ts"] < stopped_at + STOPPED_S * 1000
    assert [(p["topic"], p["partition"], p["status"]) for p in err[0]["partitions"]] == [("t", 0, "STOP")]
    assert changes[-1]["status"] == "ERR"  # still stopped at the end of the trace
    assert all(c["status"] == "OK" for c in changes if c["ts"] <= stopped_at)  # no alert before it stopped


def test_the_same_trace_twice_gives_the_same_output(capsys: pytest.CaptureFixture[str], stopping_trace: Path) -> None:
    first = replay_cli(capsys, str(stopping_trace))
    second = replay_cli(capsys, str(stopping_trace))
    assert first == second
    assert first[1]


def test_a_tick_sees_exactly_the_events_at_or_before_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "ticks.jsonl"
    # g-at commits exactly on the tick; g-after 1 ms later, and its line comes first
    trace.write_text(text([log_end(T0, 10), commit(T0 + 5001, 10, "g-after"), commit(T0 + 5000, 10, "g-at")]))
    _, out, _ = replay_cli(capsys, str(trace))
    assert [(c["ts"], c["group"]) for c in map(json.loads, out)] == [(T0 + 5000, "g-at"), (T0 + 6000, "g-after")]


def test_every_sets_the_ticks_in_trace_time(capsys: pytest.CaptureFixture[str], stopping_trace: Path) -> None:
    _, out, _ = replay_cli(capsys, "--every", "30", str(stopping_trace))
    changes = [json.loads(line) for line in out]
    assert changes and all(c["ts"] % 30_000 == 0 for c in changes)
    assert changes[0]["ts"] == T0 + 30_000 - T0 % 30_000


def test_every_must_be_a_positive_period(capsys: pytest.CaptureFixture[str], stopping_trace: Path) -> None:
    for bad in ("0", "-1", "0.0001", "nan", "inf"):
        code, out, err = replay_cli(capsys, "--every", bad, str(stopping_trace))
        assert (code, out) == (2, [])
        assert err[0].startswith(f"lagd replay: --every {float(bad)}: give the evaluation period in seconds")


def test_the_input_is_streamed(tmp_path: Path) -> None:
    """Verdicts come out while the trace is still being read, and only a tolerance's worth waits."""
    out = io.StringIO()
    run = Replay(Settings(), 1000, out)
    waiting: list[int] = []

    def lines() -> Iterator[str]:
        for i, record in enumerate(stopping_group()):
            waiting.append(len(run.pending))
            if i == 2000:
                assert out.getvalue(), "nothing judged after 2000 lines"
            yield json.dumps(record)

    run.run(parse_trace([("gen", lines())]))
    assert max(waiting) <= 2 * 4  # two seconds of trace (tolerance plus a tick) at 4 lines a second
    assert out.getvalue().count("\n") >= 2


# --- input sources ---------------------------------------------------------------------------------


def test_stdin_and_files_give_the_same_output_from_the_installed_command(
    stopping_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from_file = replay_process(str(stopping_trace))
    from_stdin = replay_process(stdin=stopping_trace.read_bytes())
    from_dash = replay_process("-", stdin=stopping_trace.read_bytes())
    assert from_file.returncode == from_stdin.returncode == from_dash.returncode == 0
    assert from_file.stderr == from_stdin.stderr == b""
    assert from_file.stdout == from_stdin.stdout == from_dash.stdout
    _, in_process, _ = replay_cli(capsys, str(stopping_trace))
    assert from_file.stdout.decode().splitlines() == in_process


def test_malformed_stdin_exits_2_from_the_installed_command() -> None:
    done = replay_process(stdin=(text([log_end(T0, 1)]) + '{"ts": 5, "type": "commit"}\n').encode())
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "lagd replay: <stdin>:2: missing field 'cluster': this line type needs ts, cluster, group, topic, "
        "partition and offset"
    ]


def test_a_missing_trace_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = replay_cli(capsys, str(tmp_path / "nope.jsonl"))
    assert (code, out) == (2, [])
    assert err == [
        f"lagd replay: {tmp_path / 'nope.jsonl'}: cannot read it (No such file or directory); check the path"
    ]


# --- settings ----------------------------------------------------------------------------------------


def test_a_config_without_clusters_is_accepted_and_applies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, stopping_trace: Path
) -> None:
    config = tmp_path / "replay.toml"
    # pause-learn 0: no pause-history default (lagd.state.pauses), the group STOP after stop-after
    config.write_text('[evaluator]\nstop-after = 240.0\npause-learn = 0.0\n\n[http]\nlisten = "not an address"\n')
    code, out, err = replay_cli(capsys, "--config", str(config), str(stopping_trace))
    assert (code, err) == (0, [])
    first_err = next(json.loads(line)["ts"] for line in out if json.loads(line)["status"] == "ERR")
    assert first_err >= T0 + (HEALTHY_S + 240) * 1000
    # the daemon's loader still wants a cluster (and a valid http.listen): check-config is not weakened
    with pytest.raises(ConfigError, match="clusters"):
        load(config)


def test_a_bad_evaluator_key_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, stopping_trace: Path
) -> None:
    config = tmp_path / "replay.toml"
    config.write_text("[evaluator]\nstop-after = -5.0\n")
    code, out, err = replay_cli(capsys, "--config", str(config), str(stopping_trace))
    assert (code, out) == (2, [])
    assert len(err) == 1 and err[0].startswith("lagd replay: config key 'evaluator.stop-after': got -5.0")


# --- --from-db --------------------------------------------------------------------------------------


async def write_history(database_url: str, records: list[dict[str, Any]]) -> None:
    """The history rows the daemon would have written for these events, through lagd's Store."""
    state = State()
    for order, r in enumerate(records, 1):
        if r["type"] == "commit":
            state.apply(Commit("c", r["group"], r["topic"], r["partition"], r["offset"], order, r["ts"], r["ts"]))
        else:
            state.apply(LogEndSample("c", r["topic"], r["partition"], r["offset"], r["ts"]))
    store = Store.from_url(database_url)
    try:
        await store.write(state.drain_changes())
    finally:
        await store.close()


async def test_from_db_replays_the_stored_history_like_the_trace(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stopping = stopping_group()
    other = [commit(T0 + s * 1000 + 3, (s + 1) * RATE, "h", "u") for s in range(60)]
    other += [log_end(T0 + s * 1000 + 3, (s + 1) * RATE, "u") for s in range(60)]
    await write_history(database_url, stopping + other)
    trace = tmp_path / "g.jsonl"
    trace.write_text(text(stopping))
    config = tmp_path / "db.toml"
    config.write_text(f'[storage]\ndatabase-url = "{database_url}"\n')
    last = stopping[-1]["ts"]

    one = replay_process(
        "--from-db", "--config", str(config), "--group", "g", "--from", "2026-09-21T14:13:20Z", "--to", str(last)
    )
    assert (one.returncode, one.stderr.decode()) == (0, "")
    _, from_trace, _ = replay_cli(capsys, str(trace))
    assert one.stdout.decode().splitlines() == from_trace

    code, every_group, err = replay_cli(
        capsys, "--from-db", "--config", str(config), "--cluster", "c", "--from", str(T0), "--to", str(last)
    )
    assert (code, err) == (0, [])
    assert {json.loads(line)["group"] for line in every_group} == {"g", "h"}
    assert [line for line in every_group if json.loads(line)["group"] == "g"] == from_trace


async def test_from_db_ticks_through_the_end_of_the_range(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """History that ends 30 s after the consumer stopped still reads STOP before --to; the
    trace of the same events ends too early for it."""
    cut = T0 + (HEALTHY_S + 30) * 1000
    records = [r for r in stopping_group() if r["ts"] < cut]
    await write_history(database_url, records)
    trace = tmp_path / "cut.jsonl"
    trace.write_text(text(records))
    config = tmp_path / "db.toml"
    config.write_text(f'[storage]\ndatabase-url = "{database_url}"\n')
    end = T0 + (HEALTHY_S + STOPPED_S) * 1000
    code, out, err = replay_cli(capsys, "--from-db", "--config", str(config), "--from", str(T0), "--to", str(end))
    assert (code, err) == (0, [])
    assert [json.loads(line)["status"] for line in out] == ["OK", "ERR"]
    assert cut < json.loads(out[-1])["ts"] <= end
    _, from_trace, _ = replay_cli(capsys, str(trace))
    assert [json.loads(line)["status"] for line in from_trace] == ["OK"]


async def test_from_db_says_when_the_range_holds_nothing(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "db.toml"
    config.write_text(f'[storage]\ndatabase-url = "{database_url}"\n')
    code, out, err = replay_cli(
        capsys, "--from-db", "--config", str(config), "--group", "nobody", "--from", str(T0), "--to", str(T0 + 1000)
    )
    assert (code, out) == (0, [])
    assert len(err) == 1 and err[0].startswith(
        f"lagd replay: no history between {T0} and {T0 + 1000} for --group nobody"
    )


def test_from_db_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "db.toml"
    config.write_text('[storage]\ndatabase-url = "postgresql://lagd@127.0.0.1:5432/lagd"\n')
    cases = [
        (["--from-db", "--from", "1", "--to", "2"], "--from-db needs --config FILE"),
        (["--from-db", "--config", str(config), "--from", "1"], "--from-db needs --config FILE"),
        (["--from-db", "--config", str(config), "--from", "yesterday", "--to", "2"], "--from 'yesterday' is neither"),
        (["--from-db", "--config", str(config), "--from", "5", "--to", "2"], "--from 5 is after --to 2"),
        (["--from-db", "--config", str(config), "--from", "1", "--to", "2", "x.jsonl"], "give no TRACE files"),
    ]
    for args, problem in cases:
        code, out, err = replay_cli(capsys, *args)
        assert (code, out) == (2, []), args
        assert len(err) == 1 and problem in err[0], (args, err)


def test_from_db_when_the_database_is_unreachable_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "db.toml"
    config.write_text('[storage]\ndatabase-url = "postgresql://lagd@127.0.0.1:1/lagd"\n')
    code, out, err = replay_cli(capsys, "--from-db", "--config", str(config), "--from", "1", "--to", "2")
    assert (code, out) == (1, [])
    assert len(err) == 1
    assert err[0].startswith("lagd replay: cannot read the history (OperationalError: ")
    assert "check storage.database-url" in err[0]


def test_a_group_idle_beyond_expire_group_reads_notfound_then_is_judged_afresh(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """As in the daemon: the evaluator says NOTFOUND, the state forgets the group, and a commit
    after that is a new group whose first judgement is printed again."""
    config = tmp_path / "replay.toml"
    config.write_text("[storage]\nexpire-group = 300.0\n")
    records = [log_end(T0, 10), commit(T0 + 1, 10), log_end(T0 + 1000, 10), commit(T0 + 1001, 10)]
    back = T0 + 600_000
    records += [log_end(back, 10), commit(back + 1, 10)]
    trace = tmp_path / "idle.jsonl"
    trace.write_text(text(records))
    code, out, err = replay_cli(capsys, "--config", str(config), str(trace))
    assert (code, err) == (0, [])
    seen = [(c["ts"], c["status"]) for c in map(json.loads, out)]
    assert seen[0] == (T0 + 1000, "OK")
    assert seen[-2][1] == "NOTFOUND" and T0 + 301_000 <= seen[-2][0] < back
    assert seen[-1] == (back + 1000, "OK")


def test_a_record_ts_line_makes_lag_in_seconds_exact(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A group committed at 400 before the first log-end sample (1000 at T0 + 900 s): lag in
    seconds is only a bound until the record_ts line says when record 400 was appended."""
    records = [commit(T0 + 100_000 + i, 400) for i in range(3)]
    records += [log_end(T0 + 900_000 + 1000 * i, 1000) for i in range(3)]
    record = {"ts": T0 + 903_000, "type": "record_ts", "cluster": "c", "topic": "t", "partition": 0}
    records.append({**record, "offset": 400, "record_ts": T0 + 60_000})
    run = Replay(Settings(), 1000, io.StringIO())
    run.run(parse_trace([("trace", text(records[:-1]).splitlines())]))
    now = T0 + 904_000
    bound = run.evaluator.group("c", "g", now).partitions[0]
    assert bound.lag_seconds_estimated and bound.lag_seconds <= 4.0, bound  # since the oldest kept sample
    run.run(parse_trace([("trace", text(records[-1:]).splitlines())]))
    v = run.evaluator.group("c", "g", now)
    exact = v.partitions[0]
    assert (exact.lag_seconds, exact.lag_seconds_estimated) == ((v.evaluated_at - (T0 + 60_000)) / 1000, False)
    assert exact.lag_seconds > 800
    # a record_ts line missing its record_ts is malformed, named as such
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text([{**record, "offset": 400}]))
    status, out, err = replay_cli(capsys, str(bad))
    assert (status, out) == (2, [])
    assert "missing field 'record_ts'" in err[0], err
