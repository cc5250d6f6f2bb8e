"""result.json says the code marun exits with, on every node of a job of real `marun run`
processes, also where that code is not this node's own but the job's (node 0's word) or a
signal's while the node waits for the job's end. job.json's line for the node says the same.

The cases where the two could part: a TensorFlow parameter-server container (daemons only)
stopped by SIGTERM mid-run (part 19, item 6b: result.json said `succeeded`, exit 0, marun exited
143), a node whose ranks all ended 0 before a failure elsewhere ended the job, and a node whose
ranks ended 0 stopped by SIGTERM while it waits for the rest of the job.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback_job import DEADLINE, LoopbackJob

from conftest import clean_env, free_port, shown_while_running

# A TensorFlow task that says it is up and serves until it is stopped (a ps never ends itself).
TF_TASK = """\
import json, os, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("up", task["type"], flush=True)
time.sleep(120)
"""

# A rank that waits for a file (another node's result.json: that node has ended), then exits
# with FAIL_CODE (0 when unset).
WAIT_THEN_EXIT = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
wait_for = os.environ.get("WAIT_FOR")
deadline = time.monotonic() + 60
while wait_for and not os.path.exists(wait_for) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(int(os.environ.get("FAIL_CODE", "0")))
"""


def results(log_dir: Path) -> dict[str, Any]:
    """The one result.json (result.json or result.node<i>.json) in a log directory."""
    found = sorted(log_dir.glob("result*.json"))
    assert len(found) == 1, f"result files in {log_dir}: {found}"
    record: dict[str, Any] = json.loads(found[0].read_text())
    return record


def slot(job_json: dict[str, Any], node: int) -> dict[str, Any]:
    """What node 0's job.json says of node `node`'s (one) marun."""
    entry = next(n for n in job_json["nodes"] if n["index"] == node)
    only: dict[str, Any] = entry["slots"][0]
    return only


def wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    def shown() -> bool:
        return log.exists() and text in log.read_text(errors="replace")

    if not shown_while_running(shown, proc, DEADLINE):
        raise AssertionError(f"{log} never showed {text!r}")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_ps_container_stopped_by_sigterm_says_143_as_marun_exits(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """A ps and a worker container of the platform's TensorFlow job; SIGTERM to the ps's marun
    (the platform deleting its pod) mid-run stops the job with 143 on both, and each
    result.json and job.json says so."""
    (tmp_path / "job.py").write_text(TF_TASK)
    lists = ["--ps_hosts", f"[127.0.0.1:{free_port()}]"]
    lists += ["--worker_hosts", f"[127.0.0.1:{free_port()}]"]
    port = free_port()
    for task in ("ps", "worker"):
        env = clean_env(
            {
                "MA_NUM_HOSTS": "2",
                "MA_NUM_GPUS": "1",
                "MA_CURRENT_IP": "127.0.0.1",
                "MA_TASK_NAME": task,
                "VC_TASK_INDEX": "0",
                "MARUN_JOB_PORT": str(port),
                "MARUN_JOB_TOKEN": "loopback-token",
                "MARUN_GRACE_PERIOD": "5",
            }
        )
        argv = [sys.executable, "-m", "marun", "run", "--mode", "tensorflow"]
        argv += ["--log-dir", str(tmp_path / task), "--", "job.py"]
        argv += ["--task_index", "0", *lists, "--job_name", task]
        with (tmp_path / f"{task}.txt").open("wb") as sink:
            procs.append(
                subprocess.Popen(
                    argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
    ps, worker = procs
    wait_for_line(tmp_path / "ps" / "ps_0.log", "up ps", ps)
    wait_for_line(tmp_path / "worker" / "worker_0.log", "up worker", worker)
    ps.send_signal(signal.SIGTERM)
    codes = [p.wait(DEADLINE) for p in procs]
    console = "".join((tmp_path / f"{t}.txt").read_text() for t in ("ps", "worker"))
    assert codes == [143, 143], console

    record = results(tmp_path / "ps")
    assert (record["outcome"], record["exit_code"], record["signal"]) == (
        "interrupted",
        143,
        "SIGTERM",
    ), record
    assert results(tmp_path / "worker")["exit_code"] == 143
    # The ps is node 0 of the plan's order (ps, then workers); the first worker leads the job.
    job = json.loads((tmp_path / "worker" / "job.json").read_text())
    assert job["exit_code"] == 143
    assert (
        job["first_failure"]["why"].startswith("node 0 ")
        and "SIGTERM" in job["first_failure"]["why"]
    )
    assert (slot(job, 0)["outcome"], slot(job, 0)["exit_code"]) == ("interrupted", 143), job


@pytest.fixture
def job(tmp_path: Path) -> Iterator[LoopbackJob]:
    made = LoopbackJob(tmp_path, nodes=2)
    yield made
    made.kill_all()


def node_result(job: LoopbackJob, i: int) -> dict[str, Any]:
    return results(job.work(i) / "marun_logs")


def test_a_node_done_before_a_failure_elsewhere_says_the_job_s_code(job: LoopbackJob) -> None:
    """Node 1's ranks end 0; node 0's rank then fails with 3: every node exits 3, the job's
    status, and node 1's result.json says 3 too (its processes' own ends stay 0)."""
    done = job.work(1) / "marun_logs" / "result.node1.json"
    job.start([1], WAIT_THEN_EXIT)
    job.start([0], WAIT_THEN_EXIT, env={"WAIT_FOR": str(done), "FAIL_CODE": "3"})
    codes = job.finish()
    assert codes == {0: 3, 1: 3}, job.report()
    record = node_result(job, 1)
    assert (record["outcome"], record["exit_code"]) == ("failed", 3), record
    assert {p["exit_code"] for p in record["processes"]} == {0}
    assert node_result(job, 0)["exit_code"] == 3


def test_sigterm_while_a_node_waits_for_the_job_s_end_says_143(job: LoopbackJob) -> None:
    """Node 1's ranks end 0 and it waits for the rest of the job; SIGTERM then (the platform
    deleting its pod) ends it with 143, and its result.json says 143 and the signal."""
    done = job.work(1) / "marun_logs" / "result.node1.json"
    job.start([0])  # ranks that run until the test ends
    job.start([1], WAIT_THEN_EXIT)
    deadline = time.monotonic() + DEADLINE
    while not done.exists():
        assert time.monotonic() < deadline, job.report()
        time.sleep(0.05)
    # A stop signal in the instant between the supervisor's loop and the wait is only recorded
    # (marun.runtime.early_signals' handler), so it is sent again until marun ends: one comes
    # during the wait.
    proc = job.nodes[1].proc
    while proc.poll() is None:
        assert time.monotonic() < deadline, job.report()
        job.signal(1, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.5)
    assert proc.returncode == 143, job.report()
    record = node_result(job, 1)
    assert (record["outcome"], record["exit_code"], record["signal"]) == (
        "interrupted",
        143,
        "SIGTERM",
    ), record
