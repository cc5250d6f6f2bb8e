"""marun's own log: structlog to stderr, readable on a terminal, JSON lines with
MARUN_LOG_FORMAT=json, events below MARUN_LOG_LEVEL (debug, info (default), warning, error)
dropped. Values of secret-named keys are masked before any renderer sees them."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

_state = {"configured": False}


def _mask_secrets(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    from marun.redact import MASK, is_secret_name, mask_argv, mask_env

    for key, value in list(event.items()):
        if key != "event" and is_secret_name(key):
            event[key] = MASK
        elif isinstance(value, dict):
            event[key] = mask_env(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            event[key] = mask_argv(value)
    return event


def get_logger(name: str = "marun") -> FilteringBoundLogger:
    import structlog

    if not _state["configured"]:
        json_lines = os.environ.get("MARUN_LOG_FORMAT", "").lower() == "json"
        processors: list[Processor] = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
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
    logger: FilteringBoundLogger = structlog.get_logger(name)
    return logger
