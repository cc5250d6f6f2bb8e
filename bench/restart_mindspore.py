"""Warm restarts with MindSpore: a crash -> the first AllReduce of the next round, marun cold
against `--preload mindspore` (docs/warm-restarts.md), in the same run.

The job: one node in mindspore mode (`marun run --mode mindspore --max-restarts 2`, the
platform's variables; MindSpore's dynamic cluster on the CPU: a scheduler and 2 workers, every
one a process of the same script). In round 0 every worker runs an AllReduce, then waits
`--uptime` seconds (the round's life before its crash: a warm variant's spares import meanwhile,
as they would beside a real training step), then worker 1 writes the time and exits 1. Round 1's
workers write the time their first AllReduce returned and end 0. The figure: the crash -> the
last worker's first AllReduce of round 1; p50 over `--runs` jobs of each, interleaved. Each
worker also stamps its phases (its imports, `init()`, its first AllReduce), printed per variant
for round 1: a cold worker's `init()` includes its wait for the other processes' imports.

Needs the MindSpore venv (`scripts/frameworks.sh mindspore`); prints why it skips otherwise.
Not in run_all.py (a minute a job).

    python bench/restart_mindspore.py [--runs 3] [--uptime 15]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Row, bench_env, load_note, print_rows

from marun.sim.ports import free_port

VENV = Path(os.environ.get("MARUN_VENVS") or REPO / ".cache" / "venvs") / "mindspore"
DEADLINE = 240.0  # seconds a job may take; a hang guard only
SCRIPT = """\
import os, sys, time
out, round_ = os.environ["STAMPS"], os.environ["MARUN_RESTART_COUNT"]
began = time.time()
import numpy as np
import mindspore as ms
from mindspore import ops
from mindspore.communication import get_rank, init
imported = time.time()
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
init()
formed = time.time()
if os.environ.get("MS_ROLE") != "MS_WORKER":
    sys.exit(0)  # the scheduler: init() served the cluster
rank = get_rank()
ops.AllReduce()(ms.Tensor(np.ones(4, np.float32)))
done = time.time()
with open(os.path.join(out, f"allreduce.{round_}.{rank}"), "w") as fh:
    fh.write(repr(done))
with open(os.path.join(out, f"phases.{round_}.{rank}"), "w") as fh:
    fh.write(repr((imported - began, formed - imported, done - formed)))
if round_ == "0":
    time.sleep(float(os.environ["UPTIME"]))
    if rank == 1:
        with open(os.path.join(out, "crash"), "w") as fh:
            fh.write(repr(time.time()))
        os._exit(1)
    time.sleep(600)  # (stopped by the round)
"""


Phases = tuple[float, float, float]  # a worker's imports, init(), first AllReduce (s)


def one(warm: bool, uptime: float) -> tuple[float, int, list[Phases]]:
    """Seconds from the crash to every worker's first AllReduce of round 1; cold starts said;
    each round-1 worker's phases."""
    with tempfile.TemporaryDirectory(prefix="marun-bench-ms-") as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(SCRIPT)
        stamps = work / "stamps"
        stamps.mkdir()
        env = bench_env(
            {
                "MA_NUM_HOSTS": "1",
                "MA_NUM_GPUS": "2",
                "MARUN_MS_SCHED_PORT": str(free_port("")),
                "MARUN_GRACE_PERIOD": "5",
                "MARUN_PREFLIGHT": "off",
                "MARUN_QUICK_FAILURE": "1",
                "STAMPS": str(stamps),
                "UPTIME": str(uptime),
                "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        argv = [str(VENV / "bin" / "python"), "-m", "marun", "run", "--mode", "mindspore"]
        argv += ["--max-restarts", "2", "--log-dir", str(work / "logs")]
        argv += ["--preload", "mindspore"] if warm else []
        proc = subprocess.Popen(
            [*argv, "--", "train.py"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise RuntimeError("the job did not end") from None
        if proc.returncode != 0:
            raise RuntimeError(f"the job ended {proc.returncode}: {err.decode()[-2000:]}")
        crash = float((stamps / "crash").read_text())
        done = max(float((stamps / f"allreduce.1.{r}").read_text()) for r in (0, 1))
        phases = [ast.literal_eval((stamps / f"phases.1.{r}").read_text()) for r in (0, 1)]
        return done - crash, err.decode().count("starts cold"), phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--uptime", type=float, default=15.0)
    args = parser.parse_args()
    if not (VENV / "bin" / "python").is_file():
        print(f"skipped: no MindSpore venv at {VENV} (scripts/frameworks.sh mindspore)")
        return
    cold: list[float] = []
    warm: list[float] = []
    phases: dict[str, list[Phases]] = {"cold": [], "warm": []}
    colds = 0
    for _ in range(args.runs):  # interleaved: the machine's load falls on both alike
        seconds, _, cold_phases = one(False, args.uptime)
        cold.append(seconds)
        phases["cold"] += cold_phases
        seconds, started_cold, warm_phases = one(True, args.uptime)
        warm.append(seconds)
        phases["warm"] += warm_phases
        colds += started_cold
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"medians of {args.runs} job(s) each, {load_note()}")
    print(json.dumps({"cold": [round(x, 2) for x in cold], "warm": [round(x, 2) for x in warm]}))
    # Where round 1's time goes. A cold worker's init() includes waiting for the other
    # processes' imports (the cluster forms once all are there), so it is longer than a warm one's.
    for variant, rows in phases.items():
        imports, formed, first = (statistics.median(p[i] for p in rows) for i in range(3))
        print(
            f"{variant}: round 1 per worker (medians of {len(rows)}): imports {imports:.2f} s, "
            f"init() {formed:.2f} s, first AllReduce {first:.2f} s"
        )
    print_rows(
        [
            Row(
                "restart-ms",
                "crash -> first AllReduce of round 1 (1 node, 2 workers)",
                f"{w:.2f} s warm ({colds} cold starts)",
                f"{c:.2f} s cold",
                f"{w / c:.2f}x",
                "<= 0.5x cold",
                w <= 0.5 * c,
            )
        ]
    )


if __name__ == "__main__":
    main()
