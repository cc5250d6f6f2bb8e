"""marun's own log: structlog events (what marun did: process_started, stopping, job_finished,
...), kept apart from the ranks' output.

Where they go:
- the event log file, once the supervisor has a log directory (`<log_dir>/marun-events.log`,
  mode 0600): every event at MARUN_LOG_LEVEL (debug, info (default), warning, error);
- the console (stderr): warnings and errors only, except the events the failure summary says
  anyway (`job_failed`, `job_stop`), plus what a person waits on (`waiting for rank table`);
  every event at the log level with `--verbose`, with MARUN_LOG_LEVEL set, or with
  MARUN_LOG_FORMAT=json (JSON lines are for a tool reading stderr).
  On a terminal they are drawn dim, so that the ranks' own lines stand out.
Readable `key=value` lines, or JSON lines with MARUN_LOG_FORMAT=json. Values of secret-named keys
are masked before any renderer sees them."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import MutableMapping
from typing import Any

EVENTS_FILE = "marun-events.log"
# Said by the failure summary at the end, in full: on the console they would say it twice.
SUMMARIZED = frozenset({"job_failed", "job_stop"})
# Not warnings, but a person is waiting on them: on the console at the default level too.
WAITED_ON = frozenset({"waiting for rank table"})
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}
_state: dict[str, Any] = {"configured": False, "verbose": False, "fd": None}


def set_verbose(on: bool = True) -> None:
    """`--verbose`: every event on the console too."""
    _state["verbose"] = on


def log_to_file(directory: str) -> None:
    """From now on, every event also goes to `<directory>/marun-events.log` (appended: a
    restarted marun adds to it). A file that cannot be opened leaves the console as it was."""
    path = os.path.join(directory, EVENTS_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    old, _state["fd"] = _state["fd"], fd
    if old is not None:
        with contextlib.suppress(OSError):
            os.close(old)


_PLAIN = frozenset((str, int, float, bool, type(None)))  # values _mask_secrets leaves as they are


def _mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    from marun.redact import MASK, is_secret_name, mask_argv, mask_env

    for key, value in list(event.items()):
        if key != "event" and is_secret_name(key):
            event[key] = MASK
        elif type(value) in _PLAIN:
            continue  # (most values: a number, a name; one test, not two)
        elif isinstance(value, dict):
            # Values of any type (a round's ports are numbers): masked as their text.
            event[key] = mask_env({str(k): str(v) for k, v in value.items()})
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


def _console_wants(level: str, event: str) -> bool:
    env = os.environ
    if _state["verbose"] or env.get("MARUN_LOG_LEVEL") or env.get("MARUN_LOG_FORMAT") == "json":
        return True  # the level filter has passed it already
    if event in WAITED_ON:
        return True
    return _LEVELS.get(level, 20) >= 30 and event not in SUMMARIZED


# The readable line's layout (structlog's ConsoleRenderer without colours, whose layout it
# keeps): the time, the level padded to the longest level name's width, the event padded to 30,
# then key=value sorted by key; a value that is text stands bare unless it holds a space, a
# quote, `=` or a line break (then as repr()), any other as repr().
_LEVEL_WIDTH = len("exception")
_EVENT_WIDTH = 30
_QUOTED = frozenset(" \t=\r\n\"'")
# Rendered by structlog's own ConsoleRenderer: a traceback, a stack, a logger's name column.
_STRUCTLOG_KEYS = ("stack", "exception", "exc_info", "logger", "logger_name")


def _value(value: Any) -> str:
    if isinstance(value, str):  # (a str enum's too: its text)
        return repr(value) if _QUOTED.intersection(value) else str.__str__(value)
    return repr(value)


class _Readable:
    """The readable line, written here (about a third of what structlog's ConsoleRenderer costs:
    node 0 writes a line a node as 4,096 nodes arrive); the rare event with a traceback, a stack
    or a logger's name goes to structlog's renderer."""

    def __init__(self, fallback: Any) -> None:
        self._fallback = fallback

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str:
        if any(key in event for key in _STRUCTLOG_KEYS):
            return str(self._fallback(logger, name, event))
        head = []
        if "timestamp" in event:
            head.append(str(event.pop("timestamp")))
        if "level" in event:
            level = str(event.pop("level"))
            head.append("[" + level + " " * (_LEVEL_WIDTH - len(level)) + "]")
        if "event" in event:
            text = str(event.pop("event"))
            head.append(text + " " * (_EVENT_WIDTH - len(text)))
        items = [key + "=" + _value(event[key]) for key in sorted(event)]
        return " ".join([part for part in head if part] + items).rstrip(" ")


class _Route:
    """The last processor: the event rendered once, with where it goes (the sink's keywords)."""

    def __init__(self, render: Any) -> None:
        self._render = render

    def __call__(self, _: Any, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
        console = _console_wants(str(event.get("level", "info")), str(event.get("event", "")))
        return {"line": str(self._render(_, __, event)), "console": console}


class _Sink:
    """structlog's logger: writes a routed line to the events file and, when routed there, to
    stderr (dim on a terminal). A closed stderr or a full disk never stops marun."""

    def __init__(self, *_: Any) -> None:
        pass

    def _write(self, line: str, console: bool) -> None:
        fd = _state["fd"]
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, (line + "\n").encode("utf-8", "replace"))
        if console:
            err = sys.stderr
            with contextlib.suppress(OSError, ValueError, AttributeError):
                tty = err.isatty() and os.environ.get("MARUN_LOG_FORMAT") != "json"
                err.write(f"\x1b[2m{line}\x1b[0m\n" if tty else line + "\n")
                err.flush()

    def __getattr__(self, _: str) -> Any:
        return self._write


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
        render = (
            structlog.processors.JSONRenderer()
            if json_lines
            else _Readable(structlog.dev.ConsoleRenderer(colors=False))
        )
        processors: list[Any] = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            _given_time,
            _mask_secrets,
            _Route(render),
        ]
        level = _LEVELS.get(os.environ.get("MARUN_LOG_LEVEL", "info").lower(), 20)
        structlog.configure(
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=_Sink,
            cache_logger_on_first_use=True,
        )
        _state["configured"] = True
    return structlog.get_logger(name)
