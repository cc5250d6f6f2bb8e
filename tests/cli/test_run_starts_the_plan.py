"""`marun run` carrying its plan out, where a unit test cannot: these start the planned process
(exec'd, or supervised), read what it was handed, or need an interpreter of their own (what a
fresh `marun run` imports, the typer-free path against typer's, Ctrl-C). They were in tests/unit
(part 12: a unit test starts no process; there `marun run` stops where it would start the
plan)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import DATA, clean_env, free_port, run_marun
from ms_certs import PASSWORD, Certs, make_certs

TABLES = DATA / "ranktables"
INIT = "tcp://job-a-worker-0.job-a:29500"
MS_NODE_ENV = {
    "MA_NUM_HOSTS": "2",
    "MA_NUM_GPUS": "2",
    "VC_TASK_INDEX": "0",
    "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.1",
}
MS_PASSWORDS = {"MARUN_MS_CLIENT_PASSWORD": PASSWORD, "MARUN_MS_SERVER_PASSWORD": PASSWORD}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), days=365)


def _ms_tls_env(certs: Certs, tmp_path: Path) -> dict[str, str]:
    return {
        **MS_NODE_ENV,
        **MS_PASSWORDS,
        "MARUN_NIC": "lo",
        "MARUN_RUN_DIR": str(tmp_path / "run"),
        "MARUN_MS_SSL": "1",
        "MARUN_MS_SERVER_CERT": str(certs.server),
        "MARUN_MS_CLIENT_CERT": str(certs.client),
        "MARUN_MS_CA_CERT": str(certs.ca),
    }


def _initializing() -> str:
    return json.dumps({"status": "initializing", "group_count": "0", "group_list": []})


def _replace(path: Path, text: str) -> None:
    """Rewrite the file the way a config map update lands: a new file renamed over the old."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _later(delay: float, action: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- the planned process starts and gets what the plan gave it ---------------------------------


def test_run_starts_the_rank_s_process_in_its_device_directory(tmp_path: Path) -> None:
    """`marun run` per device: the one planned process replaces marun (no NPU: a plain script
    that reports what it was given). The other three devices' marun never run here, so the
    job's coordination is off (job_port 0); with it, marun would wait for them."""
    script = tmp_path / "report.py"
    script.write_text(
        "import json, os, sys\n"
        "keys = ('DEVICE_ID', 'ASCEND_DEVICE_ID', 'RANK_ID', 'RANK_SIZE', 'RANK_TABLE_FILE')\n"
        "print(json.dumps({'cwd': os.getcwd(), 'args': sys.argv[1:],"
        " **{k: os.environ[k] for k in keys}}))\n"
    )
    table = TABLES / "group_list_2x2_rank_id.json"
    res = run_marun(
        ["run", "--", script.name, "--lr", "0.1"],
        env={
            "RANK_TABLE_FILE": str(table),
            "RANK_ID": "2",
            "ASCEND_DEVICE_ID": "0",
            "MARUN_JOB_PORT": "0",
        },
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {
        "cwd": str(tmp_path.resolve() / "device4"),
        "args": ["--lr", "0.1"],
        "DEVICE_ID": "4",
        "ASCEND_DEVICE_ID": "0",
        "RANK_ID": "2",
        "RANK_SIZE": "4",
        "RANK_TABLE_FILE": str(table),
    }


def test_run_writes_the_file_0600_and_the_script_gets_it(tmp_path: Path, certs: Certs) -> None:
    """One node, one device: marun execs the script, which reads what the snippet reads."""
    probe = tmp_path / "train.py"
    probe.write_text(
        "import json, os, stat\n"
        "path = os.environ['MARUN_MS_TLS_CONFIG']\n"
        "print(json.dumps({'mode': stat.S_IMODE(os.stat(path).st_mode),\n"
        "                  'config': json.load(open(path)),\n"
        "                  'same': os.environ['MARUN_MS_CLIENT_PASSWORD'] == "
        f"{PASSWORD!r}}}))\n"
    )
    env = {**_ms_tls_env(certs, tmp_path), "MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "1"}
    env.pop("VC_WORKER_HOSTS")
    env["MARUN_MS_SCHED_PORT"] = str(free_port())  # the scheduler binds it: not a fixed 8118
    # One worker, plus the scheduler: supervised, output relayed; read the worker's log.
    res = run_marun(
        ["run", "--mode", "mindspore", "--log-dir", "logs", "--", sys.executable, "train.py"],
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert PASSWORD not in res.stdout + res.stderr
    for log in ("scheduler.log", "worker_0.log"):
        seen = json.loads((tmp_path / "logs" / log).read_text().strip().splitlines()[-1])
        assert seen["mode"] == 0o600 and seen["same"] is True
        assert seen["config"]["ca_cert_path"] == str(certs.ca)
    config = tmp_path / "run" / "mindspore_tls.json"
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600


def test_run_waits_for_an_initializing_table_until_completed(script: Path) -> None:
    script.write_text(
        "import os\nprint('DEVICE_ID', os.environ['DEVICE_ID'], os.environ['RANK_SIZE'])\n"
    )
    # plan never waits (below); run does, within ranktable_timeout
    table = script.parent / "rank_table.json"
    table.write_text(_initializing())
    completed = (TABLES / "ascend_tutorial_1x8.json").read_text()
    env = {"RANK_TABLE_FILE": str(table), "RANK_ID": "5", "MARUN_RANKTABLE_TIMEOUT": "60"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "marun", "run", "--mode", "ascend", "--", script.name],
        env=clean_env(env),
        cwd=script.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # the table completes once marun has said it waits for it
        said.append(line)
        if "waiting for rank table" in line:
            break
    _replace(table, completed)
    out, err = proc.communicate(timeout=60)
    assert "waiting for rank table" in "".join(said), "".join(said) + err
    assert proc.returncode == 0, err
    assert "DEVICE_ID 5 8" in out


def test_marun_run_refuses_a_file_it_cannot_write(tmp_path: Path) -> None:
    """MPI mode writes its hostfile into the run directory: a directory in its place is bad
    input, reported in one line before anything starts."""
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ssh").mkdir()
    hostfile = tmp_path / "run" / "local" / "hostfile"
    hostfile.mkdir(parents=True)
    env = {
        "MA_NUM_HOSTS": "1",
        "MA_NUM_GPUS": "1",
        "MARUN_NIC": "lo",
        "MARUN_SSH_DIR": str(tmp_path / "ssh"),
        "MARUN_RUN_DIR": str(tmp_path / "run"),
    }
    res = run_marun(["run", "--mode", "mpi", "--", "train.py"], env=env, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"marun: error: cannot write {hostfile}: Is a directory")
    assert res.stderr.count("\n") == 1, res.stderr


# -- a fresh interpreter: what `marun run` imports, its two start paths, Ctrl-C ----------------


@pytest.mark.parametrize("code", [0, 3])
def test_single_node_run_loads_no_wire_and_its_job_after_the_start(
    tmp_path: Path, code: int
) -> None:
    """One node: its job runs in this process (marun.job.local_job), with nothing of the wire
    (no coordinator, member or socket code). The job machine's imports come after the node's
    processes started (after marun's log, which is imported then), not on the path to them;
    a job that ended well, with nothing to report, never builds it."""
    (tmp_path / "train.py").write_text(f"import sys\nsys.exit({code})\n")
    res = run_marun(
        ["run", "--supervise", "--", "train.py", "--init_method", INIT],
        env={"PYTHONPROFILEIMPORTTIME": "1"},
        cwd=tmp_path,
    )
    assert res.returncode == code, res.stderr
    imported = [
        line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if "import time:" in line
    ]
    assert "marun.plan.coordination" in imported  # the plan looked, and found one node
    assert "marun.job.local_job" in imported
    for wire in ("marun.job.link", "marun.job.coordinator", "marun.job.member", "marun.job.wire"):
        assert wire not in imported
    if code == 0:
        assert "marun.job.machine" not in imported
    else:
        assert imported.index("marun.job.machine") > imported.index("structlog")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--mode", "Pytorch"], "Invalid value for '--mode'"),
        (["--nproc-per-node", "four"], "--nproc-per-node='four': expected an integer"),
        (["--grace-period", "nan"], "--grace-period='nan': expected a number of seconds"),
    ],
)
def test_a_refused_option_gets_the_same_line_on_both_paths(
    tmp_path: Path, words: list[str], message: str
) -> None:
    """Option values are checked by the settings parser on both paths (numbers included); what
    the hand parser is unsure of goes to typer: either way, one identical line."""
    argv = ["run", *words, "--", "t.py"]
    through_main = subprocess.run(
        [sys.executable, "-m", "marun", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    through_typer = subprocess.run(
        [sys.executable, "-c", "from marun.command.cli import main; main()", *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert through_main.returncode == through_typer.returncode == 2
    assert message in through_main.stderr
    assert through_main.stderr.count("\n") == 1
    assert through_main.stderr == through_typer.stderr


# Two paths to exec: pytorch with the platform's --init_method, and one device of an Ascend rank
# table (what the platform's Ascend engine starts once per device).
EXEC_PATHS = {
    "pytorch": (["--", "show.py", "--init_method", "tcp://127.0.0.1:29500"], {}),
    "ascend": (
        ["--mode", "ascend", "--", "show.py"],
        {
            "MA_NUM_HOSTS": "1",
            "RANK_ID": "3",
            "RANK_TABLE_FILE": str(TABLES / "ascend_tutorial_1x8.json"),
        },
    ),
}


@pytest.mark.parametrize("path", sorted(EXEC_PATHS))
def test_marun_run_does_not_import_typer(tmp_path: Path, path: str) -> None:
    """The path to exec imports neither the CLI library nor what only annotations or pathlib's
    conveniences would need (typing, pathlib with urllib.parse: 9 ms of a start here), nor
    dataclasses (with inspect, and a compile a method: 21 ms; the plan's classes are
    marun.inputs.records) or tenacity (the rank table's first read needs no retry loop)."""
    (tmp_path / "show.py").write_text("import sys; print('typer' in sys.modules)\n")
    heavy = ("typer", "click", "rich", "typing", "pathlib", "urllib", "dataclasses", "inspect")
    heavy = (*heavy, "tenacity")
    args, env = EXEC_PATHS[path]
    code = (
        f"import sys, marun.command.entry; sys.argv = ['marun', 'run', *{args!r}];"
        " import os; os.execvpe = lambda *a: (print("
        f"sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})),"
        " sys.exit(0)); marun.command.entry.main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env({**env, "MARUN_PREFLIGHT": "off"}),
        check=True,
    )
    assert res.stdout == "[]\n", res.stderr


def test_ctrl_c_before_the_job_starts_ends_as_typer_ends_it(tmp_path: Path) -> None:
    """SIGINT while `marun run` waits (here for node 0's name): exit 130, nothing on stderr."""
    import signal
    import time

    (tmp_path / "train.py").write_text("")
    env = clean_env(
        {"MA_NUM_HOSTS": "2", "MA_NUM_GPUS": "1", "VC_TASK_INDEX": "1",
         "MA_VJ_NAME": "job.invalid", "MA_TASK_NAME": "worker"}
    )  # fmt: skip
    argv = ["run", "--mode", "mindspore", "--nic", "lo", "--", "train.py"]
    ends = []
    for start in (["-m", "marun"], ["-c", "from marun.command.cli import main; main()"]):
        proc = subprocess.Popen(
            [sys.executable, *start, *argv], cwd=tmp_path, env=env, stderr=subprocess.PIPE
        )
        # Past its imports and into the wait for node 0's name (a sleep between two tries):
        # a SIGINT during the imports is Python's own KeyboardInterrupt, not marun's to end.
        wchan = Path(f"/proc/{proc.pid}/wchan")
        guard = time.monotonic() + 60
        while "nanosleep" not in wchan.read_text():
            assert time.monotonic() < guard and proc.poll() is None, "marun waits for the name"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        ends.append((proc.returncode, err))
    assert ends[0] == ends[1] == (130, b"")
