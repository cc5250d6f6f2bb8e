"""Secrets stay secret on every channel, in every mode, through `plan` and `run`.

Secret-looking variables (every name pattern marun treats as secret, and the cloud credential
names users really set) and secret-looking script arguments are planted; each mode is planned in
every format and run for real (MPI on network-namespace hosts, with real mpirun and orted), and
every channel is searched for the raw values: stdout, stderr (with marun's structured JSON log at
debug level), every file marun wrote (logs, result.json, generated files), and the command lines
(/proc/<pid>/cmdline) of marun and everything it started that is not the user's own script.
The training processes must get the real values (they need them), and every file marun writes
is private to the user who runs it.

Argument secrets are also searched for in marun's and mpirun's command lines except where the
user (or the platform) put them there: `marun run -- train.py --password=X` holds X in marun's own
argv, and mpirun must pass the script's argv on; marun cannot hide an argument it was given.
docs/reliability.md says so and recommends variables.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import clean_env

pytestmark = pytest.mark.e2e

TAG = secrets.token_hex(4)
SECRET_ENV = {
    name: f"v{i}-{TAG}-{name.lower()}"
    for i, name in enumerate(
        [
            "MY_API_KEY",
            "OBS_SECRET",
            "HF_TOKEN",
            "DB_PASSWORD",
            "LDAP_PASSWD",
            "GCP_CREDENTIALS",
            "MA_AK",
            "MA_SK",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AZURE_CLIENT_SECRET",
            "GITHUB_TOKEN",
            "WANDB_API_KEY",
        ]
    )
}
ARG_SECRETS = {
    "flag=": f"argpw-{TAG}",
    "flag value": f"argtok-{TAG}",
    "url": f"urlpw-{TAG}",
}
SCRIPT_ARGS = [
    f"--password={ARG_SECRETS['flag=']}",
    "--api-token",
    ARG_SECRETS["flag value"],
    "--data",
    f"https://alice:{ARG_SECRETS['url']}@obs.example.com/bucket",
]
# The training process: checks it got every secret (the values never leave it), then lingers
# so that the test can read every command line on the machine.
TRAIN = """\
import json, os, sys, time
want = json.loads(os.environ["WANT"])
got = sum(os.environ.get(k) == v for k, v in want.items())
print(f"secrets received: {got}/{len(want)} (pid {os.getpid()})", flush=True)
go_on = os.environ.get("GO_ON")  # the test looked at every command line: end
deadline = time.monotonic() + 120
while go_on and not os.path.exists(go_on) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0 if go_on else float(os.environ.get("LINGER", "2")))
"""


def _cmdlines() -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                found[int(entry.name)] = raw.decode(errors="replace").split("\0")
    return found


def _leaks(text: str, values: list[str]) -> list[str]:
    return [v for v in values if v in text]


def _files_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        if root.exists():
            yield from (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


MODES = {
    "pytorch": ({"MA_NUM_GPUS": "2"}, ["--init_method", "tcp://127.0.0.1:29531"]),
    "tensorflow": (
        {},
        [
            *("--task_index", "0", "--ps_hosts", "127.0.0.1:29532"),
            *("--worker_hosts", "127.0.0.1:29533", "--job_name", "worker"),
        ],
    ),
    "mindspore": ({"MA_NUM_GPUS": "2", "MA_CURRENT_IP": "127.0.0.1"}, []),
    "ascend": ({"RANK_TABLE_FILE": "rt.json", "RANK_ID": "0", "RANK_SIZE": "1"}, []),
}
TABLE = {
    "version": "1.0",
    "status": "completed",
    "server_count": "1",
    "server_list": [
        {
            "server_id": "127.0.0.1",
            "host_nic_ip": "127.0.0.1",
            "device": [{"device_id": "0", "device_ip": "29.0.0.0", "rank_id": "0"}],
        }
    ],
}


def _env(tmp_path: Path, mode: str) -> dict[str, str]:
    return clean_env(
        {
            **MODES[mode][0],
            **SECRET_ENV,
            "WANT": json.dumps(SECRET_ENV),
            "MARUN_LOG_FORMAT": "json",
            "MARUN_LOG_LEVEL": "debug",
            "MARUN_RUN_DIR": str(tmp_path / "run"),
            "TMPDIR": str(tmp_path / "tmp"),
            # One container of the job, alone (TF's worker beside its ps): no other node will
            # arrive; the job's coordination is tested in test_job.py.
            "MARUN_JOB_PORT": "0",
            "GO_ON": str(tmp_path / "go_on"),
        }
    )


@pytest.mark.parametrize("mode", sorted(MODES))
def test_plan_and_run_show_no_secret(mode: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "rt.json").write_text(json.dumps(TABLE))
    (tmp_path / "tmp").mkdir()
    env = _env(tmp_path, mode)
    argv_tail = ["--mode", mode, "--", "train.py", *SCRIPT_ARGS, *MODES[mode][1]]
    env_values = list(SECRET_ENV.values())
    all_values = env_values + list(ARG_SECRETS.values())
    marun = [sys.executable, "-m", "marun"]
    for fmt in ("table", "json", "yaml"):
        res = subprocess.run(
            [*marun, "plan", "--all-nodes", "--format", fmt, *argv_tail],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert not _leaks(res.stdout + res.stderr, all_values), (fmt, res.stdout, res.stderr)

    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [*marun, "run", "--supervise", *argv_tail],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=err,
        )
    cmdline_leaks: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while "secrets received" not in (tmp_path / "stdout").read_text():
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        scanned = _cmdlines()
        for pid, words in scanned.items():
            text = " ".join(words)
            if _leaks(text, env_values):
                cmdline_leaks.append(f"{pid}: {text}")
        # the scan saw the job running: marun and the script that printed (it waits for GO_ON)
        printed = [int(p) for p in re.findall(r"\(pid (\d+)\)", (tmp_path / "stdout").read_text())]
        assert proc.pid in scanned and printed and printed[0] in scanned, (proc.pid, printed)
    finally:
        (tmp_path / "go_on").write_text("")
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert not cmdline_leaks, cmdline_leaks
    assert code == 0, (tmp_path / "stderr").read_text()
    stdout = (tmp_path / "stdout").read_text()
    expected = f"secrets received: {len(SECRET_ENV)}/{len(SECRET_ENV)}"
    assert expected in stdout, stdout
    stderr = (tmp_path / "stderr").read_text()
    assert not _leaks(stdout + stderr, all_values), stderr
    written = list(_files_under(tmp_path / "marun_logs", tmp_path / "run", tmp_path / "tmp"))
    assert any(p.name.startswith("result") and p.suffix == ".json" for p in written), written
    for path in written:
        assert not _leaks(path.read_text(errors="replace"), all_values), path
        st = path.stat()
        assert st.st_uid == os.getuid(), path
        assert st.st_mode & 0o077 == 0, f"{path}: mode {oct(st.st_mode & 0o777)}"


def test_mpi_run_shows_no_secret_on_any_host(tmp_path: Path) -> None:
    """MPI mode on two network-namespace hosts: sshd, ssh, mpirun, orted and the ranks for real."""
    from local_cluster import framework_python
    from test_mpi_cluster import (
        JOB,
        MpiJob,
        _needs,
        volcano_ssh_secret,
    )

    from netns_cluster import NetnsCluster

    _needs("sshd", "ssh", "ssh-keygen", "mpirun", "orted")
    python = framework_python("mpi")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    env = {
        **SECRET_ENV,
        "WANT": json.dumps(SECRET_ENV),
        "LINGER": "3",
        "MARUN_LOG_FORMAT": "json",
        "MARUN_LOG_LEVEL": "debug",
    }
    env_values = list(SECRET_ENV.values())
    with NetnsCluster(2, job=JOB, task="worker", workdir=workdir) as cluster:
        job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), python, env=env)
        job.start(script, hosts=range(2))
        job.wait_for(0, r"secrets received: \d+/\d+", 4)
        seen: dict[str, list[str]] = {}
        for pid, words in _cmdlines().items():
            text = " ".join(words)
            if any(tool in text for tool in ("marun", "mpirun", "orted", "sshd")):
                seen[f"{pid}"] = words
                assert not _leaks(text, env_values), f"{pid}: {text}"
        assert any("orted" in " ".join(w) for w in seen.values()), "no orted seen while running"
        assert any("mpirun" in " ".join(w) for w in seen.values()), "no mpirun seen"
        codes = job.finish()
        assert codes == {0: 0, 1: 0}, job.report()
        output = job.nodes[0].output
        assert output.count(f"secrets received: {len(SECRET_ENV)}/{len(SECRET_ENV)}") == 4, output
        for node in job.nodes.values():
            assert not _leaks(node.output, env_values + list(ARG_SECRETS.values())), node.output
        for path in _files_under(*(cluster.host_dir(i) for i in range(2))):
            if path.name in ("console.txt", "train.py"):
                continue  # the test's own files
            assert not _leaks(path.read_text(errors="replace"), env_values), path
