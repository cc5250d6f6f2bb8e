"""Hot spares: from a node's pod deleted to every rank of the next round running, with a spare
and without one, in the same run.

A job of N places (+ K spares) of real `marun run` processes on 127.0.0.1 (pytorch mode, the
platform's variables and appended arguments, `--max-restarts 2`), 2 light ranks per node: each
writes the time it started (per round) first thing, then sleeps (long in round 0). Once every
rank of round 0 runs, node 1's pod is deleted: its marun and its ranks SIGKILLed at once (their
connection closes without a goodbye). The figure: the deletion -> the last rank of round 1
started, on any node.

- with spares (`--spares K`, N + K nodes): node 0 finds node 1 lost at once and a spare takes
  its place in round 1;
- without (N nodes): the round waits for node 1's replacement, which this bench starts at once,
  the fastest a platform could: the real path (a pod rescheduled) adds its grace period, the
  scheduling, the image pull and the container's start, minutes, to this figure.

A third figure: the pod deleted the platform's usual way, SIGTERM to its marun (the grace period
before SIGKILL): with spares its marun says it leaves, the place goes to a spare at once (no
window for a reconnection), and the figure is the SIGTERM -> round 1 all running. Without spares a
SIGTERM stops the job (128+15), so that row's baseline is the SIGKILL one's.

Nothing is asserted; the goal (at most 2 s) is printed beside the figure.

    python bench/spares.py [--small] [--runs 3] [--sizes 3+1,64+2]
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, Row, bench_env, load_note, print_rows, standard_args

from marun.sim.ports import free_port

DEVICES = 2
DEADLINE = 300.0  # seconds; a hang guard only
RANKS = """\
import os, sys, time
t = time.time()
round_ = os.environ["MARUN_RESTART_COUNT"]
path = os.path.join(os.environ["STAMPS"], f"{os.environ['RANK']}.{round_}")
open(path + ".tmp", "w").write(repr(t))
os.replace(path + ".tmp", path)
time.sleep(600 if round_ == "0" else 1)
"""
POD = "MARUN_BENCH_POD"


class Job:
    def __init__(self, work: Path, places: int, spares: int) -> None:
        self.work, self.places, self.spares = work, places, spares
        self.nodes = places + spares
        self.port, self.master = free_port(""), free_port("")
        self.stamps = work / "stamps"
        self.stamps.mkdir(parents=True)
        (work / "ranks.py").write_text(RANKS)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, i: int, pod: str) -> None:
        env = bench_env(
            {
                "MA_NUM_HOSTS": str(self.nodes),
                "MA_NUM_GPUS": str(DEVICES),
                "VC_TASK_INDEX": str(i),
                "MA_TASK_NAME": "worker",
                "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * self.nodes),
                "MA_CURRENT_IP": "127.0.0.1",
                "MARUN_JOB_PORT": str(self.port),
                "MARUN_RUN_DIR": str(self.work / pod / "run"),
                "MARUN_LOG_DIR": str(self.work / pod / "logs"),
                "MARUN_GRACE_PERIOD": "5",
                "MARUN_JOB_TOKEN": "bench-spares",
                "MARUN_PREFLIGHT": "off",
                "MARUN_MAX_RESTARTS": "2",
                "MARUN_SPARES": str(self.spares),
                "STAMPS": str(self.stamps),
                POD: pod,
            }
        )
        argv = [PYTHON, "-m", "marun", "run", "--", "ranks.py"]
        argv += ["--init_method", f"tcp://127.0.0.1:{self.master}"]
        argv += ["--rank", str(i), "--world_size", str(self.nodes)]
        self.procs[pod] = subprocess.Popen(
            argv,
            cwd=self.work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_stamps(self, round_: int, deadline: float) -> float:
        """The last start of round `round_`'s ranks (every place's)."""
        want = [self.stamps / f"{r}.{round_}" for r in range(self.places * DEVICES)]
        while True:
            if all(p.exists() for p in want):
                return max(float(p.read_text()) for p in want)
            if time.monotonic() > deadline:
                raise RuntimeError(f"round {round_} never ran on every rank")
            time.sleep(0.01)

    def delete_pod(self, pod: str) -> None:
        needle = f"{POD}={pod}".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if needle in (entry / "environ").read_bytes().split(b"\0"):
                        os.kill(int(entry.name), signal.SIGKILL)

    def close(self) -> None:
        for pod in list(self.procs):
            self.delete_pod(pod)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def one(places: int, spares: int, term: bool = False) -> float:
    """Seconds from node 1's pod deleted (SIGKILL to all of it; `term`: SIGTERM to its marun)
    to every rank of round 1 running."""
    with tempfile.TemporaryDirectory(prefix="marun-bench-spares-") as tmp:
        job = Job(Path(tmp), places, spares)
        try:
            for i in range(job.nodes):
                job.start(i, f"pod{i}")
            job.wait_stamps(0, time.monotonic() + DEADLINE)
            deleted = time.time()
            if term:
                job.procs["pod1"].send_signal(signal.SIGTERM)
            else:
                job.delete_pod("pod1")
            if not spares:
                job.start(1, "pod1-new")  # the replacement, at once
            return job.wait_stamps(1, time.monotonic() + DEADLINE) - deleted
        finally:
            job.close()


def run(small: bool, runs: int, sizes: list[tuple[int, int]] | None = None) -> list[Row]:
    """The table's rows (`small`: 3+1 once, the CI size)."""
    if small:
        sizes, runs = [(3, 1)], 1
    rows = []
    for places, spares in sizes or [(3, 1), (64, 2)]:
        with_spares, without, termed = [], [], []
        for _ in range(runs):  # interleaved: the machine's load falls on all alike
            with_spares.append(one(places, spares))
            without.append(one(places, 0))
            termed.append(one(places, spares, term=True))
        value, base = statistics.median(with_spares), statistics.median(without)
        term = statistics.median(termed)
        rows.append(
            Row(
                "spares",
                f"{places}+{spares} nodes: pod gone (SIGKILL) -> round 1 all running",
                f"{value:.2f} s",
                f"{base:.2f} s (replacement at once)",
                f"{value / base:.2f}x",
                "<= 2 s",
                value <= 2.0,
            )
        )
        rows.append(
            Row(
                "spares-term",
                f"{places}+{spares} nodes: pod deleted (SIGTERM) -> round 1 all running",
                f"{term:.2f} s",
                f"{base:.2f} s (SIGKILL, replacement at once)",
                f"{term / base:.2f}x",
                "<= 2 s",
                term <= 2.0,
            )
        )
    return rows


def main() -> None:
    parser = standard_args(__doc__, default_runs=3)
    parser.add_argument("--sizes", default="3+1,64+2", help="PLACES+SPARES, comma-separated")
    args = parser.parse_args()
    sizes = [(int(a), int(b)) for a, b in (s.split("+") for s in args.sizes.split(","))]
    rows = run(args.small, args.runs, sizes)
    print(f"medians of {1 if args.small else args.runs} run(s), {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
