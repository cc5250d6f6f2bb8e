"""Liveness hubs in combination (issue 33; marun.job.hub_link): 12 Ascend servers x 2 devices,
24 real `marun run` processes, groups of 4 (MARUN_HUB_GROUP; 64 above 1,024 nodes by default):
servers 5-7 beat node 0 through server 4, servers 9-11 through server 8.
- A hub's pod deleted (its maruns and ranks SIGKILLed) and recreated with the same index: node
  0 finds that server lost and starts round 1 with it back; its group's servers are not lost and
  beat through the new hub again; then the platform deletes the job (SIGTERM to every marun at
  once): every marun exits 143 and nothing of the job is left running.
- A hub's pod frozen (SIGSTOP) until node 0 finds its server lost: the job fails fast naming
  that server alone; its group's servers left the hub and beat node 0 directly meanwhile.
How long each took is printed, not asserted (the deadline only catches a hang)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ascend_job import AscendJob, left_running

from marun.exit_codes import LOST_EXIT

SERVERS, DEVICES, GROUP = 12, 2, 4
HUB, CHILDREN = 4, (5, 6, 7)
RANKS = (
    'up="$UP_DIR/round${MARUN_RESTART_COUNT:-0}"; mkdir -p "$up"; : > "$up/$RANK_ID"; '
    "exec sleep 600"
)


def _logged(root: Path, server: int, text: str) -> int:
    """How often `text` is in server `server`'s maruns' logs (its relay's lines among them)."""
    return sum(
        path.read_text(errors="replace").count(text)
        for path in (root / f"server{server}").rglob("*.log")
        if path.is_file()
    )


def _wait(what: object, why: str, job: AscendJob, guard: float = 120.0) -> None:
    end = time.monotonic() + guard
    while not what():  # type: ignore[operator]
        assert time.monotonic() < end, f"{why}\n{job.report()}"
        time.sleep(0.2)


def _job(tmp_path: Path, up: Path, peer_timeout: str) -> AscendJob:
    env = {"UP_DIR": str(up), "MARUN_HUB_GROUP": str(GROUP), "MARUN_PEER_TIMEOUT": peer_timeout}
    return AscendJob(tmp_path, SERVERS, DEVICES, env=env, hub_ports=SERVERS // GROUP)


def test_a_hubs_pod_recreated_then_the_jobs_deletion(tmp_path: Path) -> None:
    up = tmp_path / "up"
    up.mkdir()
    job = _job(tmp_path, up, "60")
    options = ("--max-restarts", "1")
    try:
        job.start(["sh", "-c", RANKS], options)
        job.wait_up(up / "round0")
        _wait(lambda: all(_logged(tmp_path, s, "job_hub_linked") for s in (*CHILDREN, 9, 10, 11)),
              "every group's server links to its hub", job)  # fmt: skip
        began = time.monotonic()
        pod = range(HUB * DEVICES, (HUB + 1) * DEVICES)
        for rank in pod:  # the hub's pod deleted: its maruns and their ranks, at once
            os.killpg(job.starts[rank].proc.pid, signal.SIGKILL)
        for rank in pod:
            job.starts[rank].proc.wait()
        job.start_server(HUB, ["sh", "-c", RANKS], options)
        job.wait_up(up / "round1")
        job.wait_for_line(
            0, f"round 1/1 after node {HUB} ", f"round 1/1 after node {HUB}'s marun was replaced"
        )
        took = time.monotonic() - began
        # the group's servers came back to the new hub (a link each again)
        _wait(lambda: all(_logged(tmp_path, s, "job_hub_linked") >= 2 for s in CHILDREN),
              "the group's servers link to the recreated hub", job)  # fmt: skip
        assert all(s.proc.poll() is None for s in job.starts.values()), job.report()

        stopped = time.monotonic()
        for start in job.starts.values():  # the job deleted: every pod's marun, at once
            start.proc.send_signal(signal.SIGTERM)
        codes = job.finish()
        assert codes == dict.fromkeys(range(job.size), 143), job.report()
        assert left_running(tmp_path) == []
        report = job.job_json()
        (round1,) = report["rounds"]  # type: ignore[misc]
        cause = str(round1["cause"])
        assert f"node {HUB}" in cause and not any(f"node {c}" in cause for c in CHILDREN), cause
        print(f"hub's pod recreated: round 1 in {took:.1f}s; "
              f"the job's deletion {time.monotonic() - stopped:.2f}s")  # fmt: skip
    finally:
        job.kill_all()


def test_a_frozen_hub_is_the_only_node_lost(tmp_path: Path) -> None:
    up = tmp_path / "up"
    up.mkdir()
    # A heartbeat a second: a frozen node is lost in 15 s; its group leaves the hub after 5 s
    # and beats node 0 within 8 s of the freeze at most (7 s to spare on a busy machine).
    job = _job(tmp_path, up, "15")
    try:
        job.start(["sh", "-c", RANKS])
        job.wait_up(up / "round0")
        _wait(lambda: all(_logged(tmp_path, s, "job_hub_linked") for s in (9, 10, 11)),
              "the second group's servers link to their hub", job)  # fmt: skip
        frozen = [job.starts[r] for r in range(8 * DEVICES, 9 * DEVICES)]
        began = time.monotonic()
        for start in frozen:  # server 8, the hub of 9-11, frozen: its maruns and ranks
            os.killpg(start.proc.pid, signal.SIGSTOP)
        try:
            others = [r for r in job.starts if r // DEVICES != 8]
            codes = job.finish(others)
        finally:
            for start in frozen:
                os.killpg(start.proc.pid, signal.SIGCONT)
        took = time.monotonic() - began
        assert codes == dict.fromkeys(others, LOST_EXIT), job.report()
        out = job.starts[0].output
        assert "node 8" in out and not any(f"node {n} " in out for n in (9, 10, 11)), out[-3000:]
        report = job.job_json()
        first = report["first_failure"]
        assert isinstance(first, dict) and first.get("node") == 8, first
        assert all(_logged(tmp_path, s, "job_hub_left") for s in (9, 10, 11))
        print(f"hub frozen: the job failed fast naming node 8 alone in {took:.1f}s")
    finally:
        job.kill_all()


def test_node_0_frozen_a_while_and_the_job_goes_on_through_its_hubs(tmp_path: Path) -> None:
    """Node 0's pod frozen (SIGSTOP) for half of `peer_timeout`, well after node 0's last line of
    its own to the nodes behind hubs: they heard node 0 through their hubs until the freeze, so
    node 0 judges its stall by the freeze and goes on, and so does every node; then the job's
    deletion (SIGTERM to every marun) ends every marun with 143."""
    up = tmp_path / "up"
    up.mkdir()
    job = _job(tmp_path, up, "10")
    try:
        job.start(["sh", "-c", RANKS])
        job.wait_up(up / "round0")
        behind = (*CHILDREN, 9, 10, 11)
        _wait(lambda: all(_logged(tmp_path, s, "job_hub_linked") for s in behind),
              "every group's server links to its hub", job)  # fmt: skip
        time.sleep(6.0)  # node 0's own last line to them: now older than peer_timeout - 5 s
        node0 = [job.starts[r] for r in range(DEVICES)]
        for start in node0:
            os.killpg(start.proc.pid, signal.SIGSTOP)
        time.sleep(5.0)
        for start in node0:
            os.killpg(start.proc.pid, signal.SIGCONT)
        time.sleep(4.0)  # node 0 looks at its stall, every node at node 0's silence
        assert all(s.proc.poll() is None for s in job.starts.values()), job.report()
        for start in job.starts.values():
            start.proc.send_signal(signal.SIGTERM)
        codes = job.finish()
        assert codes == dict.fromkeys(range(job.size), 143), job.report()
        assert left_running(tmp_path) == []
    finally:
        job.kill_all()
