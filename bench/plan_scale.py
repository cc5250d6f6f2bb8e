"""`marun plan --all-nodes` from node 0 for N nodes x 8 devices: mindspore (node variables),
pytorch (node variables + the appended --init_method/--rank/--world_size), ascend (an N-server
rank table). JSON to a file, as a tool would read it. The baseline is `marun version` (the
interpreter and the CLI, no plan); the per-node cost shows whether the work is linear.

    python bench/plan_scale.py [--small] [--runs 5] [--nodes 128,1024,8192]
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

DEVICES = 8
GOAL_NODES = 1024


def _address(i: int) -> str:
    return f"10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


def _rank_table(nodes: int) -> dict[str, object]:
    servers = [
        {
            "server_id": _address(i),
            "host_nic_ip": _address(i),
            "device": [
                {"device_id": str(d), "device_ip": f"29.{i // 250 % 250}.{i % 250}.{d}",
                 "rank_id": str(i * DEVICES + d)}
                for d in range(DEVICES)
            ],
        }
        for i in range(nodes)
    ]  # fmt: skip
    return {"version": "1.0", "server_count": str(nodes), "server_list": servers,
            "status": "completed"}  # fmt: skip


def cases(nodes: int, root: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    node_env = {
        "MA_NUM_HOSTS": str(nodes),
        "MA_NUM_GPUS": str(DEVICES),
        "VC_TASK_INDEX": "0",
        "MA_VJ_NAME": "job",
        "MA_TASK_NAME": "worker",
        "VC_WORKER_HOSTS": ",".join(_address(i) for i in range(nodes)),
    }
    table = root / f"rank_table_{nodes}.json"
    table.write_text(json.dumps(_rank_table(nodes)))
    plan = [PYTHON, "-m", "marun", "plan", "--all-nodes", "--format", "json"]
    init = ["--init_method", f"tcp://{_address(0)}:29500", "--rank", "0", "--world_size",
            str(nodes)]  # fmt: skip
    return {
        "mindspore": ([*plan, "--mode", "mindspore", "--", "train.py"], node_env),
        "pytorch": ([*plan, "--mode", "pytorch", "--", "train.py", *init], node_env),
        "ascend": ([*plan, "--mode", "ascend", "--", "train.py"],
                   {"RANK_TABLE_FILE": str(table), "RANK_ID": "0"}),
    }  # fmt: skip


def run(small: bool, runs: int, sizes: list[int] | None = None) -> list[Row]:
    sizes = sizes or ([64, 256] if small else [128, 1024, 8192])
    runs = max(3, runs // 2) if small else runs
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="marun-plan-") as tmp:
        root = Path(tmp)
        (root / "train.py").write_text("pass\n")
        out_fd = os.open(root / "plan.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        env = bench_env()

        def plan_case(argv: list[str], extra: dict[str, str]) -> tuple[float]:
            os.ftruncate(out_fd, 0)
            os.lseek(out_fd, 0, os.SEEK_SET)
            return (timed(argv, {**env, **extra}, root, stdout=out_fd)[0],)

        base_argv = [PYTHON, "-m", "marun", "version"]
        per_size: dict[int, dict[str, float]] = {}
        for nodes in sizes:
            named = cases(nodes, root)
            fns = [lambda: plan_case(base_argv, {})] + [
                lambda a=argv, e=extra: plan_case(a, e)  # type: ignore[misc]
                for argv, extra in named.values()
            ]
            n_runs = runs if nodes <= GOAL_NODES else max(1, runs // 3)
            (base,), *timings = interleaved(fns, n_runs)
            per_size[nodes] = {"base": base} | {m: t for m, (t,) in zip(named, timings)}
        os.close(out_fd)
    smallest = sizes[0]
    for mode in ("mindspore", "pytorch", "ascend"):
        for nodes in sizes:
            t = per_size[nodes][mode]
            base = per_size[nodes]["base"]
            per_node = (t - base) / nodes * 1e6
            first = (per_size[smallest][mode] - per_size[smallest]["base"]) / smallest * 1e6
            goal, met = ("<= 300 ms", t <= 0.300) if nodes == GOAL_NODES else ("-", None)
            rows.append(Row("plan", f"{mode} {nodes} x {DEVICES}", ms(t),
                            ms(base) + " (version)",
                            f"{per_node:.0f} us/node ({per_node / first:.2f}x {smallest}'s)",
                            goal, met))  # fmt: skip
    return rows


def main() -> None:
    parser = standard_args(__doc__, 5)
    parser.add_argument("--nodes", default=None, help="comma list (default 128,1024,8192)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")] if args.nodes else None
    rows = run(args.small, args.runs, sizes)
    print(f"medians of {args.runs} runs (fewer above 1,024 nodes), {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
