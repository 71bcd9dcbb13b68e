"""Logging with structlog: JSON lines for journald and pipes, readable lines on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Set up structlog once; call `set_level` later to change the level at run time."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    global _current
    _current = level
    # Libraries (aiokafka, aiohttp, sqlalchemy) log through the standard library.
    logging.basicConfig(
        stream=sys.stderr, level=max(_LEVELS[level], logging.WARNING), format="%(levelname)s %(name)s: %(message)s"
    )


_current = "info"


def set_level(level: str) -> None:
    """Change the log level of a running process (SIGHUP, POST /v3/admin/loglevel)."""
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}")
    global _current
    _current = level
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]))


def current_level() -> str:
    return _current


def get(name: str) -> Any:
    return structlog.get_logger(name)
