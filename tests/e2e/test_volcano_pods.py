"""examples/volcano/*.yaml without a cluster: each Job turned into the Pods Volcano would create
(tests/e2e/volcano_pods.py), those checked with `kubernetes-validate --strict`, what the env, svc
and ssh plugins inject checked, and each pod's ENTRYPOINT (from docker/<engine>/Dockerfile) asked
for its plan (`marun plan`) with that pod's variables and arguments: every example is a job
marun accepts, the Ascend one included (which needs NPUs to run). Nothing is started."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from volcano_pods import Pod, kubernetes_validate, load_job, validate, volcano_pods

from conftest import DATA, REPO, run_marun

# ssh-keygen and kubernetes-validate (a dev extra): under MARUN_REQUIRE_E2E=1 a skip fails.
pytestmark = pytest.mark.e2e

VOLCANO = REPO / "examples" / "volcano"
EXAMPLES = sorted(VOLCANO.glob("*.yaml"))
CODE = "/home/ma-user/code/"  # where the examples mount the scripts
SUBNET = ipaddress.IPv4Network("10.200.0.0/24")  # only written into manifests: nothing listens


def _entrypoint(image: str) -> list[str]:
    """The ENTRYPOINT of the Dockerfile the image is built from (registry/marun-<engine>)."""
    engine = image.rsplit("/", 1)[-1].split(":", 1)[0].removeprefix("marun-")
    text = (REPO / "docker" / engine / "Dockerfile").read_text()
    match = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    assert match, f"docker/{engine}/Dockerfile has no exec-form ENTRYPOINT"
    return list(json.loads(match.group(1)))


def _local_script(name: str) -> Path:
    path = REPO / "examples" / name
    return path if path.is_file() else REPO / "examples" / "hello.py"


def _pods(path: Path, workdir: Path) -> list[Pod]:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (the ssh plugin's key pair)")
    return volcano_pods(load_job(path), workdir, SUBNET)


def _env(pod: Pod) -> dict[str, str]:
    (container,) = pod.manifest["spec"]["containers"]
    return {v["name"]: str(v["value"]) for v in container["env"]}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_pods_validate_strictly(path: Path, tmp_path: Path) -> None:
    if kubernetes_validate() is None:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[dev]')")
    validate(_pods(path, tmp_path), tmp_path)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_pods_carry_what_the_plugins_inject(path: Path, tmp_path: Path) -> None:
    job: dict[str, Any] = load_job(path)
    name = job["metadata"]["name"]
    pods = _pods(path, tmp_path)
    tasks = {t["name"]: int(t["replicas"]) for t in job["spec"]["tasks"]}
    assert len(pods) == sum(tasks.values())
    for pod in pods:
        spec = pod.manifest["spec"]
        assert (spec["hostname"], spec["subdomain"]) == (pod.name, name)
        assert pod.name == f"{name}-{pod.task}-{pod.index}"
        env = _env(pod)
        assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == str(pod.index)
        for task, count in tasks.items():
            hosts = [f"{name}-{task}-{i}.{name}" for i in range(count)]
            key = task.replace("-", "_")
            assert env[f"VC_{key.upper()}_HOSTS"] == ",".join(hosts)
            assert env[f"VC_{key.upper()}_NUM"] == str(count)
            assert (tmp_path / "etc-volcano" / f"{key}.host").read_text().split() == hosts
        # From the pod's labels, through the downward API: the Job's and the task's names.
        assert (env["MA_VJ_NAME"], env["MA_TASK_NAME"]) == (name, pod.task)
        assert env["MA_CURRENT_IP"] == pod.ip
        aliases = {h for a in spec["hostAliases"] for h in a["hostnames"]}
        assert {f"{p.name}.{name}" for p in pods} <= aliases
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert {"/etc/volcano", "/home/ma-user/.ssh"} <= mounts
        assert not any("$(" in a for a in spec["containers"][0]["args"]), "unexpanded $(VAR)"
    assert sorted(p.name for p in (tmp_path / "ssh-secret").iterdir()) == [
        "authorized_keys",
        "config",
        "id_rsa",
        "id_rsa.pub",
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_plans(path: Path, tmp_path: Path) -> None:
    """`marun plan` as each pod's ENTRYPOINT would run: exit 0, one node, its processes."""
    pods = _pods(path, tmp_path)
    ssh_dir = tmp_path / "ssh"
    shutil.copytree(tmp_path / "ssh-secret", ssh_dir)
    for key in ssh_dir.iterdir():
        key.chmod(0o600)
    for pod in pods:
        (container,) = pod.manifest["spec"]["containers"]
        entrypoint = _entrypoint(container["image"])
        assert entrypoint[:2] == ["marun", "run"]
        env = _env(pod)
        env.pop("MA_LOG_DIR", None)  # not this machine's
        # The ssh plugin's mount (the pod's ~/.ssh), as this user's own: mode 0600.
        env["MARUN_SSH_DIR"] = str(ssh_dir)
        table = None
        if "RANK_TABLE_FILE" in env:
            # What the Ascend Operator writes for these pods, completed: 2 servers x 8, worker-1
            # listed first (its order is its own, not the pods' indexes).
            table = DATA / "ranktables" / "ascend_operator_2x8.json"
            env["RANK_TABLE_FILE"] = str(table)
        # The code volume (a ConfigMap of examples/) is examples/ here; a script of the user's
        # own (ascend.yaml's train.py) is examples/hello.py.
        args = [
            str(_local_script(a[len(CODE) :])) if a.startswith(CODE) else a
            for a in container["args"]
        ]
        proc = run_marun(
            ["plan", "--format", "json", *entrypoint[2:], *args],
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, f"{pod.name}: {proc.stderr}"
        plan = json.loads(proc.stdout)
        (node,) = plan["nodes"]
        spare = (plan.get("coordination") or {}).get("spares", 0)
        if spare and node["index"] >= plan["coordination"]["nodes"] - spare:
            # a hot spare (docs/supervision.md): nothing until node 0 gives it a place
            assert any("is a spare: it starts nothing" in n for n in plan["notes"]), pod.name
            continue
        assert node["processes"], f"{pod.name}: nothing planned\n{proc.stdout}"
        if table is not None:  # this pod's server: the one whose container_ip is its address
            servers = json.loads(table.read_text())["server_list"]
            assert servers[node["index"]]["container_ip"] == pod.ip, pod.name
