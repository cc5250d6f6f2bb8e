"""How long marun adds before the training script runs: the path to `exec`.

Each command runs the same no-op script; figures are the median wall time of N runs, measured
in this run, with the bare interpreter as the baseline. When the torch venv from
scripts/frameworks.sh exists, torchrun (`python -m torch.distributed.run`) is measured the same
way for comparison.

    .venv/bin/python bench/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def median_seconds(argv: list[str], runs: int, env: dict[str, str], cwd: str) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MA_", "VC_", "MARUN_"))}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "noop.py").write_text("pass\n")
        init = ["--init_method", "tcp://127.0.0.1:29500"]
        cases: list[tuple[str, list[str]]] = [
            ("python noop.py (baseline)", [sys.executable, "noop.py"]),
            (
                "marun run (exec path)",
                [sys.executable, "-m", "marun", "run", "--", "noop.py", *init],
            ),
            ("marun plan", [sys.executable, "-m", "marun", "plan", "--", "noop.py", *init]),
        ]
        torch_py = REPO / ".cache" / "venvs" / "torch" / "bin" / "python"
        if torch_py.exists():
            cases.append(
                (
                    "torchrun --nproc-per-node 1",
                    [str(torch_py), "-m", "torch.distributed.run", "--nproc-per-node", "1",
                     "noop.py"],
                )
            )  # fmt: skip
        results = [(name, median_seconds(argv, args.runs, env, tmp)) for name, argv in cases]
    base = results[0][1]
    print(f"median of {args.runs} runs, {sys.executable} ({sys.version.split()[0]})")
    for name, seconds in results:
        print(f"{name:<32} {seconds * 1000:8.1f} ms   x{seconds / base:5.1f} baseline")


if __name__ == "__main__":
    main()
