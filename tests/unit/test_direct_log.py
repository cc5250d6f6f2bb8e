"""A process not shown on the console writes its log itself (runtime/direct_log.py): its last
lines are read back from the log's end, the same lines the pump would have kept, only from its
latest attempt; the log's growth is its activity."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from marun.runtime import direct_log
from marun.runtime.direct_log import DirectLogs, read_log_tail, tail_of
from marun.runtime.output import TAIL_LINES, OutputStream, new_tail, open_log


def _pump_tail(tmp_path: Path, data: bytes) -> list[str]:
    """What the pump keeps of `data` (fed in one go), for comparison."""
    fd = os.open(tmp_path / "pumped", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    tail = new_tail()
    stream = OutputStream(fd, None, b"", tail)
    stream.feed(data)
    stream.close()
    os.close(fd)
    return list(tail)


def _direct_tail(tmp_path: Path, before: bytes, data: bytes) -> list[str]:
    """`before` written by an earlier attempt, then `data` by the one that failed."""
    path = str(tmp_path / "logs" / "direct.log")
    fd = open_log(path)
    try:
        os.write(fd, before)
        logs = DirectLogs([fd], [path])
        assert logs.begin(0) == fd
        if data:
            os.write(fd, data)
        lines = logs.read_tail(0)
        assert lines is not None
        return lines
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"one line\n",
        b"no newline at the end",
        b"a\n\n\nb\n",
        b"".join(b"%d\r\n" % i for i in range(100)),
        b"caf\xc3\xa9 \xff broken utf-8\n" * 30,
        b"x" * 5000 + b"\nshort\n",  # a kept line is cut to its first 2000 bytes
        b"".join(b"line %d\n" % i for i in range(19)) + b"last, partial",
    ],
    ids=["empty", "newline", "one", "no-newline", "blank-lines", "crlf", "utf8", "wide", "partial"],
)
def test_the_tail_read_back_is_the_pump_s(tmp_path: Path, data: bytes) -> None:
    assert _direct_tail(tmp_path, b"earlier attempt\n" * 50, data) == _pump_tail(tmp_path, data)


def test_random_output_gives_the_pump_s_tail(tmp_path: Path) -> None:
    rng = random.Random(7)
    for round_ in range(30):
        lines = [
            bytes(rng.choice(b"ab \r\xc3\xa9") for _ in range(rng.randrange(0, 300)))
            for _ in range(rng.randrange(0, 400))
        ]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        sub = tmp_path / str(round_)
        sub.mkdir()
        assert _direct_tail(sub, b"", data) == _pump_tail(sub, data), round_


def test_only_the_latest_attempt_s_lines(tmp_path: Path) -> None:
    path = str(tmp_path / "logs" / "rank.log")
    fd = open_log(path)
    try:
        logs = DirectLogs([fd], [path])
        logs.begin(0)
        os.write(fd, b"".join(b"first %d\n" % i for i in range(40)))
        assert logs.read_tail(0) == [f"first {i}" for i in range(20, 40)]
        os.write(fd, b"=== restart round 2 ===\n")  # a marker between rounds (marun's own)
        logs.begin(0)
        os.write(fd, b"second 0\nsecond 1\n")
        assert logs.read_tail(0) == ["second 0", "second 1"]
        logs.begin(0)  # an attempt that wrote nothing (could not start)
        assert logs.read_tail(0) == []
    finally:
        os.close(fd)
    text = Path(path).read_text()
    assert text.startswith("first 0\n") and text.endswith("second 1\n")  # one file, appended


def test_a_log_longer_than_the_window_gives_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_log, "TAIL_READ", 100)
    data = b"".join(b"line %03d\n" % i for i in range(500))  # 9 bytes a line
    # The window (100 bytes) starts inside a line: that one is left out.
    assert _direct_tail(tmp_path, b"", data) == [f"line {i:03d}" for i in range(489, 500)]
    assert _direct_tail(tmp_path / "b", b"", data[:-1]) == [
        f"line {i:03d}" for i in range(489, 500)
    ]


def test_a_window_inside_one_long_line_keeps_that_line_s_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_log, "TAIL_READ", 100)
    lines = _direct_tail(tmp_path, b"", b"start\n" + b"y" * 1000 + b"\n")
    assert lines == ["y" * 99]  # the window: 99 of its bytes and its newline


def test_tail_of_keeps_at_most_keep_lines() -> None:
    data = b"".join(b"%d\n" % i for i in range(50))
    assert tail_of(data, cut=False, keep=TAIL_LINES) == [str(i) for i in range(30, 50)]
    assert tail_of(data, cut=False, keep=3) == ["47", "48", "49"]
    assert tail_of(data, cut=False, keep=0) == []
    assert tail_of(b"rest of a line\nwhole\n", cut=True, keep=5) == ["whole"]
    assert tail_of(b"\nwhole\n", cut=True, keep=5) == ["whole"]  # the window began a line


def test_a_log_replaced_at_its_path_gives_no_lines(tmp_path: Path) -> None:
    """The tail is read by path; a file put there since (not the one the process writes) is
    never read, nor is a link followed."""
    path = str(tmp_path / "logs" / "rank.log")
    fd = open_log(path)
    try:
        logs = DirectLogs([fd], [path])
        logs.begin(0)
        os.write(fd, b"mine\n")
        os.rename(path, path + ".old")
        Path(tmp_path / "secret").write_text("not yours\n")
        os.symlink(tmp_path / "secret", path)
        assert logs.read_tail(0) == []
        assert read_log_tail(path + ".old", fd, 0) == ["mine"]
    finally:
        os.close(fd)


def test_a_process_with_a_pump_has_no_direct_tail(tmp_path: Path) -> None:
    path = str(tmp_path / "rank.log")
    fd = open_log(path)
    try:
        assert DirectLogs([fd], [path]).read_tail(0) is None
    finally:
        os.close(fd)


def test_growth_is_seen_once_per_write_and_not_after_close(tmp_path: Path) -> None:
    paths = [str(tmp_path / "logs" / f"rank_{i}.log") for i in range(3)]
    fds = [open_log(p) for p in paths]
    try:
        logs = DirectLogs(fds, paths)
        assert not logs.grew()  # nothing started
        logs.begin(0)
        logs.begin(2)
        assert not logs.grew()
        os.write(fds[2], b"a line\n")
        assert logs.grew()
        assert not logs.grew()  # seen already
        os.write(fds[1], b"not a direct log\n")
        assert not logs.grew()
        os.write(fds[0], b"x")
        logs.close()
        assert not logs.grew()
    finally:
        for fd in fds:
            os.close(fd)


def test_the_watcher_says_activity_when_a_log_grows_and_ends_on_close(tmp_path: Path) -> None:
    """The hang watchdog's input: `activity()` from the watcher thread once a log has grown,
    never while none grows, never after close, and nothing before a process starts."""
    paths = [str(tmp_path / "logs" / "rank_0.log")]
    fds = [open_log(p) for p in paths]
    said = threading.Semaphore(0)
    try:
        logs = DirectLogs(fds, paths)
        logs.watch(said.release, hang_timeout=0.4)  # looks every 0.05 s
        os.write(fds[0], b"before any start\n")
        assert not said.acquire(timeout=0.3)  # nothing started yet: nothing watched
        logs.begin(0)
        assert not said.acquire(timeout=0.3)  # started, silent
        os.write(fds[0], b"a line\n")
        assert said.acquire(timeout=10)
        assert not said.acquire(timeout=0.3)  # once per growth
        logs.close()
        os.write(fds[0], b"after the end\n")
        assert not said.acquire(timeout=0.3)
    finally:
        for fd in fds:
            os.close(fd)
