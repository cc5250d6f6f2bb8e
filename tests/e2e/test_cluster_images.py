"""The shipped images as a real cluster of containers: examples/volcano/*.yaml turned into the Pods
Volcano would create (tests/e2e/volcano_pods.py), validated with `kubernetes-validate --strict`
and run with `podman kube play` on an `--internal` network of their own (no route out), node 0's
pod started last. marun is each container's PID 1, as uid 1000, with only what Volcano's env, svc
and ssh plugins inject.

The images are scripts/images.sh's (its stand-in base is a Debian rootfs without frameworks):
the PyTorch, MindSpore and TensorFlow pods get the framework from scripts/frameworks.sh's venv
for the same Python, mounted read-only at /opt/framework and on PYTHONPATH, standing in for the
framework a real base image holds. The MPI image has OpenMPI and mpi4py of its own.

The Ascend Job is validated in test_volcano_pods.py only (NPUs).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from local_cluster import framework_python
from volcano_pods import (
    IMAGES_DIR,
    IMAGES_SH,
    Pod,
    PodCluster,
    free_subnet,
    job_cluster,
    load_job,
    volcano_pods,
)

from conftest import REPO

pytestmark = pytest.mark.e2e

VOLCANO = REPO / "examples" / "volcano"
EXAMPLES = REPO / "examples"
BUILD_TIMEOUT = 900  # seconds; a hang guard only (a first build takes a few minutes)
JOB_TIMEOUT = 300  # seconds for a job's pods to end; a hang guard only
PEER_TIMEOUT = 3  # seconds: the lost-pod case

# A rank of the fail-fast and lost-pod cases: no framework, just marun's supervision.
RANK = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank}: started on {os.uname().nodename}", flush=True)
rounds = os.environ.get("FAIL_ROUNDS", "any").split(",")
failing = rank == int(os.environ.get("FAIL_RANK", "-1"))
if failing and ("any" in rounds or os.environ.get("MARUN_RESTART_COUNT", "0") in rounds):
    print(f"rank {rank}: giving up with 3", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("RUN_FOR", "600")))
"""


def _why_not() -> str | None:
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (rootful podman; run scripts/images.sh as root)"
    return None


@pytest.fixture(scope="module")
def built() -> None:
    """Every engine's image, built (or found up to date) by scripts/images.sh, as
    test_images.py builds them (the same storage: one build serves both files)."""
    reason = _why_not()
    if reason is not None:
        pytest.skip(reason)
    proc = subprocess.run(
        ["bash", str(IMAGES_SH)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"scripts/images.sh failed:\n{proc.stdout[-4000:]}{proc.stderr}"


def _image_python() -> str:
    """The X.Y of the images' Python (the stand-in base's /opt/python)."""
    found = sorted((IMAGES_DIR / "rootfs" / "opt" / "python" / "lib").glob("python3.*"))
    assert found, f"no Python in {IMAGES_DIR / 'rootfs'}: scripts/images.sh did not finish"
    return found[-1].name.removeprefix("python")


def framework(name: str) -> dict[str, Path]:
    """The mount standing in for a framework image's framework: its venv's site-packages."""
    python = framework_python(name)  # skips when scripts/frameworks.sh has not made it
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); "
            "print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    version, purelib = out[0], out[1]
    if version != _image_python():
        pytest.skip(f"{name} venv is Python {version}, the images' is {_image_python()}")
    return {"/opt/framework": Path(purelib)}


FRAMEWORK_ENV = {"PYTHONPATH": "/opt/framework"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where the pods' manifests, host files, ssh secret and scripts go (ma-user may read it)."""
    tmp_path.chmod(0o755)
    (tmp_path / "code").mkdir(mode=0o755)
    (tmp_path / "code" / "rank.py").write_text(RANK)
    return tmp_path


def _logs_dir(workdir: Path, pod: str) -> Path:
    path = workdir / "logs" / pod
    path.mkdir(parents=True)
    os.chown(path, 1000, 100)
    return path


def pods_of(
    job: Mapping[str, Any],
    workdir: Path,
    engine: str,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, Path] | None = None,
    script: str | None = None,
    code: Path = EXAMPLES,
) -> list[Pod]:
    pods = volcano_pods(
        job,
        workdir,
        free_subnet(),
        image=f"localhost/marun-{engine}:latest",
        host_paths={"code": code, "logs": workdir / "logs" / "{pod}"},
        env=env,
        mounts=mounts,
        script=script,
    )
    for pod in pods:
        _logs_dir(workdir, pod.name)
    return pods


@pytest.fixture
def run_job(built: None, workdir: Path) -> Iterator[Any]:
    """run(pods, first=None): validate and start the pods; the PodCluster (torn down after)."""
    clusters: list[PodCluster] = []
    stack: list[Any] = []

    def run(pods: list[Pod], first: str | None = None) -> PodCluster:
        context = job_cluster(pods, workdir)
        cluster = context.__enter__()
        stack.append(context)
        clusters.append(cluster)
        cluster.start(first)
        return cluster

    try:
        yield run
    finally:
        for context in reversed(stack):
            context.__exit__(None, None, None)


def finish(cluster: PodCluster) -> dict[str, int]:
    """Every pod's exit code, once all have ended."""
    return {pod.name: cluster.wait(pod.name, JOB_TIMEOUT) for pod in cluster.pods}


def scaled(job: Mapping[str, Any], replicas: int, gpus: int) -> dict[str, Any]:
    """The one-task PyTorch job with `replicas` pods of `gpus` ranks each."""
    out = copy.deepcopy(dict(job))
    out["spec"]["minAvailable"] = replicas
    (task,) = out["spec"]["tasks"]
    task["replicas"] = replicas
    (container,) = task["template"]["spec"]["containers"]
    for var in container["env"]:  # the node count is the svc plugin's VC_WORKER_NUM: replicas
        if var["name"] == "MA_NUM_GPUS":
            var["value"] = str(gpus)
    container["args"] = [
        f"--world_size={replicas}" if a.startswith("--world_size=") else a
        for a in container["args"]
    ]
    return out


# -- each engine's job, for real --------------------------------------------------------------


def test_pytorch_ddp_two_pods_of_two_ranks(run_job: Any, workdir: Path) -> None:
    job = load_job(VOLCANO / "pytorch.yaml")
    pods = pods_of(job, workdir, "pytorch", FRAMEWORK_ENV, framework("torch"))
    started = time.monotonic()
    cluster = run_job(pods)
    first_line = cluster.wait_for(pods[0].name, r"rank \d/4 \(local rank \d\) joined", 240)
    print(f"pytorch: node 0's pod started -> its first rank's line: {first_line - started:.1f}s")
    codes = finish(cluster)
    report = cluster.report()
    assert set(codes.values()) == {0}, report
    lines = [
        ln
        for pod in pods
        for ln in cluster.logs(pod.name).splitlines()
        if "all_reduce sum 10 (expected 10)" in ln
    ]
    assert len(lines) == 4, report
    checksums = {ln.rsplit("weights checksum ", 1)[1] for ln in lines}
    assert len(checksums) == 1, f"ranks disagree on the trained weights\n{report}"


def test_mindspore_dynamic_cluster_two_pods_of_two_workers(run_job: Any, workdir: Path) -> None:
    job = load_job(VOLCANO / "mindspore.yaml")
    pods = pods_of(job, workdir, "mindspore", FRAMEWORK_ENV, framework("mindspore"))
    cluster = run_job(pods)
    codes = finish(cluster)
    report = cluster.report()
    assert set(codes.values()) == {0}, report
    out = "\n".join(cluster.logs(pod.name) for pod in pods)
    lines = re.findall(
        r"rank (\d)/4: all_reduce sum 10 \(expected 10\); weights checksum (\S+)", out
    )
    assert sorted(rank for rank, _ in lines) == ["0", "1", "2", "3"], report
    assert len({checksum for _, checksum in lines}) == 1, report


def test_tensorflow_ps_and_two_workers_across_pods(run_job: Any, workdir: Path) -> None:
    job = load_job(VOLCANO / "tensorflow-ps.yaml")
    pods = pods_of(job, workdir, "tensorflow", FRAMEWORK_ENV, framework("tensorflow"))
    cluster = run_job(pods, first="marun-tf-worker-0")  # the chief: the job's node 0
    codes = finish(cluster)
    report = cluster.report()
    # The ps and the other worker never end by themselves: marun ends them with the job.
    assert codes == {"marun-tf-ps-0": 0, "marun-tf-worker-0": 0, "marun-tf-worker-1": 0}, report
    assert "chief: 20 steps done, global_step=20" in cluster.logs("marun-tf-worker-0"), report
    assert "ps 0: stopped by SIGTERM" in cluster.logs("marun-tf-ps-0"), report
    assert "worker 0: stopped by SIGTERM" in cluster.logs("marun-tf-worker-1"), report


def test_mpi_three_pods_allreduce(run_job: Any, workdir: Path) -> None:
    job = load_job(VOLCANO / "mpi.yaml")
    pods = pods_of(job, workdir, "mpi")
    cluster = run_job(pods)
    codes = finish(cluster)
    report = cluster.report()
    assert set(codes.values()) == {0}, report
    lines = [ln for ln in cluster.logs(pods[0].name).splitlines() if "allreduce sum" in ln]
    assert len(lines) == 6, report
    assert all("allreduce sum 21 (expected 21)" in ln for ln in lines), report
    ran_on = {ln.split(" on ", 1)[1].split(":", 1)[0] for ln in lines}
    assert ran_on == {pod.name for pod in pods}, report


# -- one job, not N pods ----------------------------------------------------------------------


def test_a_failing_rank_ends_every_pod_with_its_code(run_job: Any, workdir: Path) -> None:
    job = load_job(VOLCANO / "pytorch.yaml")
    pods = pods_of(
        job, workdir, "pytorch", {"FAIL_RANK": "3"}, script="/home/ma-user/code/rank.py",
        code=workdir / "code",
    )  # fmt: skip
    cluster = run_job(pods)
    codes = finish(cluster)
    report = cluster.report()
    assert set(codes.values()) == {3}, report
    for pod in pods:
        out = cluster.logs(pod.name)
        assert re.search(
            r"first failure: node 1 \(\S*marun-pytorch-worker-1\S*\), process rank3 \(rank 3\), "
            r"exit code 3",
            out,
        ), report


def test_a_rank_that_fails_once_heals_in_place_under_max_restarts(
    run_job: Any, workdir: Path
) -> None:
    """Restart rounds across pods: rank 3 fails in round 0 only; every pod's ranks are stopped
    and started again in round 1, and every pod ends 0 without being recreated."""
    job = load_job(VOLCANO / "pytorch.yaml")
    env = {"FAIL_RANK": "3", "FAIL_ROUNDS": "0", "RUN_FOR": "4", "MARUN_MAX_RESTARTS": "2"}
    pods = pods_of(
        job, workdir, "pytorch", env, script="/home/ma-user/code/rank.py", code=workdir / "code"
    )
    cluster = run_job(pods)
    codes = finish(cluster)
    report = cluster.report()
    assert set(codes.values()) == {0}, report
    assert re.search(
        r"marun: round 1/2 after node 1 rank 3 exit 3 \(all 4 ranks running again in [0-9.]+s\)",
        cluster.logs(pods[0].name),
    ), report


def test_a_killed_pod_is_named_by_the_others(run_job: Any, workdir: Path) -> None:
    job = scaled(load_job(VOLCANO / "pytorch.yaml"), replicas=3, gpus=1)
    pods = pods_of(
        job, workdir, "pytorch", {"MARUN_PEER_TIMEOUT": str(PEER_TIMEOUT)},
        script="/home/ma-user/code/rank.py", code=workdir / "code",
    )  # fmt: skip
    cluster = run_job(pods)
    for rank, pod in enumerate(pods):
        cluster.wait_for(pod.name, rf"rank {rank}: started")
    killed = time.monotonic()
    cluster.kill("marun-pytorch-worker-1")
    codes = {p.name: cluster.wait(p.name, JOB_TIMEOUT) for p in (pods[0], pods[2])}
    took = time.monotonic() - killed
    report = cluster.report()
    assert codes == {"marun-pytorch-worker-0": 1, "marun-pytorch-worker-2": 1}, report
    for pod in (pods[0], pods[2]):
        assert re.search(
            # its connection closed (the kernel's FIN) without a goodbye: lost in 2 s; or, where
            # the pod's network went first, silent for peer_timeout
            rf"node 1 \(\S*marun-pytorch-worker-1\S*\) lost: (its marun's connection closed "
            rf"without a goodbye|no word from its marun for {PEER_TIMEOUT}s)",
            cluster.logs(pod.name),
        ), report
    print(f"killed pod: both others ended {took:.1f}s after it (peer timeout {PEER_TIMEOUT}s)")
