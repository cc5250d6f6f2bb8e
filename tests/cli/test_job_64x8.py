"""One connection per node, for real (issue 33): 64 Ascend servers x 8 devices, the start file once
per device as the platform runs it: 512 real `marun run --mode ascend` processes on loopback
(ascend_job.py), each node's 8 reaching node 0 through their node's slot 0 (marun.job.relay).
One job, `--max-restarts 1`: in round 0 rank 77 fails once every rank is up (a restart round,
through the relays, starts all 512 again); in round 1 rank 300 fails once every rank is up
again, and with no round left the job fails fast: every marun exits 5 naming rank 300. The
heartbeats go through liveness hubs, in groups of 8 (MARUN_HUB_GROUP; 64 above 1,024 nodes):
the nodes of groups 1-7 beat node 0 through their group's first node. How long it took is
printed, not asserted (the deadline only catches a hang)."""

from __future__ import annotations

import time
from pathlib import Path

from ascend_job import AscendJob

SERVERS, DEVICES = 64, 8
FIRST, SECOND = 77, 300  # round 0's failing rank (node 9), round 1's (node 37)

# Each rank says it is up (a file per round), waits until every rank of its round is (the
# failing one only), and fails or sleeps: sh, not Python, to keep 512 ranks light.
RANKS = """\
up="$UP_DIR/round$MARUN_RESTART_COUNT"; mkdir -p "$up"; : > "$up/$RANK_ID"
fail=$FIRST; [ "$MARUN_RESTART_COUNT" = 0 ] || fail=$SECOND
if [ "$RANK_ID" = "$fail" ]; then
  i=0
  while [ "$(ls "$up" | wc -l)" -lt "$RANK_SIZE" ] && [ $i -lt 900 ]; do
    sleep 0.2; i=$((i+1))
  done
  [ "$MARUN_RESTART_COUNT" = 0 ] && exit 3
  exit 5
fi
exec sleep 600
"""


def _logged(root: Path, server: int, text: str) -> bool:
    return any(
        text in path.read_text(errors="replace")
        for path in (root / f"server{server}").rglob("*.log")
        if path.is_file()
    )


def test_64_servers_x_8_devices_restart_once_then_fail_fast(tmp_path: Path) -> None:
    up = tmp_path / "up"
    up.mkdir()
    job = AscendJob(
        tmp_path, SERVERS, DEVICES,
        env={"UP_DIR": str(up), "FIRST": str(FIRST), "SECOND": str(SECOND),
             "MARUN_HUB_GROUP": "8"},
        hub_ports=SERVERS // 8,
    )  # fmt: skip
    (tmp_path / "ranks.sh").write_text(RANKS)
    began = time.monotonic()
    try:
        job.start(["sh", str(tmp_path / "ranks.sh")], ("--max-restarts", "1"))
        codes = job.finish()
        took = time.monotonic() - began
        assert codes == dict.fromkeys(range(SERVERS * DEVICES), 5), job.report()
        for rounds in ("round0", "round1"):
            assert len(list((up / rounds).iterdir())) == SERVERS * DEVICES, rounds
        for rank in (0, 1, 7, 8, SECOND, SERVERS * DEVICES - 1):
            out = job.starts[rank].output
            assert f"rank {SECOND}" in out and "exit code 5" in out, job.report([rank])
        report = job.job_json()
        first = report["first_failure"]
        assert isinstance(first, dict) and first["rank"] == SECOND, report
        assert report["exit_code"] == 5
        assert len(report["rounds"]) == 1, report["rounds"]  # type: ignore[arg-type]
        nodes = report["nodes"]
        assert isinstance(nodes, list) and len(nodes) == SERVERS
        assert all(len(n["slots"]) == DEVICES for n in nodes)
        linked = [s for s in range(8, SERVERS) if s % 8 and _logged(tmp_path, s, "job_hub_linked")]
        assert linked, "no node of groups 1-7 linked to its hub"
        print(f"64 x 8 maruns: arrived, restarted once, failed fast in {took:.1f}s in all")
    finally:
        job.kill_all()
