"""Whole lines out of `mpirun --tag-output`.

Open MPI 4 tags each *read* of a rank's output, not each line: a rank that writes a line in
pieces (Python with PYTHONUNBUFFERED=1 writes `print("rank", 2)` as four writes) comes out as
`[1,2]<stdout>:rank[1,2]<stdout>: [1,2]<stdout>:2[1,2]<stdout>:` and a newline, and a piece of
another rank can come between two pieces of a line (psij-python #510 saw the same). `TaggedLines`
keeps each tag's line until its newline and writes `[1,2]<stdout>:rank 2` and the newline, so
every line the job prints is one rank's whole line under one tag. Text without a tag (mpirun's
own messages) passes as whole lines too.

A text a rank prints that looks exactly like a tag is read as one (the tag format leaves no way to
tell); an incomplete line is held until its newline or the end of the output, as the
supervisor's own relay does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_TAG = re.compile(rb"\[\d+,\d+\]<std(?:out|err|diag)>:")
_LONGEST_TAG = 48  # `[<jobid>,<rank>]<stddiag>:` with 20-digit numbers
MAX_LINE = 1 << 20  # a line without a newline this long is written as it is (memory bound)


class TaggedLines:
    """Feed it mpirun's output as it comes; it calls `write` with whole tagged lines."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._tag = b""  # the tag the stream is under now; b"": untagged (mpirun's own text)
        self._lines: dict[bytes, bytearray] = {}  # each tag's line so far
        self._held = b""  # the end of the last read that may be the start of a tag

    def feed(self, data: bytes) -> None:
        data = self._held + data
        self._held = b""
        # A tag cut by the read's end: keep from its `[` for the next read.
        cut = data.rfind(b"[", max(0, len(data) - _LONGEST_TAG))
        if cut >= 0 and b"\n" not in data[cut:] and not _TAG.match(data, cut):
            self._held = data[cut:]
            data = data[:cut]
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            tag = _TAG.match(data, pos)
            if tag:
                self._tag = tag.group()
                pos = tag.end()
                continue
            newline = data.find(b"\n", pos)
            stop = end if newline < 0 else newline
            nxt = _TAG.search(data, pos, stop)
            if nxt:  # a piece of this tag's line, then another tag
                self._piece(data[pos : nxt.start()], out)
                pos = nxt.start()
                continue
            self._piece(data[pos:stop], out)
            if newline < 0:
                break
            line = self._lines.pop(self._tag, bytearray())
            out.append(self._tag + bytes(line) + b"\n")
            self._tag = b""  # a new line begins with its own tag, or is mpirun's
            pos = newline + 1
        if out:
            self._write(b"".join(out))

    def _piece(self, piece: bytes, out: list[bytes]) -> None:
        if not piece:
            return
        line = self._lines.setdefault(self._tag, bytearray())
        line += piece
        if len(line) >= MAX_LINE:
            out.append(self._tag + bytes(line))
            line.clear()

    def close(self) -> None:
        """At the end of the output: every line not ended yet, as it is."""
        if self._held:  # not a tag after all: the end of the current line
            self._lines.setdefault(self._tag, bytearray()).extend(self._held)
            self._held = b""
        rest = [tag + bytes(line) + b"\n" for tag, line in self._lines.items() if line]
        self._lines.clear()
        if rest:
            self._write(b"".join(rest))
