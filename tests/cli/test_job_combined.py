"""Promises together (part 18): stop signals inside restart rounds, a frozen node that comes
back, a killed pod, a node replaced as a round starts, two jobs on one host, a hangup under
nohup. Real `marun run` nodes on this machine's loopback (tests/cli/loopback_job.py), 3 nodes x 2
ranks, real signals.

Each case failed on main before part 18 (docs/supervision.md, "Promises together", has the
before and after). Time is asserted only where the promise is about time, and then against a
limit the old behaviour exceeds many times over (arrival_timeout 60 s, peer_timeout 20 s).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from loopback_job import LoopbackJob

# Every rank says it is up and writes its round; RANKS_FAIL `rank:round` pairs exit 3 at once;
# RANKS_TRAP ranks ignore SIGTERM once (so a round's stop barrier lasts the grace period) and
# say so; the others run until the job's end unless RUN_FOR says otherwise (ROUND0_FOR: in round
# 0, so that a round is sure to find them running, however slow the machine).
RANKS = """\
import os, signal, sys, time
rank = int(os.environ["RANK"]); rnd = int(os.environ.get("MARUN_RESTART_COUNT", "0"))
print(f"rank {rank} round {rnd} port {os.environ['MASTER_PORT']}", flush=True)
armed = os.environ.get("ARMED")  # a file: the trapping rank's handler is set
if str(rank) in os.environ.get("RANKS_TRAP", "").split(","):
    def trapped(signum, frame):
        print(f"rank {rank} trapped SIGTERM", flush=True)
        held = os.environ.get("TRAP_UNTIL")  # a file: the stop is held until it exists
        while held and not os.path.exists(held):
            time.sleep(0.05)
    signal.signal(signal.SIGTERM, trapped)
    open(armed, "w").close()
if f"{rank}:{rnd}" in os.environ.get("RANKS_FAIL", "").split(","):
    while armed and not os.path.exists(armed):
        time.sleep(0.05)
    sys.exit(3)
first = os.environ.get("ROUND0_FOR") if rnd == 0 else None
go_on = os.environ.get("GO_ON")  # a file: run until it exists
while go_on and not os.path.exists(go_on):
    time.sleep(0.05)
if not go_on:
    time.sleep(float(first or os.environ.get("RUN_FOR", "120")))
print(f"rank {rank} round {rnd} done", flush=True)
"""

ARRIVAL = 60.0  # the old behaviours waited this long


def _job(tmp_path: Path, restarts: int = 3, **env: str) -> LoopbackJob:
    job = LoopbackJob(
        tmp_path,
        nodes=3,
        env={"MARUN_PEER_TIMEOUT": "20", "MARUN_ARRIVAL_TIMEOUT": str(int(ARRIVAL)), **env},
    )
    job.options = ["--max-restarts", str(restarts), "--grace-period", "3"]
    return job


def _rank_log(job: LoopbackJob, node: int, rank: int) -> Path:
    return job.work(node) / "marun_logs" / f"rank_{rank}.log"


def _wait_log(job: LoopbackJob, node: int, rank: int, text: str) -> None:
    deadline = time.monotonic() + 60
    path = _rank_log(job, node, rank)
    while not (path.exists() and text in path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {rank} never wrote {text!r}\n{job.report()}")
        time.sleep(0.05)


def _wait_event(job: LoopbackJob, node: int, event: str) -> None:
    """Until node `node`'s marun has logged `event` (marun_logs/marun-events.log)."""
    deadline = time.monotonic() + 60
    path = job.work(node) / "marun_logs" / "marun-events.log"
    while not (path.exists() and event in path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node} never logged {event!r}\n{job.report()}")
        time.sleep(0.05)


def _all_up(job: LoopbackJob, round_: int = 0) -> None:
    for rank in range(6):
        _wait_log(job, rank // 2, rank, f"rank {rank} round {round_}")


def _freeze_node_1(job: LoopbackJob, while_frozen: Callable[[], None] = lambda: None) -> None:
    """Node 1's marun (not its ranks) stopped until node 0 declares it lost and begins round 1,
    `while_frozen` done to it meanwhile; then continued."""
    job.start([0, 1, 2], RANKS)
    _all_up(job)
    os.kill(job.nodes[1].proc.pid, signal.SIGSTOP)
    while_frozen()
    _wait_event(job, 0, "job_restart")  # node 0 declared node 1 lost: round 1 began
    time.sleep(1.0)
    os.kill(job.nodes[1].proc.pid, signal.SIGCONT)


def _ended_well_in_round_1(job: LoopbackJob, codes: dict[int, int], **cause: int) -> None:
    """Every node ended 0 after one round, caused by `cause` (its fields), each rank's round 1
    run to its end."""
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    report = json.loads(job.job_json())
    assert report["round"] == 1, report
    assert {k: report["rounds"][0]["cause"][k] for k in cause} == cause, report
    for rank in range(6):
        assert f"rank {rank} round 1 done" in _rank_log(job, rank // 2, rank).read_text()


@pytest.mark.parametrize(("node", "signum"), [(0, signal.SIGTERM), (2, signal.SIGINT)])
def test_a_stop_signal_with_rounds_left_ends_the_job_and_starts_no_round(
    tmp_path: Path, node: int, signum: int
) -> None:
    job = _job(tmp_path)
    try:
        job.start([0, 1, 2], RANKS)
        _all_up(job)
        began = time.monotonic()
        job.signal(node, signum)
        codes = job.finish()
        took = time.monotonic() - began
    finally:
        job.kill_all()
    assert codes == {0: 128 + signum, 1: 128 + signum, 2: 128 + signum}, job.report()
    report = json.loads(job.job_json())
    assert report["round"] == 0 and report["rounds"] == [], report
    assert report["first_failure"]["node"] == node, report
    assert "round 1" not in job.report()
    assert took < ARRIVAL / 2, f"{took:.1f}s\n{job.report()}"


def test_a_stop_signal_right_at_the_start_ends_every_node_at_once(tmp_path: Path) -> None:
    """SIGINT to node 1's marun as it joins the job (its events file is open: its plan is made,
    its link opening), nodes 0 and 2 gathering: every node ends with 130 at once."""
    job = _job(tmp_path)
    try:
        job.start([0, 1, 2], RANKS)
        events = job.work(1) / "marun_logs" / "marun-events.log"
        deadline = time.monotonic() + 60
        while not events.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        began = time.monotonic()
        job.signal(1, signal.SIGINT)
        codes = job.finish()
        took = time.monotonic() - began
    finally:
        job.kill_all()
    assert codes == {0: 130, 1: 130, 2: 130}, job.report()
    assert took < ARRIVAL / 2, f"{took:.1f}s\n{job.report()}"
    assert "round 1" not in job.report()


def test_a_stop_signal_during_a_rounds_stop_barrier_ends_the_job_with_it(tmp_path: Path) -> None:
    """Rank 4 fails (round 1 begins); rank 1 traps SIGTERM, so node 0's ranks hold the round's
    barrier for the grace period; SIGTERM to node 2 meanwhile ends the job with 143, not the
    rank's 3, and without round 1's start."""
    job = _job(tmp_path, RANKS_FAIL="4:0", RANKS_TRAP="1", ARMED=str(tmp_path / "armed"))
    job.options = ["--max-restarts", "3", "--grace-period", "15"]  # the barrier held 15 s
    try:
        job.start([0, 1, 2], RANKS)
        _wait_log(job, 0, 1, "rank 1 trapped SIGTERM")
        job.signal(2, signal.SIGTERM)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 143, 1: 143, 2: 143}, job.report()
    report = json.loads(job.job_json())
    assert report["exit_code"] == 143 and report["first_failure"]["node"] == 2, report
    assert "round 1 port" not in "".join(
        _rank_log(job, r // 2, r).read_text()
        for r in range(6)
        if _rank_log(job, r // 2, r).exists()
    )


def test_a_stop_signal_inside_round_1_does_not_spend_round_2(tmp_path: Path) -> None:
    job = _job(tmp_path, RANKS_FAIL="4:0")
    try:
        job.start([0, 1, 2], RANKS)
        _all_up(job, round_=1)
        job.signal(1, signal.SIGTERM)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 143, 1: 143, 2: 143}, job.report()
    report = json.loads(job.job_json())
    assert report["round"] == 1 and len(report["rounds"]) == 1, report
    assert "round 2" not in job.report()


def test_a_frozen_node_that_comes_back_joins_the_round(tmp_path: Path) -> None:
    """Node 1's marun (not its ranks) stopped past peer_timeout, then continued: node 0 declared
    it lost and began round 1; back, it stops its ranks, is counted, and the job goes on in
    round 1 and ends 0."""
    job = _job(tmp_path, MARUN_PEER_TIMEOUT="4", ROUND0_FOR="300", RUN_FOR="3")
    try:
        _freeze_node_1(job)
        codes = job.finish()
    finally:
        job.kill_all()
    _ended_well_in_round_1(job, codes, node=1)


def test_a_killed_nodes_closed_connection_is_a_loss_at_once(tmp_path: Path) -> None:
    """Node 2's marun and ranks SIGKILLed, never replaced: its connection closed without a
    goodbye, so it is lost at once (not after peer_timeout 20 s); the round then waits
    arrival_timeout (5 s) for a replacement and the job ends 1."""
    job = _job(tmp_path, MARUN_ARRIVAL_TIMEOUT="5")
    try:
        job.start([0, 1, 2], RANKS)
        _all_up(job)
        os.killpg(job.nodes[2].proc.pid, signal.SIGKILL)
        job.nodes[2].proc.wait()
        del job.nodes[2]
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 1, 1: 1}, job.report()
    report = json.loads(job.job_json())
    cause = report["rounds"][0]["cause"]
    assert cause["node"] == 2 and "connection closed" in cause["why"], report
    assert "not back within arrival_timeout 5s" in report["first_failure"]["no_restart"], report


def test_a_node_killed_and_started_again_costs_one_round(tmp_path: Path) -> None:
    job = _job(tmp_path, ROUND0_FOR="300", RUN_FOR="3")
    try:
        job.start([0, 1, 2], RANKS)
        _all_up(job)
        os.killpg(job.nodes[1].proc.pid, signal.SIGKILL)
        job.nodes[1].proc.wait()
        job.start([1], RANKS)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    report = json.loads(job.job_json())
    assert report["round"] == 1 and len(report["rounds"]) == 1, report


def test_two_jobs_on_one_host_never_merge(tmp_path: Path) -> None:
    """Jobs A and B on one host, one job port, their own rendezvous ports, no token names them
    apart, started interleaved (A0, B1, B2, A1, A2, B0): A runs with its own nodes only and ends
    0; B's node 0 cannot have the port and says so at once (exit 2); B's others end with one
    line naming the clash within arrival_timeout, backing off meanwhile (A refuses few)."""
    # Job A runs until B's node 0 has ended and B's others have met it (GO_ON): a run time of
    # its own could end first on a slow machine, and free the port.
    go_on = tmp_path / "go_on"
    a = LoopbackJob(tmp_path / "a", nodes=3, env={"GO_ON": str(go_on), "MARUN_JOB_TOKEN": ""})
    b = LoopbackJob(
        tmp_path / "b",
        nodes=3,
        env={"RUN_FOR": "4", "MARUN_JOB_TOKEN": "", "MARUN_ARRIVAL_TIMEOUT": "8"},
    )
    b.port = a.port
    try:
        a.start([0], RANKS)
        b.start([1, 2], RANKS)
        time.sleep(1.0)
        a.start([1, 2], RANKS)
        a.wait_for(0, "3/3 nodes up")
        b.start([0], RANKS)
        b.nodes[0].proc.wait(60)
        for i in (1, 2):
            b.wait_for(i, "another job")
        go_on.touch()
        codes_a = a.finish()
        codes_b = b.finish()
    finally:
        a.kill_all()
        b.kill_all()
    assert codes_a == {0: 0, 1: 0, 2: 0}, a.report()
    assert codes_b[0] == 2 and "job_port" in b.nodes[0].output, b.report()
    assert codes_b[1] != 0 and codes_b[2] != 0, b.report()
    for i in (1, 2):
        assert "another job" in b.nodes[i].output, b.report()
    for rank in range(6):
        assert f"port {a.master}" in _rank_log(a, rank // 2, rank).read_text()
    report = json.loads(a.job_json())
    assert report["refused_messages"] < 60, report["refused_messages"]


def test_under_nohup_a_hangup_during_a_round_s_stop_barrier_changes_nothing(
    tmp_path: Path,
) -> None:
    """Every node's marun under `nohup` (SIGHUP ignored by whoever started it: it stays ignored
    in every phase). Rank 4 fails, round 1 begins; rank 1 traps SIGTERM and holds the round's
    barrier until the test releases it; a SIGHUP to every marun meanwhile changes nothing: the
    round starts, its ranks finish, every node ends 0."""
    release = tmp_path / "release"
    job = _job(
        tmp_path,
        RANKS_FAIL="4:0",
        RANKS_TRAP="1",
        ARMED=str(tmp_path / "armed"),
        TRAP_UNTIL=str(release),
        RUN_FOR="3",
    )
    job.options = ["--max-restarts", "3", "--grace-period", "60"]
    job.wrapper = ["nohup"]
    try:
        job.start([0, 1, 2], RANKS)
        # the barrier is held now, until the release: the hangups land inside it
        _wait_log(job, 0, 1, "rank 1 trapped SIGTERM")
        for node in (0, 1, 2):
            job.signal(node, signal.SIGHUP)
        release.write_text("")
        codes = job.finish()
    finally:
        job.kill_all()
    _ended_well_in_round_1(job, codes, rank=4)


def test_under_nohup_a_frozen_node_hung_up_while_frozen_joins_the_round(tmp_path: Path) -> None:
    """Node 1's marun under `nohup` is stopped past peer_timeout (node 0 declares it lost and
    begins round 1) and sent SIGHUP while stopped; continued, the hangup it finds waiting changes
    nothing: it stops its ranks, is counted, and the job ends 0 in round 1."""
    job = _job(tmp_path, MARUN_PEER_TIMEOUT="4", ROUND0_FOR="300", RUN_FOR="3")
    job.wrapper = ["nohup"]
    try:
        _freeze_node_1(job, lambda: job.signal(1, signal.SIGHUP))  # pending until it continues
        codes = job.finish()
    finally:
        job.kill_all()
    _ended_well_in_round_1(job, codes, node=1)
