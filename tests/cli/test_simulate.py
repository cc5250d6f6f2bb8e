"""`marun simulate`: a whole job on this machine, each node a real `marun run` fed exactly what
the platform injects; output per rank, the job's exit status."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_marun

SCRIPT = """\
import json, os, sys
keys = ("RANK", "WORLD_SIZE", "MS_ROLE", "RANK_ID", "DEVICE_ID", "TF_CONFIG", "MS_WORKER_NUM")
print("ENV " + json.dumps({k: os.environ[k] for k in keys if k in os.environ}), flush=True)
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
if task.get("type") == "ps":  # the job ends with its workers: they wait until every ps spoke
    open(f"ps{task['index']}.up", "w").close()
elif task:
    import glob, time
    deadline = time.monotonic() + 60
    while len(glob.glob("ps*.up")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
if os.environ.get("FAIL_RANK") and os.environ.get("RANK") == os.environ["FAIL_RANK"]:
    sys.exit(7)
if os.environ.get("FAIL_RANK"):
    import time
    time.sleep(60)
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "job.py").write_text(SCRIPT)
    return tmp_path


def envs(stdout: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in stdout.splitlines():
        m = re.match(r"^\[(\d+:\w+)\] ENV (.*)$", line)
        if m:
            out.append((m.group(1), json.loads(m.group(2))))
    return sorted(out)


def test_pytorch_two_nodes_two_devices(job: Path) -> None:
    res = run_marun(["simulate", "--mode", "pytorch", "--", "job.py"], cwd=job)
    assert res.returncode == 0, res.stderr
    seen = envs(res.stdout)
    assert [label for label, _ in seen] == ["0:0", "0:1", "1:2", "1:3"]
    assert {e["WORLD_SIZE"] for _, e in seen} == {"4"}
    # first what the platform injects and what marun makes of it (part 19, item 10)
    assert res.stdout.startswith("marun simulate: a 2-node pytorch job on this machine")


def test_the_demo_shows_the_point_in_30_lines(tmp_path: Path) -> None:
    """scripts/demo.sh's job: what the platform injected (each container's variables and
    appended arguments), what marun made of it (the variables every rank gets, once; per rank
    the ones that differ), then the ranks' output, in 30 lines; no 'forged failure' warning on
    loopback. `--full-plan` still prints the whole plan."""
    import shutil

    from conftest import REPO

    shutil.copy(REPO / "examples" / "hello.py", tmp_path / "hello.py")
    args = ["simulate", "--mode", "pytorch", "--nodes", "2", "--devices", "2", "--", "hello.py"]
    res = run_marun(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = res.stdout + res.stderr
    assert len(text.splitlines()) <= 30, text
    assert "forged failure" not in text and "WARNING" not in text
    injected = text.split("the platform injects:")[1].split("marun makes of it:")[0]
    assert "VC_TASK_INDEX=1" in injected and "--rank 1 --world_size 2" in injected
    made = text.split("marun makes of it:")[1].split("\n\n")[0]
    assert "every process: " in made and len(re.findall(r"\bWORLD_SIZE=4", made)) == 1
    assert "node 1 rank3: GROUP_RANK=1 LOCAL_RANK=1 NODE_RANK=1 RANK=3" in made
    assert sum(line.startswith("[") and "hello from" in line for line in text.splitlines()) == 4
    full = run_marun([*args[:1], "--full-plan", *args[1:]], cwd=tmp_path)
    assert "mode: pytorch   nodes: 2   processes: 4" in full.stdout


def test_console_ranks_select_ranks_across_the_simulated_nodes(job: Path) -> None:
    """Each inner `marun run` selects its ranks' lines; the outer supervisor shows whatever they
    print (its processes are nodes, not ranks: selecting among them would hide everything)."""
    args = ["--mode", "pytorch", "--console-ranks", "0,3", "--no-show-plan"]
    res = run_marun(["simulate", *args, "--", "job.py"], cwd=job)
    assert res.returncode == 0, res.stderr
    assert [label for label, _ in envs(res.stdout)] == ["0:0", "1:3"]


def test_simulate_refuses_bad_supervision_settings(job: Path) -> None:
    res = run_marun(
        ["simulate", "--mode", "pytorch", "--grace-period", "nan", "--", "job.py"], cwd=job
    )
    assert res.returncode == 2
    assert res.stderr.startswith("marun: error: ") and res.stderr.count("\n") == 1
    assert "grace" in res.stderr and "nan" in res.stderr
    assert res.stdout == ""


def test_mindspore_scheduler_and_workers(job: Path) -> None:
    res = run_marun(
        ["simulate", "--mode", "mindspore", "--devices", "1", "--no-show-plan", "--", "job.py"],
        cwd=job,
    )
    assert res.returncode == 0, res.stderr
    roles = sorted(e["MS_ROLE"] for _, e in envs(res.stdout))
    assert roles == ["MS_SCHED", "MS_WORKER", "MS_WORKER"]
    assert {e["MS_WORKER_NUM"] for _, e in envs(res.stdout)} == {"2"}


# As in a real TF job, a worker needs its parameter servers up: it waits (bounded) until every ps
# has printed. Without that, a worker that ends at once ends the job, and a ps that had not yet
# printed is stopped before its first line: correct (a daemon ends with the job, whatever it was
# doing), but then there is no line to assert on.
TF_SCRIPT = """\
import json, os, pathlib, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
marks = pathlib.Path(os.environ["PS_MARKS"])
print("ENV " + json.dumps({"TF_CONFIG": os.environ["TF_CONFIG"]}), flush=True)
if task["type"] == "ps":
    (marks / f"ps{task['index']}").touch()
    time.sleep(120)
deadline = time.monotonic() + 60
while len(list(marks.glob("ps*"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0 if len(list(marks.glob("ps*"))) == 2 else 5)
"""


def test_tensorflow_ps_and_workers(tmp_path: Path) -> None:
    """Every ps and worker runs with its TF_CONFIG task; the parameter servers (daemons) are
    stopped when the workers end, and the job's status is the workers'."""
    (tmp_path / "job.py").write_text(TF_SCRIPT)
    (tmp_path / "marks").mkdir()
    res = run_marun(
        ["simulate", "--mode", "tensorflow", "--no-show-plan", "--", "job.py"],
        env={"PS_MARKS": str(tmp_path / "marks")},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    tasks = sorted(
        (json.loads(e["TF_CONFIG"])["task"]["type"], json.loads(e["TF_CONFIG"])["task"]["index"])
        for _, e in envs(res.stdout)
    )
    assert tasks == [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]


def test_ascend_gets_a_rank_table_and_device_dirs(job: Path) -> None:
    res = run_marun(
        ["simulate", "--mode", "ascend", "--nodes", "2", "--devices", "2", "--", "job.py"], cwd=job
    )
    assert res.returncode == 0, res.stderr
    seen = envs(res.stdout)
    assert sorted(e["RANK_ID"] for _, e in seen) == ["0", "1", "2", "3"]
    sim = job / "marun_logs" / "simulate"
    table = json.loads((sim / "rank_table.json").read_text())
    assert table["status"] == "completed" and table["server_count"] == "2"
    # Each simulated node has its own working directory, so device<id>/ dirs never collide.
    assert (sim / "node0" / "device1").is_dir() and (sim / "node1" / "device1").is_dir()


def test_a_failing_rank_fails_the_job_with_its_code(job: Path) -> None:
    res = run_marun(
        ["simulate", "--mode", "pytorch", "--grace-period", "5", "--no-show-plan", "--", "job.py"],
        env={"FAIL_RANK": "3"},
        cwd=job,
        timeout=60,
    )
    assert res.returncode == 7
    out = res.stdout + res.stderr
    assert re.search(r"Job's first failure: node 1 \(\S+\), process rank3 \(rank 3\), exit", out)
    sim = job / "marun_logs" / "simulate"
    assert json.loads((sim / "result.json").read_text())["exit_code"] == 7
    # The job's first failure is node 0's to decide (job.json). The simulator's own result.json
    # records its node processes, which all end with the job's status: which of them it saw end
    # first is a race between nodes 0 and 1 and says nothing about where the job failed.
    first = json.loads((sim / "node0" / "job.json").read_text())["first_failure"]
    assert (first["node"], first["name"], first["exit_code"]) == (1, "rank3", 7)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0", "--", "job.py"], "--nodes=0: expected an integer >= 1"),
        (["--devices", "0", "--", "job.py"], "--devices=0"),
        (["--", "missing.py"], "SCRIPT='missing.py'"),
        ([], "no script given"),
    ],
)
def test_bad_input(job: Path, args: list[str], message: str) -> None:
    res = run_marun(["simulate", "--mode", "pytorch", *args], cwd=job)
    assert res.returncode == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert not (job / "marun_logs").exists()


@pytest.mark.parametrize("mode", ["pytorch", "mindspore", "ascend"])
def test_the_shown_plan_is_what_each_node_runs(job: Path, mode: str) -> None:
    """Each node's processes are shown with that node's own log directory, and supervised (the
    inner runs are started with --supervise), as each container plans them."""
    res = run_marun(["simulate", "--mode", mode, "--full-plan", "--", "job.py"], cwd=job)
    assert res.returncode == 0, res.stderr
    # Each node's line names its log directory, the table each log by its file name; or (Ascend:
    # a log in each process's cwd, a directory per device) the table names each cwd.
    nodes = dict(re.findall(r"^  node (\d+)  \S+(.*)$", res.stdout, re.M))
    rows = re.findall(r"^  ([01])  +(?:rank|worker|scheduler)\S*  .*$", res.stdout, re.M)
    assert sorted(nodes) == ["0", "1"] and len(rows) >= 4, res.stdout
    for row in re.finditer(r"^  ([01])  +(?:rank|worker|scheduler)\S*  .*$", res.stdout, re.M):
        node = row.group(1)
        assert f"/simulate/node{node}" in nodes[node] + row.group(0), res.stdout
    assert "marun supervises" in res.stdout


def test_the_simulators_own_events_name_the_node_process_not_node_0(job: Path) -> None:
    """The simulator supervises one `marun run` per node; its events (process_started for
    node1, ...) carry no `node=0` of its own that would contradict them."""
    res = run_marun(
        ["simulate", "--mode", "pytorch", "--no-show-plan", "--verbose", "--", "job.py"], cwd=job
    )
    assert res.returncode == 0, res.stderr
    started = [
        ln for ln in res.stderr.splitlines() if "process_started" in ln and "process=node1" in ln
    ]
    assert started and all("node=0" not in ln for ln in started), started


@pytest.mark.parametrize(("given", "seen"), [(None, "3"), ("1", "1")])
def test_mindspore_simulation_quietens_the_engine_log_unless_the_user_set_it(
    tmp_path: Path, given: str | None, seen: str
) -> None:
    """MindSpore logs every connection at WARNING (half a small job's console): simulate sets
    GLOG_v=3 where the user has not set it, and its plan says so."""
    (tmp_path / "glog.py").write_text("import os\nprint('GLOG_v=' + os.environ['GLOG_v'])\n")
    res = run_marun(
        ["simulate", "--mode", "mindspore", "--nodes", "1", "--devices", "1", "--", "glog.py"],
        env={} if given is None else {"GLOG_v": given},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert re.findall(r"GLOG_v=(\d)$", res.stdout, re.M) == [seen, seen], res.stdout
    assert ("note: simulate sets GLOG_v=3" in res.stdout) == (given is None), res.stdout


def test_a_missing_import_prints_its_traceback_once_beyond_the_ranks_own_output(
    tmp_path: Path,
) -> None:
    """One rank's missing import, 2 nodes x 2 ranks: each rank's own output (prefixed), then
    the job's first failure once with its last lines, one line per other process, and no event
    lines of marun's on the console (they are in marun-events.log)."""
    (tmp_path / "bad.py").write_text(
        "import os, time\n"
        "if os.environ['RANK'] == '2':\n"
        "    import no_such_module_here\n"
        "time.sleep(60)\n"
    )
    res = run_marun(
        ["simulate", "--mode", "pytorch", "--no-show-plan", "--grace-period", "5", "--", "bad.py"],
        cwd=tmp_path,
        timeout=90,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert out.count("ModuleNotFoundError") == 2, out  # the rank's own line, the summary's
    assert out.count("| ModuleNotFoundError") == 1, out
    assert out.count("last lines of its output:") == 1, out
    assert "Root Cause" not in out and "[info" not in out and "job_failed" not in out, out
    assert "(rank None)" not in out and "rank -" not in out, out
    for other in ("rank0 (rank 0): ", "rank1 (rank 1): ", "rank3 (rank 3): "):
        assert out.count(other) == 1, out
    print(f"a missing import in a 2x2 simulation: {len(out.splitlines())} console lines")
    assert len(out.splitlines()) < 40, out
    events = tmp_path / "marun_logs" / "simulate" / "node1" / "marun-events.log"
    assert "process_started" in events.read_text()
    # The coordinator (node 0) names the failed node apart from its own, and no empty why.
    stops = [
        line
        for line in (events.parent.parent / "node0" / "marun-events.log").read_text().splitlines()
        if "job_stop" in line and "code=1" in line
    ]
    assert any("failed_node=1" in line for line in stops), stops
    assert all("why=None" not in line for line in stops), stops


def test_tensorflow_workers_only_in_the_platforms_ps_shaped_job(tmp_path: Path) -> None:
    """Part 19, item 6c: `--tf-workers-only` in a job the platform shapes with ps containers:
    each worker gets a workers-only TF_CONFIG (MultiWorkerMirroredStrategy's), the script never
    runs in a ps container (its process waits), and the job ends 0 with its workers."""
    (tmp_path / "job.py").write_text(
        "import json, os\nprint('ENV ' + json.dumps({'TF_CONFIG': os.environ['TF_CONFIG']}))\n"
    )
    res = run_marun(
        ["simulate", "--mode", "tensorflow", "--tf-workers-only", "--no-show-plan", "--", "job.py"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    configs = [json.loads(e["TF_CONFIG"]) for _, e in envs(res.stdout)]
    assert len(configs) == 2, res.stdout
    assert all(list(c["cluster"]) == ["worker"] and c["task"]["type"] == "worker" for c in configs)
