"""The Spark driver JVM's own log lines, in lagd's [log] format and level.

A local or client-mode job runs Spark's driver as a child JVM that writes to the same stderr as
lagd. Left alone it prints Spark's multi-line, non-JSON log4j lines and a JVM launcher warning,
so a journal of `format = "json"` lines would not parse. So the JVM gets a log4j2 configuration
of lagd's (one JSON object a line in the JSON format, exceptions as a field; Spark's usual line
on a terminal) at the level [log] asks for, and in the JSON format its stderr is a pipe whose
lines a thread passes on, wrapping any that are not JSON (the JVM's own warnings) as events.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

from lagd.runtime import logs

log = logs.get("spark")

# lagd's level -> Spark's: Spark's INFO is a line per task, so lagd's info shows its warnings.
SPARK_LEVELS = {"debug": "INFO", "info": "WARN", "warning": "WARN", "error": "ERROR"}

# One JSON object a line, the fields lagd's own events have (timestamp, level, logger, event).
_JSON_PATTERN = (
    "{\"timestamp\": \"%d{yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'}{UTC}\", "
    '"level": "%level{TRACE=debug, DEBUG=debug, INFO=info, WARN=warning, ERROR=error, FATAL=critical}", '
    '"logger": "%enc{%c}{JSON}", "event": "%enc{%m}{JSON}"'
    '%notEmpty{, "exception": "%enc{%throwable}{JSON}"}}%n'
)
_CONSOLE_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


def log4j2_properties(level: str, as_json: bool) -> str:
    """A log4j2 configuration for the driver JVM: stderr only, at Spark's level for lagd's `level`."""
    pattern = _JSON_PATTERN if as_json else _CONSOLE_PATTERN
    return "\n".join(
        [
            f"rootLogger.level = {SPARK_LEVELS[level]}",
            # PySpark's driver counts as Spark's shell, whose level is that of the class that starts
            # it (else WARN, announced on stderr): the same level for both.
            "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer",
            f"logger.gateway.level = {SPARK_LEVELS[level]}",
            "logger.submit.name = org.apache.spark.deploy.SparkSubmit",
            f"logger.submit.level = {SPARK_LEVELS[level]}",
            "rootLogger.appenderRef.stderr.ref = stderr",
            "appender.console.type = Console",
            "appender.console.name = stderr",
            "appender.console.target = SYSTEM_ERR",
            "appender.console.layout.type = PatternLayout",
            # An exception is part of the pattern (a JSON field), never appended below the line.
            "appender.console.layout.alwaysWriteExceptions = false",
            f"appender.console.layout.pattern = {pattern.replace(chr(92), chr(92) * 2)}",
            # Said at every run, nothing to act on: no Hadoop native library; a long query plan.
            "logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader",
            "logger.nativecode.level = ERROR",
            "logger.plans.name = org.apache.spark.util.SparkStringUtils",
            "logger.plans.level = ERROR",
            "",
        ]
    )


def spark_level() -> str:
    """Spark's level for lagd's current one (for sc.setLogLevel once the session runs)."""
    return SPARK_LEVELS.get(logs.current_level(), "WARN")


@contextlib.contextmanager
def driver_logging() -> Iterator[str]:
    """While the driver JVM starts: the Java option that points it at lagd's log4j2 configuration
    (the file is removed after: log4j reads it once, at start); in the JSON format the JVM's
    stderr is a pipe relayed as JSON lines for as long as the JVM lives."""
    as_json = logs.is_json()
    with tempfile.NamedTemporaryFile("w", prefix="lagd-log4j2-", suffix=".properties", delete=False) as f:
        f.write(log4j2_properties(logs.current_level(), as_json))
    option = f"-Dlog4j2.configurationFile=file:{f.name}"
    try:
        if as_json:
            with _stderr_relayed():
                yield option
        else:
            yield option
    finally:
        with contextlib.suppress(OSError):
            os.unlink(f.name)


@contextlib.contextmanager
def _stderr_relayed() -> Iterator[None]:
    """fd 2 is a pipe while the body runs, so a child started then (the JVM) keeps the pipe as
    its stderr; lagd's own stderr is back in place after."""
    read_fd, write_fd = os.pipe()
    out = os.dup(2)
    threading.Thread(target=_relay, args=(os.fdopen(read_fd, "rb"), out), name="spark-stderr", daemon=True).start()
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(out, 2)


def _relay(pipe: IO[bytes], out: int) -> None:
    """Each line the JVM writes: as it is when it is a JSON object, else as an event of its own."""
    for raw in pipe:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.strip():
            os.write(out, (as_json_line(line) + "\n").encode())


def as_json_line(line: str) -> str:
    """`line` when it is one JSON object already, else a JSON event carrying it (the JVM's warnings)."""
    if line.startswith("{"):
        with contextlib.suppress(ValueError):
            if isinstance(json.loads(line), dict):
                return line
    level = "warning" if line.startswith(("WARNING", "Warning")) else "info"
    event = {"event": line.strip(), "level": level, "logger": "spark.jvm", "timestamp": _now()}
    return json.dumps(event)


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")
