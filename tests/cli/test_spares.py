"""Hot spares with real `marun run` nodes on the loopback (pytorch mode, light ranks), in
combination with stop signals, lost nodes and restart rounds: 3 places + 1 spare (node 3).
A node's "pod deleted" is its marun and its ranks SIGKILLed at once (their connection closes
without a goodbye). The real PyTorch job: tests/e2e/test_e2e_spares.py."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

from loopback_job import LoopbackJob

from conftest import run_marun

# Round 0's ranks run until the test acts; a round's after it end soon (the job ends 0).
RANKS = """\
import os, time
rank = int(os.environ["RANK"])
round_ = os.environ["MARUN_RESTART_COUNT"]
print(f"rank {rank} up in round {round_}", flush=True)
time.sleep(120 if round_ == "0" else 2)
print(f"rank {rank} done", flush=True)
"""
POD = "SPARES_TEST_POD"


def _job(tmp_path: Path) -> LoopbackJob:
    job = LoopbackJob(tmp_path, nodes=4, env={"MARUN_MAX_RESTARTS": "2", "MARUN_SPARES": "1"})
    for i in range(4):
        job.start([i], RANKS, env={POD: f"pod{i}-{job.runs.get(i, 0)}"})
    for i in range(3):
        job.wait_for(i, rf"rank {2 * i + 1} up in round 0")
    return job


def _pod_pids(job: LoopbackJob, *pods: int) -> list[int]:
    """The processes of node i's pod, for each i in pods: its marun and every process it started
    (they carry the pod's name in their environment)."""
    needles = {f"{POD}=pod{i}-{job.runs[i] - 1}".encode() for i in pods}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needles.intersection((entry / "environ").read_bytes().split(b"\0")):
                pids.append(int(entry.name))
    return pids


def _kill(pids: list[int]) -> None:
    """SIGKILL to each of pids, in one loop (no /proc walk between two of them)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _reap(job: LoopbackJob, *pods: int) -> None:
    """After _kill: any process of the pods forked after their pids were collected, SIGKILLed
    too; then each pod's marun waited for."""
    _kill(_pod_pids(job, *pods))
    for i in pods:
        job.nodes[i].proc.wait(10)


def _delete_pods(job: LoopbackJob, *pods: int) -> None:
    """The pods deleted at once: their maruns and every process they started, SIGKILLed in one
    loop, so that their connections close together (the pids are collected first: a /proc walk
    between two kills could outlast the 1.5 s in which node 0 finds a closed node lost)."""
    _kill(_pod_pids(job, *pods))
    _reap(job, *pods)


def test_a_spare_stopped_while_it_waits_leaves_and_the_job_goes_on(tmp_path: Path) -> None:
    job = _job(tmp_path)
    try:
        job.signal(3, signal.SIGTERM)
        assert job.nodes[3].proc.wait(30) == 143, job.report()
        assert "marun: node 3 ran nothing (no place); it ends with 143" in job.nodes[3].output
        _delete_pods(job, 1)  # no spare left: the round waits for node 1's replacement
        job.start([1], RANKS, env={POD: "pod1-1"})
        codes = job.finish()
        assert (codes[0], codes[1], codes[2]) == (0, 0, 0), job.report()
        assert "spare node" not in job.nodes[0].output
        assert re.search(r"marun: round 1/2 after node 1\b", job.nodes[0].output)
    finally:
        job.kill_all()


def test_a_stop_signal_to_node_0_as_a_node_is_lost_ends_the_job_and_the_spare_with_128_plus_n(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    try:
        # Node 1's pod deleted and node 0 stopped back to back (nothing between the two but the
        # kills: the stop lands within the 1.5 s in which node 1 is found lost, however slow
        # this thread), then the killed processes waited for.
        pids = _pod_pids(job, 1)
        _kill(pids)
        job.signal(0, signal.SIGTERM)
        _reap(job, 1)
        codes = job.finish()
        assert (codes[0], codes[2], codes[3]) == (143, 143, 143), job.report()
        assert "up in round 1" not in job.nodes[3].output  # the spare ran nothing
        assert "marun: node 3 ran nothing (no place); it ends with 143" in job.nodes[3].output
    finally:
        job.kill_all()


def test_a_node_told_to_stop_leaves_its_place_to_the_spare_and_the_job_goes_on(
    tmp_path: Path,
) -> None:
    """The platform deletes node 2's pod (SIGTERM to its marun, the container's first process):
    node 2 stops its ranks and ends with 143; the spare takes place 2 in round 1."""
    job = _job(tmp_path)
    try:
        job.signal(2, signal.SIGTERM)
        assert job.nodes[2].proc.wait(30) == 143, job.report()
        job.wait_for(0, r"spare node 3 \(\S+\) takes its place in round 1")
        codes = job.finish()
        assert (codes[0], codes[1], codes[3]) == (0, 0, 0), job.report()
        assert "node 2 (" in job.nodes[0].output and "stopped by SIGTERM (its pod deleted)" in (
            job.nodes[0].output
        )
        assert "rank 4 up in round 1" in job.nodes[3].output  # place 2's ranks (4, 5)
        for i in (0, 1, 3):  # the line on every training node's console, once
            assert job.nodes[i].output.count("spare node 3 (") == 1, job.nodes[i].output
    finally:
        job.kill_all()


def test_two_nodes_lost_with_one_spare_the_other_place_waits_for_its_replacement(
    tmp_path: Path,
) -> None:
    """Pods 1 and 2 deleted at once. The spare takes the place node 0 finds lost first (the
    lowest when both are found in one look; the two connections close microseconds apart, so
    either may be found first); the other place waits for its node's pod, recreated."""
    job = _job(tmp_path)
    try:
        _delete_pods(job, 1, 2)  # (together: node 1 alone lost would make a round of its own)
        # Node 0's events say at once which place the spare took, and each loss; the consoles'
        # line comes with the round's start, which waits for the other place's node.
        events = job.work(0) / "marun_logs" / "marun-events.log"
        deadline = time.monotonic() + 60
        while True:
            text = events.read_text() if events.is_file() else ""
            placed = re.search(r"spare_placed .*\bplace=(\d)", text)
            lost = set(re.findall(r"node_lost .*\bnode=(\d)", text))
            if placed and lost == {"1", "2"}:
                break
            assert time.monotonic() < deadline, job.report()
            time.sleep(0.05)
        taken = int(placed.group(1))
        assert taken in (1, 2), text
        waits = 3 - taken
        job.start([waits], RANKS, env={POD: f"pod{waits}-1"})  # its pod recreated: its place again
        codes = job.finish()
        assert (codes[0], codes[waits], codes[3]) == (0, 0, 0), job.report()
        # the taken place's ranks ran round 1 on the spare; the other's on the recreated marun
        assert f"rank {2 * taken} up in round 1" in job.nodes[3].output, job.report()
        assert f"rank {2 * waits} up in round 1" in job.nodes[waits].output, job.report()
        assert len(re.findall(r"takes its place", job.nodes[0].output)) == 1, job.report()
    finally:
        job.kill_all()


def test_simulate_keeps_the_last_node_as_a_spare(tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(
        "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
    )
    argv = ["simulate", "--mode", "pytorch", "--nodes", "3", "--devices", "1"]
    argv += ["--max-restarts", "1", "--spares", "1", "--no-show-plan", "--", "hello.py"]
    res = run_marun(argv, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert sorted(re.findall(r"rank (\d) of 2", out)) == ["0", "1"], out
    assert "marun: node 2 ran nothing (no place); it ends with 0" in out
