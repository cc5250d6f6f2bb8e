"""marun's own log: structlog to stderr, readable on a terminal, JSON lines with
MARUN_LOG_FORMAT=json, events below MARUN_LOG_LEVEL (debug, info (default), warning, error)
dropped. Values of secret-named keys are masked before any renderer sees them."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

_state = {"configured": False}


def _mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    from marun.redact import MASK, is_secret_name, mask_argv, mask_env

    for key, value in list(event.items()):
        if key != "event" and is_secret_name(key):
            event[key] = MASK
        elif isinstance(value, dict):
            event[key] = mask_env(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            event[key] = mask_argv(value)
    return event


def _given_time(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """An event logged after it happened (`_at`: its time.time()) shows when it happened."""
    at = event.pop("_at", None)
    if at is not None:
        import datetime

        event["timestamp"] = datetime.datetime.fromtimestamp(at).isoformat()
    return event


def _import_structlog() -> Any:
    """structlog, without the optional rich and better_exceptions it would import to draw
    tracebacks (a third of its import time; marun logs no tracebacks): they are hidden while it
    loads, and only then, so whoever imports them later gets them."""
    hidden = [name for name in ("rich", "better_exceptions") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import structlog
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
    return structlog


def get_logger(name: str = "marun") -> Any:
    structlog = _import_structlog()

    if not _state["configured"]:
        json_lines = os.environ.get("MARUN_LOG_FORMAT", "").lower() == "json"
        processors: list[Any] = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            _given_time,
            _mask_secrets,
        ]
        if json_lines:
            processors.append(structlog.processors.JSONRenderer())
        else:
            processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
        import logging

        level = logging.getLevelName(os.environ.get("MARUN_LOG_LEVEL", "info").upper())
        structlog.configure(
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(
                level if isinstance(level, int) else logging.INFO
            ),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=True,
        )
        _state["configured"] = True
    return structlog.get_logger(name)
