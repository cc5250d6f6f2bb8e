"""TensorFlow end to end: a parameter-server job from the platform's appended arguments on
127.0.0.1, three containers (one ps, two workers, `--tf-chief` making worker 0 the chief), each
a real `marun run --mode tensorflow` under the TensorFlow venv.

How it ends: in a real TF-PS job the ps and non-chief worker containers never exit by
themselves; once the chief is done the platform stops them with SIGTERM to their PID 1 (marun).
The test does the same and expects each to end promptly (before marun's grace period would
have come to SIGKILL) with exit code 0, the server having taken the signal as its normal end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from local_cluster import LocalCluster, free_ports

pytestmark = pytest.mark.e2e

DEADLINE = 240  # seconds for the chief to train; a hang guard only
GRACE = 60  # marun's grace period for the servers: SIGKILL would come only after this
PROMPT = 30  # seconds within which a stopped server's marun must exit (well inside GRACE)


def test_ps_job_trains_on_chief_and_servers_stop_cleanly(tmp_path: Path) -> None:
    ps_port, chief_port, worker_port = free_ports(3)
    appended = [
        "--ps_hosts",
        f"[127.0.0.1:{ps_port}]",
        "--worker_hosts",
        f"[127.0.0.1:{chief_port},127.0.0.1:{worker_port}]",
    ]
    containers = [("ps", 0), ("worker", 0), ("worker", 1)]
    with LocalCluster(tmp_path, "tensorflow") as cluster:
        ps, chief, worker = (
            cluster.start(
                f"{job}{index}",
                [
                    *("run", "--mode", "tensorflow", "--tf-chief", "--"),
                    *("examples/tf_ps.py", "--steps", "5"),
                    *("--task_index", str(index), *appended, "--job_name", job),
                ],
                {
                    # The node variables as the platform sets them; the cluster itself comes
                    # from the appended host lists.
                    "MA_NUM_HOSTS": "2",
                    "VC_TASK_INDEX": str(index),
                    "MA_VJ_NAME": "e2e-tf",
                    "MA_TASK_NAME": job,
                    "MARUN_GRACE_PERIOD": str(GRACE),
                },
            )
            for job, index in containers
        )
        # The servers never end by themselves: one that does dooms the chief to wait forever.
        assert chief.wait(DEADLINE, peers=(ps, worker)) == 0, cluster.report()
        assert "chief: 5 steps done, global_step=5" in chief.stdout + chief.logs(), chief.report()

        # One job: once the chief is done, node 0's marun ends the servers' (a stop with code
        # 0, docs/supervision.md), which stop them with SIGTERM as a platform would.
        for server in (ps, worker):
            assert server.wait(PROMPT) == 0, server.report()
            assert "stopped by SIGTERM" in server.stdout + server.logs(), server.report()
        cluster.assert_nothing_left()


MWMS = """\
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print(f"mwms replicas {strategy.num_replicas_in_sync} sum {float(total):g}", flush=True)
"""


def test_multi_worker_mirrored_in_the_platforms_ps_shaped_job(tmp_path: Path) -> None:
    """Part 19, item 6c: MultiWorkerMirroredStrategy in the platform's ps-shaped job (a ps and a
    worker container per node, 2 nodes) with --tf-workers-only: both workers all-reduce in one
    world of 2, the ps containers run no task, and the job ends 0."""
    import subprocess

    from local_cluster import framework_python

    from conftest import REPO, clean_env

    python = framework_python("tensorflow")
    (tmp_path / "mwms.py").write_text(MWMS)
    res = subprocess.run(
        [
            *(str(python), "-m", "marun", "simulate", "--mode", "tensorflow", "--tf-workers-only"),
            *("--nodes", "2", "--no-show-plan", "--", "mwms.py"),
        ],
        env=clean_env({"PYTHONPATH": str(REPO / "src")}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [line for line in res.stdout.splitlines() if "mwms replicas" in line]
    assert sorted(line.split("] ", 1)[1] for line in lines) == ["mwms replicas 2 sum 2"] * 2
    assert "There is no id for task_type" not in res.stdout + res.stderr
