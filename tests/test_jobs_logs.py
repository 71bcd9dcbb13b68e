"""`lagd jobs` logs as `lagd run` does: [log] format and level from the settings file, for
lagd's own lines and for the Spark driver JVM's.

Run as the operator runs it (a process, stderr not a terminal): on a range the job refuses
before Spark starts (lagd's own output), and on a real local Spark (the JVM's too)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lagd.jobs.jvmlog import as_json_line, log4j2_properties


def _run_job(
    tmp_path: Path, log: str, *args: str, url: str = "postgresql://nobody@127.0.0.1:1/none", status: int = 1
) -> list[str]:
    config = tmp_path / "lagd.toml"
    config.write_text(
        f'[clusters.c]\nbootstrap-servers = ["127.0.0.1:9092"]\n[storage]\ndatabase-url = "{url}"\n[log]\n{log}\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "lagd", "jobs", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == status, result.stderr
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


def test_the_jvms_configuration_follows_log_settings() -> None:
    assert "rootLogger.level = INFO" in log4j2_properties("debug", as_json=True)
    assert "rootLogger.level = WARN" in log4j2_properties("info", as_json=False)
    assert "rootLogger.level = ERROR" in log4j2_properties("error", as_json=True)
    text = log4j2_properties("info", as_json=True)
    assert '"event": "%enc{%m}{JSON}"' in text and "alwaysWriteExceptions = false" in text
    assert '"event"' not in log4j2_properties("info", as_json=False)


def test_jvm_lines_that_are_not_json_become_events() -> None:
    event = json.loads(as_json_line("WARNING: Using incubator modules: jdk.incubator.vector"))
    assert (event["level"], event["logger"]) == ("warning", "spark.jvm")
    assert event["event"] == "WARNING: Using incubator modules: jdk.incubator.vector"
    assert json.loads(as_json_line("Setting default log level"))["level"] == "info"
    line = '{"event": "x", "level": "warning", "logger": "org.apache.spark.util.Utils"}'
    assert as_json_line(line) == line
    assert json.loads(as_json_line("{not json"))["event"] == "{not json"


@pytest.mark.slow
def test_a_real_job_writes_only_json_lines_spark_included(database_url: str, tmp_path: Path) -> None:
    # An empty history: Spark starts, the job finds nothing to do, Spark stops.
    debug = _events(_run_job(tmp_path, 'format = "json"\nlevel = "debug"', "trends", url=database_url, status=0))
    spark = [e for e in debug if str(e.get("logger", "")).startswith("org.apache.spark")]
    assert any(e["level"] == "info" for e in spark), debug  # the JVM's own lines, at Spark's INFO for debug
    assert "trends: no history yet and no watermark; nothing to do" in [e["event"] for e in debug]

    info = _events(_run_job(tmp_path, 'format = "json"\nlevel = "info"', "trends", url=database_url, status=0))
    assert not [e for e in info if str(e.get("logger", "")).startswith("org.") and e["level"] == "info"], info
    assert "trends: no history yet and no watermark; nothing to do" in [e["event"] for e in info]
