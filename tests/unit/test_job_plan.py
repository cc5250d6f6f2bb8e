"""The plan's coordination section (marun plan): where node 0 listens, the settings, the
secret's source; none for one node, MPI, or job_port 0; bad settings are bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import run_marun

INIT = "tcp://job-a-worker-0.job-a:29500"
TWO_NODES = ["--init_method", INIT, "--rank", "1", "--world_size", "2"]
NODE_ENV = {
    "MA_NUM_HOSTS": "2",
    "VC_TASK_INDEX": "1",
    "MA_VJ_NAME": "job-a",
    "MA_TASK_NAME": "worker",
}


def plan(script: Path, *options: str, env: dict[str, str] | None = None) -> Any:
    res = run_marun(
        ["plan", "--format", "json", *options, "--", script.name, *TWO_NODES],
        env={**NODE_ENV, **(env or {})},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_pytorch_nodes_report_to_the_init_method_host(script: Path) -> None:
    data = plan(script, "--arrival-timeout", "120", "--hang-timeout", "600")
    assert re.fullmatch(r"job-a\.[0-9a-f]{12}", data["coordination"]["job"])
    data["coordination"]["job"] = "job-a"
    assert data["coordination"] == {
        "host": "job-a-worker-0.job-a",
        "port": 36668,
        "nodes": 2,
        "index": 1,
        "leader": 0,
        "slots": 1,
        "slot": 0,
        "job": "job-a",
        "hosts": ["job-a-worker-0.job-a", "job-a-worker-1.job-a"],
        "arrival_timeout": 120.0,
        "peer_timeout": 60.0,
        "hang_timeout": 600.0,
        "progress_timeout": None,
        "auth": "none",
        "ssh_key": None,
    }


def test_the_secret_s_source_never_its_value(script: Path, tmp_path: Path) -> None:
    data = plan(script, env={"MARUN_JOB_TOKEN": "tok-value-1"})
    assert data["coordination"]["auth"] == "token"
    assert "tok-value-1" not in json.dumps(data)
    ssh = tmp_path / "ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text("KEY-CONTENT\n")
    data = plan(script, env={"MARUN_SSH_DIR": str(ssh)})
    assert data["coordination"]["auth"] == "ssh-key"
    # the key's path as the plan found it (Platform.ssh_key): the job's link reads that one
    assert data["coordination"]["ssh_key"] == str(ssh / "id_rsa")
    assert "KEY-CONTENT" not in json.dumps(data)


def test_table_shows_endpoint_and_settings(script: Path) -> None:
    res = run_marun(
        ["plan", "--format", "table", "--peer-timeout", "9", "--", script.name, *TWO_NODES],
        env=NODE_ENV,
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("coordination:"))
    assert "node 0 at job-a-worker-0.job-a:36668" in line
    assert "2 nodes x 1 slot(s), this node 1 slot 0" in line
    assert "arrival 300s, peer 9s, hang off" in line
    assert line.endswith("auth none")
    assert "WARNING: no job secret (set MARUN_JOB_TOKEN" in res.stdout


def test_none_for_one_node_or_job_port_0(script: Path) -> None:
    res = run_marun(
        ["plan", "--format", "json", "--", script.name, "--init_method", INIT],
        cwd=script.parent,
    )
    assert "coordination" not in json.loads(res.stdout)
    assert "coordination" not in plan(script, env={"MARUN_JOB_PORT": "0"})


def test_bad_timeouts_are_bad_input(script: Path) -> None:
    for option, value in (
        ("--arrival-timeout", "0"),
        ("--hang-timeout", "-1"),
        ("--peer-timeout", "0.001"),  # below what the heartbeat (1 s) can honour
    ):
        res = run_marun(
            ["plan", option, value, "--", script.name, *TWO_NODES],
            env=NODE_ENV,
            cwd=script.parent,
        )
        assert res.returncode == 2
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("marun: error: "), res.stderr
        field = option.lstrip("-").replace("-", "_")
        assert option in res.stderr or field in res.stderr, res.stderr
        ran = run_marun(
            ["run", option, value, "--", script.name, *TWO_NODES],
            env=NODE_ENV,
            cwd=script.parent,
        )
        assert (ran.returncode, ran.stderr) == (2, res.stderr)  # the same line, nothing started


def test_tensorflow_leader_is_the_first_worker(script: Path) -> None:
    ps = "--ps_hosts", "[h0:2222,h1:2222]"
    workers = "--worker_hosts", "[h2:2223,h3:2223]"
    res = run_marun(
        ["plan", "--format", "json", "--", script.name, "--task_index", "1", *ps, *workers,
         "--job_name", "worker"],
        cwd=script.parent,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    coordination = json.loads(res.stdout)["coordination"]
    assert (coordination["host"], coordination["nodes"], coordination["leader"]) == ("h2", 4, 2)
    assert coordination["index"] == 3


def test_job_ids_agree_within_a_job_and_differ_between_jobs(script: Path) -> None:
    """Every node of a job computes the same id; another job on the same network, with the
    same init_method and no MA_VJ_NAME, gets another when its hosts differ."""
    unnamed = {"MA_VJ_NAME": "", "VC_WORKER_HOSTS": "a-0.x,a-1.x"}
    node1 = plan(script, env=unnamed)["coordination"]["job"]
    res = run_marun(
        ["plan", "--format", "json", "--", script.name, "--init_method", INIT, "--rank", "0",
         "--world_size", "2"],
        env={**NODE_ENV, **unnamed, "VC_TASK_INDEX": "0"},
        cwd=script.parent,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["coordination"]["job"] == node1
    other = plan(script, env={**unnamed, "VC_WORKER_HOSTS": "b-0.x,b-1.x"})["coordination"]
    assert other["job"] != node1
    assert node1.startswith("-.") and other["job"].startswith("-.")
