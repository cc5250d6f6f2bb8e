"""Warm restarts without any framework: a stand-in heavy module (its import sleeps 2 s, as torch
with transformers or Megatron takes seconds to import) under `marun run --max-restarts`, cold
and with `--preload heavy` (docs/warm-restarts.md), in the same run.

One node, 2 ranks (`--standalone`); in each round but the last, rank 0 crashes (exit 1) once it
has run `--uptime` seconds (the spares import meanwhile), rank 1 waits to be stopped. Per crash:
crash -> every rank of the next round is past `import heavy` (the time the import would add to
a restart). The variants take turns, one job of `--crashes` crashes each, `--repeat` times.
Figures are p50/p95 over the crashes; the ratio is warm / cold. Nothing is asserted.

    python bench/warm_standin.py [--crashes 5] [--repeat 2] [--uptime 4] [--import-seconds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, bench_env, load_note, pct, print_rows

from marun.sim.ports import free_port

HEAVY = "import os, time\ntime.sleep(float(os.environ['BENCH_IMPORT_SECONDS']))\n"
RANK = r"""
import json, os, sys, time
t_start = time.time()
import heavy
t_imported = time.time()
d = sys.argv[1]
rank, rnd = int(os.environ["RANK"]), int(os.environ["MARUN_RESTART_COUNT"])
with open(os.path.join(d, f"rec.{rnd}.{rank}"), "w") as f:
    json.dump({"start": t_start, "imported": t_imported}, f)
if rnd < int(os.environ["BENCH_CRASHES"]):
    if rank == 0:
        time.sleep(float(os.environ["BENCH_UPTIME"]))
        with open(os.path.join(d, f"crash.{rnd}"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(600)
"""


def one_job(root: Path, warm: bool, crashes: int, uptime: float, seconds: float) -> list[float]:
    """crash -> every rank of the next round past its import, for each crash of one job."""
    root.mkdir(parents=True)
    (root / "heavy.py").write_text(HEAVY)
    (root / "rank.py").write_text(RANK)
    env = bench_env({"BENCH_CRASHES": str(crashes), "BENCH_UPTIME": str(uptime),
                     "BENCH_IMPORT_SECONDS": str(seconds), "MARUN_QUICK_FAILURE": "0",
                     "MARUN_PREFLIGHT": "off"})  # fmt: skip
    argv = [sys.executable, "-m", "marun", "run", "--standalone", "--nproc-per-node", "2",
            "--master-port", str(free_port("")), "--max-restarts", str(crashes),
            *(["--preload", "heavy"] if warm else []), "--", "rank.py", str(root)]  # fmt: skip
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False,
                          timeout=crashes * (uptime + seconds + 30) + 60)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the job failed ({done.returncode}): {done.stderr[-2000:]}")
    cold_lines = done.stderr.count(" starts cold: ")
    if warm and cold_lines:
        print(f"  warm: {cold_lines} rank start(s) were cold", flush=True)
    out = []
    for k in range(crashes):
        crash = float((root / f"crash.{k}").read_text())
        recs = [json.loads((root / f"rec.{k + 1}.{r}").read_text()) for r in (0, 1)]
        out.append(max(r["imported"] for r in recs) - crash)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("--crashes", type=int, default=5, help="crashes per job")
    parser.add_argument("--repeat", type=int, default=2, help="jobs per variant, taking turns")
    parser.add_argument("--uptime", type=float, default=4.0, help="seconds before each crash")
    parser.add_argument("--import-seconds", type=float, default=2.0, help="the import's sleep")
    args = parser.parse_args()
    head = f"warm stand-in bench: 1 node x 2 ranks, import {args.import_seconds:g} s"
    print(f"{head}, {args.crashes} crashes x {args.repeat} jobs per variant, {load_note()}",
          flush=True)  # fmt: skip
    figures: dict[str, list[float]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="marun-warm-bench-") as tmp:
        for n in range(args.repeat):
            for name in ("cold", "warm") if n % 2 == 0 else ("warm", "cold"):
                got = one_job(Path(tmp) / f"{name}{n}", name == "warm", args.crashes,
                              args.uptime, args.import_seconds)  # fmt: skip
                print(f"{name} job {n}: " + " ".join(f"{v:.2f}" for v in got), flush=True)
                figures[name] += got
    rows = []
    for q in (50, 95):
        cold, warm = pct(figures["cold"], q), pct(figures["warm"], q)
        rows.append(Row("warm-standin", f"crash -> past the import p{q}", f"{warm:.2f} s",
                        f"{cold:.2f} s (cold)", f"{warm / cold:.2f}", "<= 0.5x",
                        warm / cold <= 0.5))  # fmt: skip
    print()
    print_rows(rows)
    print(f"({load_note()} at the end)")


if __name__ == "__main__":
    main()
