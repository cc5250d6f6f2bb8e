"""MindSpore on the Ascend engine, as the platform runs it: the start file once per device, each
start with RANK_TABLE_FILE, RANK_ID, RANK_SIZE and ASCEND_DEVICE_ID, all at once. Across every
device's `marun run --mode mindspore`, each worker of the rank table starts exactly once, the
scheduler once, with unique MS_NODE_IDs. The workers are a stand-in script that records the
MS_* environment it was started with (no Ascend NPU exists here, and the count is the point: the
MindSpore cluster itself is run for real in tests/e2e/test_e2e_mindspore.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env, free_port

STAND_IN = """\
import json, os, pathlib
keep = {k: v for k, v in os.environ.items() if k.startswith("MS_") or k in ("RANK_ID", "DEVICE_ID")}
out = pathlib.Path(os.environ["STARTS_DIR"]) / f"{os.getpid()}.json"
out.write_text(json.dumps(keep))
"""


def _rank_table(path: Path, servers: int, devices: int) -> Path:
    """A server_list rank table whose servers are loopback addresses (127.0.0.1, .2, ...)."""
    table = {
        "version": "1.0",
        "server_count": str(servers),
        "server_list": [
            {
                "server_id": f"127.0.0.{s + 1}",
                "host_nic_ip": f"127.0.0.{s + 1}",
                "device": [
                    {
                        "device_id": str(d),
                        "device_ip": f"192.0.2.{s * devices + d + 1}",
                        "rank_id": str(s * devices + d),
                    }
                    for d in range(devices)
                ],
            }
            for s in range(servers)
        ],
        "status": "completed",
    }
    path.write_text(json.dumps(table))
    return path


@pytest.mark.parametrize(("servers", "devices"), [(1, 8), (2, 8)], ids=["1x8", "2x8"])
def test_every_device_start_starts_its_worker_once(
    tmp_path: Path, servers: int, devices: int
) -> None:
    table = _rank_table(tmp_path / "rank_table.json", servers, devices)
    (tmp_path / "train.py").write_text(STAND_IN)
    starts = tmp_path / "starts"
    starts.mkdir()
    size = servers * devices
    port, job_port = free_port(), free_port()
    procs = []
    for rank in range(size):
        env = clean_env(
            {
                "RANK_TABLE_FILE": str(table),
                "RANK_ID": str(rank),
                "RANK_SIZE": str(size),
                "ASCEND_DEVICE_ID": str(rank % devices),
                "MA_NUM_GPUS": str(devices),
                "STARTS_DIR": str(starts),
                "MARUN_JOB_PORT": str(job_port),
                "MARUN_MS_SCHED_PORT": str(port),
            }
        )
        argv = [sys.executable, "-m", "marun", "run", "--mode", "mindspore", "--nic", "lo"]
        procs.append(
            subprocess.Popen(
                [*argv, "--", "train.py"],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=180)
            outputs.append(out)
    finally:
        for proc in procs:
            proc.kill()
    assert [p.returncode for p in procs] == [0] * size, "\n".join(outputs)

    seen = [json.loads(f.read_text()) for f in starts.iterdir()]
    workers = [e for e in seen if e["MS_ROLE"] == "MS_WORKER"]
    schedulers = [e for e in seen if e["MS_ROLE"] == "MS_SCHED"]
    assert len(schedulers) == 1
    assert sorted(int(e["MS_NODE_ID"]) for e in workers) == list(range(size))
    assert sorted(int(e["RANK_ID"]) for e in workers) == list(range(size))
    assert {e["MS_WORKER_NUM"] for e in seen} == {str(size)}
    assert {e["MS_SCHED_HOST"] for e in seen} == {"127.0.0.1"}
    assert {e["MS_SCHED_PORT"] for e in seen} == {str(port)}
    # Each worker runs on its own physical device, the table's.
    assert sorted((int(e["RANK_ID"]), e["DEVICE_ID"]) for e in workers) == [
        (r, str(r % devices)) for r in range(size)
    ]
