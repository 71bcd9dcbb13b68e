"""Logging with structlog: JSON lines for journald and pipes, readable lines on a terminal.

Everything lagd's process logs goes through the same processors and out as one line: lagd's
own structlog events and the standard library's records of the libraries it uses (aiokafka,
aiohttp, asyncio, sqlalchemy, alembic, Python warnings), the latter with a `logger` field.
An exception is a field of its event (`exception`: the traceback, escaped onto the line in
JSON; `exc`: `Type: message (file:line)` on a terminal), never a multi-line block.

A request aiohttp cannot parse is the client's fault: one warning line (client and reason, at
most one a minute), not an ERROR with the parser's traceback.

aiokafka logs every failed connection attempt itself at ERROR; lagd's readers already report
each outage once with what to do (lagd.runtime.backoff), so aiokafka's own lines show only at
log.level = "debug".
"""

from __future__ import annotations

import logging
import math
import sys
import time
import traceback
from typing import Any

import structlog
from structlog.typing import EventDict, Processor

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# Libraries that report what lagd reports better itself: shown only when debugging.
_QUIET_LIBRARIES = ("aiokafka",)

_handler: logging.Handler | None = None


def _exception_on_one_line(_: Any, __: str, event: EventDict) -> EventDict:
    """exc_info -> `exc`: "Type: message (file:line)", for a terminal (one line per event)."""
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    elif isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    if isinstance(exc_info, tuple) and exc_info[0] is not None:
        _, exc, tb = exc_info
        where = ""
        frames = traceback.extract_tb(tb) if tb is not None else []
        if frames:
            where = f" ({frames[-1].filename}:{frames[-1].lineno})"
        text = str(exc).replace("\n", " ")
        # Not "exception": the console renderer would print that below the line.
        event["exc"] = f"{exc.__class__.__name__}: {text}{where}" if text else f"{exc.__class__.__name__}{where}"
    return event


def _flatten_message(_: Any, __: str, event: EventDict) -> EventDict:
    """A library's message on one line (some put tracebacks or newlines into the message)."""
    msg = event.get("event")
    if isinstance(msg, str) and "\n" in msg:
        event["event"] = " | ".join(part for part in msg.splitlines() if part.strip())
    return event


class _MalformedRequests(logging.Filter):
    """aiohttp logs a request it cannot parse (the client's fault, answered 400) at ERROR with
    the parser's traceback, so a scanner or a misconfigured client looks like a lagd failure and
    can fill the log. Such a record becomes one warning line naming the client and what was
    wrong, at most one per `every` seconds (saying how many went unlogged meanwhile)."""

    def __init__(self, every: float = 60.0) -> None:
        super().__init__()
        self.every = every
        self._last = -math.inf
        self._unlogged = 0

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = time.monotonic()
        if now - self._last < self.every:
            self._unlogged += 1
            return False
        lines = [ln.strip() for ln in str(exc.message).splitlines() if ln.strip()]
        what = (lines[0].rstrip(":") if lines else exc.__class__.__name__)[:200]
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        more = f" ({self._unlogged} more since the last such line)" if self._unlogged else ""
        record.msg = f"malformed HTTP request from {peer} answered {exc.code}: {what}{more}"
        record.args = ()
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self._last, self._unlogged = now, 0
        return True


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Set up structlog and the standard library's logging once; `set_level` changes the level later."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    exceptions: Processor = structlog.processors.format_exc_info if as_json else _exception_on_one_line
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), exceptions, _flatten_message, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    global _current, _handler, _json
    _current = level
    _json = as_json
    # Libraries log through the standard library: the same processors render their records.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            exceptions,
            _flatten_message,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    _handler = handler
    server = logging.getLogger("aiohttp.server")
    for old_filter in [f for f in server.filters if isinstance(f, _MalformedRequests)]:
        server.removeFilter(old_filter)
    server.addFilter(_MalformedRequests())
    logging.captureWarnings(True)
    _set_library_levels(level)


def _set_library_levels(level: str) -> None:
    logging.getLogger().setLevel(max(_LEVELS[level], logging.WARNING))
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING if level == "debug" else logging.CRITICAL)


_current = "info"


def set_level(level: str) -> None:
    """Change the log level of a running process (SIGHUP, POST /v3/admin/loglevel)."""
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}")
    global _current
    _current = level
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]))
    if _handler is not None:
        _set_library_levels(level)


def current_level() -> str:
    return _current


_json = False


def is_json() -> bool:
    """Whether `configure` chose JSON lines: then a command's own messages must be JSON events too."""
    return _json


def get(name: str) -> Any:
    return structlog.get_logger(name)
