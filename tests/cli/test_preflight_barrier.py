"""The preflight at the start barrier (part 22; docs/preflight.md), with real `marun run` nodes
on loopback (tests/cli/loopback_job.py): 3 nodes x 2 ranks. Each node's marun runs its checks
and probes the next node's listener while it waits; node 0 decides before any rank starts.

A GPU cannot exist here: the platform's MA_NUM_GPUS=2 is answered by a stand-in `nvidia-smi`
on each node's PATH that lists as many GPUs as the test says (the device check asks it when no
/dev/nvidia<N> shows). Everything else is real: the checks, the probe listeners, the ring, the
decision, the stop before the start, job.json."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from loopback_job import LoopbackJob

RANKS = """\
import os, time
print(f"rank {os.environ['RANK']} up", flush=True)
time.sleep(float(os.environ.get("RUN_FOR", "0.5")))
"""


def _gpus(tmp_path: Path, node: int, count: int) -> dict[str, str]:
    """A PATH whose `nvidia-smi -L` lists `count` stand-in GPUs (for one node)."""
    bin_dir = tmp_path / f"gpus{node}"
    bin_dir.mkdir()
    lines = "".join(f"echo 'GPU {i}: Stand-in GPU (UUID: GPU-{node}-{i})'\n" for i in range(count))
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + lines)
    tool.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _job(tmp_path: Path) -> LoopbackJob:
    return LoopbackJob(tmp_path, nodes=3, env={"MARUN_PREFLIGHT": "on"})


def _start(job: LoopbackJob, tmp_path: Path, gpus: dict[int, int], **env: str) -> None:
    for node in range(3):
        job.start([node], RANKS, {**_gpus(tmp_path, node, gpus.get(node, 2)), **env})


def test_every_node_checks_itself_and_its_link_before_the_job_starts(tmp_path: Path) -> None:
    job = _job(tmp_path)
    try:
        _start(job, tmp_path, {})
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    report = json.loads(job.job_json())
    preflight = report["preflight"]
    assert preflight["decision"] in ("start", "start_warned"), preflight
    assert [n["index"] for n in preflight["nodes"]] == [0, 1, 2], preflight
    devices = [c for n in preflight["nodes"] for c in n["checks"] if c["name"] == "devices"]
    assert [c["status"] for c in devices] == ["ok"] * 3, devices
    links = {(link["src"], link["dst"]) for link in preflight["links"]}
    assert links == {(0, 1), (1, 2), (2, 0)}, preflight["links"]
    assert all(link.get("error") is None for link in preflight["links"]), preflight["links"]


def test_a_node_missing_a_device_refuses_the_start_and_no_rank_starts_anywhere(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    try:
        _start(job, tmp_path, {1: 1})  # node 1 shows one GPU of the plan's two
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 1, 1: 1, 2: 1}, job.report()
    for node in range(3):
        out = job.nodes[node].output
        assert "preflight refused the start: node 1" in out and "devices" in out, job.report()
        assert not re.search(r"rank \d up", out), job.report()  # no rank started, anywhere
    report = json.loads(job.job_json())
    assert report["preflight"]["decision"] == "refuse", report["preflight"]
    assert "preflight refused the start" in report["first_failure"]["why"], report


def test_a_stop_signal_while_the_barrier_waits_ends_every_node_with_it(tmp_path: Path) -> None:
    """Nodes 0 and 1 wait at the barrier (node 2 not started); SIGTERM to node 1's marun ends
    both with 143 at once, nothing started, and the node that comes late hears the stop."""
    job = _job(tmp_path)
    try:
        for node in (0, 1):
            job.start([node], RANKS, _gpus(tmp_path, node, 2))
        events = job.work(1) / "marun_logs" / "marun-events.log"
        deadline = time.monotonic() + 60
        while "preflight_checked" not in (events.read_text() if events.exists() else ""):
            assert time.monotonic() < deadline, job.report()
            time.sleep(0.05)
        job.signal(1, signal.SIGTERM)
        job.start([2], RANKS, _gpus(tmp_path, 2, 2))
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 143, 1: 143, 2: 143}, job.report()
    assert not any(re.search(r"rank \d up", job.nodes[n].output) for n in range(3)), job.report()


def test_with_a_spare_a_refused_node_s_place_goes_to_it_and_the_job_starts(
    tmp_path: Path,
) -> None:
    """3 places + 1 spare (hot spares, part 23): node 2 shows one GPU of two; the spare (node 3)
    passed, so it takes place 2 before round 0; node 2 ends with the preflight's line."""
    job = LoopbackJob(
        tmp_path, nodes=4,
        env={"MARUN_PREFLIGHT": "on", "MARUN_SPARES": "1", "MARUN_MAX_RESTARTS": "1"},
    )  # fmt: skip
    try:
        for node in range(4):
            job.start([node], RANKS, _gpus(tmp_path, node, 1 if node == 2 else 2))
        codes = job.finish()
    finally:
        job.kill_all()
    assert (codes[0], codes[1], codes[3]) == (0, 0, 0) and codes[2] != 0, job.report()
    refused = job.nodes[2].output
    assert "node 2 (" in refused and "refused by the preflight (node 2 (" in refused, refused
    assert not re.search(r"rank \d up", refused)
    assert "rank 4 up" in job.nodes[3].output and "rank 5 up" in job.nodes[3].output
    for node in (0, 1, 3):
        assert re.search(
            r"node 2 \(\S+\) refused by the preflight; spare node 3 \(\S+\) takes its place",
            job.nodes[node].output,
        ), job.report()
    replaced = json.loads(job.job_json())["preflight"]["replaced"]
    assert [(r["place"], r["refused"], r["spare"]) for r in replaced] == [(2, 2, 3)]
