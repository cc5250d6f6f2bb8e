"""Warm restarts with real PyTorch (docs/warm-restarts.md): a DDP job (gloo, CPU, 2 ranks) under
`marun run --max-restarts 2 --preload torch` whose rank 1 crashes at step 5 of round 0 once both
spares have imported torch; round 1's ranks start in the spares (no import), resume from rank
0's checkpoint of step 4, and the job ends 0 with the losses of a run that never crashed.

The crash waits for the spares (marun's `warm_spare_ready` events, tests/scripts/torch_resume.py's
--crash-when file): what is checked is where round 1 ran, never how fast.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from local_cluster import framework_python, free_ports
from test_e2e_restart import resume_math, step_losses

from conftest import REPO, clean_env

pytestmark = pytest.mark.e2e

SCRIPT = REPO / "tests" / "scripts" / "torch_resume.py"
STEPS, CRASH_RANK, CRASH_STEP = 8, 1, 5
DEADLINE = 240  # seconds; a hang guard only


def test_pytorch_resumes_from_its_checkpoint_through_warm_spares(tmp_path: Path) -> None:
    python = framework_python("torch")
    (port,) = free_ports(1)
    go = tmp_path / "crash-now"
    argv = [str(python), "-m", "marun", "run", "--standalone", "--nproc-per-node", "2",
            "--master-port", str(port), "--max-restarts", "2", "--preload", "torch",
            "--grace-period", "5", "--", str(SCRIPT), "--ckpt-dir", str(tmp_path / "ckpt"),
            "--steps", str(STEPS), "--crash-rank", str(CRASH_RANK),
            "--crash-step", str(CRASH_STEP), "--crash-when", str(go)]  # fmt: skip
    events = tmp_path / "marun_logs" / "marun-events.log"
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        marun = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + DEADLINE
        while not (events.exists() and events.read_text().count(" warm_spare_ready ") >= 2):
            assert marun.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "the spares never became ready"
            time.sleep(0.1)
        go.write_text("")
        code = marun.wait(timeout=DEADLINE)
    finally:
        marun.kill()
        marun.wait()
    stderr = (tmp_path / "stderr").read_text()
    assert code == 0, stderr
    assert "starts cold" not in stderr, stderr
    assert re.search(r"marun: round 1/2 after node 0 rank 1 exit 1 \(all 2 ranks", stderr), stderr
    warm = re.findall(r" process_started .* warm=spare", events.read_text())
    assert len(warm) == 2, events.read_text()
    expected = resume_math().reference_losses(2, STEPS)
    for rank in (0, 1):
        text = (tmp_path / "marun_logs" / f"rank_{rank}.log").read_text(errors="replace")
        assert f"rank {rank} resumed from step {CRASH_STEP - 1} " in text, text[-2000:]
        assert re.search(rf"^rank {rank} round 1 MARUN_MAX_RESTARTS=2 TORCHELASTIC_RESTART_COUNT=1",
                         text, re.M), text[-2000:]  # fmt: skip
        losses = step_losses(text, rank)
        assert sorted(losses) == list(range(STEPS)), losses
        for step, seen in losses.items():
            assert len(seen) == 1, (rank, step, seen)
            assert seen[0] == pytest.approx(expected[step], rel=1e-9), (rank, step, seen)
