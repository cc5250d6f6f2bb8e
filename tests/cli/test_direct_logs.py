"""A rank not shown on the console (`--console-ranks`) writes its log file itself: no pipe, no
pump, nothing of marun in between (runtime/direct_log.py). Real `marun run`s, real processes:
its log holds every line in order, its failure summary still shows its last lines (of its latest
attempt only), and the hang watchdog still hears a rank that prints, and judges a silent job
idle.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from loopback_job import LoopbackJob
from test_supervisor import run_plan

from conftest import run_marun

INIT = ("--init_method", "tcp://127.0.0.1:29500")  # what the platform appends; nothing listens

# Each rank writes LINES numbered lines (about 3 MB) on stdout and a few on stderr, in blocks,
# then says what its stdout was.
WRITER = """\
import os, stat, sys
rank = os.environ["RANK"]
for start in range(0, {lines}, 1000):
    sys.stdout.write("".join(f"{{rank}}:{{i:07d}}:" + "z" * 40 + "\\n"
                             for i in range(start, start + 1000)))
    sys.stdout.flush()
    print(f"{{rank}}: on stderr after {{start + 999}}", file=sys.stderr, flush=True)
kind = "file" if stat.S_ISREG(os.fstat(1).st_mode) else "pipe"
print(f"{{rank}}: stdout is a {{kind}}", flush=True)
"""


def _expected(rank: int, lines: int) -> str:
    out = []
    for start in range(0, lines, 1000):
        out += [f"{rank}:{i:07d}:" + "z" * 40 for i in range(start, start + 1000)]
        out.append(f"{rank}: on stderr after {start + 999}")
    return "\n".join(out) + "\n"


def test_a_rank_not_shown_writes_its_log_itself_every_line_in_order(tmp_path: Path) -> None:
    lines = 60_000
    (tmp_path / "writer.py").write_text(WRITER.format(lines=lines))
    args = ["run", "--mode", "pytorch", "--nproc-per-node", "3", "--console-ranks", "0"]
    res = run_marun([*args, "--", str(tmp_path / "writer.py"), *INIT], env={}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    for rank in range(3):
        log = (tmp_path / "marun_logs" / f"rank_{rank}.log").read_text()
        # Byte for byte what the rank wrote, as through the relay (no prefix in a log).
        kind = "pipe" if rank == 0 else "file"
        assert log == _expected(rank, lines) + f"{rank}: stdout is a {kind}\n", rank
    # The console: rank 0 alone, prefixed, whole.
    shown = [f"[0:0] {line}" for line in _expected(0, lines).splitlines()]
    assert res.stdout.splitlines() == [*shown, "[0:0] 0: stdout is a pipe"]


FAILS_TWICE = """\
import os, sys
attempts = os.path.join(os.environ["W_DIR"], "attempts")
n = len(open(attempts).read()) + 1 if os.path.exists(attempts) else 1
open(attempts, "a").write("x")
for i in range(30):
    print(f"attempt {n} line {i}", flush=True)
sys.exit(5 if n == 1 else 3)
"""


def test_a_rank_not_shown_still_has_its_last_lines_in_the_summary(tmp_path: Path) -> None:
    """Restarted once, then failing: the summary shows the last lines of its latest attempt,
    read back from its log, which holds both attempts."""
    script = tmp_path / "fails.py"
    script.write_text(FAILS_TWICE)
    process = {
        "name": "worker",
        "argv": [sys.executable, str(script)],
        "env": {},
        "cwd": str(tmp_path),
        "log": str(tmp_path / "logs" / "worker.log"),
        "restart_on_failure": True,
    }
    env = {
        "W_DIR": str(tmp_path),
        "MARUN_CONSOLE_RANKS": "none",
        "MARUN_RECOVERY_RESTARTS": "1",  # restarts per process (restart_on_failure)
        "MARUN_RECOVERY_WAIT": "0",
    }
    res = run_plan(tmp_path, [process], env)
    assert res.returncode == 3, res.stderr
    assert res.stdout == ""  # nothing shown
    summary = res.stderr[res.stderr.index("First failure:") :]
    kept = re.findall(r"\| (attempt .*)", summary)
    assert kept == [f"attempt 2 line {i}" for i in range(10, 30)], summary
    log = (tmp_path / "logs" / "worker.log").read_text().splitlines()
    assert log == [f"attempt {n} line {i}" for n in (1, 2) for i in range(30)]


# Rank 3 (node 1, not shown on the console) prints a line every half second, and ends last (the
# watchdog judges the nodes still running: node 1 must outlive node 0's silent ranks); every
# other rank sleeps for RUN_FOR seconds, silent, using no CPU.
ONE_PRINTS = """\
import os, time
rank = int(os.environ["RANK"])
end = time.monotonic() + float(os.environ["RUN_FOR"]) + (2 if rank == 3 else 0)
while time.monotonic() < end:
    if rank == 3:
        print(f"rank {rank} still here", flush=True)
    time.sleep(0.5)
print(f"rank {rank} done", flush=True)
"""


def test_the_hang_watchdog_hears_a_rank_not_shown_that_prints(tmp_path: Path) -> None:
    """Without its log's growth counted the job would be judged hung (silent and idle for four
    times the hang timeout on every other rank); it ends 0 on its own."""
    job = LoopbackJob(tmp_path, nodes=2, env={"RUN_FOR": "12"})
    job.options = ["--hang-timeout", "3", "--console-ranks", "0"]
    try:
        job.start([0, 1], ONE_PRINTS)
        assert job.finish() == {0: 0, 1: 0}, job.report()
        assert "no rank of the job wrote" not in job.nodes[0].output, job.report()
        log = (job.work(1) / "marun_logs" / "rank_3.log").read_text()
        assert log.count("rank 3 still here") >= 20 and log.endswith("rank 3 done\n")
        assert "rank 3" not in job.nodes[1].output  # not shown: the log alone has it
    finally:
        job.kill_all()


ASLEEP = """\
import os, time
print(f"rank {os.environ['RANK']} up", flush=True)
time.sleep(600)
"""


def test_the_hang_watchdog_judges_silent_ranks_not_shown_idle(tmp_path: Path) -> None:
    job = LoopbackJob(tmp_path, nodes=2)
    job.options = ["--hang-timeout", "3", "--console-ranks", "none"]
    try:
        job.start([0, 1], ASLEEP)
        assert job.finish() == {0: 124, 1: 124}, job.report()
        for i in range(2):
            assert "no rank of the job wrote a line for 3s" in job.nodes[i].output, job.report()
            log = (job.work(i) / "marun_logs" / f"rank_{2 * i}.log").read_text()
            assert log.startswith(f"rank {2 * i} up\n")
    finally:
        job.kill_all()


LAST_WORDS = """\
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 3:
    for i in range(40):
        print(f"rank 3 says {i}", flush=True)
    sys.exit(7)
time.sleep(120)
"""


def test_every_node_shows_the_last_lines_of_a_rank_not_shown(tmp_path: Path) -> None:
    """Rank 3 (node 1, not shown) fails: the job's first failure, printed on every node, carries
    its last lines, read back from its log on node 1."""
    job = LoopbackJob(tmp_path, nodes=2)
    job.options = ["--console-ranks", "0"]
    try:
        job.start([0, 1], LAST_WORDS)
        assert job.finish() == {0: 7, 1: 7}, job.report()
        for i in range(2):
            kept = re.findall(r"\| (rank 3 says \d+)", job.nodes[i].output)
            assert kept == [f"rank 3 says {n}" for n in range(20, 40)], job.report()
    finally:
        job.kill_all()


def test_restart_rounds_append_to_the_logs_of_ranks_not_shown(tmp_path: Path) -> None:
    """Part 14's rounds with no rank shown: each log keeps round 0, the round's marker line and
    round 1, every rank writing the same descriptor, opened once."""
    from test_restart_rounds import _job, _rank_log, _run

    job = _job(tmp_path, RANKS_FAIL="4:0")
    job.options += ["--console-ranks", "none"]
    assert _run(job) == {0: 0, 1: 0, 2: 0}, job.report()
    for rank in range(6):
        log = _rank_log(job, rank // 2, rank)
        if rank == 4:
            assert log.startswith("rank 4 round 0 budget 3 torch 0"), log
        before, marker, after = log.partition("marun: round 1/3 after node 2 rank 4 exit 1")
        assert marker, log
        assert f"rank {rank} round 1 passed the rendezvous" in after, log
        assert "round 1" not in before, log
    assert "rank 4 round" not in job.nodes[2].output  # not shown: in the logs alone
