"""Collapsed console lines (runtime/collapse.py): eight ranks of a node printing the same and
different lines; each rank's order, the window, a rank repeating a line, a flood, the logs
untouched, and when the console collapses at all (runtime/execute.node_console). The clock is
the test's own and no writer thread runs: `write_due(now)` stands in for it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec, Supervision
from marun.runtime import collapse
from marun.runtime.collapse import CollapsingConsole, ranks_label
from marun.runtime.execute import node_console
from marun.runtime.output import Console, OutputStream, new_tail


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


Setup = tuple[CollapsingConsole, Clock, Callable[[], str]]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    clock = Clock()
    console = CollapsingConsole(0.5, fd, clock=clock, timer=False)
    yield console, clock, lambda: (tmp_path / "console").read_bytes().decode()
    os.close(fd)


def _say(console: CollapsingConsole, rank: int, text: str) -> None:
    data = (text + "\n").encode()
    console.show(f"[0:{rank}] ".encode(), b"", data, len(data) - 1)


def test_the_same_line_of_eight_ranks_is_shown_once(setup: Setup) -> None:
    console, clock, shown = setup
    for rank in (3, 0, 7, 1, 2, 6, 5, 4):
        _say(console, rank, "Loading dataset")
        clock.now += 0.01
    assert shown() == ""  # held: others may say it too
    assert console.write_due(clock.now) == pytest.approx(100.5)
    clock.now = 100.5
    assert console.write_due(clock.now) is None
    assert shown() == "[0:0-7] Loading dataset\n"


def test_lines_that_differ_never_collapse_and_each_rank_keeps_its_order(setup: Setup) -> None:
    console, clock, shown = setup
    said = [["banner", f"shard {r}", "ready" if r % 2 else "waiting"] for r in range(8)]
    for line in range(3):  # the ranks print at once, each its own three lines
        for rank in range(8):
            _say(console, rank, said[rank][line])
    clock.now += 1
    console.write_due(clock.now)
    lines = shown().splitlines()
    assert lines[0] == "[0:0-7] banner"
    assert lines[1:9] == [f"[0:{r}] shard {r}" for r in range(8)]
    assert lines[9:] == ["[0:0,2,4,6] waiting", "[0:1,3,5,7] ready"]
    for rank in range(8):  # each rank's own lines, in its order
        mine = [line.split("] ", 1)[1] for line in lines if _names(line, rank)]
        assert mine == said[rank]


def _names(line: str, rank: int) -> bool:
    label = line[3 : line.index("]")]
    for word in label.split(","):
        low, _, high = word.partition("-")
        if int(low) <= rank <= int(high or low):
            return True
    return False


def test_a_line_after_the_window_is_a_line_of_its_own(setup: Setup) -> None:
    console, clock, shown = setup
    _say(console, 0, "epoch done")
    clock.now += 0.6  # rank 0's line is due, and goes before rank 1's comes
    console.write_due(clock.now)
    _say(console, 1, "epoch done")
    clock.now += 0.6
    console.write_due(clock.now)
    assert shown() == "[0:0] epoch done\n[0:1] epoch done\n"


def test_no_line_waits_longer_than_the_window(setup: Setup) -> None:
    console, clock, shown = setup
    _say(console, 0, "a")
    clock.now += 0.3
    _say(console, 1, "a")  # joins rank 0's line: out when rank 0's is due
    _say(console, 1, "b")
    assert console.write_due(100.5) == pytest.approx(100.8)
    assert shown() == "[0:0-1] a\n"
    console.write_due(100.8)
    assert shown() == "[0:0-1] a\n[0:1] b\n"


def test_a_rank_repeating_a_line(setup: Setup) -> None:
    console, _, shown = setup
    _say(console, 0, "retrying")
    _say(console, 0, "retrying")
    _say(console, 1, "retrying")
    _say(console, 1, "retrying")
    _say(console, 2, "retrying")
    console.flush()
    assert shown() == "[0:0-2] retrying\n[0:0-1] retrying\n"


def test_a_rank_later_in_its_own_output_does_not_join_an_older_line(setup: Setup) -> None:
    console, _, shown = setup
    _say(console, 0, "A")
    _say(console, 1, "B")
    _say(console, 1, "A")  # after its B: joining rank 0's A would show it before B
    console.flush()
    assert shown() == "[0:0] A\n[0:1] B\n[0:1] A\n"


def test_a_flood_goes_out_as_it_is_after_what_is_held(setup: Setup) -> None:
    console, clock, shown = setup
    _say(console, 1, "held")
    line = b"x" * 99 + b"\n"
    lines = collapse.FLOOD_BYTES // len(line)
    for _ in range(lines):  # up to FLOOD_BYTES in a window: held
        console.show(b"[0:0] ", b"", line, len(line) - 1)
    assert shown() == ""
    console.show(b"[0:0] ", b"", line * 3, 3 * len(line) - 1)  # beyond: held, then as it comes
    said = shown().splitlines()
    assert said[0] == "[0:1] held"
    assert said[1:] == ["[0:0] " + "x" * 99] * (lines + 3)
    clock.now += 0.5  # the next window: still a flood (the one before was)
    console.show(b"[0:0] ", b"", line, len(line) - 1)
    assert len(shown().splitlines()) == lines + 5
    clock.now += 0.5  # a whole window with less: collapsed again
    _say(console, 0, "calm")
    _say(console, 1, "calm")
    console.flush()
    assert shown().splitlines()[-1] == "[0:0-1] calm"


def test_the_logs_keep_every_line_and_the_last_stream_s_end_writes_out(
    tmp_path: Path, setup: Setup
) -> None:
    console, _, shown = setup
    logs, streams = [], []
    for rank in range(3):
        log_fd = os.open(tmp_path / f"log{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        logs.append(log_fd)
        streams.append(OutputStream(log_fd, console, f"[0:{rank}] ".encode(), new_tail()))
    for rank, stream in enumerate(streams):
        stream.feed(b"same\nmine %d\nlast without newline" % rank)
    streams[0].close()
    streams[1].close()
    assert shown() == ""  # held: the writer thread's (none here) until the last stream ends
    streams[2].close()
    for fd in logs:
        os.close(fd)
    assert [(tmp_path / f"log{r}").read_bytes() for r in range(3)] == [
        b"same\nmine %d\nlast without newline" % r for r in range(3)
    ]
    assert shown().splitlines() == [
        "[0:0-2] same",
        "[0:0] mine 0",
        "[0:1] mine 1",
        "[0:2] mine 2",
        "[0:0-2] last without newline",
    ]


def test_more_lines_held_than_one_writev_takes(setup: Setup) -> None:
    """Thousands of lines held at once go out whole (writev refuses more than IOV_MAX parts:
    the console once went silent on it, 8 ranks x 50 MB in bench/relay.py)."""
    console, clock, shown = setup
    for line in range(600):
        for rank in range(8):
            _say(console, rank, f"rank {rank} line {line}")
    clock.now += 1
    console.write_due(clock.now)
    assert len(shown().splitlines()) == 4800
    _say(console, 0, "still shown")
    console.flush()
    assert shown().splitlines()[-1] == "[0:0] still shown"


def test_ranks_label() -> None:
    assert ranks_label([b"3", b"0", b"1", b"2", b"5", b"scheduler"]) == b"0-3,5,scheduler"
    assert ranks_label([b"7"]) == b"7"


def _plan(ranks: int, **supervision: object) -> tuple[LaunchPlan, NodePlan]:
    processes = tuple(
        ProcessSpec(f"worker-{r}", ("python", "t.py"), {}, "/", f"/tmp/w{r}.log", rank=r)
        for r in range(ranks)
    )
    node = NodePlan(0, "h0", processes=processes)
    return LaunchPlan("pytorch", (node,), supervision=Supervision(**supervision)), node


@pytest.mark.parametrize(
    ("ranks", "settings", "collapses"),
    [
        (8, {}, True),
        (3, {}, True),
        (2, {}, False),  # two ranks or fewer: as they come
        (8, {"collapse_window": 0.0}, False),  # the setting turns it off
        (8, {"console_ranks": ("0", "1")}, False),  # two shown
        (8, {"prefix_output": False}, False),  # whole `marun run`s: theirs collapse
    ],
)
def test_when_the_console_collapses(
    ranks: int, settings: dict[str, object], collapses: bool
) -> None:
    console = node_console(*_plan(ranks, **settings))
    assert isinstance(console, CollapsingConsole) is collapses
    assert isinstance(console, Console)
    assert (console.progress is not None) is settings.get("prefix_output", True)
