"""Hot spares in the plan (marun.plan.spares): what a node that trains and a spare plan, a spare
planned as a lost node's place, and the inputs refused (one line, exit 2, nothing started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_marun
from marun.inputs.injected import read_platform
from marun.inputs.settings import Settings
from marun.launch import build_plan
from marun.plan.spares import as_place

NODES = 4  # the platform's: 3 places + 1 spare


def _env(index: int, **extra: str) -> dict[str, str]:
    return {
        "MA_NUM_HOSTS": str(NODES),
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": str(index),
        "VC_WORKER_HOSTS": "h0,h1,h2,h3",
        "MARUN_NIC": "lo",
        "MARUN_SPARES": "1",
        "MARUN_MAX_RESTARTS": "2",
        **extra,
    }


def _appended(index: int) -> list[str]:
    return ["--init_method", "tcp://10.0.0.1:29500", "--rank", str(index), "--world_size", "4"]


def _plan(tmp_path: Path, index: int, **extra: str) -> dict:  # type: ignore[type-arg]
    (tmp_path / "train.py").write_text("")
    argv = ["plan", "--format", "json", "--", "train.py", *_appended(index)]
    res = run_marun(argv, env=_env(index, **extra), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plan: dict = json.loads(res.stdout)  # type: ignore[type-arg]
    return plan


def test_a_node_that_trains_is_planned_as_its_place_of_three(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 1)
    (node,) = plan["nodes"]
    ranks = [p["env"]["RANK"] for p in node["processes"]]
    assert ranks == ["2", "3"] and node["processes"][0]["env"]["WORLD_SIZE"] == "6"
    coord = plan["coordination"]
    assert (coord["nodes"], coord["index"], coord["spares"]) == (4, 1, 1)
    assert any("hot spares: the job trains on 3 node(s)" in n for n in plan["notes"])


def test_a_spare_plans_nothing_and_says_so(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 3)
    (node,) = plan["nodes"]
    assert node["processes"] == [] and node["index"] == 3
    assert plan["coordination"]["index"] == 3
    assert any("node 3 is a spare: it starts nothing" in n for n in plan["notes"])


def test_a_spare_given_place_1_plans_what_node_1_planned(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    (tmp_path / "train.py").write_text("")

    def platform(index: int):  # type: ignore[no-untyped-def]
        settings = Settings(nic="lo", max_restarts=2)
        return read_platform(["train.py", *_appended(index)], _env(index), cwd, settings)

    placed = build_plan("pytorch", as_place(platform(3), 1, 3))
    own = build_plan("pytorch", as_place(platform(1), 1, 3))
    assert [p.env for p in placed.nodes[0].processes] == [p.env for p in own.nodes[0].processes]
    assert [p.argv for p in placed.nodes[0].processes] == [p.argv for p in own.nodes[0].processes]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"MARUN_MAX_RESTARTS": "0"}, "spares=1: expected 0 without restart rounds"),
        ({"MARUN_SPARES": "4"}, "spares=4: expected fewer than the platform's 4 node(s)"),
        ({"MARUN_SPARES": "x"}, "MARUN_SPARES='x'"),
    ],
)
def test_spares_that_cannot_work_are_one_line_of_bad_input(
    tmp_path: Path, extra: dict[str, str], words: str
) -> None:
    (tmp_path / "train.py").write_text("")
    argv = ["run", "--", "train.py", *_appended(1)]
    res = run_marun(argv, env=_env(1, **extra), cwd=tmp_path)
    assert res.returncode == 2 and words in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_mindspore_spare_given_place_1_plans_what_node_1_planned(tmp_path: Path) -> None:
    """MindSpore's dynamic cluster: the spare's workers get node 1's MS_NODE_IDs and RANK_IDs,
    the same MS_SCHED_HOST (node 0's) and MS_WORKER_NUM (the N places' workers)."""
    cwd = str(tmp_path)
    (tmp_path / "train.py").write_text("")
    hosts = "127.0.0.1,127.0.0.2,127.0.0.3"

    def platform(index: int):  # type: ignore[no-untyped-def]
        settings = Settings(nic="lo", max_restarts=2)  # (spares 0: as marun.launch replans)
        env = {**_env(index), "MA_NUM_HOSTS": "3", "VC_WORKER_HOSTS": hosts}
        return read_platform(["train.py"], env, cwd, settings)

    placed = build_plan("mindspore", as_place(platform(2), 1, 2))
    own = build_plan("mindspore", as_place(platform(1), 1, 2))
    envs = [p.env for p in placed.nodes[0].processes]
    assert envs == [p.env for p in own.nodes[0].processes]
    assert [(e["MS_NODE_ID"], e["RANK_ID"]) for e in envs] == [("2", "2"), ("3", "3")]
    assert {(e["MS_SCHED_HOST"], e["MS_WORKER_NUM"]) for e in envs} == {("127.0.0.1", "4")}


def test_a_mindspore_spare_plans_nothing_and_node_0_plans_the_scheduler(tmp_path: Path) -> None:
    env = {"MA_NUM_HOSTS": "3", "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.1,127.0.0.1"}
    (tmp_path / "train.py").write_text("")
    plans = []
    for index in (0, 2):
        argv = ["plan", "--mode", "mindspore", "--format", "json", "--", "train.py"]
        res = run_marun(argv, env=_env(index, **env), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        plans.append(json.loads(res.stdout))
    roles = [p["env"]["MS_ROLE"] for p in plans[0]["nodes"][0]["processes"]]
    assert roles == ["MS_SCHED", "MS_WORKER", "MS_WORKER"]
    assert plans[0]["nodes"][0]["processes"][1]["env"]["MS_WORKER_NUM"] == "4"
    assert plans[1]["nodes"][0]["processes"] == [] and plans[1]["coordination"]["spares"] == 1


@pytest.mark.parametrize(
    ("mode", "env", "words"),
    [
        ("tensorflow", {}, "spares=1: expected 0 in tensorflow mode with parameter servers"),
        (
            "mindspore",
            {"RANK_TABLE_FILE": "rt.json", "RANK_ID": "0", "RANK_SIZE": "2"},
            "spares=1: expected 0 with a rank table",
        ),
    ],
)
def test_spares_where_places_are_not_planned_are_refused(
    tmp_path: Path, mode: str, env: dict[str, str], words: str
) -> None:
    (tmp_path / "train.py").write_text("")
    base = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "MARUN_SPARES": "1",
            "MARUN_MAX_RESTARTS": "1", "MA_NUM_GPUS": "1"}  # fmt: skip
    argv = ["run", "--mode", mode, "--", "train.py"]
    if mode == "tensorflow":
        argv += ["--task_index", "0", "--worker_hosts", "127.0.0.1:2222", "--job_name", "worker"]
        argv += ["--ps_hosts", "127.0.0.1:2223"]
    res = run_marun(argv, env={**base, **env}, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_simulate_refuses_spares_once_where_every_node_would(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    argv = ["simulate", "--mode", "tensorflow", "--nodes", "2", "--devices", "1"]
    res = run_marun([*argv, "--max-restarts", "1", "--spares", "1", "--", "train.py"], cwd=tmp_path)
    assert res.returncode == 2 and "spares=1: expected 0 in tensorflow mode" in res.stderr


def _ssh_dir(tmp_path: Path) -> str:
    """Volcano's ssh secret as the MPI planner checks it (present; its contents are ssh's)."""
    ssh = tmp_path / "ssh"
    ssh.mkdir(exist_ok=True)
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (ssh / name).write_text("x\n")
        (ssh / name).chmod(0o600)
    return str(ssh)


def test_mpi_node_0_lists_the_places_and_a_spare_joins_node_0s_job(tmp_path: Path) -> None:
    """mpi mode: node 0's hostfile names the 3 places (not the spare), and the spare's marun
    dials node 0's host with the same job id (it is planned as the last place until it has
    one: node 0's host stays node 0's)."""
    (tmp_path / "train.py").write_text("")
    extra = {"MARUN_SSH_DIR": _ssh_dir(tmp_path), "MARUN_RUN_DIR": str(tmp_path / "run")}
    plans = []
    for index in (0, 3):
        argv = ["plan", "--mode", "mpi", "--format", "json", "--", "train.py"]
        res = run_marun(argv, env=_env(index, **extra), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        plans.append(json.loads(res.stdout))
    files = {f["path"].rsplit("/", 1)[-1]: f["content"] for f in plans[0]["nodes"][0]["files"]}
    assert files["hostfile"] == "h0 slots=2\nh1 slots=2\nh2 slots=2\n"
    node, spare = plans[0]["coordination"], plans[1]["coordination"]
    assert spare["host"] == node["host"] == "h0" and spare["job"] == node["job"]
    assert plans[1]["nodes"][0]["processes"] == [] and plans[1]["nodes"][0]["host"] == "h3"


def test_an_mpi_spare_given_place_1_runs_node_1s_sshd_on_its_own_host(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    (tmp_path / "train.py").write_text("")
    ssh, run = _ssh_dir(tmp_path), str(tmp_path / "run")

    def platform(index: int):  # type: ignore[no-untyped-def]
        settings = Settings(nic="lo", max_restarts=2, ssh_dir=ssh, run_dir=run)
        return read_platform(["train.py"], _env(index), cwd, settings)

    placed = build_plan("mpi", as_place(platform(3), 1, 3))
    own = build_plan("mpi", as_place(platform(1), 1, 3))
    assert placed.nodes[0].host == "h3" and own.nodes[0].host == "h1"
    assert [p.role for p in placed.nodes[0].processes] == ["sshd"]
    assert [p.argv for p in placed.nodes[0].processes] == [p.argv for p in own.nodes[0].processes]


WORKERS = "10.0.0.1:5000,10.0.0.2:5001,10.0.0.3:5002,10.0.0.4:5003"


def _tf(index: int) -> list[str]:
    return ["--task_index", str(index), "--worker_hosts", WORKERS, "--job_name", "worker"]


def test_tensorflow_workers_plan_the_n_places_and_a_spare_takes_place_1_s_port(
    tmp_path: Path,
) -> None:
    """A cluster of workers alone (MultiWorkerMirroredStrategy): 3 places + 1 spare. Worker 1
    lists the first 3 workers; the spare, given place 1, is task 1 at its own host on place 1's
    port (every other worker is told its host with the round's start: marun.plan.place_hosts)."""
    cwd = str(tmp_path)
    (tmp_path / "train.py").write_text("")

    def platform(index: int):  # type: ignore[no-untyped-def]
        settings = Settings(max_restarts=2)
        env = {**_env(index), "MA_TASK_NAME": "worker"}
        env.pop("VC_WORKER_HOSTS")
        return read_platform(["train.py", *_tf(index)], env, cwd, settings)

    def config(plan):  # type: ignore[no-untyped-def]
        (proc,) = plan.nodes[0].processes
        return json.loads(proc.env["TF_CONFIG"])

    own = config(build_plan("tensorflow", as_place(platform(1), 1, 3)))
    placed = build_plan("tensorflow", as_place(platform(3), 1, 3))
    assert own["cluster"]["worker"] == ["10.0.0.1:5000", "10.0.0.2:5001", "10.0.0.3:5002"]
    assert config(placed) == {
        "cluster": {"worker": ["10.0.0.1:5000", "10.0.0.4:5001", "10.0.0.3:5002"]},
        "task": {"type": "worker", "index": 1},
    }
    assert placed.nodes[0].host == "10.0.0.4"


def test_a_tensorflow_spare_plans_nothing_and_dials_worker_0(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plans = []
    for index in (0, 3):
        argv = ["plan", "--mode", "tensorflow", "--format", "json", "--", "train.py", *_tf(index)]
        env = {**_env(index), "MA_TASK_NAME": "worker"}
        res = run_marun(argv, env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        plans.append(json.loads(res.stdout))
    node, spare = plans[0]["coordination"], plans[1]["coordination"]
    assert spare["host"] == node["host"] == "10.0.0.1" and spare["job"] == node["job"]
    assert (spare["nodes"], spare["index"], spare["spares"]) == (4, 3, 1)
    assert plans[1]["nodes"][0]["processes"] == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--ps_hosts", "10.0.0.9:6000"], "with parameter servers or a chief"),
        (["--tf-chief"], "with parameter servers or a chief"),
    ],
)
def test_tensorflow_spares_need_a_cluster_of_workers_alone(
    tmp_path: Path, extra: list[str], words: str
) -> None:
    (tmp_path / "train.py").write_text("")
    flags = [w for w in extra if w.startswith("--tf-")]
    appended = [w for w in extra if not w.startswith("--tf-")]
    argv = ["run", "--mode", "tensorflow", *flags, "--", "train.py", *_tf(1), *appended]
    res = run_marun(argv, env={**_env(1), "MA_TASK_NAME": "worker"}, cwd=tmp_path)
    assert res.returncode == 2 and f"spares=1: expected 0 in tensorflow mode {words}" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
