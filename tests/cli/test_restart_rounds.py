"""Restart rounds (docs/supervision.md, "Restart rounds"), with real `marun run` nodes on this
machine's loopback (tests/cli/loopback_job.py): 3 nodes x 2 ranks whose ranks block on one
another through rank 0's TCP rendezvous on MASTER_PORT (so a rank of round k never meets one of
round k+1 unnoticed: each round's rendezvous is on the round's own port)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from loopback_job import LoopbackJob

# Rank 0 listens on MASTER_PORT and answers `go` once every rank of the job has said hello; each
# rank writes what it saw into its log. RANKS_FAIL names `rank:round` pairs that exit 1 at once
# (before the rendezvous), RANKS_HANG `rank:round` pairs that print nothing and sleep.
RANKS = """\
import os, socket, sys, time
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
rnd = int(os.environ["MARUN_RESTART_COUNT"])
port = int(os.environ["MASTER_PORT"])
print(f"rank {rank} round {rnd} budget {os.environ['MARUN_MAX_RESTARTS']} "
      f"torch {os.environ['TORCHELASTIC_RESTART_COUNT']} port {port}", flush=True)
if f"{rank}:{rnd}" in os.environ.get("RANKS_FAIL", "").split(","):
    sys.exit(int(os.environ.get("FAIL_CODE", "1")))
if f"{rank}:{rnd}" in os.environ.get("RANKS_HANG", "").split(","):
    time.sleep(600)
if rank == 0:
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(64)
    peers = [srv.accept()[0] for _ in range(world - 1)]
    for p in peers:
        p.sendall(b"go")
else:
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    s.settimeout(None)
    assert s.recv(2) == b"go"
print(f"rank {rank} round {rnd} passed the rendezvous", flush=True)
"""


def _job(tmp_path: Path, restarts: int = 3, **env: str) -> LoopbackJob:
    job = LoopbackJob(tmp_path, nodes=3, env={"MARUN_PEER_TIMEOUT": "4", **env})
    job.options = ["--max-restarts", str(restarts), "--grace-period", "3"]
    return job


def _run(job: LoopbackJob) -> dict[int, int]:
    """Every node started with RANKS; each one's exit code once all have ended."""
    try:
        job.start([0, 1, 2], RANKS)
        return job.finish()
    finally:
        job.kill_all()


def _rank_log(job: LoopbackJob, node: int, rank: int) -> str:
    return (job.work(node) / "marun_logs" / f"rank_{rank}.log").read_text()


def test_a_rank_that_fails_once_is_restarted_with_every_rank_of_the_job(tmp_path: Path) -> None:
    job = _job(tmp_path, RANKS_FAIL="4:0")
    codes = _run(job)
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    for rank in range(6):
        log = _rank_log(job, rank // 2, rank)
        # Both rounds in one log, the second after its marker, told its round on every node.
        # (Round 0's first line only from rank 4: the others may be stopped before they print.)
        if rank == 4:
            assert log.startswith("rank 4 round 0 budget 3 torch 0"), log
        assert "marun: round 1/3 after node 2 rank 4 exit 1" in log, log
        after = log.split("marun: round 1/3", 1)[1]
        assert f"rank {rank} round 1 budget 3 torch 1" in after, log
        assert f"rank {rank} round 1 passed the rendezvous" in after, log
    report = json.loads(job.job_json())
    assert report["exit_code"] == 0
    assert report["round"] == 1
    (round1,) = report["rounds"]
    assert round1["cause"]["node"] == 2 and round1["cause"]["rank"] == 4
    assert round1["cause"]["exit_code"] == 1
    assert round1["detected_at"] <= round1["stopped_at"] <= round1["running_at"]
    assert round1["ranks"] == 6
    assert "marun: round 1/3 after node 2 rank 4 exit 1 (all 6 ranks running again in" in (
        job.nodes[0].output
    )
    # The rendezvous moved to another port in round 1.
    failed = _rank_log(job, 2, 4)  # the one rank sure to have printed in round 0
    port0 = failed.split("port ", 1)[1].split()[0]
    port1 = failed.split("marun: round 1/3", 1)[1].split("port ", 1)[1].split()[0]
    assert port0 != port1


def test_a_rank_that_fails_at_once_every_round_ends_the_job(tmp_path: Path) -> None:
    job = _job(tmp_path, restarts=5, RANKS_FAIL=",".join(f"3:{r}" for r in range(6)), FAIL_CODE="7")
    codes = _run(job)
    assert codes == {0: 7, 1: 7, 2: 7}, job.report()
    report = json.loads(job.job_json())
    # Round 0 failed at once, round 1 failed at once again: no third round.
    assert report["round"] == 1, report
    assert report["first_failure"]["rank"] == 3
    assert "quick_failure" in report["first_failure"]["no_restart"]
    for node in job.nodes.values():
        assert "node 1" in node.output and "rank 3" in node.output, job.report()


def test_a_fatal_exit_code_ends_the_job_without_a_round(tmp_path: Path) -> None:
    job = _job(tmp_path, RANKS_FAIL="1:0", FAIL_CODE="3")
    job.options += ["--fatal-exit-codes", "3,4"]
    codes = _run(job)
    assert codes == {0: 3, 1: 3, 2: 3}, job.report()
    report = json.loads(job.job_json())
    assert report["round"] == 0 and "fatal" in report["first_failure"]["no_restart"]


def test_a_replaced_node_rejoins_in_the_next_round(tmp_path: Path) -> None:
    """Node 1's marun SIGKILLed (its ranks die with it) and a new one started with the same
    arguments, as a recreated pod's: the job goes on in round 1 and ends 0."""
    job = _job(tmp_path, RANKS_HANG="0:0")  # round 0 never passes its rendezvous
    try:
        job.start([0, 1, 2], RANKS)
        job.wait_for(1, "rank 3 round 0")
        os.killpg(job.nodes[1].proc.pid, signal.SIGKILL)
        job.nodes[1].proc.wait()
        job.start([1], RANKS)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    report = json.loads(job.job_json())
    assert report["exit_code"] == 0 and report["round"] >= 1, report
    assert "rank 3 round 1 passed the rendezvous" in _rank_log(job, 1, 3)


def test_a_hang_with_rounds_left_dumps_the_stacks_then_starts_round_1(tmp_path: Path) -> None:
    job = _job(tmp_path, RANKS_HANG=",".join(f"{r}:0" for r in range(6)))
    job.options += ["--hang-timeout", "3"]
    codes = _run(job)
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    report = json.loads(job.job_json())
    (round1,) = report["rounds"]
    assert round1["cause"]["exit_code"] == 124, round1
    assert "no rank of the job wrote a line for 3s" in round1["cause"]["why"], round1
    assert round1["stacks"], round1  # every rank's stacks (or why there are none: no py-spy)
    assert "rank 5 round 1 passed the rendezvous" in _rank_log(job, 2, 5)


# Rank 1 fails in rounds 0 and 1, once rank 0 has said its round's port (a file in SAID): a
# rank 1 that failed at once could end the round before rank 0's interpreter had printed
# anything (a loaded machine), and the round's port would go unrecorded. Rank 0 then waits to be
# stopped by the round; in round 2 both end well.
ONE_NODE = """\
import os, sys, time
r = int(os.environ["RANK"]); k = int(os.environ["MARUN_RESTART_COUNT"])
print(f"rank {r} round {k} port {os.environ['MASTER_PORT']}", flush=True)
said = os.path.join(os.environ["SAID"], f"0.{k}")
if r == 0:
    open(said, "w").close()
if k < 2:
    if r == 1:
        end = time.monotonic() + 30
        while not os.path.exists(said) and time.monotonic() < end:
            time.sleep(0.02)
        sys.exit(5)
    time.sleep(60)
time.sleep(0.5)
"""


def test_a_job_of_one_node_applies_the_same_rule_itself(tmp_path: Path) -> None:
    """No node 0 to ask: the supervisor runs the rounds (and the rule) itself; each round's
    rendezvous port moves; quick failures twice running end it unless quick_failure is 0."""
    import shutil
    import subprocess
    import sys

    from conftest import clean_env, free_port

    (tmp_path / "one.py").write_text(ONE_NODE)
    port = free_port()
    argv = [sys.executable, "-m", "marun", "run", "--mode", "pytorch", "--nproc-per-node", "2",
            "--max-restarts", "3", "--", "one.py", "--init_method", f"tcp://127.0.0.1:{port}",
            "--rank", "0", "--world_size", "1"]  # fmt: skip

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        said = tmp_path / "said"  # a fresh one for each job: rank 0's files of the job before
        shutil.rmtree(said, ignore_errors=True)
        said.mkdir()
        return subprocess.run(
            argv, cwd=tmp_path, env=clean_env({"MARUN_NIC": "lo", "SAID": str(said), **env}),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    patient = run(MARUN_QUICK_FAILURE="0")
    assert patient.returncode == 0, patient.stdout + patient.stderr
    assert "marun: round 2/3 after node 0 rank 1 exit 5 (all 2 ranks running again in" in (
        patient.stderr
    )
    log = (tmp_path / "marun_logs" / "rank_0.log").read_text()
    assert f"rank 0 round 0 port {port}" in log, log
    ports = {line.split("port ")[1] for line in log.splitlines() if "port " in line}
    assert len(ports) == 3, log  # a port of its own for each round
    result = json.loads((tmp_path / "marun_logs" / "result.json").read_text())
    assert result["round"] == 2 and result["rounds"][0]["cause"]["rank"] == 1
    quick = run()
    assert quick.returncode == 5, quick.stdout + quick.stderr
    assert "quick_failure" in quick.stderr and "round 2/3" not in quick.stderr


def test_a_lost_node_never_replaced_ends_the_round_after_arrival_timeout(tmp_path: Path) -> None:
    """Node 2's marun SIGKILLed and no new one: the round waits arrival_timeout for it, then the
    job ends on every other node with the lost node's failure and why no round followed."""
    job = _job(tmp_path, RANKS_HANG="0:0", MARUN_ARRIVAL_TIMEOUT="5")
    try:
        job.start([0, 1, 2], RANKS)
        job.wait_for(2, "rank 5 round 0")
        os.killpg(job.nodes[2].proc.pid, signal.SIGKILL)
        job.nodes[2].proc.wait()
        del job.nodes[2]
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 1, 1: 1}, job.report()
    report = json.loads(job.job_json())
    assert report["first_failure"]["node"] == 2, report
    assert "not back within arrival_timeout 5s" in report["first_failure"]["no_restart"], report
    for node in job.nodes.values():
        assert "node 2" in node.output and "lost" in node.output, job.report()
