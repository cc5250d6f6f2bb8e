"""How long marun adds before the training script runs: the path to `exec`.

Each command runs the same no-op script; figures are medians of N runs (interleaved with the
baseline, after a warm-up), with a bare `python noop.py` as the baseline measured in this run.
Peak RSS is the process's own across the exec (marun's part included). When the torch venv from
scripts/frameworks.sh exists, torchrun (`python -m torch.distributed.run`) is measured the same
way for comparison. `python -X importtime -m marun run -- noop.py` shows what is imported.

    python bench/startup.py [--small] [--runs 20]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    REPO,
    Row,
    bench_env,
    interleaved,
    load_note,
    mib,
    ms,
    print_rows,
    standard_args,
    timed,
)

INIT = ["--init_method", "tcp://127.0.0.1:29500"]
TABLE = REPO / "tests" / "data" / "ranktables" / "ascend_tutorial_1x8.json"


def run(small: bool, runs: int, torchrun: bool = True) -> list[Row]:
    env = bench_env()
    with tempfile.TemporaryDirectory(prefix="marun-startup-") as tmp:
        Path(tmp, "noop.py").write_text("pass\n")
        # the platform's Ascend engine starts marun once per device: the most frequent start
        ascend = {**env, "MA_NUM_HOSTS": "1", "RANK_ID": "3", "RANK_TABLE_FILE": str(TABLE)}
        cases = {
            "python noop.py": ([PYTHON, "noop.py"], env),
            "marun run (exec path)": ([PYTHON, "-m", "marun", "run", "--", "noop.py", *INIT], env),
            "marun run --mode ascend (exec path, a device)": (
                [PYTHON, "-m", "marun", "run", "--mode", "ascend", "--", "noop.py"],
                ascend,
            ),
            "marun plan": ([PYTHON, "-m", "marun", "plan", "--", "noop.py", *INIT], env),
        }
        venvs = Path(os.environ.get("MARUN_VENVS", REPO / ".cache" / "venvs"))
        torch_py = venvs / "torch" / "bin" / "python"
        if torchrun and not small and torch_py.exists():
            cases["torchrun --nproc-per-node 1"] = (
                [str(torch_py), "-m", "torch.distributed.run", "--nproc-per-node", "1", "noop.py"],
                env,
            )
        results = interleaved(
            [
                lambda argv=argv, case_env=case_env: timed(argv, case_env, tmp)  # type: ignore[misc]
                for argv, case_env in cases.values()
            ],
            max(5, runs // 4) if small else runs,
        )
    (base, base_rss), *rest = results
    rows = []
    for name, (seconds, rss) in zip(list(cases)[1:], rest):
        goal, met = "-", None
        if name.startswith("marun run"):
            goal = "<= +50 ms, <= +20 MiB"
            met = seconds - base <= 0.050 and rss - base_rss <= 20 * (1 << 20)
        rows.append(Row("startup", name, f"{ms(seconds)}, {mib(rss)}",
                        f"{ms(base)}, {mib(base_rss)}",
                        f"+{ms(seconds - base)}, +{mib(rss - base_rss)}", goal, met))  # fmt: skip
    return rows


def main() -> None:
    parser = standard_args(__doc__, 20)
    args = parser.parse_args()
    rows = run(args.small, args.runs)
    print(f"medians of {args.runs} runs (wall, peak RSS), {PYTHON}, {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
