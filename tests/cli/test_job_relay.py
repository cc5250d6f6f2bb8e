"""One connection per node with real maruns (issue 33): 2 Ascend servers x 4 devices, the start
file once per device (ascend_job.py), each node's slots reaching node 0 through their slot 0's
marun (marun.job.relay). Two jobs at once, one per case:
- node 1's slot 0 marun is SIGKILLed once every rank runs: its node is lost. The node's other
  slots find their relay gone and stop at once with exit 1, naming it; node 0 finds node 1 lost
  and every other marun exits 1 too. Nothing waits for peer_timeout.
- a stop signal to a slot that is not 0 (node 1's slot 2, SIGTERM) stops the whole job through
  the relays: every marun exits 143.
The restart round through relays and fail-fast at 64 x 8: test_job_64x8.py; a stranger on a
relay's socket: tests/unit/test_job_relay.py."""

from __future__ import annotations

import signal
from pathlib import Path

from ascend_job import AscendJob

SERVERS, DEVICES = 2, 4
RANKS = 'mkdir -p "$UP_DIR"; : > "$UP_DIR/$RANK_ID"; exec sleep 600'


def test_a_lost_slot_0_ends_its_node_and_a_stop_signal_to_another_slot_ends_the_job(
    tmp_path: Path,
) -> None:
    jobs = {}
    for case in ("killed", "signalled"):
        up = tmp_path / case / "up"
        up.mkdir(parents=True)
        jobs[case] = AscendJob(tmp_path / case, SERVERS, DEVICES, env={"UP_DIR": str(up)})
    try:
        for job in jobs.values():
            job.start(["sh", "-c", RANKS])
        for case, job in jobs.items():
            job.wait_up(tmp_path / case / "up")
        killed, signalled = jobs["killed"], jobs["signalled"]
        killed.starts[DEVICES].proc.send_signal(signal.SIGKILL)  # node 1, slot 0
        signalled.starts[DEVICES + 2].proc.send_signal(signal.SIGTERM)  # node 1, slot 2

        others = [r for r in range(SERVERS * DEVICES) if r != DEVICES]
        assert killed.finish(others) == dict.fromkeys(others, 1), killed.report()
        for rank in (DEVICES + 1, DEVICES + 3):  # node 1's other slots: their relay is gone
            out = killed.starts[rank].output
            assert "node 1 lost: its slot 0's marun" in out, killed.report([rank])
        for rank in range(DEVICES):  # node 0's: node 1 lost
            out = killed.starts[rank].output
            assert "node 1 (127.0.0.2) lost" in out, killed.report([rank])

        everyone = list(range(SERVERS * DEVICES))
        assert signalled.finish() == dict.fromkeys(everyone, 143), signalled.report()
        for rank in everyone:
            out = signalled.starts[rank].output
            assert "node 1 (127.0.0.2) stopped by SIGTERM" in out, signalled.report([rank])
    finally:
        for job in jobs.values():
            job.kill_all()
