"""The platform's ordinary events to a node's marun, on a job of real `marun run` processes
(loopback_job.py): a pod deleted (SIGTERM), a user's ^C (SIGINT), a pod recreated (SIGKILL, then
the same marun started again). Each is a failure of the whole job, named on every node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_job import LoopbackJob


@pytest.fixture
def job(tmp_path: Path) -> Iterator[LoopbackJob]:
    made = LoopbackJob(tmp_path)
    yield made
    made.kill_all()


def ranks_up(job: LoopbackJob) -> None:
    for i in range(job.n):
        job.wait_for(i, rf"rank {2 * i + 1} up")


@pytest.mark.parametrize(
    ("node", "signum"), [(1, signal.SIGTERM), (0, signal.SIGINT)], ids=["sigterm-1", "sigint-0"]
)
def test_a_signal_to_one_node_s_marun_mid_run_stops_the_job(
    job: LoopbackJob, node: int, signum: int
) -> None:
    job.start([0, 1, 2])
    ranks_up(job)
    signalled = time.monotonic()
    job.signal(node, signum)
    codes = job.finish()
    took = time.monotonic() - signalled
    print(f"{signal.Signals(signum).name} to node {node}: every node ended within {took:.2f}s")
    code = 128 + signum
    # The signalled node exits 128+N, and so does every other: the job's status.
    assert codes == {0: code, 1: code, 2: code}, job.report()
    name = signal.Signals(signum).name
    for i in range(3):
        out = job.nodes[i].output
        assert re.search(rf"Job's first failure: node {node} \(\S+\) stopped by {name}", out), (
            job.report()
        )
        assert "rank" in out and "done" not in out.split("Job's first failure")[0]
    report = json.loads(job.job_json())
    assert report["exit_code"] == code
    assert f"stopped by {name}" in report["first_failure"]["why"]


def test_sigterm_while_the_nodes_gather_stops_the_start(job: LoopbackJob) -> None:
    job.start([0, 1])
    job.wait_for(0, r"2/3 nodes up")
    job.signal(1, signal.SIGTERM)
    job.wait_for(0, r"stopped by SIGTERM")
    # Node 2 arrives after node 1 left: the barrier must not open. (Node 0, its job over, may
    # be gone by then: node 2 then gives up on it, after its own short time-outs.)
    job.start([2], env={"MARUN_ARRIVAL_TIMEOUT": "4", "MARUN_PEER_TIMEOUT": "3"})
    codes = job.finish()
    assert codes[0] == codes[1] == 143 and codes[2] in (1, 143), job.report()
    for i in range(3):
        out = job.nodes[i].output
        assert " up" not in out.replace("nodes up", ""), job.report()  # no rank started
    for i in range(2):
        out = job.nodes[i].output
        assert re.search(r"node 1 \(\S+\) stopped by SIGTERM before the start", out), job.report()


def test_a_node_that_comes_back_after_the_start_fails_the_job(job: LoopbackJob) -> None:
    job.start([0, 1, 2])
    ranks_up(job)
    os.killpg(job.nodes[1].proc.pid, signal.SIGKILL)  # the pod is deleted hard ...
    job.nodes[1].proc.wait()
    job.start([1])  # ... and recreated with the same arguments
    codes = job.finish()
    assert codes == {0: 1, 1: 1, 2: 1}, job.report()
    for i in range(3):
        assert "node 1 came back after the start: its earlier marun was lost" in (
            job.nodes[i].output
        ), job.report()
    assert "rank 3 up" not in job.nodes[1].output  # the new node 1 started nothing
    report = json.loads(job.job_json())
    assert "came back" in report["first_failure"]["why"]


def test_node_0_that_comes_back_after_the_start_fails_the_job(job: LoopbackJob) -> None:
    job.start([0, 1, 2])
    ranks_up(job)
    os.killpg(job.nodes[0].proc.pid, signal.SIGKILL)
    job.nodes[0].proc.wait()
    job.start([0])
    codes = job.finish()
    assert codes == {0: 1, 1: 1, 2: 1}, job.report()
    for i in range(3):
        assert "node 0 came back after the start: its earlier marun was lost" in (
            job.nodes[i].output
        ), job.report()
    assert "rank 1 up" not in job.nodes[0].output


def test_a_token_that_is_not_utf8_is_used_as_its_bytes(tmp_path: Path) -> None:
    """MARUN_JOB_TOKEN=$'\\xff': a secret all the same (Python holds it as a lone surrogate);
    the job runs, signed with it."""
    job = LoopbackJob(tmp_path, env={"MARUN_JOB_TOKEN": "tok\udcff", "RUN_FOR": "1"})
    try:
        job.start([0, 1, 2])
        assert job.finish() == {0: 0, 1: 0, 2: 0}, job.report()
        assert "Traceback" not in job.report()
    finally:
        job.kill_all()


def test_nodes_lost_while_node_0_was_frozen_end_when_they_gave_up(tmp_path: Path) -> None:
    """Node 0's marun frozen (SIGSTOP): the others give up on it after peer_timeout and leave.
    Thawed, node 0 blames itself, and job.json gives their end as when they gave up on it, not
    when node 0 noticed."""
    job = LoopbackJob(tmp_path, env={"MARUN_PEER_TIMEOUT": "3"})
    try:
        job.start([0, 1, 2])
        ranks_up(job)
        job.signal(0, signal.SIGSTOP)
        frozen = time.monotonic()
        for i in (1, 2):
            job.nodes[i].proc.wait(60)
        # Thawed as soon as they left: they give up 3 s after node 0's last heartbeat, which
        # came up to 1 s before the freeze, so node 0 was frozen 2 s to a little over 3 s, the
        # edge where it once found its own slot (frozen with it) silent and said itself lost.
        print(f"node 0 frozen {time.monotonic() - frozen:.1f}s")
        thawed = time.time()
        job.signal(0, signal.SIGCONT)
        job.finish()
        report = json.loads(job.job_json())
        from datetime import datetime

        for node in report["nodes"][1:]:
            slot = node["slots"][0]
            assert slot["ended"] is not None, report
            ended = datetime.fromisoformat(slot["ended"]).timestamp()
            assert ended < thawed, (slot, thawed)
        assert report["first_failure"]["node"] == 0, report  # node 0 is the one that was frozen
        assert "did not run for" in report["first_failure"]["why"]
    finally:
        job.kill_all()


# Rank 0 computes silently; the others wait for it (as ranks at a collective do): one busy rank
# is what makes a quiet job a working one, and it keeps the test to one core of CPU.
BUSY_QUIET = """\
import os, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
x = 0
while not os.path.exists(os.environ["GO_ON"]):  # train_step: busy on rank 0, prints nothing
    if rank == 0:
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            x += 1
    else:
        time.sleep(0.1)
print(f"rank {rank} done", flush=True)
"""

ASLEEP = """\
import os, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
time.sleep(600)  # blocked, as in a collective whose peer is gone
"""


def test_the_hang_watchdog_leaves_a_busy_quiet_job_alone(tmp_path: Path) -> None:
    """Silent past the hang timeout, but using CPU: judged not hung (the issue's false alarm),
    and left to end 0 on its own. The ranks run until that judgement, however slow the machine
    (a fixed run time could end first)."""
    go_on = tmp_path / "go_on"  # the ranks run, silent, until the judgement (then end 0)
    job = LoopbackJob(tmp_path, nodes=2, env={"GO_ON": str(go_on)})
    job.options = ["--hang-timeout", "4"]
    try:
        job.start([0, 1], BUSY_QUIET)
        job.wait_for(0, "job_quiet_but_busy")  # (a job judged hung ends 124 first: said)
        go_on.touch()
        assert job.finish() == {0: 0, 1: 0}, job.report()
        assert "rank 1 done" in job.nodes[0].output
    finally:
        job.kill_all()


@pytest.mark.e2e
def test_with_py_spy_a_busy_quiet_job_is_left_alone_too(tmp_path: Path) -> None:
    """With stacks to compare (py-spy, in the torch venv): a silent loop samples the same line
    twice, but its thread is on CPU: working, not stuck."""
    from conftest import REPO

    python = REPO / ".cache" / "venvs" / "torch" / "bin" / "python"
    if not (python.parent / "py-spy").is_file():
        pytest.skip("no py-spy beside the torch venv's python: run scripts/frameworks.sh torch")
    go_on = tmp_path / "go_on"
    job = LoopbackJob(tmp_path, nodes=2, env={"GO_ON": str(go_on)}, python=str(python))
    job.options = ["--hang-timeout", "4"]
    try:
        job.start([0, 1], BUSY_QUIET)
        job.wait_for(0, "job_quiet_but_busy")
        go_on.touch()
        assert job.finish() == {0: 0, 1: 0}, job.report()
    finally:
        job.kill_all()


def test_the_hang_watchdog_stops_a_silent_idle_job_saying_why(tmp_path: Path) -> None:
    job = LoopbackJob(tmp_path, nodes=2)
    job.options = ["--hang-timeout", "4"]
    try:
        job.start([0, 1], ASLEEP)
        assert job.finish() == {0: 124, 1: 124}, job.report()
        for i in range(2):
            assert re.search(
                r"no rank of the job wrote a line for 4s, and its ranks used [0-9.]+s of CPU in "
                r"that time: nothing runs",
                job.nodes[i].output,
            ), job.report()
    finally:
        job.kill_all()


@pytest.mark.parametrize("hosts", ["127.0.0.1,127.0.0.2,127.0.0.3", None], ids=["ids", "same-id"])
def test_another_job_on_the_same_port_is_refused_and_job_a_goes_on(
    tmp_path: Path, hosts: str | None
) -> None:
    """Job B (no MA_VJ_NAME, the same init_method and job port, the same token) starts nodes 1
    and 2 while job A runs. With other hosts its job id differs: refused at the hello by id.
    With nothing to tell them apart, node 1's and 2's places are held by job A's talking marun:
    turned away. Either way one line on each side, and job A ends 0."""
    go_on = tmp_path / "go_on"  # job A runs until job B's nodes have ended
    a = LoopbackJob(tmp_path / "a", env={"GO_ON": str(go_on)})
    b = LoopbackJob(tmp_path / "b", env={"MARUN_ARRIVAL_TIMEOUT": "4", "MARUN_PEER_TIMEOUT": "3"})
    b.port, b.master = a.port, a.master
    if hosts:
        b.extra["VC_WORKER_HOSTS"] = hosts
    try:
        a.start([0, 1, 2])
        ranks_up(a)
        b.start([1, 2])
        codes_b = b.finish()
        go_on.touch()
        assert a.finish() == {0: 0, 1: 0, 2: 0}, a.report() + b.report()
        assert codes_b == {1: 1, 2: 1}, b.report()
        why = "another job's marun" if hosts else "is here already"
        assert why in a.nodes[0].output, a.report()
        for i in (1, 2):
            out = b.nodes[i].output
            assert out.count("job_refused") == 1 and why in out, b.report()
            assert " up" not in out.replace("nodes up", "")
    finally:
        a.kill_all()
        b.kill_all()


FAKE_PY_SPY = """\
#!/bin/sh
# A py-spy that hangs until released, and says whether marun's stop reached it.
trap 'echo TERM > "$FAKE_DIR/term"; exit 1' TERM
echo $$ > "$FAKE_DIR/dumping.$$"
while [ ! -e "$FAKE_DIR/release" ]; do sleep 0.1; done
echo "fake stacks"
"""


def test_a_stack_dump_under_way_does_not_hold_up_a_signal(tmp_path: Path) -> None:
    """py-spy can take 10 s a rank: the dumps run beside the supervisor's loop, not in it. Node
    1's py-spy (a stand-in that hangs) is mid-dump when node 1 gets SIGTERM: its loop answers at
    once and stops everything it started, the dump included, with that SIGTERM. In the loop, the
    dump would have held the signal until py-spy's time-out killed it (SIGKILL, no trace)."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "py-spy").write_text(FAKE_PY_SPY)
    (fake / "py-spy").chmod(0o755)
    job = LoopbackJob(tmp_path, nodes=2)
    job.options = ["--hang-timeout", "4"]
    try:
        job.start([0], ASLEEP)
        path = f"{fake}:{os.environ['PATH']}"
        job.start([1], ASLEEP, env={"PATH": path, "FAKE_DIR": str(fake)})
        deadline = time.monotonic() + 120
        while not list(fake.glob("dumping.*")):
            assert time.monotonic() < deadline, job.report()
            time.sleep(0.05)
        job.signal(1, signal.SIGTERM)
        codes = job.finish()
        assert set(codes) == {0, 1} and all(codes.values()), job.report()
        assert (fake / "term").read_text() == "TERM\n", job.report()
    finally:
        (fake / "release").touch()
        job.kill_all()
