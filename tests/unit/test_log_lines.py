"""marun.log's readable line: the layout structlog's ConsoleRenderer (no colours) gives, written
by marun (node 0 writes one a node as thousands arrive); a traceback, a stack or a logger's name
still goes through structlog's renderer."""

from __future__ import annotations

import enum
import random
from typing import Any

import pytest

from marun.log import _import_structlog, _Readable

structlog = _import_structlog()


class Phase(str, enum.Enum):
    RUNNING = "running"
    ODD = "a b"


THEIRS = structlog.dev.ConsoleRenderer(colors=False)
OURS = _Readable(THEIRS)
VALUES: list[Any] = [
    0, -3, 2**70, 1.5, float("nan"), True, None, "", "host-0", "a b", "a=b", "tab\there",
    "line\nbreak", "it's", 'say "x"', "\u00e9t\u00e9", "[info]", [1, "a"], ("x",), {"k": 1},
    {"MARUN_JOB_TOKEN": "***"}, b"bytes", Phase.RUNNING, Phase.ODD,
]  # fmt: skip


def _event(rng: random.Random) -> dict[str, Any]:
    event: dict[str, Any] = {}
    if rng.random() < 0.9:
        event["timestamp"] = "2026-11-29T18:26:06.156923"
    if rng.random() < 0.9:
        event["level"] = rng.choice(["debug", "info", "warning", "error", "critical", "x" * 12])
    if rng.random() < 0.95:
        event["event"] = rng.choice(["node_arrived", "", "e" * 40, "with space", "x=1"])
    for _ in range(rng.randrange(6)):
        event[rng.choice(["node", "host", "why", "a", "zz", "_at", "B", "slots"])] = rng.choice(
            VALUES
        )
    return event


@pytest.mark.parametrize("seed", range(300))
def test_a_line_is_the_one_structlog_s_console_renderer_gives(seed: int) -> None:
    event = _event(random.Random(seed))
    assert OURS(None, "info", dict(event)) == THEIRS(None, "info", dict(event))


@pytest.mark.parametrize("key", ["stack", "exception", "logger", "logger_name"])
def test_a_traceback_stack_or_logger_goes_to_structlog(key: str) -> None:
    event = {"timestamp": "t", "level": "error", "event": "e", "node": 1, key: "text\nmore"}
    assert OURS(None, "error", dict(event)) == THEIRS(None, "error", dict(event))


def test_the_line_s_layout() -> None:
    """What `marun report` and a person read (docs/supervision.md, "Record")."""
    event = {"timestamp": "2026-11-29T18:26:06.156923", "level": "info", "event": "node_arrived"}
    got = OURS(None, "info", {**event, "slots": 8, "node": 0, "host": "host-0"})
    assert got == (
        "2026-11-29T18:26:06.156923 [info     ] node_arrived                   "
        "host=host-0 node=0 slots=8"
    )
    got = OURS(None, "warning", {**event, "level": "warning", "why": "a b", "n": None})
    assert got == (
        "2026-11-29T18:26:06.156923 [warning  ] node_arrived                   n=None why='a b'"
    )
