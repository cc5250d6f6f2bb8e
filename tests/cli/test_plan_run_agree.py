"""`marun plan` and `marun run` accept and refuse exactly the same inputs.

For every setting (every `Settings` field, given on the command line, as `MARUN_<KEY>` or in the
YAML file) and every other input option of both commands: a bad value makes both exit 2 with the
same one line on stderr and nothing on stdout (so `run` started nothing); a good value makes `plan`
exit 0. Both commands build their plan through one function, and the supervision settings are
part of that plan, so they cannot drift apart; this test is what says so.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import DATA, run_marun
from marun.inputs.records import fields
from marun.inputs.settings import Settings

INIT = ("--init_method", "tcp://127.0.0.1:29500")  # what the platform appends for pytorch


@dataclass(frozen=True)
class Given:
    """One input: `setting` given `how` ("cli", "env" or "yaml") with `bad` and `good` values
    (`{job}` stands for the job's directory) in a job of `mode`."""

    setting: str
    how: str
    bad: str
    good: str
    mode: str = "pytorch"


CASES = [
    Given("nic", "cli", "nosuch0", "lo"),
    Given("nproc_per_node", "cli", "0", "2"),
    Given("nproc_per_node", "env", "two", "2"),
    Given("per_node", "env", "maybe", "1", "ascend"),
    Given("keep_platform_args", "env", "maybe", "1"),
    Given("tf_chief", "env", "maybe", "1"),
    Given("tf_workers_only", "env", "maybe", "1", "tensorflow"),
    Given("ms_sched_port", "env", "0", "8200", "mindspore"),
    Given("ms_topo_timeout", "env", "0", "60", "mindspore"),
    Given("ranktable_timeout", "env", "soon", "5", "ascend"),
    Given("resolve_timeout", "yaml", "soon", "5", "mindspore"),
    Given("volcano_dir", "yaml", "[a, b]", "{job}/volcano", "mpi"),
    Given("sshd_port", "env", "0", "2222", "mpi"),
    Given("ssh_dir", "env", "{job}/a b", "{job}/ssh", "mpi"),
    Given("mpirun_extra_args", "env", "-np 3", "--mca btl tcp,self", "mpi"),
    Given("mpi_forward_env", "env", "1x,PATH", "PATH,MA_*", "mpi"),
    Given("mpi_rank_files", "env", "maybe", "1", "mpi"),
    Given("formation_timeout", "env", "nan", "30", "mpi"),
    Given("peer_timeout", "yaml", "-1", "30", "mpi"),
    Given("log_dir", "yaml", "[a]", "logs"),
    Given("run_dir", "env", "{job}/a'b", "{job}/run", "mpi"),
    Given("grace_period", "cli", "-5", "5"),
    Given("grace_period", "cli", "nan", "0"),
    Given("grace_period", "env", "inf", "5"),
    Given("grace_period", "yaml", "-.inf", "5"),
    Given("max_restarts", "cli", "-1", "0"),
    Given("spares", "cli", "-1", "0"),
    Given("hub_group", "env", "-1", "8"),
    Given("hub_group", "yaml", "1", "4", "ascend"),  # (a group of one: refused with the job's)
    Given("recovery_restarts", "env", "1.5", "3"),
    Given("fatal_exit_codes", "yaml", "[0]", "[3]"),
    Given("quick_failure", "env", "-1", "0"),
    Given("preload", "env", "torch", ""),  # no restart rounds to serve
    Given("preload", "yaml", "[a-b]", "[]"),
    Given("recovery_wait", "cli", "inf", "1"),
    Given("recovery_wait", "yaml", ".nan", "1", "mindspore"),
    Given("console_ranks", "cli", "3-1", "0,scheduler"),
    Given("console_ranks", "env", "0;1", "none"),
    Given("job_port", "env", "70000", "0"),
    Given("arrival_timeout", "cli", "nan", "30"),
    Given("hang_timeout", "env", "-1", "60"),
    Given("progress_timeout", "cli", "-1", "600"),
    Given("collapse_window", "env", "nan", "0"),
    Given("progress_pattern", "cli", "step (", "step (?P<step>[0-9]+)"),
    Given("progress_pattern", "yaml", "no group", "'it=([0-9]+)'"),
    Given("preflight", "cli", "sometimes", "warn"),
    Given("ms_ssl", "env", "maybe", "0", "mindspore"),
    Given("ms_server_cert", "yaml", "[a]", "server.p12", "mindspore"),
    Given("ms_client_cert", "yaml", "[a]", "client.p12", "mindspore"),
    Given("ms_ca_cert", "yaml", "[a]", "ca.crt", "mindspore"),
    Given("ms_crl", "yaml", "[c]", "crl.pem", "mindspore"),
    Given("ms_cipher_list", "yaml", "[a]", "ECDHE-RSA-AES128-GCM-SHA256", "mindspore"),
    Given("ms_cert_expire_warning_days", "env", "-1", "30", "mindspore"),
    Given("ms_client_password_file", "yaml", "[a]", "pw.txt", "mindspore"),
    Given("ms_server_password_file", "yaml", "[a]", "pw.txt", "mindspore"),
    Given("ms_server_num", "env", "-1", "0", "mindspore"),
    # torchrun's options for pytorch without the platform: no --init_method appended
    Given("standalone", "env", "maybe", "1", "torchrun"),
    Given("nnodes", "cli", "0", "1", "torchrun"),
    Given("node_rank", "env", "-1", "0", "torchrun"),
    Given("master_addr", "yaml", "[a]", "127.0.0.1", "torchrun"),
    Given("master_port", "cli", "70000", "29511", "torchrun"),
]


def test_every_setting_is_covered() -> None:
    assert {f.name for f in fields(Settings)} <= {c.setting for c in CASES}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('trained')\n")
    for sub in ("ssh", "run", "volcano"):
        (tmp_path / sub).mkdir()
    return tmp_path


def _env(job: Path, mode: str) -> dict[str, str]:
    env = {"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "1"}
    if mode == "ascend":
        table = DATA / "ranktables" / "server_list_2x2.json"
        env.update(RANK_TABLE_FILE=str(table), RANK_ID="0", MA_NUM_HOSTS="2")
    else:
        env["MARUN_NIC"] = "lo"
    if mode == "mpi":
        env.update(MARUN_RUN_DIR=str(job / "run"), MARUN_SSH_DIR=str(job / "ssh"), MA_VJ_NAME="j")
    return env


def _marun(command: str, job: Path, given: Given, value: str) -> subprocess.CompletedProcess[str]:
    """`marun plan` or `marun run` in `given.mode`, `given.setting` set to `value`."""
    value = value.format(job=job)
    env = _env(job, given.mode)
    options: list[str] = ["--mode", "pytorch" if given.mode == "torchrun" else given.mode]
    if given.how == "cli":
        options += [f"--{given.setting.replace('_', '-')}", value]
    elif given.how == "env":
        env[f"MARUN_{given.setting.upper()}"] = value
    else:
        (job / "marun.yaml").write_text(f"{given.setting}: {value}\n")
    if command == "plan":
        options = ["--format", "json", *options]
    script = ["--", "train.py", *(INIT if given.mode == "pytorch" else ())]
    return run_marun([command, *options, *script], env=env, cwd=job)


def _names(setting: str) -> tuple[str, ...]:
    return (setting, "--" + setting.replace("_", "-"), "MARUN_" + setting.upper())


@pytest.mark.parametrize("given", CASES, ids=[f"{c.setting}-{c.how}-{c.bad}" for c in CASES])
def test_plan_and_run_refuse_the_same_bad_value(job: Path, given: Given) -> None:
    plan, run = _marun("plan", job, given, given.bad), _marun("run", job, given, given.bad)
    assert (plan.returncode, run.returncode) == (2, 2), (plan.stderr, run.stderr)
    assert plan.stderr == run.stderr
    assert plan.stderr.startswith("marun: error: ")
    assert plan.stderr.count("\n") == 1, plan.stderr
    assert any(name in plan.stderr for name in _names(given.setting)), plan.stderr
    assert plan.stdout == run.stdout == ""
    assert not (job / "marun_logs").exists()  # run started nothing


@pytest.mark.parametrize("given", CASES, ids=[f"{c.setting}-{c.how}-{c.good}" for c in CASES])
def test_plan_accepts_the_good_value(job: Path, given: Given) -> None:
    plan = _marun("plan", job, given, given.good)
    assert plan.returncode == 0, plan.stderr


# The options of both commands that are not settings.
OTHER_OPTIONS = [
    pytest.param(["--mode", "nosuch"], id="mode"),
    pytest.param(["--config", "missing.yaml"], id="config"),
    pytest.param(["--nproc-per-node", "two"], id="nproc-not-a-number"),
    pytest.param(["--grace-period", "soon"], id="grace-not-a-number"),
]


@pytest.mark.parametrize("options", OTHER_OPTIONS)
def test_plan_and_run_refuse_the_same_options(job: Path, options: list[str]) -> None:
    env = _env(job, "pytorch")
    command = ["--", "train.py", *INIT]
    plan = run_marun(["plan", "--format", "json", *options, *command], env=env, cwd=job)
    run = run_marun(["run", *options, *command], env=env, cwd=job)
    assert (plan.returncode, run.returncode) == (2, 2), (plan.stderr, run.stderr)
    assert plan.stderr == run.stderr
    assert plan.stderr.startswith("marun: error: ") and plan.stderr.count("\n") == 1
