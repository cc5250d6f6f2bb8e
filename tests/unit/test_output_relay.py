"""The relay's block path (runtime/output.py): bytes as written to the log, whole prefixed lines
to the console however the reads cut them, the last lines in the tail, a long line cut."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from marun.runtime import output
from marun.runtime.output import Console, OutputStream, new_tail


def _relay(
    tmp_path: Path, data: bytes, cuts: list[int], shown: bool = True
) -> tuple[bytes, bytes, list[str]]:
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    console_fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    tail = new_tail()
    stream = OutputStream(log_fd, Console(console_fd) if shown else None, b"[0:3] ", tail)
    start = 0
    for cut in [*cuts, len(data)]:
        stream.feed(data[start:cut])
        start = cut
    stream.close()
    os.close(log_fd)
    os.close(console_fd)
    return (tmp_path / "log").read_bytes(), (tmp_path / "console").read_bytes(), list(tail)


def test_lines_cut_anywhere_arrive_whole_and_prefixed(tmp_path: Path) -> None:
    lines = [f"line {i} ".encode() + b"x" * random.Random(i).randrange(0, 300) for i in range(500)]
    data = b"\n".join(lines) + b"\nlast without newline"
    cuts = sorted(random.Random(1).sample(range(1, len(data)), 200))
    log, console, tail = _relay(tmp_path, data, cuts)
    assert log == data
    assert console == b"".join(
        b"[0:3] " + line + b"\n" for line in [*lines, b"last without newline"]
    )
    assert tail == [line.decode() for line in lines[-19:]] + ["last without newline"]


def test_a_process_not_shown_still_gets_its_log_and_tail(tmp_path: Path) -> None:
    data = b"".join(b"%d\r\n" % i for i in range(100))
    log, console, tail = _relay(tmp_path, data, [7, 150], shown=False)
    assert (log, console) == (data, b"")
    assert tail == [str(i) for i in range(80, 100)]


def test_a_line_longer_than_max_line_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "MAX_LINE", 10)
    data = b"a" * 25 + b"\nb\n"
    log, console, _ = _relay(tmp_path, data, [4, 12, 24])
    assert log == data
    pieces = [line.removeprefix(b"[0:3] ") for line in console.split(b"\n")[:-1]]
    assert b"".join(pieces) == b"a" * 25 + b"b"
    assert all(len(p) <= 10 + 12 for p in pieces)  # cut within a read's size of MAX_LINE
    assert pieces[-1] == b"b"
