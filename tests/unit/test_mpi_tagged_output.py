"""mpirun --tag-output's pieces put back into whole lines (marun.mpi.tagged_output). The inputs
are what Open MPI 4.1 printed here for a rank running Python with PYTHONUNBUFFERED=1, and
pieces of two ranks between each other."""

from __future__ import annotations

import random

import pytest

from marun.mpi.tagged_output import TaggedLines

CASES = [
    pytest.param(
        b"[1,2]<stdout>:rank[1,2]<stdout>: [1,2]<stdout>:2[1,2]<stdout>: [1,2]<stdout>:of"
        b"[1,2]<stdout>: [1,2]<stdout>:3[1,2]<stdout>:\n",
        b"[1,2]<stdout>:rank 2 of 3\n",
        id="unbuffered-print",
    ),
    pytest.param(
        b"[1,0]<stdout>:rank [1,1]<stdout>:rank 1 of 3\n[1,0]<stdout>:0 of 3\n",
        b"[1,1]<stdout>:rank 1 of 3\n[1,0]<stdout>:rank 0 of 3\n",
        id="two-ranks-between",
    ),
    pytest.param(
        b"[1,0]<stdout>:a\n[1,0]<stdout>:b\n[1,0]<stderr>:c[1,0]<stdout>:d\n[1,0]<stderr>:e\n",
        b"[1,0]<stdout>:a\n[1,0]<stdout>:b\n[1,0]<stdout>:d\n[1,0]<stderr>:ce\n",
        id="streams-apart",
    ),
    pytest.param(
        b"mpirun noticed that process rank 1 exited\n[1,1]<stderr>:Traceback\n",
        b"mpirun noticed that process rank 1 exited\n[1,1]<stderr>:Traceback\n",
        id="mpirun-own-lines",
    ),
    pytest.param(
        b"[1,0]<stdout>:list [1, 2] and [x\n[1,0]<stdout>:progress [50%",
        b"[1,0]<stdout>:list [1, 2] and [x\n[1,0]<stdout>:progress [50%\n",
        id="brackets-and-an-unended-line",
    ),
]


def _run(data: bytes, cuts: list[int]) -> bytes:
    out: list[bytes] = []
    joiner = TaggedLines(out.append)
    last = 0
    for cut in [*cuts, len(data)]:
        joiner.feed(data[last:cut])
        last = cut
    joiner.close()
    return b"".join(out)


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_whole_lines_however_the_reads_cut(data: bytes, expected: bytes) -> None:
    assert _run(data, []) == expected
    for cut in range(1, len(data)):  # one cut anywhere, tags included
        assert _run(data, [cut]) == expected, cut
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(data)), min(6, len(data) - 1)))
        assert _run(data, cuts) == expected, cuts
    assert _run(data, list(range(1, len(data)))) == expected  # a byte at a time


def test_lines_come_out_as_soon_as_they_end() -> None:
    out: list[bytes] = []
    joiner = TaggedLines(out.append)
    joiner.feed(b"[1,0]<stdout>:step 1[1,0]<stdout>: done\n[1,0]<stdout>:step 2")
    assert out == [b"[1,0]<stdout>:step 1 done\n"]
    joiner.feed(b"[1,0]<stdout>: done\n")
    assert out[-1] == b"[1,0]<stdout>:step 2 done\n"
