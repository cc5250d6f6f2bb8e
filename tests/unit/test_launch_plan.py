"""The plan value: its JSON form read back gives the same plan (every mode, every node), and its
supervision settings are checked when it is built."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import DATA, run_marun
from marun.errors import InputError
from marun.inputs.injected import read_platform
from marun.inputs.settings import Settings
from marun.launch import build_plan
from marun.plan.console_selection import ConsoleSelection
from marun.plan.launch_plan import FileSpec, LaunchPlan, NodePlan, ProcessSpec, Supervision
from marun.plan.render import render_json

INIT = ["--init_method", "tcp://127.0.0.1:29500", "--rank", "0", "--world_size", "2"]
TF = [
    *("--task_index", "0", "--ps_hosts", "[127.0.0.1:2222]"),
    *("--worker_hosts", "[127.0.0.1:2223,127.0.0.1:2224]", "--job_name", "worker"),
]


def _job(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("")
    ssh = tmp_path / "ssh"
    ssh.mkdir()
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (ssh / name).write_text(f"{name}\n")
        (ssh / name).chmod(0o600)
    return tmp_path


# (mode, platform env, appended words): a job of more than one node in each mode.
MODES = [
    ("pytorch", {"MA_NUM_GPUS": "2"}, INIT),
    ("tensorflow", {}, TF),
    (
        "mindspore",
        {
            "MA_NUM_HOSTS": "2",
            "MA_NUM_GPUS": "2",
            "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.2",
            "VC_TASK_INDEX": "0",
            "MS_ENABLE_RECOVERY": "1",
            "MS_RECOVERY_PATH": "/ckpt",
        },
        [],
    ),
    (
        "ascend",
        {"RANK_TABLE_FILE": str(DATA / "ranktables" / "server_list_2x2.json"), "RANK_ID": "0"},
        [],
    ),
    (
        "mpi",
        {"MA_NUM_HOSTS": "3", "MA_NUM_GPUS": "2", "MA_VJ_NAME": "job", "VC_TASK_INDEX": "0"},
        [],
    ),
]


@pytest.mark.parametrize(("mode", "env", "appended"), MODES, ids=[m[0] for m in MODES])
def test_every_modes_plan_reads_back_as_itself(
    tmp_path: Path, mode: str, env: dict[str, str], appended: list[str]
) -> None:
    job = _job(tmp_path)
    settings = Settings(
        nic="lo",
        ssh_dir=str(job / "ssh"),
        run_dir=str(job / "run"),
        console_ranks=("0", "scheduler"),
        grace_period=2.5,
    )
    platform = read_platform(["train.py", *appended], env, str(job), settings)
    plan = build_plan(mode, platform, all_nodes=True, always_supervise=True)
    data = plan.to_dict()
    assert LaunchPlan.from_dict(data) == plan
    assert LaunchPlan.from_dict(json.loads(json.dumps(data))) == plan  # through real JSON
    assert data["supervision"]["grace_period"] == 2.5
    if mode == "mpi":
        assert {f["mode"] for n in data["nodes"] for f in n["files"]} == {"0644"}
    if mode == "mindspore":  # MS_ENABLE_RECOVERY=1: restarts are the plan's, per process
        assert all(p.restart_on_failure for n in plan.nodes for p in n.processes)


def test_file_modes_survive_the_round_trip() -> None:
    node = NodePlan(0, "h", files=(FileSpec("/r/key", "k", 0o600), FileSpec("/r/f", "x")))
    plan = LaunchPlan("test", (node,))
    assert plan.to_dict()["nodes"][0]["files"][0] == {
        "path": "/r/key",
        "content": "k",
        "mode": "0600",
    }
    assert LaunchPlan.from_dict(plan.to_dict()) == plan


def test_the_plan_commands_json_reads_back(tmp_path: Path) -> None:
    job = _job(tmp_path)
    env = {
        **dict(MODES[-1][1]),
        "MARUN_RUN_DIR": str(job / "run"),
        "MARUN_SSH_DIR": str(job / "ssh"),
        "MARUN_NIC": "lo",
    }
    res = run_marun(
        ["plan", "--mode", "mpi", "--all-nodes", "--format", "json", "--", "train.py"],
        env=env,
        cwd=job,
    )
    assert res.returncode == 0, res.stderr
    plan = LaunchPlan.from_dict(json.loads(res.stdout))
    assert [len(n.processes) for n in plan.nodes] == [2, 1, 1]  # sshd + mpi-leader; sshd
    assert render_json(plan) == res.stdout


def test_a_document_without_the_later_fields_takes_their_defaults() -> None:
    data = {
        "schema": 1,
        "mode": "pytorch",
        "nodes": [
            {
                "index": 0,
                "host": "h",
                "files": [{"path": "/f", "content": "c"}],
                "processes": [{"name": "rank0", "argv": ["x"], "env": {}, "cwd": "/", "log": "/l"}],
            }
        ],
    }
    plan = LaunchPlan.from_dict(data)
    assert plan.supervision == Supervision()
    assert plan.nodes[0].files[0].mode == 0o644
    assert plan.nodes[0].processes[0] == ProcessSpec("rank0", ("x",), {}, "/", "/l")


def test_another_schema_is_refused() -> None:
    with pytest.raises(InputError, match="plan schema=2: expected 1"):
        LaunchPlan.from_dict({"schema": 2, "mode": "x", "nodes": []})


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("grace_period", -1.0, "grace_period=-1.0: expected a finite number of seconds >= 0"),
        ("grace_period", math.nan, "grace_period=nan: expected a finite number of seconds >= 0"),
        ("grace_period", math.inf, "grace_period=inf: expected a finite number of seconds >= 0"),
        ("recovery_wait", -math.inf, "recovery_wait=-inf: expected a finite number of seconds"),
        ("max_restarts", -1, "max_restarts=-1: expected a whole number >= 0"),
        ("console_ranks", ("3-1",), "console_ranks='3-1': expected all, none, or a comma list"),
    ],
)
def test_supervision_is_checked_when_built(field: str, value: object, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        Supervision(**{field: value})  # type: ignore[arg-type]
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
def test_the_dry_run_shows_the_supervision(tmp_path: Path, fmt: str) -> None:
    (tmp_path / "train.py").write_text("")
    env = {"MA_NUM_GPUS": "1", "MARUN_NIC": "lo", "MARUN_RECOVERY_RESTARTS": "1"}
    res = run_marun(
        [
            "plan",
            "--format",
            fmt,
            "--grace-period",
            "5",
            "--supervise",
            "--console-ranks",
            "0",
            "--",
            "train.py",
            *INIT[:2],
        ],
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    if fmt == "table":
        # recovery_restarts and recovery_wait only where something restarts (MindSpore
        # recovery); restart rounds only where there are some.
        assert "supervision: grace_period 5s   console_ranks 0   marun supervises" in res.stdout
        return
    data = json.loads(res.stdout) if fmt == "json" else yaml.safe_load(res.stdout)
    assert data["supervision"] == {
        "grace_period": 5.0,
        "max_restarts": 0,
        "fatal_exit_codes": [],
        "quick_failure": 30.0,
        "round_ports": [],
        "recovery_restarts": 1,
        "recovery_wait": 30.0,
        "console_ranks": ["0"],
        "record_dir": str(tmp_path / "marun_logs"),
        "always_supervise": True,
        "prefix_output": True,
        "fail_fast": True,
        "collapse_window": 0.5,
        "progress_pattern": None,
        "preload": [],
    }


def test_the_dry_run_shows_the_restart_rounds_rule_and_round_0(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    env = {"MA_NUM_GPUS": "1", "MARUN_NIC": "lo", "MARUN_MAX_RESTARTS": "2"}
    argv = ["plan", "--format", "table", "--fatal-exit-codes", "3,4", "--", "train.py"]
    res = run_marun([*argv, *INIT[:2]], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (
        "max_restarts 2 (job-wide rounds; none after exit 3,4; none after two failures within "
        "30s of a round's start; each round k >= 1 moves MASTER_PORT to the first free port "
        "from its planned value + k and above round k-1's, on node 0)"
    ) in res.stdout
    # With rounds, even one process is supervised (a round restarts it), told its round.
    assert "marun supervises" in res.stdout and "marun execs" not in res.stdout
    for line in ("MARUN_RESTART_COUNT=0", "MARUN_MAX_RESTARTS=2", "TORCHELASTIC_MAX_RESTARTS=2"):
        assert line in res.stdout
    bad = run_marun([*argv[:3], "--fatal-exit-codes", "3,x", "--", "train.py", *INIT[:2]],
                    env=env, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "--fatal-exit-codes" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "value", ["²", "١٢", "1²", "-", "0-", "a b", "99999999999999999999", "5-2"]
)
def test_console_ranks_refuses_what_is_not_ascii_ranks_or_names(value: str) -> None:
    with pytest.raises(InputError, match="console_ranks="):
        ConsoleSelection.parse([value])


def test_console_ranks_ranges_are_kept_as_ranges() -> None:
    selection = ConsoleSelection.parse(["0-999999999999", "scheduler", "ps"])  # no billion-set
    assert selection.shows("worker7", "worker", 7)
    assert selection.shows("scheduler", "scheduler", None)
    assert selection.shows("ps0", "ps", None)
    assert not selection.shows("sshd", "sshd", None)
    assert ConsoleSelection.parse(["all"]).shows("x", "y", None)
    assert not ConsoleSelection.parse(["none"]).shows("x", "y", 0)


def test_the_plan_header_agrees_with_what_run_does_and_with_the_json(tmp_path: Path) -> None:
    """One process is exec'd with or without --all-nodes (the header and the note agree); two
    are supervised; MindSpore-only numbers stay off a pytorch plan; console_ranks is `all` in
    the table and in the JSON; the record line names the files run writes."""
    (tmp_path / "train.py").write_text("")
    base = ["plan", "--mode", "pytorch", "--", "train.py", *INIT[:2]]

    def plan(*extra: str, fmt: str = "table", nproc: str = "1") -> str:
        args = [*base[:3], "--format", fmt, "--nproc-per-node", nproc, *extra, *base[3:]]
        res = run_marun(args, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        return res.stdout

    for extra in ((), ("--all-nodes",)):
        one = plan(*extra)
        assert "marun execs the one process" in one.splitlines()[1], one
        assert "note: one process: marun execs it" in one, one
        assert "records:" not in one
    two = plan(nproc="2")
    header = two.splitlines()[1]
    assert header.endswith("marun supervises") and "max_restarts" not in header, two
    assert "console_ranks all" in header
    logs = tmp_path / "marun_logs"
    assert f"records: {logs}/result.json   events: {logs}/marun-events.log" in two
    data = json.loads(plan(fmt="json", nproc="2"))
    assert data["supervision"]["console_ranks"] == ["all"]
