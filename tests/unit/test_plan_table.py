"""`marun plan --format table`, as a person reads it: what every process shares once, a line
per node, one table of processes x what differs; `--full-env` for each process's whole env;
the JSON unchanged by either. A 2 x 8 PyTorch plan of every node fits a screen."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import run_marun
from marun.plan.launch_plan import LaunchPlan
from marun.plan.render_table import render_table

SCREEN = 60  # lines: a terminal, or a page of a report
INIT = ["--init_method", "tcp://127.0.0.1:29500", "--rank", "0", "--world_size", "2"]
TWO_BY = {
    "MA_NUM_HOSTS": "2",
    "VC_TASK_INDEX": "0",
    "MA_CURRENT_IP": "127.0.0.1",
    "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.2",
    "MARUN_NIC": "lo",
}


def _plan(script: Path, mode: str, gpus: int, *extra: str, fmt: str = "table") -> str:
    tail = INIT if mode == "pytorch" else []
    res = run_marun(
        ["plan", "--mode", mode, "--all-nodes", "--format", fmt, *extra, "--", script.name, *tail],
        env={**TWO_BY, "MA_NUM_GPUS": str(gpus)},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    out: str = res.stdout
    return out


def _section(text: str, title: str) -> list[str]:
    """The lines of the section whose title starts with `title`, up to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start + 1 : end]


def test_a_2_by_8_pytorch_plan_of_every_node_fits_a_screen(script: Path) -> None:
    text = _plan(script, "pytorch", 8)
    lines = text.splitlines()
    assert len(lines) <= SCREEN, text
    assert len(_plan(script, "pytorch", 8, "--full-env").splitlines()) > 5 * SCREEN
    # What all 16 share: once (not 16 times), on the shared section's lines.
    shared = _section(text, "shared by every process (16)")
    assert "           WORLD_SIZE=16" in shared, text
    assert len(re.findall(r"\bWORLD_SIZE=", text)) == 1, text
    assert any(line.startswith("  env      ") for line in shared), shared
    assert any(re.match(r"  command  \S+python\S* \S+/train\.py$", line) for line in shared)
    # A line per node: what its eight share (and the NICs set on node 0 only).
    nodes = _section(text, "each node:")
    assert [n.split()[:2] for n in nodes] == [["node", "0"], ["node", "1"]]
    assert nodes[0].endswith(
        "GLOO_SOCKET_IFNAME=lo  GROUP_RANK=0  NCCL_SOCKET_IFNAME=lo  NODE_RANK=0"
    )
    assert nodes[1].endswith("127.0.0.2  GROUP_RANK=1  NODE_RANK=1")
    # One table of the 16 processes x what differs between them.
    table = _section(text, "each process")
    # (torchrun's error file per rank, in the log directory: by its name, as the log is)
    assert table[0].split() == ["node", "process", "rank", "log", "LOCAL_RANK", "RANK", "ROLE_RANK",
                                "TORCHELASTIC_ERROR_FILE"]  # fmt: skip
    assert len(table) == 1 + 16
    assert table[1].split() == ["0", "rank0", "0", "rank_0.log", "0", "0", "0", "rank_0.error.json"]
    assert table[16].split() == [
        "1", "rank15", "15", "rank_15.log", "7", "15", "15", "rank_15.error.json"
    ]  # fmt: skip
    assert max(len(line) for line in table) <= 100


def test_mindspore_the_table_shows_who_is_who_and_what_is_not_set(script: Path) -> None:
    text = _plan(script, "mindspore", 2)
    table = _section(text, "each process; -: not set:")
    assert table[0].split() == [
        *("node", "process", "role", "rank", "log"),
        *("DEVICE_ID", "MS_NODE_ID", "MS_ROLE", "RANK_ID"),
    ]
    assert table[1].split() == ["0", "scheduler", "scheduler", "-", "scheduler.log", "-", "-",
                                "MS_SCHED", "0"]  # fmt: skip
    assert table[4].split() == ["1", "worker2", "worker", "2", "worker_2.log", "0", "2",
                                "MS_WORKER", "2"]  # fmt: skip
    shared = _section(text, "shared by every process (5)")
    assert "           MS_WORKER_NUM=4" in shared and "           RANK_SIZE=4" in shared


def _values_shown(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (p["name"], key, value)
        for n in data["nodes"]
        for p in n["processes"]
        for key, value in p["env"].items()
    ]


def test_every_variable_is_somewhere_and_full_env_shows_each_processs_whole_env(
    script: Path,
) -> None:
    for mode, gpus in (("pytorch", 8), ("mindspore", 2)):
        data = json.loads(_plan(script, mode, gpus, fmt="json"))
        short = _plan(script, mode, gpus)
        for _, key, _ in _values_shown(data):
            assert key in short, (mode, key)
        full = _plan(script, mode, gpus, "--full-env")
        # Each process's block: its `name: cwd ... log ...` line, then its env, a line each.
        blocks = re.split(r"^  (\S+): cwd .*$", full, flags=re.M)
        env_of = {
            blocks[i]: re.findall(r"^      (\w+=.*)$", blocks[i + 1], re.M)
            for i in range(1, len(blocks), 2)
        }
        for name, key, value in _values_shown(data):
            assert f"{key}={value}" in env_of[name], (mode, name, key)
        assert sum(map(len, env_of.values())) == len(_values_shown(data))


def test_the_json_and_yaml_do_not_change_with_full_env(script: Path) -> None:
    for fmt in ("json", "yaml"):
        plain = _plan(script, "pytorch", 2, fmt=fmt)
        assert _plan(script, "pytorch", 2, "--full-env", fmt=fmt) == plain
    data = json.loads(_plan(script, "pytorch", 2, fmt="json"))
    proc = data["nodes"][0]["processes"][0]
    assert proc["env"]["WORLD_SIZE"] == "4" and proc["env"]["LOCAL_RANK"] == "0"


def test_run_has_no_full_env(script: Path) -> None:
    """A view of the plan, not an input: `marun run` refuses it in one line."""
    res = run_marun(["run", "--full-env", "--", script.name], cwd=script.parent)
    assert res.returncode == 2 and "unknown option --full-env" in res.stderr, res.stderr


def _with_secrets(script: Path) -> LaunchPlan:
    data = json.loads(_plan(script, "pytorch", 2, fmt="json"))
    for n in data["nodes"]:
        for p in n["processes"]:
            p["env"]["HF_TOKEN"] = "shared-secret-value"  # every process: the shared section
            p["env"]["OBS_AK"] = f"node-secret-{n['index']}"  # each node's own: its line
            p["env"]["DB_PASSWORD"] = f"proc-secret-{p['name']}"  # each process's: the table
            p["env"]["MY_SECRET_JSON"] = "x" * 50 + p["name"]  # too long for a column
    return LaunchPlan.from_dict(data)


def test_secrets_stay_masked_in_every_section(script: Path) -> None:
    plan = _with_secrets(script)
    for text in (render_table(plan), render_table(plan, full_env=True)):
        for value in ("shared-secret-value", "node-secret-", "proc-secret-", "x" * 50):
            assert value not in text, text
    text = render_table(plan)
    # Masked, every value is the same `***`: shared by every process, shown once.
    shared = _section(text, "shared by every process (4)")
    for name in ("HF_TOKEN", "OBS_AK", "DB_PASSWORD", "MY_SECRET_JSON"):
        assert any(re.fullmatch(rf"  (env)? +{name}=\*\*\*", line) for line in shared), text
        assert text.count(f"{name}=") == 1


def test_a_long_brief_job_shows_its_first_and_last_node(script: Path) -> None:
    """marun simulate --nodes 64 (brief_after): the table has node 0's and the last node's
    processes, a line each for those between; what is shared is shared by all."""
    res = run_marun(
        ["plan", "--mode", "pytorch", "--all-nodes", "--format", "json", "--", script.name,
         "--init_method", "tcp://127.0.0.1:29500", "--rank", "0", "--world_size", "6"],
        env={**TWO_BY, "MA_NUM_HOSTS": "6", "MA_NUM_GPUS": "2",
             "VC_WORKER_HOSTS": ",".join(f"127.0.0.{i + 1}" for i in range(6))},
        cwd=script.parent,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = render_table(LaunchPlan.from_dict(json.loads(res.stdout)), brief_after=4)
    assert "nodes 1 to 4: as node 0, each with its own ranks" in text
    assert re.search(r"^  node 3  127\.0\.0\.4: rank6 \(rank 6\), rank7 \(rank 7\)$", text, re.M)
    table = _section(text, "each process")
    assert [row.split()[1] for row in table[1:]] == ["rank0", "rank1", "rank10", "rank11"]
    assert "           WORLD_SIZE=12" in _section(text, "shared by every process (12)")


def test_a_node_with_no_process_yet_says_so(script: Path) -> None:
    """Ascend with a rank table still `initializing`: the dry run plans no process."""
    table = script.parent / "rt.json"
    table.write_text('{"status": "initializing"}')
    res = run_marun(
        ["plan", "--mode", "ascend", "--format", "table", "--", script.name],
        env={"RANK_TABLE_FILE": str(table), "RANK_ID": "3"},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    assert re.search(r"^node 0  \S+: no processes$", res.stdout, re.M), res.stdout
    assert "shared by every process" not in res.stdout
