"""The images' figures: size, `scripts/images.sh` with nothing changed, and pod start to first
rank output (`podman kube play` of examples/volcano/pytorch.yaml's pods, with a rank that only
prints, so the figure is the container's and marun's start, not torch's import).

    python bench/images.py [--runs N]

Needs root and what scripts/images.sh needs (it builds the images first when they are missing
or out of date). The pods run on an `--internal` podman network of their own, as in
tests/e2e/test_cluster_images.py, whose helper (tests/e2e/volcano_pods.py) makes them.

Baseline (same run): the same pod with the image's ENTRYPOINT replaced by `python3 SCRIPT`, i.e.
a container running the rank without marun. Not in bench/run_all.py: it needs root and podman,
and a first build takes minutes. Cold builds are timed by hand (`MARUN_IMAGES_FRESH=1`, see
docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from _common import REPO, Row, load_note, print_rows
from volcano_pods import IMAGES_SH, PodCluster, free_subnet, load_job, podman, volcano_pods

RANK = """\
import os
print("rank", os.environ.get("RANK", "-"), "first line", flush=True)
"""


def _images_sh() -> float:
    started = time.monotonic()
    subprocess.run(["bash", str(IMAGES_SH)], check=True, capture_output=True, text=True)
    return time.monotonic() - started


def _first_line(pods: int, bare: bool) -> float:
    """Seconds from node 0's `podman kube play` (started last) to its rank's first line."""
    job = load_job(REPO / "examples" / "volcano" / "pytorch.yaml")
    task = job["spec"]["tasks"][0]
    task["replicas"] = pods
    container = task["template"]["spec"]["containers"][0]
    for var in container["env"]:
        if var["name"] in ("MA_NUM_HOSTS", "MA_NUM_GPUS"):
            var["value"] = str(pods) if var["name"] == "MA_NUM_HOSTS" else "1"
    container["args"] = [
        f"--world_size={pods}" if a.startswith("--world_size") else a for a in container["args"]
    ]
    if pods == 1:  # one node: the platform appends --init_method only
        container["args"] = [a for a in container["args"] if not a.startswith(("--rank", "--w"))]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        (work / "code").mkdir(mode=0o755)
        (work / "code" / "rank.py").write_text(RANK)
        logs = work / "logs"
        logs.mkdir()
        os.chown(logs, 1000, 100)
        subnet = free_subnet()
        made = volcano_pods(
            job,
            work,
            subnet,
            image="localhost/marun-pytorch:latest",
            host_paths={"code": work / "code", "logs": logs / "{pod}"},
            script="/home/ma-user/code/rank.py",
        )
        if bare:
            for pod in made:
                spec = pod.manifest["spec"]["containers"][0]
                spec["command"] = ["python3", "/home/ma-user/code/rank.py"]
                spec["args"] = []
                spec["env"] = [v for v in spec["env"] if v["name"] != "MA_LOG_DIR"]
        for pod in made:
            (logs / pod.name).mkdir()
            os.chown(logs / pod.name, 1000, 100)
        with PodCluster(made, work, subnet) as cluster:
            cluster.start()
            started = cluster.started_at[made[0].name]
            seen = cluster.wait_for(made[0].name, r"first line", timeout=120)
            return seen - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/images.py: needs root (rootful podman)", file=sys.stderr)
        return 2
    _images_sh()  # build or refresh first: the figure below is the run with nothing changed
    warm = statistics.median(_images_sh() for _ in range(args.runs))
    rows = [Row("images", "scripts/images.sh, nothing changed", f"{warm:.1f} s", "-", "-", "-")]
    for line in podman("images", "--format", "{{.Repository}} {{.Size}}").stdout.splitlines():
        name, size = line.split(" ", 1)
        if re.fullmatch(r"localhost/(marun-\w+|bookworm-min)", name):
            rows.append(Row("images", f"size of {name}", size, "-", "-", "-"))
    for pods in (1, 2):
        marun, bare = [], []
        for _ in range(args.runs):  # interleaved: load moves both alike
            marun.append(_first_line(pods, bare=False))
            bare.append(_first_line(pods, bare=True))
        m, b = statistics.median(marun), statistics.median(bare)
        rows.append(
            Row(
                "images",
                f"pod start -> first rank line, {pods} pod(s) x 1 rank (node 0's pod)",
                f"{m:.2f} s",
                f"{b:.2f} s (python3 as the command)",
                f"+{m - b:.2f} s",
                "-",
            )
        )
    print(f"marun images: {load_note()}")
    print_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
