"""`marun plan` on node 5 of an 8-node MindSpore job, outside the cluster: node 0's name does not
resolve here (a `.invalid` name, RFC 6761). A dry run must not wait for it: the plan comes at
once, with the name kept and a note. The baseline is the same dry run on node 0 (which resolves
nothing). `marun run` keeps the bounded wait (resolve_timeout) and is not measured here.

    python bench/plan_unresolved.py [--small] [--runs 5]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    Row,
    bench_env,
    interleaved,
    load_note,
    ms,
    print_rows,
    standard_args,
    timed,
)

NAME = "job.invalid-worker-0.job.invalid"


def run(small: bool, runs: int) -> list[Row]:
    job = {"MA_NUM_HOSTS": "8", "MA_NUM_GPUS": "8", "MA_VJ_NAME": "job.invalid",
           "MA_TASK_NAME": "worker"}  # fmt: skip
    argv = [PYTHON, "-m", "marun", "plan", "--mode", "mindspore", "--format", "json", "--nic",
            "lo", "--", "train.py"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="marun-unresolved-") as tmp:
        root = Path(tmp)
        (root / "train.py").write_text("pass\n")
        out = root / "plan.json"

        def plan_on(node: int) -> tuple[float]:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                env = bench_env({**job, "VC_TASK_INDEX": str(node)})
                return (timed(argv, env, root, stdout=fd)[0],)
            finally:
                os.close(fd)

        (node0,), (node5,) = interleaved(
            [lambda: plan_on(0), lambda: plan_on(5)], max(3, runs // 2) if small else runs
        )
        plan_on(5)
        data = json.loads(out.read_text())
    noted = any(NAME in note for note in data["notes"])
    kept = data["nodes"][0]["processes"][0]["env"]["MS_SCHED_HOST"] == NAME
    return [
        Row("plan-unresolved", "mindspore node 5, node 0's name unresolvable", ms(node5),
            ms(node0) + " (node 0)", f"{node5 / node0:.2f}x",
            "no wait; name + note", node5 < 1.0 and noted and kept),
    ]  # fmt: skip


def main() -> None:
    parser = standard_args(__doc__, 5)
    args = parser.parse_args()
    rows = run(args.small, args.runs)
    print(f"medians of {args.runs} runs, {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
