"""The relay (runtime/output.py): bytes as written to the log, whole prefixed lines to the
console however the reads cut them, the last lines in the tail, a long line cut; and its pump
threads: many pipes at once on one console, the end of the run, a log that cannot be written."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from marun.runtime import output
from marun.runtime.output import Console, OutputStream, Relay, new_tail


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


# -- the pumps: one thread per pipe, one console ----------------------------------------------


def _threads() -> int:
    """This process's threads, as the kernel counts them (the pumps are bare threads)."""
    return len(os.listdir("/proc/self/task"))


def _back_to(threads: int) -> None:
    guard = time.monotonic() + 60  # a hang guard only: a pump's thread ends right after `done`
    while _threads() > threads:  # (a thread of an earlier test's that ends now counts too)
        assert time.monotonic() < guard, f"{_threads() - threads} threads left"
        time.sleep(0.01)


def test_many_pipes_pumped_at_once_never_tear_a_line(tmp_path: Path) -> None:
    """Eight writers at once, lines of every length cut anywhere by the writes (one longer than
    a pipe's atomic write): each line whole on the shared console with its own prefix, in its
    writer's order; each log byte for byte; every pump gone after close."""
    threads = _threads()
    console_fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    relay = Relay()
    streams = 8
    expected: list[bytes] = []
    writers: list[threading.Thread] = []
    log_fds: list[int] = []
    for s in range(streams):
        rng = random.Random(s)
        lines = [b"%d:%d:" % (s, i) + b"x" * rng.randrange(0, 9000) for i in range(400)]
        data = b"\n".join(lines) + b"\n"
        expected.append(data)
        cuts = sorted(rng.sample(range(1, len(data)), 300))
        read_fd, write_fd = os.pipe()
        log_fds.append(os.open(tmp_path / f"log{s}", os.O_WRONLY | os.O_CREAT, 0o600))
        prefix = b"[0:%d] " % s
        relay.start(read_fd, OutputStream(log_fds[s], Console(console_fd), prefix, new_tail()))

        def write(fd: int = write_fd, data: bytes = data, cuts: list[int] = cuts) -> None:
            start = 0
            for cut in [*cuts, len(data)]:
                os.write(fd, data[start:cut])  # blocking: the pipe takes it all
                start = cut
            os.close(fd)

        writers.append(threading.Thread(target=write))
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert relay.close(patience=60)
    _back_to(threads)
    os.close(console_fd)
    for fd in log_fds:
        os.close(fd)
    seen: dict[int, list[bytes]] = {s: [] for s in range(streams)}
    for line in (tmp_path / "console").read_bytes().split(b"\n")[:-1]:
        stream = int(line[3 : line.index(b"]")])
        body = line[len(b"[0:%d] " % stream) :]
        assert body.startswith(b"%d:" % stream), line[:80]
        seen[stream].append(body)
    for s in range(streams):
        assert b"\n".join(seen[s]) + b"\n" == expected[s]
        assert (tmp_path / f"log{s}").read_bytes() == expected[s]


def test_close_takes_what_is_in_a_pipe_without_waiting_for_a_writer_that_lives_on(
    tmp_path: Path,
) -> None:
    """A grandchild may keep a pipe open after its process is gone: what is in the pipe is
    relayed, the last line without a newline too, and close returns (no end of pipe needed)."""
    console_fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    read_fd, write_fd = os.pipe()
    data = b"".join(b"line %d\n" % i for i in range(5000)) + b"no newline"
    os.write(write_fd, data)  # under the 64 KiB any pipe holds: nothing read it yet
    threads = _threads()
    relay = Relay()
    tail = new_tail()
    pump = relay.start(read_fd, OutputStream(log_fd, Console(console_fd), b"[0:0] ", tail))
    try:
        assert relay.close(patience=60)
        assert pump.done.is_set()
        _back_to(threads)
    finally:
        os.close(write_fd)
    os.close(console_fd)
    os.close(log_fd)
    assert (tmp_path / "log").read_bytes() == data
    console = (tmp_path / "console").read_bytes()
    assert console == b"".join(b"[0:0] " + line + b"\n" for line in data.split(b"\n"))
    assert list(tail)[-2:] == ["line 4999", "no newline"]


def test_a_log_that_cannot_be_written_is_said_once_from_the_pump(tmp_path: Path) -> None:
    """The first failed write to a log is handed to the callback once (the supervisor passes it
    to its main loop); the console keeps showing everything."""
    console_fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    log_fd = os.open(tmp_path / "log", os.O_RDONLY | os.O_CREAT, 0o600)  # writes fail: EBADF
    errors: list[OSError] = []
    read_fd, write_fd = os.pipe()
    relay = Relay()
    relay.start(
        read_fd,
        OutputStream(log_fd, Console(console_fd), b"", new_tail(), on_log_error=errors.append),
    )
    for i in range(50):
        os.write(write_fd, b"%d\n" % i)
    os.close(write_fd)
    assert relay.close(patience=60)
    os.close(console_fd)
    os.close(log_fd)
    assert len(errors) == 1
    assert (tmp_path / "console").read_bytes() == b"".join(b"%d\n" % i for i in range(50))


def test_a_console_nobody_reads_does_not_hold_the_end_for_ever(tmp_path: Path) -> None:
    """marun's stdout is a pipe whose reader stopped reading: close gives up once the pumps have
    moved nothing for its patience (the pump is left blocked, the caller keeps the logs open);
    when the reader comes back, the pump finishes."""
    console_r, console_w = os.pipe()
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    read_fd, write_fd = os.pipe()
    relay = Relay()
    pump = relay.start(read_fd, OutputStream(log_fd, Console(console_w), b"", new_tail()))
    data = b"x" * 99 + b"\n"
    os.write(write_fd, data * 600)  # 60 KB in; the console pipe is filled by the first ones
    os.write(write_fd, data * 600)  # ... and the pump blocks in its write
    os.close(write_fd)
    assert not relay.close(patience=0.2)
    assert not pump.done.is_set()
    shown = b""
    os.set_blocking(console_r, False)
    guard = time.monotonic() + 60  # a hang guard only
    while not pump.done.is_set() or len(shown) < 2 * 600 * len(data):
        assert time.monotonic() < guard, "the pump never finished"
        try:
            shown += os.read(console_r, 1 << 16)
        except BlockingIOError:
            pump.done.wait(0.01)
    assert shown == data * 1200
    for fd in (console_r, console_w, log_fd):
        os.close(fd)


def test_a_log_left_mid_line_gets_its_newline_before_what_comes_next(tmp_path: Path) -> None:
    """A process killed between a line's text and its newline (Python writes them apart): the
    next start's first line, or a round's marker, must begin a line of its own."""
    from marun.runtime.output import end_the_line, open_log

    fd = open_log(str(tmp_path / "rank_1.log"))
    try:
        end_the_line(fd)  # empty: nothing to end
        os.write(fd, b"rank 1 step 1 sum 2")
        end_the_line(fd)
        end_the_line(fd)  # ended already: no second newline
        os.write(fd, b"start role=MS_WORKER\n")
    finally:
        os.close(fd)
    assert (tmp_path / "rank_1.log").read_bytes() == b"rank 1 step 1 sum 2\nstart role=MS_WORKER\n"
