"""`lagd jobs` logs as `lagd run` does: [log] format and level from the settings file.

Run as the operator runs it (a process, stderr not a terminal), on a range the job refuses
before Spark starts, so what is judged is lagd's own output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def _run_job(tmp_path: Path, log: str, *args: str) -> list[str]:
    config = tmp_path / "lagd.toml"
    config.write_text(
        '[clusters.c]\nbootstrap-servers = ["127.0.0.1:9092"]\n'
        '[storage]\ndatabase-url = "postgresql://nobody@127.0.0.1:1/none"\n'
        f"[log]\n{log}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "lagd", "jobs", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    return result.stderr.splitlines()


EMPTY_RANGE = ("--from", "2027-01-15T09:00Z", "--to", "2027-01-15T08:00Z")


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]  # every line one JSON object, or this fails


def test_json_format_makes_every_line_an_event(tmp_path: Path) -> None:
    events = _events(_run_job(tmp_path, 'format = "json"\nlevel = "info"', "trends", *EMPTY_RANGE))
    assert len(events) == 1, events
    failed = events[0]
    assert (failed["event"], failed["level"], failed["job"]) == ("job failed", "error", "trends")
    assert failed["reason"].startswith("empty range: --to (2027-01-15T08:00Z) must be after --from")
    assert "timestamp" in failed


def test_level_debug_adds_the_trace_as_a_field(tmp_path: Path) -> None:
    events = _events(_run_job(tmp_path, 'format = "json"\nlevel = "debug"', "trends", *EMPTY_RANGE))
    trace = next(e for e in events if e["event"] == "job failure trace")
    assert trace["level"] == "debug" and "JobError: empty range" in trace["exception"]
    assert [e["event"] for e in events if e["level"] == "error"] == ["job failed"]


def test_console_format_keeps_the_two_plain_lines(tmp_path: Path) -> None:
    lines = _run_job(tmp_path, 'format = "console"\nlevel = "warning"', "trends", *EMPTY_RANGE)
    assert lines == [
        "lagd: trends job failed: empty range: --to (2027-01-15T08:00Z) must be after --from (2027-01-15T09:00Z): "
        "give a later --to, or leave --to out to run up to now"
    ]
