"""Soak and faults, for real: many ranks writing hard through marun's relay, and runs in which a
random rank is killed at a random moment.

What is checked is what a user relies on: every line each rank wrote arrives whole, once, in
order, in its log file and on marun's stdout; a killed rank gives the job its exit code (128+9);
nothing is left running and no temporary file is left behind. `MARUN_SOAK_SEED` replays a run.
Nothing asserts on time; every wait is bounded to catch a hang.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_supervisor import INIT, alive, result, wait_until

from conftest import clean_env

# A rank that writes LINES numbered lines of about 100 bytes; every third line goes out in two
# writes with a flush between them, so the relay sees lines cut in the middle.
WRITER = """\
import os, sys, zlib
rank = os.environ["RANK"]
lines = int(os.environ["S_LINES"])
out = sys.stdout
for i in range(lines):
    body = f"rank={rank} seq={i:06d} " + "x" * 60
    line = f"{body} crc={zlib.crc32(body.encode()):08x}\\n"
    if i % 3 == 0:
        out.write(line[:37]); out.flush(); out.write(line[37:])
    else:
        out.write(line)
out.flush()
"""
LINE = re.compile(r"rank=(\d+) seq=(\d{6}) x{60} crc=([0-9a-f]{8})")


def _check_lines(text: str, rank: int, lines: int, prefix: str = "") -> None:
    import zlib

    got = text.splitlines()
    assert len(got) == lines, f"rank {rank}: {len(got)} lines, expected {lines}"
    for i, line in enumerate(got):
        assert line.startswith(prefix), f"rank {rank} line {i}: {line[:80]!r}"
        m = LINE.fullmatch(line[len(prefix) :])
        assert m, f"rank {rank} line {i} torn: {line[:120]!r}"
        body = line[len(prefix) : line.rindex(" crc=")]
        assert (int(m[1]), int(m[2])) == (rank, i), f"rank {rank}: line {i} is {m[1]}/{m[2]}"
        assert m[3] == f"{zlib.crc32(body.encode()):08x}", f"rank {rank} line {i}: bad checksum"


@pytest.mark.parametrize("ranks", [64])
def test_many_ranks_writing_hard_lose_and_tear_nothing(tmp_path: Path, ranks: int) -> None:
    lines = 3000
    (tmp_path / "writer.py").write_text(WRITER)
    res = subprocess.run(
        [
            *(sys.executable, "-m", "marun", "run", "--mode", "pytorch"),
            *("--nproc-per-node", str(ranks), "--", str(tmp_path / "writer.py"), *INIT),
        ],
        env=clean_env({"S_LINES": str(lines)}),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    console: dict[int, list[str]] = {r: [] for r in range(ranks)}
    for line in res.stdout.splitlines():
        m = re.match(r"\[0:(\d+)\] ", line)
        assert m, f"console line without its rank prefix: {line[:120]!r}"
        console[int(m[1])].append(line)
    for rank in range(ranks):
        _check_lines("\n".join(console[rank]) + "\n", rank, lines, prefix=f"[0:{rank}] ")
        log = (tmp_path / "marun_logs" / f"rank_{rank}.log").read_text()
        _check_lines(log, rank, lines)


# A rank that keeps writing until it is killed; it says where it is (its pid) once started.
FOREVER = """\
import os, sys, time
rank = os.environ["RANK"]
open(os.path.join(os.environ["S_DIR"], "pid." + rank), "w").write(str(os.getpid()))
i = 0
while True:
    print(f"rank {rank} line {i}", flush=True)
    i += 1
    time.sleep(0.002)
"""


def test_a_random_rank_killed_at_a_random_moment_30_times(tmp_path: Path) -> None:
    seed = int(os.environ.get("MARUN_SOAK_SEED") or random.SystemRandom().randrange(1 << 30))
    rng = random.Random(seed)
    (tmp_path / "forever.py").write_text(FOREVER)
    for run in range(30):
        work = tmp_path / f"run{run}"
        work.mkdir()
        ranks = rng.choice([2, 3, 4, 6])
        victim = rng.randrange(ranks)
        delay = rng.uniform(0, 1.0)
        where = f"seed {seed} run {run}: {ranks} ranks, rank {victim} killed after {delay:.2f}s"
        with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
            marun = subprocess.Popen(
                [
                    *(sys.executable, "-m", "marun", "run", "--mode", "pytorch"),
                    *("--nproc-per-node", str(ranks), "--console-ranks", "none"),
                    *("--", str(tmp_path / "forever.py"), *INIT),
                ],
                env=clean_env({"S_DIR": str(work), "MARUN_GRACE_PERIOD": "10"}),
                cwd=str(work),
                stdout=out,
                stderr=err,
            )
        try:
            pids = wait_until(lambda w=work, n=ranks: _pids(w, n), f"{where}: the ranks")
            assert marun.poll() is None, f"{where}: marun ended early"
            time.sleep(delay)
            os.kill(pids[victim], signal.SIGKILL)
            code = marun.wait(timeout=60)
        finally:
            if marun.poll() is None:
                marun.kill()
                marun.wait()
        assert code == 128 + signal.SIGKILL, (
            f"{where}: exit {code}\n{(work / 'stderr').read_text()}"
        )
        first = result(work)["first_failure"]
        assert first["rank"] == victim, f"{where}: first failure {first}"
        left = [p for p in pids if alive(p)]
        assert not left, f"{where}: ranks {left} still running"
        zombies = [p for p in pids if Path(f"/proc/{p}").exists()]
        assert not zombies, f"{where}: {zombies} not reaped"
        temps = [p.name for p in work.rglob("*") if ".tmp" in p.name]
        assert not temps, f"{where}: temporary files left: {temps}"


def _pids(work: Path, ranks: int) -> list[int] | None:
    try:
        pids = [int((work / f"pid.{r}").read_text()) for r in range(ranks)]
    except (OSError, ValueError):
        return None
    return pids
